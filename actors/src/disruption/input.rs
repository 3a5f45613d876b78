//! The round's [`DisruptionInput`], read from the cluster view: the Provisioner's scheduling
//! snapshot (the same state nodes, pods and NodePools a provisioning run sees, so a
//! consolidation simulation schedules exactly as provisioning would), each state node with its
//! NodeClaim facts and pods, the managed NodePools' disruption settings and instance types, the
//! PDBs, the orchestration queue and the nominations.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, TryLockError};

use k8s_openapi::jiff::Timestamp;

use crate::messages::WatchedKind;
use crate::nominations::Nominations;
use crate::pod_cache::PodCache;
use crate::ports::cluster_view::{ChangeMark, ClusterView};
use crate::provisioner::build::{self, StateRef, UsablePool};
use karpenter_core::apis::conditions::{ConditionStatus, nodeclaim as cond};
use karpenter_core::apis::labels;
use karpenter_core::apis::{MetaFields, NodePool, SlimNode, SlimNodeClaim};
use karpenter_core::domain::disruption::{
    DisruptionInput, DisruptionOptions, Memos, NodeClaimFacts, NodePod, Pdb, PoolInput, StateNode,
};

/// What the actor hands the builder besides the view.
#[derive(Debug)]
pub(super) struct RoundContext<'a> {
    pub now: Timestamp,
    /// The NodePools with instance types (ready ones are scheduled with).
    pub pools: &'a [UsablePool],
    /// Managed NodePools whose instance types could not be listed: their nodes are no
    /// candidates ("NodePool not found").
    pub pools_without_types: &'a [Arc<NodePool>],
    /// State node names with a command in the queue.
    pub queued: BTreeSet<String>,
    pub nominations: &'a Nominations,
    pub memos: Memos,
    pub single_node_unseen_pools: Vec<String>,
    pub options: DisruptionOptions,
}

/// Whether a NodePool is Karpenter's to disrupt here (its class is an `EC2NodeClass`).
#[must_use]
pub(super) fn is_managed(pool: &NodePool) -> bool {
    let class = &pool.spec.template.spec.node_class_ref;
    class.group == labels::AWS_GROUP && class.kind == "EC2NodeClass"
}

fn condition<'a>(
    claim: &'a SlimNodeClaim,
    kind: &str,
) -> Option<&'a karpenter_core::apis::conditions::Condition> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == kind))
}

fn is_true(claim: &SlimNodeClaim, kind: &str) -> bool {
    condition(claim, kind).is_some_and(|c| c.status == ConditionStatus::True)
}

fn claim_facts(claim: &SlimNodeClaim) -> NodeClaimFacts {
    NodeClaimFacts {
        name: claim.metadata.name.clone().unwrap_or_default(),
        created: claim
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
        // A bad duration is refused at admission; one that slipped through counts as Never.
        expire_after: claim.spec.expire_after.get().ok().flatten(),
        termination_grace_period: claim
            .spec
            .termination_grace_period
            .as_ref()
            .and_then(|d| d.get().ok()),
        consolidatable: is_true(claim, cond::CONSOLIDATABLE),
        drifted_since: condition(claim, cond::DRIFTED)
            .filter(|c| c.status == ConditionStatus::True)
            .map(|c| c.last_transition_time.0),
        instance_terminating: is_true(claim, cond::INSTANCE_TERMINATING),
    }
}

fn node_ready(node: &SlimNode) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn annotated_do_not_disrupt(meta: &impl MetaFields) -> bool {
    meta.annotation(labels::DO_NOT_DISRUPT) == Some("true")
}

