//! Launches across restarts, actor by actor: the NodeClaim actors and the garbage collector of
//! a daemon, over kwok's EC2 through the real AWS cloud provider and a mirrored fake cluster,
//! killed at each point of a launch and started again over the same cluster and account
//! (nothing in memory survives; the old process's calls that reached EC2 take effect, their
//! answers reach nobody). Each interleaving ends with one instance per NodeClaim and no
//! instance outliving the collector's window. Time is tokio's paused clock.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

mod support;

use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_actors::daemon::{Daemon, StartOptions};
use karpenter_actors::deps::{AwsPorts, ClusterVersion, Deps};
use karpenter_actors::garbage_collection::{INSTANCE_GRACE, INSTANCE_SWEEP_FAST};
use karpenter_actors::kwok::cloud_provider::{KwokCloudDeps, cloud_provider, settings};
use karpenter_actors::kwok::ec2::{KwokEc2, KwokEc2Config, KwokEc2Deps};
use karpenter_actors::kwok::eventbridge::KwokEventBridge;
use karpenter_actors::kwok::iam::KwokIam;
use karpenter_actors::kwok::pricing::KwokPricing;
use karpenter_actors::kwok::sqs::KwokSqs;
use karpenter_actors::kwok::ssm::KwokSsm;
use karpenter_actors::messages::ClusterChange;
use karpenter_actors::metrics::Metrics;
use karpenter_actors::ports::clock::Clock;
use karpenter_actors::ports::cluster::{ClusterError, ObjectKind};
use karpenter_actors::ports::ec2::{Ec2Api, InstanceState};
use karpenter_actors::runtime::{ActorKit, GroupSpec, KitOptions, RootGroup};
use karpenter_actors::testing::{FakeClusterApi, MemoryClusterView, MirroredClusterApi, Operation};
use karpenter_core::apis::conditions::{Condition, ConditionStatus};
use karpenter_core::apis::ec2nodeclass::{
    Ami, AmiRequirement, EC2NodeClassStatus, SecurityGroup, Subnet,
};
use karpenter_core::apis::labels;
use karpenter_core::apis::{EC2NodeClass, NodeClaim};
use karpenter_core::domain::userdata::ClusterInfo;
use prometheus_client::registry::Registry;
use serde_json::json;
use support::{PausedClock, nodeclaim, nodepool, stamp, start_time};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

const REGION: &str = "us-west-2";
const CLUSTER: &str = "test-cluster";
/// How long kwok's CreateFleet takes to answer in these tests: the window a kill lands in.
const FLEET_LATENCY: Duration = Duration::from_secs(5);
/// The collector's window for a leak: its grace after launch and one fast sweep period, plus
/// a second of slack for the sweep's own work.
const COLLECTOR_WINDOW: Duration = INSTANCE_GRACE
    .saturating_add(INSTANCE_SWEEP_FAST)
    .saturating_add(Duration::from_secs(1));

/// What outlives a daemon: the cluster (fake API and its mirror's store) and the AWS account.
struct World {
    api: Arc<FakeClusterApi>,
    view: Arc<MemoryClusterView>,
    kwok: Arc<KwokEc2>,
    clock: Arc<PausedClock>,
    versions: AtomicU64,
}

/// One daemon process: its actors, its cloud provider and the pump feeding it changes.
struct Process {
    root: RootGroup,
    aws: karpenter_actors::testing::AwsTestKit,
    daemon: Rc<Daemon>,
    mirror: Arc<MirroredClusterApi>,
    pump: JoinHandle<()>,
    _kit: ActorKit,
}

fn condition(type_: &str, status: ConditionStatus) -> Condition {
    Condition {
        type_: type_.into(),
        status,
        observed_generation: None,
        last_transition_time: Time(start_time()),
        reason: if status == ConditionStatus::True {
            type_.into()
        } else {
            "Waiting".into()
        },
        message: String::new(),
    }
}

