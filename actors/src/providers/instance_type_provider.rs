//! The instance-type provider: EC2's catalogue and per-zone offerings (refreshed by its actor;
//! Karpenter refreshes every 12 h), resolved per `NodeClass` configuration into the scheduler's
//! instance types and memoised, with offerings (price, availability) per zone and capacity type
//! (reference 4.2 `instancetype` and `instancetype/offering`).
//!
//! Data flow: [`InstanceTypeProvider::refresh`] calls `DescribeInstanceTypes` and
//! `DescribeInstanceTypeOfferings`; [`InstanceTypeProvider::list`] resolves the catalogue for a
//! `NodeClass` (memoised per catalogue version, `NodeClass` settings and subnet zones) and
//! attaches offerings from the pricing provider and the unavailable-offerings cache. When prices
//! or the ICE cache change, only the offerings are recomputed, and an instance type whose
//! offerings did not change is handed out again as the same `Arc`, so consecutive lists share
//! nearly everything.
//!
//! Offerings follow Karpenter: one per zone of the region (every zone where EC2 offers any type)
//! and capacity type of the instance type (`on-demand`, `spot`), with the capacity type, zone,
//! zone id (for subnet zones) and `capacity-reservation-id DoesNotExist` as requirements;
//! available when priced, not marked unavailable, and in a zone the type is offered in that has
//! a subnet. Reserved offerings (the `ReservedCapacity` gate) are not produced.
//!
//! **Discovered capacity** (Karpenter's `discoveredCapacityCache`): when a node registers, the
//! cloud provider records the memory capacity it really reports
//! ([`InstanceTypeProvider::record_discovered_memory`]) under its instance type and the hash of
//! its class's resolved AMIs, provided the NodeClaim runs the AMI the class now maps that type
//! to; the smallest report wins. Lists for a class with those AMIs
//! ([`InstanceTypeProvider::list_for`]) then size that type's memory, and so its allocatable,
//! from the report instead of the estimate (EC2's figure less `VM_MEMORY_OVERHEAD_PERCENT`).
//! Karpenter expires entries after 60 days; here they live as long as the process, bounded by
//! the types times the AMI sets seen.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::instance_types::{
    LabelInterner, NodeClassSettings, Placement, ResolveError, ResolveSettings, resolve,
};
use super::pricing::PricingProvider;
use super::unavailable::UnavailableOfferings;
use crate::ports::aws_error::AwsError;
use crate::ports::ec2::{Ec2Api, Filter, InstanceTypeInfo};
use karpenter_core::apis::EC2NodeClass;
use karpenter_core::apis::ec2nodeclass::Ami;
use karpenter_core::apis::labels;
use karpenter_core::domain::instance_type::CapacityType;
use karpenter_core::domain::instance_type::{InstanceType, Offering};
use karpenter_core::domain::requirements::Requirements;

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

/// Distinct `EC2NodeClass` configurations memoised at once; more (configurations churning)
/// start the memo afresh rather than growing without bound. Clusters have a handful of them.
const MAX_MEMOISED_CONFIGURATIONS: usize = 64;

pub use crate::ports::cloud_provider::InstanceTypes;

/// Why instance types could not be listed for a `NodeClass`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstanceTypesError {
    #[error("listing instance types for ec2nodeclass {nodeclass}: no subnets in its status")]
    NoSubnets { nodeclass: String },
    #[error("listing instance types for ec2nodeclass {nodeclass}: {source}")]
    Resolve {
        nodeclass: String,
        source: ResolveError,
    },
}

impl InstanceTypesError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            InstanceTypesError::NoSubnets { .. } => "no_subnets",
            InstanceTypesError::Resolve { source, .. } => source.category(),
        }
    }
}

#[derive(Debug)]
struct Memo {
    ice: u64,
    prices: u64,
    discovered: u64,
    list: InstanceTypes,
}

/// Instance types per `NodeClass`.
#[derive(Debug)]
pub struct InstanceTypeProvider {
    deps: InstanceTypeDeps,
    catalogue: RwLock<Arc<Catalogue>>,
    memo: Mutex<HashMap<u64, Memo>>,
    interner: Mutex<LabelInterner>,
    /// Memory capacity (bytes) registered nodes reported, by (instance type, AMI set hash).
    discovered: Mutex<HashMap<(String, u64), i64>>,
    /// Changes with every discovered capacity.
    discovered_seq: AtomicU64,
}

