//! The `DisruptionActor` over fakes, started as the daemon starts it: a mirrored
//! `FakeClusterApi` whose every change nudges the actor as the daemon's routing does, a fake
//! cloud offering 2-, 4-, 8- and 16-CPU types, and tokio's paused clock. No NodeClaim actors
//! run: the tests write what they would (`Consolidatable`, `Initialized`, finishing a
//! termination), so each step of a command (decide, wait 15 s, validate, mark, launch, wait
//! for the replacements, delete or give up) is observed on its own.
//!
//! Covered: emptiness, single-node replacement, drift (no validation wait), abandonment and
//! narrowing at validation, a restart of the actor during validation, the queue's timeout and
//! a deleted replacement, blockers (do-not-disrupt pods and nodes, PDBs), budgets (zero,
//! scheduled, invalid, one at a time), stale marks after a restart of the process, `WhenEmpty`
//! and `consolidateAfter: Never`, and `explain node`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use karpenter_actors::disruption::{
    ClusterChanged, CommandState, DISRUPTION_BLOCKED, DISRUPTION_KEY, DISRUPTION_LAUNCHING,
    DISRUPTION_TERMINATING, DisruptionActor, DisruptionDeps, DisruptionMetrics, DisruptionRecord,
    ExplainNode, GetDisruptionStatus, NodeVerdict, UNCONSOLIDATABLE,
};
use karpenter_actors::messages::ClusterChange;
use karpenter_actors::metrics::{CreatedLabels, Metrics};
use karpenter_actors::ports::clock::Clock;
use karpenter_actors::ports::cluster::ClusterApi;
use karpenter_actors::provisioner::{ProvisionerDeps, ProvisionerMetrics, ProvisionerPorts};
use karpenter_actors::runtime::{
    ActorKit, ActorRef, FaultAction, FaultPlan, FaultRule, GroupSpec, KitOptions, RootGroup,
};
use karpenter_actors::testing::{
    ClusterCall, FakeCloudProvider, FakeClusterApi, MemoryClusterView, MirroredClusterApi,
    Operation,
};
use karpenter_core::apis::conditions::nodeclaim as cond;
use karpenter_core::apis::labels;
use karpenter_core::apis::{NodeClaim, NodeClaimStatus, NodePool};
use karpenter_core::domain::disruption::Method;
use karpenter_core::domain::instance_type::InstanceType;
use karpenter_core::domain::scheduling::workload::{ZONES, fake_instance_type};
use kube::Resource;
use prometheus_client::registry::Registry;
use serde_json::json;
use support::{PausedClock, merge, start_time};
use tokio::sync::mpsc;
use tokio::time::Instant;

const POOL: &str = "default";
const GI: i64 = 1 << 30;
const TIMEOUT: Duration = Duration::from_secs(5);
const SEED: u64 = 11;
/// Karpenter's `consolidationTTL`: a command is validated and executed this long after it is
/// decided (spelled out rather than taken from the crate, so a changed constant fails here).
const VALIDATION: Duration = Duration::from_secs(15);
/// Long enough for several rounds (every 10 s) and a validation (15 s) to come and go.
const QUIET: Duration = Duration::from_mins(1);

fn zone() -> &'static str {
    ZONES[0]
}

/// 2, 4, 8 and 16 CPU types with 4 GiB per CPU, priced by their resources.
fn catalogue() -> Vec<Arc<InstanceType>> {
    [2, 4, 8, 16]
        .iter()
        .map(|cpu| {
            Arc::new(fake_instance_type(
                &type_name(*cpu),
                *cpu,
                *cpu * 4 * GI,
                110,
            ))
        })
        .collect()
}

fn type_name(cpu: i64) -> String {
    format!("fake-{cpu}x")
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

fn condition(kind: &str, at: Timestamp) -> serde_json::Value {
    json!({
        "type": kind, "status": "True", "reason": kind, "message": "",
        "lastTransitionTime": at.to_string(),
    })
}

/// A Ready NodePool of on-demand capacity; `disruption` is merged over consolidation after 0 s,
/// `WhenEmptyOrUnderutilized` and the default 10% budget.
fn nodepool(name: &str, disruption: serde_json::Value) -> NodePool {
    let mut spec_disruption = json!({
        "consolidateAfter": "0s",
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "budgets": [{ "nodes": "10%" }],
    });
    merge(&mut spec_disruption, disruption);
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": { "name": name, "generation": 1 },
        "spec": {
            "template": { "spec": {
                "requirements": [{ "key": labels::CAPACITY_TYPE, "operator": "In", "values": [labels::CAPACITY_TYPE_ON_DEMAND] }],
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            }},
            "disruption": spec_disruption,
        },
        "status": { "conditions": [condition("Ready", start_time())] },
    }))
    .unwrap()
}

/// A registered, initialized, Ready node of a NodePool and its NodeClaim, both named after
/// `key` (`node-KEY`, `claim-KEY`).
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent facts of a test node, each set by its own builder method"
)]
struct Managed {
    key: String,
    cpu: i64,
    pool: String,
    node_do_not_disrupt: bool,
    consolidatable: bool,
    disrupted: bool,
    drifted: bool,
}

impl Managed {
    fn new(key: &str, cpu: i64) -> Self {
        Self {
            key: key.to_owned(),
            cpu,
            pool: POOL.to_owned(),
            node_do_not_disrupt: false,
            consolidatable: true,
            disrupted: false,
            drifted: false,
        }
    }

    fn pool(mut self, pool: &str) -> Self {
        pool.clone_into(&mut self.pool);
        self
    }

    /// The Node carries `karpenter.sh/do-not-disrupt: "true"`.
    fn do_not_disrupt(mut self) -> Self {
        self.node_do_not_disrupt = true;
        self
    }

    /// Tainted `karpenter.sh/disrupted` with a `DisruptionReason` condition, as a command in
    /// flight leaves them.
    fn disrupted(mut self) -> Self {
        self.disrupted = true;
        self
    }

