//! The Provisioner actor with a fake cluster (`FakeClusterApi` for writes, `MemoryClusterView`
//! for reads), a fake cloud provider and tokio time paused: batching windows, nominations to
//! existing and in-flight capacity, NodeClaims with the right requirements and requests, limits
//! re-checked at creation, `FailedScheduling` with a reason per NodePool and `Explain`, a solve
//! that runs off the actor, retries after a failed create, and the metrics.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, Namespace, Node, NodeSpec, NodeStatus, Pod, PodSpec, ResourceRequirements,
    Taint as ApiTaint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use karpenter_actors::metrics::Metrics;
use karpenter_actors::ports::clock::ManualClock;
use karpenter_actors::ports::cloud_provider::CloudProviderError;
use karpenter_actors::ports::cluster::{ClusterError, ClusterEvent, ObjectKind};
use karpenter_actors::provisioner::{
    Decision, Explain, GetProvisionerStatus, NameGenerator, PROVISIONER_KEY, PodExplanation,
    PodState, ProvisionerActor, ProvisionerDeps, ProvisionerMetrics, ProvisionerPorts,
    ProvisionerStatus, SolveFn, TriggerSource, Triggered, render,
};
use karpenter_actors::runtime::{ActorKit, ActorRef, GroupSpec, KitOptions, RootGroup};
use karpenter_actors::testing::FakeClusterApi;
use karpenter_actors::testing::MemoryClusterView;
use karpenter_actors::testing::Operation;
use karpenter_actors::testing::{CloudOperation, FakeCloudProvider};
use karpenter_config::Settings;
use karpenter_core::apis::labels;
use karpenter_core::apis::nodeclaim::{NodeClaim, NodeClaimStatus};
use karpenter_core::apis::nodepool::NodePool;
use karpenter_core::apis::requirements::Operator;
use karpenter_core::domain::instance_type::InstanceType;
use karpenter_core::domain::scheduling::workload::{ZONES, fake_instance_type};
use karpenter_core::domain::scheduling::{Options, Plan, Snapshot, solve};
use prometheus_client::registry::Registry;

const GI: i64 = 1 << 30;
const TIMEOUT: Duration = Duration::from_secs(5);
const SEED: u64 = 42;

// ---- objects -------------------------------------------------------------------------------

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// A Ready NodePool with a template label and hash annotations.
fn nodepool(name: &str) -> NodePool {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {
            "name": name,
            "uid": format!("uid-{name}"),
            "annotations": {
                labels::NODEPOOL_HASH: "1234",
                labels::NODEPOOL_HASH_VERSION: labels::NODEPOOL_HASH_VERSION_VALUE,
            },
        },
        "spec": {"template": {
            "metadata": {"labels": {"team": "platform"}},
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
        }},
        "status": {"conditions": [{
            "type": "Ready", "status": "True", "reason": "Ready", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]},
    }))
    .expect("a valid nodepool")
}

fn not_ready(mut pool: NodePool) -> NodePool {
    let status = pool.status.as_mut().unwrap();
    status.conditions[0].status = karpenter_core::apis::conditions::ConditionStatus::False;
    let ready = &mut status.conditions[0];
    "NodeClassNotReady".clone_into(&mut ready.reason);
    "EC2NodeClass default is not ready".clone_into(&mut ready.message);
    pool
}

fn tainted(mut pool: NodePool, key: &str) -> NodePool {
    pool.spec.template.spec.taints.push(
        serde_json::from_value(serde_json::json!({"key": key, "effect": "NoSchedule"})).unwrap(),
    );
    pool
}

fn requiring(mut pool: NodePool, key: &str, values: &[&str]) -> NodePool {
    pool.spec.template.spec.requirements.push(
        serde_json::from_value(serde_json::json!({"key": key, "operator": "In", "values": values}))
            .unwrap(),
    );
    pool
}

fn limited(mut pool: NodePool, cpu: &str) -> NodePool {
    pool.spec.limits = quantities(&[("cpu", cpu)]);
    pool
}

