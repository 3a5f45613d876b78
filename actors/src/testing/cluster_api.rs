//! [`FakeClusterApi`]: an in-memory [`ClusterApi`] for unit tests of actors. It keeps the
//! objects a test seeds, applies writes to them with the API server's rules that actors can
//! observe (generated names, resourceVersions, finalizers delaying deletion, a change that
//! changes nothing writes nothing), records every call, fails calls on demand, and blocks
//! evictions of chosen pods as a PodDisruptionBudget would.
//!
//! The fake lives in the test's process, beside the daemon's view, so its memory is the daemon's
//! cache footprint too; at thousands of NodeClaims that footprint, not the work, decides the cost
//! of a write. So objects are `Arc`s that [`super::MirroredClusterApi`] hands to the view as they
//! are (one copy of each object, as a daemon holding only its watch cache has), stored with
//! their JSON, made while the object is at hand, so a write serializes only the changed object
//! to compare.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use super::failures::FailureRules;
use crate::ports::cluster::{
    Change, ClusterApi, ClusterError, ClusterEvent, Deletion, Eviction, ObjectKind,
};
use karpenter_core::apis::{
    EC2NodeClass, EC2NodeClassStatus, NodeClaim, NodeClaimStatus, NodePool, NodePoolStatus,
};

/// A call made to the fake, with the identifiers it named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterCall {
    CreateNodeClaim {
        name: String,
    },
    DeleteNodeClaim {
        name: String,
    },
    UpdateNodeClaim {
        name: String,
    },
    UpdateNodeClaimStatus {
        name: String,
    },
    UpdateNodePool {
        name: String,
    },
    UpdateNodePoolStatus {
        name: String,
    },
    UpdateEC2NodeClass {
        name: String,
    },
    UpdateEC2NodeClassStatus {
        name: String,
    },
    UpdateNode {
        name: String,
    },
    DeleteNode {
        name: String,
    },
    EvictPod {
        namespace: String,
        name: String,
    },
    DeletePod {
        namespace: String,
        name: String,
        grace_period_seconds: Option<i64>,
    },
    PublishEvent {
        reason: String,
        regarding: String,
    },
}

/// The operation of a call, without its identifiers (to target failures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    CreateNodeClaim,
    DeleteNodeClaim,
    UpdateNodeClaim,
    UpdateNodeClaimStatus,
    UpdateNodePool,
    UpdateNodePoolStatus,
    UpdateEC2NodeClass,
    UpdateEC2NodeClassStatus,
    UpdateNode,
    DeleteNode,
    EvictPod,
    DeletePod,
    PublishEvent,
}

impl ClusterCall {
    #[must_use]
    pub fn operation(&self) -> Operation {
        match self {
            Self::CreateNodeClaim { .. } => Operation::CreateNodeClaim,
            Self::DeleteNodeClaim { .. } => Operation::DeleteNodeClaim,
            Self::UpdateNodeClaim { .. } => Operation::UpdateNodeClaim,
            Self::UpdateNodeClaimStatus { .. } => Operation::UpdateNodeClaimStatus,
            Self::UpdateNodePool { .. } => Operation::UpdateNodePool,
            Self::UpdateNodePoolStatus { .. } => Operation::UpdateNodePoolStatus,
            Self::UpdateEC2NodeClass { .. } => Operation::UpdateEC2NodeClass,
            Self::UpdateEC2NodeClassStatus { .. } => Operation::UpdateEC2NodeClassStatus,
            Self::UpdateNode { .. } => Operation::UpdateNode,
            Self::DeleteNode { .. } => Operation::DeleteNode,
            Self::EvictPod { .. } => Operation::EvictPod,
            Self::DeletePod { .. } => Operation::DeletePod,
            Self::PublishEvent { .. } => Operation::PublishEvent,
        }
    }
}

/// An object as the fake keeps it: shared with the view the mirror puts it in, with its JSON.
struct Stored<K> {
    object: Arc<K>,
    /// The object's JSON without its `resourceVersion` (`None` if it does not serialize).
    json: Option<Vec<u8>>,
}

