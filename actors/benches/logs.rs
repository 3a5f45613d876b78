//! The cost of one of Karpenter's JSON log lines (`karpenter_actors::logs`): a line with 1,
//! 10 and 30 fields of mixed kinds (strings, numbers, object references, Go durations,
//! booleans) inside an actor's reconcile context, written to a discarding sink; a line the
//! sampler drops; and the reconcile span every handled message opens, with the JSON layer, the
//! CLI's compact layer and no subscriber. (30, not 50: one `tracing` event takes at most 32
//! fields.)
//!
//! Run: `cargo bench -p karpenter-actors --bench logs` (add `-- --quick` for a short run).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark setup: a failed unwrap is a broken benchmark"
)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use karpenter_actors::logs::{GoDuration, KarpenterJson, Sink, level_filter, reconcile_span};
use karpenter_actors::runtime::ControllerId;
use karpenter_config::LogLevel;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{Layer as _, Registry};

/// Our crates' events pass `level_filter` at INFO; a bench's own module path would not.
const TARGET: &str = "karpenter_actors::bench";

const NODECLAIM: ControllerId =
    ControllerId::of_kind("nodeclaim.lifecycle", "karpenter.sh", "NodeClaim");

fn json_subscriber(sampling: bool) -> impl tracing::Subscriber + Send + Sync {
    Registry::default().with(
        KarpenterJson::new(vec![Sink::writer(std::io::sink())])
            .commit(Some("490ef94"))
            .sampling(sampling)
            .with_filter(level_filter(LogLevel::Info)),
    )
}

fn one_field() {
    tracing::info!(
        target: TARGET,
        { "provider-id" = "aws:///us-west-2a/i-0123456789abcdef0" },
        "launched nodeclaim"
    );
}

fn ten_fields() {
    tracing::info!(
        target: TARGET,
        {            "key-0" = "value 0",
            "count-1" = 1_u64,
            Node = "ip-10-0-0-2.ec2.internal",
            "duration-3" = %GoDuration(Duration::from_micros(3712)),
            "ok-4" = true,
            "key-5" = "value 5",
            "count-6" = 6_u64,
            Node = "ip-10-0-0-7.ec2.internal",
            "duration-8" = %GoDuration(Duration::from_micros(9897)),
            "ok-9" = true
        },
        "launched nodeclaim"
    );
}

fn thirty_fields() {
    tracing::info!(
        target: TARGET,
        {            "key-0" = "value 0",
            "count-1" = 1_u64,
            Node = "ip-10-0-0-2.ec2.internal",
            "duration-3" = %GoDuration(Duration::from_micros(3712)),
            "ok-4" = true,
            "key-5" = "value 5",
            "count-6" = 6_u64,
            Node = "ip-10-0-0-7.ec2.internal",
            "duration-8" = %GoDuration(Duration::from_micros(9897)),
            "ok-9" = true,
            "key-10" = "value 10",
            "count-11" = 11_u64,
            Node = "ip-10-0-0-12.ec2.internal",
            "duration-13" = %GoDuration(Duration::from_micros(16082)),
            "ok-14" = true,
            "key-15" = "value 15",
            "count-16" = 16_u64,
            Node = "ip-10-0-0-17.ec2.internal",
            "duration-18" = %GoDuration(Duration::from_micros(22267)),
            "ok-19" = true,
            "key-20" = "value 20",
            "count-21" = 21_u64,
            Node = "ip-10-0-0-22.ec2.internal",
            "duration-23" = %GoDuration(Duration::from_micros(28452)),
            "ok-24" = true,
            "key-25" = "value 25",
            "count-26" = 26_u64,
            Node = "ip-10-0-0-27.ec2.internal",
            "duration-28" = %GoDuration(Duration::from_micros(34637)),
            "ok-29" = true
        },
        "launched nodeclaim"
    );
}

fn lines(c: &mut Criterion) {
    let _logs = tracing::subscriber::set_default(json_subscriber(false));
    let _reconcile = reconcile_span(&NODECLAIM, None, "default-sfpsl").entered();
    let mut group = c.benchmark_group("logs/line");
    group.throughput(Throughput::Elements(1));
    let cases: [(usize, fn()); 3] = [(1, one_field), (10, ten_fields), (30, thirty_fields)];
    for (count, emit) in cases {
        group.bench_with_input(BenchmarkId::new("fields", count), &emit, |b, emit| {
            b.iter(emit);
        });
    }
    group.finish();
}

fn sampled(c: &mut Criterion) {
    let _logs = tracing::subscriber::set_default(json_subscriber(true));
    let _reconcile = reconcile_span(&NODECLAIM, None, "default-sfpsl").entered();
    // Past the first 100 of this second, 99 lines in 100 are dropped by the sampler.
    c.bench_function("logs/line/sampled-away", |b| b.iter(ten_fields));
}

fn spans(c: &mut Criterion) {
    let mut group = c.benchmark_group("logs/reconcile-span");
    group.bench_function("none", |b| {
        b.iter(|| {
            let span = reconcile_span(&NODECLAIM, None, black_box("default-sfpsl"));
            let _entered = span.enter();
        });
    });
    {
        let _logs = tracing::subscriber::set_default(json_subscriber(true));
        group.bench_function("json", |b| {
            b.iter(|| {
                let span = reconcile_span(&NODECLAIM, None, black_box("default-sfpsl"));
                let _entered = span.enter();
            });
        });
    }
    {
        let compact = Registry::default().with(
            tracing_subscriber::fmt::layer()
                .compact()
                .without_time()
                .with_writer(std::io::sink)
                .with_filter(level_filter(LogLevel::Error)),
        );
        let _logs = tracing::subscriber::set_default(compact);
        group.bench_function("compact", |b| {
            b.iter(|| {
                let span = reconcile_span(&NODECLAIM, None, black_box("default-sfpsl"));
                let _entered = span.enter();
            });
        });
    }
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    lines(&mut criterion);
    sampled(&mut criterion);
    spans(&mut criterion);
    criterion.final_summary();
}