    /// `Drifted=True`, as the NodeClaim actor sets it when the cloud reports drift.
    fn drifted(mut self) -> Self {
        self.drifted = true;
        self
    }

    fn node_name(&self) -> String {
        format!("node-{}", self.key)
    }

    fn claim_name(&self) -> String {
        format!("claim-{}", self.key)
    }

    fn labels(&self) -> BTreeMap<String, String> {
        [
            (labels::NODEPOOL, self.pool.clone()),
            (labels::INSTANCE_TYPE, type_name(self.cpu)),
            (
                labels::CAPACITY_TYPE,
                labels::CAPACITY_TYPE_ON_DEMAND.to_owned(),
            ),
            (labels::ZONE, zone().to_owned()),
            (labels::ARCH, labels::ARCH_AMD64.to_owned()),
            (labels::OS, labels::OS_LINUX.to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    fn provider_id(&self) -> String {
        format!("aws:///{}/i-{}", zone(), self.key)
    }

    fn objects(&self, now: Timestamp) -> (NodeClaim, Node) {
        let cpu = self.cpu.to_string();
        let memory = format!("{}Gi", self.cpu * 4);
        let resources = [
            ("cpu", cpu.as_str()),
            ("memory", memory.as_str()),
            ("pods", "110"),
        ];
        let mut conditions = vec![
            condition(cond::LAUNCHED, now),
            condition(cond::REGISTERED, now),
            condition(cond::INITIALIZED, now),
            condition("Ready", now),
        ];
        if self.consolidatable {
            conditions.push(condition(cond::CONSOLIDATABLE, now));
        }
        if self.drifted {
            conditions.push(json!({
                "type": cond::DRIFTED, "status": "True", "reason": "AMIDrift",
                "message": "", "lastTransitionTime": now.to_string(),
            }));
        }
        if self.disrupted {
            conditions.push(json!({
                "type": cond::DISRUPTION_REASON, "status": "True", "reason": "Underutilized",
                "message": "Underutilized", "lastTransitionTime": now.to_string(),
            }));
        }
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": self.claim_name(),
                "labels": self.labels(),
                "finalizers": [labels::TERMINATION_FINALIZER],
            },
            "spec": {
                "requirements": [
                    { "key": labels::NODEPOOL, "operator": "In", "values": [self.pool] },
                    { "key": labels::INSTANCE_TYPE, "operator": "In", "values": [type_name(self.cpu)] },
                ],
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            },
            "status": {
                "providerID": self.provider_id(),
                "nodeName": self.node_name(),
                "capacity": quantities(&resources),
                "allocatable": quantities(&resources),
                "conditions": conditions,
            },
        }))
        .unwrap();
        let mut node_labels = self.labels();
        node_labels.insert(labels::HOSTNAME.to_owned(), self.node_name());
        node_labels.insert(labels::REGISTERED.to_owned(), "true".to_owned());
        node_labels.insert(labels::INITIALIZED.to_owned(), "true".to_owned());
        let node = Node {
            metadata: ObjectMeta {
                name: Some(self.node_name()),
                labels: Some(node_labels),
                annotations: self.node_do_not_disrupt.then(|| {
                    BTreeMap::from([(labels::DO_NOT_DISRUPT.to_owned(), "true".to_owned())])
                }),
                finalizers: Some(vec![labels::TERMINATION_FINALIZER.to_owned()]),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(self.provider_id()),
                taints: Some(if self.disrupted {
                    vec![support::taint(labels::DISRUPTED_TAINT, "NoSchedule")]
                } else {
                    Vec::new()
                }),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(vec![support::ready_condition(true)]),
                capacity: Some(quantities(&resources)),
                allocatable: Some(quantities(&resources)),
                ..NodeStatus::default()
            }),
        };
        (claim, node)
    }
}

/// A running pod of a `ReplicaSet` bound to `node`, requesting `cpu` and 256 MiB.
fn pod(name: &str, node: &str, cpu: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            uid: Some(format!("uid-{name}")),
            labels: Some(BTreeMap::from([("app".to_owned(), name.to_owned())])),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".to_owned(),
                kind: "ReplicaSet".to_owned(),
                name: format!("{name}-rs"),
                uid: format!("uid-{name}-rs"),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.to_owned()),
            containers: vec![Container {
                name: "app".to_owned(),
                resources: Some(ResourceRequirements {
                    requests: Some(quantities(&[("cpu", cpu), ("memory", "256Mi")])),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".to_owned()),
            ..PodStatus::default()
        }),
    }
}

fn with_do_not_disrupt(mut pod: Pod) -> Pod {
    pod.metadata.annotations = Some(BTreeMap::from([(
        labels::DO_NOT_DISRUPT.to_owned(),
        "true".to_owned(),
    )]));
    pod
}

/// A PDB over `app=<app>` pods allowing no disruption (`maxUnavailable: 0`).
fn blocking_pdb(name: &str, app: &str) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            resource_version: Some("1".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(0)),
            selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("app".to_owned(), app.to_owned())])),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: Some(PodDisruptionBudgetStatus {
            disruptions_allowed: Some(0),
            ..PodDisruptionBudgetStatus::default()
        }),
    }
}

// ---- harness -------------------------------------------------------------------------------

/// The daemon's routing of a change to the disruption actor: NodeClaim, Node, NodePool and PDB
/// changes are structural (they bring the next round forward).
fn structural(change: &ClusterChange) -> bool {
    matches!(
        change,
        ClusterChange::NodeClaim { .. }
            | ClusterChange::Node { .. }
            | ClusterChange::NodePool { .. }
            | ClusterChange::PodDisruptionBudget { .. }
            | ClusterChange::Relisted(_)
    )
}

struct Harness {
    api: Arc<FakeClusterApi>,
    view: Arc<MemoryClusterView>,
    mirror: Arc<MirroredClusterApi>,
    clock: Arc<PausedClock>,
    metrics: Arc<Metrics>,
    disruption: DisruptionDeps,
    actor: ActorRef<DisruptionActor>,
    versions: AtomicU64,
    _kit: ActorKit,
    _root: RootGroup,
}

