//! The instance-type provider: EC2's catalogue and per-zone offerings (refreshed by its actor,
//! Karpenter refreshes every 12 h), resolved per `NodeClass` configuration and memoised, with
//! offerings (price, availability) attached per zone and capacity type (reference 4.2).
//!
//! Data flow: [`InstanceTypeProvider::refresh`] calls `DescribeInstanceTypes` and
//! `DescribeInstanceTypeOfferings`; [`InstanceTypeProvider::list`] resolves the catalogue for a
//! `NodeClass` (memoised per catalogue version, `NodeClass` settings and subnet zones) and attaches
//! offerings from the pricing provider and the unavailable-offerings cache (memoised until
//! either changes).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::instance_types::{
    CapacityType, InstanceType, LabelValues, NodeClassSettings, Offering, Placement, ResolveError,
    ResolveSettings, ResolvedInstanceType, resolve,
};
use super::pricing::PricingProvider;
use super::unavailable::UnavailableOfferings;
use crate::apis::labels;
use crate::ports::aws_error::AwsError;
use crate::ports::ec2::{Ec2Api, Filter, InstanceTypeInfo};

/// The catalogue as last fetched.
#[derive(Debug, Default)]
struct Catalogue {
    version: u64,
    infos: Vec<InstanceTypeInfo>,
    zones: HashMap<String, BTreeSet<String>>,
    /// Zones where any instance type is offered: every type gets offerings in all of them.
    all_zones: BTreeSet<String>,
}

/// What the provider is built from.
#[derive(Debug, Clone)]
pub struct InstanceTypeDeps {
    pub ec2: Arc<dyn Ec2Api>,
    pub pricing: Arc<PricingProvider>,
    pub unavailable: Arc<UnavailableOfferings>,
    pub settings: ResolveSettings,
}

/// Distinct `EC2NodeClass` configurations memoised at once; more (configurations churning) start the
/// memo afresh rather than growing without bound. Clusters have a handful of them.
const MAX_MEMOISED_CONFIGURATIONS: usize = 64;

type ResolvedList = Arc<Vec<Arc<ResolvedInstanceType>>>;
type OfferedList = Arc<Vec<Arc<InstanceType>>>;

/// Instance types per `NodeClass`.
#[derive(Debug)]
pub struct InstanceTypeProvider {
    deps: InstanceTypeDeps,
    catalogue: RwLock<Arc<Catalogue>>,
    resolved: Mutex<HashMap<u64, ResolvedList>>,
    offered: Mutex<HashMap<u64, (u64, u64, OfferedList)>>,
}

fn key_of(
    catalogue: u64,
    nodeclass: &NodeClassSettings,
    subnet_zones: &BTreeMap<String, String>,
) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (catalogue, nodeclass.key(), subnet_zones).hash(&mut hasher);
    hasher.finish()
}

impl InstanceTypeProvider {
    #[must_use]
    pub fn new(deps: InstanceTypeDeps) -> Self {
        InstanceTypeProvider {
            deps,
            catalogue: RwLock::new(Arc::new(Catalogue::default())),
            resolved: Mutex::new(HashMap::new()),
            offered: Mutex::new(HashMap::new()),
        }
    }

    /// Fetches the catalogue and offerings (hvm, `x86_64` and arm64 only, as Karpenter).
    pub async fn refresh(&self) -> Result<(), AwsError> {
        let infos = self
            .deps
            .ec2
            .describe_instance_types(&[
                Filter::new("supported-virtualization-type", &["hvm"]),
                Filter::new(
                    "processor-info.supported-architecture",
                    &["x86_64", "arm64"],
                ),
            ])
            .await?;
        let offerings = self.deps.ec2.describe_instance_type_offerings(&[]).await?;
        let mut zones: HashMap<String, BTreeSet<String>> = HashMap::new();
        for offering in offerings {
            zones
                .entry(offering.instance_type)
                .or_default()
                .insert(offering.location);
        }
        let all_zones = zones.values().flatten().cloned().collect();
        let mut current = self
            .catalogue
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *current = Arc::new(Catalogue {
            version: current.version + 1,
            infos,
            zones,
            all_zones,
        });
        drop(current);
        self.resolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.offered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        Ok(())
    }