impl<K: Resource + serde::Serialize> Stored<K> {
    /// Stores `object`, serialized now, while it is at hand.
    fn new(mut object: K) -> Self {
        let json = json_without_version(&mut object);
        Self {
            object: Arc::new(object),
            json,
        }
    }
}

/// The object's JSON without its `resourceVersion`: the rest of what the API server compares to
/// tell whether a write changes anything (the version is compared on its own).
fn json_without_version<K: Resource + serde::Serialize>(object: &mut K) -> Option<Vec<u8>> {
    let version = object.meta_mut().resource_version.take();
    let json = serde_json::to_vec(&*object).ok();
    object.meta_mut().resource_version = version;
    json
}

/// The objects of one kind by name (pods by namespace and name).
type Objects<K, Key = String> = BTreeMap<Key, Stored<K>>;

#[derive(Default)]
struct State {
    nodeclaims: Objects<NodeClaim>,
    nodepools: Objects<NodePool>,
    ec2nodeclasses: Objects<EC2NodeClass>,
    nodes: Objects<Node>,
    pods: Objects<Pod, (String, String)>,
    events: Vec<ClusterEvent>,
    calls: Vec<ClusterCall>,
    failures: FailureRules<ClusterCall, ClusterError>,
    blocked_evictions: BTreeMap<(String, String), String>,
    resource_version: u64,
    now: Option<Timestamp>,
}

/// An in-memory, recording [`ClusterApi`].
#[derive(Default)]
pub struct FakeClusterApi {
    state: Mutex<State>,
}

impl fmt::Debug for FakeClusterApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("FakeClusterApi")
            .field("calls", &state.calls.len())
            .finish_non_exhaustive()
    }
}

impl State {
    fn stamp<K: Resource>(&mut self, object: &mut K) {
        self.resource_version += 1;
        object.meta_mut().resource_version = Some(self.resource_version.to_string());
    }

    /// Records the call; the injected failure for it, if any.
    fn call(&mut self, call: ClusterCall) -> Result<(), ClusterError> {
        let result = self.failures.check(&call);
        self.calls.push(call);
        result
    }
}

fn not_found(kind: ObjectKind, name: &str) -> ClusterError {
    ClusterError::NotFound {
        kind,
        name: name.to_owned(),
    }
}

/// Applies `change` to the named object; removes it when that took its last finalizer while
/// it is being deleted.
fn update<K, F>(
    state: &mut State,
    select: F,
    kind: ObjectKind,
    name: &str,
    change: &dyn Fn(&mut K),
) -> Result<K, ClusterError>
where
    K: Resource + Clone + serde::Serialize,
    F: Fn(&mut State) -> &mut Objects<K>,
{
    let current = select(state)
        .get_mut(name)
        .ok_or_else(|| not_found(kind, name))?;
    let mut next = K::clone(&current.object);
    change(&mut next);
    // CRD types have no PartialEq; their JSON is what the API server would compare anyway.
    // Serialized bytes, not `serde_json::Value` trees: the same type writes its fields in the
    // same order and its maps are ordered, so equal bytes mean equal objects. The stored
    // object's bytes are kept from the write that stored it, so only the changed one is
    // serialized.
    let after = json_without_version(&mut next);
    if after == current.json
        && next.meta().resource_version == current.object.meta().resource_version
    {
        return Ok(next);
    }
    state.stamp(&mut next);
    let done = next.meta().deletion_timestamp.is_some()
        && next.meta().finalizers.as_ref().is_none_or(Vec::is_empty);
    if done {
        select(state).remove(name);
    } else if let Some(stored) = select(state).get_mut(name) {
        *stored = Stored {
            object: Arc::new(next.clone()),
            json: after,
        };
    }
    Ok(next)
}

