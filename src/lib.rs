//! The karpenter daemon: command-line entry points, and the adapters that connect the actors of
//! `karpenter-actors` to Kubernetes and AWS.
//!
//! Data flow of the commands: `main` parses [`cli::Cli`] and calls one function of
//! [`commands`]; each returns an [`commands::ExitCode`]-like status and writes its report to the
//! writer it is given, so tests run commands in-process.

pub mod aws;
pub mod cli;
pub mod cloud;
pub mod commands;
pub mod daemon;
pub mod discovery;
pub mod emulator;
pub mod http;
pub mod kube;
pub mod logging;
pub mod permissions;
#[cfg(feature = "simulate")]
pub mod sim;
