//! The whole simulation at scale: `config/scenarios/scale.yaml` (40,000 web pods spread over
//! zones, 5,000 one-per-node pods, 5,000 spot batch pods: about 5,000 nodes) with its replicas
//! scaled to 1,000, 2,000 and 5,000 one-per-node pods, each run for the scenario's 15 simulated
//! minutes by the real daemon over the emulator, kwok and the fake kubelet and scheduler.
//!
//! Each size runs in a child process of this bench, so its peak resident set is its own. Per
//! size it prints: wall time, simulated seconds per wall second, peak RSS (`VmHWM`), the peak
//! live heap (`pk heap`: the binary's allocator, jemalloc, counted with one atomic per call and
//! sampled every millisecond; cap's peak-tracking counter, a compare-and-swap loop on every
//! allocation, made the 5k run 70.0 s against 64.7 s), and the heap at the end split by part:
//!
//! - `emulator`: the API emulator's stored objects and watch history (its own byte count);
//! - `view`: the watched objects the daemon and the harness share (each object's heap size,
//!   measured by cloning it under the counting allocator);
//! - `rest`: everything else live on the heap (the actors and their caches, kwok's account,
//!   the harness, buffers), the counting allocator's total minus the two above.
//!
//! Prometheus scrapes the daemon's `/metrics` once a simulated minute (its default
//! `scrape_interval`), asking for gzip as it does: the per-node and per-pod families are
//! computed at a scrape, so their cost is in the wall time and the peaks. The bench prints the
//! scrapes' mean wall time and the last one's size.
//!
//! It also prints what the run did (pods bound and pending, nodes at the peak), and panics if a
//! pod was left pending: a fast run that did not place its pods measures nothing.
//!
//! Run: `cargo bench --bench scale` (all sizes, about a minute each on two cores), or
//! `cargo bench --bench scale -- 1000` for the sizes given.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::cast_precision_loss,
    reason = "benchmark report: a failed unwrap is a broken benchmark; sizes are reported approximately"
)]

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cap::Cap;
use karpenter::sim::scenario::{LoadedScenario, Pace, Simulation, on_runtime};
use karpenter_actors::ports::cluster_view::ClusterView;

/// The binary's allocator (src/main.rs), counted.
#[global_allocator]
static GLOBAL: Cap<tikv_jemallocator::Jemalloc> = Cap::new(tikv_jemallocator::Jemalloc, usize::MAX);

