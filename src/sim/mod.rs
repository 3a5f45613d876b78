//! The simulation harness of `karpenter simulate`: everything a real cluster has around the API
//! server and Karpenter, played in-process over the [`crate::emulator`], and the scenario runner
//! that drives the real daemon through it.
//!
//! ```text
//! scenario (file -> load) -> Simulation
//!   world     kwok's AWS account (EC2, SQS, EventBridge, IAM, SSM, Pricing, EKS) as the daemon's
//!             AWS ports, and the chaos hooks on it
//!   clock     simulated wall time for the emulator, kwok and the actors
//!   cluster   what EKS holds before Karpenter (the kube-dns Service), for the cluster-only server
//!   workloads Deployments as the ReplicaSet controller runs them -> pods
//!   kubelet   instances -> Nodes (registration, Ready, startup taints), pods Running
//!   binder    the kube-scheduler: pods -> bindings on Ready nodes, or Unschedulable
//!   writes    the pod writes of the three above, whose replies they do not decode
//!   report    what a run measured -> table or JSON
//!   chaos     a scenario under seeded faults (actors, AWS, API server, restarts) and the
//!             proofs checked after it
//! ```
//!
//! [`cluster_only`] serves the same cluster without the daemon and kwok (`simulate --serve ADDR
//! --cluster-only`): the kubelet over NodeClaims and the scheduler, for a `karpenter run` process
//! against moto.

pub mod binder;
pub mod chaos;
pub mod clock;
pub mod cluster;
pub mod cluster_only;
pub mod kubelet;
pub mod report;
pub mod scenario;
pub mod workloads;
pub mod world;
mod writes;