/// The `default` class as the `NodeClass` work resolves it over kwok.
fn nodeclass(kwok: &KwokEc2, ready: ConditionStatus) -> EC2NodeClass {
    let mut class: EC2NodeClass = serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {
            "name": "default",
            "annotations": {
                labels::EC2NODECLASS_HASH: "1111",
                labels::EC2NODECLASS_HASH_VERSION: labels::EC2NODECLASS_HASH_VERSION_VALUE,
            },
        },
        "spec": {
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole",
        },
    }))
    .unwrap();
    class.status = Some(EC2NodeClassStatus {
        subnets: kwok
            .subnets()
            .iter()
            .map(|s| Subnet {
                id: s.id.clone(),
                zone: s.zone.clone(),
                zone_id: Some(s.zone_id.clone()),
            })
            .collect(),
        security_groups: vec![SecurityGroup {
            id: "sg-00000000000000001".into(),
            name: Some("test-cluster-node".into()),
        }],
        capacity_reservations: Vec::new(),
        amis: vec![Ami {
            id: "ami-00000000000000001".into(),
            name: Some("al2023".into()),
            deprecated: None,
            requirements: vec![AmiRequirement {
                key: labels::ARCH.into(),
                operator: "In".into(),
                values: vec!["amd64".into()],
            }],
        }],
        instance_profile: Some("test-cluster_1234".into()),
        conditions: vec![condition("Ready", ready)],
    });
    class
}

impl World {
    fn new() -> Self {
        let clock = Arc::new(PausedClock::new(start_time()));
        let kwok = Arc::new(
            KwokEc2::new(
                KwokEc2Config::new(REGION, CLUSTER),
                KwokEc2Deps {
                    clock: clock.clone(),
                    events: None,
                },
            )
            .unwrap(),
        );
        let world = Self {
            api: Arc::new(FakeClusterApi::new()),
            view: Arc::new(MemoryClusterView::new()),
            kwok,
            clock,
            versions: AtomicU64::new(0),
        };
        world.api.set_now(world.clock.now());
        world.put_nodeclass(ConditionStatus::True);
        let mut pool = nodepool("default", json!({}));
        stamp(&mut pool, &world.versions, world.clock.now());
        world.api.seed_nodepool(pool.clone());
        world.view.put_nodepool(pool);
        world
    }

    fn put_nodeclass(&self, ready: ConditionStatus) {
        let mut class = nodeclass(&self.kwok, ready);
        stamp(&mut class, &self.versions, self.clock.now());
        self.api.seed_ec2nodeclass(class.clone());
        self.view.put_ec2nodeclass(class);
    }

    /// A NodeClaim as the provisioner creates it, seen by the running process (if any).
    fn add_nodeclaim(&self, process: Option<&Process>, name: &str) {
        let mut claim = nodeclaim(name, json!({}));
        stamp(&mut claim, &self.versions, self.clock.now());
        self.api.seed_nodeclaim(claim);
        match process {
            Some(process) => process.mirror.sync_nodeclaim(name),
            None => self
                .view
                .put_nodeclaim(&self.api.shared_nodeclaim(name).unwrap()),
        }
    }

    /// `kubectl delete nodeclaim` while no daemon runs: the finalizer holds it.
    async fn delete_nodeclaim(&self, name: &str) {
        use karpenter_actors::ports::cluster::ClusterApi as _;
        self.api.set_now(self.clock.now());
        self.api.delete_nodeclaim(name).await.unwrap();
        match self.api.shared_nodeclaim(name) {
            Some(claim) => self.view.put_nodeclaim(&claim),
            None => self.view.remove_nodeclaim(name),
        }
    }

