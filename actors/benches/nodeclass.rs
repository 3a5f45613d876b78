//! EC2NodeClass resolution, in process over kwok (reference 2.2 `nodeclass`):
//! - `hash`: the static-field hash of a representative class (kubelet settings, block devices,
//!   tags), computed on every reconcile to keep the hash annotation current.
//! - `reconcile_warm`: one reconcile of a `Ready` class through its actor with every cache warm
//!   (the steady state: a watch event or requeue that finds nothing to change).
//! - `reconcile_new_classes`: the first reconcile of 100 new classes (finalizer, hash, status
//!   write, instance profile, dry runs), per class.

#![allow(
    clippy::panic,
    reason = "benchmark setup: a bench whose setup fails has nothing to measure"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use karpenter_actors::deps::ClusterVersion;
use karpenter_actors::kwok::ec2::{KwokEc2, KwokEc2Config, KwokEc2Deps};
use karpenter_actors::kwok::iam::KwokIam;
use karpenter_actors::kwok::ssm::KwokSsm;
use karpenter_actors::messages::{Cause, Reconcile};
use karpenter_actors::nodeclass::{NodeClassActor, NodeClassDeps};
use karpenter_actors::ports::clock::SystemClock;
use karpenter_actors::ports::ec2::Ec2Api;
use karpenter_actors::providers::amis::AmiProvider;
use karpenter_actors::providers::instance_profiles::InstanceProfileProvider;
use karpenter_actors::providers::security_groups::SecurityGroupProvider;
use karpenter_actors::providers::subnets::SubnetProvider;
use karpenter_actors::runtime::{ActorKit, Family, GroupSpec, KitOptions};
use karpenter_actors::testing::MemoryClusterView;
use karpenter_actors::testing::{FakeClusterApi, MirroredClusterApi};
use karpenter_core::apis::EC2NodeClass;
use karpenter_core::domain::nodeclass_hash::nodeclass_hash;
use karpenter_core::domain::userdata::ClusterInfo;

const CLUSTER: &str = "bench-cluster";
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Classes created per iteration of `reconcile_new_classes`.
const NEW_CLASSES: usize = 100;

fn class(name: &str) -> EC2NodeClass {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "spec": {
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole",
            "tags": {"team": "platform", "cost-center": "1234"},
            "kubelet": {
                "maxPods": 110,
                "systemReserved": {"cpu": "100m", "memory": "100Mi"},
                "evictionHard": {"memory.available": "5%"},
                "clusterDNS": ["10.100.0.10"],
            },
            "blockDeviceMappings": [{
                "deviceName": "/dev/xvda",
                "rootVolume": true,
                "ebs": {"volumeSize": "100Gi", "volumeType": "gp3", "encrypted": true},
            }],
        },
    }))
    .unwrap_or_else(|error| panic!("bench class: {error}"))
}

struct Env {
    api: Arc<FakeClusterApi>,
    view: Arc<MemoryClusterView>,
    family: Family<NodeClassActor>,
    _kit: ActorKit,
}

fn env() -> Env {
    let api = Arc::new(FakeClusterApi::new());
    let view = Arc::new(MemoryClusterView::new());
    let clock = Arc::new(SystemClock);
    let ec2 = Arc::new(
        KwokEc2::new(
            KwokEc2Config::new("us-west-2", CLUSTER),
            KwokEc2Deps {
                clock: clock.clone(),
                events: None,
            },
        )
        .unwrap_or_else(|error| panic!("kwok ec2: {error}")),
    );
    let ec2: Arc<dyn Ec2Api> = ec2;
    let ssm = Arc::new(KwokSsm::with_aliases(
        &["1.33"],
        "ami-00000000000000001",
        "ami-00000000000000002",
    ));
    let deps = NodeClassDeps {
        cluster: Arc::new(MirroredClusterApi::new(Arc::clone(&api), Arc::clone(&view))),
        view: view.clone(),
        clock,
        ec2: Arc::clone(&ec2),
        subnets: Arc::new(SubnetProvider::new(Arc::clone(&ec2))),
        security_groups: Arc::new(SecurityGroupProvider::new(Arc::clone(&ec2))),
        amis: Arc::new(AmiProvider::new(Arc::clone(&ec2), ssm)),
        instance_profiles: Arc::new(InstanceProfileProvider::new(Arc::new(KwokIam::default()))),
        cluster_info: ClusterInfo {
            name: CLUSTER.into(),
            endpoint: "https://bench.example.com".into(),
            ca_bundle: None,
            dns_ips: Vec::new(),
            service_cidr: Some("10.100.0.0/16".into()),
        },
        region: "us-west-2".into(),
        kubernetes_version: ClusterVersion::default(),
        cloud: None,
    };
    let mut metrics = prometheus_client::registry::Registry::default();
    let kit = ActorKit::new(&mut metrics, KitOptions::default());
    let root = kit
        .root(GroupSpec::one_for_one("root"))
        .unwrap_or_else(|error| panic!("root: {error}"));
    let family = root
        .family::<NodeClassActor>(GroupSpec::one_for_one("nodeclasses"), deps)
        .unwrap_or_else(|error| panic!("family: {error}"));
    Env {
        api,
        view,
        family,
        _kit: kit,
    }
}

impl Env {
    fn add(&self, name: &str) {
        let class = class(name);
        self.api.seed_ec2nodeclass(class.clone());
        self.view.put_ec2nodeclass(class);
    }

    async fn reconcile(&self, name: &str) {
        let _ = self.family.ensure(name);
        self.family
            .request(
                name,
                Reconcile {
                    cause: Cause::Changed,
                },
                REQUEST_TIMEOUT,
            )
            .await
            .unwrap_or_else(|error| panic!("reconcile {name}: {error}"));
    }
}

fn hash(c: &mut Criterion) {
    let spec = class("default").spec;
    c.bench_function("nodeclass/hash", |b| {
        b.iter(|| nodeclass_hash(std::hint::black_box(&spec)));
    });
}

fn reconcile(c: &mut Criterion) {
    let system = actix::System::new();
    let warm = system.block_on(async {
        let env = env();
        env.add("default");
        env.reconcile("default").await;
        env
    });
    c.bench_function("nodeclass/reconcile_warm", |b| {
        b.iter_custom(|iterations| {
            system.block_on(async {
                let start = Instant::now();
                for _ in 0..iterations {
                    warm.reconcile("default").await;
                }
                start.elapsed()
            })
        });
    });
    c.bench_function("nodeclass/reconcile_new_classes_per_class", |b| {
        b.iter_custom(|iterations| {
            system.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let fresh = env();
                    let names: Vec<String> =
                        (0..NEW_CLASSES).map(|i| format!("class-{i}")).collect();
                    for name in &names {
                        fresh.add(name);
                    }
                    let start = Instant::now();
                    for name in &names {
                        fresh.reconcile(name).await;
                    }
                    total += start.elapsed() / u32::try_from(NEW_CLASSES).unwrap_or(1);
                }
                total
            })
        });
    });
}

criterion_group!(benches, hash, reconcile);
criterion_main!(benches);
