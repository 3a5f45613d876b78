//! The NodeClaimActor's steps for a NodeClaim being deleted (Karpenter's lifecycle `finalize`
//! and `node.termination` in one): termination time annotation, Node deletion, taint, drain,
//! instance termination, and the finalizers last, once the instance is gone.
//!
//! Between the drain and the instance's termination the node's `VolumeAttachments` must go
//! ([`super::volumes`]), unless the termination time has passed.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Taint as ApiTaint};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

use super::drain::{self, DrainPlan, PodKey};
use super::initialization::is_ready;
use super::lifecycle::{condition, is_true, until};
use super::volumes;
use super::{
    DRAIN_EVENT_INTERVAL, DRAIN_POLL, EVICTION_BACKOFF, EvictionBackoff, INSTANCE_TERMINATION_POLL,
    LAUNCH_CHECK_INTERVAL, LaunchState, Next, NodeClaimActor, NodeClaimError, elapsed, events,
    has_finalizer, label, provider_id, soonest, uid,
};
use crate::logs;
use crate::metrics::FORCEFUL_TERMINATION;
use crate::ports::cloud_provider::CloudProviderError;
use crate::ports::cluster::{ClusterError, Deletion, Eviction};
use crate::runtime::ActorCtx;
use karpenter_core::apis::conditions::{ConditionStatus, nodeclaim as cond};
use karpenter_core::apis::labels;
use karpenter_core::apis::{NodeClaim, SlimNode, SlimNodeClaim};

/// How soon a deleting NodeClaim looks again while the cluster view has not synced.
const UNSYNCED_RECHECK: Duration = Duration::from_secs(1);
/// Value of `node.kubernetes.io/exclude-from-external-load-balancers` while draining.
const EXCLUDE_FROM_LOAD_BALANCERS_VALUE: &str = "karpenter";

/// Where the node's termination is.
enum NodeProgress {
    /// Still draining or shutting down; look again after `Next`.
    Waiting(Next),
    /// The node is gone or released.
    Released,
}

fn http_code(error: &ClusterError) -> u16 {
    match error {
        ClusterError::NotFound { .. } => 404,
        ClusterError::Conflict { .. } | ClusterError::AlreadyExists { .. } => 409,
        ClusterError::Throttled { .. } => 429,
        ClusterError::Forbidden { .. } => 403,
        ClusterError::Invalid { .. } => 422,
        ClusterError::Server { code, .. } => *code,
        ClusterError::Transport { .. } => 0,
    }
}

fn is_tainted(node: &SlimNode) -> bool {
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| {
            t.iter()
                .any(|t| t.key == labels::DISRUPTED_TAINT && t.effect == "NoSchedule")
        });
    let excluded = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS))
        .is_some_and(|v| v == EXCLUDE_FROM_LOAD_BALANCERS_VALUE);
    tainted && excluded
}

/// Karpenter's `Terminator.Taint`: the disrupted taint (replacing one with its key and another
/// effect) and the load-balancer exclusion label.
fn taint_for_termination(node: &mut Node) {
    let spec = node.spec.get_or_insert_default();
    let taints = spec.taints.get_or_insert_default();
    if !taints
        .iter()
        .any(|t| t.key == labels::DISRUPTED_TAINT && t.effect == "NoSchedule")
    {
        taints.retain(|t| t.key != labels::DISRUPTED_TAINT);
        taints.push(ApiTaint {
            key: labels::DISRUPTED_TAINT.to_owned(),
            effect: "NoSchedule".to_owned(),
            ..ApiTaint::default()
        });
    }
    node.metadata.labels.get_or_insert_default().insert(
        labels::EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS.to_owned(),
        EXCLUDE_FROM_LOAD_BALANCERS_VALUE.to_owned(),
    );
}

fn remove_finalizer(finalizers: &mut Option<Vec<String>>) {
    if let Some(list) = finalizers {
        list.retain(|f| f != labels::TERMINATION_FINALIZER);
    }
}

