//! What the watchers tell the daemon, reduced to what routing needs, and the one message every
//! per-object actor accepts.

use crate::runtime::Mail;

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
    /// A pod: `pending` when the Provisioner would place it
    /// (`karpenter_core::domain::pods::provisionable`; a provisioning trigger); `node_name` when
    /// bound (a pod event on that node).
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

/// Why an object actor is asked to reconcile; a bounded set, logged and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The object itself changed (or was created).
    Changed,
    /// The object is gone from the cluster.
    Deleted,
    /// A related object changed: the node of a NodeClaim, a NodeClaim of a node class, the class
    /// of a NodePool.
    Related,
    /// A member changed: a NodeClaim of a NodePool (its usage and status.resources). Frequent in
    /// bursts, so the pool folds them (`nodepool::MEMBER_COALESCE`).
    Member,
    /// A watch re-listed.
    Relisted,
    /// A timer the actor set (requeue).
    Requeue,
}

/// "Look at your object again": the one event every per-object actor (NodeClaimActor,
/// NodePoolActor, NodeClassActor) handles. The actor re-reads its object from the
/// [`crate::ports::cluster_view::ClusterView`]; messages carry no object copies, so a late
/// message can never act on stale data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconcile {
    pub cause: Cause,
}

impl Mail for Reconcile {
    type Reply = ();
    const NAME: &'static str = "Reconcile";
}
