//! The fake kubelet (and the node controllers around it) for every machine: what happens on a
//! real node between EC2 saying `running` and kube-scheduler binding pods there.
//!
//! The machines come from one of two places ([`Machines`]): kwok's EC2 instances (the
//! simulation, where EC2 is in-process), or the NodeClaims that have a provider id (the
//! cluster-only server of the process-level harness, where EC2 is somewhere else, e.g. moto):
//! there a NodeClaim stands for its instance, `running` while it exists and gone once it is, as
//! a real kubelet started by the user data Karpenter rendered from that NodeClaim.
//!
//! Per machine, one [`FakeKubelet::tick`] at a time:
//!
//! ```text
//! running ──registration delay──> Node created: labels, capacity, allocatable, the NodeClaim's
//!   taints and startup taints, karpenter.sh/unregistered:NoExecute, node.kubernetes.io/not-ready,
//!   Ready=False
//! ──ready delay──> Ready=True, not-ready taint removed (node lifecycle controller)
//! ──startup taint delay──> the NodeClaim's startup taints removed (their DaemonSets started)
//! shutting-down / terminated ──> Node deleted (cloud node lifecycle controller); Karpenter's
//!   finalizer, if any, holds it until Karpenter lets go
//! ```
//!
//! Also: pods bound to a Ready node are started (`Running`, `Ready=True`), and pods bound to a
//! Node that no longer exists are deleted (pod garbage collection), so their workload recreates
//! them. [`FakeKubelet::fail`] makes a node stop reporting (`Ready=Unknown` and the unreachable
//! taints, as the node lifecycle controller writes after missed heartbeats).
//!
//! Labels and taints come from the instance's NodeClaim, found by provider id, as a real kubelet
//! gets them from the user data Karpenter renders from it; capacity from the instance type
//! (kwok's catalogue resolved as Karpenter does) or, for NodeClaim machines, from the NodeClaim;
//! allocatable from the NodeClaim when it has one.
//! Reads come from the cluster store ([`ClusterView`]), writes go through the API like a
//! kubelet's; a failed write is counted and retried next tick (the state only advances on
//! success). A tick copies only the instances with something left to do, and its pod passes
//! (start, orphan collection) run only when a pod or node changed since the last complete one
//! ([`ChangeMark`]), so a settled cluster of thousands of nodes costs little per tick.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Pod, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use karpenter_actors::kwok::catalog;
use karpenter_actors::kwok::ec2::KwokEc2;
use karpenter_actors::messages::WatchedKind;
use karpenter_actors::ports::clock::Clock;
use karpenter_actors::ports::cloud_provider::{parse_provider_id, provider_id};
use karpenter_actors::ports::cluster::ClusterApi as _;
use karpenter_actors::ports::cluster_view::{ChangeMark, ClusterView};
use karpenter_actors::ports::ec2::{Instance, InstanceState, Tags};
use karpenter_actors::providers::instance_types::{
    LabelInterner, NodeClassSettings, Placement, ResolveSettings, resolve,
};
use karpenter_core::apis::labels;
use karpenter_core::apis::{LabelMap, SlimNodeClaim, SlimPod};
use karpenter_core::domain::instance_type::{CapacityType, InstanceType};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::time::Instant;

use crate::kube::cluster_api::KubeClusterApi;
use crate::sim::writes;

/// The kubelet version the fake nodes report (the emulator's Kubernetes version).
pub const KUBELET_VERSION: &str = "v1.33.0";
/// Field manager of the fake kubelet's writes.
const FIELD_MANAGER: &str = "kubelet";
/// Karpenter's default VM memory overhead (`VM_MEMORY_OVERHEAD_PERCENT`), for instances
/// without a NodeClaim.
const VM_MEMORY_OVERHEAD: f64 = 0.075;

/// The delays of a node's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubeletConfig {
    /// From `running` to the Node object.
    pub registration_delay: Duration,
    /// From registration to `Ready=True`.
    pub ready_delay: Duration,
    /// From `Ready` to the startup taints gone.
    pub startup_taint_delay: Duration,
}

impl From<&crate::sim::scenario::file::KwokSettings> for KubeletConfig {
    fn from(settings: &crate::sim::scenario::file::KwokSettings) -> Self {
        Self {
            registration_delay: settings.registration_delay,
            ready_delay: settings.ready_delay,
            startup_taint_delay: settings.startup_taint_delay,
        }
    }
}

