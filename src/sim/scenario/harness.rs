//! The harness acting on the simulated cluster each tick, and what it records.
//!
//! ```text
//! tick(now): due events (spot interruption warnings, reclaims two minutes later, node
//!   failures, AWS faults, PodDisruptionBudgets removed) -> workloads (create/delete pods,
//!   evictions per replica) -> kubelet (nodes, pod status)
//!   -> scheduler (bindings) -> billing -> NodeClaims seen, peak nodes
//! progress_line(now): the lower bound of the cost, and a line for the progress sink
//! report(now): the Recorder's counts, pending pods with Karpenter's last word on each, kwok's
//!   instances, the actor totals from the daemons' metrics
//! ```
//!
//! Which instances an event hits is chosen in the seed's order ([`seeded_order`]), so runs
//! replay.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_actors::messages::WatchedKind;
use karpenter_actors::ports::cloud_provider::{CloudProvider, parse_provider_id};
use karpenter_actors::ports::cluster_view::ChangeMark;
use karpenter_actors::ports::cluster_view::ClusterView;
use karpenter_actors::ports::ec2::InstanceState;
use karpenter_actors::providers::pricing::is_estimated_price;
use karpenter_config::format_go_duration;
use karpenter_core::apis::{SharedPodSpec, SlimPod};
use karpenter_core::domain::instance_type::CapacityType;
use karpenter_core::domain::scheduling::{
    CostLowerBound, NodePoolInput, PodShape, SchedulingPod, cost_lower_bound_of_shapes,
};
use kube::{Api, Client, ResourceExt as _};

use super::file::{FailureMode, Share};
use super::load::LoadedScenario;
use super::run::ProgressSink;
use crate::http::MetricsRegistries;
use crate::sim::binder::{self, FakeScheduler};
use crate::sim::clock::SimClock;
use crate::sim::kubelet::{FakeKubelet, KubeletConfig, KubeletDeps};
use crate::sim::report::{
    self, EvictionsReport, Latency, NodesReport, PendingPod, PodsReport, Recorder, Report,
};
use crate::sim::workloads::{APP_LABEL, Workloads};
use crate::sim::world::KwokAws;

pub const HARNESS_TICK: Duration = Duration::from_secs(1);
/// EC2 reclaims a spot instance two minutes after its interruption warning.
pub const SPOT_RECLAIM_AFTER: Duration = Duration::from_mins(2);
/// A deterministic order of `ids` for the seed (which instances an event hits).
fn seeded_order(seed: u64, salt: &str, mut ids: Vec<String>) -> Vec<String> {
    ids.sort_by_cached_key(|id| {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (seed, salt, id).hash(&mut hasher);
        (hasher.finish(), id.clone())
    });
    ids
}

/// The cheapest $/h any placement of the live workload pods could cost, each pod priced over
/// the instance types and offerings its NodePools and its own constraints allow (see
/// [`cost_lower_bound`]); `None` when the NodePools' instance types cannot be read.
async fn lower_bound(view: &dyn ClusterView, cloud: &dyn CloudProvider) -> Option<CostLowerBound> {
    let all = view.pods();
    let mut pods: Vec<&SlimPod> = all
        .iter()
        .map(|p| &**p)
        .filter(|p| p.labels().contains_key(APP_LABEL) && p.metadata.deletion_timestamp.is_none())
        .collect();
    if pods.is_empty() {
        return Some(CostLowerBound::default());
    }
    // Pods in name order, so the sums add up in the same order on every run.
    pods.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    let shapes = pod_shapes(&pods);
    let mut pools = view.nodepools();
    pools.sort_by_key(|p| p.name_any());
    let mut inputs = Vec::new();
    for pool in pools {
        let types = cloud.instance_types(&pool).await.ok()?;
        inputs.push(NodePoolInput::from_node_pool(&pool, types.to_vec()).ok()?);
    }
    Some(cost_lower_bound_of_shapes(
        shapes.iter().map(|shape| &**shape),
        &inputs,
    ))
}

/// The scheduling shape of each pod that converts, in order. A shape depends only on the pod's
/// spec (shared among pods with an equal one), namespace and labels, so a workload's pods are
/// converted once: the bound runs every progress line over every pod of the cluster.
fn pod_shapes(pods: &[&SlimPod]) -> Vec<Arc<PodShape>> {
    type ShapeKey<'a> = (
        *const SharedPodSpec,
        Option<&'a str>,
        Option<&'a BTreeMap<String, String>>,
    );
    let mut converted: HashMap<ShapeKey<'_>, Option<Arc<PodShape>>> = HashMap::new();
    pods.iter()
        .filter_map(|pod| {
            let spec = pod.spec.as_ref()?;
            let key = (
                Arc::as_ptr(&spec.shared),
                pod.metadata.namespace.as_deref(),
                pod.metadata.labels.as_ref(),
            );
            converted
                .entry(key)
                .or_insert_with(|| SchedulingPod::from_pod(pod).ok().map(|p| p.shape))
                .clone()
        })
        .collect()
}

