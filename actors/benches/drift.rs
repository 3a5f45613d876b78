//! Drift at scale: the `Drifted` condition the NodeClaim actors keep (`src/nodeclaim/drift.rs`)
//! over N initialized NodeClaims of one NodePool, through the daemon's actors over the fake
//! cluster and cloud of the lifecycle tests. Time is tokio's paused clock, so the numbers are
//! the actors' CPU cost, not waiting. Each run builds its cluster first (N NodeClaims stamped
//! with the pool's hash, launched, registered and initialized, then a quiet minute; the pool's
//! budget of zero nodes keeps the disruption round from replacing drifted nodes); only the
//! phase below is timed.
//!
//! - `nodepool`: the NodePool's template gains a label (the NodePool actor re-stamps
//!   `karpenter.sh/nodepool-hash`), timed until every NodeClaim is `Drifted=True` with reason
//!   `NodePoolDrifted` (the static check: no cloud call expected);
//! - `nodeclass`: the fake cloud reports `AMIDrift` for every NodeClaim, then the EC2NodeClass
//!   gains a tag (a new resourceVersion), timed until every NodeClaim is `Drifted=True` with
//!   reason `AMIDrift` (one `IsDrifted` call per NodeClaim expected);
//! - `steady`: each node changes (a label) every 20 simulated seconds, staggered over the 20
//!   seconds, for 10 simulated minutes: the `CloudDrift` memo should ask the cloud 2 times per
//!   NodeClaim (the 5-minute recheck) where Karpenter asks on each of the 30 reconciles. The
//!   time covers everything the churn costs: the harness's node writes, the NodeClaim
//!   reconciles, and the disruption rounds each node change brings forward (every 2 s).
//!
//! Run: `cargo bench -p karpenter-actors --bench drift -- --quick` (a few minutes; `steady`
//! at 5,000 takes one run of one to two minutes). Besides criterion's report, one line per
//! scenario and size (all repeated together at the end):
//!
//! - `wall`, `CPU`: wall and this thread's CPU time of the phase per run, and per NodeClaim
//!   (which should stay flat as N grows; the disruption round's own decision runs on tokio's
//!   blocking pool and is in the wall time only);
//! - `IsDrifted`: cloud calls during the phase, per NodeClaim, and the least..most of one
//!   NodeClaim;
//! - `simulated`, `disruption rounds`: the paused clock's time the phase took and the
//!   disruption rounds run meanwhile;
//! - memory, with `stats_alloc` as the global allocator: `alloc`, the bytes the phase
//!   allocated; `peak +`, the most live heap above the phase's start, sampled every 0.1 ms by a
//!   side thread (`stats_alloc` keeps no peak); `held`, the live heap the cluster held when the
//!   phase began (fake cluster, view, actors, the fake cloud's call log); `peak RSS`, the
//!   process's `VmHWM` over the phase (reset at its start; includes what the cluster holds).
//!
//! Calls, simulated time, rounds and memory are the last run's.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark setup: a failed unwrap is a broken fixture"
)]

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use common::{
    SIZES, launched, measurement_time, per_nodeclaim_micros, thread_cpu_time, wait_for_each,
};