fn pod(name: &str, cpu: &str, memory: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            uid: Some(format!("uid-{name}")),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".to_owned(),
                resources: Some(ResourceRequirements {
                    requests: Some(quantities(&[("cpu", cpu), ("memory", memory)])),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    }
}

fn with_node_selector(mut pod: Pod, key: &str, value: &str) -> Pod {
    pod.spec.as_mut().unwrap().node_selector =
        Some(BTreeMap::from([(key.to_owned(), value.to_owned())]));
    pod
}

fn bound_to(mut pod: Pod, node: &str) -> Pod {
    pod.spec.as_mut().unwrap().node_name = Some(node.to_owned());
    pod
}

fn node(name: &str, cpu: &str, taints: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([
                (labels::HOSTNAME.to_owned(), name.to_owned()),
                (labels::ZONE.to_owned(), ZONES[0].to_owned()),
                (labels::ARCH.to_owned(), labels::ARCH_AMD64.to_owned()),
                (labels::OS.to_owned(), labels::OS_LINUX.to_owned()),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("aws:///{}/i-{name}", ZONES[0])),
            taints: (!taints.is_empty()).then(|| {
                taints
                    .iter()
                    .map(|(key, effect)| ApiTaint {
                        key: (*key).to_owned(),
                        effect: (*effect).to_owned(),
                        ..ApiTaint::default()
                    })
                    .collect()
            }),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            allocatable: Some(quantities(&[
                ("cpu", cpu),
                ("memory", "16Gi"),
                ("pods", "110"),
            ])),
            capacity: Some(quantities(&[
                ("cpu", cpu),
                ("memory", "16Gi"),
                ("pods", "110"),
            ])),
            ..NodeStatus::default()
        }),
    }
}

/// A NodeClaim of `pool` that has launched (provider id, capacity) but has no Node yet.
fn in_flight(name: &str, pool: &str, cpu: &str) -> NodeClaim {
    let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {
            labels::NODEPOOL: pool,
            labels::ZONE: ZONES[0],
            labels::ARCH: labels::ARCH_AMD64,
            labels::OS: labels::OS_LINUX,
        }},
        "spec": {
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        },
    }))
    .unwrap();
    claim.status = Some(NodeClaimStatus {
        provider_id: Some(format!("aws:///{}/i-{name}", ZONES[0])),
        capacity: quantities(&[("cpu", cpu), ("memory", "16Gi"), ("pods", "110")]).into(),
        allocatable: quantities(&[("cpu", cpu), ("memory", "16Gi"), ("pods", "110")]).into(),
        ..NodeClaimStatus::default()
    });
    claim
}

/// 2, 4, 8 and 16 CPU types with 4 GiB per CPU.
fn catalogue() -> Vec<Arc<InstanceType>> {
    [2, 4, 8, 16]
        .iter()
        .map(|cpu| {
            Arc::new(fake_instance_type(
                &format!("fake-{cpu}x"),
                *cpu,
                *cpu * 4 * GI,
                110,
            ))
        })
        .collect()
}

// ---- harness -------------------------------------------------------------------------------

struct Harness {
    view: Arc<MemoryClusterView>,
    api: Arc<FakeClusterApi>,
    cloud: Arc<FakeCloudProvider>,
    registry: Arc<Mutex<Registry>>,
    actor: ActorRef<ProvisionerActor>,
    _kit: ActorKit,
    _root: RootGroup,
}

struct Setup {
    view: Arc<MemoryClusterView>,
    api: Arc<FakeClusterApi>,
    cloud: Arc<FakeCloudProvider>,
    solver: Option<SolveFn>,
}

impl Setup {
    fn new() -> Self {
        Self {
            view: Arc::new(MemoryClusterView::new()),
            api: Arc::new(FakeClusterApi::new()),
            cloud: Arc::new(FakeCloudProvider::with_instance_types(catalogue())),
            solver: None,
        }
    }

    fn start(self) -> Harness {
        let mut registry = Registry::default();
        let kit = ActorKit::new(&mut registry, KitOptions::default());
        let shared = Metrics::register(&mut registry);
        let metrics = ProvisionerMetrics::register(&mut registry, shared.nodeclaims_created());
        let clock = Arc::new(ManualClock::new(
            "2026-01-01T00:00:00Z".parse::<Timestamp>().unwrap(),
        ));
        let mut deps = ProvisionerDeps::new(
            ProvisionerPorts {
                settings: Arc::new(Settings::default()),
                clock,
                cluster: self.api.clone(),
                view: self.view.clone(),
                cloud: self.cloud.clone(),
            },
            metrics,
        )
        .with_name_seed(SEED);
        if let Some(solver) = self.solver {
            deps = deps.with_solver(solver);
        }
        let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
        let actor = root
            .spawn::<ProvisionerActor>(PROVISIONER_KEY, deps)
            .unwrap();
        Harness {
            view: self.view,
            api: self.api,
            cloud: self.cloud,
            registry: Arc::new(Mutex::new(registry)),
            actor,
            _kit: kit,
            _root: root,
        }
    }
}

impl Harness {
    /// Puts a pod in the view and triggers the Provisioner as the daemon would.
    fn add_pod(&self, pod: Pod) {
        let (namespace, name) = (
            pod.metadata.namespace.clone().unwrap(),
            pod.metadata.name.clone().unwrap(),
        );
        self.view.put_pod(pod);
        self.actor
            .try_send_event(Triggered::pod(&namespace, &name))
            .unwrap();
    }

    /// Lets every actor and task run, moving the paused clock on by `by`.
    async fn wait(&self, by: Duration) {
        tokio::time::sleep(by).await;
    }

