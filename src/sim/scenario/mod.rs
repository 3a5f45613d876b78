//! The scenario runner of `karpenter simulate`: the real daemon (every actor family of
//! `karpenter_actors::daemon`, the kube adapters over the in-process emulator, the AWS ports
//! over kwok) with the fake kubelet, the fake kube-scheduler and the workload controllers,
//! driven through a scenario on simulated time, ending with a [`Report`](crate::sim::report::Report).
//!
//! One module per job, in the order a run uses them:
//!
//! ```text
//! file        scenario YAML -> Scenario (the file's own rules, field paths in errors)
//! load        Scenario -> LoadedScenario (manifests through the API server's validator,
//!             kwok's catalogue, workload templates, the chaos plan)
//! run         run(): runtime (paused for Pace::Fast) + actix System -> simulate()
//! simulation  Simulation: emulator <- seeded objects; kwok account; daemon; harness;
//!             advance / run_to_end / restart_daemon / finish (the API tests drive)
//! daemon      simulated_settings; one daemon process: ClusterIngress -> ChangeFeed -> pump
//!             -> Daemon (actors) -> ClusterApi / CloudProvider / AWS (kwok)
//! harness     every simulated second: due events (interruptions, reclaims, node failures,
//!             AWS faults) -> workloads -> kubelet -> scheduler -> billing; progress lines;
//!             the report (pods, time to schedule, nodes, cost against the lower bound,
//!             interruptions, actor totals)
//! serve       --serve: the emulator on loopback with a kubeconfig, the daemon's endpoints
//! error       SimulationError: what stops a simulation from starting
//! ```
//!
//! With [`Pace::Fast`] the run is deterministic for a seed: one thread, simulated time, seeded
//! names (emulator) and ids (kwok), events chosen by the seed, harness steps in a fixed order.
//! [`Pace::RealTime`] (used when serving the emulator to kubectl) runs on the wall clock.

mod daemon;
mod error;
pub mod file;
mod harness;
mod load;
#[cfg(test)]
mod props;
mod run;
mod serve;
mod simulation;

pub use daemon::simulated_settings;
pub use error::SimulationError;
pub use file::{Scenario, ScenarioError};
pub use harness::{HARNESS_TICK, SPOT_RECLAIM_AFTER};
pub use load::LoadedScenario;
pub use run::{Pace, ProgressSink, RunOptions, on_runtime, run, simulate};
pub(crate) use serve::write_kubeconfig;
pub use serve::{ServeOptions, Served};
pub use simulation::Simulation;
