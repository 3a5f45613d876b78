//! The simulation harness of `karpenter simulate`: everything a real cluster has around the API
//! server and Karpenter, played in-process over the [`crate::emulator`], and the scenario runner
//! that drives the real daemon through it.
//!
//! ```text
//! scenario (file -> load) -> Simulation
//!   world     kwok's AWS account (EC2, SQS, EventBridge, IAM, SSM, Pricing) as the daemon's
//!             AWS ports, and the chaos hooks on it
//!   clock     simulated wall time for the emulator, kwok and the actors
//!   workloads Deployments as the ReplicaSet controller runs them -> pods
//!   kubelet   instances -> Nodes (registration, Ready, startup taints), pods Running
//!   binder    the kube-scheduler: pods -> bindings on Ready nodes, or Unschedulable
//!   report    what a run measured -> table or JSON
//! ```

pub mod binder;
pub mod clock;
pub mod kubelet;
pub mod report;
pub mod scenario;
pub mod workloads;
pub mod world;
