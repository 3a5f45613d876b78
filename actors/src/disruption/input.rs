//! The round's [`DisruptionInput`], read from the cluster view: the Provisioner's scheduling
//! snapshot (the same state nodes, pods and NodePools a provisioning run sees, so a
//! consolidation simulation schedules exactly as provisioning would), each state node with its
//! NodeClaim facts and pods, the managed NodePools' disruption settings and instance types, the
//! PDBs, the orchestration queue and the nominations.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;

use crate::nominations::Nominations;
use crate::ports::cluster_view::ClusterView;
use crate::provisioner::build::{self, StateRef, UsablePool};
use karpenter_core::apis::conditions::{ConditionStatus, nodeclaim as cond};
use karpenter_core::apis::labels;
use karpenter_core::apis::{NodeClaim, NodePool};
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
    claim: &'a NodeClaim,
    kind: &str,
) -> Option<&'a karpenter_core::apis::conditions::Condition> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == kind))
}

fn is_true(claim: &NodeClaim, kind: &str) -> bool {
    condition(claim, kind).is_some_and(|c| c.status == ConditionStatus::True)
}

fn claim_facts(claim: &NodeClaim) -> NodeClaimFacts {
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

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn annotated_do_not_disrupt(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(labels::DO_NOT_DISRUPT))
        .is_some_and(|v| v == "true")
}

fn state_node(state: &StateRef, context: &RoundContext<'_>) -> StateNode {
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
        .filter_map(|pod| match NodePod::from_pod(pod) {
            Ok(pod) => Some(pod),
            Err(error) => {
                tracing::debug!(
                    Node = %state.name,
                    error = %error,
                    "leaving an unreadable pod out of the disruption round"
                );
                None
            }
        })
        .collect();
    StateNode {
        name: state.name.clone(),
        node_claim: claim.map(claim_facts),
        has_node: node.is_some(),
        labels: state.labels.clone(),
        initialized: state.initialized,
        ready: node.is_some_and(node_ready),
        marked_for_deletion: state.deleting || context.queued.contains(&state.name),
        nominated_until: context.nominations.until(&state.name, context.now),
        do_not_disrupt,
        pods,
        existing: state.existing,
    }
}

/// Reads one round's input.
pub(super) fn build_input(view: &dyn ClusterView, context: RoundContext<'_>) -> DisruptionInput {
    let ready: Vec<UsablePool> = context
        .pools
        .iter()
        .filter(|p| is_ready(&p.nodepool))
        .cloned()
        .collect();
    let built = build::build(view, &ready);
    let nodes: Vec<StateNode> = built
        .states
        .iter()
        .map(|state| state_node(state, &context))
        .collect();
    let mut pools: Vec<PoolInput> = context
        .pools
        .iter()
        .map(|p| PoolInput {
            name: p.nodepool.metadata.name.clone().unwrap_or_default(),
            disruption: p.nodepool.spec.disruption.clone(),
            instance_types: p.instance_types.clone(),
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
    DisruptionInput {
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
    }
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
