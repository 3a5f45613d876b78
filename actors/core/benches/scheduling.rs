//! Karpenter's scheduling benchmark (core `scheduling_benchmark_test.go`, reference 9.3) on our
//! scheduler: 400 fake instance types, one NodePool, the diverse pod mix at 1 to 20,000 pods,
//! and the 4,000 preference pods under Respect and Ignore. Only `solve` is timed, as Karpenter
//! times only `Solve()`; pods are converted from k8s `Pod`s beforehand.
//!
//! `cargo bench -p karpenter-core --bench scheduling` runs criterion; `... -- --report`
//! prints one table instead: pods/s, µs per pod, nodes and the plan's cost against the lower
//! bound, for the diverse mix, the generic-only mix, the preference cases and a cluster with
//! 1,000 existing nodes
//! (`-- --report diverse/20000` runs the cases whose name contains the text; `--runs N` runs
//! each case exactly N times, for instruction counts with `perf stat`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use karpenter_core::apis::labels;
use karpenter_core::domain::resources::Resources;
use karpenter_core::domain::scheduling::workload::{
    BENCHMARK_INSTANCE_TYPES, BENCHMARK_SIZES, PREFERENCE_PODS, PodFactory, ZONES,
    benchmark_node_pool, fake_instance_types,
};
use karpenter_core::domain::scheduling::{
    BoundPod, ExistingNode, Options, Plan, PreferencePolicy, SchedulingPod, Snapshot, cost_report,
    solve,
};

/// How long the report mode keeps repeating one case before taking the best run.
const REPORT_BUDGET: Duration = Duration::from_millis(1500);
/// Fewest runs per case in the report.
const REPORT_MIN_RUNS: usize = 3;

fn snapshot(pods: &[k8s_openapi::api::core::v1::Pod]) -> Snapshot {
    Snapshot {
        pods: pods
            .iter()
            .filter_map(|p| SchedulingPod::from_pod(p).ok())
            .collect(),
        node_pools: vec![benchmark_node_pool(fake_instance_types(
            BENCHMARK_INSTANCE_TYPES,
        ))],
        ..Snapshot::default()
    }
}

/// Existing nodes like the fake instance type `fake-it-7` (8 CPUs, 16 GiB), half full, each
/// running two bound pods with the workload's labels, in the three zones.
fn existing_nodes(count: usize) -> Vec<ExistingNode> {
    let mut factory = PodFactory::new(7);
    (0..count)
        .map(|i| {
            let name = format!("node-{i:05}");
            let zone = ZONES[i % ZONES.len()];
            ExistingNode {
                labels: [
                    (labels::HOSTNAME.to_owned(), name.clone()),
                    (labels::ZONE.to_owned(), zone.to_owned()),
                    (labels::NODEPOOL.to_owned(), "default".to_owned()),
                    (labels::INSTANCE_TYPE.to_owned(), "fake-it-7".to_owned()),
                ]
                .into(),
                name,
                allocatable: Resources::core(7900, 16 * GIB - 10 * MIB, 80),
                requested: Resources::core(4000, 8 * GIB, 2),
                capacity: Resources::core(8000, 16 * GIB, 80),
                pods: factory.diverse(2).iter().map(pod_on_node).collect(),
                initialized: true,
                registered: true,
                ..ExistingNode::default()
            }
        })
        .collect()
}

fn pod_on_node(pod: &k8s_openapi::api::core::v1::Pod) -> BoundPod {
    let mut pod = pod.clone();
    if let Some(spec) = &mut pod.spec {
        spec.node_name = Some("node".to_owned());
    }
    BoundPod::from_pod(&pod)
}

const GIB: i64 = 1 << 30;
const MIB: i64 = 1 << 20;

fn options(policy: PreferencePolicy) -> Options {
    Options {
        preference_policy: policy,
        ..Options::default()
    }
}

