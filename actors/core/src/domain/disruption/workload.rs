//! Clusters for tests and the benchmark: a small model of NodePools, nodes and pods from which
//! [`Cluster::input`] builds a consistent [`DisruptionInput`] (state nodes, the scheduling
//! snapshot with the same nodes, pools and pods), builders for pods and nodes, and the
//! benchmark's generated clusters ([`bench_cluster`]).
//!
//! The model can also carry out a command ([`Cluster::apply`]): candidates go, replacements
//! come up initialized with the cheapest kept instance type, and pods move where the command's
//! simulation put them; tests run rounds to a fixed point with it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    PodAffinity, PodAffinityTerm, PodAntiAffinity, ResourceRequirements,
    Toleration as ApiToleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use rustc_hash::FxHashMap;

use crate::apis::duration::NillableDuration;
use crate::apis::labels;
use crate::apis::nodepool::{Budget, ConsolidationPolicy, Disruption};
use crate::apis::taints::{Taint, TaintEffect};
use crate::apis::{SharedPodSpec, SlimContainer, SlimPod, SlimPodSpec};
use crate::domain::instance_type::InstanceType;
use crate::domain::requirements::{Requirement, Requirements};
use crate::domain::resources::{CPU, MEMORY, ResourceLimits, Resources};
use crate::domain::scheduling::workload::{Rng, ZONES, fake_instance_types};
use crate::domain::scheduling::{
    BoundPod, ExistingNode, NodePoolInput, PodShape, SchedulingPod, Snapshot,
};

use super::input::{
    DisruptionInput, DisruptionOptions, Memos, NodeClaimFacts, NodePod, Pdb, PoolInput, StateNode,
};
use super::{Command, Destination};

const GI: i64 = 1 << 30;

/// A pod under construction, as the daemon's view holds it.
#[derive(Debug, Clone)]
pub struct PodBuilder(SlimPod);

impl PodBuilder {
    /// A pod in namespace `default` requesting nothing.
    #[must_use]
    pub fn new(name: &str) -> Self {
        Self(SlimPod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("default".to_owned()),
                uid: Some(format!("uid-{name}")),
                ..ObjectMeta::default()
            }
            .into(),
            spec: Some(
                SharedPodSpec {
                    containers: vec![SlimContainer {
                        name: "app".to_owned(),
                        ..SlimContainer::default()
                    }],
                    ..SharedPodSpec::default()
                }
                .into(),
            ),
            status: None,
        })
    }

    fn spec(&mut self) -> &mut SlimPodSpec {
        self.0.spec.get_or_insert_with(SlimPodSpec::default)
    }

    /// CPU in millicores and memory in MiB.
    #[must_use]
    pub fn requests(mut self, cpu_millis: i64, memory_mib: i64) -> Self {
        let requests: BTreeMap<String, Quantity> = [
            (CPU.to_owned(), Quantity(format!("{cpu_millis}m"))),
            (MEMORY.to_owned(), Quantity(format!("{memory_mib}Mi"))),
        ]
        .into();
        if let Some(container) = self.spec().containers.first_mut() {
            container.resources = Some(ResourceRequirements {
                requests: Some(requests),
                ..ResourceRequirements::default()
            });
        }
        self
    }

    #[must_use]
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value.to_owned());
        self
    }

    #[must_use]
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value.to_owned());
        self
    }

    /// `karpenter.sh/do-not-disrupt: "true"`.
    #[must_use]
    pub fn do_not_disrupt(self) -> Self {
        self.annotation(labels::DO_NOT_DISRUPT, "true")
    }

    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.spec().priority = Some(priority);
        self
    }

    /// Owned by a controller of this kind (`DaemonSet`, `StatefulSet` in `apps/v1`,
    /// `Node` in `v1`, anything else as `apps/v1`).
    #[must_use]
    pub fn owner(mut self, kind: &str) -> Self {
        let api_version = if kind == "Node" { "v1" } else { "apps/v1" };
        self.0.metadata.owner_references = Some(vec![OwnerReference {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            name: "owner".to_owned(),
            uid: "owner-uid".to_owned(),
            ..OwnerReference::default()
        }]);
        self
    }

    /// Phase `Succeeded`.
    #[must_use]
    pub fn finished(mut self) -> Self {
        self.0.status.get_or_insert_with(Default::default).phase = Some("Succeeded".into());
        self
    }

    /// Being deleted.
    #[must_use]
    pub fn terminating(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
        );
        self
    }

    /// Tolerates every taint.
    #[must_use]
    pub fn tolerate_everything(mut self) -> Self {
        self.spec().tolerations = Some(vec![ApiToleration {
            operator: Some("Exists".to_owned()),
            ..ApiToleration::default()
        }]);
        self
    }

    #[must_use]
    pub fn node_selector(mut self, key: &str, value: &str) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value.to_owned());
        self
    }

    /// A topology spread constraint over pods labelled `app=<app>`.
    #[must_use]
    pub fn spread(mut self, topology_key: &str, app: &str, max_skew: i32) -> Self {
        self.spec()
            .topology_spread_constraints
            .get_or_insert_with(Vec::new)
            .push(TopologySpreadConstraint {
                max_skew,
                topology_key: topology_key.to_owned(),
                when_unsatisfiable: "DoNotSchedule".to_owned(),
                label_selector: Some(app_selector(app)),
                ..TopologySpreadConstraint::default()
            });
        self
    }

    /// Required anti-affinity to pods labelled `app=<app>` on the topology key.
    #[must_use]
    pub fn anti_affinity(mut self, topology_key: &str, app: &str) -> Self {
        let affinity = self.spec().affinity.get_or_insert_with(Box::default);
        affinity
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(app_term(topology_key, app));
        self
    }

    /// Required affinity to pods labelled `app=<app>` on the topology key.
    #[must_use]
    pub fn affinity(mut self, topology_key: &str, app: &str) -> Self {
        let affinity = self.spec().affinity.get_or_insert_with(Box::default);
        affinity
            .pod_affinity
            .get_or_insert_with(PodAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(app_term(topology_key, app));
        self
    }

    /// The pod.
    #[must_use]
    pub fn pod(self) -> SlimPod {
        self.0
    }

    /// The pod as disruption reads it (`None` if it does not convert).
    #[must_use]
    pub fn build(self) -> Option<NodePod> {
        NodePod::from_pod(&self.0).ok()
    }
}

