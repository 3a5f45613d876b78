//! Instance-type and offering computation for the full catalogue (kwok's bundled real one, about
//! 1,400 types) across the three zones of a `NodeClass`'s subnets: resolution alone, a cold
//! `list` (catalogue fetch from kwok, resolution, offerings), a cached `list`, and a `list`
//! after an ICE mark (offerings rebuilt, resolution memoised, unchanged types shared). Prints
//! the heap held by one list (bytes allocated and not freed, counted by `stats_alloc`) and the
//! extra heap of the list that follows an ICE mark.
//!
//! Run: `cargo bench -p karpenter-actors --bench aws_instance_types -- --quick`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark setup: a failed unwrap is a broken fixture"
)]

use std::alloc::System;
use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use karpenter_actors::kwok::catalog;
use karpenter_actors::kwok::ec2::{KwokEc2, KwokEc2Config, KwokEc2Deps};
use karpenter_actors::ports::clock::SystemClock;
use karpenter_actors::ports::ec2::Ec2Api;
use karpenter_actors::providers::instance_type_provider::{InstanceTypeDeps, InstanceTypeProvider};
use karpenter_actors::providers::instance_types::{
    LabelInterner, NodeClassSettings, Placement, ResolveSettings, resolve,
};
use karpenter_actors::providers::pricing::{PricingDeps, PricingProvider};
use karpenter_actors::providers::unavailable::UnavailableOfferings;
use karpenter_core::domain::instance_type::CapacityType;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const REGION: &str = "us-west-2";

fn settings() -> ResolveSettings {
    ResolveSettings {
        region: REGION.into(),
        vm_memory_overhead_percent: 0.075,
        reserved_enis: 0,
    }
}

struct Fixture {
    provider: InstanceTypeProvider,
    unavailable: Arc<UnavailableOfferings>,
    zones: BTreeMap<String, String>,
}

fn fixture(runtime: &tokio::runtime::Runtime) -> Fixture {
    let kwok = Arc::new(
        KwokEc2::new(
            KwokEc2Config::new(REGION, "bench"),
            KwokEc2Deps {
                clock: Arc::new(SystemClock),
                events: None,
            },
        )
        .unwrap_or_else(|e| panic!("kwok: {e}")),
    );
    let zones = kwok
        .subnets()
        .iter()
        .map(|s| (s.zone.clone(), s.zone_id.clone()))
        .collect();
    let ec2: Arc<dyn Ec2Api> = kwok;
    let pricing = Arc::new(
        PricingProvider::new(PricingDeps {
            ec2: Arc::clone(&ec2),
            pricing: None,
            region: REGION.into(),
            isolated_vpc: false,
            clock: Arc::new(SystemClock),
        })
        .unwrap_or_else(|e| panic!("pricing: {e}")),
    );
    let unavailable = Arc::new(UnavailableOfferings::default());
    let provider = InstanceTypeProvider::new(InstanceTypeDeps {
        ec2,
        pricing,
        unavailable: Arc::clone(&unavailable),
        settings: settings(),
    });
    runtime
        .block_on(provider.refresh())
        .unwrap_or_else(|e| panic!("refresh: {e}"));
    Fixture {
        provider,
        unavailable,
        zones,
    }
}

/// Bytes allocated and not freed since the region began, in MiB.
fn net_mib(region: &Region<'_, System>) -> f64 {
    let change = region.change();
    #[expect(clippy::cast_precision_loss, reason = "a report, in MiB")]
    let net = (change.bytes_allocated as f64) - (change.bytes_deallocated as f64);
    net / (1024.0 * 1024.0)
}

fn instance_types(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let _guard = runtime.enter();
    let catalogue = catalog::bundled().unwrap_or_else(|e| panic!("{e}"));
    let nodeclass = NodeClassSettings::default();

    let warm = fixture(&runtime);
    let region = Region::new(GLOBAL);
    let list = warm
        .provider
        .list(&nodeclass, &warm.zones)
        .unwrap_or_else(|e| panic!("{e}"));
    let held = net_mib(&region);
    let offerings: usize = list.iter().map(|t| t.offerings.len()).sum();
    println!(
        "resolved {} instance types with {offerings} offerings over {} zones: {held:.2} MiB of heap",
        list.len(),
        warm.zones.len()
    );
    let zone = warm.zones.keys().next().cloned().unwrap_or_default();
    let region = Region::new(GLOBAL);
    warm.unavailable
        .mark_unavailable("m5.large", &zone, CapacityType::Spot, "bench");
    let after_ice = warm
        .provider
        .list(&nodeclass, &warm.zones)
        .unwrap_or_else(|e| panic!("{e}"));
    println!(
        "the list after an ICE mark adds {:.3} MiB (unchanged instance types are shared)",
        net_mib(&region)
    );
    drop(after_ice);

    let mut group = c.benchmark_group("aws_instance_types");
    group.bench_function("resolve_full_catalogue", |b| {
        let empty = BTreeSet::new();
        b.iter(|| {
            let mut interner = LabelInterner::default();
            for info in &catalogue.instance_types {
                let offered = catalogue.zones_of(&info.name, REGION).unwrap_or(&empty);
                let placement = Placement {
                    offered_zones: offered,
                    subnet_zones: &warm.zones,
                };
                black_box(resolve(info, placement, &nodeclass, &settings(), &mut interner).ok());
            }
        });
    });
    group.bench_function("list_cold_with_catalogue_fetch", |b| {
        b.iter(|| {
            let fresh = fixture(&runtime);
            black_box(fresh.provider.list(&nodeclass, &fresh.zones).ok());
        });
    });
    group.bench_function("list_cached", |b| {
        b.iter(|| black_box(warm.provider.list(&nodeclass, &warm.zones).ok()));
    });
    group.bench_function("list_after_ice_mark", |b| {
        b.iter(|| {
            warm.unavailable
                .mark_unavailable("m5.large", &zone, CapacityType::Spot, "bench");
            black_box(warm.provider.list(&nodeclass, &warm.zones).ok());
        });
    });
    group.finish();
}

criterion_group!(benches, instance_types);
criterion_main!(benches);
