//! What the watchers tell the daemon, reduced to what routing needs, and the one message every
//! per-object actor accepts ([`Reconcile`], from the kit).

/// A change the cluster watchers saw. The daemon's ingress pump (`karpenter::daemon`) turns
/// each watch event into one of these; [`crate::daemon::Daemon::observe`] routes it to the owners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterChange {
    NodeClaim {
        name: String,
        deleted: bool,
    },
    NodePool {
        name: String,
        deleted: bool,
    },
    EC2NodeClass {
        name: String,
        deleted: bool,
    },
    /// A node; `provider_id` finds its NodeClaim.
    Node {
        name: String,
        provider_id: Option<String>,
        deleted: bool,
    },
    /// A pod: `pending` when it is unbound and not terminal (a provisioning trigger);
    /// `node_name` when bound (a pod event on that node).
    Pod {
        namespace: String,
        name: String,
        node_name: Option<String>,
        pending: bool,
        deleted: bool,
    },
    DaemonSet {
        namespace: String,
        name: String,
    },
    PodDisruptionBudget {
        namespace: String,
        name: String,
    },
    /// A watch re-listed this kind: owners re-read everything.
    Relisted(WatchedKind),
}

/// The kinds the daemon watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchedKind {
    NodeClaim,
    NodePool,
    EC2NodeClass,
    Node,
    Pod,
    DaemonSet,
    PodDisruptionBudget,
}

/// The one event every per-object actor (NodeClaimActor, NodePoolActor, NodeClassActor)
/// handles, and why it was sent; defined by the kit, which handles it for every
/// [`crate::runtime::Reconciler`]. The actor re-reads its object from the
/// [`crate::ports::cluster_view::ClusterView`]: messages carry no object copies, so a late
/// message can never act on stale data.
pub use crate::runtime::{Cause, Reconcile};