    /// Starts a daemon over the cluster and account, as `karpenter run` would after a restart:
    /// new caches, batchers, launch cache and actors, which first see every object.
    async fn start(&self) -> Process {
        // The process's AWS group: its batchers die with it.
        let aws = karpenter_actors::testing::AwsTestKit::new(KitOptions::default());
        let cloud = cloud_provider(KwokCloudDeps {
            ec2: Arc::clone(&self.kwok),
            pricing: None,
            view: Arc::clone(&self.view) as _,
            clock: self.clock.clone(),
            settings: settings(REGION, CLUSTER),
            aws_group: (*aws.root).clone(),
        })
        .await
        .unwrap();
        let (changes, mut receiver) = mpsc::unbounded_channel();
        let mirror = Arc::new(
            MirroredClusterApi::new(Arc::clone(&self.api), Arc::clone(&self.view))
                .with_clock(self.clock.clone())
                .on_change(move |change| {
                    let _ = changes.send(change);
                }),
        );
        let sqs = Arc::new(KwokSqs::new(REGION));
        let eventbridge = Arc::new(KwokEventBridge::new(
            REGION,
            Arc::clone(&sqs),
            self.clock.clone(),
        ));
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::register(&mut registry));
        let deps = Deps {
            settings: Arc::new(karpenter_config::Settings::default()),
            clock: self.clock.clone(),
            cluster: mirror.clone(),
            view: self.view.clone(),
            unavailable: Arc::clone(&cloud.providers().unavailable),
            cloud,
            aws: AwsPorts {
                ec2: Arc::clone(&self.kwok) as Arc<dyn Ec2Api>,
                sqs,
                eventbridge,
                iam: Arc::new(KwokIam::default()),
                ssm: Arc::new(KwokSsm::default()),
                pricing: Arc::new(KwokPricing::default()),
                eks: Arc::new(karpenter_actors::kwok::eks::KwokEks::with_cluster(CLUSTER)),
            },
            cluster_info: ClusterInfo {
                name: CLUSTER.into(),
                endpoint: "https://test-cluster.example.com".into(),
                ..ClusterInfo::default()
            },
            region: REGION.into(),
            kubernetes_version: ClusterVersion::default(),
            kubernetes_version_source: None,
            metrics,
        };
        let kit = ActorKit::new(&mut registry, KitOptions::default());
        let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
        let daemon = Rc::new(
            Daemon::start_with(
                (*root).clone(),
                deps,
                &mut registry,
                StartOptions {
                    nodeclass_actors: false,
                    ..StartOptions::default()
                },
            )
            .unwrap(),
        );
        // The watchers list everything once at start.
        for claim in self.api.nodeclaims() {
            daemon.observe(&ClusterChange::NodeClaim {
                name: claim.metadata.name.unwrap(),
                deleted: false,
            });
        }
        daemon.observe(&ClusterChange::NodePool {
            name: "default".into(),
            deleted: false,
        });
        let pump_daemon = Rc::clone(&daemon);
        let pump = tokio::task::spawn_local(async move {
            while let Some(change) = receiver.recv().await {
                pump_daemon.observe(&change);
            }
        });
        Process {
            root,
            aws,
            daemon,
            mirror,
            pump,
            _kit: kit,
        }
    }

    /// Instance ids that are pending or running.
    fn live_instances(&self) -> BTreeSet<String> {
        self.kwok
            .instances()
            .into_iter()
            .filter(|i| matches!(i.state, InstanceState::Pending | InstanceState::Running))
            .map(|i| i.id)
            .collect()
    }

    fn provider_ids(&self) -> Vec<String> {
        self.api
            .nodeclaims()
            .into_iter()
            .filter_map(|c| c.status.and_then(|s| s.provider_id))
            .collect()
    }

    fn nodeclaim(&self, name: &str) -> Option<NodeClaim> {
        self.api.nodeclaim(name)
    }

    /// Every NodeClaim has its own instance, and every live instance is some NodeClaim's.
    fn assert_one_instance_per_nodeclaim(&self, nodeclaims: usize) {
        let ids: Vec<String> = self
            .provider_ids()
            .iter()
            .map(|p| p.rsplit('/').next().unwrap().to_owned())
            .collect();
        assert_eq!(ids.len(), nodeclaims, "every NodeClaim launched: {ids:?}");
        let distinct: BTreeSet<String> = ids.iter().cloned().collect();
        assert_eq!(distinct.len(), ids.len(), "no instance shared: {ids:?}");
        assert_eq!(
            distinct,
            self.live_instances(),
            "no instance without its NodeClaim"
        );
    }
}