const SCENARIO: &str = include_str!("../config/scenarios/scale.yaml");
/// The scenario's own size: its one-per-node pods.
const FULL_SIZE: u64 = 5_000;
const DEFAULT_SIZES: [u64; 3] = [1_000, 2_000, 5_000];
/// Marks the child's one result line on stdout.
const RESULT: &str = "scale-result";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--child") {
        let size = args[at + 1].parse().expect("--child takes a size");
        child(size);
        return;
    }
    let sizes: Vec<u64> = args
        .iter()
        .filter_map(|a| a.parse().ok())
        .collect::<Vec<_>>();
    let sizes = if sizes.is_empty() {
        DEFAULT_SIZES.to_vec()
    } else {
        sizes
    };
    println!(
        "{:>6} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7}",
        "size",
        "pods",
        "nodes",
        "wall s",
        "sim s/s",
        "peak MB",
        "pk heap",
        "heap MB",
        "emul MB",
        "view MB",
        "rest MB",
        "pending"
    );
    for size in sizes {
        let output = Command::new(std::env::current_exe().unwrap())
            .args(["--child", &size.to_string()])
            .output()
            .expect("the bench runs itself per size");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let Some(line) = stdout.lines().find_map(|l| l.strip_prefix(RESULT)) else {
            panic!(
                "size {size}: the run gave no result ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        };
        println!("{line}");
        for detail in stdout.lines().filter(|l| l.starts_with("size ")) {
            println!("       {detail}");
        }
    }
}

/// The scale scenario with every workload's replicas scaled to `size` one-per-node pods (the
/// file's `replicas:` lines rewritten before it is loaded, so the loader sees what a user's
/// file would say).
fn scenario(size: u64) -> LoadedScenario {
    let text: String = SCENARIO
        .lines()
        .map(|line| match line.split_once("replicas: ") {
            Some((head, tail)) => {
                let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
                let rest = &tail[digits.len()..];
                let replicas: u64 = digits.parse().expect("replicas are numbers");
                format!("{head}replicas: {}{rest}\n", replicas * size / FULL_SIZE)
            }
            None => format!("{line}\n"),
        })
        .collect();
    LoadedScenario::from_yaml(&text, None).expect("scale.yaml loads")
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1_048_576.0
}

/// A `/proc/self/status` field in bytes (`VmHWM`, `VmRSS`).
fn proc_status_bytes(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| {
            v.trim()
                .trim_end_matches(" kB")
                .trim()
                .parse::<usize>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

/// Heap bytes now live, by the counting allocator.
fn live_heap() -> usize {
    GLOBAL.allocated()
}

/// The largest live heap seen, sampled every millisecond on a thread of its own until dropped.
struct PeakHeap {
    peak: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl PeakHeap {
    fn start() -> Self {
        let peak = Arc::new(AtomicUsize::new(live_heap()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, stopped) = (Arc::clone(&peak), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                seen.fetch_max(live_heap(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Self { peak, stop }
    }

    fn get(&self) -> usize {
        let now = live_heap();
        self.peak.fetch_max(now, Ordering::Relaxed).max(now)
    }
}

impl Drop for PeakHeap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Heap bytes of `objects`: each cloned under the counting allocator (the run is quiet by
/// then: nothing else allocates meanwhile).
fn heap_of<T: Clone>(objects: &[Arc<T>]) -> usize {
    objects
        .iter()
        .map(|object| {
            let before = live_heap();
            let copy = T::clone(object);
            let allocated = live_heap().saturating_sub(before);
            drop(copy);
            allocated + std::mem::size_of::<T>()
        })
        .sum()
}

/// The shared view's objects, by heap size.
fn view_heap(view: &dyn ClusterView) -> usize {
    heap_of(&view.pods())
        + heap_of(&view.nodes())
        + heap_of(&view.nodeclaims())
        + heap_of(&view.nodepools())
        + heap_of(&view.ec2nodeclasses())
        + heap_of(&view.daemonsets())
        + heap_of(&view.pdbs())
        + heap_of(&view.volumeattachments())
        + heap_of(&view.pvcs())
        + heap_of(&view.namespaces())
}

/// Prometheus scraping `/metrics` once a simulated minute (its default `scrape_interval`), as
/// it would the deployed daemon: the families computed at scrape time are part of its cost.
#[derive(Default)]
struct Scrapes {
    count: u32,
    wall: Duration,
    last_bytes: usize,
    last: bytes::Bytes,
}

impl Scrapes {
    /// One scrape; the answer is kept only when `keep` (the last one: the harness holds
    /// nothing of the daemon's between scrapes).
    async fn scrape(&mut self, simulation: &Simulation<'_>, keep: bool) -> Duration {
        let started = Instant::now();
        let reply = simulation
            .routes()
            .answer_accepting(
                &http::Method::GET,
                karpenter::http::METRICS_PATH,
                None,
                true,
            )
            .await;
        assert_eq!(reply.status, http::StatusCode::OK, "the scrape is answered");
        assert_eq!(
            reply.content_encoding,
            Some("gzip"),
            "as Prometheus asks for it"
        );
        let took = started.elapsed();
        self.count += 1;
        self.wall += took;
        self.last_bytes = reply.body.len();
        if keep {
            self.last = reply.body;
        }
        took
    }

    /// The length of the last scrape's text, read through the gzip stream (never held whole).
    fn last_text_len(&self) -> u64 {
        let mut text = flate2::read::GzDecoder::new(&self.last[..]);
        std::io::copy(&mut text, &mut std::io::sink()).expect("the scrape is gzip")
    }
}

fn child(size: u64) {
    let loaded = scenario(size);
    let simulated = loaded.scenario.duration;
    let peak = PeakHeap::start();
    let started = Instant::now();
    let line = on_runtime(Pace::Fast, async move {
        let mut simulation = Simulation::start(loaded, None).await.expect("starts");
        // Minute by minute, so a child run by hand (`--child SIZE`) shows on stderr where the
        // wall time and the peak heap go.
        let mut minute: u64 = 0;
        let requests = |simulation: &Simulation| -> u64 {
            simulation
                .emulator()
                .request_counts()
                .iter()
                .map(|c| c.count)
                .sum()
        };
        let mut prometheus = Scrapes::default();
        while simulation.advance(std::time::Duration::from_mins(1)).await {
            minute += 1;
            let last = minute * 60 >= simulated.as_secs();
            let scrape_wall = prometheus.scrape(&simulation, last).await;
            eprintln!(
                "size {size} at {minute:>2} min: wall {:>6.1} s, heap {:>5.0} MB, peak heap {:>5.0} MB, API requests {:>7}, scrape {:>6.1} ms {:>6.0} KB",
                started.elapsed().as_secs_f64(),
                mb(live_heap()),
                mb(peak.get()),
                requests(&simulation),
                scrape_wall.as_secs_f64() * 1e3,
                prometheus.last_bytes as f64 / 1024.0,
            );
        }
        let wall = started.elapsed().as_secs_f64();
        let scraped_text = prometheus.last_text_len();
        prometheus.last = bytes::Bytes::new();
        let stats = simulation.emulator().stats();
        let emulator: usize = stats.iter().map(|k| k.object_bytes + k.history_bytes).sum();
        let by_kind: Vec<String> = stats
            .iter()
            .filter(|k| k.object_bytes + k.history_bytes >= 1_048_576)
            .map(|k| {
                format!(
                    "{} {} objects {:.0} MB + history {:.0} MB",
                    k.kind,
                    k.objects,
                    mb(k.object_bytes),
                    mb(k.history_bytes)
                )
            })
            .collect();
        let view = view_heap(simulation.view().as_ref());
        let heap = live_heap();
        let simulation_requests = simulation.emulator().request_counts();
        let report = simulation.finish().await;
        let pods = &report.pods;
        println!("size {size}, emulator by kind: {}", by_kind.join("; "));
        let busiest: Vec<String> = simulation_requests
            .iter()
            .take(8)
            .map(|c| {
                let sub = if c.subresource.is_empty() { String::new() } else { format!("/{}", c.subresource) };
                format!("{} {}{sub} {}", c.verb, c.resource, c.count)
            })
            .collect();
        println!("size {size}, API requests served: {}", busiest.join("; "));
        println!(
            "size {size}, /metrics scraped {} times (gzip, as Prometheus asks): {:.0} ms each, the last {:.1} MB of text in {:.0} KB",
            prometheus.count,
            prometheus.wall.as_secs_f64() * 1e3 / f64::from(prometheus.count.max(1)),
            scraped_text as f64 / 1_048_576.0,
            prometheus.last_bytes as f64 / 1024.0,
        );
        assert_eq!(
            pods.pending_at_end, 0,
            "size {size}: pods left pending: {:?}",
            pods.pending_reasons
        );
        format!(
            "{:>6} {:>7} {:>7} {:>9.1} {:>9.1} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>8.0} {:>8.0} {:>7}",
            size,
            pods.scheduled,
            report.nodes.peak_nodes,
            wall,
            simulated.as_secs_f64() / wall,
            mb(proc_status_bytes("VmHWM")),
            mb(peak.get()),
            mb(heap),
            mb(emulator),
            mb(view),
            mb(heap.saturating_sub(emulator + view)),
            pods.pending_at_end,
        )
    })
    .expect("the runtime starts");
    println!("{RESULT}{line}");
}