    async fn status(&self) -> ProvisionerStatus {
        self.actor
            .request(GetProvisionerStatus, TIMEOUT)
            .await
            .unwrap()
    }

    async fn explain(&self, name: &str) -> PodExplanation {
        self.actor
            .request(
                Explain {
                    namespace: "default".to_owned(),
                    name: name.to_owned(),
                },
                TIMEOUT,
            )
            .await
            .unwrap()
    }

    /// Copies the NodeClaims the fake API holds into the view (the watch's job).
    fn sync_claims(&self) {
        for claim in self.api.nodeclaims() {
            self.view.put_nodeclaim(&claim);
        }
    }

    /// Marks every NodeClaim launched as its cheapest instance type (the lifecycle's job).
    fn launch_claims(&self) {
        for mut claim in self.api.nodeclaims() {
            let first_type = claim
                .spec
                .requirements
                .iter()
                .find(|r| r.key == labels::INSTANCE_TYPE)
                .and_then(|r| r.values.first().cloned())
                .unwrap();
            let it = catalogue()
                .into_iter()
                .find(|t| t.name == first_type)
                .unwrap();
            let name = claim.metadata.name.clone().unwrap();
            claim.status = Some(NodeClaimStatus {
                provider_id: Some(format!("aws:///{}/i-{name}", ZONES[0])),
                capacity: it.capacity.to_list().into(),
                allocatable: it.allocatable().to_list().into(),
                ..NodeClaimStatus::default()
            });
            self.view.put_nodeclaim(&claim);
        }
    }

    fn events(&self, reason: &str) -> Vec<ClusterEvent> {
        self.api
            .events()
            .into_iter()
            .filter(|e| e.reason == reason)
            .collect()
    }

    fn metrics_text(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry.lock().unwrap())
            .unwrap();
        out
    }
}

fn event_about<'a>(events: &'a [ClusterEvent], pod: &str) -> Option<&'a ClusterEvent> {
    events
        .iter()
        .find(|e| e.regarding.name.as_deref() == Some(pod))
}

fn requirement_values(claim: &NodeClaim, key: &str) -> Option<(Operator, Vec<String>)> {
    claim
        .spec
        .requirements
        .iter()
        .find(|r| r.key == key)
        .map(|r| (r.operator, r.values.clone()))
}

// ---- batching ------------------------------------------------------------------------------

#[actix::test]
async fn pending_pods_are_batched_until_the_window_goes_idle_and_become_one_nodeclaim() {
    tokio::time::pause();
    let setup = Setup::new();
    setup.view.put_nodepool(nodepool("default"));
    let h = setup.start();
    h.wait(Duration::from_millis(1500)).await; // the start-up window finds nothing
    let before = h.status().await.runs;

    h.add_pod(pod("a", "1", "2Gi"));
    h.wait(Duration::from_millis(700)).await;
    h.add_pod(pod("b", "1", "2Gi"));
    h.wait(Duration::from_millis(700)).await;
    // 1.4 s after the first trigger, 0.7 s after the last: still batching.
    assert_eq!(h.status().await.runs, before);
    assert!(h.api.nodeclaims().is_empty());

    h.wait(Duration::from_millis(400)).await;
    assert_eq!(h.status().await.runs, before + 1);
    let claims = h.api.nodeclaims();
    assert_eq!(claims.len(), 1, "both pods on one nodeclaim");
    let claim = &claims[0];

    // Named from the seeded generator, `<nodepool>-xxxxx`.
    assert_eq!(
        claim.metadata.name.as_deref(),
        Some(NameGenerator::seeded(SEED).next("default").as_str())
    );
    // Requests: both pods.
    assert_eq!(
        claim.spec.resources.requests,
        quantities(&[("cpu", "2"), ("memory", "4Gi"), ("pods", "2")])
    );
    // Requirements: the pool's label, the node class label, the instance types that fit
    // (cheapest first), the zones and capacity types they offer.
    assert_eq!(
        requirement_values(claim, labels::NODEPOOL),
        Some((Operator::In, vec!["default".to_owned()]))
    );
    assert_eq!(
        requirement_values(claim, labels::EC2NODECLASS),
        Some((Operator::In, vec!["default".to_owned()]))
    );
    let (op, types) = requirement_values(claim, labels::INSTANCE_TYPE).unwrap();
    assert_eq!(op, Operator::In);
    assert!(types.contains(&"fake-4x".to_owned()));
    assert!(
        !types.contains(&"fake-2x".to_owned()),
        "2 CPUs minus overhead cannot fit 2"
    );
    // Labels, annotations, owner and node class from the NodePool.
    let claim_labels = claim.metadata.labels.as_ref().unwrap();
    assert_eq!(
        claim_labels.get("team").map(String::as_str),
        Some("platform")
    );
    assert_eq!(
        claim_labels.get(labels::NODEPOOL).map(String::as_str),
        Some("default")
    );
    assert_eq!(
        claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::NODEPOOL_HASH))
            .map(String::as_str),
        Some("1234")
    );
    let owner: &OwnerReference = &claim.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("NodePool", "default", "uid-default")
    );
    assert_eq!(claim.spec.node_class_ref.name, "default");

    // Each pod is told where it goes, and `explain` agrees.
    let name = claim.metadata.name.clone().unwrap();
    let nominated = h.events(karpenter_actors::provisioner::NOMINATED);
    assert_eq!(
        event_about(&nominated, "a").and_then(|e| e.note.clone()),
        Some(format!("Pod should schedule on: nodeclaim/{name}"))
    );
    match h.explain("b").await.decision.map(|d| d.decision) {
        Some(Decision::Provisioned {
            node_claim,
            node_pool,
            ..
        }) => assert_eq!((node_claim, node_pool.as_str()), (name, "default")),
        other => panic!("unexpected decision {other:?}"),
    }
}

