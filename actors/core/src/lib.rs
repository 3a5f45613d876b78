//! The functional core of karpenter: data in, data out.
//!
//! - [`apis`]: the CRD types (`NodePool`, `NodeClaim`, `EC2NodeClass`) with Karpenter's JSON
//!   names, defaults, conditions, labels and taints, and their validation with field paths.
//! - [`domain`]: the decisions over snapshots of those types: requirements, instance types and
//!   offerings, the scheduler, limits, drift hashes, user data, interruption messages.
//! - [`errors`]: how an error and its causes are written on one line.
//! - [`draw`]: seeded uniform draws, the dice of every chaos plan (replayable for a seed).
//!
//! This crate is the lowest floor of the workspace. It depends on no actor runtime, no async
//! runtime, no Kubernetes client and no port: the actors (`karpenter-actors`) read the cluster
//! and AWS, call these functions with what they read, and carry out what they return.

pub mod apis;
pub mod domain;
pub mod draw;
pub mod errors;
pub mod yaml;
