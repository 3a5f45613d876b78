//! A small cluster for actor tests: the recording [`FakeClusterApi`] holds the objects, a
//! [`MemoryClusterView`] mirrors them after every write (the watch, without lag), and every
//! change is routed to the [`Daemon`] as the ingress pump would. The cloud is a
//! [`FakeCloudProvider`]; time is tokio's, paused, and [`PausedClock`] stamps Kubernetes
//! timestamps from it, so a timer and the timestamps it compares always agree.

#![allow(
    dead_code,
    reason = "each test file uses a different part of the harness"
)]

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_actors::daemon::{Daemon, StartOptions};
use karpenter_actors::deps::ClusterVersion;
use karpenter_actors::deps::{AwsPorts, Deps};
use karpenter_actors::kwok::ec2::{KwokEc2, KwokEc2Config, KwokEc2Deps};
use karpenter_actors::kwok::eventbridge::KwokEventBridge;
use karpenter_actors::kwok::iam::KwokIam;
use karpenter_actors::kwok::pricing::KwokPricing;
use karpenter_actors::kwok::sqs::KwokSqs;
use karpenter_actors::kwok::ssm::KwokSsm;
use karpenter_actors::metrics::Metrics;
use karpenter_actors::ports::clock::Clock;
use karpenter_actors::ports::cluster::ClusterApi;
use karpenter_actors::providers::unavailable::UnavailableOfferings;
use karpenter_actors::runtime::{ActorKit, FaultPlan, GroupSpec, KitOptions, RootGroup};
use karpenter_actors::testing::MemoryClusterView;
use karpenter_actors::testing::{ClusterCall, Operation};
use karpenter_actors::testing::{FakeCloudProvider, fake_instance_type};
use karpenter_actors::testing::{FakeClusterApi, MirroredClusterApi};
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool};
use karpenter_core::domain::userdata::ClusterInfo;
use kube::Resource;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The wall clock as tokio's paused clock moves it: `start` plus the tokio time elapsed.
#[derive(Debug)]
pub struct PausedClock {
    start: Timestamp,
    origin: Instant,
}

impl PausedClock {
    #[must_use]
    pub fn new(start: Timestamp) -> Self {
        Self {
            start,
            origin: Instant::now(),
        }
    }
}

impl Clock for PausedClock {
    fn now(&self) -> Timestamp {
        let elapsed =
            SignedDuration::try_from(self.origin.elapsed()).unwrap_or(SignedDuration::MAX);
        self.start.saturating_add(elapsed).unwrap_or(self.start)
    }
}

/// The time tests start at.
pub fn start_time() -> Timestamp {
    "2025-06-01T12:00:00Z".parse().unwrap()
}

/// Everything a lifecycle test touches.
pub struct Harness {
    pub api: Arc<FakeClusterApi>,
    pub view: Arc<MemoryClusterView>,
    pub cloud: Arc<FakeCloudProvider>,
    pub clock: Arc<PausedClock>,
    pub metrics: Arc<Metrics>,
    pub registry: Registry,
    pub kit: ActorKit,
    pub root: RootGroup,
    pub daemon: Rc<Daemon>,
    pub mirror: Arc<MirroredClusterApi>,
    versions: AtomicU64,
}

fn aws_ports(clock: Arc<dyn Clock>) -> AwsPorts {
    let sqs = Arc::new(KwokSqs::new("us-west-2"));
    let eventbridge = Arc::new(KwokEventBridge::new(
        "us-west-2",
        Arc::clone(&sqs),
        Arc::clone(&clock),
    ));
    let ec2 = KwokEc2::new(
        KwokEc2Config::new("us-west-2", "test-cluster"),
        KwokEc2Deps {
            clock,
            events: None,
        },
    )
    .unwrap();
    AwsPorts {
        ec2: Arc::new(ec2),
        sqs,
        eventbridge,
        iam: Arc::new(KwokIam::default()),
        ssm: Arc::new(KwokSsm::default()),
        pricing: Arc::new(KwokPricing::default()),
        eks: Arc::new(karpenter_actors::kwok::eks::KwokEks::with_cluster(
            "test-cluster",
        )),
    }
}