#[actix::test]
async fn a_busy_window_closes_at_the_max_duration() {
    tokio::time::pause();
    let setup = Setup::new();
    setup.view.put_nodepool(nodepool("default"));
    let h = setup.start();
    h.wait(Duration::from_millis(1500)).await;
    let before = h.status().await.runs;
    // A trigger every half second: the idle window never closes.
    for i in 0..19 {
        h.add_pod(pod(&format!("p{i}"), "100m", "128Mi"));
        h.wait(Duration::from_millis(500)).await;
    }
    // 9.5 s after the first trigger.
    assert_eq!(h.status().await.runs, before);
    h.add_pod(pod("p19", "100m", "128Mi"));
    h.wait(Duration::from_millis(600)).await;
    let status = h.status().await;
    assert_eq!(status.runs, before + 1, "closed at 10 s");
    assert_eq!(status.last_run.unwrap().pods, 20);
}

// ---- existing and in-flight capacity --------------------------------------------------------

#[actix::test]
async fn pods_that_fit_existing_or_in_flight_nodes_are_nominated_not_provisioned() {
    tokio::time::pause();
    let setup = Setup::new();
    setup.view.put_nodepool(nodepool("default"));
    // An unmanaged node with 4 CPUs, 3 of them used.
    setup.view.put_node(node("existing", "4", &[]));
    setup
        .view
        .put_pod(bound_to(pod("busy", "3", "1Gi"), "existing"));
    // A NodeClaim launched for the pool, its node not registered yet.
    setup
        .view
        .put_nodeclaim(&in_flight("default-flite", "default", "8"));
    let h = setup.start();
    h.add_pod(pod("small", "500m", "1Gi"));
    h.add_pod(pod("large", "4", "4Gi"));
    h.wait(Duration::from_millis(1100)).await;

    assert!(
        h.api.calls_of(Operation::CreateNodeClaim).is_empty(),
        "no new capacity"
    );
    let nominated = h.events(karpenter_actors::provisioner::NOMINATED);
    assert_eq!(
        event_about(&nominated, "small").and_then(|e| e.note.clone()),
        Some("Pod should schedule on: node/existing".to_owned())
    );
    assert_eq!(
        event_about(&nominated, "large").and_then(|e| e.note.clone()),
        Some("Pod should schedule on: nodeclaim/default-flite".to_owned())
    );
    assert_eq!(
        h.explain("large").await.decision.map(|d| d.decision),
        Some(Decision::Nominated {
            node: None,
            node_claim: Some("default-flite".to_owned()),
        })
    );
    assert_eq!(h.status().await.last_run.unwrap().nominated, 2);
}

#[actix::test]
async fn pods_of_a_disrupted_node_get_capacity_before_it_goes() {
    tokio::time::pause();
    let setup = Setup::new();
    setup.view.put_nodepool(nodepool("default"));
    setup
        .view
        .put_node(node("old", "4", &[(labels::DISRUPTED_TAINT, "NoSchedule")]));
    setup
        .view
        .put_pod(bound_to(pod("tenant", "2", "2Gi"), "old"));
    let h = setup.start();
    h.actor
        .try_send_event(Triggered::by(TriggerSource::NodeDisrupted))
        .unwrap();
    h.wait(Duration::from_millis(1100)).await;

    let claims = h.api.nodeclaims();
    assert_eq!(
        claims.len(),
        1,
        "a replacement for the disrupted node's pod"
    );
    assert_eq!(
        claims[0].spec.resources.requests.get("cpu"),
        Some(&Quantity("2".to_owned()))
    );
    match h.explain("tenant").await {
        PodExplanation {
            state: PodState::Bound { node },
            decision: Some(decision),
            ..
        } => {
            assert_eq!(node, "old");
            assert!(matches!(decision.decision, Decision::Provisioned { .. }));
        }
        other => panic!("unexpected explanation {other:?}"),
    }
}

