//! Karpenter's scheduling benchmark workload (core
//! `pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go` and the fake cloud
//! provider's `InstanceTypes(n)`), rebuilt so our benchmark and tests run exactly the same
//! cluster: 400 instance types where type `i` has `i+1` CPUs, `2(i+1)` GiB and `10(i+1)` pods,
//! offered as spot in two zones and on-demand in three; one NodePool with huge limits; and
//! the diverse pod mix (generic, zonal spread, hostname spread, zonal self-affinity, hostname
//! anti-affinity) or the preference pods.
//!
//! Pods are built as [`SlimPod`]s, the form the daemon's watch reads them in, with a seeded
//! generator so every run sees the same batch.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PodAffinity,
    PodAffinityTerm, PodAntiAffinity, PreferredSchedulingTerm, ResourceRequirements,
    TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::apis::labels;
use crate::apis::{SharedPodSpec, SlimContainer, SlimPod};
use crate::domain::instance_type::{InstanceType, Offering, Overhead};
use crate::domain::requirements::{Requirement, Requirements};
use crate::domain::resources::{CPU, MEMORY, ResourceLimits, Resources, approx_f64};

use super::input::NodePoolInput;

/// Zones of Karpenter's fake offerings.
pub const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];
/// The benchmark's instance type count.
pub const BENCHMARK_INSTANCE_TYPES: usize = 400;
/// The benchmark's batch sizes.
pub const BENCHMARK_SIZES: [usize; 9] = [1, 50, 100, 500, 1000, 2000, 5000, 10_000, 20_000];
/// The preference benchmark's batch size.
pub const PREFERENCE_PODS: usize = 4000;

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;

/// A small deterministic generator (xorshift64*), seeded like Karpenter's benchmark (42).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator with a seed.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// An index below `n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next_u64() % n.max(1) as u64).unwrap_or(0)
    }

    /// One of the items.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Karpenter's fake price: $0.1 per CPU plus $0.1 per GB (10^9 bytes) of memory.
#[must_use]
pub fn fake_price(cpu_millis: i64, memory_bytes: i64) -> f64 {
    0.1 * approx_f64(cpu_millis) / 1000.0 + 0.1 * approx_f64(memory_bytes) / 1e9
}

/// One fake instance type (Karpenter's `fake.NewInstanceType`) with the default offerings:
/// spot in zones 1 and 2, on-demand in zones 1 to 3, all at the resource price.
#[must_use]
pub fn fake_instance_type(name: &str, cpu: i64, memory: i64, pods: i64) -> InstanceType {
    let price = fake_price(cpu * 1000, memory);
    let offerings = vec![
        Offering::new(ZONES[0], labels::CAPACITY_TYPE_SPOT, price),
        Offering::new(ZONES[1], labels::CAPACITY_TYPE_SPOT, price),
        Offering::new(ZONES[0], labels::CAPACITY_TYPE_ON_DEMAND, price),
        Offering::new(ZONES[1], labels::CAPACITY_TYPE_ON_DEMAND, price),
        Offering::new(ZONES[2], labels::CAPACITY_TYPE_ON_DEMAND, price),
    ];
    let large = cpu > 4 && memory > 8 * GI;
    let mut requirements = Requirements::from_requirements([
        Requirement::in_values(labels::INSTANCE_TYPE, &[name]),
        Requirement::in_values(labels::ARCH, &[labels::ARCH_AMD64]),
        Requirement::in_values(labels::OS, &["darwin", "linux", "windows"]),
        Requirement::in_values(labels::ZONE, &ZONES),
        Requirement::in_values(
            labels::CAPACITY_TYPE,
            &[labels::CAPACITY_TYPE_ON_DEMAND, labels::CAPACITY_TYPE_SPOT],
        ),
        Requirement::in_values("size", &[if large { "large" } else { "small" }]),
        Requirement::in_values("integer", &[cpu.to_string().as_str()]),
    ]);
    requirements.add(if large {
        Requirement::in_values("special", &["optional"])
    } else {
        Requirement::does_not_exist("special")
    });
    InstanceType::new(
        name,
        requirements,
        offerings,
        Resources::core(cpu * 1000, memory, pods),
        Overhead {
            kube_reserved: Resources::core(100, 10 * MI, 0),
            ..Overhead::default()
        },
    )
}

/// Karpenter's `fake.InstanceTypes(n)`: type `i` has `i+1` CPUs, `2(i+1)` GiB, `10(i+1)` pods.
#[must_use]
pub fn fake_instance_types(count: usize) -> Vec<Arc<InstanceType>> {
    (0..count)
        .map(|i| {
            let n = i64::try_from(i + 1).unwrap_or(i64::MAX);
            Arc::new(fake_instance_type(
                &format!("fake-it-{i}"),
                n,
                2 * n * GI,
                10 * n,
            ))
        })
        .collect()
}