/// What one tick did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KubeletStep {
    pub registered: usize,
    pub ready: usize,
    pub untainted: usize,
    pub deleted: usize,
    pub pods_started: usize,
    pub pods_collected: usize,
    /// Writes that failed (retried next tick).
    pub errors: usize,
}

#[derive(Debug)]
struct Tracked {
    node: String,
    running_since: Instant,
    registered_at: Option<Instant>,
    ready_at: Option<Instant>,
    startup_taints: Vec<String>,
    untainted: bool,
    deleted: bool,
    failed: bool,
}

impl Tracked {
    /// Nothing left to do while its instance runs: Ready, untainted and reporting, or its
    /// node already deleted.
    fn settled(&self) -> bool {
        self.deleted || (self.ready_at.is_some() && self.untainted && !self.failed)
    }
}

/// Where the kubelet's machines come from (see the module docs).
#[derive(Debug, Clone)]
pub enum Machines {
    /// kwok's EC2 instances.
    Kwok(Arc<KwokEc2>),
    /// The NodeClaims with a provider id, each standing for its instance.
    NodeClaims,
}

/// The fake kubelets of every machine (see the module docs).
pub struct FakeKubelet {
    nodes: Api<Node>,
    client: Client,
    cluster: KubeClusterApi,
    machines: Machines,
    view: Arc<dyn ClusterView>,
    clock: Arc<dyn Clock>,
    config: KubeletConfig,
    region: String,
    tracked: BTreeMap<String, Tracked>,
    resolved: BTreeMap<String, Option<Arc<InstanceType>>>,
    /// Pods and nodes as of the last complete start pass, with the Ready nodes it covered.
    start_mark: (ChangeMark<2>, usize),
    /// Pods and nodes as of the last complete orphan collection.
    orphan_mark: ChangeMark<2>,
    /// kwok's instance generation when the last pass found no machine with anything to do:
    /// until it changes (or a node is failed) there is none, and the pass is skipped.
    quiet_at: Option<u64>,
}

impl std::fmt::Debug for FakeKubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeKubelet")
            .field("config", &self.config)
            .field("tracked", &self.tracked.len())
            .finish_non_exhaustive()
    }
}

/// What the fake kubelet of kwok's instances is built from ([`FakeKubelet::new`]; the NodeClaim
/// machines take the same without `ec2`, [`FakeKubelet::over_nodeclaims`]).
#[derive(Clone)]
pub struct KubeletDeps {
    pub client: Client,
    pub ec2: Arc<KwokEc2>,
    pub view: Arc<dyn ClusterView>,
    pub clock: Arc<dyn Clock>,
    pub region: String,
}

impl std::fmt::Debug for KubeletDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletDeps")
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.to_owned(),
        effect: effect.to_owned(),
        ..Taint::default()
    }
}