/// A pod (anti-)affinity term over pods labelled `app=<app>`.
fn app_term(topology_key: &str, app: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(app_selector(app)),
        topology_key: topology_key.to_owned(),
        ..PodAffinityTerm::default()
    }
}

fn app_selector(app: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some([("app".to_owned(), app.to_owned())].into()),
        match_expressions: None,
    }
}

/// A NodePool of the model.
#[derive(Debug, Clone)]
pub struct PoolSpec {
    pub name: String,
    pub weight: i32,
    /// The capacity types its requirements allow.
    pub capacity_types: Vec<String>,
    pub instance_types: Vec<Arc<InstanceType>>,
    pub disruption: Disruption,
    pub limits: ResourceLimits,
}

impl PoolSpec {
    /// A pool consolidating when empty or underutilized, after 0 s, with the default 10%
    /// budget.
    #[must_use]
    pub fn new(
        name: &str,
        capacity_types: &[&str],
        instance_types: Vec<Arc<InstanceType>>,
    ) -> Self {
        Self {
            name: name.to_owned(),
            weight: 0,
            capacity_types: capacity_types.iter().map(|c| (*c).to_owned()).collect(),
            instance_types,
            disruption: Disruption::default(),
            limits: ResourceLimits::unlimited(),
        }
    }

    /// Replaces the budgets.
    #[must_use]
    pub fn budgets(mut self, budgets: Vec<Budget>) -> Self {
        self.disruption.budgets = budgets;
        self
    }

    /// `consolidateAfter: Never`.
    #[must_use]
    pub fn never_consolidate(mut self) -> Self {
        self.disruption.consolidate_after = NillableDuration::never();
        self
    }

    /// `consolidationPolicy: WhenEmpty`.
    #[must_use]
    pub fn when_empty(mut self) -> Self {
        self.disruption.consolidation_policy = ConsolidationPolicy::WhenEmpty;
        self
    }

    fn scheduling(&self) -> NodePoolInput {
        let mut pool = NodePoolInput::new(&self.name, self.instance_types.clone());
        let values: Vec<&str> = self.capacity_types.iter().map(String::as_str).collect();
        pool.requirements
            .add(Requirement::in_values(labels::CAPACITY_TYPE, &values));
        pool.weight = self.weight;
        pool.limits = self.limits.clone();
        pool
    }
}