impl Harness {
    /// Starts the disruption actor as the daemon does. Call inside `#[actix::test]` after
    /// `tokio::time::pause()`.
    fn start() -> Self {
        Self::start_with(None)
    }

    /// Like [`Harness::start`], with a fault plan in the actor kit.
    fn start_with(faults: Option<FaultPlan>) -> Self {
        let clock = Arc::new(PausedClock::new(start_time()));
        let api = Arc::new(FakeClusterApi::new());
        api.set_now(clock.now());
        let view = Arc::new(MemoryClusterView::new());
        let cloud = Arc::new(FakeCloudProvider::new(clock.clone()));
        cloud.set_instance_types(catalogue());
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::register(&mut registry));
        let (changes, mut receiver) = mpsc::unbounded_channel();
        let mirror = Arc::new(
            MirroredClusterApi::new(Arc::clone(&api), Arc::clone(&view))
                .with_clock(clock.clone())
                .on_change(move |change| {
                    let _ = changes.send(change);
                }),
        );
        let deps = support::fake_deps(
            clock.clone(),
            mirror.clone(),
            view.clone(),
            cloud.clone(),
            Arc::clone(&metrics),
        );
        let provisioner = ProvisionerDeps::new(
            ProvisionerPorts {
                settings: Arc::clone(&deps.settings),
                clock: Arc::clone(&deps.clock),
                cluster: Arc::clone(&deps.cluster),
                view: Arc::clone(&deps.view),
                cloud: Arc::clone(&deps.cloud),
            },
            ProvisionerMetrics::register(&mut registry, metrics.nodeclaims_created()),
        )
        .with_name_seed(SEED);
        let disruption = DisruptionDeps::new(deps, provisioner, DisruptionMetrics::default());
        let kit = ActorKit::new(
            &mut registry,
            KitOptions {
                faults: faults.map(Arc::new),
                ..KitOptions::default()
            },
        );
        let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
        let actor = root
            .spawn::<DisruptionActor>(DISRUPTION_KEY, disruption.clone())
            .unwrap();
        let signal = disruption.changes.clone();
        let pump = actor.clone();
        tokio::task::spawn_local(async move {
            while let Some(change) = receiver.recv().await {
                if structural(&change) {
                    signal.structural();
                }
                let _ = pump.nudge(ClusterChanged);
            }
        });
        Self {
            api,
            view,
            mirror,
            clock,
            metrics,
            disruption,
            actor,
            versions: AtomicU64::new(0),
            _kit: kit,
            _root: root,
        }
    }

    fn stamp<K: Resource>(&self, object: &mut K) {
        support::stamp(object, &self.versions, self.clock.now());
    }

    fn add_nodepool(&self, mut nodepool: NodePool) {
        self.stamp(&mut nodepool);
        let name = nodepool.metadata.name.clone().unwrap();
        self.api.seed_nodepool(nodepool);
        self.mirror.sync_nodepool(&name);
    }

    /// Seeds a node and its NodeClaim; returns (node, nodeclaim) names.
    fn add(&self, managed: &Managed) -> (String, String) {
        let (mut claim, mut node) = managed.objects(self.clock.now());
        self.stamp(&mut claim);
        self.stamp(&mut node);
        self.api.seed_nodeclaim(claim);
        self.mirror.sync_nodeclaim(&managed.claim_name());
        self.api.seed_node(node);
        self.mirror.sync_node(&managed.node_name());
        (managed.node_name(), managed.claim_name())
    }

    fn put_pod(&self, mut pod: Pod) {
        self.stamp(&mut pod);
        let namespace = pod.metadata.namespace.clone().unwrap();
        let name = pod.metadata.name.clone().unwrap();
        self.api.seed_pod(pod);
        self.mirror.sync_pod(&namespace, &name);
    }

    /// PDBs have no writer in the fake: straight into the view, with the change routed.
    fn put_pdb(&self, pdb: PodDisruptionBudget) {
        self.view.put_pdb(pdb);
        self.disruption.changes.structural();
        let _ = self.actor.nudge(ClusterChanged);
    }

    /// Changes a node as a user would (`kubectl annotate`).
    async fn edit_node(&self, name: &str, edit: impl Fn(&mut Node) + Send + Sync) {
        self.mirror.update_node(name, &edit).await.unwrap();
    }

    /// What the replacement's NodeClaim actor would write once its node is up.
    async fn initialize(&self, claim: &str) {
        let now = self.clock.now();
        let change = move |status: &mut NodeClaimStatus| {
            for kind in [cond::LAUNCHED, cond::REGISTERED, cond::INITIALIZED] {
                status
                    .conditions
                    .push(serde_json::from_value(condition(kind, now)).unwrap());
            }
        };
        self.mirror
            .update_nodeclaim_status(claim, &change)
            .await
            .unwrap();
    }

    /// What the NodeClaim actor does at the end of a termination: the finalizers go, so the
    /// NodeClaim and its Node leave the cluster.
    async fn finish_termination(&self, node: &str, claim: &str) {
        let release_claim = |c: &mut NodeClaim| c.metadata.finalizers = None;
        self.mirror
            .update_nodeclaim(claim, &release_claim)
            .await
            .unwrap();
        let release_node = |n: &mut Node| n.metadata.finalizers = None;
        self.mirror.update_node(node, &release_node).await.unwrap();
        self.mirror.delete_node(node).await.unwrap();
        assert!(self.api.nodeclaim(claim).is_none() && self.api.node(node).is_none());
    }

    async fn delete_nodeclaim(&self, name: &str) {
        self.mirror.delete_nodeclaim(name).await.unwrap();
    }

    fn history(&self) -> Vec<DisruptionRecord> {
        self.disruption.history()
    }

    fn states(&self) -> Vec<CommandState> {
        self.history().into_iter().map(|r| r.state).collect()
    }

    fn metrics(&self) -> &DisruptionMetrics {
        &self.disruption.metrics
    }

    fn tainted(&self, node: &str) -> bool {
        self.api
            .node(node)
            .and_then(|n| n.spec)
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == labels::DISRUPTED_TAINT && t.effect == "NoSchedule")
    }

    /// The NodeClaim's `DisruptionReason` condition: (status, reason).
    fn disruption_reason(&self, claim: &str) -> Option<(String, String)> {
        self.api
            .nodeclaim(claim)?
            .status?
            .conditions
            .iter()
            .find(|c| c.type_ == cond::DISRUPTION_REASON)
            .map(|c| (c.status.as_str().to_owned(), c.reason.clone()))
    }

    /// Whether disruption asked to delete this NodeClaim.
    fn delete_requested(&self, claim: &str) -> bool {
        self.api
            .calls_of(Operation::DeleteNodeClaim)
            .iter()
            .any(|c| matches!(c, ClusterCall::DeleteNodeClaim { name } if name == claim))
    }

    /// The NodeClaims disruption created.
    fn created(&self) -> Vec<String> {
        self.api
            .calls_of(Operation::CreateNodeClaim)
            .into_iter()
            .filter_map(|c| match c {
                ClusterCall::CreateNodeClaim { name } => Some(name),
                _ => None,
            })
            .collect()
    }

    /// Events of one reason: (object name, note).
    fn events(&self, reason: &str) -> Vec<(String, String)> {
        self.api
            .events()
            .into_iter()
            .filter(|e| e.reason == reason)
            .map(|e| {
                (
                    e.regarding.name.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// `karpenter_nodeclaims_created_total{reason, nodepool="default"}` over both capacity-type
    /// values it may carry (the Provisioner labels it from the NodePool template's labels).
    fn created_count(&self, reason: &str) -> u64 {
        let family = self.metrics.nodeclaims_created();
        ["", labels::CAPACITY_TYPE_ON_DEMAND]
            .iter()
            .map(|capacity_type| {
                family
                    .get_or_create(&CreatedLabels {
                        reason: reason.to_owned(),
                        nodepool: POOL.to_owned(),
                        capacity_type: (*capacity_type).to_owned(),
                    })
                    .get()
            })
            .sum()
    }

    async fn explain(&self, node: &str) -> Vec<NodeVerdict> {
        self.actor
            .request(
                ExplainNode {
                    name: node.to_owned(),
                },
                TIMEOUT,
            )
            .await
            .unwrap()
            .verdicts
    }

    async fn rounds(&self) -> u64 {
        self.actor
            .request(GetDisruptionStatus, TIMEOUT)
            .await
            .unwrap()
            .rounds
    }

    /// Advances time in 1-second steps until `condition` holds, at most `limit`.
    async fn wait_for(&self, limit: Duration, mut condition: impl FnMut(&Self) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            settle().await;
            if condition(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Lets every actor and task run until they wait (the paused clock moves by a few ms).
async fn settle() {
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn advance(by: Duration) {
    tokio::time::sleep(by).await;
    settle().await;
}

/// The one command's state, asserting there is exactly one.
fn only(history: &[DisruptionRecord]) -> &DisruptionRecord {
    assert_eq!(history.len(), 1, "one command: {history:#?}");
    &history[0]
}

/// Starts a harness with the default pool, an 8-CPU node running one small pod (consolidation
/// replaces it by a cheaper node) and waits until the command is executed; returns the
/// harness, the candidate (node, nodeclaim) and the replacement's name.
async fn replacing() -> (Harness, (String, String), String) {
    let h = Harness::start();
    h.add_nodepool(nodepool(POOL, json!({})));
    let candidate = h.add(&Managed::new("big", 8));
    h.put_pod(pod("web", &candidate.0, "500m"));
    assert!(
        h.wait_for(VALIDATION + Duration::from_secs(2), |h| {
            h.history()
                .first()
                .is_some_and(|r| r.state == CommandState::Executing)
        })
        .await,
        "the replacement command executes after its validation: {:#?}",
        h.history()
    );
    let replacement = only(&h.history()).replacements.clone();
    assert_eq!(replacement.len(), 1);
    (h, candidate, replacement[0].clone())
}

// ---- emptiness -----------------------------------------------------------------------------

#[actix::test]
async fn an_empty_node_is_deleted_after_the_fifteen_second_validation() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(POOL, json!({})));
    let (node, claim) = h.add(&Managed::new("a", 2));
    settle().await;
    let record = only(&h.history()).clone();
    assert_eq!(
        (record.method, record.reason, record.decision),
        ("emptiness", "Empty", "delete")
    );
    assert_eq!(record.state, CommandState::Validating);

    advance(VALIDATION.saturating_sub(Duration::from_millis(100))).await;
    assert!(
        !h.tainted(&node) && !h.delete_requested(&claim),
        "nothing is touched before the 15 s are up"
    );
    assert_eq!(h.disruption_reason(&claim), None);

    advance(Duration::from_millis(200)).await;
    assert!(h.tainted(&node), "marked once validated");
    assert_eq!(
        h.disruption_reason(&claim),
        Some(("True".to_owned(), "Empty".to_owned()))
    );
    assert!(
        h.wait_for(Duration::from_secs(2), |h| h.delete_requested(&claim))
            .await
    );
    assert_eq!(h.states(), [CommandState::Succeeded]);
    assert!(
        h.api
            .nodeclaim(&claim)
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    assert_eq!(
        h.metrics
            .disrupted_count("empty", POOL, labels::CAPACITY_TYPE_ON_DEMAND),
        1
    );
    assert_eq!(h.metrics().decisions_count(Method::Emptiness, "delete"), 1);
    let terminating = h.events(DISRUPTION_TERMINATING);
    assert!(
        terminating.contains(&(node.clone(), "Disrupting Node: Empty/Delete".to_owned())),
        "{terminating:?}"
    );
    assert!(
        terminating.contains(&(
            claim.clone(),
            "Disrupting NodeClaim: Empty/Delete".to_owned()
        )),
        "{terminating:?}"
    );
    assert!(h.created().is_empty(), "a delete launches nothing");
}

// ---- single-node replacement ----------------------------------------------------------------

#[actix::test]
async fn an_underutilized_node_is_replaced_by_a_cheaper_one_once_the_replacement_initializes() {
    tokio::time::pause();
    let (h, (node, claim), replacement) = replacing().await;
    let record = only(&h.history()).clone();
    assert_eq!(
        (record.method, record.reason, record.decision),
        ("single-node", "Underutilized", "replace")
    );
    assert!(record.price_after.unwrap() < record.price_before.unwrap());
    assert!(h.tainted(&node));
    assert_eq!(
        h.disruption_reason(&claim),
        Some(("True".to_owned(), "Underutilized".to_owned()))
    );
    assert_eq!(h.created(), std::slice::from_ref(&replacement));
    let launched = h.api.nodeclaim(&replacement).unwrap();
    let types: Vec<String> = launched
        .spec
        .requirements
        .iter()
        .map(karpenter_core::apis::requirements::NodeClaimRequirement::as_requirement)
        .find(|r| r.key == labels::INSTANCE_TYPE)
        .unwrap()
        .values
        .clone();
    assert!(
        !types.is_empty() && !types.contains(&type_name(8)) && !types.contains(&type_name(16)),
        "only cheaper types: {types:?}"
    );
    assert_eq!(h.created_count("underutilized"), 1);
    assert!(h.events(DISRUPTION_LAUNCHING).contains(&(
        replacement.clone(),
        "Launching NodeClaim: Underutilized/Replace".to_owned()
    )));

    // A launching replacement holds the candidate.
    advance(Duration::from_secs(90)).await;
    assert!(
        !h.delete_requested(&claim),
        "not deleted before the replacement is up"
    );
    assert!(h.tainted(&node));
    assert_eq!(h.states(), [CommandState::Executing]);
    assert!(
        h.events("DisruptionWaitingReadiness")
            .iter()
            .any(|(name, _)| name == &replacement)
    );

    h.initialize(&replacement).await;
    assert!(
        h.wait_for(Duration::from_secs(2), |h| h.delete_requested(&claim))
            .await
    );
    assert_eq!(h.states(), [CommandState::Succeeded]);
    assert_eq!(
        h.metrics
            .disrupted_count("underutilized", POOL, labels::CAPACITY_TYPE_ON_DEMAND),
        1
    );
    assert_eq!(
        h.metrics().decisions_count(Method::SingleNode, "replace"),
        1
    );
    assert!(h.delete_requested(&claim) && !h.delete_requested(&replacement));
}

// ---- validation ----------------------------------------------------------------------------

#[actix::test]
async fn a_pod_bound_to_an_empty_candidate_during_validation_abandons_the_command() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(POOL, json!({})));
    let (node, claim) = h.add(&Managed::new("a", 2));
    settle().await;
    assert_eq!(h.states(), [CommandState::Validating]);

    advance(Duration::from_secs(5)).await;
    h.put_pod(pod("late", &node, "100m"));
    advance(VALIDATION).await;

    let state = only(&h.history()).state.clone();
    assert!(
        matches!(&state, CommandState::Abandoned(reason) if reason.contains("no longer valid")),
        "{state:?}"
    );
    assert_eq!(h.metrics().failed_validations_count(Method::Emptiness), 1);
    advance(QUIET).await;
    assert!(!h.tainted(&node) && !h.delete_requested(&claim));
    assert_eq!(h.disruption_reason(&claim), None);
    assert_eq!(h.metrics().decisions_count(Method::Emptiness, "delete"), 0);
}

#[actix::test]
async fn a_candidate_annotated_do_not_disrupt_during_validation_is_not_replaced() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(POOL, json!({})));
    let (node, claim) = h.add(&Managed::new("big", 8));
    h.put_pod(pod("web", &node, "500m"));
    settle().await;
    assert_eq!(only(&h.history()).method, "single-node");

    advance(Duration::from_secs(5)).await;
    h.edit_node(&node, |n| {
        n.metadata
            .annotations
            .get_or_insert_default()
            .insert(labels::DO_NOT_DISRUPT.to_owned(), "true".to_owned());
    })
    .await;
    advance(VALIDATION).await;

    assert!(
        matches!(&only(&h.history()).state, CommandState::Abandoned(_)),
        "{:?}",
        h.states()
    );
    assert_eq!(h.metrics().failed_validations_count(Method::SingleNode), 1);
    advance(QUIET).await;
    assert_eq!(h.history().len(), 1, "no new command for a blocked node");
    assert!(!h.tainted(&node) && !h.delete_requested(&claim));
    assert!(h.created().is_empty(), "no replacement launched");
}

// ---- the queue -----------------------------------------------------------------------------

#[actix::test]
async fn a_replacement_that_never_initializes_fails_the_command_after_ten_minutes() {
    tokio::time::pause();
    let (h, (node, claim), _replacement) = replacing().await;
    let executed = Instant::now();

    advance(Duration::from_mins(9)).await;
    assert_eq!(
        h.states(),
        [CommandState::Executing],
        "still waiting at 9 minutes"
    );
    assert!(h.tainted(&node));

    assert!(
        h.wait_for(Duration::from_mins(2), |h| {
            h.history()
                .first()
                .is_some_and(|r| matches!(r.state, CommandState::Failed(_)))
        })
        .await
    );
    let waited = Instant::now().duration_since(executed);
    assert!(
        waited >= Duration::from_mins(10)
            && waited <= Duration::from_mins(10) + Duration::from_secs(3),
        "failed after {waited:?}"
    );
    let CommandState::Failed(reason) = &h.history()[0].state else {
        unreachable!()
    };
    assert!(reason.contains("timeout"), "{reason}");
    assert!(!h.tainted(&node), "untainted");
    assert_eq!(h.disruption_reason(&claim), None, "condition cleared");
    assert_eq!(
        h.metrics()
            .queue_failures_count(Method::SingleNode, "replace"),
        1
    );
    assert!(h.api.nodeclaim(&claim).is_some() && !h.delete_requested(&claim));
}

#[actix::test]
async fn a_deleted_replacement_fails_the_command_after_the_five_second_grace() {
    tokio::time::pause();
    let (h, (node, claim), replacement) = replacing().await;
    h.delete_nodeclaim(&replacement).await;
    assert!(h.api.nodeclaim(&replacement).is_none());

    advance(Duration::from_secs(3)).await;
    assert_eq!(
        h.states(),
        [CommandState::Executing],
        "a fresh replacement missing from the view may just not be there yet"
    );
    assert!(
        h.wait_for(Duration::from_secs(4), |h| {
            matches!(&h.history()[0].state, CommandState::Failed(reason) if reason.contains("was deleted"))
        })
        .await,
        "{:?}",
        h.states()
    );
    assert!(!h.tainted(&node));
    assert_eq!(h.disruption_reason(&claim), None);
    assert!(!h.delete_requested(&claim));
    assert_eq!(
        h.metrics()
            .queue_failures_count(Method::SingleNode, "replace"),
        1
    );
}

#[actix::test]
async fn an_emptiness_command_validated_down_to_fewer_candidates_records_only_those() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(POOL, json!({ "budgets": [{ "nodes": "2" }] })));
    let (a, a_claim) = h.add(&Managed::new("a", 2));
    let (b, b_claim) = h.add(&Managed::new("b", 2));
    settle().await;
    assert_eq!(only(&h.history()).candidates.len(), 2);

    advance(Duration::from_secs(5)).await;
    h.put_pod(pod("late", &b, "100m"));
    advance(VALIDATION).await;

    assert!(h.delete_requested(&a_claim) && !h.delete_requested(&b_claim));
    assert!(h.tainted(&a) && !h.tainted(&b));
    // As Karpenter's emptiness validator: a candidate that is merely no longer empty is not a
    // failed validation while others remain.
    assert_eq!(h.metrics().failed_validations_count(Method::Emptiness), 0);
    let record = only(&h.history()).clone();
    assert_eq!(record.state, CommandState::Succeeded);
    let names: Vec<&str> = record.candidates.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, [a.as_str()], "the history shows what was disrupted");
}

