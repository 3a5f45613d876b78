//! `ClusterApi`: every Kubernetes write the daemon makes, and nothing else. Reads come from the
//! cluster-state store the kube watchers fill; actors call this port to change the cluster.
//!
//! Updates take a *change*: a function applied to the freshly read object (or its status). The
//! implementation reads, applies the change, writes with the object's resourceVersion as a
//! precondition and, on a 409 conflict, reads again and re-applies, a few times (Karpenter's
//! `RetryOnConflict`). A change that leaves the object as it was writes nothing. So a change
//! must be a function of the object it gets ("add this finalizer", "set this condition"), never
//! of a copy the caller read earlier.
//!
//! The `*_from` variants take the caller's copy (from the watch) as the first attempt's
//! object, saving the read, as Karpenter patches the objects of its informer cache: a change
//! that leaves the copy as it is writes nothing, and a stale copy fails its resourceVersion
//! precondition once and falls back to reading. Their default is the plain update.
//!
//! The production adapter is `karpenter::kube::cluster_api::KubeClusterApi`; tests use
//! `crate::testing::FakeClusterApi`, which keeps objects in memory, records every call and fails
//! on demand (`crate::testing::MirroredClusterApi` also copies its writes into a
//! `MemoryClusterView`). Types here are k8s-openapi's and our CRDs', never the kube client's.

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Taint};

use karpenter_core::apis::{
    EC2NodeClass, EC2NodeClassStatus, MetaFields, NodeClaim, NodeClaimStatus, NodePool,
    NodePoolStatus, SlimNode, SlimNodeClaim,
};

/// The name a `*_from` update writes to: the caller's copy's (empty when it has none, which
/// the API server answers as not found).
#[must_use]
pub fn name_of(meta: &impl MetaFields) -> &str {
    meta.name().unwrap_or_default()
}

/// A change applied to the current version of an object; may run more than once.
pub type Change<'a, T> = &'a (dyn Fn(&mut T) + Send + Sync);

/// The kinds this port writes, for errors and call records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    NodeClaim,
    NodePool,
    EC2NodeClass,
    Node,
    Pod,
    Event,
}

impl ObjectKind {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NodeClaim => "NodeClaim",
            Self::NodePool => "NodePool",
            Self::EC2NodeClass => "EC2NodeClass",
            Self::Node => "Node",
            Self::Pod => "Pod",
            Self::Event => "Event",
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// The object is gone.
    Deleted,
    /// The object is marked for deletion and waits for its finalizers.
    Terminating,
    /// There was nothing to delete.
    NotFound,
}

/// What an eviction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eviction {
    /// The pod is being deleted.
    Evicted,
    /// A PodDisruptionBudget forbids it now (HTTP 429); try again later.
    Blocked { message: String },
    /// The pod is already gone or replaced (404 or 409): nothing left to evict.
    Gone,
}

/// Severity of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

/// A Kubernetes event about an object (Karpenter's event reasons and messages).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterEvent {
    /// The object the event is about.
    pub regarding: ObjectReference,
    /// Another object involved, if any.
    pub related: Option<ObjectReference>,
    pub type_: EventType,
    /// `PascalCase` reason, such as `DisruptionBlocked`.
    pub reason: String,
    /// What was done, such as `Disrupting`.
    pub action: String,
    /// Human-readable detail.
    pub note: Option<String>,
}

/// One invalid field reported by the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    pub field: String,
    pub message: String,
}

/// A failed Kubernetes write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error("{kind} {name} not found")]
    NotFound { kind: ObjectKind, name: String },
    #[error("{kind} {name} already exists")]
    AlreadyExists { kind: ObjectKind, name: String },
    #[error("{kind} {name} kept changing: gave up after {attempts} conflicting writes")]
    Conflict {
        kind: ObjectKind,
        name: String,
        attempts: u32,
    },
    #[error("{kind} {name} rejected: {message}")]
    Invalid {
        kind: ObjectKind,
        name: String,
        message: String,
        fields: Vec<FieldProblem>,
    },
    #[error("{kind} {name}: request throttled: {message}")]
    Throttled {
        kind: ObjectKind,
        name: String,
        message: String,
    },
    #[error("{kind} {name}: forbidden: {message}")]
    Forbidden {
        kind: ObjectKind,
        name: String,
        message: String,
    },
    #[error("{kind} {name}: api server error {code}: {message}")]
    Server {
        kind: ObjectKind,
        name: String,
        code: u16,
        message: String,
    },
    #[error("{kind} {name}: {message}")]
    Transport {
        kind: ObjectKind,
        name: String,
        message: String,
    },
}