#[actix::test]
async fn provisioning_waits_until_every_nodeclaim_has_launched() {
    tokio::time::pause();
    let setup = Setup::new();
    setup.view.put_nodepool(nodepool("default"));
    let mut unlaunched = in_flight("default-wait1", "default", "8");
    unlaunched.status = None;
    setup.view.put_nodeclaim(&unlaunched);
    let h = setup.start();
    h.add_pod(pod("p", "1", "1Gi"));
    h.wait(Duration::from_secs(3)).await;
    assert_eq!(
        h.status().await.runs,
        0,
        "an unlaunched nodeclaim holds runs back"
    );
    assert!(h.explain("p").await.provisioning_in_progress);

    h.view
        .put_nodeclaim(&in_flight("default-wait1", "default", "8"));
    h.wait(Duration::from_millis(1100)).await;
    assert_eq!(h.status().await.runs, 1);
    assert!(
        h.api.nodeclaims().is_empty(),
        "the pod goes onto the launched nodeclaim"
    );
}

// ---- limits --------------------------------------------------------------------------------

#[actix::test]
async fn limits_are_rechecked_at_creation_and_never_exceeded() {
    tokio::time::pause();
    let setup = Setup::new();
    setup.view.put_nodepool(limited(
        requiring(nodepool("default"), "size", &["small", "large"]),
        "20",
    ));
    // While the solve runs, another NodeClaim of the pool appears (a disruption replacement):
    // 16 of the 20 CPUs are now taken.
    let view = setup.view.clone();
    let solver: SolveFn = Arc::new(move |snapshot: &Snapshot, options: &Options| -> Plan {
        let plan = solve(snapshot, options);
        view.put_nodeclaim(&in_flight("default-other", "default", "16"));
        plan
    });
    let setup = Setup {
        solver: Some(solver),
        ..setup
    };
    let h = setup.start();
    // 3 CPUs on a small type fit a 4-CPU one (within the 4 left); 7 CPUs need an 8-CPU
    // type (not within).
    h.add_pod(with_node_selector(pod("fits", "3", "1Gi"), "size", "small"));
    h.add_pod(with_node_selector(
        pod("too-big", "7", "1Gi"),
        "size",
        "large",
    ));
    h.wait(Duration::from_millis(1100)).await;

    let claims = h.api.nodeclaims();
    assert_eq!(
        claims.len(),
        1,
        "only the claim within the limit: {:#?} {:#?}",
        h.explain("fits").await,
        h.explain("too-big").await
    );
    let (_, types) = requirement_values(&claims[0], labels::INSTANCE_TYPE).unwrap();
    assert_eq!(types, ["fake-4x"]);
    match h.explain("too-big").await.decision.map(|d| d.decision) {
        Some(Decision::NotLaunched { node_pool, reason }) => {
            assert_eq!(node_pool, "default");
            assert!(reason.contains("cpu limit"), "{reason}");
        }
        other => panic!("unexpected decision {other:?}"),
    }
    let failed = h.events(karpenter_actors::provisioner::FAILED_SCHEDULING);
    assert!(
        event_about(&failed, "too-big")
            .and_then(|e| e.note.clone())
            .is_some_and(|n| n.contains("exceed the nodepool's cpu limit")),
        "{failed:#?}"
    );

    // Next batch: the pool is full (16 + 4); the pod stays pending with the limit as reason
    // and nothing more is created.
    h.sync_claims();
    h.launch_claims();
    h.wait(Duration::from_secs(11)).await;
    assert_eq!(h.api.nodeclaims().len(), 1);
    let explanation = h.explain("too-big").await;
    assert!(
        render(&explanation).contains("limit"),
        "{}",
        render(&explanation)
    );
}

// ---- unschedulable pods ----------------------------------------------------------------------