fn state_node(
    state: &StateRef,
    context: &RoundContext<'_>,
    cache: &mut PodCache<Option<Arc<NodePod>>>,
) -> StateNode {
    let claim = state.claim.as_deref();
    let node = state.node.as_deref();
    let registered = node.is_some()
        && (claim.is_none()
            || node
                .and_then(|n| n.metadata.labels.as_ref())
                .and_then(|l| l.get(labels::REGISTERED))
                .is_some_and(|v| v == "true"));
    let do_not_disrupt = match (node, claim) {
        (Some(node), _) if registered => annotated_do_not_disrupt(&node.metadata),
        (_, Some(claim)) => annotated_do_not_disrupt(&claim.metadata),
        (Some(node), None) => annotated_do_not_disrupt(&node.metadata),
        (None, None) => false,
    };
    let pods = state
        .pods
        .iter()
        .filter_map(|pod| {
            cache.get(pod, |pod| match NodePod::from_pod(pod) {
                Ok(pod) => Some(Arc::new(pod)),
                Err(error) => {
                    tracing::debug!(
                        Node = %state.name,
                        error = %error,
                        "leaving an unreadable pod out of the disruption rounds"
                    );
                    None
                }
            })
        })
        .collect();
    StateNode {
        name: state.name.clone(),
        node_claim: claim.map(claim_facts),
        has_node: node.is_some(),
        labels: state.labels.clone(),
        initialized: state.initialized,
        ready: node.is_some_and(node_ready),
        marked_for_deletion: marked_for_deletion(&state.name, state.deleting, context),
        nominated_until: context.nominations.until(&state.name, context.now),
        do_not_disrupt,
        pods,
        existing: state.existing,
    }
}

/// The kinds [`build_input`] reads from the view (the NodePools come with the context).
const VIEW_KINDS: [WatchedKind; 6] = [
    WatchedKind::Pod,
    WatchedKind::Node,
    WatchedKind::NodeClaim,
    WatchedKind::DaemonSet,
    WatchedKind::Namespace,
    WatchedKind::PodDisruptionBudget,
];

/// What an input was built from, besides the round's context.
#[derive(Debug)]
struct Source {
    counts: [u64; VIEW_KINDS.len()],
    pools: Vec<UsablePool>,
    pools_without_types: Vec<Arc<NodePool>>,
    /// Per state node: deleting in the view (`marked_for_deletion` before the queue).
    deleting: Vec<bool>,
}

