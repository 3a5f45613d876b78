//! Karpenter AWS's instance-type gauges (`pkg/controllers/metrics` and
//! `pkg/providers/instancetype/metrics.go`): for every instance type the NodePools may launch,
//! its vCPUs and memory, and per (type, capacity type, zone) whether the offering is available
//! and its estimated hourly price.
//!
//! ```text
//! daemon assembly, every REFRESH_INTERVAL once the store synced
//!   -> OfferingMetrics::refresh(&dyn ClusterView, &dyn CloudProvider)
//!        each NodePool -> CloudProvider::instance_types (memoised by the provider)
//!        -> availability (any pool offering it available) and price per offering
//!        -> the four gauges, set (Karpenter sets them and never deletes a series)
//! ```
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `karpenter_cloudprovider_instance_type_offering_available` | gauge (0/1) | `instance_type`, `capacity_type`, zone |
//! | `karpenter_cloudprovider_instance_type_offering_price_estimate` | gauge (USD/h) | `instance_type`, `capacity_type`, zone |
//! | `karpenter_cloudprovider_instance_type_cpu_cores` | gauge | `instance_type` (`karpenter.k8s.aws/instance-cpu`) |
//! | `karpenter_cloudprovider_instance_type_memory_bytes` | gauge | `instance_type` (`karpenter.k8s.aws/instance-memory`, MiB, in bytes: EC2's figure) |
//!
//! Label values are bounded by the catalogue (types x zones x capacity types). A price is the
//! one the scheduler ranks offerings by; prices from the built-in table's estimates are
//! estimates twice over (`crate::providers::pricing::is_estimated_price`).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use karpenter_core::apis::labels;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::ports::cloud_provider::CloudProvider;
use crate::ports::cluster_view::ClusterView;

/// How often the gauges are refreshed (Karpenter's controller requeues after a minute).
pub const REFRESH_INTERVAL: Duration = Duration::from_mins(1);

const MIB: f64 = 1024.0 * 1024.0;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, EncodeLabelSet)]
struct OfferingLabels {
    instance_type: String,
    capacity_type: String,
    zone: String,
}

impl OfferingLabels {
    fn of(instance_type: &str, capacity_type: &str, zone: &str) -> Self {
        Self {
            instance_type: instance_type.to_owned(),
            capacity_type: capacity_type.to_owned(),
            zone: zone.to_owned(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TypeLabels {
    instance_type: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The four families, shared by clones.
#[derive(Debug, Clone, Default)]
pub struct OfferingMetrics {
    available: Family<OfferingLabels, FloatGauge>,
    price: Family<OfferingLabels, FloatGauge>,
    cpu_cores: Family<TypeLabels, FloatGauge>,
    memory_bytes: Family<TypeLabels, FloatGauge>,
}

impl OfferingMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "karpenter_cloudprovider_instance_type_offering_available",
            "Instance type offering availability, based on instance type, capacity type, and zone",
            metrics.available.clone(),
        );
        registry.register(
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            "Instance type offering estimated hourly price used when making informed decisions on node cost calculation, based on instance type, capacity type, and zone.",
            metrics.price.clone(),
        );
        registry.register(
            "karpenter_cloudprovider_instance_type_cpu_cores",
            "VCPUs cores for a given instance type.",
            metrics.cpu_cores.clone(),
        );
        registry.register(
            "karpenter_cloudprovider_instance_type_memory_bytes",
            "Memory, in bytes, for a given instance type.",
            metrics.memory_bytes.clone(),
        );
        metrics
    }

    /// Reads every NodePool's instance types and sets the gauges. A pool whose types cannot be
    /// read (its class not ready) is skipped; the others still count. How many offerings were
    /// set.
    pub async fn refresh(&self, view: &dyn ClusterView, cloud: &dyn CloudProvider) -> usize {
        let mut offerings: BTreeMap<OfferingLabels, (bool, f64)> = BTreeMap::new();
        for pool in view.nodepools() {
            let Ok(types) = cloud.instance_types(&pool).await else {
                continue;
            };
            for it in types.iter() {
                let single = |key: &str| {
                    it.requirements
                        .get(key)
                        .and_then(|r| r.single_value())
                        .and_then(|v| v.parse::<f64>().ok())
                };
                let name = TypeLabels {
                    instance_type: it.name.clone(),
                };
                if let Some(cpu) = single(labels::INSTANCE_CPU) {
                    self.cpu_cores.get_or_create(&name).set(cpu);
                }
                if let Some(memory) = single(labels::INSTANCE_MEMORY) {
                    self.memory_bytes.get_or_create(&name).set(memory * MIB);
                }
                for offering in &it.offerings {
                    let (Some(zone), Some(capacity_type)) =
                        (offering.zone(), offering.capacity_type())
                    else {
                        continue;
                    };
                    let key = OfferingLabels::of(&it.name, capacity_type, zone);
                    let entry = offerings.entry(key).or_insert((false, offering.price));
                    entry.0 |= offering.available;
                    entry.1 = offering.price;
                }
            }
        }
        for (key, (available, price)) in &offerings {
            self.available
                .get_or_create(key)
                .set(if *available { 1.0 } else { 0.0 });
            self.price.get_or_create(key).set(*price);
        }
        offerings.len()
    }

    /// The availability gauge of one offering (tests).
    #[must_use]
    pub fn available(&self, instance_type: &str, capacity_type: &str, zone: &str) -> Option<f64> {
        let key = OfferingLabels::of(instance_type, capacity_type, zone);
        self.available.get(&key).map(|g| g.get())
    }

    /// The price gauge of one offering (tests).
    #[must_use]
    pub fn price(&self, instance_type: &str, capacity_type: &str, zone: &str) -> Option<f64> {
        let key = OfferingLabels::of(instance_type, capacity_type, zone);
        self.price.get(&key).map(|g| g.get())
    }

    /// The vCPU and memory gauges of one type (tests).
    #[must_use]
    pub fn shape(&self, instance_type: &str) -> Option<(f64, f64)> {
        let key = TypeLabels {
            instance_type: instance_type.to_owned(),
        };
        Some((
            self.cpu_cores.get(&key)?.get(),
            self.memory_bytes.get(&key)?.get(),
        ))
    }
}