impl ClusterError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "not_found",
            Self::AlreadyExists { .. } => "already_exists",
            Self::Conflict { .. } => "conflict",
            Self::Invalid { .. } => "invalid",
            Self::Throttled { .. } => "throttled",
            Self::Forbidden { .. } => "forbidden",
            Self::Server { .. } => "server",
            Self::Transport { .. } => "transport",
        }
    }

    /// Whether trying again later may succeed.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Conflict { .. }
                | Self::Throttled { .. }
                | Self::Server { .. }
                | Self::Transport { .. }
        )
    }
}

/// Every Kubernetes write the daemon makes.
#[async_trait]
pub trait ClusterApi: Send + Sync + fmt::Debug {
    /// Creates a NodeClaim (a generated name when it has only `generateName`); returns it as
    /// stored.
    async fn create_nodeclaim(&self, nodeclaim: &NodeClaim) -> Result<NodeClaim, ClusterError>;

    /// Deletes a NodeClaim (its finalizer keeps it until the instance is gone).
    async fn delete_nodeclaim(&self, name: &str) -> Result<Deletion, ClusterError>;

    /// Changes a NodeClaim's metadata or spec (finalizers, annotations, labels).
    async fn update_nodeclaim(
        &self,
        name: &str,
        change: Change<'_, NodeClaim>,
    ) -> Result<NodeClaim, ClusterError>;

    /// Changes a NodeClaim's status (conditions, providerID, capacity...).
    async fn update_nodeclaim_status(
        &self,
        name: &str,
        change: Change<'_, NodeClaimStatus>,
    ) -> Result<NodeClaim, ClusterError>;

    /// [`ClusterApi::update_nodeclaim`] starting from `known` (see the module docs).
    async fn update_nodeclaim_from(
        &self,
        known: &SlimNodeClaim,
        change: Change<'_, NodeClaim>,
    ) -> Result<NodeClaim, ClusterError> {
        self.update_nodeclaim(name_of(&known.metadata), change)
            .await
    }

    /// [`ClusterApi::update_nodeclaim_status`] starting from `known` (see the module docs).
    async fn update_nodeclaim_status_from(
        &self,
        known: &SlimNodeClaim,
        change: Change<'_, NodeClaimStatus>,
    ) -> Result<NodeClaim, ClusterError> {
        self.update_nodeclaim_status(name_of(&known.metadata), change)
            .await
    }

    /// Changes a NodePool's metadata (the `karpenter.sh/nodepool-hash` annotations).
    async fn update_nodepool(
        &self,
        name: &str,
        change: Change<'_, NodePool>,
    ) -> Result<NodePool, ClusterError>;

    /// Changes a NodePool's status (resources, node count, conditions).
    async fn update_nodepool_status(
        &self,
        name: &str,
        change: Change<'_, NodePoolStatus>,
    ) -> Result<NodePool, ClusterError>;

    /// Changes an EC2NodeClass's metadata (finalizer, hash annotations).
    async fn update_ec2nodeclass(
        &self,
        name: &str,
        change: Change<'_, EC2NodeClass>,
    ) -> Result<EC2NodeClass, ClusterError>;

    /// Changes an EC2NodeClass's status (resolved subnets, security groups, AMIs, conditions).
    async fn update_ec2nodeclass_status(
        &self,
        name: &str,
        change: Change<'_, EC2NodeClassStatus>,
    ) -> Result<EC2NodeClass, ClusterError>;

