//! The fake kube-scheduler: binds pending pods to Ready nodes where they fit, and marks the
//! others `PodScheduled=False` with reason `Unschedulable`, which is what makes a pod
//! provisionable for Karpenter.
//!
//! Each [`FakeScheduler::tick`] reads the cluster store, builds a scheduling snapshot with the
//! pending pods and the Ready, schedulable nodes (with the pods already on them) and no NodePools,
//! and lets the real scheduler core ([`karpenter_core::domain::scheduling::solve`]) decide:
//! resources, taints and tolerations (`NoSchedule`/`NoExecute`; every taint counts, startup and
//! not-ready ones included, as for kube-scheduler), node selectors and affinity, topology spread
//! and pod (anti-)affinity are the scheduler core's. Its placements on existing nodes become
//! bindings (`pods/binding`); its failures become the Unschedulable condition.
//!
//! Bindings just made are remembered ("assumed", as kube-scheduler does) until the store shows
//! them, so a lagging watch cannot make the next tick overcommit a node. A tick when no pod or
//! node changed since the last error-free pass reads nothing ([`ChangeMark`]); one whose inputs
//! did not change (same pending pods, same nodes at the same resourceVersions) skips the solve.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::sim::writes;
use k8s_openapi::api::core::v1::Pod;
use karpenter_actors::messages::WatchedKind;
use karpenter_actors::ports::clock::Clock;
use karpenter_actors::ports::cluster_view::{ChangeMark, ClusterView};
use karpenter_core::apis::{SlimNode, SlimPod};
use karpenter_core::domain::resources::{Resources, pod_requests};
use karpenter_core::domain::scheduling::{
    BoundPod, ExistingNode, NodeLabels, Options, Plan, SchedulingPod, Snapshot, solve,
    taints_from_api,
};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// The scheduler name pods get by default, the only one this binder serves.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";
/// Field manager of the binder's writes.
const FIELD_MANAGER: &str = "default-scheduler";

/// A pod's `namespace/name`, allocated once and shared (not copied) by every table that
/// follows the pod: the pass's targets, the assumed bindings, the tick's bound pods and the
/// report's creation times. At a 50,000-pod scale-up each of those held its own two strings
/// per pod, together more than the pods' own metadata in the daemon's view.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodKey {
    joined: Arc<str>,
    /// Where the name starts in `joined` (after the `/`).
    name_at: usize,
}

impl PodKey {
    #[must_use]
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            joined: format!("{namespace}/{name}").into(),
            name_at: namespace.len() + 1,
        }
    }

    #[must_use]
    pub fn namespace(&self) -> &str {
        &self.joined[..self.name_at - 1]
    }

    #[must_use]
    pub fn name(&self) -> &str {
        &self.joined[self.name_at..]
    }
}

/// By namespace, then name (not by the joined text, where `a-b/x` would sort before `a/x`).
impl Ord for PodKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.namespace(), self.name()).cmp(&(other.namespace(), other.name()))
    }
}

impl PartialOrd for PodKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BinderStep {
    /// Pods bound this tick, in binding order.
    pub bound: Vec<PodKey>,
    /// Pods newly marked Unschedulable.
    pub unschedulable: usize,
    /// Pods the scheduler core could not read, and failed writes.
    pub errors: usize,
    /// The inputs had not changed: nothing was solved.
    pub skipped: bool,
}

/// The fake kube-scheduler (see the module docs).
pub struct FakeScheduler {
    client: Client,
    view: Arc<dyn ClusterView>,
    clock: Arc<dyn Clock>,
    /// Bindings made but not yet seen, with the node (one name shared by its pods).
    assumed: BTreeMap<PodKey, Arc<str>>,
    /// Pods and nodes as of the last pass that completed without errors: nothing to do
    /// until one of them changes.
    mark: ChangeMark<2>,
    last_inputs: Option<u64>,
}

impl std::fmt::Debug for FakeScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeScheduler")
            .field("assumed", &self.assumed.len())
            .finish_non_exhaustive()
    }
}