#[actix::test]
async fn a_restart_during_validation_abandons_the_lost_command_and_decides_again() {
    tokio::time::pause();
    let plan = FaultPlan::new(3)
        .with_rule(
            FaultRule::new(FaultAction::Panic)
                .kind("DisruptionActor")
                .message("ValidateDue")
                .nth(1),
        )
        .unwrap();
    let h = Harness::start_with(Some(plan));
    h.add_nodepool(nodepool(POOL, json!({})));
    let (node, claim) = h.add(&Managed::new("a", 2));
    settle().await;
    assert_eq!(h.states(), [CommandState::Validating]);

    // The validation's timer dies with the instance; the next one decides afresh.
    advance(VALIDATION).await;
    assert!(
        h.wait_for(Duration::from_secs(5), |h| h.actor.restarts() == 1)
            .await,
        "the injected panic restarts the actor"
    );
    assert!(!h.tainted(&node), "the lost command was never executed");
    assert!(
        matches!(&h.states()[0], CommandState::Abandoned(reason) if reason.contains("restart")),
        "the lost command is not left validating: {:?}",
        h.states()
    );
    assert!(
        h.wait_for(QUIET, |h| h.delete_requested(&claim)).await,
        "{:?}",
        h.states()
    );
    let states = h.states();
    assert_eq!(states.len(), 2);
    assert_eq!(states[1], CommandState::Succeeded);
}

