//! One full disruption round (candidates, budgets, all methods, their simulations) on generated
//! clusters of 100, 1,000 and 5,000 nodes with 10 pods per node
//! ([`karpenter_core::domain::disruption::workload::bench_cluster`]): two NodePools (on-demand
//! and spot), three zones, 40 deployments of which some spread over zones and some keep one
//! replica per node, a DaemonSet pod per node.
//!
//! Scenarios: `steady` packs every node full with the cheapest type that fits, so no method
//! finds anything and single-node consolidation evaluates candidates until its work budget
//! runs out (the worst round); `underutilized` leaves a fifth of the nodes half full, so
//! multi-node consolidation finds a command. Each runs with the default work budgets
//! ("caps"), without them (`uncapped`: every candidate evaluated), and as the daemon runs it by
//! default (`repack`: budgets on and N→M repacking after Karpenter's methods).
//!
//! `cargo bench -p karpenter-core --bench disruption` runs criterion; `... -- --report` prints
//! one table: wall time per round (best of several runs), per node, simulations, work units,
//! memory, and the outcome. Memory comes from `stats_alloc`: "input" is the live heap the input
//! holds, "peak +" the highest live heap one round adds on top of it (sampled every 20 µs by a
//! second thread), "alloc" every byte the round allocates, freed or not.
//! `--report steady` runs the cases whose name contains the text (`steady/100!` that case
//! only); `--runs N` runs each case exactly N times.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use karpenter_core::domain::disruption::workload::{Scenario, bench_cluster};
use karpenter_core::domain::disruption::{Decision, DisruptionInput, MethodOutcome, decide};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// How long the report keeps repeating one case before taking the best run.
const REPORT_BUDGET: Duration = Duration::from_secs(2);
/// Fewest runs per case in the report.
const REPORT_MIN_RUNS: usize = 2;
/// The cluster sizes the issue asks for.
const SIZES: [usize; 3] = [100, 1000, 5000];
/// The generator's seed.
const SEED: u64 = 42;

struct Case {
    name: String,
    nodes: usize,
    input: DisruptionInput,
    /// Live heap the input holds.
    input_bytes: usize,
}

/// The cases whose name contains `filter` (an exact name picks that case only).
fn cases(filter: Option<&str>) -> Vec<Case> {
    let mut out = Vec::new();
    for (scenario, label) in [
        (Scenario::Steady, "steady"),
        (Scenario::Underutilized, "underutilized"),
    ] {
        // Karpenter's methods with and without the work budgets, then the daemon's default
        // (repacking on, budgets on).
        for (capped, repack) in [(true, false), (false, false), (true, true)] {
            for nodes in SIZES {
                let variant = match (capped, repack) {
                    (true, false) => "",
                    (false, _) => "-uncapped",
                    (true, true) => "-repack",
                };
                let name = format!("{label}{variant}/{nodes}");
                let exact = filter.is_some_and(|f| f.ends_with('!'));
                let wanted = match filter {
                    None => true,
                    Some(f) if exact => name == f.trim_end_matches('!'),
                    Some(f) => name.contains(f),
                };
                if !wanted {
                    continue;
                }
                let mut cluster = bench_cluster(nodes, scenario, SEED);
                cluster.options.repack = repack;
                if !capped {
                    cluster.options.multi_node_budget = None;
                    cluster.options.single_node_budget = None;
                    cluster.options.repack_budget = None;
                }
                let before = live();
                let input = cluster.input();
                let input_bytes = live().saturating_sub(before);
                out.push(Case {
                    name,
                    nodes,
                    input,
                    input_bytes,
                });
            }
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("disruption");
    for case in cases(None) {
        group.throughput(Throughput::Elements(case.nodes as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(&case.name),
            &case.input,
            |b, input| b.iter(|| black_box(decide(black_box(input)))),
        );
    }
    group.finish();
}

/// Bytes allocated and not yet freed (`stats_alloc` counts reallocations into both).
fn live() -> usize {
    let stats = GLOBAL.stats();
    stats
        .bytes_allocated
        .saturating_sub(stats.bytes_deallocated)
}

/// Runs `f` while a second thread samples the live heap every 20 µs; returns `f`'s result and
/// the highest live heap seen above the start (a sampled peak: a spike shorter than the
/// interval can be missed).
fn peak_heap<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = live();
    let done = AtomicBool::new(false);
    let peak = AtomicUsize::new(0);
    let out = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(live().saturating_sub(start), Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(20));
            }
        });
        let out = f();
        peak.fetch_max(live().saturating_sub(start), Ordering::Relaxed);
        done.store(true, Ordering::Relaxed);
        out
    });
    (out, peak.load(Ordering::Relaxed))
}

struct Measured {
    best: Duration,
    decision: Decision,
    allocated: usize,
    peak: usize,
}

fn measure(input: &DisruptionInput, fixed_runs: Option<usize>) -> Measured {
    let region = Region::new(GLOBAL);
    let (first, peak) = peak_heap(|| decide(input));
    let allocated = region.change().bytes_allocated;
    let mut best = Duration::MAX;
    let started = Instant::now();
    let mut runs = 0;
    let more = |runs: usize| match fixed_runs {
        Some(n) => runs < n,
        None => runs < REPORT_MIN_RUNS || started.elapsed() < REPORT_BUDGET,
    };
    while more(runs) {
        let start = Instant::now();
        black_box(decide(input));
        best = best.min(start.elapsed());
        runs += 1;
    }
    Measured {
        best,
        decision: first,
        allocated,
        peak,
    }
}

fn outcome(decision: &Decision) -> String {
    if let Some(command) = &decision.command {
        return format!(
            "{:?} {} {}→{}",
            command.method,
            command.decision().as_str(),
            command.candidates.len(),
            command.replacements.len()
        );
    }
    let timed_out = decision
        .methods
        .iter()
        .filter(|m| m.timed_out)
        .map(|m| format!("{:?}", m.method))
        .collect::<Vec<_>>();
    let last = decision.methods.last().map(|m| &m.outcome);
    match (timed_out.is_empty(), last) {
        (false, _) => format!("none ({} timed out)", timed_out.join(",")),
        (true, Some(MethodOutcome::Nothing { .. })) => "none".to_owned(),
        (true, other) => format!("none ({other:?})"),
    }
}

#[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
fn per(value: f64, count: usize) -> f64 {
    value / count as f64
}

#[expect(clippy::cast_precision_loss, reason = "byte counts far below 2^52")]
fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

fn report(filter: Option<&str>, fixed_runs: Option<usize>) {
    println!(
        "{:<26} {:>6} {:>10} {:>9} {:>6} {:>9} {:>10} {:>10} {:>10} {:<30}",
        "case",
        "nodes",
        "round",
        "µs/node",
        "sims",
        "work",
        "input MiB",
        "peak +MiB",
        "alloc MiB",
        "outcome"
    );
    for case in cases(filter) {
        let measured = measure(&case.input, fixed_runs);
        let seconds = measured.best.as_secs_f64();
        println!(
            "{:<26} {:>6} {:>8.1}ms {:>9.1} {:>6} {:>9} {:>10.1} {:>10.1} {:>10.1} {:<30}",
            case.name,
            case.nodes,
            seconds * 1000.0,
            per(seconds * 1e6, case.nodes),
            measured.decision.simulations,
            measured.decision.work,
            mib(case.input_bytes as u64),
            mib(measured.peak as u64),
            mib(measured.allocated as u64),
            outcome(&measured.decision),
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
