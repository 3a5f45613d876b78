//! The daemon's process side (`karpenter run`, `karpenter::daemon::DaemonAssembly`,
//! `karpenter actors`) over the in-process emulator and kwok's AWS: only the leader starts the
//! actors and a standby takes over when it stops; the probes and /metrics, /debug/actors answer
//! over HTTP; the Kubernetes version check refuses old servers.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

#[path = "daemon/endpoints.rs"]
mod endpoints;
#[path = "daemon/leader.rs"]
mod leader;
#[path = "daemon/support.rs"]
mod support;
#[path = "daemon/version.rs"]
mod version;