/// The daemon's dependencies over these fakes: default settings, kwok AWS ports, a test
/// cluster's identity. For tests that start single actors themselves.
pub fn fake_deps(
    clock: Arc<PausedClock>,
    cluster: Arc<dyn ClusterApi>,
    view: Arc<MemoryClusterView>,
    cloud: Arc<FakeCloudProvider>,
    metrics: Arc<Metrics>,
) -> Deps {
    Deps {
        settings: Arc::new(karpenter_config::Settings::default()),
        clock: clock.clone(),
        cluster,
        view,
        cloud,
        aws: aws_ports(clock),
        unavailable: Arc::new(UnavailableOfferings::default()),
        cluster_info: ClusterInfo {
            name: "test-cluster".into(),
            endpoint: "https://test-cluster.example.com".into(),
            ..ClusterInfo::default()
        },
        region: "us-west-2".into(),
        kubernetes_version: ClusterVersion::default(),
        kubernetes_version_source: None,
        metrics,
    }
}

impl Harness {
    /// Starts the daemon's actors over an empty fake cluster. Call inside `#[actix::test]`
    /// after `tokio::time::pause()`.
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// Like [`Harness::start`], with a fault plan in the actor kit.
    pub fn start_with(faults: Option<FaultPlan>) -> Self {
        Self::build(faults, karpenter_config::Settings::default())
    }

    /// Like [`Harness::start`], with these settings (feature gates, say).
    pub fn start_with_settings(settings: karpenter_config::Settings) -> Self {
        Self::build(None, settings)
    }

    /// Like [`Harness::start`], with at most `limit` launches in flight.
    pub fn start_with_launch_limit(limit: usize) -> Self {
        Self::build_with(
            None,
            karpenter_config::Settings::default(),
            StartOptions {
                launch_limit: limit,
                ..Self::options()
            },
        )
    }

    /// These tests write the classes' status themselves.
    fn options() -> StartOptions {
        StartOptions {
            nodeclass_actors: false,
            ..StartOptions::default()
        }
    }

    fn build(faults: Option<FaultPlan>, settings: karpenter_config::Settings) -> Self {
        Self::build_with(faults, settings, Self::options())
    }

    fn build_with(
        faults: Option<FaultPlan>,
        settings: karpenter_config::Settings,
        options: StartOptions,
    ) -> Self {
        let clock = Arc::new(PausedClock::new(start_time()));
        let api = Arc::new(FakeClusterApi::new());
        api.set_now(clock.now());
        let view = Arc::new(MemoryClusterView::new());
        let cloud = Arc::new(FakeCloudProvider::new(clock.clone()));
        // Pools offer the type the fake launches, so launched NodeClaims are not drifted
        // (`InstanceTypeNotFound`) unless a test takes it away.
        cloud.set_instance_types(vec![fake_instance_type()]);
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
        let deps = Deps {
            settings: Arc::new(settings),
            ..fake_deps(
                clock.clone(),
                mirror.clone(),
                view.clone(),
                cloud.clone(),
                Arc::clone(&metrics),
            )
        };
        let kit = ActorKit::new(
            &mut registry,
            KitOptions {
                faults: faults.map(Arc::new),
                ..KitOptions::default()
            },
        );
        let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
        let daemon =
            Rc::new(Daemon::start_with((*root).clone(), deps, &mut registry, options).unwrap());
        let pump = Rc::clone(&daemon);
        tokio::task::spawn_local(async move {
            while let Some(change) = receiver.recv().await {
                pump.observe(&change);
            }
        });
        Self {
            api,
            view,
            cloud,
            clock,
            metrics,
            registry,
            kit,
            root,
            daemon,
            mirror,
            versions: AtomicU64::new(0),
        }
    }

    fn stamp<K: Resource>(&self, object: &mut K) {
        stamp(object, &self.versions, self.clock.now());
    }

    /// Lets every actor run until it waits (tokio's paused clock moves by 1 ms).
    pub async fn settle(&self) {
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Moves time forward by `by`, firing every timer on the way.
    pub async fn advance(&self, by: Duration) {
        tokio::time::sleep(by).await;
        self.settle().await;
    }

    /// Advances time in `step`s until `condition` holds, at most `limit`; returns whether it
    /// held.
    pub async fn wait_for(
        &self,
        limit: Duration,
        step: Duration,
        mut condition: impl FnMut(&Self) -> bool,
    ) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            self.settle().await;
            if condition(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(step).await;
        }
    }