/// A node of the model (a Node with its NodeClaim unless said otherwise).
#[derive(Debug, Clone)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "the state node's flags, set one by one in tests"
)]
pub struct NodeSpec {
    pub name: String,
    pub pool: String,
    pub instance_type: Arc<InstanceType>,
    pub capacity_type: String,
    pub zone: String,
    pub pods: Vec<NodePod>,
    pub extra_labels: BTreeMap<String, String>,
    /// The node's taints (none by default).
    pub taints: Vec<Taint>,
    /// A NodeClaim exists.
    pub managed: bool,
    /// A Node exists.
    pub has_node: bool,
    pub initialized: bool,
    pub ready: bool,
    pub marked_for_deletion: bool,
    pub consolidatable: bool,
    pub drifted_since: Option<Timestamp>,
    pub do_not_disrupt: bool,
    pub nominated_until: Option<Timestamp>,
    pub created: Timestamp,
    pub expire_after: Option<Duration>,
    pub termination_grace_period: Option<Duration>,
}

impl NodeSpec {
    /// A ready, initialized, consolidatable managed node.
    #[must_use]
    pub fn new(
        name: &str,
        pool: &str,
        instance_type: Arc<InstanceType>,
        capacity_type: &str,
    ) -> Self {
        Self {
            name: name.to_owned(),
            pool: pool.to_owned(),
            instance_type,
            capacity_type: capacity_type.to_owned(),
            zone: ZONES[0].to_owned(),
            pods: Vec::new(),
            extra_labels: BTreeMap::new(),
            taints: Vec::new(),
            managed: true,
            has_node: true,
            initialized: true,
            ready: true,
            marked_for_deletion: false,
            consolidatable: true,
            drifted_since: None,
            do_not_disrupt: false,
            nominated_until: None,
            created: Timestamp::UNIX_EPOCH,
            expire_after: None,
            termination_grace_period: None,
        }
    }

    /// Adds a `NoSchedule` taint with this key.
    #[must_use]
    pub fn taint(mut self, key: &str) -> Self {
        self.taints.push(Taint {
            key: key.to_owned(),
            value: None,
            effect: TaintEffect::NoSchedule,
            time_added: None,
        });
        self
    }

    #[must_use]
    pub fn zone(mut self, zone: &str) -> Self {
        zone.clone_into(&mut self.zone);
        self
    }

    #[must_use]
    pub fn pod(mut self, pod: PodBuilder) -> Self {
        if let Some(pod) = pod.build() {
            self.pods.push(pod);
        }
        self
    }

    /// What its active pods request.
    #[must_use]
    pub fn requested(&self) -> Resources {
        let mut total = Resources::default();
        for pod in self.pods.iter().filter(|p| p.is_active()) {
            total.add(&pod.pod.shape.requests);
        }
        total
    }

    /// Its labels as the Node carries them.
    #[must_use]
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut out: BTreeMap<String, String> = [
            (labels::HOSTNAME, self.name.as_str()),
            (labels::NODEPOOL, self.pool.as_str()),
            (labels::INSTANCE_TYPE, self.instance_type.name.as_str()),
            (labels::CAPACITY_TYPE, self.capacity_type.as_str()),
            (labels::ZONE, self.zone.as_str()),
            (labels::OS, labels::OS_LINUX),
            (labels::ARCH, labels::ARCH_AMD64),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        if self.initialized {
            out.insert(labels::INITIALIZED.to_owned(), "true".to_owned());
        }
        if self.has_node {
            out.insert(labels::REGISTERED.to_owned(), "true".to_owned());
        }
        out.extend(self.extra_labels.clone());
        out
    }
}

/// A cluster to decide over.
#[derive(Debug, Clone)]
pub struct Cluster {
    pub now: Timestamp,
    pub pools: Vec<PoolSpec>,
    pub nodes: Vec<NodeSpec>,
    /// Pending pods.
    pub pending: Vec<NodePod>,
    pub pdbs: Vec<Pdb>,
    pub queued: BTreeSet<String>,
    pub memos: Memos,
    pub options: DisruptionOptions,
    /// How many replacements [`Cluster::apply`] has launched (for their names).
    pub launched: usize,
}