fn delete<K, F>(state: &mut State, select: F, name: &str) -> Deletion
where
    K: Resource + Clone + serde::Serialize,
    F: Fn(&mut State) -> &mut Objects<K>,
{
    let now = state.now;
    let Some(current) = select(state)
        .get(name)
        .map(|stored| Arc::clone(&stored.object))
    else {
        return Deletion::NotFound;
    };
    if current.meta().finalizers.as_ref().is_none_or(Vec::is_empty) {
        select(state).remove(name);
        return Deletion::Deleted;
    }
    if current.meta().deletion_timestamp.is_none() {
        let mut marked = K::clone(&current);
        marked.meta_mut().deletion_timestamp = Some(Time(now.unwrap_or(Timestamp::UNIX_EPOCH)));
        state.stamp(&mut marked);
        if let Some(stored) = select(state).get_mut(name) {
            *stored = Stored::new(marked);
        }
    }
    Deletion::Terminating
}

impl FakeClusterApi {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The time stamped as creationTimestamp and deletionTimestamp from now on.
    pub fn set_now(&self, now: Timestamp) {
        self.lock().now = Some(now);
    }

    pub fn seed_nodeclaim(&self, nodeclaim: NodeClaim) {
        let name = nodeclaim.metadata.name.clone().unwrap_or_default();
        self.lock().nodeclaims.insert(name, Stored::new(nodeclaim));
    }

    pub fn seed_nodepool(&self, nodepool: NodePool) {
        let name = nodepool.metadata.name.clone().unwrap_or_default();
        self.lock().nodepools.insert(name, Stored::new(nodepool));
    }

    pub fn seed_ec2nodeclass(&self, nodeclass: EC2NodeClass) {
        let name = nodeclass.metadata.name.clone().unwrap_or_default();
        self.lock()
            .ec2nodeclasses
            .insert(name, Stored::new(nodeclass));
    }

    pub fn seed_node(&self, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        self.lock().nodes.insert(name, Stored::new(node));
    }

    pub fn seed_pod(&self, pod: Pod) {
        let key = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        self.lock().pods.insert(key, Stored::new(pod));
    }

    #[must_use]
    pub fn nodeclaim(&self, name: &str) -> Option<NodeClaim> {
        self.shared_nodeclaim(name).map(|n| NodeClaim::clone(&n))
    }

    #[must_use]
    pub fn nodeclaims(&self) -> Vec<NodeClaim> {
        self.lock()
            .nodeclaims
            .values()
            .map(|stored| NodeClaim::clone(&stored.object))
            .collect()
    }

    #[must_use]
    pub fn nodepool(&self, name: &str) -> Option<NodePool> {
        self.shared_nodepool(name).map(|n| NodePool::clone(&n))
    }

    #[must_use]
    pub fn ec2nodeclass(&self, name: &str) -> Option<EC2NodeClass> {
        self.shared_ec2nodeclass(name)
            .map(|n| EC2NodeClass::clone(&n))
    }

    #[must_use]
    pub fn node(&self, name: &str) -> Option<Node> {
        self.shared_node(name).map(|n| Node::clone(&n))
    }