/// RFC 3339 to the second, as Karpenter writes the termination timestamp.
pub(super) fn rfc3339(at: Timestamp) -> String {
    Timestamp::from_second(at.as_second())
        .unwrap_or(at)
        .to_string()
}

impl NodeClaimActor {
    pub(super) async fn finalize(
        &mut self,
        ctx: &mut ActorCtx<Self>,
        nodeclaim: Arc<SlimNodeClaim>,
    ) -> Result<Next, NodeClaimError> {
        if !has_finalizer(&nodeclaim.metadata) {
            ctx.set_state("deleted");
            return Ok(None);
        }
        if !self.deps.view.is_synced() {
            // Before the first list of nodes and pods, "no node" and "no pods left" are only
            // what the view has not seen yet: the drain would be skipped and the instance
            // terminated under running pods.
            ctx.set_state("waiting for the cluster state to sync");
            return Ok(Some(UNSYNCED_RECHECK));
        }
        ctx.set_state("terminating");
        let Some(mut nodeclaim) = self.ensure_termination_timestamp(nodeclaim).await? else {
            return Ok(None);
        };
        // A launch still running must finish first, or its instance would leak.
        let uid = uid(&nodeclaim);
        let _ = self.launches.take_failure(&uid);
        match self.launches.get(&uid) {
            Some(LaunchState::InFlight) => return Ok(Some(LAUNCH_CHECK_INTERVAL)),
            // The provider id is written but this copy predates it: read it back.
            Some(LaunchState::Recorded(_)) if provider_id(&nodeclaim).is_none() => {
                match self.read_back().await? {
                    Some(current) => nodeclaim = current,
                    None => return Ok(None),
                }
            }
            Some(LaunchState::Launched(created)) if provider_id(&nodeclaim).is_none() => {
                match self.record_launch(&nodeclaim, &created).await? {
                    Some(written) => nodeclaim = written,
                    None => return Ok(None),
                }
            }
            _ => {}
        }
        let termination_time = self.termination_time(&nodeclaim)?;
        if is_true(&nodeclaim, cond::REGISTERED)
            && let Some(node) = self.node_of(&nodeclaim)
        {
            ctx.set_state("draining");
            match self
                .terminate_node(&nodeclaim, &node, termination_time)
                .await?
            {
                NodeProgress::Waiting(next) => return Ok(next),
                NodeProgress::Released => {}
            }
        }
        if provider_id(&nodeclaim).is_some() {
            ctx.set_state("terminating instance");
            if !self.ensure_instance_terminated(&nodeclaim).await? {
                return Ok(Some(INSTANCE_TERMINATION_POLL));
            }
        }
        self.release_nodeclaim(&nodeclaim).await?;
        Ok(None)
    }

