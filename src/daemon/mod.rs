//! The daemon assembled on the binary side: the actors of `karpenter_actors::daemon` started
//! under the kit's root group, fed by the cluster watchers, with their HTTP routes and checks.
//!
//! ```text
//! DaemonInputs (settings, kube client, AWS ports, cloud source, clock, cluster facts)
//!   + DaemonOptions (when the actors start, which run, kit options, endpoints)
//!   -> DaemonAssembly::start (assembly):
//!        ClusterIngress -> ChangeFeed -> pump -> DaemonSlot -> Daemon::observe (changes)
//!        metrics server: /metrics, /debug/actors, DaemonRoutes through bridge (routes)
//!        health server: /healthz, /readyz with the startup probes and exit checks (probes)
//! ```
//!
//! Who builds what: `karpenter run` builds the inputs from the kube adapters over a real API
//! server and the aws-sdk adapters, and starts the actors when it leads the Lease;
//! `karpenter simulate` from the same kube adapters over the in-process emulator and kwok's AWS
//! ports (`crate::sim::world`), starting the actors once the store synced; the tests from
//! either. The assembly is the one place the tree is built; the callers only pick options.

mod assembly;
mod changes;
mod gate;
mod probes;
mod routes;

pub use assembly::{
    ActorStart, DaemonAssembly, DaemonError, DaemonInputs, DaemonOptions, Election, Endpoints,
    Exit, unlaunched_nodeclaims, wait_for_launches,
};
pub use changes::{
    CHANGE_QUEUE_CAPACITY, ChangeFeed, ChangeForwarder, DaemonSlot, ROOT_GROUP, Routed, Seen,
    StartedActors, WATCHED_KINDS, change_of, pump,
};
pub use gate::{GatedCloudProvider, GatedClusterApi, NOT_LEADING_CODE, gated_aws, gated_ec2};
pub use probes::ProbeError;
pub use routes::{
    DaemonAnswer, DaemonRoutes, EXPLAIN_NODE_ROUTE_PREFIX, EXPLAIN_ROUTE_PREFIX, RouteAnswer,
    bridge, daemon_routes, explain_answer, explain_node_answer,
};