    #[must_use]
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        self.shared_pod(namespace, name).map(|p| Pod::clone(&p))
    }

    /// The stored NodeClaim itself, not a copy (what the mirror puts in the view).
    #[must_use]
    pub fn shared_nodeclaim(&self, name: &str) -> Option<Arc<NodeClaim>> {
        self.lock()
            .nodeclaims
            .get(name)
            .map(|stored| Arc::clone(&stored.object))
    }

    /// The stored NodePool itself, not a copy.
    #[must_use]
    pub fn shared_nodepool(&self, name: &str) -> Option<Arc<NodePool>> {
        self.lock()
            .nodepools
            .get(name)
            .map(|stored| Arc::clone(&stored.object))
    }

    /// The stored `EC2NodeClass` itself, not a copy.
    #[must_use]
    pub fn shared_ec2nodeclass(&self, name: &str) -> Option<Arc<EC2NodeClass>> {
        self.lock()
            .ec2nodeclasses
            .get(name)
            .map(|stored| Arc::clone(&stored.object))
    }

    /// The stored Node itself, not a copy.
    #[must_use]
    pub fn shared_node(&self, name: &str) -> Option<Arc<Node>> {
        self.lock()
            .nodes
            .get(name)
            .map(|stored| Arc::clone(&stored.object))
    }

    /// The stored pod itself, not a copy.
    #[must_use]
    pub fn shared_pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.lock()
            .pods
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|stored| Arc::clone(&stored.object))
    }

    /// Events published so far.
    #[must_use]
    pub fn events(&self) -> Vec<ClusterEvent> {
        self.lock().events.clone()
    }

    /// Every call so far, failed ones included, oldest first.
    #[must_use]
    pub fn calls(&self) -> Vec<ClusterCall> {
        self.lock().calls.clone()
    }

    /// Calls of one operation.
    #[must_use]
    pub fn calls_of(&self, operation: Operation) -> Vec<ClusterCall> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.operation() == operation)
            .cloned()
            .collect()
    }

    /// Fails the next call of `operation` with `error`.
    pub fn fail_next(&self, operation: Operation, error: ClusterError) {
        self.fail_times(operation, 1, error);
    }

    /// Fails the next `times` calls of `operation` with `error`.
    pub fn fail_times(&self, operation: Operation, times: usize, error: ClusterError) {
        self.lock().failures.add(
            move |call: &ClusterCall| call.operation() == operation,
            error,
            Some(times),
        );
    }

    /// Fails every call `predicate` accepts, until [`Self::clear_failures`].
    pub fn fail_when(
        &self,
        predicate: impl Fn(&ClusterCall) -> bool + Send + Sync + 'static,
        error: ClusterError,
    ) {
        self.lock().failures.add(predicate, error, None);
    }

    pub fn clear_failures(&self) {
        self.lock().failures.clear();
    }

    /// Evictions of this pod are refused as a PodDisruptionBudget would, with `message`.
    pub fn block_eviction(&self, namespace: &str, name: &str, message: &str) {
        self.lock()
            .blocked_evictions
            .insert((namespace.to_owned(), name.to_owned()), message.to_owned());
    }

    pub fn unblock_eviction(&self, namespace: &str, name: &str) {
        self.lock()
            .blocked_evictions
            .remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// Pods whose evictions are blocked.
    #[must_use]
    pub fn blocked_evictions(&self) -> BTreeSet<(String, String)> {
        self.lock().blocked_evictions.keys().cloned().collect()
    }
}

fn status_change<S: Default>(status: &mut Option<S>, change: &dyn Fn(&mut S)) {
    change(status.get_or_insert_with(S::default));
}

#[async_trait]
impl ClusterApi for FakeClusterApi {
    async fn create_nodeclaim(&self, nodeclaim: &NodeClaim) -> Result<NodeClaim, ClusterError> {
        let mut state = self.lock();
        let mut created = nodeclaim.clone();
        let name = match &created.metadata.name {
            Some(name) => name.clone(),
            None => format!(
                "{}{:05}",
                created.metadata.generate_name.clone().unwrap_or_default(),
                state.resource_version + 1
            ),
        };
        state.call(ClusterCall::CreateNodeClaim { name: name.clone() })?;
        if state.nodeclaims.contains_key(&name) {
            return Err(ClusterError::AlreadyExists {
                kind: ObjectKind::NodeClaim,
                name,
            });
        }
        created.metadata.name = Some(name.clone());
        created.metadata.uid = Some(format!("fake-uid-{}", state.resource_version + 1));
        created.metadata.creation_timestamp = state.now.map(Time);
        created.status = None;
        state.stamp(&mut created);
        state.nodeclaims.insert(name, Stored::new(created.clone()));
        Ok(created)
    }

    async fn delete_nodeclaim(&self, name: &str) -> Result<Deletion, ClusterError> {
        let mut state = self.lock();
        state.call(ClusterCall::DeleteNodeClaim {
            name: name.to_owned(),
        })?;
        Ok(delete(&mut state, |s| &mut s.nodeclaims, name))
    }