    pub fn add_nodeclaim(&self, mut nodeclaim: NodeClaim) {
        self.stamp(&mut nodeclaim);
        let name = nodeclaim.metadata.name.clone().unwrap();
        self.api.seed_nodeclaim(nodeclaim);
        self.mirror.sync_nodeclaim(&name);
    }

    pub fn add_nodepool(&self, mut nodepool: NodePool) {
        self.stamp(&mut nodepool);
        let name = nodepool.metadata.name.clone().unwrap();
        self.api.seed_nodepool(nodepool);
        self.mirror.sync_nodepool(&name);
    }

    pub fn add_nodeclass(&self, mut nodeclass: EC2NodeClass) {
        self.stamp(&mut nodeclass);
        let name = nodeclass.metadata.name.clone().unwrap();
        self.api.seed_ec2nodeclass(nodeclass);
        self.mirror.sync_ec2nodeclass(&name);
    }

    /// Adds or replaces a node (the kubelet's writes).
    pub fn put_node(&self, mut node: Node) {
        self.stamp(&mut node);
        let name = node.metadata.name.clone().unwrap();
        self.api.seed_node(node);
        self.mirror.sync_node(&name);
    }

    /// Changes a node as the kubelet would.
    pub fn edit_node(&self, name: &str, edit: impl FnOnce(&mut Node)) {
        let mut node = self.api.node(name).unwrap();
        edit(&mut node);
        self.put_node(node);
    }

    pub fn put_pod(&self, mut pod: Pod) {
        self.stamp(&mut pod);
        let namespace = pod.metadata.namespace.clone().unwrap();
        let name = pod.metadata.name.clone().unwrap();
        self.api.seed_pod(pod);
        self.mirror.sync_pod(&namespace, &name);
    }

    /// Removes a pod as if it finished and was cleaned up.
    pub async fn remove_pod(&self, namespace: &str, name: &str) {
        self.api.delete_pod(namespace, name, None).await.unwrap();
        self.mirror.sync_pod(namespace, name);
    }

    /// Deletes a NodeClaim as a user would (`kubectl delete nodeclaim`).
    pub async fn delete_nodeclaim(&self, name: &str) {
        self.api.set_now(self.clock.now());
        self.api.delete_nodeclaim(name).await.unwrap();
        self.mirror.sync_nodeclaim(name);
    }

    /// Now, as the actors' clock tells it.
    pub fn clock_now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The NodeClaim as stored.
    pub fn nodeclaim(&self, name: &str) -> Option<NodeClaim> {
        self.api.nodeclaim(name)
    }

    /// The status of one condition of a NodeClaim: (status, reason).
    pub fn condition(&self, name: &str, kind: &str) -> Option<(String, String)> {
        let nodeclaim = self.api.nodeclaim(name)?;
        nodeclaim
            .status?
            .conditions
            .iter()
            .find(|c| c.type_ == kind)
            .map(|c| (c.status.as_str().to_owned(), c.reason.clone()))
    }

    /// The status of one condition of a NodePool: (status, reason).
    pub fn pool_condition(&self, name: &str, kind: &str) -> Option<(String, String)> {
        let nodepool = self.api.nodepool(name)?;
        nodepool
            .status?
            .conditions
            .iter()
            .find(|c| c.type_ == kind)
            .map(|c| (c.status.as_str().to_owned(), c.reason.clone()))
    }

    /// The provider id the NodeClaim's status names.
    pub fn provider_id(&self, name: &str) -> Option<String> {
        self.api.nodeclaim(name)?.status?.provider_id
    }

    /// Registers a node for the NodeClaim's instance as its kubelet would: the NodeClaim's
    /// provider id, the unregistered taint, not Ready yet. Returns the node name.
    pub fn register_node(
        &self,
        nodeclaim: &str,
        labels: &[(&str, &str)],
        taints: &[(&str, &str)],
    ) -> String {
        let provider_id = self.provider_id(nodeclaim).expect("launched");
        let name = format!("ip-{nodeclaim}.ec2.internal");
        let mut node = node(&name, &provider_id, false);
        let node_labels = node.metadata.labels.get_or_insert_default();
        for (key, value) in labels {
            node_labels.insert((*key).to_owned(), (*value).to_owned());
        }
        let node_taints = node.spec.as_mut().unwrap().taints.get_or_insert_default();
        node_taints.push(taint(
            karpenter_core::apis::labels::UNREGISTERED_TAINT,
            "NoExecute",
        ));
        for (key, effect) in taints {
            node_taints.push(taint(key, effect));
        }
        self.put_node(node);
        name
    }