/// $/h of the instances EC2 bills now (pending and running).
fn billed_per_hour(world: &KwokAws) -> f64 {
    world.ec2.billed_per_hour()
}

/// Everything a running simulation holds.
pub(super) struct Sim<'a> {
    pub(super) loaded: LoadedScenario,
    pub(super) client: Client,
    pub(super) view: Arc<dyn ClusterView>,
    pub(super) world: KwokAws,
    pub(super) cloud: Arc<dyn CloudProvider>,
    pub(super) queue_url: String,
    kubelet: FakeKubelet,
    scheduler: FakeScheduler,
    workloads: Workloads,
    recorder: Recorder,
    /// NodeClaims and nodes as the recorder last counted them.
    counted: ChangeMark<2>,
    /// Instances warned, and when EC2 reclaims them.
    reclaims: Vec<(Duration, String)>,
    next_interruption: usize,
    next_failure: usize,
    next_ami_release: usize,
    next_fault: usize,
    /// PodDisruptionBudgets to delete: (when, namespace, name), in time order.
    budget_removals: Vec<(Duration, String, String)>,
    progress: Option<ProgressSink<'a>>,
}

/// The parts of the cluster the harness acts on.
pub(super) struct Harness {
    pub(super) client: Client,
    pub(super) view: Arc<dyn ClusterView>,
    pub(super) world: KwokAws,
    pub(super) cloud: Arc<dyn CloudProvider>,
    pub(super) queue_url: String,
}

impl<'a> Sim<'a> {
    pub(super) fn new(
        loaded: LoadedScenario,
        harness: Harness,
        clock: SimClock,
        progress: Option<ProgressSink<'a>>,
    ) -> Self {
        let scenario = &loaded.scenario;
        let kubelet = FakeKubelet::new(
            KubeletDeps {
                client: harness.client.clone(),
                ec2: Arc::clone(&harness.world.ec2),
                view: Arc::clone(&harness.view),
                clock: Arc::new(clock),
                region: scenario.region.clone(),
            },
            KubeletConfig::from(&scenario.kwok),
        );
        let scheduler = FakeScheduler::new(
            harness.client.clone(),
            Arc::clone(&harness.view),
            Arc::new(clock),
        );
        let workloads = Workloads::new(
            harness.client.clone(),
            Arc::clone(&harness.view),
            loaded.workloads.clone(),
        );
        let mut budget_removals: Vec<(Duration, String, String)> = scenario
            .pod_disruption_budgets
            .iter()
            .filter_map(|b| Some((b.until?, b.namespace.clone(), b.name.clone())))
            .collect();
        budget_removals.sort();
        Self {
            loaded,
            client: harness.client,
            view: harness.view,
            world: harness.world,
            cloud: harness.cloud,
            queue_url: harness.queue_url,
            kubelet,
            scheduler,
            workloads,
            recorder: Recorder::default(),
            counted: ChangeMark::new([WatchedKind::NodeClaim, WatchedKind::Node]),
            reclaims: Vec::new(),
            next_interruption: 0,
            next_failure: 0,
            next_ami_release: 0,
            next_fault: 0,
            budget_removals,
            progress,
        }
    }

    pub(super) fn say(&mut self, line: &str) {
        if let Some(progress) = self.progress.as_mut() {
            progress(line);
        }
    }

    /// Running instances matching an optional NodePool (and capacity type), in the seed's order.
    fn candidates(
        &self,
        salt: &str,
        node_pool: Option<&str>,
        spot_only: bool,
        registered: bool,
    ) -> Vec<String> {
        let ids: Vec<String> = self
            .world
            .ec2
            .instances()
            .into_iter()
            .filter(|i| i.state == InstanceState::Running)
            .filter(|i| !spot_only || i.capacity_type == CapacityType::Spot)
            .filter(|i| node_pool.is_none_or(|p| nodepool_of(i) == Some(p)))
            .filter(|i| !registered || self.kubelet.node_of(&i.id).is_some())
            .map(|i| i.id)
            .collect();
        seeded_order(self.loaded.scenario.seed, salt, ids)
    }