    async fn update_nodeclaim(
        &self,
        name: &str,
        change: Change<'_, NodeClaim>,
    ) -> Result<NodeClaim, ClusterError> {
        let mut state = self.lock();
        state.call(ClusterCall::UpdateNodeClaim {
            name: name.to_owned(),
        })?;
        update(
            &mut state,
            |s| &mut s.nodeclaims,
            ObjectKind::NodeClaim,
            name,
            change,
        )
    }

    async fn update_nodeclaim_status(
        &self,
        name: &str,
        change: Change<'_, NodeClaimStatus>,
    ) -> Result<NodeClaim, ClusterError> {
        let mut state = self.lock();
        state.call(ClusterCall::UpdateNodeClaimStatus {
            name: name.to_owned(),
        })?;
        let whole = |nodeclaim: &mut NodeClaim| status_change(&mut nodeclaim.status, change);
        update(
            &mut state,
            |s| &mut s.nodeclaims,
            ObjectKind::NodeClaim,
            name,
            &whole,
        )
    }

    async fn update_nodepool(
        &self,
        name: &str,
        change: Change<'_, NodePool>,
    ) -> Result<NodePool, ClusterError> {
        let mut state = self.lock();
        state.call(ClusterCall::UpdateNodePool {
            name: name.to_owned(),
        })?;
        update(
            &mut state,
            |s| &mut s.nodepools,
            ObjectKind::NodePool,
            name,
            change,
        )
    }

    async fn update_nodepool_status(
        &self,
        name: &str,
        change: Change<'_, NodePoolStatus>,
    ) -> Result<NodePool, ClusterError> {
        let mut state = self.lock();
        state.call(ClusterCall::UpdateNodePoolStatus {
            name: name.to_owned(),
        })?;
        let whole = |nodepool: &mut NodePool| status_change(&mut nodepool.status, change);
        update(
            &mut state,
            |s| &mut s.nodepools,
            ObjectKind::NodePool,
            name,
            &whole,
        )
    }

    async fn update_ec2nodeclass(
        &self,
        name: &str,
        change: Change<'_, EC2NodeClass>,
    ) -> Result<EC2NodeClass, ClusterError> {
        let mut state = self.lock();
        state.call(ClusterCall::UpdateEC2NodeClass {
            name: name.to_owned(),
        })?;
        update(
            &mut state,
            |s| &mut s.ec2nodeclasses,
            ObjectKind::EC2NodeClass,
            name,
            change,
        )
    }

    async fn update_ec2nodeclass_status(
        &self,
        name: &str,
        change: Change<'_, EC2NodeClassStatus>,
    ) -> Result<EC2NodeClass, ClusterError> {
        let mut state = self.lock();
        state.call(ClusterCall::UpdateEC2NodeClassStatus {
            name: name.to_owned(),
        })?;
        let whole = |nodeclass: &mut EC2NodeClass| status_change(&mut nodeclass.status, change);
        update(
            &mut state,
            |s| &mut s.ec2nodeclasses,
            ObjectKind::EC2NodeClass,
            name,
            &whole,
        )
    }

    async fn update_node(
        &self,
        name: &str,
        change: Change<'_, Node>,
    ) -> Result<Node, ClusterError> {
        let mut state = self.lock();
        state.call(ClusterCall::UpdateNode {
            name: name.to_owned(),
        })?;
        update(&mut state, |s| &mut s.nodes, ObjectKind::Node, name, change)
    }

    async fn delete_node(&self, name: &str) -> Result<Deletion, ClusterError> {
        let mut state = self.lock();
        state.call(ClusterCall::DeleteNode {
            name: name.to_owned(),
        })?;
        Ok(delete(&mut state, |s| &mut s.nodes, name))
    }

    async fn evict_pod(&self, namespace: &str, name: &str) -> Result<Eviction, ClusterError> {
        let mut state = self.lock();
        state.call(ClusterCall::EvictPod {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })?;
        let key = (namespace.to_owned(), name.to_owned());
        if let Some(message) = state.blocked_evictions.get(&key) {
            return Ok(Eviction::Blocked {
                message: message.clone(),
            });
        }
        Ok(match state.pods.remove(&key) {
            Some(_) => Eviction::Evicted,
            None => Eviction::Gone,
        })
    }

