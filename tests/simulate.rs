//! `karpenter simulate` and its harness (`karpenter::sim`) through the in-process emulator:
//! the fake kubelet registers kwok instances as Nodes, the fake kube-scheduler binds pods, the
//! workloads follow their steps, scenario files fail with the field named, and (once the actor
//! families are on main) whole scenario runs.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

#[path = "simulate/chaos.rs"]
mod chaos;
#[path = "simulate/chaos_proofs.rs"]
mod chaos_proofs;
#[path = "simulate/consolidation.rs"]
mod consolidation;
#[path = "simulate/disruption.rs"]
mod disruption;
#[path = "simulate/drift.rs"]
mod drift;
// The strict exposition checker of the process tests, for the simulation's /metrics.
#[path = "process/exposition.rs"]
mod exposition;
#[path = "simulate/extremes.rs"]
mod extremes;
#[path = "simulate/harness.rs"]
mod harness;
#[path = "simulate/interruption.rs"]
mod interruption;
#[path = "simulate/lifecycle.rs"]
mod lifecycle;
#[path = "simulate/metrics.rs"]
mod metrics;
#[path = "simulate/nodeclaim.rs"]
mod nodeclaim;
#[path = "simulate/perf.rs"]
mod perf;
#[path = "simulate/runs.rs"]
mod runs;
#[path = "simulate/scenario_files.rs"]
mod scenario_files;
#[path = "simulate/scheduling.rs"]
mod scheduling;
#[path = "simulate/spec_over_time.rs"]
mod spec_over_time;
#[path = "simulate/support.rs"]
mod support;
#[path = "simulate/termination.rs"]
mod termination;
#[path = "simulate/version.rs"]
mod version;