fn condition(status: &str, reason: &str, now: Time) -> NodeCondition {
    NodeCondition {
        type_: "Ready".to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(match status {
            "True" => "kubelet is posting ready status".to_owned(),
            "Unknown" => "Kubelet stopped posting node status.".to_owned(),
            _ => "container runtime network not ready".to_owned(),
        }),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

/// The Node a kubelet registers for `instance` (see the module docs).
#[must_use]
pub fn node_for(
    instance: &Instance,
    claim: Option<&SlimNodeClaim>,
    resolved: Option<&InstanceType>,
    region: &str,
    now: Time,
) -> Node {
    let name = instance.private_dns_name.clone();
    let mut node_labels: BTreeMap<String, String> = BTreeMap::new();
    if let Some(resolved) = resolved {
        for key in [labels::ARCH, labels::OS] {
            if let Some(value) = resolved
                .requirements
                .get(key)
                .and_then(|r| r.single_value().map(str::to_owned))
            {
                node_labels.insert(key.to_owned(), value);
            }
        }
    }
    if let Some(nodepool) = instance.tags.get(labels::TAG_NODEPOOL) {
        node_labels.insert(labels::NODEPOOL.to_owned(), nodepool.clone());
    }
    node_labels.insert(
        labels::CAPACITY_TYPE.to_owned(),
        instance.capacity_type.as_str().to_owned(),
    );
    if let Some(labels) = claim.and_then(|claim| claim.metadata.labels.as_ref()) {
        node_labels.extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    node_labels.insert(labels::HOSTNAME.to_owned(), name.clone());
    node_labels.insert(
        labels::INSTANCE_TYPE.to_owned(),
        instance.instance_type.clone(),
    );
    node_labels.insert(labels::ZONE.to_owned(), instance.zone.clone());
    node_labels.insert(labels::REGION.to_owned(), region.to_owned());

    let mut taints: Vec<Taint> = Vec::new();
    if let Some(claim) = claim {
        taints.extend(claim.spec.taints.iter().map(Taint::from));
        taints.extend(claim.spec.startup_taints.iter().map(Taint::from));
    }
    taints.push(taint(labels::UNREGISTERED_TAINT, "NoExecute"));
    taints.push(taint(labels::NOT_READY_TAINT, "NoSchedule"));

    let provider_id = claim
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.provider_id.clone())
        .unwrap_or_else(|| format!("aws:///{}/{}", instance.zone, instance.id));
    let capacity: BTreeMap<String, Quantity> = resolved
        .map(|r| r.capacity.to_list())
        .or_else(|| {
            claim
                .and_then(|c| c.status.as_ref())
                .map(|s| s.capacity.to_map())
        })
        .unwrap_or_default();
    let allocatable = claim
        .and_then(|c| c.status.as_ref())
        .map(|s| s.allocatable.to_map())
        .filter(|a| !a.is_empty())
        .or_else(|| resolved.map(|r| r.allocatable().to_list()))
        .unwrap_or_else(|| capacity.clone());
    let architecture = node_labels
        .get(labels::ARCH)
        .cloned()
        .unwrap_or_else(|| labels::ARCH_AMD64.to_owned());
    Node {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(node_labels),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(provider_id),
            taints: Some(taints),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(capacity),
            allocatable: Some(allocatable),
            conditions: Some(vec![condition("False", "KubeletNotReady", now)]),
            addresses: Some(vec![NodeAddress {
                type_: "InternalDNS".to_owned(),
                address: instance.private_dns_name.clone(),
            }]),
            node_info: Some(NodeSystemInfo {
                architecture,
                operating_system: labels::OS_LINUX.to_owned(),
                kubelet_version: KUBELET_VERSION.to_owned(),
                kube_proxy_version: KUBELET_VERSION.to_owned(),
                container_runtime_version: "containerd://1.7.27".to_owned(),
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }),
    }
}

/// An instance type as kwok's catalogue describes it, resolved as Karpenter does for a
/// `NodeClass` with default settings (capacity, allocatable, labels).
#[must_use]
pub fn catalogue_instance_type(instance_type: &str, region: &str) -> Option<InstanceType> {
    let catalogue = catalog::bundled().ok()?;
    let info = catalogue
        .instance_types
        .iter()
        .find(|i| i.name == instance_type)?;
    let zones = catalogue
        .zones_of(instance_type, region)
        .cloned()
        .unwrap_or_default();
    let subnet_zones: BTreeMap<String, String> =
        zones.iter().map(|z| (z.clone(), String::new())).collect();
    let settings = ResolveSettings {
        region: region.to_owned(),
        vm_memory_overhead_percent: VM_MEMORY_OVERHEAD,
        reserved_enis: 0,
    };
    resolve(
        info,
        Placement {
            offered_zones: &zones,
            subnet_zones: &subnet_zones,
        },
        &NodeClassSettings::default(),
        &settings,
        &mut LabelInterner::default(),
    )
    .ok()
}

/// Whether a pod is bound and not yet started by its kubelet.
fn waiting_to_start(pod: &SlimPod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")
}

/// The instance a NodeClaim with a provider id stands for: its id and zone from the provider
/// id, its type, capacity type and NodePool from the labels Karpenter put on it at launch, and a
/// resource-name host name (`i-0123.us-west-2.compute.internal`). `None` until the NodeClaim has
/// both the provider id and its instance-type label (the kubelet's labels come from it).
#[must_use]
pub fn instance_of_nodeclaim(claim: &SlimNodeClaim, region: &str) -> Option<Instance> {
    let provider_id = claim.status.as_ref()?.provider_id.as_deref()?;
    let (zone, id) = parse_provider_id(provider_id).ok()?;
    let empty = LabelMap::default();
    let claim_labels = claim.metadata.labels.as_ref().unwrap_or(&empty);
    let instance_type = claim_labels
        .get(labels::INSTANCE_TYPE)
        .filter(|t| !t.is_empty())?
        .clone();
    let capacity_type = match claim_labels.get(labels::CAPACITY_TYPE).map(String::as_str) {
        Some("spot") => CapacityType::Spot,
        Some("reserved") => CapacityType::Reserved,
        _ => CapacityType::OnDemand,
    };
    let tags = claim_labels
        .get(labels::NODEPOOL)
        .map(|pool| (labels::TAG_NODEPOOL.to_owned(), pool.clone()))
        .into_iter()
        .collect();
    Some(Instance {
        id: id.to_owned(),
        instance_type,
        zone: zone.to_owned(),
        state: InstanceState::Running,
        capacity_type,
        private_dns_name: format!("{id}.{region}.compute.internal"),
        tags,
        subnet_id: String::new(),
        image_id: String::new(),
        launch_time: None,
        security_group_ids: Vec::new(),
        capacity_reservation_id: None,
    })
}

impl FakeKubelet {
    /// The kubelets of kwok's instances.
    #[must_use]
    pub fn new(deps: KubeletDeps, config: KubeletConfig) -> Self {
        let machines = Machines::Kwok(Arc::clone(&deps.ec2));
        Self::with_machines(deps, machines, config)
    }

    /// The kubelets of the NodeClaims with a provider id (`deps.ec2` is not used).
    #[must_use]
    pub fn over_nodeclaims(
        client: Client,
        view: Arc<dyn ClusterView>,
        clock: Arc<dyn Clock>,
        region: &str,
        config: KubeletConfig,
    ) -> Self {
        let reporter = kube::runtime::events::Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance: None,
        };
        Self {
            nodes: Api::all(client.clone()),
            cluster: KubeClusterApi::new(client.clone(), reporter).with_clock(Arc::clone(&clock)),
            client,
            machines: Machines::NodeClaims,
            view,
            clock,
            config,
            region: region.to_owned(),
            tracked: BTreeMap::new(),
            resolved: BTreeMap::new(),
            start_mark: (ChangeMark::new([WatchedKind::Pod, WatchedKind::Node]), 0),
            orphan_mark: ChangeMark::new([WatchedKind::Pod, WatchedKind::Node]),
            quiet_at: None,
        }
    }

    fn with_machines(deps: KubeletDeps, machines: Machines, config: KubeletConfig) -> Self {
        let mut kubelet =
            Self::over_nodeclaims(deps.client, deps.view, deps.clock, &deps.region, config);
        kubelet.machines = machines;
        kubelet
    }

    /// Every machine now: kwok's instances, or one running instance per NodeClaim with a
    /// provider id plus a terminated one for each tracked instance whose NodeClaim is gone.
    fn machines(&mut self) -> Vec<Instance> {
        match &self.machines {
            // Only the instances with something to do are copied; none while kwok's instances
            // and the tracked ones stay as they were when the last pass found none.
            Machines::Kwok(ec2) => {
                let generation = ec2.generation();
                if self.quiet_at == Some(generation) {
                    return Vec::new();
                }
                let busy = ec2.instances_where(|instance| {
                    let tracked = self.tracked.get(&instance.id);
                    match instance.state {
                        InstanceState::Running => tracked.is_none_or(|t| !t.settled()),
                        InstanceState::ShuttingDown | InstanceState::Terminated => {
                            tracked.is_some_and(|t| !t.deleted)
                        }
                        _ => false,
                    }
                });
                self.quiet_at = busy.is_empty().then_some(generation);
                busy
            }
            Machines::NodeClaims => {
                let mut claims: Vec<Instance> = self
                    .view
                    .nodeclaims()
                    .iter()
                    .filter_map(|claim| instance_of_nodeclaim(claim, &self.region))
                    .collect();
                claims.sort_by(|a, b| a.id.cmp(&b.id));
                let running: BTreeSet<String> = claims.iter().map(|i| i.id.clone()).collect();
                let gone: Vec<Instance> = self
                    .tracked
                    .iter()
                    .filter(|(id, t)| !t.deleted && !running.contains(*id))
                    .map(|(id, t)| Instance {
                        id: id.clone(),
                        instance_type: String::new(),
                        zone: String::new(),
                        state: InstanceState::Terminated,
                        capacity_type: CapacityType::OnDemand,
                        private_dns_name: t.node.clone(),
                        tags: Tags::new(),
                        subnet_id: String::new(),
                        image_id: String::new(),
                        launch_time: None,
                        security_group_ids: Vec::new(),
                        capacity_reservation_id: None,
                    })
                    .collect();
                claims.extend(gone);
                claims
            }
        }
    }

    /// The node name of an instance the kubelet registered.
    #[must_use]
    pub fn node_of(&self, instance_id: &str) -> Option<&str> {
        self.tracked
            .get(instance_id)
            .filter(|t| t.registered_at.is_some() && !t.deleted)
            .map(|t| t.node.as_str())
    }

    /// Makes a registered node stop reporting (its Node turns `Ready=Unknown` next tick and
    /// stays so). False when the instance has no registered node.
    pub fn fail(&mut self, instance_id: &str) -> bool {
        match self.tracked.get_mut(instance_id) {
            Some(t) if t.registered_at.is_some() && !t.deleted && !t.failed => {
                t.failed = true;
                t.ready_at = None;
                self.quiet_at = None;
                true
            }
            _ => false,
        }
    }

    fn resolved(&mut self, instance_type: &str) -> Option<Arc<InstanceType>> {
        if let Some(hit) = self.resolved.get(instance_type) {
            return hit.clone();
        }
        let found = catalogue_instance_type(instance_type, &self.region).map(Arc::new);
        self.resolved
            .insert(instance_type.to_owned(), found.clone());
        found
    }

    /// The instance's NodeClaim: by the view's provider-id index, else (a providerID written
    /// with another zone) by a scan matching the instance id alone.
    fn claim_of(&self, instance: &Instance) -> Option<Arc<SlimNodeClaim>> {
        if let Some(claim) = self
            .view
            .nodeclaim_by_provider_id(&provider_id(&instance.zone, &instance.id))
        {
            return Some(claim);
        }
        self.view.nodeclaims().into_iter().find(|claim| {
            claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(|id| parse_provider_id(id).ok())
                .is_some_and(|(_, id)| id == instance.id)
        })
    }

    fn now(&self) -> Time {
        Time(self.clock.now())
    }

    /// One pass over the instances and pods with something to do (see the module docs).
    pub async fn tick(&mut self) -> KubeletStep {
        let mut step = KubeletStep::default();
        let now = Instant::now();
        for instance in self.machines() {
            match instance.state {
                InstanceState::Running => self.step_running(&instance, now, &mut step).await,
                InstanceState::ShuttingDown | InstanceState::Terminated => {
                    self.step_gone(&instance.id, &mut step).await;
                }
                _ => {}
            }
        }
        self.start_pods(&mut step).await;
        self.collect_orphans(&mut step).await;
        step
    }

    async fn step_running(&mut self, instance: &Instance, now: Instant, step: &mut KubeletStep) {
        let tracked = self
            .tracked
            .entry(instance.id.clone())
            .or_insert_with(|| Tracked {
                node: instance.private_dns_name.clone(),
                running_since: now,
                registered_at: None,
                ready_at: None,
                startup_taints: Vec::new(),
                untainted: false,
                deleted: false,
                failed: false,
            });
        if tracked.deleted {
            return;
        }
        let (registered_at, ready_at, failed, untainted, running_since) = (
            tracked.registered_at,
            tracked.ready_at,
            tracked.failed,
            tracked.untainted,
            tracked.running_since,
        );
        match (registered_at, ready_at) {
            (None, _) if now >= running_since + self.config.registration_delay => {
                self.register(instance, now, step).await;
            }
            (Some(_), _) if failed => self.report_unknown(&instance.id, step).await,
            (Some(at), None) if now >= at + self.config.ready_delay => {
                self.become_ready(&instance.id, now, step).await;
            }
            (Some(_), Some(at)) if !untainted && now >= at + self.config.startup_taint_delay => {
                self.remove_startup_taints(&instance.id, step).await;
            }
            _ => {}
        }
    }

    async fn register(&mut self, instance: &Instance, now: Instant, step: &mut KubeletStep) {
        let claim = self.claim_of(instance);
        // A NodeClaim machine reports what its NodeClaim says; a kwok instance its catalogue type.
        let resolved = match self.machines {
            Machines::Kwok(_) => self.resolved(&instance.instance_type),
            Machines::NodeClaims => None,
        };
        let node = node_for(
            instance,
            claim.as_deref(),
            resolved.as_deref(),
            &self.region,
            self.now(),
        );
        let created = match self.nodes.create(&PostParams::default(), &node).await {
            Ok(_) => true,
            Err(kube::Error::Api(status)) if status.code == 409 => true,
            Err(error) => {
                tracing::debug!(%error, instance = %instance.id, "registering the node failed");
                false
            }
        };
        if !created {
            step.errors += 1;
            return;
        }
        if let Some(tracked) = self.tracked.get_mut(&instance.id) {
            tracked.registered_at = Some(now);
            tracked.startup_taints = claim
                .map(|c| {
                    c.spec
                        .startup_taints
                        .iter()
                        .map(|t| t.key.clone())
                        .collect()
                })
                .unwrap_or_default();
        }
        step.registered += 1;
    }

    async fn patch_ready(&self, node: &str, status: &str, reason: &str) -> Result<(), kube::Error> {
        let patch = json!({ "status": { "conditions": [condition(status, reason, self.now())] } });
        let params = PatchParams::apply(FIELD_MANAGER);
        self.nodes
            .patch_status(node, &params, &Patch::Strategic(&patch))
            .await
            .map(|_| ())
    }

    async fn become_ready(&mut self, instance_id: &str, now: Instant, step: &mut KubeletStep) {
        let Some(node) = self.tracked.get(instance_id).map(|t| t.node.clone()) else {
            return;
        };
        let ready = self.patch_ready(&node, "True", "KubeletReady").await;
        let untainted = self
            .cluster
            .taint_node(&node, &[], &[labels::NOT_READY_TAINT.to_owned()])
            .await;
        match (ready, untainted) {
            (Ok(()), Ok(_)) => {
                if let Some(tracked) = self.tracked.get_mut(instance_id) {
                    tracked.ready_at = Some(now);
                    tracked.untainted = tracked.startup_taints.is_empty();
                }
                step.ready += 1;
            }
            (ready, untainted) => {
                tracing::debug!(?ready, untainted = ?untainted.err(), %node, "turning the node ready failed");
                step.errors += 1;
            }
        }
    }

    async fn remove_startup_taints(&mut self, instance_id: &str, step: &mut KubeletStep) {
        let Some((node, keys)) = self
            .tracked
            .get(instance_id)
            .map(|t| (t.node.clone(), t.startup_taints.clone()))
        else {
            return;
        };
        match self.cluster.taint_node(&node, &[], &keys).await {
            Ok(_) => {
                if let Some(tracked) = self.tracked.get_mut(instance_id) {
                    tracked.untainted = true;
                }
                step.untainted += 1;
            }
            Err(error) => {
                tracing::debug!(%error, %node, "removing startup taints failed");
                step.errors += 1;
            }
        }
    }

    async fn report_unknown(&mut self, instance_id: &str, step: &mut KubeletStep) {
        let Some(node) = self.tracked.get(instance_id).map(|t| t.node.clone()) else {
            return;
        };
        let already = self.view.node(&node).is_some_and(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Ready" && c.status == "Unknown")
                })
        });
        if already {
            return;
        }
        let unknown = self
            .patch_ready(&node, "Unknown", "NodeStatusUnknown")
            .await;
        let tainted = self
            .cluster
            .taint_node(
                &node,
                &[
                    taint(labels::UNREACHABLE_TAINT, "NoSchedule"),
                    taint(labels::UNREACHABLE_TAINT, "NoExecute"),
                ],
                &[],
            )
            .await;
        if unknown.is_err() || tainted.is_err() {
            step.errors += 1;
        }
    }

    async fn step_gone(&mut self, instance_id: &str, step: &mut KubeletStep) {
        let Some(tracked) = self.tracked.get_mut(instance_id) else {
            return;
        };
        if tracked.deleted {
            return;
        }
        if tracked.registered_at.is_none() {
            tracked.deleted = true;
            return;
        }
        let node = tracked.node.clone();
        match self.nodes.delete(&node, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => {
                tracing::debug!(%error, %node, "deleting the node of a terminated instance failed");
                step.errors += 1;
                return;
            }
        }
        if let Some(tracked) = self.tracked.get_mut(instance_id) {
            tracked.deleted = true;
        }
        step.deleted += 1;
    }

    /// Starts the pods bound to Ready nodes this kubelet runs.
    async fn start_pods(&mut self, step: &mut KubeletStep) {
        let ready: BTreeSet<&str> = self
            .tracked
            .values()
            .filter(|t| t.ready_at.is_some() && !t.deleted && !t.failed)
            .map(|t| t.node.as_str())
            .collect();
        // Nothing to start unless a pod or node changed, or a node turned Ready, since the
        // last complete pass.
        let counts = self.start_mark.0.read(self.view.as_ref());
        if self.start_mark.0.unchanged(counts) && self.start_mark.1 == ready.len() {
            return;
        }
        let ready_count = ready.len();
        let errors_before = step.errors;
        let mut to_start: Vec<(String, String)> = Vec::new();
        for node in &ready {
            for pod in self.view.pods_on_node(node) {
                if waiting_to_start(&pod) {
                    to_start.push((pod.namespace().unwrap_or_default(), pod.name_any()));
                }
            }
        }
        to_start.sort();
        for (namespace, name) in to_start {
            let now = self.now();
            let patch = json!({ "status": {
                "phase": "Running",
                "startTime": now,
                "conditions": [
                    { "type": "Initialized", "status": "True", "lastTransitionTime": now },
                    { "type": "ContainersReady", "status": "True", "lastTransitionTime": now },
                    { "type": "Ready", "status": "True", "lastTransitionTime": now },
                ],
            }});
            match writes::patch_pod_status(
                &self.client,
                &namespace,
                &name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Strategic(&patch),
            )
            .await
            {
                Ok(()) => step.pods_started += 1,
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => {
                    tracing::debug!(%error, %namespace, %name, "starting the pod failed");
                    step.errors += 1;
                }
            }
        }
        if step.errors == errors_before {
            self.start_mark.0.mark(counts);
            self.start_mark.1 = ready_count;
        }
    }

    /// Deletes pods bound to nodes that no longer exist (Kubernetes' pod garbage collector).
    async fn collect_orphans(&mut self, step: &mut KubeletStep) {
        let counts = self.orphan_mark.read(self.view.as_ref());
        if self.orphan_mark.unchanged(counts) {
            return;
        }
        let errors_before = step.errors;
        let nodes: BTreeSet<String> = self.view.nodes().iter().map(|n| n.name_any()).collect();
        let mut orphans: Vec<(String, String)> = self
            .view
            .pods()
            .iter()
            .filter(|pod| {
                pod.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some_and(|node| !nodes.contains(node))
            })
            .map(|pod| (pod.namespace().unwrap_or_default(), pod.name_any()))
            .collect();
        orphans.sort();
        for (namespace, name) in orphans {
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            match api
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await
            {
                Ok(_) => step.pods_collected += 1,
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => {
                    tracing::debug!(%error, %namespace, %name, "collecting an orphaned pod failed");
                    step.errors += 1;
                }
            }
        }
        if step.errors == errors_before {
            self.orphan_mark.mark(counts);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance() -> Instance {
        Instance {
            id: "i-0000000000000000a".into(),
            instance_type: "m5.large".into(),
            zone: "us-west-2a".into(),
            state: InstanceState::Running,
            capacity_type: karpenter_core::domain::instance_type::CapacityType::Spot,
            private_dns_name: "ip-10-0-1.us-west-2.compute.internal".into(),
            tags: [(labels::TAG_NODEPOOL.to_owned(), "default".to_owned())].into(),
            subnet_id: "subnet-1".into(),
            image_id: "ami-1".into(),
            launch_time: None,
            security_group_ids: Vec::new(),
            capacity_reservation_id: None,
        }
    }

    fn claim() -> SlimNodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "default-abcde", "labels": {"team": "web", labels::NODEPOOL: "default"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
                "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "cilium/agent-not-ready", "effect": "NoExecute"}]
            },
            "status": {"providerID": "aws:///us-west-2a/i-0000000000000000a", "allocatable": {"cpu": "1930m"}}
        }))
        .expect("nodeclaim")
    }

    #[test]
    fn a_node_carries_its_nodeclaims_labels_taints_and_the_unregistered_taint() {
        let resolved = catalogue_instance_type("m5.large", "us-west-2");
        let node = node_for(
            &instance(),
            Some(&claim()),
            resolved.as_ref(),
            "us-west-2",
            Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        );
        let node_labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(node_labels.get("team").map(String::as_str), Some("web"));
        assert_eq!(
            node_labels.get(labels::CAPACITY_TYPE).map(String::as_str),
            Some("spot")
        );
        assert_eq!(
            node_labels.get(labels::ARCH).map(String::as_str),
            Some("amd64")
        );
        assert_eq!(
            node_labels.get(labels::HOSTNAME).map(String::as_str),
            node.metadata.name.as_deref()
        );
        let spec = node.spec.clone().unwrap_or_default();
        assert_eq!(
            spec.provider_id.as_deref(),
            Some("aws:///us-west-2a/i-0000000000000000a")
        );
        let keys: Vec<_> = spec
            .taints
            .unwrap_or_default()
            .into_iter()
            .map(|t| t.key)
            .collect();
        assert_eq!(
            keys,
            [
                "dedicated",
                "cilium/agent-not-ready",
                labels::UNREGISTERED_TAINT,
                labels::NOT_READY_TAINT
            ]
        );
        let status = node.status.unwrap_or_default();
        assert_eq!(
            status.allocatable.unwrap_or_default().get("cpu"),
            Some(&Quantity("1930m".into())),
            "allocatable comes from the NodeClaim"
        );
        assert_eq!(
            status.capacity.unwrap_or_default().get("cpu"),
            Some(&Quantity("2".into())),
            "capacity from the instance type"
        );
    }

    #[test]
    fn a_launched_nodeclaim_stands_for_its_instance_and_its_node_carries_its_capacity() {
        let mut launched = claim();
        let mut labels_now = launched.metadata.labels.clone().unwrap_or_default();
        labels_now.insert(labels::INSTANCE_TYPE.to_owned(), "m5.large".to_owned());
        labels_now.insert(labels::CAPACITY_TYPE.to_owned(), "on-demand".to_owned());
        launched.metadata.labels = Some(labels_now);
        if let Some(status) = launched.status.as_mut() {
            status.capacity = BTreeMap::from([("cpu".to_owned(), Quantity("2".into()))]).into();
        }
        let instance = instance_of_nodeclaim(&launched, "us-west-2").unwrap();
        assert_eq!(instance.id, "i-0000000000000000a");
        assert_eq!(instance.zone, "us-west-2a");
        assert_eq!(instance.instance_type, "m5.large");
        assert_eq!(instance.capacity_type, CapacityType::OnDemand);
        assert_eq!(
            instance.private_dns_name,
            "i-0000000000000000a.us-west-2.compute.internal"
        );
        let node = node_for(
            &instance,
            Some(&launched),
            None,
            "us-west-2",
            Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        );
        let status = node.status.unwrap_or_default();
        assert_eq!(
            status.capacity.unwrap_or_default().get("cpu"),
            Some(&Quantity("2".into())),
            "capacity from the NodeClaim"
        );
        assert_eq!(
            node.metadata
                .labels
                .unwrap_or_default()
                .get(labels::INSTANCE_TYPE)
                .map(String::as_str),
            Some("m5.large")
        );

        // Not yet launched (no instance type label): no machine.
        assert!(instance_of_nodeclaim(&claim(), "us-west-2").is_none());
    }

    #[test]
    fn an_instance_without_a_nodeclaim_registers_with_its_own_facts() {
        let resolved = catalogue_instance_type("m5.large", "us-west-2");
        let node = node_for(
            &instance(),
            None,
            resolved.as_ref(),
            "us-west-2",
            Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        );
        let spec = node.spec.clone().unwrap_or_default();
        assert_eq!(
            spec.provider_id.as_deref(),
            Some("aws:///us-west-2a/i-0000000000000000a")
        );
        assert_eq!(
            node.metadata
                .labels
                .unwrap_or_default()
                .get(labels::NODEPOOL)
                .map(String::as_str),
            Some("default")
        );
        let allocatable = node
            .status
            .unwrap_or_default()
            .allocatable
            .unwrap_or_default();
        assert!(allocatable.contains_key("memory") && allocatable.contains_key("pods"));
    }
}