    async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_period_seconds: Option<i64>,
    ) -> Result<Deletion, ClusterError> {
        let mut state = self.lock();
        state.call(ClusterCall::DeletePod {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            grace_period_seconds,
        })?;
        Ok(
            match state.pods.remove(&(namespace.to_owned(), name.to_owned())) {
                Some(_) => Deletion::Deleted,
                None => Deletion::NotFound,
            },
        )
    }

    async fn publish_event(&self, event: &ClusterEvent) -> Result<(), ClusterError> {
        let mut state = self.lock();
        state.call(ClusterCall::PublishEvent {
            reason: event.reason.clone(),
            regarding: event.regarding.name.clone().unwrap_or_default(),
        })?;
        state.events.push(event.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        // The fake never awaits anything, so polling once completes it.
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        let mut future = std::pin::pin!(future);
        match future.as_mut().poll(&mut context) {
            std::task::Poll::Ready(output) => output,
            std::task::Poll::Pending => panic!("the fake awaited"),
        }
    }

    fn node(name: &str, finalizers: &[&str]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                finalizers: Some(finalizers.iter().map(|f| (*f).to_owned()).collect()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    #[test]
    fn a_node_with_a_finalizer_waits_until_the_finalizer_is_removed() {
        let api = FakeClusterApi::new();
        api.seed_node(node("n1", &["karpenter.sh/termination"]));
        assert_eq!(
            block_on(api.delete_node("n1")).unwrap(),
            Deletion::Terminating
        );
        assert!(
            api.node("n1")
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
        );
        let remove = |n: &mut Node| n.metadata.finalizers = None;
        block_on(api.update_node("n1", &remove)).unwrap();
        assert!(api.node("n1").is_none());
    }

    #[test]
    fn an_injected_failure_hits_only_the_next_matching_call() {
        let api = FakeClusterApi::new();
        api.seed_node(node("n1", &[]));
        let error = ClusterError::Server {
            kind: ObjectKind::Node,
            name: "n1".into(),
            code: 500,
            message: "boom".into(),
        };
        api.fail_next(Operation::UpdateNode, error.clone());
        let cordon = block_on(api.cordon_node("n1", true));
        assert_eq!(cordon.unwrap_err(), error);
        assert!(block_on(api.cordon_node("n1", true)).is_ok());
        assert_eq!(
            api.node("n1").unwrap().spec.unwrap().unschedulable,
            Some(true)
        );
        assert_eq!(api.calls_of(Operation::UpdateNode).len(), 2);
    }

    #[test]
    fn a_change_that_changes_nothing_keeps_the_resource_version() {
        let api = FakeClusterApi::new();
        api.seed_node(node("n1", &[]));
        let first = block_on(api.cordon_node("n1", true)).unwrap();
        let second = block_on(api.cordon_node("n1", true)).unwrap();
        assert_eq!(
            first.metadata.resource_version,
            second.metadata.resource_version
        );
    }

    #[test]
    fn blocked_evictions_leave_the_pod_in_place() {
        let api = FakeClusterApi::new();
        api.seed_pod(Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        });
        api.block_eviction("ns", "p", "pdb web needs 2");
        assert!(matches!(
            block_on(api.evict_pod("ns", "p")).unwrap(),
            Eviction::Blocked { .. }
        ));
        api.unblock_eviction("ns", "p");
        assert_eq!(
            block_on(api.evict_pod("ns", "p")).unwrap(),
            Eviction::Evicted
        );
        assert_eq!(block_on(api.evict_pod("ns", "p")).unwrap(), Eviction::Gone);
    }

    #[test]
    fn created_nodeclaims_get_a_name_and_no_status() {
        let api = FakeClusterApi::new();
        let request: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": { "generateName": "default-" },
            "spec": {
                "requirements": [],
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            },
        }))
        .unwrap();
        let created = block_on(api.create_nodeclaim(&request)).unwrap();
        let name = created.metadata.name.unwrap();
        assert!(name.starts_with("default-"));
        assert!(api.nodeclaim(&name).is_some());
    }
}