fn key_of(
    catalogue: u64,
    nodeclass: &NodeClassSettings,
    subnet_zones: &BTreeMap<String, String>,
    amis: u64,
) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (catalogue, nodeclass.key(), subnet_zones, amis).hash(&mut hasher);
    hasher.finish()
}

/// A hash of an `EC2NodeClass`'s resolved AMIs (`status.amis`, order ignored): the key of
/// discovered capacities, which hold for the images they were seen on.
#[must_use]
pub fn amis_hash(nodeclass: &EC2NodeClass) -> u64 {
    let mut amis: Vec<&Ami> = nodeclass.status.iter().flat_map(|s| &s.amis).collect();
    amis.sort_unstable();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    amis.hash(&mut hasher);
    hasher.finish()
}

/// The subnet zones of a `NodeClass`'s status with their zone ids (empty when unknown).
#[must_use]
pub fn subnet_zones(nodeclass: &EC2NodeClass) -> BTreeMap<String, String> {
    nodeclass
        .status
        .iter()
        .flat_map(|s| &s.subnets)
        .map(|s| (s.zone.clone(), s.zone_id.clone().unwrap_or_default()))
        .collect()
}

/// One offering's inputs as they stand now: what changes between lists.
#[derive(Debug, Clone, Copy, PartialEq)]
struct OfferingState {
    price: f64,
    available: bool,
}

impl InstanceTypeProvider {
    #[must_use]
    pub fn new(deps: InstanceTypeDeps) -> Self {
        InstanceTypeProvider {
            deps,
            catalogue: RwLock::new(Arc::new(Catalogue::default())),
            memo: Mutex::new(HashMap::new()),
            interner: Mutex::new(LabelInterner::default()),
            discovered: Mutex::new(HashMap::new()),
            discovered_seq: AtomicU64::new(0),
        }
    }

    /// Records the memory capacity a registered node of `instance_type` reported, for classes
    /// whose AMIs hash to `amis`; kept when it is the first or not above the one known (as
    /// Karpenter). Whether it changed what lists will say.
    pub fn record_discovered_memory(&self, instance_type: &str, amis: u64, memory: i64) -> bool {
        let mut discovered = self
            .discovered
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let key = (instance_type.to_owned(), amis);
        if discovered.get(&key).is_some_and(|known| memory >= *known) {
            return false;
        }
        discovered.insert(key, memory);
        drop(discovered);
        self.discovered_seq.fetch_add(1, Ordering::SeqCst);
        tracing::debug!(
            "memory-capacity" = memory,
            "instance-type" = instance_type,
            "updating discovered capacity cache"
        );
        true
    }