// ---- drift ---------------------------------------------------------------------------------

#[actix::test]
async fn a_drifted_node_is_replaced_without_waiting_for_validation() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(POOL, json!({})));
    // The cheapest type with a pod: consolidation has nothing to do, only drift.
    let (node, claim) = h.add(&Managed::new("old", 2).drifted());
    h.put_pod(pod("web", &node, "500m"));
    settle().await;

    let record = only(&h.history()).clone();
    assert_eq!(
        (record.method, record.reason, record.decision),
        ("drift", "Drifted", "replace")
    );
    assert_eq!(record.state, CommandState::Executing, "no 15 s wait");
    assert!(h.tainted(&node));
    assert_eq!(
        h.disruption_reason(&claim),
        Some(("True".to_owned(), "Drifted".to_owned()))
    );
    assert_eq!(h.created().len(), 1);
    assert_eq!(h.created_count("drifted"), 1);

    h.initialize(&record.replacements[0]).await;
    assert!(
        h.wait_for(Duration::from_secs(2), |h| h.delete_requested(&claim))
            .await
    );
    assert_eq!(
        h.metrics
            .disrupted_count("drifted", POOL, labels::CAPACITY_TYPE_ON_DEMAND),
        1
    );
}

// ---- blockers ------------------------------------------------------------------------------