/// The benchmark cases whose name contains `filter` (all without one).
fn cases(filter: Option<&str>) -> Vec<(String, Snapshot, PreferencePolicy)> {
    type Build = Box<dyn Fn() -> Vec<k8s_openapi::api::core::v1::Pod>>;
    let mut all: Vec<(String, Build, PreferencePolicy)> = Vec::new();
    for size in BENCHMARK_SIZES {
        all.push((
            format!("diverse/{size}"),
            Box::new(move || PodFactory::default().diverse(size)),
            PreferencePolicy::Respect,
        ));
    }
    for policy in [PreferencePolicy::Respect, PreferencePolicy::Ignore] {
        all.push((
            format!("preferences/{policy}"),
            Box::new(|| PodFactory::default().preferences(PREFERENCE_PODS)),
            policy,
        ));
    }
    for size in [1000, 20_000] {
        all.push((
            format!("generic/{size}"),
            Box::new(move || PodFactory::default().generic(size)),
            PreferencePolicy::Respect,
        ));
    }
    all.push((
        "existing-1000/5000".to_owned(),
        Box::new(|| PodFactory::default().diverse(5000)),
        PreferencePolicy::Respect,
    ));
    // An exact name picks one case; otherwise every case containing the text.
    let exact = filter.is_some_and(|f| all.iter().any(|(name, _, _)| name == f));
    all.into_iter()
        .filter(|(name, _, _)| match filter {
            None => true,
            Some(f) if exact => name == f,
            Some(f) => name.contains(f),
        })
        .map(|(name, build, policy)| {
            let mut snapshot = snapshot(&build());
            if name.starts_with("existing") {
                snapshot.existing_nodes = existing_nodes(1000);
            }
            (name, snapshot, policy)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("scheduling");
    for (name, snapshot, policy) in cases(None) {
        let options = options(policy);
        group.throughput(Throughput::Elements(snapshot.pods.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(&name), &snapshot, |b, s| {
            b.iter(|| black_box(solve(black_box(s), &options)));
        });
    }
    group.finish();
}

/// A count as a float for rates (counts here are far below 2^52).
#[expect(clippy::cast_precision_loss, reason = "pod counts are far below 2^52")]
fn count(n: usize) -> f64 {
    n as f64
}

fn best_run(snapshot: &Snapshot, options: &Options, fixed_runs: Option<usize>) -> (Duration, Plan) {
    let mut best: Option<(Duration, Plan)> = None;
    let started = Instant::now();
    let mut runs = 0;
    let more = |runs: usize| match fixed_runs {
        Some(n) => runs < n,
        None => runs < REPORT_MIN_RUNS || started.elapsed() < REPORT_BUDGET,
    };
    while more(runs) {
        let start = Instant::now();
        let plan = solve(snapshot, options);
        let elapsed = start.elapsed();
        runs += 1;
        if best.as_ref().is_none_or(|(d, _)| elapsed < *d) {
            best = Some((elapsed, plan));
        }
    }
    best.unwrap_or_else(|| (Duration::ZERO, Plan::default()))
}

fn report(filter: Option<&str>, fixed_runs: Option<usize>) {
    println!(
        "{:<22} {:>7} {:>7} {:>9} {:>10} {:>9} {:>11} {:>10} {:>10} {:>7} {:>7}",
        "case",
        "pods",
        "nodes",
        "existing",
        "time",
        "µs/pod",
        "pods/s",
        "cost $/h",
        "bound $/h",
        "ratio",
        "failed"
    );
    for (name, snapshot, policy) in cases(filter) {
        let (elapsed, plan) = best_run(&snapshot, &options(policy), fixed_runs);
        let pods = snapshot.pods.len();
        let cost = cost_report(&snapshot, &plan);
        let seconds = elapsed.as_secs_f64();
        println!(
            "{:<22} {:>7} {:>7} {:>9} {:>8.2}ms {:>9.2} {:>11.0} {:>10.2} {:>10.2} {:>7.3} {:>7}",
            name,
            pods,
            plan.new_node_claims.len(),
            plan.existing.iter().map(|e| e.pods.len()).sum::<usize>(),
            seconds * 1000.0,
            seconds * 1e6 / count(pods),
            count(pods) / seconds,
            cost.cost,
            cost.lower_bound,
            cost.ratio(),
            plan.failures.len(),
        );
    }
    if filter.is_some() {
        return;
    }
    let pods = PodFactory::default().diverse(20_000);
    let start = Instant::now();
    let converted = pods
        .iter()
        .filter(|p| SchedulingPod::from_pod(p).is_ok())
        .count();
    let elapsed = start.elapsed();
    println!(
        "\nconverting {converted} k8s Pods to SchedulingPods (done once per pod, outside solve): {:.2}ms ({:.2} µs/pod)",
        elapsed.as_secs_f64() * 1000.0,
        elapsed.as_secs_f64() * 1e6 / count(converted.max(1))
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--report") {
        let value = |flag: &str| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1))
                .filter(|v| !v.starts_with("--"))
        };
        let runs = value("--runs").and_then(|v| v.parse().ok());
        report(value("--report").map(String::as_str), runs);
        return;
    }
    let mut criterion = Criterion::default().sample_size(10).configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