impl Cluster {
    /// An empty cluster at `now`.
    #[must_use]
    pub fn new(now: Timestamp) -> Self {
        Self {
            now,
            pools: Vec::new(),
            nodes: Vec::new(),
            pending: Vec::new(),
            pdbs: Vec::new(),
            queued: BTreeSet::new(),
            memos: Memos::default(),
            options: DisruptionOptions::default(),
            launched: 0,
        }
    }

    /// The node with this name.
    pub fn node_mut(&mut self, name: &str) -> Option<&mut NodeSpec> {
        self.nodes.iter_mut().find(|n| n.name == name)
    }

    /// The round's input.
    #[must_use]
    pub fn input(&self) -> DisruptionInput {
        let mut shapes: FxHashMap<Arc<PodShape>, Arc<PodShape>> = FxHashMap::default();
        let mut share = |pod: &SchedulingPod| {
            let mut pod = pod.clone();
            let shared = shapes
                .entry(pod.shape.clone())
                .or_insert_with(|| pod.shape.clone())
                .clone();
            pod.shape = shared;
            pod
        };
        let mut nodes = Vec::with_capacity(self.nodes.len());
        let mut existing = Vec::new();
        let mut deleting_pods = Vec::new();
        for spec in &self.nodes {
            let labels = spec.labels();
            let pods: Vec<Arc<NodePod>> = spec
                .pods
                .iter()
                .map(|p| {
                    Arc::new(NodePod {
                        pod: share(&p.pod),
                        ..p.clone()
                    })
                })
                .collect();
            let index = if spec.marked_for_deletion {
                for pod in pods
                    .iter()
                    .filter(|p| super::candidates::is_currently_reschedulable(p, &self.pdbs))
                {
                    deleting_pods.push(pod.pod.clone());
                }
                None
            } else {
                existing.push(ExistingNode {
                    name: spec.name.clone(),
                    labels: labels.clone().into(),
                    taints: spec.taints.clone(),
                    allocatable: spec.instance_type.allocatable().clone(),
                    requested: spec.requested(),
                    pending_daemon_overhead: Resources::default(),
                    capacity: spec.instance_type.capacity.clone(),
                    pods: pods.iter().map(|p| Arc::new(bound_pod(p))).collect(),
                    initialized: spec.initialized,
                    registered: spec.has_node,
                });
                Some(existing.len() - 1)
            };
            nodes.push(StateNode {
                name: spec.name.clone(),
                node_claim: spec.managed.then(|| NodeClaimFacts {
                    name: format!("{}-claim", spec.name),
                    created: spec.created,
                    expire_after: spec.expire_after,
                    termination_grace_period: spec.termination_grace_period,
                    consolidatable: spec.consolidatable,
                    drifted_since: spec.drifted_since,
                    instance_terminating: false,
                }),
                has_node: spec.has_node,
                labels: labels.into(),
                initialized: spec.initialized,
                ready: spec.ready,
                marked_for_deletion: spec.marked_for_deletion,
                nominated_until: spec.nominated_until,
                do_not_disrupt: spec.do_not_disrupt,
                pods,
                existing: index,
            });
        }
        let mut pods: Vec<SchedulingPod> = self.pending.iter().map(|p| share(&p.pod)).collect();
        let pending_pods = pods.len();
        pods.extend(deleting_pods);
        DisruptionInput {
            now: self.now,
            nodes,
            pools: self
                .pools
                .iter()
                .map(|p| PoolInput {
                    name: p.name.clone(),
                    disruption: p.disruption.clone(),
                    instance_types: p.instance_types.clone(),
                })
                .collect(),
            pdbs: self.pdbs.clone(),
            scheduling: Snapshot {
                pods,
                existing_nodes: existing,
                node_pools: self.pools.iter().map(PoolSpec::scheduling).collect(),
                namespaces: BTreeMap::new(),
            },
            pending_pods,
            queued: self.queued.clone(),
            memos: self.memos.clone(),
            single_node_unseen_pools: Vec::new(),
            options: self.options.clone(),
        }
    }