/// The benchmark's NodePool: no requirements, limits of 10,000,000 CPU and 10,000,000 Gi.
#[must_use]
pub fn benchmark_node_pool(instance_types: Vec<Arc<InstanceType>>) -> NodePoolInput {
    let mut pool = NodePoolInput::new("default", instance_types);
    pool.limits = ResourceLimits::unlimited()
        .with(CPU, 10_000_000 * 1000)
        .with(MEMORY, 10_000_000 * GI);
    pool
}

fn random_cpu(rng: &mut Rng) -> String {
    format!("{}m", rng.pick(&[100, 250, 500, 1000, 1500]))
}

fn random_memory(rng: &mut Rng) -> String {
    format!("{}Mi", rng.pick(&[100, 256, 512, 1024, 2048, 4096]))
}

fn random_label_value(rng: &mut Rng) -> String {
    (*rng.pick(&["a", "b", "c", "d", "e", "f", "g"])).to_owned()
}

fn one(key: &str, value: String) -> BTreeMap<String, String> {
    BTreeMap::from([(key.to_owned(), value)])
}

/// A pod like Karpenter's `test.Pod`: one container with these requests.
#[must_use]
pub fn pod(
    name: String,
    uid: String,
    labels: BTreeMap<String, String>,
    cpu: &str,
    memory: &str,
) -> SlimPod {
    SlimPod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some("default".to_owned()),
            uid: Some(uid),
            labels: Some(labels),
            ..ObjectMeta::default()
        }
        .into(),
        spec: Some(
            SharedPodSpec {
                containers: vec![SlimContainer {
                    name: "app".to_owned(),
                    resources: Some(ResourceRequirements {
                        requests: Some(BTreeMap::from([
                            (CPU.to_owned(), Quantity(cpu.to_owned())),
                            (MEMORY.to_owned(), Quantity(memory.to_owned())),
                        ])),
                        ..ResourceRequirements::default()
                    }),
                    ..SlimContainer::default()
                }],
                ..SharedPodSpec::default()
            }
            .into(),
        ),
        status: None,
    }
}

/// Builds pods with unique names and UIDs.
#[derive(Debug)]
pub struct PodFactory {
    rng: Rng,
    next: usize,
}

impl Default for PodFactory {
    fn default() -> Self {
        Self::new(42)
    }
}

