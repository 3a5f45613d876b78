//! Karpenter's scheduling benchmark (core `scheduling_benchmark_test.go`, reference 9.3) on our
//! scheduler: 400 fake instance types, one NodePool, the diverse pod mix at 1 to 20,000 pods,
//! and the 4,000 preference pods under Respect and Ignore. Each timed run converts the view's
//! `SlimPod`s to `SchedulingPod`s (the snapshot's pods) and then solves: Karpenter's timer around
//! `Solve()` includes reading every pod's requests and requirements, so ours does too. The
//! NodePool, its instance types and the existing nodes are built once beforehand, as
//! Karpenter's `setupScheduler` runs before its timer.
//!
//! As Karpenter's `b.Fatalf`, a case fails (panics) when the plan leaves any pod unplaced, and
//! every case prints its node count.
//!
//! `cargo bench -p karpenter-core --bench scheduling` runs criterion; `... -- --report`
//! prints one table instead: the time split into conversion and solve, pods/s, µs per pod,
//! nodes and the plan's cost against the lower bound, for the diverse mix, the generic-only
//! mix, the preference cases and a cluster with 1,000 existing nodes
//! (`-- --report diverse/20000` runs the cases whose name contains the text; `--runs N` runs
//! each case exactly N times, for instruction counts with `perf stat`).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use karpenter_core::apis::SlimPod;
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

/// The snapshot without its pods: the benchmark NodePool with its 400 instance types.
fn base_snapshot() -> Snapshot {
    Snapshot {
        node_pools: vec![benchmark_node_pool(fake_instance_types(
            BENCHMARK_INSTANCE_TYPES,
        ))],
        ..Snapshot::default()
    }
}

/// The snapshot's pods, read from the k8s Pods (the work Karpenter's timer includes). Every
/// benchmark pod must convert: one that does not is a broken workload, not a slow one.
#[expect(
    clippy::panic,
    reason = "a benchmark pod that does not convert is a broken fixture"
)]
fn convert(pods: &[SlimPod]) -> Vec<SchedulingPod> {
    pods.iter()
        .map(|p| {
            SchedulingPod::from_pod(p).unwrap_or_else(|error| {
                panic!(
                    "benchmark pod {} does not convert: {error}",
                    p.metadata.name.as_deref().unwrap_or_default()
                )
            })
        })
        .collect()
}

/// One timed run: converts the pods into `snapshot` and solves it.
fn convert_and_solve(pods: &[SlimPod], snapshot: &mut Snapshot, options: &Options) -> Plan {
    snapshot.pods = convert(pods);
    solve(snapshot, options)
}