    /// Changes a Node (labels, taints, `spec.unschedulable`, finalizers, annotations).
    async fn update_node(&self, name: &str, change: Change<'_, Node>)
    -> Result<Node, ClusterError>;

    /// [`ClusterApi::update_node`] starting from `known` (see the module docs).
    async fn update_node_from(
        &self,
        known: &SlimNode,
        change: Change<'_, Node>,
    ) -> Result<Node, ClusterError> {
        let name = known.metadata.name.as_deref().unwrap_or_default();
        self.update_node(name, change).await
    }

    /// Deletes a Node object.
    async fn delete_node(&self, name: &str) -> Result<Deletion, ClusterError>;

    /// Evicts a pod through the eviction subresource (honours PodDisruptionBudgets).
    async fn evict_pod(&self, namespace: &str, name: &str) -> Result<Eviction, ClusterError>;

    /// Deletes a pod, with a grace period in seconds when given.
    async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_period_seconds: Option<i64>,
    ) -> Result<Deletion, ClusterError>;

    /// Records an event (repeats within a few minutes become a series of one event).
    async fn publish_event(&self, event: &ClusterEvent) -> Result<(), ClusterError>;

    /// Sets (`Some`) or removes (`None`) node labels.
    async fn label_node(
        &self,
        name: &str,
        labels: &BTreeMap<String, Option<String>>,
    ) -> Result<Node, ClusterError> {
        let change = |node: &mut Node| apply_labels(node, labels);
        self.update_node(name, &change).await
    }

    /// Adds taints (replacing any with the same key and effect) and removes taints by key.
    async fn taint_node(
        &self,
        name: &str,
        add: &[Taint],
        remove_keys: &[String],
    ) -> Result<Node, ClusterError> {
        let change = |node: &mut Node| apply_taints(node, add, remove_keys);
        self.update_node(name, &change).await
    }

    /// Sets `spec.unschedulable` (cordon when true).
    async fn cordon_node(&self, name: &str, unschedulable: bool) -> Result<Node, ClusterError> {
        let change = |node: &mut Node| {
            node.spec.get_or_insert_default().unschedulable = unschedulable.then_some(true);
        };
        self.update_node(name, &change).await
    }
}

/// Sets or removes labels on a node.
pub fn apply_labels(node: &mut Node, labels: &BTreeMap<String, Option<String>>) {
    let current = node.metadata.labels.get_or_insert_default();
    for (key, value) in labels {
        match value {
            Some(value) => {
                current.insert(key.clone(), value.clone());
            }
            None => {
                current.remove(key);
            }
        }
    }
}

/// Adds and removes taints, keeping the others in order.
pub fn apply_taints(node: &mut Node, add: &[Taint], remove_keys: &[String]) {
    let spec = node.spec.get_or_insert_default();
    let taints = spec.taints.get_or_insert_default();
    taints.retain(|t| {
        !remove_keys.contains(&t.key) && !add.iter().any(|a| a.key == t.key && a.effect == t.effect)
    });
    taints.extend(add.iter().cloned());
    if taints.is_empty() {
        spec.taints = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Taint::default()
        }
    }

    #[test]
    fn adding_a_taint_replaces_the_one_with_the_same_key_and_effect() {
        let mut node = Node::default();
        apply_taints(
            &mut node,
            &[taint("a", "NoSchedule"), taint("b", "NoExecute")],
            &[],
        );
        let replacement = Taint {
            value: Some("v".into()),
            ..taint("a", "NoSchedule")
        };
        apply_taints(&mut node, std::slice::from_ref(&replacement), &["b".into()]);
        assert_eq!(node.spec.unwrap().taints.unwrap(), vec![replacement]);
    }

    #[test]
    fn labels_with_none_are_removed() {
        let mut node = Node::default();
        let set = BTreeMap::from([
            ("a".to_owned(), Some("1".to_owned())),
            ("b".to_owned(), Some("2".to_owned())),
        ]);
        apply_labels(&mut node, &set);
        apply_labels(&mut node, &BTreeMap::from([("a".to_owned(), None)]));
        assert_eq!(
            node.metadata.labels.unwrap(),
            BTreeMap::from([("b".to_owned(), "2".to_owned())])
        );
    }
}
