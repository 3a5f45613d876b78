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
    /// A pod: `pending` when the Provisioner would place it
    /// (`karpenter_core::domain::pods::provisionable`; a provisioning trigger); `node_name` when
    /// bound; `pod_event` when the change moved the node's pods
    /// (`karpenter_core::domain::pods::is_pod_event`: bound, finished, terminating, created or
    /// deleted while bound; never a `DaemonSet`'s), which its NodeClaim records as
    /// `status.lastPodEventTime`.
    Pod {
        namespace: String,
        name: String,
        node_name: Option<String>,
        pending: bool,
        pod_event: bool,
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
    /// A `VolumeAttachment`; `node_name` is the node it attaches a volume to (a draining node
    /// waits for its attachments to go before its instance is terminated).
    VolumeAttachment {
        name: String,
        node_name: Option<String>,
        deleted: bool,
    },
    /// A `PersistentVolumeClaim` (read to tell which attachments belong to pods that stay).
    PersistentVolumeClaim {
        namespace: String,
        name: String,
    },
    /// A `Namespace` (its labels answer pod affinity `namespaceSelector`s).
    Namespace {
        name: String,
    },
    /// A watch re-listed this kind: owners re-read everything.
    Relisted(WatchedKind),
}

/// The watched kinds, listed once. Calls `$callback!` with one
/// `(Type, field, WatchedKind variant)` row per kind: the object type (a path through
/// `$crate::messages::watched`), the plural name used for its store, writer, subscribers,
/// counters and `ClusterView` list method (`nodeclaims`, `pods`...), and its [`WatchedKind`].
/// Rows come in the order owners are told about re-lists (classes before pools before
/// NodeClaims before nodes and pods), so [`WatchedKind::ALL`] is that order.
///
/// ```ignore
/// macro_rules! stores {
///     ($(($type:ty, $field:ident, $kind:ident)),* $(,)?) => {
///         struct Stores { $($field: Store<$type>,)* }
///     };
/// }
/// karpenter_actors::for_each_watched_kind!(stores);
/// ```
#[macro_export]
macro_rules! for_each_watched_kind {
    ($callback:ident) => {
        $callback! {
            ($crate::messages::watched::EC2NodeClass, ec2nodeclasses, EC2NodeClass),
            ($crate::messages::watched::NodePool, nodepools, NodePool),
            ($crate::messages::watched::NodeClaim, nodeclaims, NodeClaim),
            ($crate::messages::watched::Node, nodes, Node),
            ($crate::messages::watched::Pod, pods, Pod),
            ($crate::messages::watched::DaemonSet, daemonsets, DaemonSet),
            ($crate::messages::watched::PodDisruptionBudget, pdbs, PodDisruptionBudget),
            ($crate::messages::watched::VolumeAttachment, volumeattachments, VolumeAttachment),
            ($crate::messages::watched::PersistentVolumeClaim, pvcs, PersistentVolumeClaim),
            ($crate::messages::watched::Namespace, namespaces, Namespace),
        }
    };
}

/// The object types of [`for_each_watched_kind!`], under the names its rows use.
pub mod watched {
    pub use k8s_openapi::api::apps::v1::DaemonSet;
    pub use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
    pub use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    pub use k8s_openapi::api::storage::v1::VolumeAttachment;
    /// Nodes too ([`SlimNode`](karpenter_core::apis::SlimNode)).
    pub use karpenter_core::apis::SlimNode as Node;
    /// NodeClaims too ([`SlimNodeClaim`](karpenter_core::apis::SlimNodeClaim)): their label
    /// and annotation maps shared.
    pub use karpenter_core::apis::SlimNodeClaim as NodeClaim;
    /// Pods are watched slim: the fields the daemon reads, decoded straight from the watch.
    pub use karpenter_core::apis::SlimPod as Pod;
    pub use karpenter_core::apis::{EC2NodeClass, NodePool};
}

macro_rules! watched_kind {
    ($(($type:ty, $field:ident, $kind:ident)),* $(,)?) => {
        impl WatchedKind {
            /// Every kind, in the order owners are told about re-lists.
            pub const ALL: [WatchedKind; [$(WatchedKind::$kind),*].len()] =
                [$(WatchedKind::$kind),*];

            /// The plural name of the kind's store (`nodeclaims`, `pdbs`...), for logs. Its
            /// match, generated from the table, has no wildcard: a variant missing from the table
            /// (or a row naming no variant) does not compile.
            #[must_use]
            pub fn plural(self) -> &'static str {
                match self {
                    $(WatchedKind::$kind => stringify!($field),)*
                }
            }
        }

        /// The object type of a [`WatchedKind`].
        pub trait WatchedType {
            const KIND: WatchedKind;
        }

        $(impl WatchedType for $type {
            const KIND: WatchedKind = WatchedKind::$kind;
        })*
    };
}

for_each_watched_kind!(watched_kind);

/// The kinds the daemon watches: the rows of [`for_each_watched_kind!`], whose generated
/// [`WatchedKind::plural`] fails to compile if the two lists ever differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchedKind {
    NodeClaim,
    NodePool,
    EC2NodeClass,
    Node,
    Pod,
    DaemonSet,
    PodDisruptionBudget,
    VolumeAttachment,
    PersistentVolumeClaim,
    Namespace,
}

/// The one event every per-object actor (NodeClaimActor, NodePoolActor, NodeClassActor)
/// handles, and why it was sent; defined by the kit, which handles it for every
/// [`crate::runtime::Reconciler`]. The actor re-reads its object from the
/// [`crate::ports::cluster_view::ClusterView`]: messages carry no object copies, so a late
/// message can never act on stale data.
pub use crate::runtime::{Cause, Reconcile};