/// Fails the case when the plan leaves a pod unplaced, as Karpenter's benchmark `b.Fatalf`s.
#[expect(
    clippy::panic,
    reason = "a plan that leaves pods unplaced measures nothing"
)]
fn expect_every_pod_placed(name: &str, pods: usize, plan: &Plan) {
    let placed = plan.scheduled_pods();
    if !plan.failures.is_empty() || placed != pods {
        let first = plan.failures.first().map_or_else(String::new, |f| {
            format!(" (first failure: {})", f.message())
        });
        panic!(
            "{name}: {} of {pods} pods left unplaced{first}",
            pods.saturating_sub(placed)
        );
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

fn pod_on_node(pod: &SlimPod) -> Arc<BoundPod> {
    let mut pod = pod.clone();
    if let Some(spec) = &mut pod.spec {
        spec.node_name = Some("node".into());
    }
    Arc::new(BoundPod::from_pod(&pod))
}

const GIB: i64 = 1 << 30;
const MIB: i64 = 1 << 20;

fn options(policy: PreferencePolicy) -> Options {
    Options {
        preference_policy: policy,
        ..Options::default()
    }
}

/// One benchmark case: the k8s Pods and the rest of the snapshot, built before any timing.
struct Case {
    name: String,
    pods: Vec<SlimPod>,
    snapshot: Snapshot,
    options: Options,
}

/// The benchmark cases whose name contains `filter` (all without one).
fn cases(filter: Option<&str>) -> Vec<Case> {
    type Build = Box<dyn Fn() -> Vec<SlimPod>>;
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
            let mut snapshot = base_snapshot();
            if name.starts_with("existing") {
                snapshot.existing_nodes = existing_nodes(1000);
            }
            Case {
                name,
                pods: build(),
                snapshot,
                options: options(policy),
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("scheduling");
    for mut case in cases(None) {
        let plan = convert_and_solve(&case.pods, &mut case.snapshot, &case.options);
        expect_every_pod_placed(&case.name, case.pods.len(), &plan);
        println!(
            "{}: {} pods, {} new nodes",
            case.name,
            case.pods.len(),
            plan.new_node_claims.len()
        );
        group.throughput(Throughput::Elements(case.pods.len() as u64));
        group.bench_function(BenchmarkId::from_parameter(&case.name), |b| {
            b.iter(|| {
                black_box(convert_and_solve(
                    black_box(&case.pods),
                    &mut case.snapshot,
                    &case.options,
                ))
            });
        });
    }
    group.finish();
}

/// A count as a float for rates (counts here are far below 2^52).
#[expect(clippy::cast_precision_loss, reason = "pod counts are far below 2^52")]
fn count(n: usize) -> f64 {
    n as f64
}

/// The fastest run of a case: its conversion and solve times and its plan.
struct BestRun {
    convert: Duration,
    solve: Duration,
    plan: Plan,
}

impl BestRun {
    fn total(&self) -> Duration {
        self.convert + self.solve
    }
}

fn best_run(case: &mut Case, fixed_runs: Option<usize>) -> BestRun {
    let mut best: Option<BestRun> = None;
    let started = Instant::now();
    let mut runs = 0;
    let more = |runs: usize| match fixed_runs {
        Some(n) => runs < n,
        None => runs < REPORT_MIN_RUNS || started.elapsed() < REPORT_BUDGET,
    };
    while more(runs) {
        // `convert_and_solve`, split in two for the report.
        let start = Instant::now();
        case.snapshot.pods = convert(&case.pods);
        let converted = Instant::now();
        let plan = solve(&case.snapshot, &case.options);
        let run = BestRun {
            convert: converted.duration_since(start),
            solve: converted.elapsed(),
            plan,
        };
        runs += 1;
        if best.as_ref().is_none_or(|b| run.total() < b.total()) {
            best = Some(run);
        }
    }
    best.unwrap_or_else(|| BestRun {
        convert: Duration::ZERO,
        solve: Duration::ZERO,
        plan: Plan::default(),
    })
}

fn report(filter: Option<&str>, fixed_runs: Option<usize>) {
    println!(
        "{:<22} {:>7} {:>7} {:>9} {:>10} {:>10} {:>10} {:>9} {:>11} {:>10} {:>10} {:>7}",
        "case",
        "pods",
        "nodes",
        "existing",
        "time",
        "convert",
        "solve",
        "µs/pod",
        "pods/s",
        "cost $/h",
        "bound $/h",
        "ratio",
    );
    for mut case in cases(filter) {
        let best = best_run(&mut case, fixed_runs);
        let pods = case.pods.len();
        expect_every_pod_placed(&case.name, pods, &best.plan);
        let cost = cost_report(&case.snapshot, &best.plan);
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let seconds = best.total().as_secs_f64();
        println!(
            "{:<22} {:>7} {:>7} {:>9} {:>8.2}ms {:>8.2}ms {:>8.2}ms {:>9.2} {:>11.0} {:>10.2} {:>10.2} {:>7.3}",
            case.name,
            pods,
            best.plan.new_node_claims.len(),
            best.plan
                .existing
                .iter()
                .map(|e| e.pods.len())
                .sum::<usize>(),
            ms(best.total()),
            ms(best.convert),
            ms(best.solve),
            seconds * 1e6 / count(pods),
            count(pods) / seconds,
            cost.cost,
            cost.lower_bound,
            cost.ratio(),
        );
    }
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