    /// The memory capacity recorded for `instance_type` under `amis`.
    #[must_use]
    pub fn discovered_memory(&self, instance_type: &str, amis: u64) -> Option<i64> {
        self.discovered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(instance_type.to_owned(), amis))
            .copied()
    }

    /// Fetches the catalogue and offerings (hvm, `x86_64` and arm64 only, as Karpenter). The
    /// memoised lists are dropped only when what EC2 returned changed.
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
        if current.version > 0 && current.infos == infos && current.zones == zones {
            return Ok(());
        }
        // Karpenter's lines when the catalogue changes.
        tracing::debug!(count = infos.len(), "discovered instance types");
        tracing::debug!(
            "instance-type-count" = zones.len(),
            "discovered offerings for instance types"
        );
        *current = Arc::new(Catalogue {
            version: current.version + 1,
            infos,
            zones,
            all_zones,
        });
        drop(current);
        self.memo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        // A new catalogue may drop values; start the shared strings afresh with it.
        *self.interner.lock().unwrap_or_else(PoisonError::into_inner) = LabelInterner::default();
        Ok(())
    }

    /// Every instance type for a `NodeClass`: its settings and the zones of its subnets (with
    /// zone ids), with offerings in every zone of the region (unavailable ones included, as
    /// Karpenter's `GetInstanceTypes`).
    pub fn list(
        &self,
        nodeclass: &NodeClassSettings,
        subnet_zones: &BTreeMap<String, String>,
    ) -> Result<InstanceTypes, ResolveError> {
        self.list_with_amis(nodeclass, subnet_zones, 0)
    }

    /// [`InstanceTypeProvider::list`] for a class whose AMIs hash to `amis` ([`amis_hash`]):
    /// types with a discovered memory capacity under that hash are sized by it.
    pub fn list_with_amis(
        &self,
        nodeclass: &NodeClassSettings,
        subnet_zones: &BTreeMap<String, String>,
        amis: u64,
    ) -> Result<InstanceTypes, ResolveError> {
        let catalogue = Arc::clone(
            &self
                .catalogue
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let key = key_of(catalogue.version, nodeclass, subnet_zones, amis);
        let ice = self.deps.unavailable.seq_num();
        let prices = self.deps.pricing.seq_num();
        let discovered = self.discovered_seq.load(Ordering::SeqCst);
        let previous = self
            .memo
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .map(|m| (m.ice, m.prices, m.discovered, Arc::clone(&m.list)));
        let list = match previous {
            Some((i, p, d, list)) if (i, p, d) == (ice, prices, discovered) => return Ok(list),
            Some((_, _, d, list)) if d == discovered => {
                self.reoffer(&catalogue, &list, subnet_zones)
            }
            _ => self.resolve_all(&catalogue, nodeclass, subnet_zones, amis)?,
        };
        let mut memo = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        if memo.len() >= MAX_MEMOISED_CONFIGURATIONS && !memo.contains_key(&key) {
            memo.clear();
        }
        memo.insert(
            key,
            Memo {
                ice,
                prices,
                discovered,
                list: Arc::clone(&list),
            },
        );
        Ok(list)
    }

    /// [`InstanceTypeProvider::list`] for an `EC2NodeClass` as the `NodeClass` work resolved it.
    pub fn list_for(&self, nodeclass: &EC2NodeClass) -> Result<InstanceTypes, InstanceTypesError> {
        let name = nodeclass.metadata.name.clone().unwrap_or_default();
        let zones = subnet_zones(nodeclass);
        if zones.is_empty() {
            return Err(InstanceTypesError::NoSubnets { nodeclass: name });
        }
        self.list_with_amis(
            &NodeClassSettings::from_spec(&nodeclass.spec),
            &zones,
            amis_hash(nodeclass),
        )
        .map_err(|source| InstanceTypesError::Resolve {
            nodeclass: name,
            source,
        })
    }

    fn resolve_all(
        &self,
        catalogue: &Catalogue,
        nodeclass: &NodeClassSettings,
        subnet_zones: &BTreeMap<String, String>,
        amis: u64,
    ) -> Result<InstanceTypes, ResolveError> {
        let discovered = self
            .discovered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let empty = BTreeSet::new();
        let mut interner = self.interner.lock().unwrap_or_else(PoisonError::into_inner);
        let templates = OfferingTemplates::new(&catalogue.all_zones, subnet_zones, &mut interner);
        let mut list = Vec::with_capacity(catalogue.infos.len());
        for info in &catalogue.infos {
            let placement = Placement {
                offered_zones: catalogue.zones.get(&info.name).unwrap_or(&empty),
                subnet_zones,
            };
            let mut it = resolve(
                info,
                placement,
                nodeclass,
                &self.deps.settings,
                &mut interner,
            )?;
            if let Some(memory) = discovered.get(&(info.name.clone(), amis)) {
                let mut capacity = it.capacity.clone();
                capacity.memory = *memory;
                it =
                    InstanceType::new(&it.name, it.requirements, Vec::new(), capacity, it.overhead);
            }
            let states = self.offering_states(&it, &catalogue.all_zones);
            it.offerings = templates.offerings(&states);
            list.push(Arc::new(it));
        }
        Ok(Arc::new(list))
    }

    /// Recomputes offerings of a memoised list; types whose offerings did not change are kept.
    fn reoffer(
        &self,
        catalogue: &Catalogue,
        previous: &[Arc<InstanceType>],
        subnet_zones: &BTreeMap<String, String>,
    ) -> InstanceTypes {
        let mut interner = self.interner.lock().unwrap_or_else(PoisonError::into_inner);
        let templates = OfferingTemplates::new(&catalogue.all_zones, subnet_zones, &mut interner);
        drop(interner);
        let list = previous
            .iter()
            .map(|it| {
                let states = self.offering_states(it, &catalogue.all_zones);
                let unchanged = states.len() == it.offerings.len()
                    && states.iter().zip(&it.offerings).all(|((_, _, state), o)| {
                        state.available == o.available && state.price.total_cmp(&o.price).is_eq()
                    });
                if unchanged {
                    Arc::clone(it)
                } else {
                    Arc::new(InstanceType::new(
                        &it.name,
                        it.requirements.clone(),
                        templates.offerings(&states),
                        it.capacity.clone(),
                        it.overhead.clone(),
                    ))
                }
            })
            .collect();
        Arc::new(list)
    }

    /// Price and availability of each (zone, capacity type) offering of a type, in a fixed
    /// order: zones sorted, then the type's capacity types (on-demand before spot).
    fn offering_states<'z>(
        &self,
        it: &InstanceType,
        all_zones: &'z BTreeSet<String>,
    ) -> Vec<(&'z str, CapacityType, OfferingState)> {
        let type_zones = it.requirements.get(labels::ZONE);
        let capacity_types: Vec<CapacityType> = it
            .requirements
            .get(labels::CAPACITY_TYPE)
            .map(|r| r.values().iter().filter_map(|v| CapacityType::parse(v)))
            .into_iter()
            .flatten()
            .filter(|c| *c != CapacityType::Reserved)
            .collect();
        let mut out = Vec::with_capacity(all_zones.len() * capacity_types.len());
        for zone in all_zones {
            for capacity_type in &capacity_types {
                let price = match capacity_type {
                    CapacityType::Spot => self.deps.pricing.spot_price(&it.name, zone),
                    _ => self.deps.pricing.on_demand_price(&it.name),
                };
                let in_zone = type_zones.is_some_and(|z| z.has(zone));
                let available = price.is_some()
                    && in_zone
                    && !self
                        .deps
                        .unavailable
                        .is_unavailable(&it.name, zone, *capacity_type);
                out.push((
                    zone.as_str(),
                    *capacity_type,
                    OfferingState {
                        price: price.unwrap_or(0.0),
                        available,
                    },
                ));
            }
        }
        out
    }
}