#[actix::test]
async fn do_not_disrupt_pods_blocking_pdbs_and_do_not_disrupt_nodes_keep_their_nodes() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(POOL, json!({})));
    h.put_pdb(blocking_pdb("guard", "guarded"));
    // Each would be replaced (8 CPUs for a small pod) or deleted (empty) if nothing blocked it.
    let (pinned, _) = h.add(&Managed::new("pinned", 8));
    h.put_pod(with_do_not_disrupt(pod("keep", &pinned, "500m")));
    let (guarded, _) = h.add(&Managed::new("guarded", 8));
    h.put_pod(pod("guarded", &guarded, "500m"));
    let (annotated, _) = h.add(&Managed::new("annotated", 2).do_not_disrupt());
    advance(QUIET).await;

    assert_eq!(h.history(), [], "no command");
    for node in [&pinned, &guarded, &annotated] {
        assert!(!h.tainted(node), "{node}");
    }
    let blocked = h.events(DISRUPTION_BLOCKED);
    for expected in [
        (
            pinned.clone(),
            r#"Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/keep)"#,
        ),
        (
            guarded.clone(),
            "Pdb prevents pod evictions (PodDisruptionBudget=default/guard)",
        ),
        (
            annotated.clone(),
            r#"Disruption is blocked through the "karpenter.sh/do-not-disrupt" annotation"#,
        ),
    ] {
        assert!(
            blocked.contains(&(expected.0.clone(), expected.1.to_owned())),
            "{expected:?} in {blocked:#?}"
        );
    }
    assert!(
        blocked.iter().any(|(name, _)| name == "claim-pinned"),
        "the NodeClaim gets the event too"
    );
}