    /// Writes `karpenter.sh/nodeclaim-termination-timestamp` (deletion + grace period) once.
    async fn ensure_termination_timestamp(
        &self,
        nodeclaim: Arc<SlimNodeClaim>,
    ) -> Result<Option<Arc<SlimNodeClaim>>, NodeClaimError> {
        let annotated = nodeclaim
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(labels::NODECLAIM_TERMINATION_TIMESTAMP));
        let (Some(grace), Some(deleted), false) = (
            nodeclaim.spec.termination_grace_period.as_ref(),
            nodeclaim.metadata.deletion_timestamp.as_ref(),
            annotated,
        ) else {
            return Ok(Some(nodeclaim));
        };
        let Ok(grace) = grace.get().map(SignedDuration::try_from) else {
            // Admission rejects bad durations; a NodeClaim that slipped through drains
            // without a deadline rather than not at all.
            return Ok(Some(nodeclaim));
        };
        let deadline = deleted
            .0
            .checked_add(grace.unwrap_or(SignedDuration::MAX))
            .unwrap_or(deleted.0);
        let value = rfc3339(deadline);
        // Another writer (node repair) may have set it first; theirs stays.
        let change = |nodeclaim: &mut NodeClaim| {
            nodeclaim
                .metadata
                .annotations
                .get_or_insert_default()
                .entry(labels::NODECLAIM_TERMINATION_TIMESTAMP.to_owned())
                .or_insert_with(|| value.clone());
        };
        let written = self
            .write_nodeclaim(&nodeclaim, "annotating the termination time", &change)
            .await?;
        if let Some(written) = &written {
            tracing::info!(
                "karpenter.sh/nodeclaim-termination-timestamp" = %value,
                "annotated nodeclaim"
            );
            self.publish(events::nodeclaim_grace_period_expiring(written, &value))
                .await;
        }
        Ok(written)
    }

    fn termination_time(
        &self,
        nodeclaim: &SlimNodeClaim,
    ) -> Result<Option<Timestamp>, NodeClaimError> {
        let Some(value) = nodeclaim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::NODECLAIM_TERMINATION_TIMESTAMP))
        else {
            return Ok(None);
        };
        value
            .parse::<Timestamp>()
            .map(Some)
            .map_err(|_| NodeClaimError::TerminationTimestamp {
                nodeclaim: self.name.clone(),
                value: value.clone(),
            })
    }

    /// Taints the node with `karpenter.sh/disrupted:NoSchedule`; false when it is gone.
    async fn taint(&self, node_name: &str) -> Result<bool, NodeClaimError> {
        match self
            .deps
            .cluster
            .update_node(node_name, &taint_for_termination)
            .await
        {
            Ok(_) => {
                tracing::info!(
                    taint.Key = labels::DISRUPTED_TAINT,
                    taint.Value = "",
                    taint.Effect = "NoSchedule",
                    "tainted node"
                );
                Ok(true)
            }
            Err(ClusterError::NotFound { .. }) => Ok(false),
            Err(source) => Err(NodeClaimError::Write {
                what: "tainting the node",
                nodeclaim: self.name.clone(),
                source,
            }),
        }
    }

    async fn terminate_node(
        &mut self,
        nodeclaim: &Arc<SlimNodeClaim>,
        node: &SlimNode,
        termination_time: Option<Timestamp>,
    ) -> Result<NodeProgress, NodeClaimError> {
        let node_name = node.metadata.name.clone().unwrap_or_default();
        // The reconcile's context names the Node once the NodeClaim records it; a node found
        // before that is named from here on (node.termination's lines carry their Node).
        let named = nodeclaim
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            == Some(node_name.as_str());
        if !named {
            tracing::Span::current().record("Node", node_name.as_str());
        }
        let write_error = |what: &'static str, source: ClusterError| NodeClaimError::Write {
            what,
            nodeclaim: self.name.clone(),
            source,
        };
        if node.metadata.deletion_timestamp.is_none() {
            match self.deps.cluster.delete_node(&node_name).await {
                Ok(Deletion::Terminating) => {}
                Ok(Deletion::Deleted | Deletion::NotFound) | Err(ClusterError::NotFound { .. }) => {
                    return Ok(NodeProgress::Released);
                }
                Err(source) => return Err(write_error("deleting the node", source)),
            }
        }
        if !has_finalizer(&node.metadata) {
            // Someone else's finalizer holds the node; it goes when they let it.
            return Ok(NodeProgress::Waiting(None));
        }
        if !is_tainted(node) && !self.taint(&node_name).await? {
            return Ok(NodeProgress::Released);
        }
        if let Some(deadline) = termination_time
            && !std::mem::replace(&mut self.reported.node_grace_event, true)
        {
            self.publish(events::node_grace_period_expiring(node, &rfc3339(deadline)))
                .await;
        }
        let now = self.now();
        let pods = self.deps.view.pods_on_node(&node_name);
        let plan = drain::plan(&pods, now, termination_time);
        let retry = self
            .carry_out(nodeclaim, node, &plan, termination_time)
            .await?;
        if !plan.is_drained() {
            self.report_drain_blocked(node, &plan).await;
            // A node whose kubelet is gone and whose instance is gone cannot drain: release it
            // (Karpenter, like the cloud node lifecycle controller, trusts a Ready node over
            // the cloud's word).
            if !is_ready(node)
                && let Some(id) = provider_id(nodeclaim)
            {
                match self.deps.cloud.get(id).await {
                    Err(CloudProviderError::NodeClaimNotFound { .. }) => {
                        self.instance_gone = true;
                        self.release_node(node).await?;
                        return Ok(NodeProgress::Released);
                    }
                    Err(source) => {
                        return Err(NodeClaimError::Cloud {
                            what: "looking up the instance of a node that does not drain",
                            nodeclaim: self.name.clone(),
                            source: Box::new(source),
                        });
                    }
                    Ok(_) => {}
                }
            }
            let deadline = plan.next_deadline.map(|at| until(now, at));
            return Ok(NodeProgress::Waiting(soonest(
                Some(DRAIN_POLL),
                soonest(retry, deadline),
            )));
        }
        if !std::mem::replace(&mut self.reported.drained, true) {
            self.deps
                .metrics
                .node_drained(label(nodeclaim, labels::NODEPOOL));
        }
        if let Some(wait) = self.wait_for_volumes(&node_name, &pods, now, termination_time) {
            return Ok(NodeProgress::Waiting(wait));
        }
        if !self.ensure_instance_terminated(nodeclaim).await? {
            return Ok(NodeProgress::Waiting(Some(INSTANCE_TERMINATION_POLL)));
        }
        self.release_node(node).await?;
        Ok(NodeProgress::Released)
    }

    /// The volumes of the pods that left detach before the instance goes, unless the
    /// termination time has passed (Karpenter's `ensureVolumesDetached`): `Some` when to look
    /// again while attachments remain.
    fn wait_for_volumes(
        &mut self,
        node_name: &str,
        pods: &[Arc<karpenter_core::apis::SlimPod>],
        now: Timestamp,
        termination_time: Option<Timestamp>,
    ) -> Option<Next> {
        if self.instance_gone || termination_time.is_some_and(|deadline| now >= deadline) {
            return None;
        }
        let attachments = self.deps.view.volume_attachments_of_node(node_name);
        let blocking = volumes::blocking_attachments(&attachments, pods, now, |ns, name| {
            self.deps.view.pvc(ns, name)
        });
        if blocking.is_empty() {
            return None;
        }
        if !std::mem::replace(&mut self.reported.waiting_for_volumes, true) {
            tracing::debug!(
                volumeattachments = ?blocking,
                "waiting for volume attachments to be removed"
            );
        }
        let deadline = termination_time.map(|at| until(now, at));
        Some(soonest(Some(DRAIN_POLL), deadline))
    }

    /// Deletes the pods that must go now and evicts the current group; returns when the next
    /// refused eviction may be retried.
    async fn carry_out(
        &mut self,
        nodeclaim: &SlimNodeClaim,
        node: &SlimNode,
        plan: &DrainPlan,
        termination_time: Option<Timestamp>,
    ) -> Result<Next, NodeClaimError> {
        let deadline = termination_time.map(rfc3339).unwrap_or_default();
        for deletion in &plan.delete {
            let pod = &deletion.pod;
            match self
                .deps
                .cluster
                .delete_pod(&pod.namespace, &pod.name, Some(deletion.grace_seconds))
                .await
            {
                Ok(_) | Err(ClusterError::NotFound { .. }) => {
                    tracing::debug!(
                        namespace = %pod.namespace,
                        "name" = %pod.name,
                        pod.terminationGracePeriodSeconds = deletion.pod_grace_seconds,
                        delete.gracePeriodSeconds = deletion.grace_seconds,
                        nodeclaim.terminationTime = %deadline,
                        "deleting pod"
                    );
                    self.publish(events::pod_deleted_for_grace_period(
                        pod,
                        deletion.grace_seconds,
                        deletion.pod_grace_seconds,
                        &deadline,
                    ))
                    .await;
                }
                Err(source) => {
                    return Err(NodeClaimError::Write {
                        what: "deleting a pod at the termination time",
                        nodeclaim: self.name.clone(),
                        source,
                    });
                }
            }
        }
        self.evictions.retain(|key, _| plan.evict.contains(key));
        let reason = condition(nodeclaim, cond::DISRUPTION_REASON)
            .filter(|c| c.status == ConditionStatus::True)
            .map_or_else(|| FORCEFUL_TERMINATION.to_owned(), |c| c.reason.clone());
        let mut retry: Next = None;
        for pod in &plan.evict {
            let now = Instant::now();
            if let Some(backoff) = self.evictions.get(pod)
                && backoff.next > now
            {
                retry = soonest(retry, Some(backoff.next - now));
                continue;
            }
            let outcome = self.deps.cluster.evict_pod(&pod.namespace, &pod.name).await;
            let refused = match outcome {
                Ok(Eviction::Evicted) => {
                    self.deps.metrics.eviction_request(200);
                    self.deps.metrics.pod_drained(&reason);
                    self.publish(events::evicted(pod, &reason)).await;
                    false
                }
                Ok(Eviction::Gone) => {
                    self.deps.metrics.eviction_request(404);
                    false
                }
                Ok(Eviction::Blocked { message }) => {
                    self.deps.metrics.eviction_request(429);
                    self.note_blocked_eviction(node, pod, &message).await;
                    true
                }
                Err(error) => {
                    self.deps.metrics.eviction_request(http_code(&error));
                    tracing::error!(
                        Pod = %format_args!("{}/{}", pod.namespace, pod.name),
                        error = logs::err(&error),
                        "failed evicting pod"
                    );
                    true
                }
            };
            if refused {
                let attempts = self.evictions.get(pod).map_or(0, |b| b.attempts);
                let delay = EVICTION_BACKOFF.delay(attempts);
                self.evictions.insert(
                    pod.clone(),
                    EvictionBackoff {
                        attempts: attempts.saturating_add(1),
                        next: now + delay,
                    },
                );
                retry = soonest(retry, Some(delay));
            } else {
                self.evictions.remove(pod);
            }
        }
        Ok(retry)
    }

    async fn note_blocked_eviction(&mut self, node: &SlimNode, pod: &PodKey, message: &str) {
        tracing::debug!(
            Pod = %format_args!("{}/{}", pod.namespace, pod.name),
            message,
            "eviction blocked by a pod disruption budget"
        );
        if self.drain_event_due() {
            let why = format!(
                "evicting pod {}/{} violates a PDB: {message}",
                pod.namespace, pod.name
            );
            self.publish(events::failed_draining(node, &why)).await;
        }
    }

    async fn report_drain_blocked(&mut self, node: &SlimNode, plan: &DrainPlan) {
        if self.drain_event_due() {
            let why = if plan.do_not_disrupt > 0 {
                format!(
                    "{} pods are waiting to be evicted ({} with the {} annotation)",
                    plan.waiting,
                    plan.do_not_disrupt,
                    labels::DO_NOT_DISRUPT
                )
            } else {
                format!("{} pods are waiting to be evicted", plan.waiting)
            };
            self.publish(events::failed_draining(node, &why)).await;
        }
    }

    fn drain_event_due(&mut self) -> bool {
        let now = Instant::now();
        if self
            .last_drain_event
            .is_some_and(|last| now.duration_since(last) < DRAIN_EVENT_INTERVAL)
        {
            return false;
        }
        self.last_drain_event = Some(now);
        true
    }

    /// Deletes the instance until the cloud reports it gone; sets `InstanceTerminating`.
    async fn ensure_instance_terminated(
        &mut self,
        nodeclaim: &Arc<SlimNodeClaim>,
    ) -> Result<bool, NodeClaimError> {
        if self.instance_gone {
            return Ok(true);
        }
        let gone = match self.deps.cloud.delete(&nodeclaim.to_nodeclaim()).await {
            Ok(()) => false,
            Err(CloudProviderError::NodeClaimNotFound { .. }) => true,
            Err(source) => {
                return Err(NodeClaimError::Cloud {
                    what: "terminating the instance",
                    nodeclaim: self.name.clone(),
                    source: Box::new(source),
                });
            }
        };
        if !is_true(nodeclaim, cond::INSTANCE_TERMINATING) {
            self.set_conditions(nodeclaim, "writing the instance termination", &|set| {
                set.set_true(cond::INSTANCE_TERMINATING);
            })
            .await?;
        }
        self.instance_gone = gone;
        Ok(gone)
    }

    /// Removes our finalizer from the node (the instance is gone or unreachable).
    async fn release_node(&mut self, node: &SlimNode) -> Result<(), NodeClaimError> {
        let change = |node: &mut Node| remove_finalizer(&mut node.metadata.finalizers);
        match self.deps.cluster.update_node_from(node, &change).await {
            Ok(_) => {}
            Err(ClusterError::NotFound { .. }) => return Ok(()),
            Err(source) => {
                return Err(NodeClaimError::Write {
                    what: "removing the node's finalizer",
                    nodeclaim: self.name.clone(),
                    source,
                });
            }
        }
        if std::mem::replace(&mut self.reported.node_released, true) {
            return Ok(());
        }
        let now = self.now();
        let deleted = node
            .metadata
            .deletion_timestamp
            .as_ref()
            .map_or(now, |t| t.0);
        let created = node
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now, |t| t.0);
        let nodepool = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL))
            .map_or("", String::as_str);
        self.deps
            .metrics
            .node_terminated(nodepool, elapsed(deleted, now), elapsed(created, now));
        tracing::info!("deleted node");
        Ok(())
    }

    /// Removes the NodeClaim's finalizer: the instance is gone.
    async fn release_nodeclaim(&mut self, nodeclaim: &SlimNodeClaim) -> Result<(), NodeClaimError> {
        let change =
            |nodeclaim: &mut NodeClaim| remove_finalizer(&mut nodeclaim.metadata.finalizers);
        if self
            .write_nodeclaim(nodeclaim, "removing the termination finalizer", &change)
            .await?
            .is_none()
            || std::mem::replace(&mut self.reported.nodeclaim_released, true)
        {
            return Ok(());
        }
        let now = self.now();
        let deleted = nodeclaim
            .metadata
            .deletion_timestamp
            .as_ref()
            .map_or(now, |t| t.0);
        let instance = condition(nodeclaim, cond::INSTANCE_TERMINATING)
            .filter(|c| c.status == ConditionStatus::True)
            .map(|c| elapsed(c.last_transition_time.0, now));
        self.deps.metrics.nodeclaim_terminated(
            label(nodeclaim, labels::NODEPOOL),
            label(nodeclaim, labels::CAPACITY_TYPE),
            elapsed(deleted, now),
            instance,
        );
        tracing::info!("deleted nodeclaim");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_termination_taint_replaces_a_disrupted_taint_with_another_effect() {
        let mut node = Node::default();
        node.spec.get_or_insert_default().taints = Some(vec![ApiTaint {
            key: labels::DISRUPTED_TAINT.into(),
            effect: "NoExecute".into(),
            ..ApiTaint::default()
        }]);
        taint_for_termination(&mut node);
        assert!(is_tainted(&SlimNode::from(node.clone())));
        assert_eq!(node.spec.unwrap().taints.unwrap().len(), 1);
    }

    #[test]
    fn termination_times_are_written_to_the_second() {
        let at = Timestamp::from_millisecond(1_700_000_000_500).unwrap();
        assert_eq!(rfc3339(at), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn eviction_errors_map_to_http_codes() {
        let throttled = ClusterError::Throttled {
            kind: crate::ports::cluster::ObjectKind::Pod,
            name: "p".into(),
            message: String::new(),
        };
        assert_eq!(http_code(&throttled), 429);
    }
}