/// The requirements of each (zone, capacity type) offering, built once per list with shared
/// strings and cloned into every instance type's offerings.
struct OfferingTemplates<'z> {
    by_zone: BTreeMap<(&'z str, CapacityType), Arc<Requirements>>,
}

impl<'z> OfferingTemplates<'z> {
    fn new(
        all_zones: &'z BTreeSet<String>,
        subnet_zones: &BTreeMap<String, String>,
        interner: &mut LabelInterner,
    ) -> Self {
        let mut by_zone = BTreeMap::new();
        for zone in all_zones {
            for capacity_type in [CapacityType::OnDemand, CapacityType::Spot] {
                let mut requirements = vec![
                    interner.requirement(labels::CAPACITY_TYPE, [capacity_type.as_str()]),
                    interner.requirement(labels::ZONE, [zone]),
                    interner.requirement(labels::CAPACITY_RESERVATION_ID, None::<&str>),
                ];
                if let Some(id) = subnet_zones.get(zone).filter(|id| !id.is_empty()) {
                    requirements.push(interner.requirement(labels::ZONE_ID, [id]));
                }
                by_zone.insert(
                    (zone.as_str(), capacity_type),
                    Arc::new(Requirements::from_requirements(requirements)),
                );
            }
        }
        OfferingTemplates { by_zone }
    }

    fn offerings(&self, states: &[(&str, CapacityType, OfferingState)]) -> Vec<Offering> {
        states
            .iter()
            .map(|(zone, capacity_type, state)| Offering {
                requirements: self
                    .by_zone
                    .get(&(*zone, *capacity_type))
                    .cloned()
                    .unwrap_or_default(),
                price: state.price,
                available: state.available,
                reservation_capacity: 0,
            })
            .collect()
    }
}