#[actix::test]
async fn an_unschedulable_pod_gets_failed_scheduling_with_a_reason_per_nodepool_and_explain_returns_it()
 {
    tokio::time::pause();
    let setup = Setup::new();
    setup
        .view
        .put_nodepool(tainted(nodepool("gpu"), "nvidia.com/gpu"));
    setup.view.put_nodepool(requiring(
        nodepool("amd"),
        labels::ARCH,
        &[labels::ARCH_AMD64],
    ));
    // No instance type of the catalogue is arm64.
    setup.view.put_nodepool(requiring(
        nodepool("arm"),
        labels::ARCH,
        &[labels::ARCH_ARM64],
    ));
    setup.view.put_nodepool(not_ready(nodepool("broken")));
    let h = setup.start();
    h.add_pod(with_node_selector(
        pod("stuck", "1", "1Gi"),
        labels::ARCH,
        labels::ARCH_ARM64,
    ));
    h.wait(Duration::from_millis(1100)).await;

    assert!(h.api.nodeclaims().is_empty());
    let failed = h.events(karpenter_actors::provisioner::FAILED_SCHEDULING);
    let note = event_about(&failed, "stuck")
        .and_then(|e| e.note.clone())
        .unwrap();
    assert!(note.starts_with("Failed to schedule pod, "), "{note}");
    assert!(
        note.contains(
            "incompatible with nodepool \"gpu\", did not tolerate taint nvidia.com/gpu:NoSchedule"
        ),
        "{note}"
    );
    assert!(
        note.contains("incompatible with nodepool \"amd\""),
        "{note}"
    );
    assert!(
        note.contains("incompatible with nodepool \"arm\""),
        "{note}"
    );
    let no_types = h.events(karpenter_actors::provisioner::NO_COMPATIBLE_INSTANCE_TYPES);
    assert_eq!(no_types.len(), 1);
    assert_eq!(no_types[0].regarding.name.as_deref(), Some("arm"));

    let explanation = h.explain("stuck").await;
    assert_eq!(explanation.state, PodState::Pending);
    let Some(Decision::Unschedulable { pools }) =
        explanation.decision.as_ref().map(|d| d.decision.clone())
    else {
        panic!("unexpected explanation {explanation:?}");
    };
    let names: Vec<&str> = pools.iter().map(|p| p.node_pool.as_str()).collect();
    assert_eq!(names.len(), 3, "{pools:#?}");
    assert!(names.contains(&"gpu") && names.contains(&"amd") && names.contains(&"arm"));
    let gpu = pools.iter().find(|p| p.node_pool == "gpu").unwrap();
    assert_eq!(gpu.detail["kind"], "taint");
    assert_eq!(gpu.detail["key"], "nvidia.com/gpu");
    let amd = pools.iter().find(|p| p.node_pool == "amd").unwrap();
    assert!(
        amd.reason.contains(labels::ARCH),
        "the arch requirement is named: {}",
        amd.reason
    );
    let arm = pools.iter().find(|p| p.node_pool == "arm").unwrap();
    assert_eq!(arm.detail["kind"], "noInstanceTypes");
    // The NodePool that was not ready is said to be left out, with why.
    assert_eq!(explanation.skipped_node_pools.len(), 1);
    assert!(
        explanation.skipped_node_pools[0]
            .reason
            .contains("EC2NodeClass default is not ready")
    );
    let text = render(&explanation);
    assert!(text.contains("No NodePool can run it"), "{text}");
    assert!(text.contains("nodepool \"broken\": not ready"), "{text}");

    let metrics = h.metrics_text();
    assert!(
        metrics
            .contains("karpenter_scheduler_unschedulable_pods_count{controller=\"provisioner\"} 1"),
        "{metrics}"
    );
}

/// A pod anti-affinity term whose `namespaceSelector` selects the namespaces labelled
/// `team: a` keeps the pod off the node running `app: db` in `team-a`: the namespaces' labels
/// come from the cluster view (Karpenter lists namespaces the same way).
#[actix::test]
async fn anti_affinity_namespace_selectors_select_namespaces_by_their_labels() {
    tokio::time::pause();
    let setup = Setup::new();
    setup.view.put_nodepool(nodepool("default"));
    setup.view.put_node(node("n1", "4", &[]));
    for (name, team) in [("team-a", "a"), ("team-b", "b"), ("default", "none")] {
        setup.view.put_namespace(Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(BTreeMap::from([("team".to_owned(), team.to_owned())])),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        });
    }
    let mut db = bound_to(pod("db", "500m", "512Mi"), "n1");
    db.metadata.namespace = Some("team-a".to_owned());
    db.metadata.labels = Some(BTreeMap::from([("app".to_owned(), "db".to_owned())]));
    setup.view.put_pod(db);
    let away_from_db = |name: &str, team: &str| {
        let mut p = pod(name, "500m", "512Mi");
        p.spec.as_mut().unwrap().affinity = Some(
            serde_json::from_value(serde_json::json!({"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"app": "db"}},
                    "namespaceSelector": {"matchLabels": {"team": team}},
                    "topologyKey": "kubernetes.io/hostname",
                }]
            }}))
            .unwrap(),
        );
        p
    };
    let h = setup.start();
    // Avoiding team b's db pods: there are none, n1 fits.
    h.add_pod(away_from_db("near", "b"));
    // Avoiding team a's: n1 runs one, a new node is needed.
    h.add_pod(away_from_db("away", "a"));
    h.wait(Duration::from_millis(1100)).await;

    let nominated = h.events(karpenter_actors::provisioner::NOMINATED);
    assert_eq!(
        event_about(&nominated, "near").and_then(|e| e.note.clone()),
        Some("Pod should schedule on: node/n1".to_owned())
    );
    let claims = h.api.nodeclaims();
    assert_eq!(
        claims.len(),
        1,
        "the pod avoiding team a's db gets a node of its own"
    );
    assert_eq!(
        event_about(&nominated, "away").and_then(|e| e.note.clone()),
        Some(format!(
            "Pod should schedule on: nodeclaim/{}",
            claims[0].metadata.name.clone().unwrap()
        ))
    );
}

