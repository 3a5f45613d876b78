//! The Provisioner end to end, on the scheduling benchmark's workload: pending pods in a
//! `MemoryClusterView`, the benchmark's 400 instance types from a fake cloud provider, NodeClaims
//! created through a `FakeClusterApi`. For each case it prints the time from the actor's start to
//! its run report, split into reading the snapshot from the view (pod conversion included),
//! the solve, and the rest: the run's own work after the solve ("decide": limits check,
//! creating NodeClaims, nominations, decisions, queueing events) and the actor's (starting the
//! run, keeping each pod's decision); then the rest against the solve, and the cost per pod,
//! which should stay flat from 1,000 to 20,000 pods: of the whole (`µs/pod`), and of the run
//! alone (`run µs/pod`: snapshot, solve and decide), without the actor's start, the batch
//! window and the status poll, which take about the same 2 ms at every size and so weigh on
//! the smallest case the most. Each case runs [`runs`] times and the
//! fastest run is printed (the machine may be shared). A case fails if a pod is left without a
//! place.
//!
//! Run: `cargo bench -p karpenter-actors --bench provisioner` (a report, no criterion groups;
//! the batch window is cut to 1 ms so only the work is timed); `-- diverse/20000` runs the cases
//! whose name contains the text, e.g. for `perf record`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark setup: a failed unwrap is a broken fixture"
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use karpenter_actors::metrics::Metrics;
use karpenter_actors::ports::clock::ManualClock;
use karpenter_actors::provisioner::{
    GetProvisionerStatus, PROVISIONER_KEY, ProvisionerActor, ProvisionerDeps, ProvisionerMetrics,
    ProvisionerPorts, RunSummary,
};
use karpenter_actors::runtime::{ActorKit, GroupSpec, KitOptions};
use karpenter_actors::testing::FakeCloudProvider;
use karpenter_actors::testing::FakeClusterApi;
use karpenter_actors::testing::MemoryClusterView;
use karpenter_config::Settings;
use karpenter_core::apis::labels;
use karpenter_core::apis::nodepool::NodePool;
use karpenter_core::domain::scheduling::workload::{
    BENCHMARK_INSTANCE_TYPES, PodFactory, ZONES, fake_instance_types,
};
use prometheus_client::registry::Registry;

/// The daemon binary's allocator (src/main.rs), so the bench times what the daemon runs: under
/// glibc's malloc the per-unit cost grew with the heap (its bin searches and
/// consolidation), a cost the daemon does not pay.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long to wait between status polls (real time): short beside the smallest case's run.
const POLL: Duration = Duration::from_micros(250);
/// Runs per case, the fastest printed (the machine may be shared): at least five, and more for
/// the small cases, whose runs take milliseconds and vary the most, up to about as many pods
/// in all as the 20,000-pod case's five runs.
fn runs(pods: usize) -> usize {
    (100_000 / pods.max(1)).clamp(5, 50)
}
/// The cases: pending pods and existing nodes (two bound pods each).
const CASES: [(usize, usize); 6] = [
    (1000, 0),
    (2000, 0),
    (5000, 0),
    (10_000, 0),
    (20_000, 0),
    (5000, 1000),
];

fn nodepool() -> NodePool {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        }}},
        "status": {"conditions": [{
            "type": "Ready", "status": "True", "reason": "Ready", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]},
    }))
    .unwrap()
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// An unmanaged 8-CPU node with two of the workload's pods on it.
fn node(i: usize, view: &MemoryClusterView, factory: &mut PodFactory) {
    let name = format!("node-{i:05}");
    view.put_node(Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(BTreeMap::from([
                (labels::HOSTNAME.to_owned(), name.clone()),
                (labels::ZONE.to_owned(), ZONES[i % ZONES.len()].to_owned()),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("aws:///zone/i-{i:08}")),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            allocatable: Some(quantities(&[
                ("cpu", "7900m"),
                ("memory", "15Gi"),
                ("pods", "80"),
            ])),
            capacity: Some(quantities(&[
                ("cpu", "8"),
                ("memory", "16Gi"),
                ("pods", "80"),
            ])),
            ..NodeStatus::default()
        }),
    });
    for mut pod in factory.diverse(2) {
        pod.metadata.name =
            Some(format!("{name}-{}", pod.metadata.name.unwrap_or_default()).into());
        pod.spec.as_mut().unwrap().node_name = Some(name.as_str().into());
        view.put_slim_pod(pod);
    }
}