    /// Whether Karpenter has let go of an instance: it is terminating, or its NodeClaim is gone
    /// or being deleted.
    fn released(&self, instance_id: &str) -> bool {
        let terminating = self.world.ec2.instances().iter().any(|i| {
            i.id == instance_id
                && matches!(
                    i.state,
                    InstanceState::ShuttingDown | InstanceState::Terminated
                )
        });
        if terminating {
            return true;
        }
        !self.view.nodeclaims().iter().any(|claim| {
            claim.metadata.deletion_timestamp.is_none()
                && claim
                    .status
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .and_then(|id| parse_provider_id(id).ok())
                    .is_some_and(|(_, id)| id == instance_id)
        })
    }

    /// kwok publishes the AMI releases that are due.
    fn release_amis(&mut self, releases: &[Duration], now: Duration) {
        while let Some(at) = releases.get(self.next_ami_release) {
            if *at > now {
                break;
            }
            self.next_ami_release += 1;
            let images = self.world.release_amis();
            let ids: Vec<&str> = images.values().map(String::as_str).collect();
            self.say(&format!(
                "[{:>6}] AMI release published: {}",
                format_go_duration(now),
                ids.join(", ")
            ));
        }
    }

    async fn fire_events(&mut self, now: Duration) {
        // Reclaims of warned spot instances.
        let due: Vec<String> = self
            .reclaims
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, id)| id.clone())
            .collect();
        self.reclaims.retain(|(at, _)| *at > now);
        for id in due {
            if self.released(&id) {
                self.recorder.interruptions.handled += 1;
            } else {
                self.recorder.interruptions.reclaimed_unhandled += 1;
            }
            self.world.ec2.reclaim(&id);
        }
        let scenario = self.loaded.scenario.clone();
        while let Some(event) = scenario.interruptions.get(self.next_interruption) {
            if event.at > now {
                break;
            }
            self.next_interruption += 1;
            let salt = format!("interruption-{}", self.next_interruption);
            let candidates = self.candidates(&salt, event.node_pool.as_deref(), true, false);
            let hit = share_of(event.share, candidates.len());
            for id in candidates.into_iter().take(hit) {
                if self.world.ec2.interrupt_spot(&id).await.is_ok() {
                    self.recorder.interruptions.warnings += 1;
                    self.reclaims.push((now + SPOT_RECLAIM_AFTER, id));
                }
            }
            self.say(&format!(
                "[{:>6}] {hit} spot interruption warning(s) sent",
                format_go_duration(now)
            ));
        }
        while let Some(event) = scenario.node_failures.get(self.next_failure) {
            if event.at > now {
                break;
            }
            self.next_failure += 1;
            let salt = format!("failure-{}", self.next_failure);
            let candidates = self.candidates(&salt, event.node_pool.as_deref(), false, true);
            let count = usize::try_from(event.count).unwrap_or(usize::MAX);
            let mut failed = 0;
            for id in candidates.into_iter().take(count) {
                let done = match event.mode {
                    FailureMode::Terminate => self.world.ec2.reclaim(&id),
                    FailureMode::NotReady => self.kubelet.fail(&id),
                };
                if done {
                    failed += 1;
                }
            }
            self.recorder.faults.node_failures += failed;
            self.say(&format!(
                "[{:>6}] {failed} node failure(s) injected",
                format_go_duration(now)
            ));
        }
        self.release_amis(&scenario.ami_releases, now);
        while self
            .budget_removals
            .first()
            .is_some_and(|(until, _, _)| *until <= now)
        {
            let (_, namespace, name) = self.budget_removals[0].clone();
            let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), &namespace);
            match api.delete(&name, &kube::api::DeleteParams::default()).await {
                Ok(_) => {
                    self.budget_removals.remove(0);
                    self.say(&format!(
                        "[{:>6}] PodDisruptionBudget {namespace}/{name} deleted",
                        format_go_duration(now)
                    ));
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    self.budget_removals.remove(0);
                }
                Err(error) => {
                    // Retried next tick.
                    tracing::debug!(%error, %name, "deleting a PodDisruptionBudget failed");
                    self.recorder.harness.workload_errors += 1;
                    break;
                }
            }
        }
        while let Some(fault) = scenario.chaos.aws.get(self.next_fault) {
            if fault.at > now {
                break;
            }
            self.next_fault += 1;
            if self
                .world
                .fail_next(fault.service, &fault.operation, fault.count, &fault.code)
                .is_ok()
            {
                self.recorder.faults.aws_faults_scheduled += 1;
            }
        }
    }

    pub(super) async fn tick(&mut self, now: Duration) {
        self.fire_events(now).await;
        let step = self.workloads.tick(now).await;
        self.recorder.created(&step.created, now);
        self.recorder.scaled_down(&step.deleted);
        self.recorder.harness.workload_errors += step.errors;
        let kubelet = self.kubelet.tick().await;
        self.recorder.harness.kubelet_errors += kubelet.errors;
        let bound = self.scheduler.tick().await;
        self.recorder.bound(&bound.bound, now);
        self.recorder.harness.scheduler_errors += bound.errors;
        self.recorder
            .bill(billed_per_hour(&self.world), HARNESS_TICK);
        let counts = self.counted.read(self.view.as_ref());
        if !self.counted.unchanged(counts) {
            for claim in self.view.nodeclaims() {
                let name = claim.metadata.name.as_deref().unwrap_or_default();
                if !self.recorder.nodeclaims_seen.contains(name) {
                    self.recorder.nodeclaims_seen.insert(name.to_owned());
                }
            }
            self.recorder.peak_nodes = self.recorder.peak_nodes.max(self.view.nodes().len());
            self.counted.mark(counts);
        }
    }

    pub(super) async fn progress_line(&mut self, now: Duration) {
        let bound = lower_bound(self.view.as_ref(), self.cloud.as_ref()).await;
        self.recorder.lower_bound(bound.as_ref(), now);
        if self.progress.is_none() {
            return;
        }
        let pods: Vec<Arc<SlimPod>> = self
            .view
            .pods()
            .into_iter()
            .filter(|p| p.labels().contains_key(APP_LABEL))
            .collect();
        let bound_pods = pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        let nodes = self.view.nodes();
        let ready = nodes.iter().filter(|n| binder::is_schedulable(n)).count();
        let line = format!(
            "[{:>6}] pods {bound_pods} bound, {} pending | nodes {ready} ready of {} | nodeclaims {} | ${:.2}/h, ${:.2} spent",
            format_go_duration(now),
            pods.len() - bound_pods,
            nodes.len(),
            self.view.nodeclaims().len(),
            billed_per_hour(&self.world),
            self.recorder.spent(),
        );
        self.say(&line);
    }

    /// The last word on each pending pod: Karpenter's latest event about it, else the
    /// scheduler's condition. Events are read only when a pod is pending, a page at a time,
    /// keeping only those about pending pods (a 5k-node run has tens of thousands).
    async fn pending_pods(&self) -> Vec<PendingPod> {
        let pending: Vec<Arc<SlimPod>> = self
            .view
            .pods()
            .into_iter()
            .filter(|p| p.labels().contains_key(APP_LABEL) && binder::is_pending(p))
            .collect();
        if pending.is_empty() {
            return Vec::new();
        }
        let keys: BTreeSet<(String, String)> = pending
            .iter()
            .map(|p| (p.namespace().unwrap_or_default(), p.name_any()))
            .collect();
        let latest = self.latest_pod_events(&keys).await;
        let mut pending: Vec<PendingPod> = pending
            .iter()
            .map(|p| {
                let key = (p.namespace().unwrap_or_default(), p.name_any());
                let reason = latest.get(&key).map_or_else(
                    || {
                        if binder::is_marked_unschedulable(p) {
                            "Unschedulable: no Karpenter event yet".to_owned()
                        } else {
                            "not seen by the scheduler yet".to_owned()
                        }
                    },
                    |(_, text)| text.clone(),
                );
                PendingPod {
                    pod: format!("{}/{}", key.0, key.1),
                    reason,
                }
            })
            .collect();
        pending.sort_by(|a, b| a.pod.cmp(&b.pod));
        pending
    }

    /// The latest event (its time, then `reason: message`) about each pod of `pods`.
    async fn latest_pod_events(
        &self,
        pods: &BTreeSet<(String, String)>,
    ) -> BTreeMap<(String, String), (String, String)> {
        const PAGE: u32 = 500;
        let events: Api<Event> = Api::all(self.client.clone());
        let mut latest: BTreeMap<(String, String), (String, String)> = BTreeMap::new();
        let mut params = kube::api::ListParams::default().limit(PAGE);
        loop {
            let Ok(list) = events.list(&params).await else {
                break;
            };
            for event in list.items {
                let involved = &event.involved_object;
                if involved.kind.as_deref() != Some("Pod") {
                    continue;
                }
                let key = (
                    involved.namespace.clone().unwrap_or_default(),
                    involved.name.clone().unwrap_or_default(),
                );
                if !pods.contains(&key) {
                    continue;
                }
                let stamp = event
                    .last_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
                    .or_else(|| event.event_time.as_ref().map(|t| t.0.to_string()))
                    .unwrap_or_default();
                let text = format!(
                    "{}: {}",
                    event.reason.unwrap_or_default(),
                    event.message.unwrap_or_default()
                );
                match latest.get(&key) {
                    Some((previous, _)) if *previous > stamp => {}
                    _ => {
                        latest.insert(key, (stamp, text));
                    }
                }
            }
            match list.metadata.continue_.filter(|token| !token.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        latest
    }

    pub(super) async fn report(
        &mut self,
        now: Duration,
        registries: &MetricsRegistries,
        actor_faults_injected: usize,
        escalated: bool,
        dropped: u64,
    ) -> Report {
        let bound = lower_bound(self.view.as_ref(), self.cloud.as_ref()).await;
        self.recorder.lower_bound(bound.as_ref(), now);
        let pending = self.pending_pods().await;
        let mut pending_reasons: BTreeMap<String, usize> = BTreeMap::new();
        for pod in &pending {
            *pending_reasons.entry(pod.reason.clone()).or_default() += 1;
        }
        let running = self
            .view
            .pods()
            .iter()
            .filter(|p| {
                p.labels().contains_key(APP_LABEL)
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .count();
        let instances = self.world.ec2.instances();
        let (by_type, launched, terminated, running_instances) =
            report::instance_counts(&instances);
        let mut cost = self.recorder.cost(billed_per_hour(&self.world));
        cost.estimated_price_types = instances
            .iter()
            .map(|i| i.instance_type.as_str())
            .filter(|t| is_estimated_price(t))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(str::to_owned)
            .collect();
        // The report reads counters only: the per-pod and per-node families the scrape hooks
        // build would cost a series per object for nothing.
        let metrics = registries.encode_as_they_stand().unwrap_or_default();
        self.recorder.interruptions.left_in_queue = self.world.sqs.depth(&self.queue_url);
        self.recorder.faults.actor_faults_injected = actor_faults_injected;
        self.recorder.harness.dropped_changes = dropped;
        let scenario = &self.loaded.scenario;
        Report {
            scenario: scenario.name.clone(),
            seed: scenario.seed,
            simulated_seconds: now.as_secs(),
            pods: PodsReport {
                requested: self.recorder.requested,
                scheduled: self.recorder.scheduled,
                scaled_down: self.recorder.scaled_down,
                running_at_end: running,
                pending_at_end: pending.len(),
                pending_reasons,
                pending: pending
                    .into_iter()
                    .take(report::MAX_LISTED_PENDING)
                    .collect(),
                evictions: EvictionsReport::of(self.workloads.replicas_by_evictions()),
            },
            time_to_schedule: Latency::of(self.recorder.latencies()),
            nodes: NodesReport {
                launched,
                terminated,
                running_at_end: running_instances,
                nodeclaims_created: self.recorder.nodeclaims_seen.len(),
                peak_nodes: self.recorder.peak_nodes,
                by_type,
                disrupted: report::disrupted_by_reason(&metrics),
            },
            cost,
            interruptions: self.recorder.interruptions.clone(),
            faults: self.recorder.faults.clone(),
            actors: report::actor_totals(&metrics),
            escalated,
            harness: self.recorder.harness.clone(),
            disruptions: Vec::new(),
        }
    }
}

/// The NodePool an instance was launched for (its tag).
fn nodepool_of(instance: &karpenter_actors::ports::ec2::Instance) -> Option<&str> {
    instance
        .tags
        .get(karpenter_core::apis::labels::TAG_NODEPOOL)
        .map(String::as_str)
}

fn share_of(share: Share, candidates: usize) -> usize {
    share.of(candidates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, app: &str, cpu: &str) -> SlimPod {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "namespace": "default", "labels": { APP_LABEL: app } },
            "spec": { "containers": [{ "name": "c", "resources": { "requests": { "cpu": cpu } } }] },
        }))
        .unwrap()
    }

    #[test]
    fn pod_shapes_are_each_pods_own_conversion_made_once_per_spec_and_labels() {
        let pods = [
            pod("a-1", "a", "1"),
            pod("a-2", "a", "1"),
            pod("b-1", "b", "1"),
            pod("c-1", "a", "2"),
        ];
        let refs: Vec<&SlimPod> = pods.iter().collect();
        let shapes = pod_shapes(&refs);
        assert_eq!(shapes.len(), pods.len());
        for (pod, shape) in pods.iter().zip(&shapes) {
            assert_eq!(**shape, *SchedulingPod::from_pod(pod).unwrap().shape);
        }
        assert!(
            Arc::ptr_eq(&shapes[0], &shapes[1]),
            "one workload, one conversion"
        );
        assert_ne!(shapes[0], shapes[2], "other labels, another shape");
        assert_ne!(shapes[0], shapes[3], "another spec, another shape");
    }
}