use std::alloc::System;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use karpenter_actors::disruption::GetDisruptionStatus;
use karpenter_actors::ports::cloud_provider::DriftReason;
use karpenter_actors::ports::cluster_view::ClusterView as _;
use karpenter_actors::testing::{CloudCall, CloudOperation};
use karpenter_core::apis::labels;
use karpenter_core::domain::nodepool_hash::HASH_VERSION;
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use support::{Harness, make_ready, nodeclaim, nodeclass, nodepool};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The live heap: bytes allocated and not freed (`stats_alloc` counts a realloc's growth as
/// allocated and its shrinking as freed).
fn live_bytes() -> usize {
    let stats = GLOBAL.stats();
    stats
        .bytes_allocated
        .saturating_sub(stats.bytes_deallocated)
}

/// The process's peak resident set (`VmHWM` of `/proc/self/status`), in bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// How often the sampler looks at the live heap (`stats_alloc` keeps no peak).
const SAMPLE_EVERY: Duration = Duration::from_micros(100);

/// The counters at the start of a phase and a thread sampling the live heap until
/// [`MemoryMark::since`]; taking one also restarts the process's peak RSS (`5` to
/// `/proc/self/clear_refs`).
struct MemoryMark {
    allocated: usize,
    live: usize,
    stop: Arc<AtomicBool>,
    sampler: std::thread::JoinHandle<usize>,
}

impl MemoryMark {
    fn now() -> Self {
        let live = live_bytes();
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let sampler = std::thread::spawn(move || {
            let mut peak = live_bytes();
            while !stopped.load(Ordering::Relaxed) {
                peak = peak.max(live_bytes());
                std::thread::sleep(SAMPLE_EVERY);
            }
            peak.max(live_bytes())
        });
        Self {
            allocated: GLOBAL.stats().bytes_allocated,
            live,
            stop,
            sampler,
        }
    }

    /// What the phase since the mark cost; `held` is the live heap at the mark above `base`.
    fn since(self, base: usize) -> Memory {
        self.stop.store(true, Ordering::Relaxed);
        let peak = self.sampler.join().unwrap();
        Memory {
            allocated: GLOBAL.stats().bytes_allocated - self.allocated,
            peak_above: peak.saturating_sub(self.live),
            held: self.live.saturating_sub(base),
            peak_rss: peak_rss(),
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Memory {
    allocated: usize,
    peak_above: usize,
    held: usize,
    peak_rss: Option<u64>,
}

const NODEPOOL: &str = "default";
/// How often each node changes in the steady scenario, and for how long.
const CHANGE_EVERY_SECS: usize = 20;
const STEADY_FOR_SECS: usize = 600;

#[derive(Clone, Copy)]
enum Scenario {
    NodePool,
    NodeClass,
    Steady,
}

impl Scenario {
    const ALL: [Self; 3] = [Self::NodePool, Self::NodeClass, Self::Steady];

    fn name(self) -> &'static str {
        match self {
            Self::NodePool => "nodepool",
            Self::NodeClass => "nodeclass",
            Self::Steady => "steady",
        }
    }
}

/// Whether the view shows the NodeClaim with condition `kind` true (and reason `reason`, if
/// given), an `Arc` read.
fn has_condition(h: &Harness, name: &str, kind: &str, reason: Option<&str>) -> bool {
    h.view.nodeclaim(name).is_some_and(|claim| {
        claim.status.as_ref().is_some_and(|status| {
            status.conditions.iter().any(|c| {
                c.type_ == kind
                    && c.status.as_str() == "True"
                    && reason.is_none_or(|reason| c.reason == reason)
            })
        })
    })
}

/// `count` NodeClaims of the `default` pool, stamped with its hash as the Provisioner creates
/// them, launched, registered and initialized, then a quiet minute (the pool's status writes
/// after the initializations nudge its NodeClaims too). The pool's budget of zero nodes keeps
/// the disruption round from replacing drifted nodes. Returns the NodeClaim and node names.
async fn initialized_cluster(count: usize) -> (Harness, Vec<String>, Vec<String>) {
    let h = Harness::start();
    h.add_nodeclass(nodeclass(Some(true)));
    h.add_nodepool(nodepool(
        NODEPOOL,
        json!({ "spec": { "disruption": {
            "consolidateAfter": "Never",
            "budgets": [{ "nodes": "0" }],
        }}}),
    ));
    h.settle().await;
    let hash = h
        .api
        .nodepool(NODEPOOL)
        .unwrap()
        .metadata
        .annotations
        .unwrap()[labels::NODEPOOL_HASH]
        .clone();
    let names: Vec<String> = (0..count).map(|i| format!("{NODEPOOL}-{i}")).collect();
    for name in &names {
        h.add_nodeclaim(nodeclaim(
            name,
            json!({ "metadata": { "annotations": {
                labels::NODEPOOL_HASH: hash,
                labels::NODEPOOL_HASH_VERSION: HASH_VERSION,
            }}}),
        ));
    }
    assert!(
        wait_for_each(
            &h,
            &names,
            Duration::from_mins(1),
            Duration::from_millis(100),
            launched
        )
        .await
    );
    let nodes: Vec<String> = names
        .iter()
        .map(|name| h.register_node(name, &[], &[]))
        .collect();
    h.settle().await;
    for node in &nodes {
        h.edit_node(node, |n| make_ready(n, &[]));
    }
    assert!(
        wait_for_each(
            &h,
            &names,
            Duration::from_mins(1),
            Duration::from_millis(100),
            |h, name| has_condition(h, name, "Initialized", None)
        )
        .await
    );
    h.advance(Duration::from_mins(1)).await;
    assert!(
        names
            .iter()
            .all(|name| !has_condition(&h, name, "Drifted", None)),
        "nothing drifted before the change"
    );
    (h, names, nodes)
}

/// What one run measured of its timed phase.
#[derive(Default)]
struct Measured {
    wall: Duration,
    cpu: Option<Duration>,
    /// `IsDrifted` calls: in all, and the least and most of one NodeClaim.
    calls: usize,
    calls_min: usize,
    calls_max: usize,
    memory: Memory,
    /// The paused clock's time the phase took, and the disruption rounds it saw.
    simulated: Duration,
    rounds: u64,
}

/// `IsDrifted` calls since the first `from`, in all and the least and most per NodeClaim.
fn drift_calls(h: &Harness, names: &[String], from: usize) -> (usize, usize, usize) {
    let calls = h.cloud.calls_of(CloudOperation::IsDrifted);
    let mut per: BTreeMap<&str, usize> = names.iter().map(|n| (n.as_str(), 0)).collect();
    for call in &calls[from..] {
        if let CloudCall::IsDrifted { nodeclaim } = call
            && let Some(count) = per.get_mut(nodeclaim.as_str())
        {
            *count += 1;
        }
    }
    (
        calls.len() - from,
        per.values().copied().min().unwrap_or(0),
        per.values().copied().max().unwrap_or(0),
    )
}

async fn run(scenario: Scenario, count: usize) -> Measured {
    tokio::time::pause();
    let base = live_bytes();
    let (h, names, nodes) = initialized_cluster(count).await;
    if let Scenario::NodeClass = scenario {
        // Nothing reconciles before the class changes: no NodeClaim sees this until then.
        for name in &names {
            h.cloud.set_drift(name, Some(DriftReason::AmiDrift));
        }
    }
    let asked = h.cloud.calls_of(CloudOperation::IsDrifted).len();
    let rounds = disruption_rounds(&h).await;
    let simulated = tokio::time::Instant::now();
    let mark = MemoryMark::now();
    let (wall, cpu) = (Instant::now(), thread_cpu_time());
    match scenario {
        Scenario::NodePool => {
            let mut pool = h.api.nodepool(NODEPOOL).unwrap();
            pool.spec
                .template
                .metadata
                .labels
                .insert("team".into(), "b".into());
            h.add_nodepool(pool);
            assert!(
                wait_for_each(
                    &h,
                    &names,
                    Duration::from_mins(1),
                    Duration::from_millis(100),
                    |h, name| has_condition(h, name, "Drifted", Some("NodePoolDrifted"))
                )
                .await
            );
        }
        Scenario::NodeClass => {
            let mut class = h.api.ec2nodeclass("default").unwrap();
            class
                .spec
                .tags
                .insert("example.com/bench".into(), "1".into());
            h.add_nodeclass(class);
            assert!(
                wait_for_each(
                    &h,
                    &names,
                    Duration::from_mins(1),
                    Duration::from_millis(100),
                    |h, name| has_condition(h, name, "Drifted", Some("AMIDrift"))
                )
                .await
            );
        }
        Scenario::Steady => {
            // Node i changes at the seconds s with s % 20 == i % 20.
            for second in 0..STEADY_FOR_SECS {
                for node in nodes
                    .iter()
                    .skip(second % CHANGE_EVERY_SECS)
                    .step_by(CHANGE_EVERY_SECS)
                {
                    h.edit_node(node, |node| {
                        node.metadata
                            .labels
                            .get_or_insert_with(Default::default)
                            .insert("example.com/heartbeat".into(), second.to_string());
                    });
                }
                h.advance(Duration::from_secs(1)).await;
            }
        }
    }
    let wall = wall.elapsed();
    let cpu = thread_cpu_time()
        .zip(cpu)
        .map(|(end, start)| end.saturating_sub(start));
    let memory = mark.since(base);
    let simulated = simulated.elapsed();
    let rounds = disruption_rounds(&h).await - rounds;
    let (calls, calls_min, calls_max) = drift_calls(&h, &names, asked);
    h.root.stop().await;
    Measured {
        wall,
        cpu,
        calls,
        calls_min,
        calls_max,
        memory,
        simulated,
        rounds,
    }
}

/// The disruption rounds run so far.
async fn disruption_rounds(h: &Harness) -> u64 {
    h.daemon
        .disruption()
        .request(GetDisruptionStatus, Duration::from_secs(10))
        .await
        .unwrap()
        .rounds
}

/// The runs of one scenario and size; the calls and memory are the last run's.
#[derive(Default)]
struct Runs {
    runs: u32,
    wall: Duration,
    cpu: Option<Duration>,
    last: Measured,
}

#[expect(clippy::cast_precision_loss, reason = "a report, in MiB")]
fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn summary(scenario: Scenario, count: usize, runs: &Runs) -> String {
    let n = u32::try_from(count).unwrap_or(u32::MAX);
    let cpu = runs.cpu.map_or_else(String::new, |cpu| {
        format!(
            ", CPU {:>8.1} ms = {:>5.0} µs/NodeClaim",
            cpu.as_secs_f64() * 1e3 / f64::from(runs.runs),
            per_nodeclaim_micros(cpu, runs.runs, count)
        )
    });
    let last = &runs.last;
    format!(
        "drift {:<9} {count:>5} NodeClaims: wall {:>8.1} ms = {:>5.0} µs/NodeClaim{cpu}; \
         IsDrifted {:>6} ({:.2}/NodeClaim, {}..{}); {:.1} s simulated, {} disruption rounds; alloc {:.1} MiB, peak +{:.1} MiB over {:.1} MiB held, peak RSS {:.0} MiB ({} runs)",
        scenario.name(),
        runs.wall.as_secs_f64() * 1e3 / f64::from(runs.runs),
        per_nodeclaim_micros(runs.wall, runs.runs, count),
        last.calls,
        f64::from(u32::try_from(last.calls).unwrap_or(u32::MAX)) / f64::from(n),
        last.calls_min,
        last.calls_max,
        last.simulated.as_secs_f64(),
        last.rounds,
        mib(last.memory.allocated),
        mib(last.memory.peak_above),
        mib(last.memory.held),
        last.memory
            .peak_rss
            .map_or(0.0, |rss| mib(usize::try_from(rss).unwrap_or(usize::MAX))),
        runs.runs
    )
}

fn bench(c: &mut Criterion) {
    let mut lines = Vec::new();
    for scenario in Scenario::ALL {
        let mut group = c.benchmark_group(format!("drift_{}", scenario.name()));
        group.sample_size(10);
        group.sampling_mode(SamplingMode::Flat);
        for count in SIZES {
            group.measurement_time(measurement_time(count));
            group.throughput(Throughput::Elements(count as u64));
            let runs = RefCell::new(Runs::default());
            group.bench_with_input(BenchmarkId::from_parameter(count), &count, |b, &count| {
                b.iter_custom(|iterations| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iterations {
                        let measured = actix::System::new().block_on(run(scenario, count));
                        total += measured.wall;
                        let mut runs = runs.borrow_mut();
                        runs.runs += 1;
                        runs.wall += measured.wall;
                        runs.cpu = measured.cpu.map(|cpu| runs.cpu.unwrap_or_default() + cpu);
                        runs.last = measured;
                    }
                    total
                });
            });
            let runs = runs.into_inner();
            if runs.runs > 0 {
                let line = summary(scenario, count, &runs);
                println!("{line}");
                lines.push(line);
            }
        }
        group.finish();
    }
    for line in lines {
        println!("{line}");
    }
}
criterion_group!(benches, bench);
criterion_main!(benches);