impl Process {
    /// `kill -9`: every actor stops at once. Launch tasks already running finish on their own,
    /// as EC2 finishes a call whose caller died; what they learn reaches nobody.
    async fn kill(self) {
        self.root.stop().await;
        self.aws.root.stop().await;
        self.pump.abort();
        drop(self.daemon);
    }
}

async fn settle() {
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn advance(by: Duration) {
    tokio::time::sleep(by).await;
    settle().await;
}

#[actix::test]
async fn a_daemon_killed_before_createfleet_launches_once_after_its_restart() {
    tokio::time::pause();
    let world = World::new();
    // The class is not ready yet: the launch stops before CreateFleet, and the process dies.
    world.put_nodeclass(ConditionStatus::Unknown);
    let first = world.start().await;
    world.add_nodeclaim(Some(&first), "default-a");
    advance(Duration::from_secs(3)).await;
    assert_eq!(
        world
            .nodeclaim("default-a")
            .unwrap()
            .status
            .unwrap()
            .conditions
            .iter()
            .find(|c| c.type_ == "Launched")
            .map(|c| c.reason.clone()),
        Some("NodeClassReadinessUnknown".to_owned())
    );
    first.kill().await;
    assert_eq!(world.kwok.faults().count("CreateFleet"), 0);
    world.put_nodeclass(ConditionStatus::True);

    let _second = world.start().await;
    advance(COLLECTOR_WINDOW * 2).await;
    world.assert_one_instance_per_nodeclaim(1);
    assert_eq!(world.kwok.faults().count("CreateFleet"), 1);
}

#[actix::test]
async fn a_daemon_killed_while_createfleet_runs_adopts_the_instance_after_its_restart() {
    tokio::time::pause();
    let world = World::new();
    world.kwok.set_create_fleet_latency(FLEET_LATENCY);
    let first = world.start().await;
    world.add_nodeclaim(Some(&first), "default-a");
    advance(Duration::from_secs(2)).await;
    assert_eq!(
        world.kwok.faults().count("CreateFleet"),
        1,
        "the call reached EC2"
    );
    assert_eq!(world.live_instances().len(), 1);
    first.kill().await;

    let _second = world.start().await;
    advance(COLLECTOR_WINDOW * 2).await;
    world.assert_one_instance_per_nodeclaim(1);
    assert_eq!(
        world.kwok.faults().count("CreateFleet"),
        1,
        "the restarted daemon adopted the instance instead of launching another"
    );
    let claim = world.nodeclaim("default-a").unwrap();
    assert_eq!(
        claim.metadata.labels.unwrap()[labels::INSTANCE_TYPE],
        world.kwok.instances()[0].instance_type
    );
}

#[actix::test]
async fn a_daemon_killed_before_the_provider_id_write_adopts_the_instance_its_labels_name() {
    tokio::time::pause();
    let world = World::new();
    // The launch answers and the labels are written, but every status write fails.
    world.api.fail_when(
        |call| call.operation() == Operation::UpdateNodeClaimStatus,
        ClusterError::Server {
            kind: ObjectKind::NodeClaim,
            name: "default-a".into(),
            code: 500,
            message: "etcd is unhappy".into(),
        },
    );
    let first = world.start().await;
    world.add_nodeclaim(Some(&first), "default-a");
    advance(Duration::from_secs(3)).await;
    let labelled = world.nodeclaim("default-a").unwrap();
    let instance_type = labelled.metadata.labels.unwrap()[labels::INSTANCE_TYPE].clone();
    assert!(labelled.status.and_then(|s| s.provider_id).is_none());
    first.kill().await;
    world.api.clear_failures();
    // Down for longer than the collector's grace: the orphan is old enough to collect.
    advance(COLLECTOR_WINDOW).await;

    let _second = world.start().await;
    advance(COLLECTOR_WINDOW * 2).await;
    world.assert_one_instance_per_nodeclaim(1);
    assert_eq!(world.kwok.faults().count("CreateFleet"), 1);
    assert_eq!(world.kwok.instances()[0].instance_type, instance_type);
}

#[actix::test]
async fn a_daemon_killed_after_the_provider_id_write_launches_nothing_after_its_restart() {
    tokio::time::pause();
    let world = World::new();
    let first = world.start().await;
    world.add_nodeclaim(Some(&first), "default-a");
    advance(Duration::from_secs(3)).await;
    let launched = world.provider_ids();
    assert_eq!(launched.len(), 1);
    first.kill().await;

    let _second = world.start().await;
    advance(COLLECTOR_WINDOW * 2).await;
    world.assert_one_instance_per_nodeclaim(1);
    assert_eq!(world.provider_ids(), launched);
    assert_eq!(world.kwok.faults().count("CreateFleet"), 1);
}

#[actix::test]
async fn a_nodeclaim_deleted_while_its_launch_was_lost_leaves_the_instance_to_the_collector() {
    tokio::time::pause();
    let world = World::new();
    world.kwok.set_create_fleet_latency(FLEET_LATENCY);
    let first = world.start().await;
    world.add_nodeclaim(Some(&first), "default-a");
    advance(Duration::from_secs(2)).await;
    let orphan = world.live_instances();
    assert_eq!(orphan.len(), 1);
    first.kill().await;
    world.delete_nodeclaim("default-a").await;

    let _second = world.start().await;
    advance(Duration::from_secs(1)).await;
    assert!(
        world.nodeclaim("default-a").is_none(),
        "nothing to terminate: the finalizer goes"
    );
    assert_eq!(
        world.live_instances(),
        orphan,
        "inside the collector's grace"
    );
    advance(COLLECTOR_WINDOW).await;
    assert!(
        world.live_instances().is_empty(),
        "the leak is terminated within the collector's window"
    );
    assert_eq!(world.kwok.faults().count("CreateFleet"), 1);
}

#[actix::test]
async fn the_collector_spares_an_orphan_a_restarted_nodeclaim_waits_to_adopt() {
    tokio::time::pause();
    let world = World::new();
    world.kwok.set_create_fleet_latency(FLEET_LATENCY);
    let first = world.start().await;
    world.add_nodeclaim(Some(&first), "default-a");
    advance(Duration::from_secs(2)).await;
    let orphan = world.live_instances();
    first.kill().await;
    // The daemon comes back long after the collector's grace, and its class is not ready yet:
    // the NodeClaim cannot launch (or adopt) for a while.
    advance(COLLECTOR_WINDOW).await;
    world.put_nodeclass(ConditionStatus::Unknown);

    let second = world.start().await;
    advance(COLLECTOR_WINDOW * 3).await;
    assert_eq!(
        world.live_instances(),
        orphan,
        "spared: a NodeClaim of its launch group waits to adopt it"
    );
    assert!(world.provider_ids().is_empty());

    world.put_nodeclass(ConditionStatus::True);
    second.daemon.observe(&ClusterChange::EC2NodeClass {
        name: "default".into(),
        deleted: false,
    });
    second.mirror.sync_nodeclaim("default-a");
    advance(Duration::from_mins(1)).await;
    world.assert_one_instance_per_nodeclaim(1);
    assert_eq!(world.live_instances(), orphan, "adopted, not replaced");
    assert_eq!(world.kwok.faults().count("CreateFleet"), 1);
}

#[actix::test]
async fn nodeclaims_of_a_fleet_lost_with_their_daemon_adopt_one_instance_each() {
    tokio::time::pause();
    let world = World::new();
    world.kwok.set_create_fleet_latency(FLEET_LATENCY);
    let first = world.start().await;
    for name in ["default-a", "default-b", "default-c"] {
        world.add_nodeclaim(Some(&first), name);
    }
    advance(Duration::from_secs(2)).await;
    assert_eq!(
        world.kwok.faults().count("CreateFleet"),
        1,
        "one merged fleet"
    );
    assert_eq!(world.live_instances().len(), 3);
    first.kill().await;
    // A NodeClaim of the same group the restarted daemon's provisioner creates meanwhile.
    world.add_nodeclaim(None, "default-d");

    let _second = world.start().await;
    advance(COLLECTOR_WINDOW * 2).await;
    world.assert_one_instance_per_nodeclaim(4);
    assert_eq!(
        world.kwok.faults().count("CreateFleet"),
        2,
        "three adopted, one launched"
    );
}
