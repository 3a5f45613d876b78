//! The kube adapters (`karpenter::kube`) against the in-process emulator: the ingress keeps its
//! store current through watch errors and API server restarts, the `ClusterApi` adapter makes
//! every write with retries on conflict, and leader election hands over on a paused clock.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

#[path = "kube_adapters/cluster_api.rs"]
mod cluster_api;
#[path = "kube_adapters/events.rs"]
mod events;
#[path = "kube_adapters/ingress.rs"]
mod ingress;
#[path = "kube_adapters/leader.rs"]
mod leader;