    /// The node's taint keys.
    pub fn node_taints(&self, name: &str) -> Vec<String> {
        self.api
            .node(name)
            .and_then(|n| n.spec)
            .and_then(|s| s.taints)
            .map(|t| t.into_iter().map(|t| t.key).collect())
            .unwrap_or_default()
    }

    /// Events published so far: (reason, regarding name).
    pub fn events(&self) -> Vec<(String, String)> {
        self.api
            .events()
            .into_iter()
            .map(|e| (e.reason, e.regarding.name.unwrap_or_default()))
            .collect()
    }
}

/// Launches, registers and initializes a NodeClaim, asserting it launched and initialized;
/// returns its node's name.
pub async fn ready_nodeclaim(h: &Harness, name: &str, extra: serde_json::Value) -> String {
    h.add_nodeclaim(nodeclaim(name, extra));
    h.settle().await;
    assert_eq!(
        h.condition(name, "Launched").map(|c| c.0),
        Some("True".to_owned()),
        "{name} launched"
    );
    let node = h.register_node(name, &[], &[]);
    h.settle().await;
    h.edit_node(&node, |n| make_ready(n, &[]));
    h.settle().await;
    assert_eq!(
        h.condition(name, "Initialized").map(|c| c.0),
        Some("True".to_owned()),
        "{name} initialized"
    );
    node
}

/// Whether the NodeClaim is being deleted or already gone.
pub fn deleting(h: &Harness, name: &str) -> bool {
    h.nodeclaim(name)
        .is_none_or(|nc| nc.metadata.deletion_timestamp.is_some())
}

/// The pod deletions asked of the API server: (name, grace period).
pub fn pod_deletions(h: &Harness) -> Vec<(String, Option<i64>)> {
    h.api
        .calls_of(Operation::DeletePod)
        .into_iter()
        .filter_map(|call| match call {
            ClusterCall::DeletePod {
                name,
                grace_period_seconds,
                ..
            } => Some((name, grace_period_seconds)),
            _ => None,
        })
        .collect()
}

pub fn plus(at: Timestamp, by: Duration) -> Timestamp {
    at.checked_add(SignedDuration::try_from(by).unwrap())
        .unwrap()
}

/// The time left until `at` on the actors' clock.
pub fn until(h: &Harness, at: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(h.clock_now())).unwrap()
}

/// Gives an object seeded into a fake what the API server would: a resourceVersion from
/// `versions`, a creation timestamp of `now` and a uid, unless it has them.
pub fn stamp<K: Resource>(object: &mut K, versions: &AtomicU64, now: Timestamp) {
    let version = versions.fetch_add(1, Ordering::SeqCst);
    let meta = object.meta_mut();
    meta.resource_version = Some(format!("seed-{version}"));
    if meta.creation_timestamp.is_none() {
        meta.creation_timestamp = Some(Time(now));
    }
    if meta.uid.is_none() {
        meta.uid = Some(format!("uid-{}", meta.name.clone().unwrap_or_default()));
    }
}

pub fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.to_owned(),
        effect: effect.to_owned(),
        ..Taint::default()
    }
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// A node as a kubelet registers it.
pub fn node(name: &str, provider_id: &str, ready: bool) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/hostname".to_owned(),
                name.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(provider_id.to_owned()),
            taints: Some(Vec::new()),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(vec![ready_condition(ready)]),
            capacity: Some(quantities(&[
                ("cpu", "2"),
                ("memory", "8Gi"),
                ("pods", "29"),
            ])),
            allocatable: Some(quantities(&[
                ("cpu", "1930m"),
                ("memory", "7Gi"),
                ("pods", "29"),
            ])),
            ..NodeStatus::default()
        }),
    }
}

pub fn ready_condition(ready: bool) -> NodeCondition {
    NodeCondition {
        type_: "Ready".to_owned(),
        status: if ready { "True" } else { "False" }.to_owned(),
        ..NodeCondition::default()
    }
}