    /// Carries out a command: the candidates go, each replacement comes up (initialized,
    /// consolidatable) as the cheapest of its instance types in the zone and capacity type of
    /// that type's cheapest compatible offering, and every pod of the simulation moves where
    /// it was placed.
    pub fn apply(&mut self, command: &Command) {
        let candidates: BTreeSet<&str> =
            command.candidates.iter().map(|c| c.name.as_str()).collect();
        let mut moving: Vec<NodePod> = Vec::new();
        let mut kept = Vec::new();
        for node in self.nodes.drain(..) {
            if candidates.contains(node.name.as_str()) {
                moving.extend(node.pods.into_iter().filter(NodePod::is_reschedulable));
            } else {
                kept.push(node);
            }
        }
        self.nodes = kept;
        let mut replacements = Vec::new();
        for claim in &command.replacements {
            let Some(instance_type) = claim.instance_types.first() else {
                continue;
            };
            let Some(offering) = instance_type
                .available_offerings()
                .filter(|o| o.is_compatible(&claim.requirements))
                .min_by(|a, b| a.price.total_cmp(&b.price))
            else {
                continue;
            };
            self.launched += 1;
            let name = format!("replacement-{:04}", self.launched);
            let node = NodeSpec::new(
                &name,
                &claim.node_pool,
                instance_type.clone(),
                offering
                    .capacity_type()
                    .unwrap_or(labels::CAPACITY_TYPE_ON_DEMAND),
            )
            .zone(offering.zone().unwrap_or(ZONES[0]));
            replacements.push(name);
            self.nodes.push(node);
        }
        for pod in moving {
            let key = pod.key();
            let destination = command
                .placements
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, d)| d.clone());
            let target = match destination {
                Some(Destination::Existing(node)) => Some(node),
                Some(Destination::Replacement(i)) => replacements.get(i).cloned(),
                None => None,
            };
            match target.and_then(|t| self.nodes.iter_mut().find(|n| n.name == t)) {
                Some(node) => node.pods.push(pod),
                None => self.pending.push(pod),
            }
        }
    }

    /// The sum of the nodes' prices (each at its cheapest offering for its labels).
    #[must_use]
    pub fn price(&self) -> f64 {
        self.nodes
            .iter()
            .map(|n| {
                let requirements = Requirements::from_labels(&n.labels());
                n.instance_type
                    .offerings
                    .iter()
                    .filter(|o| o.is_compatible(&requirements))
                    .map(|o| o.price)
                    .fold(f64::MAX, f64::min)
            })
            .sum()
    }
}

/// A pod as the scheduler sees it on its node.
#[must_use]
pub fn bound_pod(pod: &NodePod) -> BoundPod {
    let shape = &pod.pod.shape;
    BoundPod {
        namespace: pod.pod.namespace.clone(),
        labels: shape.labels.clone(),
        anti_affinity: shape.anti_affinity.clone(),
        host_ports: shape.host_ports.clone(),
        counts_for_topology: pod.is_active(),
    }
}

/// The benchmark's scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// A consolidated cluster: every node runs one large "anchor" pod (one per node, by
    /// hostname anti-affinity) that needs its instance type, a DaemonSet pod and eight small
    /// pods, with a little room to spare. Small pods would fit elsewhere but no node can go:
    /// every method runs to its end and single-node consolidation simulates every candidate
    /// (until its budget runs out).
    Steady,
    /// The same with every fifth node's anchor gone: a fifth of the nodes mostly empty, so
    /// multi-node consolidation deletes many at once.
    Underutilized,
}

/// Instance types of the benchmark: Karpenter's fake types with 1 to 32 CPUs.
#[must_use]
pub fn bench_instance_types() -> Vec<Arc<InstanceType>> {
    fake_instance_types(32)
}

