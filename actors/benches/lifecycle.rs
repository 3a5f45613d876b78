//! Node lifecycle throughput of the actors: N NodeClaims from creation to `Initialized`
//! (finalizer, launch, registration, initialization) and from deletion to gone (node deletion,
//! taint, drain of two pods each, instance termination, finalizers), through the daemon's
//! NodeClaim and NodePool actors over the fake cluster and cloud of the lifecycle tests. Time is
//! tokio's paused clock, so the numbers are the actors' CPU cost, not waiting. A run is timed
//! from the first NodeClaim's creation until the last is gone: the daemon's start and stop cost
//! the same at every size and would swamp the small one.
//!
//! Run: `cargo bench -p karpenter-actors --bench lifecycle -- --quick` (a few minutes). Besides
//! criterion's report, one line per size gives the time per run and per NodeClaim, which should
//! stay flat as the count grows (every per-object lookup is an index read, not a scan), and a
//! last line the least cost per NodeClaim of interleaved runs from 1k to 20k (see
//! [`flatness`]), the figure to compare across sizes.

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

use std::cell::RefCell;
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use karpenter_actors::ports::cluster_view::ClusterView as _;
use serde_json::json;
use support::{Harness, PodSpecBuilder, make_ready, nodeclaim, nodeclass, nodepool};

/// The daemon binary's allocator (src/main.rs), so the bench times what the daemon runs: under
/// glibc's malloc the per-unit cost grew with the heap (its bin searches and
/// consolidation), a cost the daemon does not pay.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Whether the view shows the NodeClaim `Initialized` (an `Arc` read, no copy).
fn initialized(h: &Harness, name: &str) -> bool {
    h.view.nodeclaim(name).is_some_and(|claim| {
        claim.status.as_ref().is_some_and(|status| {
            status
                .conditions
                .iter()
                .any(|c| c.type_ == "Initialized" && c.status.as_str() == "True")
        })
    })
}

/// What one run measured: wall and CPU time from the first NodeClaim's creation until the last
/// is gone (the daemon's start and stop, the same at every size, are left out).
#[derive(Default)]
struct Measured {
    wall: Duration,
    cpu: Option<Duration>,
}

/// Creates `count` NodeClaims, brings them to Ready, deletes them and waits until they are gone.
async fn lifecycle(count: usize) -> Measured {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodeclass(nodeclass(Some(true)));
    h.add_nodepool(nodepool("default", json!({})));
    h.settle().await;
    let (wall, cpu) = (Instant::now(), thread_cpu_time());
    let names: Vec<String> = (0..count).map(|i| format!("default-{i}")).collect();
    for name in &names {
        h.add_nodeclaim(nodeclaim(name, json!({})));
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
        h.put_pod(PodSpecBuilder::new(&format!("{node}-web"), node).build());
        h.put_pod(
            PodSpecBuilder::new(&format!("{node}-agent"), node)
                .daemon()
                .build(),
        );
    }
    assert!(
        wait_for_each(
            &h,
            &names,
            Duration::from_mins(1),
            Duration::from_millis(100),
            initialized
        )
        .await
    );
    for name in &names {
        h.delete_nodeclaim(name).await;
    }
    assert!(
        wait_for_each(
            &h,
            &names,
            Duration::from_mins(5),
            Duration::from_secs(1),
            |h, name| h.view.nodeclaim(name).is_none()
        )
        .await
    );
    let measured = Measured {
        wall: wall.elapsed(),
        cpu: thread_cpu_time()
            .zip(cpu)
            .map(|(end, start)| end.saturating_sub(start)),
    };
    h.root.stop().await;
    measured
}

/// The runs of one size.
#[derive(Default)]
struct Runs {
    runs: u32,
    wall: Duration,
    cpu: Option<Duration>,
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("nodeclaim_lifecycle");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    let mut summary = Vec::new();
    for count in SIZES {
        group.measurement_time(measurement_time(count));
        group.throughput(Throughput::Elements(count as u64));
        // One untimed run first: `--quick` times a single run of the big sizes, which would
        // otherwise be the process's first at that size and pay for growing the heap (fresh
        // pages, allocator segments) that the small sizes, timed after earlier runs, reuse.
        actix::System::new().block_on(lifecycle(count));
        let runs = RefCell::new(Runs::default());
        group.bench_with_input(BenchmarkId::from_parameter(count), &count, |b, &count| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let measured = actix::System::new().block_on(lifecycle(count));
                    total += measured.wall;
                    let mut runs = runs.borrow_mut();
                    runs.runs += 1;
                    runs.wall += measured.wall;
                    runs.cpu = measured.cpu.map(|cpu| runs.cpu.unwrap_or_default() + cpu);
                }
                total
            });
        });
        let runs = runs.into_inner();
        if runs.runs > 0 {
            let cpu = runs.cpu.map_or_else(String::new, |cpu| {
                format!(
                    ", {:>6.0} µs CPU per NodeClaim",
                    per_nodeclaim_micros(cpu, runs.runs, count)
                )
            });
            let line = format!(
                "lifecycle {count:>5} NodeClaims: {:>8.1} ms per run, {:>6.0} µs per NodeClaim{cpu} ({} runs)",
                runs.wall.as_secs_f64() * 1e3 / f64::from(runs.runs),
                per_nodeclaim_micros(runs.wall, runs.runs, count),
                runs.runs
            );
            println!("{line}");
            summary.push(line);
        }
    }
    group.finish();
    for line in summary {
        println!("{line}");
    }
    flatness();
}

/// Interleaved rounds over the sizes from 1,000 up for the flatness figure.
const FLATNESS_ROUNDS: usize = 3;

/// The per-NodeClaim cost from 1,000 NodeClaims up, as the least of [`FLATNESS_ROUNDS`] runs
/// per size taken in turns (1k, 2k, ..., 20k, then again): on a shared two-core machine the
/// same run's CPU time varies up to twofold over minutes, and criterion's runs, one size after
/// another, put that drift between the sizes. The least of interleaved runs is the cost with
/// the least interference, measured the same way at every size.
fn flatness() {
    let sizes: Vec<usize> = SIZES.iter().copied().filter(|&n| n >= 1_000).collect();
    let mut least = vec![f64::INFINITY; sizes.len()];
    for _ in 0..FLATNESS_ROUNDS {
        for (at, &count) in sizes.iter().enumerate() {
            let measured = actix::System::new().block_on(lifecycle(count));
            let spent = measured.cpu.unwrap_or(measured.wall);
            least[at] = least[at].min(per_nodeclaim_micros(spent, 1, count));
        }
    }
    let figures: Vec<String> = sizes
        .iter()
        .zip(&least)
        .map(|(count, micros)| format!("{count} {micros:.0} µs"))
        .collect();
    println!(
        "lifecycle per NodeClaim, least of {FLATNESS_ROUNDS} interleaved rounds: {}; largest over smallest {:.2}",
        figures.join(", "),
        least.last().copied().unwrap_or(0.0) / least.first().copied().unwrap_or(1.0)
    );
}
criterion_group!(benches, bench);
criterion_main!(benches);