// ---- budgets -------------------------------------------------------------------------------

#[actix::test]
async fn a_zero_budget_disrupts_nothing_and_reports_zero_allowed() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(POOL, json!({ "budgets": [{ "nodes": "0" }] })));
    h.add_nodepool(nodepool("other", json!({ "budgets": [{ "nodes": "3" }] })));
    let (node, claim) = h.add(&Managed::new("a", 2));
    // The other pool's node runs a pod only its own type (or a larger one) can hold: nothing
    // to do there either.
    let (busy, _) = h.add(&Managed::new("busy", 4).pool("other"));
    h.put_pod(pod("web", &busy, "3"));
    advance(QUIET).await;

    assert_eq!(h.history(), []);
    assert!(!h.tainted(&node) && !h.delete_requested(&claim));
    assert_eq!(h.metrics().allowed_disruptions(POOL, Method::Emptiness), 0);
    assert_eq!(
        h.metrics().allowed_disruptions("other", Method::Emptiness),
        3
    );
    assert!(
        h.events(DISRUPTION_BLOCKED)
            .iter()
            .any(|(name, _)| name == POOL),
        "the NodePool's DisruptionBlocked event: {:?}",
        h.events(DISRUPTION_BLOCKED)
    );
}

#[actix::test]
async fn a_scheduled_zero_budget_holds_while_its_window_is_open() {
    tokio::time::pause();
    let h = Harness::start();
    // Daily from 12:00 for an hour; the tests start at 12:00.
    h.add_nodepool(nodepool(
        POOL,
        json!({ "budgets": [{ "nodes": "0", "schedule": "0 12 * * *", "duration": "1h" }] }),
    ));
    let (node, claim) = h.add(&Managed::new("a", 2));
    advance(Duration::from_mins(59)).await;
    assert_eq!(h.history(), []);
    assert!(!h.tainted(&node));
    assert_eq!(h.metrics().allowed_disruptions(POOL, Method::Emptiness), 0);

    // At 13:00 the window closes and no other budget limits the pool.
    assert!(
        h.wait_for(Duration::from_mins(2), |h| h.delete_requested(&claim))
            .await
    );
    assert!(h.clock.now() >= "2025-06-01T13:00:15Z".parse::<Timestamp>().unwrap());
}

#[actix::test]
async fn an_invalid_budget_schedule_fails_closed() {
    tokio::time::pause();
    let h = Harness::start();
    // Day-of-week 7 passes the CRD's validation but not robfig's parser.
    h.add_nodepool(nodepool(
        POOL,
        json!({ "budgets": [{ "nodes": "10", "schedule": "0 0 * * 7", "duration": "1h" }] }),
    ));
    let (node, claim) = h.add(&Managed::new("a", 2));
    advance(QUIET).await;
    assert_eq!(h.history(), []);
    assert!(!h.tainted(&node) && !h.delete_requested(&claim));
    assert_eq!(h.metrics().allowed_disruptions(POOL, Method::Emptiness), 0);
}

#[actix::test]
async fn a_budget_of_one_disrupts_one_node_at_a_time() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(POOL, json!({ "budgets": [{ "nodes": "1" }] })));
    let nodes: Vec<(String, String)> = ["a", "b", "c"]
        .iter()
        .map(|key| h.add(&Managed::new(key, 2)))
        .collect();
    let deleted = |h: &Harness| {
        nodes
            .iter()
            .filter(|(_, claim)| h.delete_requested(claim))
            .cloned()
            .collect::<Vec<_>>()
    };
    for round in 1..=3 {
        assert!(
            h.wait_for(VALIDATION + Duration::from_secs(3), |h| deleted(h).len()
                == round)
                .await,
            "command {round}: {:#?}",
            h.history()
        );
        // The deleting node holds the budget until its termination finishes.
        advance(QUIET).await;
        assert_eq!(deleted(&h).len(), round, "one at a time");
        let tainted = nodes.iter().filter(|(node, _)| h.tainted(node)).count();
        assert_eq!(tainted, 1, "only the deleting node is tainted");
        let (node, claim) = deleted(&h)
            .into_iter()
            .find(|(_, claim)| h.api.nodeclaim(claim).is_some())
            .unwrap();
        h.finish_termination(&node, &claim).await;
    }
    let history = h.history();
    assert_eq!(history.len(), 3);
    assert!(history.iter().all(|r| r.candidates.len() == 1));
    assert!(history.iter().all(|r| r.state == CommandState::Succeeded));
}

// ---- restarts ------------------------------------------------------------------------------

#[actix::test]
async fn marks_no_queued_command_accounts_for_are_cleaned_by_the_first_round() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(POOL, json!({})));
    // As a restart leaves a command that was in flight: a pod on the cheapest type, so nothing
    // decides to disrupt it again.
    let (node, claim) = h.add(&Managed::new("a", 2).disrupted());
    h.put_pod(pod("web", &node, "500m"));
    // A node whose NodeClaim is being deleted keeps its taint.
    let (going, going_claim) = h.add(&Managed::new("going", 2).disrupted());
    h.delete_nodeclaim(&going_claim).await;
    settle().await;

    assert!(h.rounds().await >= 1);
    assert!(!h.tainted(&node), "the stale taint is removed");
    assert_eq!(
        h.disruption_reason(&claim),
        None,
        "the stale condition is cleared"
    );
    assert!(h.tainted(&going), "a deleting node stays tainted");
    assert_eq!(h.history(), []);
}

// ---- consolidation policy ------------------------------------------------------------------