impl Source {
    /// The same NodePool and instance-type objects (they are replaced when they change).
    fn same_pools(&self, context: &RoundContext<'_>) -> bool {
        let same_pool = |a: &UsablePool, b: &UsablePool| {
            Arc::ptr_eq(&a.nodepool, &b.nodepool)
                && a.instance_types.len() == b.instance_types.len()
                && a.instance_types
                    .iter()
                    .zip(b.instance_types.iter())
                    .all(|(x, y)| Arc::ptr_eq(x, y))
        };
        self.pools.len() == context.pools.len()
            && self
                .pools
                .iter()
                .zip(context.pools)
                .all(|(a, b)| same_pool(a, b))
            && self.pools_without_types.len() == context.pools_without_types.len()
            && self
                .pools_without_types
                .iter()
                .zip(context.pools_without_types)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// Reuses the last round's input while the view has not changed.
///
/// Building an input converts every pod and node (the Provisioner's snapshot and the state
/// nodes): at thousands of nodes that is most of a quiet round. While no pod, node,
/// NodeClaim, DaemonSet, namespace or PDB changed ([`ClusterView::changes`]) and the NodePools
/// and instance types are the same objects, the last input is what a build would give, except
/// for what the round's context sets (time, queue, nominations, memos, options), which is
/// refreshed. A view that cannot count changes gets a fresh build every round.
#[derive(Debug)]
pub(super) struct InputReuse {
    mark: ChangeMark<{ VIEW_KINDS.len() }>,
    kept: Option<(Source, DisruptionInput)>,
    /// The source of the input handed out last, until it is kept.
    lent: Option<Source>,
    /// Inputs reused and built (read by tests).
    #[cfg_attr(not(test), allow(dead_code))]
    reused: u64,
    #[cfg_attr(not(test), allow(dead_code))]
    built: u64,
    /// The pods' conversions, kept between builds.
    conversions: Conversions,
}

/// What a build keeps of the pods for the next one ([`PodCache`]): the snapshot's conversions
/// are the Provisioner's (the same pods, converted the same way, kept once).
#[derive(Debug, Default)]
struct Conversions {
    snapshot: Arc<Mutex<build::PodConversions>>,
    /// Shared with the rounds' inputs: a kept input holds 50,000 pods at 8 bytes each.
    node_pods: PodCache<Option<Arc<NodePod>>>,
}

impl Default for InputReuse {
    fn default() -> Self {
        Self {
            mark: ChangeMark::new(VIEW_KINDS),
            kept: None,
            lent: None,
            reused: 0,
            built: 0,
            conversions: Conversions::default(),
        }
    }
}

impl InputReuse {
    /// Reuse that shares the snapshot's pod conversions with the Provisioner.
    pub fn new(snapshot_conversions: Arc<Mutex<build::PodConversions>>) -> Self {
        let mut reuse = Self::default();
        reuse.conversions.snapshot = snapshot_conversions;
        reuse
    }

    /// The round's input: the kept one refreshed when nothing it was built from changed,
    /// else a fresh build. Hand it back with [`InputReuse::keep`] once used.
    pub fn input(&mut self, view: &dyn ClusterView, context: RoundContext<'_>) -> DisruptionInput {
        let counts = self.mark.read(view);
        let kept = self.kept.take();
        if let (Some(counts), Some((source, mut input))) = (counts, kept)
            && source.counts == counts
            && source.same_pools(&context)
        {
            refresh(&mut input, &source.deleting, context);
            self.lent = Some(source);
            self.reused += 1;
            return input;
        }
        let pools = context.pools.to_vec();
        let pools_without_types = context.pools_without_types.to_vec();
        let (input, deleting) = build_input(view, context, &mut self.conversions);
        self.lent = counts.map(|counts| Source {
            counts,
            pools,
            pools_without_types,
            deleting,
        });
        self.built += 1;
        input
    }

    /// Keeps the input last handed out for the next round.
    pub fn keep(&mut self, input: DisruptionInput) {
        self.kept = self.lent.take().map(|source| (source, input));
    }

    /// Drops the kept input once the view has changed since it was built: the next round could
    /// not reuse it, and until then it held the objects it was built from, every Node and
    /// NodeClaim in versions the view has since replaced (in the 5,000-node scale-up, 26 MB of
    /// the peak heap).
    pub fn forget_stale(&mut self, view: &dyn ClusterView) {
        if let Some((source, _)) = &self.kept
            && self.mark.read(view) != Some(source.counts)
        {
            self.kept = None;
        }
    }
}

/// Sets what the round's context decides on an input built in an earlier round.
fn refresh(input: &mut DisruptionInput, deleting: &[bool], context: RoundContext<'_>) {
    for (node, deleting) in input.nodes.iter_mut().zip(deleting) {
        node.marked_for_deletion = marked_for_deletion(&node.name, *deleting, &context);
        node.nominated_until = context.nominations.until(&node.name, context.now);
    }
    input.now = context.now;
    input.queued = context.queued;
    input.memos = context.memos;
    input.single_node_unseen_pools = context.single_node_unseen_pools;
    input.options = context.options;
}

/// Deleting in the view, or a candidate of a queued command.
fn marked_for_deletion(name: &str, deleting: bool, context: &RoundContext<'_>) -> bool {
    deleting || context.queued.contains(name)
}

/// Reads one round's input, and per state node whether the view shows it deleting.
fn build_input(
    view: &dyn ClusterView,
    context: RoundContext<'_>,
    conversions: &mut Conversions,
) -> (DisruptionInput, Vec<bool>) {
    let ready: Vec<UsablePool> = context
        .pools
        .iter()
        .filter(|p| is_ready(&p.nodepool))
        .cloned()
        .collect();
    // The Provisioner may be building with the shared conversions on its own thread: rather
    // than wait for it on this actor's thread, this build converts its pods afresh.
    let built = match conversions.snapshot.try_lock() {
        Ok(mut shared) => build::build(view, &ready, &mut shared),
        Err(TryLockError::Poisoned(poisoned)) => {
            build::build(view, &ready, &mut poisoned.into_inner())
        }
        Err(TryLockError::WouldBlock) => {
            build::build(view, &ready, &mut build::PodConversions::default())
        }
    };
    let deleting: Vec<bool> = built.states.iter().map(|state| state.deleting).collect();
    let nodes: Vec<StateNode> = built
        .states
        .iter()
        .map(|state| state_node(state, &context, &mut conversions.node_pods))
        .collect();
    conversions.node_pods.sweep();
    let mut pools: Vec<PoolInput> = context
        .pools
        .iter()
        .map(|p| PoolInput {
            name: p.nodepool.metadata.name.clone().unwrap_or_default(),
            disruption: p.nodepool.spec.disruption.clone(),
            instance_types: p.instance_types.to_vec(),
        })
        .collect();
    pools.extend(context.pools_without_types.iter().map(|p| PoolInput {
        name: p.metadata.name.clone().unwrap_or_default(),
        disruption: p.spec.disruption.clone(),
        instance_types: Vec::new(),
    }));
    pools.sort_by(|a, b| a.name.cmp(&b.name));
    let mut pdbs: Vec<Pdb> = view.pdbs().iter().map(|p| Pdb::from_api(p)).collect();
    pdbs.sort_by_key(Pdb::key);
    let input = DisruptionInput {
        now: context.now,
        nodes,
        pools,
        pdbs,
        scheduling: built.snapshot,
        pending_pods: built.pending,
        queued: context.queued,
        memos: context.memos,
        single_node_unseen_pools: context.single_node_unseen_pools,
        options: context.options,
    };
    (input, deleting)
}

/// A digest of what Karpenter's consolidation memo depends on (its cluster state's
/// `MarkUnconsolidated` calls): every state node with whether it is initialized and marked for
/// deletion, the pods bound to each (by key, finished ones apart), and the pending pods; and,
/// past Karpenter (whose memo waits up to 5 minutes for it), whether each NodeClaim is
/// `Consolidatable`. Equal digests mean no method can decide differently for a reason the memo
/// covers.
#[must_use]
pub(super) fn consolidation_state(input: &DisruptionInput) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for node in &input.nodes {
        node.name.hash(&mut hasher);
        node.initialized.hash(&mut hasher);
        node.marked_for_deletion.hash(&mut hasher);
        node.node_claim
            .as_ref()
            .is_some_and(|c| c.consolidatable)
            .hash(&mut hasher);
        for pod in &node.pods {
            pod.pod.namespace.hash(&mut hasher);
            pod.pod.name.hash(&mut hasher);
            pod.is_active().hash(&mut hasher);
        }
    }
    for pod in input.scheduling.pods.iter().take(input.pending_pods) {
        pod.namespace.hash(&mut hasher);
        pod.name.hash(&mut hasher);
    }
    hasher.finish()
}

/// A NodePool that provisioning schedules with (Karpenter's disruption simulations use the
/// provisioner's ready NodePools).
fn is_ready(pool: &NodePool) -> bool {
    pool.metadata.deletion_timestamp.is_none()
        && pool.status.as_ref().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.type_ == karpenter_core::apis::conditions::READY
                    && c.status == ConditionStatus::True
            })
        })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::testing::MemoryClusterView;

    fn node(name: &str) -> SlimNode {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        }))
        .unwrap()
    }

    fn pod(name: &str, node: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name, "resourceVersion": "1"},
            "spec": {"nodeName": node, "containers": [{"name": "app", "resources": {
                "requests": {"cpu": "100m", "memory": "128Mi"}}}]},
            "status": {"phase": "Running"},
        }))
        .unwrap()
    }

    fn context<'a>(
        now: Timestamp,
        queued: &[&str],
        nominations: &'a Nominations,
    ) -> RoundContext<'a> {
        RoundContext {
            now,
            pools: &[],
            pools_without_types: &[],
            queued: queued.iter().map(|q| (*q).to_owned()).collect(),
            nominations,
            memos: Memos::default(),
            single_node_unseen_pools: Vec::new(),
            options: DisruptionOptions::default(),
        }
    }

    fn fresh(view: &MemoryClusterView, context: RoundContext<'_>) -> String {
        format!(
            "{:?}",
            build_input(view, context, &mut Conversions::default()).0
        )
    }

    #[test]
    fn an_unchanged_view_reuses_the_input_with_the_rounds_context() {
        let view = MemoryClusterView::new();
        view.put_node(node("a"));
        view.put_node(node("b"));
        view.put_pod(pod("p1", "a"));
        let nominations = Nominations::default();
        let start = Timestamp::UNIX_EPOCH;
        let mut reuse = InputReuse::default();

        let first = reuse.input(&view, context(start, &[], &nominations));
        assert_eq!((reuse.built, reuse.reused), (1, 0));
        reuse.keep(first);

        // Ten seconds later: node b queued, node a nominated.
        let later = start + Duration::from_secs(10);
        nominations.nominate("a", later, Duration::from_secs(20));
        let second = reuse.input(&view, context(later, &["b"], &nominations));
        assert_eq!((reuse.built, reuse.reused), (1, 1), "nothing changed");
        assert_eq!(second.now, later);
        let b = second.nodes.iter().find(|n| n.name == "b").unwrap();
        assert!(b.marked_for_deletion, "the queue is the round's");
        let a = second.nodes.iter().find(|n| n.name == "a").unwrap();
        assert!(a.nominated_until.is_some(), "nominations are the round's");
        assert_eq!(
            format!("{second:?}"),
            fresh(&view, context(later, &["b"], &nominations)),
            "a reused input is the one a build gives"
        );
        reuse.keep(second);

        // A new pod: built again, and the pod is in it.
        view.put_pod(pod("p2", "b"));
        let third = reuse.input(&view, context(later, &[], &nominations));
        assert_eq!((reuse.built, reuse.reused), (2, 1), "a pod changed");
        let b = third.nodes.iter().find(|n| n.name == "b").unwrap();
        assert_eq!(b.pods.len(), 1);
        assert!(!b.marked_for_deletion);
        assert_eq!(
            format!("{third:?}"),
            fresh(&view, context(later, &[], &nominations)),
            "a build from kept pod conversions is a fresh build"
        );
        let snapshot_hits = reuse.conversions.snapshot.lock().unwrap().counts().0;
        let node_pod_hits = reuse.conversions.node_pods.counts().0;
        assert!(
            snapshot_hits >= 1 && node_pod_hits >= 1,
            "p1 did not change: its conversions were kept ({snapshot_hits}, {node_pod_hits})"
        );
    }

    #[test]
    fn a_build_while_the_provisioner_holds_the_conversions_does_not_wait_for_them() {
        let view = MemoryClusterView::new();
        view.put_node(node("a"));
        view.put_pod(pod("p1", "a"));
        let nominations = Nominations::default();
        let shared = Arc::new(Mutex::new(build::PodConversions::default()));
        let mut reuse = InputReuse::new(Arc::clone(&shared));
        let held = shared.lock().unwrap();
        let input = reuse.input(&view, context(Timestamp::UNIX_EPOCH, &[], &nominations));
        assert_eq!(
            format!("{input:?}"),
            fresh(&view, context(Timestamp::UNIX_EPOCH, &[], &nominations)),
            "converted afresh, the same input"
        );
        assert_eq!(
            held.counts(),
            (0, 0),
            "the held conversions were not touched"
        );
    }

    #[test]
    fn a_kept_input_is_dropped_once_the_view_changes_and_kept_while_it_does_not() {
        let view = MemoryClusterView::new();
        view.put_node(node("a"));
        let nominations = Nominations::default();
        let mut reuse = InputReuse::default();
        let first = reuse.input(&view, context(Timestamp::UNIX_EPOCH, &[], &nominations));
        reuse.keep(first);

        reuse.forget_stale(&view);
        assert!(reuse.kept.is_some(), "nothing changed: kept for reuse");
        let second = reuse.input(&view, context(Timestamp::UNIX_EPOCH, &[], &nominations));
        assert_eq!((reuse.built, reuse.reused), (1, 1));
        reuse.keep(second);

        view.put_node(node("b"));
        reuse.forget_stale(&view);
        assert!(
            reuse.kept.is_none(),
            "a Node changed: the kept input could not be reused"
        );
        let third = reuse.input(&view, context(Timestamp::UNIX_EPOCH, &[], &nominations));
        assert_eq!((reuse.built, reuse.reused), (2, 1));
        assert_eq!(third.nodes.len(), 2);
    }

    #[test]
    fn an_input_not_handed_back_is_built_again() {
        let view = MemoryClusterView::new();
        view.put_node(node("a"));
        let nominations = Nominations::default();
        let mut reuse = InputReuse::default();
        let _lost = reuse.input(&view, context(Timestamp::UNIX_EPOCH, &[], &nominations));
        let _again = reuse.input(&view, context(Timestamp::UNIX_EPOCH, &[], &nominations));
        assert_eq!((reuse.built, reuse.reused), (2, 0));
    }
}