#[actix::test]
async fn explain_tells_pods_the_provisioner_does_not_act_on() {
    tokio::time::pause();
    let setup = Setup::new();
    setup.view.put_nodepool(nodepool("default"));
    setup.view.put_node(node("n1", "4", &[]));
    setup
        .view
        .put_pod(bound_to(pod("running", "1", "1Gi"), "n1"));
    let mut daemon = pod("agent", "100m", "64Mi");
    daemon.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".to_owned(),
        kind: "DaemonSet".to_owned(),
        name: "agent".to_owned(),
        uid: "u".to_owned(),
        ..OwnerReference::default()
    }]);
    setup.view.put_pod(daemon);
    let h = setup.start();
    h.wait(Duration::from_millis(1100)).await;

    assert_eq!(
        h.explain("running").await.state,
        PodState::Bound {
            node: "n1".to_owned()
        }
    );
    let agent = h.explain("agent").await;
    assert!(matches!(agent.state, PodState::NotProvisionable { .. }));
    assert!(render(&agent).contains("it belongs to a DaemonSet"));
    assert_eq!(h.explain("ghost").await.state, PodState::NotFound);
}

// ---- off the actor -----------------------------------------------------------------------------

#[actix::test]
async fn the_solve_runs_off_the_actor_which_keeps_answering() {
    tokio::time::pause();
    let setup = Setup::new();
    setup.view.put_nodepool(nodepool("default"));
    let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel::<usize>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    // A solve that holds its thread until the test lets it go.
    let solver: SolveFn = Arc::new(move |snapshot: &Snapshot, options: &Options| -> Plan {
        started_tx.send(snapshot.pods.len()).unwrap();
        release_rx.lock().unwrap().recv().unwrap();
        solve(snapshot, options)
    });
    let setup = Setup {
        solver: Some(solver),
        ..setup
    };
    let h = setup.start();
    for i in 0..200 {
        h.add_pod(pod(&format!("p{i}"), "250m", "256Mi"));
    }
    // Awaiting the channel (not a timer) lets the paused clock run to the window's end.
    assert_eq!(started_rx.recv().await, Some(200));

    // The solve is blocked; the actor answers queries and takes triggers meanwhile.
    let status = h.status().await;
    assert!(status.running, "{status:?}");
    let explanation = h.explain("p0").await;
    assert!(explanation.provisioning_in_progress);
    assert!(explanation.decision.is_none());
    h.add_pod(pod("late", "250m", "256Mi"));
    assert!(h.status().await.batch_open);

    release_tx.send(()).unwrap();
    h.wait(Duration::from_millis(10)).await;
    assert!(!h.api.nodeclaims().is_empty());
    assert!(matches!(
        h.explain("p0").await.decision.map(|d| d.decision),
        Some(Decision::Provisioned { .. })
    ));
    // The late pod's window waits for the NodeClaims to show up in the view.
    release_tx.send(()).unwrap();
    h.sync_claims();
    h.launch_claims();
    h.wait(Duration::from_secs(2)).await;
    assert_eq!(h.status().await.runs, 2);
}

// ---- failures ----------------------------------------------------------------------------------