/// One deployment of the generated workload: its pods' size and constraints.
#[derive(Debug, Clone, Copy)]
struct Deployment {
    cpu: i64,
    memory_mib: i64,
    topology: Topology,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Topology {
    None,
    /// `topologySpreadConstraints` over zones, `maxSkew: 1`.
    ZoneSpread,
    /// Required anti-affinity to itself per hostname.
    OnePerNode,
}

/// A benchmark cluster of `nodes` nodes with 10 pods each (see [`Scenario`]): two NodePools
/// (on-demand and spot; a third of the nodes spot), three zones, nodes of 4, 8 and 16 CPUs,
/// 40 small deployments of which 4 spread over zones and 4 keep one replica per node.
#[must_use]
pub fn bench_cluster(nodes: usize, scenario: Scenario, seed: u64) -> Cluster {
    /// Small pods per node: with the anchor and the DaemonSet pod, 10 pods per node.
    const SMALL_PODS: usize = 8;
    let types = bench_instance_types();
    let mut rng = Rng::new(seed);
    let mut cluster = Cluster::new(Timestamp::UNIX_EPOCH + Duration::from_hours(24 * 400));
    cluster.pools = vec![
        PoolSpec::new(
            "on-demand",
            &[labels::CAPACITY_TYPE_ON_DEMAND],
            types.clone(),
        ),
        PoolSpec::new("spot", &[labels::CAPACITY_TYPE_SPOT], types.clone()),
    ];
    let deployments: Vec<Deployment> = (0..40)
        .map(|i| Deployment {
            cpu: *rng.pick(&[50, 75, 100]),
            memory_mib: *rng.pick(&[64, 128, 192]),
            topology: match i % 10 {
                0 => Topology::ZoneSpread,
                5 => Topology::OnePerNode,
                _ => Topology::None,
            },
        })
        .collect();
    let mut replica = 0usize;
    let mut spread_counts = vec![[0usize; 3]; deployments.len()];
    for n in 0..nodes {
        let spot = n % 3 == 2;
        let (pool, capacity_type) = if spot {
            ("spot", labels::CAPACITY_TYPE_SPOT)
        } else {
            ("on-demand", labels::CAPACITY_TYPE_ON_DEMAND)
        };
        // Spot is offered in the first two zones only; on-demand nodes use all three.
        let zone = if spot {
            ZONES[n / 3 % 2]
        } else {
            ZONES[(n - n / 3) % 3]
        };
        let cpus: i64 = *rng.pick(&[4, 4, 8, 8, 8, 16]);
        let Some(instance_type) = types.get(usize::try_from(cpus - 1).unwrap_or(0)).cloned() else {
            continue;
        };
        let mut node = NodeSpec::new(&format!("node-{n:05}"), pool, instance_type, capacity_type)
            .zone(zone)
            .pod(
                PodBuilder::new(&format!("daemon-{n:05}"))
                    .requests(100, 128)
                    .label("app", "daemon")
                    .owner("DaemonSet")
                    .tolerate_everything(),
            );
        let anchored = scenario == Scenario::Steady || n % 5 != 0;
        if anchored {
            // Too large for the next smaller type: the node's type is the cheapest for it.
            node = node.pod(
                PodBuilder::new(&format!("anchor-{n:05}"))
                    .requests(cpus * 1000 - 1000, (2 * cpus - 2) * 1024)
                    .label("app", "anchor")
                    .owner("StatefulSet")
                    .anti_affinity(labels::HOSTNAME, "anchor"),
            );
        }
        let mut on_node: Vec<usize> = Vec::new();
        while on_node.len() < SMALL_PODS {
            let which = rng.below(deployments.len());
            let d = deployments[which];
            if d.topology == Topology::OnePerNode && on_node.contains(&which) {
                continue;
            }
            // Spread replicas keep to their skew, as the scheduler placed them.
            let zone_index = ZONES.iter().position(|z| *z == zone).unwrap_or(0);
            if d.topology == Topology::ZoneSpread {
                let counts = &mut spread_counts[which];
                let fewest = counts.iter().copied().min().unwrap_or(0);
                if counts[zone_index] > fewest {
                    continue;
                }
                counts[zone_index] += 1;
            }
            on_node.push(which);
            replica += 1;
            let app = format!("app-{which:02}");
            let mut pod = PodBuilder::new(&format!("{app}-{replica:06}"))
                .requests(d.cpu, d.memory_mib)
                .label("app", &app)
                .owner("ReplicaSet");
            pod = match d.topology {
                Topology::ZoneSpread => pod.spread(labels::ZONE, &app, 1),
                Topology::OnePerNode => pod.anti_affinity(labels::HOSTNAME, &app),
                Topology::None => pod,
            };
            node = node.pod(pod);
        }
        cluster.nodes.push(node);
    }
    cluster
}

/// Memory in bytes for `gib` GiB (test helper).
#[must_use]
pub fn gib(gib: i64) -> i64 {
    gib * GI
}
