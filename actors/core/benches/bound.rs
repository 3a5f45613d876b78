//! The cost lower bound the simulation prices its cluster by on every progress tick
//! ([`karpenter_core::domain::scheduling::cost_lower_bound`]), at 100 to 50,000 pods over the
//! scheduling benchmark's 400 fake instance types in three zones:
//!
//! - `spread`: identical web pods (1 core, 1 GiB) with a `DoNotSchedule` zone spread, one group
//!   whose whole-node covering problem is solved per zone (exactly up to 20,000 pods, per pod
//!   above that);
//! - `diverse`: Karpenter's diverse benchmark mix, many groups with selectors, affinities and
//!   spreads of their own.
//!
//! `cargo bench -p karpenter-core --bench bound` runs criterion; `... -- --report` prints one
//! table: best wall time of several runs, µs per pod, groups, the two bounds, and the bytes one
//! computation allocates (`stats_alloc`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use k8s_openapi::api::core::v1::{ResourceRequirements, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use karpenter_core::apis::labels;
use karpenter_core::apis::{SharedPodSpec, SlimContainer, SlimPod};
use karpenter_core::domain::scheduling::workload::{
    BENCHMARK_INSTANCE_TYPES, PodFactory, benchmark_node_pool, fake_instance_types,
};
use karpenter_core::domain::scheduling::{NodePoolInput, SchedulingPod, cost_lower_bound};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

const SIZES: [usize; 4] = [100, 1_000, 10_000, 50_000];
/// How long the report keeps repeating one case before taking the best run.
const REPORT_BUDGET: Duration = Duration::from_secs(1);

/// A web pod of 1 core and 1 GiB spread over zones with maxSkew 1.
fn web_pod(i: usize) -> SlimPod {
    let app = [("app".to_owned(), "web".to_owned())];
    SlimPod {
        metadata: ObjectMeta {
            name: Some(format!("web-{i}")),
            namespace: Some("default".to_owned()),
            labels: Some(app.clone().into()),
            ..ObjectMeta::default()
        }
        .into(),
        spec: Some(
            SharedPodSpec {
                containers: vec![SlimContainer {
                    name: "web".to_owned(),
                    resources: Some(ResourceRequirements {
                        requests: Some(
                            [
                                ("cpu".to_owned(), Quantity("1".to_owned())),
                                ("memory".to_owned(), Quantity("1Gi".to_owned())),
                            ]
                            .into(),
                        ),
                        ..ResourceRequirements::default()
                    }),
                    ..SlimContainer::default()
                }],
                topology_spread_constraints: Some(vec![TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: labels::ZONE.to_owned(),
                    when_unsatisfiable: "DoNotSchedule".to_owned(),
                    label_selector: Some(LabelSelector {
                        match_labels: Some(app.into()),
                        ..LabelSelector::default()
                    }),
                    ..TopologySpreadConstraint::default()
                }]),
                ..SharedPodSpec::default()
            }
            .into(),
        ),
        status: None,
    }
}

struct Case {
    name: String,
    pods: Vec<SchedulingPod>,
    pools: Vec<NodePoolInput>,
}

fn cases() -> Vec<Case> {
    let pools = vec![benchmark_node_pool(fake_instance_types(
        BENCHMARK_INSTANCE_TYPES,
    ))];
    let convert = |pods: Vec<SlimPod>| -> Vec<SchedulingPod> {
        pods.iter()
            .filter_map(|p| SchedulingPod::from_pod(p).ok())
            .collect()
    };
    let mut out = Vec::new();
    for size in SIZES {
        out.push(Case {
            name: format!("spread/{size}"),
            pods: convert((0..size).map(web_pod).collect()),
            pools: pools.clone(),
        });
        out.push(Case {
            name: format!("diverse/{size}"),
            pods: convert(PodFactory::default().diverse(size)),
            pools: pools.clone(),
        });
    }
    out
}

fn count(n: usize) -> f64 {
    f64::from(u32::try_from(n).unwrap_or(u32::MAX))
}

fn report() {
    println!(
        "{:<16} {:>7} {:>10} {:>8} {:>7} {:>11} {:>11} {:>11}",
        "case", "pods", "time", "µs/pod", "groups", "whole $/h", "fract $/h", "alloc"
    );
    for case in cases() {
        let mut best = Duration::MAX;
        let started = Instant::now();
        let mut runs = 0;
        while runs < 3 || started.elapsed() < REPORT_BUDGET {
            let start = Instant::now();
            black_box(cost_lower_bound(&case.pods, &case.pools));
            best = best.min(start.elapsed());
            runs += 1;
        }
        let region = Region::new(GLOBAL);
        let bound = cost_lower_bound(&case.pods, &case.pools);
        let allocated = region.change().bytes_allocated;
        println!(
            "{:<16} {:>7} {:>8.2}ms {:>8.2} {:>7} {:>11.2} {:>11.2} {:>9}KB",
            case.name,
            case.pods.len(),
            best.as_secs_f64() * 1000.0,
            best.as_secs_f64() * 1e6 / count(case.pods.len()),
            bound.groups,
            bound.whole_nodes_per_hour,
            bound.fractional_per_hour,
            allocated / 1024
        );
    }
}

fn bench(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("cost_lower_bound");
    for case in cases() {
        group.throughput(Throughput::Elements(case.pods.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(&case.name), &case, |b, case| {
            b.iter(|| black_box(cost_lower_bound(&case.pods, &case.pools)));
        });
    }
    group.finish();
}

fn main() {
    if std::env::args().any(|a| a == "--report") {
        report();
        return;
    }
    let mut criterion = Criterion::default().sample_size(10).configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