impl PodFactory {
    /// A factory with a seed.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed),
            next: 0,
        }
    }

    fn identity(&mut self) -> (String, String) {
        self.next += 1;
        let uid = format!("{:016x}-{:06}", self.rng.next_u64(), self.next);
        (format!("pod-{:06}", self.next), uid)
    }

    /// Pods with random requests and a random `my-label`.
    pub fn generic(&mut self, count: usize) -> Vec<SlimPod> {
        (0..count)
            .map(|_| {
                let (name, uid) = self.identity();
                let labels = one("my-label", random_label_value(&mut self.rng));
                let (cpu, memory) = (random_cpu(&mut self.rng), random_memory(&mut self.rng));
                pod(name, uid, labels, &cpu, &memory)
            })
            .collect()
    }

    /// Pods spread with max skew 1 over `key`, selecting a random `my-label` value.
    pub fn spread(&mut self, count: usize, key: &str) -> Vec<SlimPod> {
        (0..count)
            .map(|_| {
                let (name, uid) = self.identity();
                let labels = one("my-label", random_label_value(&mut self.rng));
                let selector = one("my-label", random_label_value(&mut self.rng));
                let (cpu, memory) = (random_cpu(&mut self.rng), random_memory(&mut self.rng));
                let mut p = pod(name, uid, labels, &cpu, &memory);
                if let Some(spec) = &mut p.spec {
                    spec.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
                        max_skew: 1,
                        topology_key: key.to_owned(),
                        when_unsatisfiable: "DoNotSchedule".to_owned(),
                        label_selector: Some(LabelSelector {
                            match_labels: Some(selector),
                            match_expressions: None,
                        }),
                        ..TopologySpreadConstraint::default()
                    }]);
                }
                p
            })
            .collect()
    }

    /// Pods with required affinity to their own random `my-affininity` label over `key`.
    pub fn self_affinity(&mut self, count: usize, key: &str) -> Vec<SlimPod> {
        (0..count)
            .map(|_| {
                let (name, uid) = self.identity();
                let labels = one("my-affininity", random_label_value(&mut self.rng));
                let (cpu, memory) = (random_cpu(&mut self.rng), random_memory(&mut self.rng));
                let mut p = pod(name, uid, labels.clone(), &cpu, &memory);
                if let Some(spec) = &mut p.spec {
                    spec.affinity = Some(Box::new(Affinity {
                        pod_affinity: Some(PodAffinity {
                            required_during_scheduling_ignored_during_execution: Some(vec![
                                affinity_term(labels, key),
                            ]),
                            preferred_during_scheduling_ignored_during_execution: None,
                        }),
                        ..Affinity::default()
                    }));
                }
                p
            })
            .collect()
    }

    /// `app: nginx` pods with required anti-affinity to each other over `key`.
    pub fn anti_affinity(&mut self, count: usize, key: &str) -> Vec<SlimPod> {
        (0..count)
            .map(|_| {
                let (name, uid) = self.identity();
                let labels = one("app", "nginx".to_owned());
                let (cpu, memory) = (random_cpu(&mut self.rng), random_memory(&mut self.rng));
                let mut p = pod(name, uid, labels.clone(), &cpu, &memory);
                if let Some(spec) = &mut p.spec {
                    spec.affinity = Some(Box::new(Affinity {
                        pod_anti_affinity: Some(PodAntiAffinity {
                            required_during_scheduling_ignored_during_execution: Some(vec![
                                affinity_term(labels, key),
                            ]),
                            preferred_during_scheduling_ignored_during_execution: None,
                        }),
                        ..Affinity::default()
                    }));
                }
                p
            })
            .collect()
    }

    /// Karpenter's `makeDiversePods`: a fifth each of generic, zonal spread, hostname spread,
    /// zonal self-affinity and hostname anti-affinity pods, the remainder generic.
    pub fn diverse(&mut self, count: usize) -> Vec<SlimPod> {
        let fifth = count / 5;
        let mut pods = self.generic(fifth);
        pods.extend(self.spread(fifth, labels::ZONE));
        pods.extend(self.spread(fifth, labels::HOSTNAME));
        pods.extend(self.self_affinity(fifth, labels::ZONE));
        pods.extend(self.anti_affinity(fifth, labels::HOSTNAME));
        let rest = count - pods.len();
        pods.extend(self.generic(rest));
        pods
    }

    /// Karpenter's `makePreferencePods`: `app: nginx` pods that prefer zone 1, prefer zonal
    /// anti-affinity to each other (weight 10, unsatisfiable after three) and hostname
    /// anti-affinity (weight 1); all with the same random requests.
    pub fn preferences(&mut self, count: usize) -> Vec<SlimPod> {
        let (cpu, memory) = (random_cpu(&mut self.rng), random_memory(&mut self.rng));
        let labels = one("app", "nginx".to_owned());
        (0..count)
            .map(|_| {
                let (name, uid) = self.identity();
                let mut p = pod(name, uid, labels.clone(), &cpu, &memory);
                if let Some(spec) = &mut p.spec {
                    spec.affinity = Some(Box::new(Affinity {
                        node_affinity: Some(NodeAffinity {
                            preferred_during_scheduling_ignored_during_execution: Some(vec![
                                PreferredSchedulingTerm {
                                    weight: 1,
                                    preference: NodeSelectorTerm {
                                        match_expressions: Some(vec![NodeSelectorRequirement {
                                            key: labels::ZONE.to_owned(),
                                            operator: "In".to_owned(),
                                            values: Some(vec![ZONES[0].to_owned()]),
                                        }]),
                                        match_fields: None,
                                    },
                                },
                            ]),
                            required_during_scheduling_ignored_during_execution: None,
                        }),
                        pod_anti_affinity: Some(PodAntiAffinity {
                            preferred_during_scheduling_ignored_during_execution: Some(vec![
                                WeightedPodAffinityTerm {
                                    weight: 10,
                                    pod_affinity_term: affinity_term(labels.clone(), labels::ZONE),
                                },
                                WeightedPodAffinityTerm {
                                    weight: 1,
                                    pod_affinity_term: affinity_term(
                                        labels.clone(),
                                        labels::HOSTNAME,
                                    ),
                                },
                            ]),
                            required_during_scheduling_ignored_during_execution: None,
                        }),
                        ..Affinity::default()
                    }));
                }
                p
            })
            .collect()
    }
}

fn affinity_term(labels: BTreeMap<String, String>, key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(labels),
            match_expressions: None,
        }),
        topology_key: key.to_owned(),
        ..PodAffinityTerm::default()
    }
}