/// Makes a node Ready and drops the taints the kubelet and CNI remove on their own.
pub fn make_ready(node: &mut Node, remove_taints: &[&str]) {
    node.status.as_mut().unwrap().conditions = Some(vec![ready_condition(true)]);
    if let Some(taints) = node.spec.as_mut().unwrap().taints.as_mut() {
        taints.retain(|t| !remove_taints.contains(&t.key.as_str()));
    }
}

/// A NodeClaim as the provisioner creates it.
pub fn nodeclaim(name: &str, extra: serde_json::Value) -> NodeClaim {
    let mut document = serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": { "karpenter.sh/nodepool": "default" },
        },
        "spec": {
            "requirements": [
                { "key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"] },
                { "key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"] },
            ],
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
        },
    });
    merge(&mut document, extra);
    serde_json::from_value(document).unwrap()
}

/// A NodePool named `name` using the `default` EC2NodeClass.
pub fn nodepool(name: &str, extra: serde_json::Value) -> NodePool {
    let mut document = serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": { "name": name, "generation": 1 },
        "spec": {
            "template": {
                "metadata": { "labels": { "team": "a" } },
                "spec": {
                    "requirements": [{ "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"] }],
                    "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
                },
            },
        },
    });
    merge(&mut document, extra);
    serde_json::from_value(document).unwrap()
}

/// An EC2NodeClass named `default` whose `Ready` condition is `ready`.
pub fn nodeclass(ready: Option<bool>) -> EC2NodeClass {
    let mut document = serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": { "name": "default", "generation": 1 },
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{ "alias": "al2023@latest" }],
            "subnetSelectorTerms": [{ "tags": { "karpenter.sh/discovery": "test-cluster" } }],
            "securityGroupSelectorTerms": [{ "tags": { "karpenter.sh/discovery": "test-cluster" } }],
        },
    });
    if let Some(ready) = ready {
        document["status"] = serde_json::json!({
            "conditions": [{
                "type": "Ready",
                "status": if ready { "True" } else { "False" },
                "reason": if ready { "Ready" } else { "AMIsNotReady" },
                "message": if ready { "" } else { "no AMI matched" },
                "lastTransitionTime": "2025-06-01T11:00:00Z",
            }],
        });
    }
    serde_json::from_value(document).unwrap()
}

/// A pod bound to `node`.
pub struct PodSpecBuilder {
    pub name: String,
    pub node: String,
    pub daemon: bool,
    pub critical: bool,
    pub do_not_disrupt: bool,
    pub grace_seconds: Option<i64>,
}

impl PodSpecBuilder {
    pub fn new(name: &str, node: &str) -> Self {
        Self {
            name: name.to_owned(),
            node: node.to_owned(),
            daemon: false,
            critical: false,
            do_not_disrupt: false,
            grace_seconds: Some(30),
        }
    }

    pub fn daemon(mut self) -> Self {
        self.daemon = true;
        self
    }

    pub fn critical(mut self) -> Self {
        self.critical = true;
        self
    }

    pub fn do_not_disrupt(mut self) -> Self {
        self.do_not_disrupt = true;
        self
    }

    pub fn grace(mut self, seconds: i64) -> Self {
        self.grace_seconds = Some(seconds);
        self
    }

    pub fn build(self) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some("default".to_owned()),
                owner_references: self.daemon.then(|| {
                    vec![OwnerReference {
                        api_version: "apps/v1".to_owned(),
                        kind: "DaemonSet".to_owned(),
                        name: "agent".to_owned(),
                        uid: "ds-uid".to_owned(),
                        ..OwnerReference::default()
                    }]
                }),
                annotations: self.do_not_disrupt.then(|| {
                    BTreeMap::from([(
                        karpenter_core::apis::labels::DO_NOT_DISRUPT.to_owned(),
                        "true".to_owned(),
                    )])
                }),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(self.node),
                priority_class_name: self.critical.then(|| "system-cluster-critical".to_owned()),
                termination_grace_period_seconds: self.grace_seconds,
                containers: vec![Container {
                    name: "app".to_owned(),
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
}

/// Deep-merges `extra` into `target` (objects merge, anything else replaces).
pub fn merge(target: &mut serde_json::Value, extra: serde_json::Value) {
    match (target, extra) {
        (serde_json::Value::Object(target), serde_json::Value::Object(extra)) => {
            for (key, value) in extra {
                merge(target.entry(key).or_insert(serde_json::Value::Null), value);
            }
        }
        (target, extra) => *target = extra,
    }
}