#[actix::test]
async fn when_empty_pools_delete_empty_nodes_but_leave_underutilized_ones() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(
        POOL,
        json!({ "consolidationPolicy": "WhenEmpty" }),
    ));
    let (big, big_claim) = h.add(&Managed::new("big", 8));
    h.put_pod(pod("web", &big, "500m"));
    let (_, empty_claim) = h.add(&Managed::new("empty", 2));
    advance(QUIET).await;

    assert!(h.delete_requested(&empty_claim), "emptiness still runs");
    assert!(!h.delete_requested(&big_claim) && !h.tainted(&big));
    assert!(
        h.created().is_empty(),
        "no replacement for the underutilized node"
    );
    assert!(h.history().iter().all(|r| r.method == "emptiness"));
    assert!(
        h.events(UNCONSOLIDATABLE).contains(&(
            big.clone(),
            r#"NodePool "default" has non-empty consolidation disabled"#.to_owned()
        )),
        "{:?}",
        h.events(UNCONSOLIDATABLE)
    );
}

#[actix::test]
async fn consolidate_after_never_leaves_even_empty_nodes() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(POOL, json!({ "consolidateAfter": "Never" })));
    // Consolidatable from before the pool was switched to Never.
    let (node, claim) = h.add(&Managed::new("a", 2));
    advance(QUIET).await;
    assert_eq!(h.history(), []);
    assert!(!h.tainted(&node) && !h.delete_requested(&claim));
    assert!(
        h.events(UNCONSOLIDATABLE).contains(&(
            node.clone(),
            r#"NodePool "default" has consolidation disabled"#.to_owned()
        )),
        "{:?}",
        h.events(UNCONSOLIDATABLE)
    );
}

// ---- explain -------------------------------------------------------------------------------

#[actix::test]
async fn explain_node_names_the_blocker_and_the_budget() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(POOL, json!({})));
    h.add_nodepool(nodepool("frozen", json!({ "budgets": [{ "nodes": "0" }] })));
    let (annotated, _) = h.add(&Managed::new("annotated", 2).do_not_disrupt());
    let (frozen, _) = h.add(&Managed::new("frozen", 2).pool("frozen"));
    advance(Duration::from_secs(11)).await;

    let verdicts = h.explain(&annotated).await;
    assert!(
        verdicts.iter().any(|v| matches!(v,
            NodeVerdict::Blocked { message } if message.contains("do-not-disrupt"))),
        "{verdicts:#?}"
    );
    let verdicts = h.explain(&frozen).await;
    assert!(
        verdicts.iter().any(|v| matches!(v,
            NodeVerdict::Budget { node_pool, reason, allowed: 0, .. }
                if node_pool == "frozen" && reason == "Empty")),
        "{verdicts:#?}"
    );
    assert_eq!(h.explain("node-unknown").await, [NodeVerdict::NotSeen]);
}

#[actix::test]
async fn explain_node_follows_a_command_from_validation_to_the_queue() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(POOL, json!({})));
    let (node, _) = h.add(&Managed::new("big", 8));
    h.put_pod(pod("web", &node, "500m"));
    settle().await;
    let verdicts = h.explain(&node).await;
    assert!(
        verdicts.iter().any(|v| matches!(v,
            NodeVerdict::Validating { command: 1, method } if method == "single-node")),
        "{verdicts:#?}"
    );

    advance(VALIDATION).await;
    let verdicts = h.explain(&node).await;
    assert!(
        verdicts.iter().any(|v| matches!(v,
            NodeVerdict::Disrupting { command: 1, method, reason }
                if method == "single-node" && reason == "underutilized/replace")),
        "{verdicts:#?}"
    );
}

// ---- through the daemon --------------------------------------------------------------------

#[actix::test]
async fn an_empty_node_goes_end_to_end_through_the_daemon() {
    tokio::time::pause();
    // The whole daemon: the NodeClaim actor launches, registers, initializes and marks the
    // NodeClaim Consolidatable 30 s after initialization; disruption deletes it 15 s later; the
    // NodeClaim actor then terminates it.
    let h = support::Harness::start();
    h.cloud.set_instance_types(catalogue());
    h.add_nodeclass(support::nodeclass(Some(true)));
    h.add_nodepool(support::nodepool(
        POOL,
        json!({ "spec": { "disruption": { "consolidateAfter": "30s" } } }),
    ));
    h.add_nodeclaim(support::nodeclaim(
        "default-a",
        json!({ "spec": { "requirements": [
            { "key": labels::NODEPOOL, "operator": "In", "values": [POOL] },
            { "key": labels::INSTANCE_TYPE, "operator": "In", "values": [type_name(2)] },
            { "key": labels::ZONE, "operator": "In", "values": [zone()] },
        ]}}),
    ));
    h.settle().await;
    let node = h.register_node("default-a", &[], &[]);
    h.settle().await;
    h.edit_node(&node, |n| support::make_ready(n, &[]));
    h.settle().await;
    assert_eq!(
        h.condition("default-a", cond::INITIALIZED).map(|c| c.0),
        Some("True".to_owned())
    );
    let initialized = Instant::now();

    // Not consolidatable for 30 s, then 15 s of validation.
    h.advance(Duration::from_secs(40)).await;
    assert!(
        h.nodeclaim("default-a")
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );
    assert_eq!(
        h.condition("default-a", cond::CONSOLIDATABLE).map(|c| c.0),
        Some("True".to_owned())
    );
    assert!(
        h.wait_for(Duration::from_mins(1), Duration::from_secs(1), |h| h
            .nodeclaim("default-a")
            .is_none())
            .await,
        "the empty NodeClaim is disrupted and terminated"
    );
    let gone = Instant::now().duration_since(initialized);
    assert!(gone >= Duration::from_secs(45), "after {gone:?}");
    assert!(h.api.node(&node).is_none());
    assert_eq!(
        h.metrics
            .disrupted_count("empty", POOL, labels::CAPACITY_TYPE_ON_DEMAND),
        1
    );
    assert!(
        h.events()
            .contains(&(DISRUPTION_TERMINATING.to_owned(), "default-a".to_owned()))
    );
    let verdicts = h.daemon.explain_node(&node).await.unwrap().verdicts;
    assert_eq!(verdicts, [NodeVerdict::NotSeen], "gone from the next round");
}