fn key_of(pod: &SlimPod) -> PodKey {
    let (namespace, name) = key_ref(pod);
    PodKey::new(namespace, name)
}

/// [`key_of`] borrowed from the pod: what a pass over every pod compares and hashes.
fn key_ref(pod: &SlimPod) -> (&str, &str) {
    let meta = &pod.metadata;
    (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name
            .as_deref()
            .or(meta.generate_name.as_deref())
            .unwrap_or_default(),
    )
}

fn node_of(pod: &SlimPod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

fn terminal(pod: &SlimPod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether this scheduler should place the pod: unbound, not terminating or finished, and
/// meant for the default scheduler.
#[must_use]
pub fn is_pending(pod: &SlimPod) -> bool {
    node_of(pod).is_none()
        && pod.metadata.deletion_timestamp.is_none()
        && !terminal(pod)
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .is_none_or(|s| s == DEFAULT_SCHEDULER)
}

/// Whether the pod already carries `PodScheduled=False` with reason `Unschedulable`.
#[must_use]
pub fn is_marked_unschedulable(pod: &SlimPod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

/// Whether a node takes new pods: Ready, not cordoned, not deleting.
#[must_use]
pub fn is_schedulable(node: &SlimNode) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    ready && !cordoned && node.metadata.deletion_timestamp.is_none()
}

/// A node as the scheduler core takes it, with the pods on it (and those assumed there).
pub(crate) fn existing_node(node: &Arc<SlimNode>, pods: &[Arc<SlimPod>]) -> ExistingNode {
    let status = node.status.clone().unwrap_or_default();
    let allocatable =
        Resources::from_list(&status.allocatable.unwrap_or_default()).unwrap_or_default();
    let capacity = Resources::from_list(&status.capacity.unwrap_or_default()).unwrap_or_default();
    let mut requested = Resources::default();
    for pod in pods.iter().filter(|p| !terminal(p)) {
        if let Some(spec) = &pod.spec
            && let Ok(requests) = pod_requests(spec)
        {
            requested.add(&requests);
        }
    }
    // kube-scheduler's taint filter looks at NoSchedule and NoExecute only.
    let taints: Vec<_> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| {
            taints_from_api(t)
                .into_iter()
                .filter(|t| t.effect.as_str() != "PreferNoSchedule")
                .collect()
        })
        .unwrap_or_default();
    ExistingNode {
        name: node.name_any(),
        labels: NodeLabels::node(Arc::clone(node)),
        taints,
        allocatable,
        requested,
        capacity,
        pods: pods
            .iter()
            .map(|p| Arc::new(BoundPod::from_pod(p)))
            .collect(),
        initialized: true,
        registered: true,
        ..ExistingNode::default()
    }
}

impl FakeScheduler {
    #[must_use]
    pub fn new(client: Client, view: Arc<dyn ClusterView>, clock: Arc<dyn Clock>) -> Self {
        Self {
            client,
            view,
            clock,
            assumed: BTreeMap::new(),
            mark: ChangeMark::new([WatchedKind::Pod, WatchedKind::Node]),
            last_inputs: None,
        }
    }

    /// Bindings made but not yet seen in the store.
    #[must_use]
    pub fn assumed(&self) -> usize {
        self.assumed.len()
    }

    /// One scheduling pass (see the module docs).
    pub async fn tick(&mut self) -> BinderStep {
        let mut step = BinderStep::default();
        let counts = self.mark.read(self.view.as_ref());
        if self.mark.unchanged(counts) {
            step.skipped = true;
            return step;
        }
        self.pass(&mut step).await;
        self.mark
            .mark((step.errors == 0).then_some(counts).flatten());
        step
    }

    async fn pass(&mut self, step: &mut BinderStep) {
        let pods = self.view.pods();
        // Forget assumptions the store confirms (bound) or refutes (gone).
        if !self.assumed.is_empty() {
            let unbound: HashSet<(&str, &str)> = pods
                .iter()
                .filter(|p| node_of(p).is_none())
                .map(|p| key_ref(p))
                .collect();
            self.assumed
                .retain(|key, _| unbound.contains(&(key.namespace(), key.name())));
        }

        let mut pending: Vec<&Arc<SlimPod>> = pods
            .iter()
            .filter(|p| {
                is_pending(p) && (self.assumed.is_empty() || !self.assumed.contains_key(&key_of(p)))
            })
            .collect();
        if pending.is_empty() {
            self.last_inputs = None;
            return;
        }
        pending.sort_by(|a, b| {
            let created = |p: &SlimPod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(a)
                .cmp(&created(b))
                .then_with(|| key_ref(a).cmp(&key_ref(b)))
        });
        let mut nodes: Vec<Arc<SlimNode>> = self
            .view
            .nodes()
            .into_iter()
            .filter(|n| is_schedulable(n))
            .collect();
        nodes.sort_by_key(|n| n.name_any());

        let inputs = Self::fingerprint(&pending, &nodes, pods.len());
        if self.last_inputs == Some(inputs) {
            step.skipped = true;
            return;
        }

        let (snapshot, originals, unreadable) = self.snapshot(&pods, pending, &nodes);
        step.errors += unreadable;
        let plan = solve(&snapshot, &Options::default());
        // The writes below replace the pods in the view: holding the view's objects through
        // them would keep every pod's old version alive too (at 50,000 pending pods, twice
        // the view's pods at the peak of a scale-up).
        let targets: Vec<(PodKey, bool)> = originals
            .iter()
            .map(|pod| (key_of(pod), is_marked_unschedulable(pod)))
            .collect();
        // Nor the snapshot (every node with its pods converted), which the bindings do not
        // read: they take many turns of the runtime, while the rest of the cluster goes on.
        let existing_nodes = snapshot.existing_nodes.len();
        drop((originals, pods, nodes, snapshot));
        self.carry_out(&plan, &targets, existing_nodes, step).await;
        // Remember the inputs only when nothing changed them: a binding changes the next tick's.
        self.last_inputs = step.bound.is_empty().then_some(inputs);
    }

    /// The scheduling snapshot: pending pods (those the scheduler core can read, returned
    /// alongside in the same order, with the count of unreadable ones) and the nodes with the
    /// pods bound or assumed there.
    fn snapshot(
        &self,
        pods: &[Arc<SlimPod>],
        pending: Vec<&Arc<SlimPod>>,
        nodes: &[Arc<SlimNode>],
    ) -> (Snapshot, Vec<Arc<SlimPod>>, usize) {
        let mut by_node: BTreeMap<String, Vec<Arc<SlimPod>>> = BTreeMap::new();
        for pod in pods {
            if let Some(node) = node_of(pod) {
                by_node
                    .entry(node.to_owned())
                    .or_default()
                    .push(Arc::clone(pod));
            }
        }
        for (key, node) in &self.assumed {
            if let Some(pod) = self.view.pod(key.namespace(), key.name()) {
                by_node.entry(node.to_string()).or_default().push(pod);
            }
        }
        let existing: Vec<ExistingNode> = nodes
            .iter()
            .map(|n| existing_node(n, by_node.get(&n.name_any()).map_or(&[][..], Vec::as_slice)))
            .collect();
        let mut snapshot_pods = Vec::with_capacity(pending.len());
        let mut originals = Vec::with_capacity(pending.len());
        let mut unreadable = 0;
        for pod in pending {
            match SchedulingPod::from_pod(pod) {
                Ok(converted) => {
                    snapshot_pods.push(converted);
                    originals.push(Arc::clone(pod));
                }
                Err(error) => {
                    tracing::debug!(%error, "the simulated scheduler cannot read a pod");
                    unreadable += 1;
                }
            }
        }
        let snapshot = Snapshot {
            pods: snapshot_pods,
            existing_nodes: existing,
            node_pools: Vec::new(),
            namespaces: BTreeMap::new(),
        };
        (snapshot, originals, unreadable)
    }

    /// Binds the placed pods and marks the others unschedulable; `targets` are the snapshot's
    /// pending pods (key, and whether already marked unschedulable) in its order.
    async fn carry_out(
        &mut self,
        plan: &Plan,
        targets: &[(PodKey, bool)],
        node_count: usize,
        step: &mut BinderStep,
    ) {
        let mut placed = vec![false; targets.len()];
        // Sorted by pod: the bindings go out in the snapshot's order. Each node's name is
        // shared by the assumptions of its pods.
        let mut bindings: Vec<(usize, Arc<str>)> = Vec::new();
        for existing in &plan.existing {
            let node: Arc<str> = existing.node_name.as_str().into();
            bindings.extend(existing.pods.iter().map(|p| (*p, Arc::clone(&node))));
        }
        bindings.sort_unstable_by_key(|(index, _)| *index);
        for (index, node) in bindings {
            let Some((key, _)) = targets.get(index) else {
                continue;
            };
            placed[index] = true;
            match self.bind(key, &node).await {
                Ok(()) => {
                    self.assumed.insert(key.clone(), node);
                    step.bound.push(key.clone());
                }
                Err(()) => step.errors += 1,
            }
        }
        for (index, (key, marked)) in targets.iter().enumerate() {
            if placed[index] || *marked {
                continue;
            }
            let message = format!(
                "0/{node_count} nodes are available: no Ready node has room for the pod or matches its constraints"
            );
            if self.mark_unschedulable(key, &message).await {
                step.unschedulable += 1;
            } else {
                step.errors += 1;
            }
        }
    }

    fn fingerprint(pending: &[&Arc<SlimPod>], nodes: &[Arc<SlimNode>], pods: usize) -> u64 {
        let mut hasher = DefaultHasher::new();
        pods.hash(&mut hasher);
        for pod in pending {
            key_ref(pod).hash(&mut hasher);
            pod.metadata.resource_version.hash(&mut hasher);
        }
        for node in nodes {
            node.metadata.name.hash(&mut hasher);
            node.metadata.resource_version.hash(&mut hasher);
        }
        hasher.finish()
    }

    async fn bind(&self, key: &PodKey, node: &str) -> Result<(), ()> {
        let (namespace, name) = (key.namespace(), key.name());
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let binding = json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": { "name": name, "namespace": namespace },
            "target": { "apiVersion": "v1", "kind": "Node", "name": node },
        });
        match api
            .create_subresource::<_, serde_json::Value>(
                "binding",
                name,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(error) => {
                tracing::debug!(%error, %namespace, %name, %node, "binding failed");
                Err(())
            }
        }
    }

    async fn mark_unschedulable(&self, key: &PodKey, message: &str) -> bool {
        let (namespace, name) = (key.namespace(), key.name());
        let patch = json!({ "status": { "conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastTransitionTime": self.clock.now(),
        }]}});
        match writes::patch_pod_status(
            &self.client,
            namespace,
            name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Strategic(&patch),
        )
        .await
        {
            Ok(()) => true,
            Err(kube::Error::Api(status)) if status.code == 404 => true,
            Err(error) => {
                tracing::debug!(%error, %namespace, %name, "marking the pod unschedulable failed");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PodKey;

    #[test]
    fn a_pod_key_reads_back_its_parts_and_sorts_by_namespace_then_name() {
        let key = PodKey::new("team-a", "web-0");
        assert_eq!((key.namespace(), key.name()), ("team-a", "web-0"));
        let mut keys = [
            PodKey::new("a-b", "x"),
            PodKey::new("a", "y"),
            PodKey::new("a", "x"),
        ];
        keys.sort();
        let order: Vec<(&str, &str)> = keys.iter().map(|k| (k.namespace(), k.name())).collect();
        assert_eq!(order, [("a", "x"), ("a", "y"), ("a-b", "x")]);
        assert_eq!(key.clone(), key, "a clone is the same key");
    }
}