fn run_case(pods: usize, nodes: usize) -> (Duration, RunSummary, usize) {
    actix::System::new().block_on(async move {
        let view = Arc::new(MemoryClusterView::new());
        view.put_nodepool(nodepool());
        let mut factory = PodFactory::new(9);
        for i in 0..nodes {
            node(i, &view, &mut factory);
        }
        for pod in PodFactory::default().diverse(pods) {
            view.put_slim_pod(pod);
        }
        let api = Arc::new(FakeClusterApi::new());
        let cloud = Arc::new(FakeCloudProvider::with_instance_types(fake_instance_types(
            BENCHMARK_INSTANCE_TYPES,
        )));
        let settings = Settings {
            batch_idle_duration: Duration::from_millis(1),
            ..Settings::default()
        };
        let mut registry = Registry::default();
        let kit = ActorKit::new(&mut registry, KitOptions::default());
        let created = Metrics::register(&mut registry).nodeclaims_created();
        let deps = ProvisionerDeps::new(
            ProvisionerPorts {
                settings: Arc::new(settings),
                clock: Arc::new(ManualClock::new(
                    "2026-01-01T00:00:00Z".parse::<Timestamp>().unwrap(),
                )),
                cluster: api.clone(),
                view: view.clone(),
                cloud,
            },
            ProvisionerMetrics::register(&mut registry, created),
        );
        let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
        let started = Instant::now();
        let actor = root
            .spawn::<ProvisionerActor>(PROVISIONER_KEY, deps)
            .unwrap();
        let summary = loop {
            tokio::time::sleep(POLL).await;
            let status = actor
                .request(GetProvisionerStatus, Duration::from_mins(10))
                .await
                .unwrap();
            if let Some(summary) = status.last_run {
                break summary;
            }
        };
        let elapsed = started.elapsed();
        root.stop().await;
        (elapsed, summary, api.nodeclaims().len())
    })
}

/// A count as a float for per-pod figures (counts here are far below 2^52).
#[expect(clippy::cast_precision_loss, reason = "pod counts are far below 2^52")]
fn count(n: usize) -> f64 {
    n as f64
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let filter = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    println!(
        "{:<22} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>10} {:>10} {:>10}",
        "case",
        "pods",
        "total",
        "snapshot",
        "solve",
        "rest",
        "decide",
        "rest/solve",
        "µs/pod",
        "rest µs/pod",
        "run µs/pod",
        "nodeclaims"
    );
    for (pods, nodes) in CASES {
        let name = format!("diverse/{pods} nodes={nodes}");
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        let (elapsed, summary, claims) = (0..runs(pods))
            .map(|_| run_case(pods, nodes))
            .min_by_key(|(elapsed, _, _)| *elapsed)
            .unwrap();
        assert_eq!(
            summary.unschedulable + summary.deferred + summary.node_claims_not_created,
            0,
            "{name}: pods left without a place: {summary:?}"
        );
        assert_eq!(summary.pods, pods, "{name}: pods missing from the run");
        let ms = |micros: u64| Duration::from_micros(micros).as_secs_f64() * 1000.0;
        let total = elapsed.as_secs_f64() * 1000.0;
        let (solve, rest) = (
            ms(summary.solve_micros),
            total - ms(summary.build_micros) - ms(summary.solve_micros),
        );
        let run = ms(summary.build_micros) + solve + ms(summary.decide_micros);
        println!(
            "{:<22} {:>6} {:>7.1}ms {:>7.1}ms {:>7.1}ms {:>7.1}ms {:>7.1}ms {:>10.2} {:>9.2} {:>10.2} {:>10.2} {:>10}",
            name,
            summary.pods,
            total,
            ms(summary.build_micros),
            solve,
            rest,
            ms(summary.decide_micros),
            rest / solve,
            total * 1000.0 / count(summary.pods),
            rest * 1000.0 / count(summary.pods),
            run * 1000.0 / count(summary.pods),
            claims,
        );
    }
}
