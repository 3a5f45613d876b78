//! Node lifecycle throughput of the actors: N NodeClaims from creation to `Initialized`
//! (finalizer, launch, registration, initialization) and from deletion to gone (node deletion,
//! taint, drain of two pods each, instance termination, finalizers), through the daemon's
//! NodeClaim and NodePool actors over the fake cluster and cloud of the lifecycle tests. Time is
//! tokio's paused clock, so the numbers are the actors' CPU cost, not waiting.
//!
//! Run: `cargo bench -p karpenter-actors --bench lifecycle -- --quick`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark setup: a failed unwrap is a broken fixture"
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::json;
use support::{Harness, PodSpecBuilder, make_ready, nodeclaim, nodeclass, nodepool};

/// The NodeClaim counts measured.
const SIZES: [usize; 2] = [100, 500];

fn initialized(h: &Harness, count: usize) -> bool {
    (0..count).all(|i| {
        h.condition(&format!("default-{i}"), "Initialized")
            .is_some_and(|c| c.0 == "True")
    })
}

/// Creates `count` NodeClaims, brings them to Ready, deletes them and waits until they are gone.
async fn lifecycle(count: usize) {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodeclass(nodeclass(Some(true)));
    h.add_nodepool(nodepool("default", json!({})));
    for i in 0..count {
        h.add_nodeclaim(nodeclaim(&format!("default-{i}"), json!({})));
    }
    assert!(
        h.wait_for(Duration::from_mins(1), Duration::from_millis(100), |h| {
            (0..count).all(|i| h.provider_id(&format!("default-{i}")).is_some())
        })
        .await
    );
    let nodes: Vec<String> = (0..count)
        .map(|i| h.register_node(&format!("default-{i}"), &[], &[]))
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
        h.wait_for(Duration::from_mins(1), Duration::from_millis(100), |h| {
            initialized(h, count)
        })
        .await
    );
    for i in 0..count {
        h.delete_nodeclaim(&format!("default-{i}")).await;
    }
    assert!(
        h.wait_for(Duration::from_mins(5), Duration::from_secs(1), |h| {
            h.api.nodeclaims().is_empty()
        })
        .await
    );
    h.root.stop().await;
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("nodeclaim_lifecycle");
    group.sample_size(10);
    for count in SIZES {
        group.bench_with_input(BenchmarkId::from_parameter(count), &count, |b, &count| {
            b.iter(|| actix::System::new().block_on(lifecycle(count)));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