    /// Number of instance types fetched.
    #[must_use]
    pub fn catalogue_len(&self) -> usize {
        self.catalogue
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .infos
            .len()
    }

    fn resolved(
        &self,
        catalogue: &Catalogue,
        nodeclass: &NodeClassSettings,
        subnet_zones: &BTreeMap<String, String>,
        key: u64,
    ) -> Result<ResolvedList, ResolveError> {
        if let Some(hit) = self
            .resolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return Ok(Arc::clone(hit));
        }
        let empty = BTreeSet::new();
        let list = catalogue
            .infos
            .iter()
            .map(|info| {
                let placement = Placement {
                    offered_zones: catalogue.zones.get(&info.name).unwrap_or(&empty),
                    subnet_zones,
                };
                resolve(info, placement, nodeclass, &self.deps.settings).map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let list = Arc::new(list);
        let mut resolved = self.resolved.lock().unwrap_or_else(PoisonError::into_inner);
        if resolved.len() >= MAX_MEMOISED_CONFIGURATIONS {
            resolved.clear();
        }
        resolved.insert(key, Arc::clone(&list));
        Ok(list)
    }

    /// Every instance type for a `NodeClass`, with offerings in every zone of the region
    /// (unavailable ones included, as Karpenter's `GetInstanceTypes`).
    pub fn list(
        &self,
        nodeclass: &NodeClassSettings,
        subnet_zones: &BTreeMap<String, String>,
    ) -> Result<OfferedList, ResolveError> {
        let catalogue = Arc::clone(
            &self
                .catalogue
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let key = key_of(catalogue.version, nodeclass, subnet_zones);
        let ice = self.deps.unavailable.seq_num();
        let prices = self.deps.pricing.seq_num();
        if let Some((i, p, hit)) = self
            .offered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            && (*i, *p) == (ice, prices)
        {
            return Ok(Arc::clone(hit));
        }
        let resolved = self.resolved(&catalogue, nodeclass, subnet_zones, key)?;
        let list: Vec<Arc<InstanceType>> = resolved
            .iter()
            .map(|it| {
                Arc::new(InstanceType {
                    offerings: self.offerings(it, &catalogue.all_zones, subnet_zones),
                    resolved: Arc::clone(it),
                })
            })
            .collect();
        let list = Arc::new(list);
        let mut offered = self.offered.lock().unwrap_or_else(PoisonError::into_inner);
        if offered.len() >= MAX_MEMOISED_CONFIGURATIONS {
            offered.clear();
        }
        offered.insert(key, (ice, prices, Arc::clone(&list)));
        Ok(list)
    }

    fn offerings(
        &self,
        it: &ResolvedInstanceType,
        all_zones: &BTreeSet<String>,
        subnet_zones: &BTreeMap<String, String>,
    ) -> Vec<Offering> {
        let type_zones = it.requirements.get(labels::ZONE);
        let capacity_types: Vec<CapacityType> = it
            .requirements
            .get(labels::CAPACITY_TYPE)
            .map(LabelValues::values)
            .unwrap_or_default()
            .into_iter()
            .filter_map(CapacityType::parse)
            .filter(|c| *c != CapacityType::Reserved)
            .collect();
        let mut out = Vec::with_capacity(all_zones.len() * capacity_types.len());
        for zone in all_zones {
            for capacity_type in &capacity_types {
                let price = match capacity_type {
                    CapacityType::Spot => self.deps.pricing.spot_price(&it.name, zone),
                    _ => self.deps.pricing.on_demand_price(&it.name),
                };
                let in_zone = type_zones.is_some_and(|z| z.admits(Some(zone)));
                let available = price.is_some()
                    && in_zone
                    && !self
                        .deps
                        .unavailable
                        .is_unavailable(&it.name, zone, *capacity_type);
                out.push(Offering {
                    zone: zone.clone(),
                    zone_id: subnet_zones.get(zone).cloned(),
                    capacity_type: *capacity_type,
                    price: price.unwrap_or(0.0),
                    available,
                });
            }
        }
        out
    }
}