#[actix::test]
async fn a_failed_nodeclaim_create_is_retried_on_the_next_batch() {
    tokio::time::pause();
    let setup = Setup::new();
    setup.view.put_nodepool(nodepool("default"));
    setup.api.fail_next(
        Operation::CreateNodeClaim,
        ClusterError::Server {
            kind: ObjectKind::NodeClaim,
            name: "default".to_owned(),
            code: 500,
            message: "etcd is having a moment".to_owned(),
        },
    );
    let h = setup.start();
    h.add_pod(pod("p", "1", "1Gi"));
    h.wait(Duration::from_millis(1100)).await;
    assert!(h.api.nodeclaims().is_empty());
    match h.explain("p").await.decision.map(|d| d.decision) {
        Some(Decision::NotLaunched { reason, .. }) => {
            assert!(reason.contains("etcd is having a moment"), "{reason}");
        }
        other => panic!("unexpected decision {other:?}"),
    }

    // The pod is still pending: the Provisioner looks again 10 s later.
    h.wait(Duration::from_secs(11)).await;
    assert_eq!(h.api.nodeclaims().len(), 1);
    assert_eq!(h.api.calls_of(Operation::CreateNodeClaim).len(), 2);
    assert!(matches!(
        h.explain("p").await.decision.map(|d| d.decision),
        Some(Decision::Provisioned { .. })
    ));
    let metrics = h.metrics_text();
    assert!(
        metrics.contains(
            "karpenter_nodeclaims_created_total{reason=\"provisioned\",nodepool=\"default\",capacity_type=\"\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "karpenter_scheduler_scheduling_duration_seconds_count{controller=\"provisioner\"}"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("karpenter_pods_scheduling_decision_duration_seconds_count 1"),
        "{metrics}"
    );
}

#[actix::test]
async fn a_nodepool_whose_instance_types_fail_to_resolve_is_left_out_with_the_error() {
    tokio::time::pause();
    let setup = Setup::new();
    setup.view.put_nodepool(nodepool("default"));
    setup.view.put_pod(pod("q", "1", "1Gi"));
    setup.cloud.fail_next(
        CloudOperation::InstanceTypes,
        CloudProviderError::NodeClassNotReady {
            nodeclass: "default".to_owned(),
        },
    );
    let h = setup.start();
    h.wait(Duration::from_millis(1100)).await;
    assert!(h.api.nodeclaims().is_empty());
    let explanation = h.explain("q").await;
    assert_eq!(
        explanation.decision.map(|d| d.decision),
        Some(Decision::Unschedulable { pools: Vec::new() })
    );
    assert_eq!(
        explanation.skipped_node_pools[0].reason,
        "resolving instance types failed: nodeclass default is not ready"
    );

    // The next batch asks again.
    h.wait(Duration::from_secs(11)).await;
    assert_eq!(h.api.nodeclaims().len(), 1);
    assert_eq!(h.cloud.calls_of(CloudOperation::InstanceTypes).len(), 2);
}

/// Karpenter sizes a DaemonSet by its newest running pod: what a `LimitRange` or a webhook added
/// to the pods is not in the template. The running pod's node pin (a `metadata.name` field
/// selector) gives way to the template's node affinity.
#[actix::test]
async fn daemonset_overhead_comes_from_a_running_daemon_pod_over_the_template() {
    tokio::time::pause();
    let setup = Setup::new();
    setup.view.put_nodepool(nodepool("default"));
    setup.view.put_node(node("n1", "4", &[]));
    let template = pod("agent", "100m", "64Mi");
    setup.view.put_daemonset(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds-agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": template.spec},
            },
        }))
        .unwrap(),
    );
    let daemon_pod = |name: &str, cpu: &str, memory: &str, created: &str| {
        let mut daemon = bound_to(pod(name, cpu, memory), "n1");
        daemon.metadata.namespace = Some("kube-system".to_owned());
        daemon.metadata.creation_timestamp = Some(Time(created.parse().unwrap()));
        daemon.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".to_owned(),
            kind: "DaemonSet".to_owned(),
            name: "agent".to_owned(),
            uid: "ds-agent".to_owned(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        daemon.spec.as_mut().unwrap().affinity = Some(serde_json::from_value(serde_json::json!({
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ]}}
        })).unwrap());
        daemon
    };
    // An older pod from before the LimitRange, and the newest one with its defaults.
    setup.view.put_pod(daemon_pod(
        "agent-old",
        "200m",
        "128Mi",
        "2026-01-01T00:00:00Z",
    ));
    setup.view.put_pod(daemon_pod(
        "agent-new",
        "500m",
        "256Mi",
        "2026-02-01T00:00:00Z",
    ));
    let h = setup.start();
    // The pending pod does not fit beside the daemons on n1 (4 cpu).
    h.add_pod(pod("p", "3500m", "1Gi"));
    h.wait(Duration::from_millis(1100)).await;
    let claims = h.api.nodeclaims();
    assert_eq!(claims.len(), 1);
    assert_eq!(
        claims[0].spec.resources.requests,
        quantities(&[("cpu", "4"), ("memory", "1280Mi"), ("pods", "2")]),
        "the pod and the newest running daemon pod, not the template (100m) nor the older pod"
    );
}

#[actix::test]
async fn daemonset_overhead_is_part_of_every_new_nodeclaim() {
    tokio::time::pause();
    let setup = Setup::new();
    setup.view.put_nodepool(nodepool("default"));
    let template = pod("agent", "500m", "256Mi");
    setup.view.put_daemonset(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": template.spec,
                },
            },
        }))
        .unwrap(),
    );
    let h = setup.start();
    h.add_pod(pod("p", "1", "1Gi"));
    h.wait(Duration::from_millis(1100)).await;
    let claims = h.api.nodeclaims();
    assert_eq!(claims.len(), 1);
    assert_eq!(
        claims[0].spec.resources.requests,
        quantities(&[("cpu", "1500m"), ("memory", "1280Mi"), ("pods", "2")]),
        "the pod and the daemon"
    );
}
