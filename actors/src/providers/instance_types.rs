//! Instance types resolved from EC2's `InstanceTypeInfo` into the scheduler's model
//! ([`karpenter_core::domain::instance_type::InstanceType`]): the well-known labels of reference 1.4 as
//! requirements, capacity, overhead and allocatable, for the parts of an `EC2NodeClass` that
//! change them (AMI family, kubelet settings, block device mappings, instance-store policy).
//!
//! Pure functions: [`resolve`] returns an instance type without offerings; the provider
//! ([`crate::providers::instance_type_provider`]) memoises the resolved catalogue per `NodeClass`
//! configuration and attaches offerings (zone, capacity type, price, availability).
//!
//! Units are the domain's ([`karpenter_core::domain::resources`]): cpu in millicores, memory and storage
//! in bytes, pods and devices as whole units. Label keys and values are interned through a
//! [`LabelInterner`], so the 1,400 types of a region share one copy of each distinct string
//! (`linux`, `nitro`, zone names, ...).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::branch_interfaces;
use crate::ports::ec2::InstanceTypeInfo;
use karpenter_core::apis::ec2nodeclass::{
    AmiFamily, BlockDeviceMapping, EC2NodeClassSpec, InstanceStorePolicy, KubeletConfiguration,
};
use karpenter_core::apis::labels;
use karpenter_core::domain::amifamily::{self, FeatureFlags, NON_ENI_LIMITED_MAX_PODS};
use karpenter_core::domain::instance_type::{InstanceType, Overhead};
use karpenter_core::domain::requirements::{Requirement, Requirements};
use karpenter_core::domain::resources::{self, QuantityError, Resources};

// ---- constants ---------------------------------------------------------------------------------

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;
/// Graviton instances reserve 64 MiB for the contiguous memory allocator that pods cannot use.
const ARM64_CMA_RESERVED_MIB: u64 = 64;
/// kube-reserved memory per pod and fixed part (EKS AMI formula: 11 MiB * pods + 255 MiB).
const KUBE_RESERVED_MIB_PER_POD: i64 = 11;
const KUBE_RESERVED_MIB_BASE: i64 = 255;
/// kube-reserved ephemeral storage, bytes.
const KUBE_RESERVED_EPHEMERAL_BYTES: i64 = GIB;
/// Eviction threshold defaults: `memory.available<100Mi`, `nodefs.available<10%`.
const EVICTION_MEMORY_BYTES: i64 = 100 * MIB;
const EVICTION_NODEFS_DEFAULT: &str = "10%";
/// kube-reserved CPU: share of each core range (in millicores), the EKS/Bottlerocket formula.
const KUBE_RESERVED_CPU_RANGES: [(i64, i64, f64); 4] = [
    (0, 1000, 0.06),
    (1000, 2000, 0.01),
    (2000, 4000, 0.005),
    (4000, 1 << 31, 0.0025),
];
/// Millicores per vCPU.
const MILLIS_PER_CPU: i64 = 1000;
/// Kubelet reservations may name `pid`, which is not a node resource: it stays out of the
/// overhead so allocatable never carries a negative `pid` (which would make nothing fit).
const PID: &str = "pid";
pub const MEMORY_AVAILABLE: &str = "memory.available";
pub const NODEFS_AVAILABLE: &str = "nodefs.available";

// ---- interning ---------------------------------------------------------------------------------

/// One shared copy of every label key and value: the catalogue repeats a few hundred distinct
/// strings tens of thousands of times.
#[derive(Debug, Default)]
pub struct LabelInterner {
    strings: HashSet<Arc<str>>,
}

impl LabelInterner {
    /// The shared copy of `value`.
    pub fn intern(&mut self, value: &str) -> Arc<str> {
        if let Some(shared) = self.strings.get(value) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = Arc::from(value);
        self.strings.insert(Arc::clone(&shared));
        shared
    }

    /// `key In [values]`, or `key DoesNotExist` when `values` is empty, with shared strings.
    pub fn requirement<S: AsRef<str>>(
        &mut self,
        key: &str,
        values: impl IntoIterator<Item = S>,
    ) -> Requirement {
        let values: Vec<Arc<str>> = values
            .into_iter()
            .map(|v| self.intern(v.as_ref()))
            .collect();
        Requirement::in_shared(self.intern(labels::normalize(key)), values)
    }

    /// Number of distinct strings held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

// ---- inputs ------------------------------------------------------------------------------------

/// The parts of an `EC2NodeClass` that change instance types; the memoisation key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeClassSettings {
    pub ami_family: Option<AmiFamily>,
    pub kubelet: KubeletSettings,
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    pub instance_store_policy: Option<InstanceStorePolicy>,
}

/// The kubelet settings that change capacity or overhead.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct KubeletSettings {
    pub max_pods: Option<i32>,
    pub pods_per_core: Option<i32>,
    pub system_reserved: BTreeMap<String, String>,
    pub kube_reserved: BTreeMap<String, String>,
    pub eviction_hard: BTreeMap<String, String>,
    pub eviction_soft: BTreeMap<String, String>,
}

impl From<&KubeletConfiguration> for KubeletSettings {
    fn from(kubelet: &KubeletConfiguration) -> Self {
        KubeletSettings {
            max_pods: kubelet.max_pods,
            pods_per_core: kubelet.pods_per_core,
            system_reserved: kubelet.system_reserved.clone().unwrap_or_default(),
            kube_reserved: kubelet.kube_reserved.clone().unwrap_or_default(),
            eviction_hard: kubelet.eviction_hard.clone().unwrap_or_default(),
            eviction_soft: kubelet.eviction_soft.clone().unwrap_or_default(),
        }
    }
}

impl NodeClassSettings {
    #[must_use]
    pub fn from_spec(spec: &EC2NodeClassSpec) -> Self {
        NodeClassSettings {
            ami_family: Some(ami_family(spec)),
            kubelet: spec
                .kubelet
                .as_ref()
                .map(KubeletSettings::from)
                .unwrap_or_default(),
            block_device_mappings: spec.block_device_mappings.clone(),
            instance_store_policy: spec.instance_store_policy,
        }
    }

    /// A hash of these settings. The API types do not implement `Hash`; their `Debug` text is
    /// deterministic (ordered maps, declared field order) and names every field, so it is hashed.
    #[must_use]
    pub fn key(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        format!("{self:?}").hash(&mut hasher);
        hasher.finish()
    }

    fn family(&self) -> AmiFamily {
        self.ami_family.unwrap_or(AmiFamily::AL2023)
    }
}

/// The `NodeClass`'s AMI family: `spec.amiFamily`, else the family of its alias, else Custom.
#[must_use]
pub fn ami_family(spec: &EC2NodeClassSpec) -> AmiFamily {
    spec.ami_family
        .or_else(|| {
            spec.ami_selector_terms
                .iter()
                .find_map(|term| term.alias.as_deref().and_then(AmiFamily::from_alias))
        })
        .unwrap_or(AmiFamily::Custom)
}

/// Controller settings that change instance types.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolveSettings {
    pub region: String,
    /// `VM_MEMORY_OVERHEAD_PERCENT`, a fraction (0.075).
    pub vm_memory_overhead_percent: f64,
    /// `RESERVED_ENIS`.
    pub reserved_enis: u32,
}

impl ResolveSettings {
    /// From the controller settings; the region is resolved by the caller (settings, SDK chain
    /// or IMDS).
    #[must_use]
    pub fn from_settings(settings: &karpenter_config::Settings, region: &str) -> Self {
        ResolveSettings {
            region: region.to_owned(),
            vm_memory_overhead_percent: settings.vm_memory_overhead_percent,
            reserved_enis: settings.reserved_enis,
        }
    }
}

/// Where the instance type can run: zones EC2 offers it in, and the `NodeClass`'s subnet zones with
/// their zone ids.
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    pub offered_zones: &'a BTreeSet<String>,
    pub subnet_zones: &'a BTreeMap<String, String>,
}

/// A `NodeClass` value that cannot be used to compute instance types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {source}")]
pub struct ResolveError {
    /// Field path, e.g. `spec.kubelet.kubeReserved.memory`.
    pub field: String,
    pub source: QuantityError,
}

impl ResolveError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        "invalid_nodeclass_quantity"
    }
}

// ---- resolution --------------------------------------------------------------------------------

/// Resolves one instance type for a `NodeClass` configuration, without offerings.
pub fn resolve(
    info: &InstanceTypeInfo,
    placement: Placement<'_>,
    nodeclass: &NodeClassSettings,
    settings: &ResolveSettings,
    interner: &mut LabelInterner,
) -> Result<InstanceType, ResolveError> {
    let family = nodeclass.family();
    let family_flags = amifamily::feature_flags(family);
    let requirements = requirements(info, placement, family, &settings.region, interner);
    let memory = memory(info, settings.vm_memory_overhead_percent);
    let storage = ephemeral_storage(info, nodeclass, family)?;
    let eni_pods = eni_limited_pods(info, settings.reserved_enis);
    let pods = pods(info, &nodeclass.kubelet, family_flags, eni_pods);

    let mut capacity = Resources::core(i64::from(info.vcpus) * MILLIS_PER_CPU, memory, pods);
    capacity.ephemeral_storage = storage;
    // Security Groups for Pods: the type's branch interfaces, 0 (left out) without trunking.
    capacity.set(
        labels::RESOURCE_AWS_POD_ENI,
        branch_interfaces::pod_enis(&info.name),
    );
    let gpus_of = |maker: &str| -> i64 {
        info.gpus
            .iter()
            .filter(|g| g.manufacturer == maker)
            .map(|g| i64::from(g.count))
            .sum()
    };
    capacity.set(labels::RESOURCE_NVIDIA_GPU, gpus_of("NVIDIA"));
    capacity.set(labels::RESOURCE_AMD_GPU, gpus_of("AMD"));
    capacity.set(labels::RESOURCE_HABANA_GAUDI, gpus_of("Habana"));
    let neuron_devices: i64 = info.neuron_devices.iter().map(|d| i64::from(d.count)).sum();
    let neuron_cores = info
        .neuron_devices
        .first()
        .map_or(0, |d| i64::from(d.count) * i64::from(d.cores_per_device));
    capacity.set(labels::RESOURCE_AWS_NEURON, neuron_devices);
    capacity.set(labels::RESOURCE_AWS_NEURON_CORE, neuron_cores);
    capacity.set(labels::RESOURCE_EFA, i64::from(info.efa_max_interfaces));
    if requirements
        .get(labels::OS)
        .is_some_and(|os| os.has(labels::OS_WINDOWS))
    {
        capacity.set(
            labels::RESOURCE_PRIVATE_IPV4_ADDRESS,
            i64::from(info.ipv4_per_eni.saturating_sub(1)),
        );
    }

    let memory_pods = if family_flags.uses_eni_limited_memory_overhead {
        eni_pods
    } else {
        pods
    };
    let overhead = Overhead {
        kube_reserved: kube_reserved(info.vcpus, memory_pods, &nodeclass.kubelet.kube_reserved)?,
        system_reserved: user_resources(
            &nodeclass.kubelet.system_reserved,
            "spec.kubelet.systemReserved",
        )?,
        eviction_threshold: eviction_threshold(memory, storage, &nodeclass.kubelet, family_flags)?,
    };
    Ok(InstanceType::new(
        &info.name,
        requirements,
        Vec::new(),
        capacity,
        overhead,
    ))
}

fn kube_architecture(info: &InstanceTypeInfo) -> String {
    info.architectures
        .iter()
        .find_map(|arch| amifamily::kube_architecture(arch))
        .map_or_else(|| format!("{:?}", info.architectures), str::to_owned)
}

fn lower_kebab(value: &str) -> String {
    value.to_lowercase().replace(' ', "-")
}

/// Category and generation as Karpenter's `(^[a-z]+)(\-[0-9]+tb)?([0-9]+).*\.` reads them.
fn category_and_generation(name: &str) -> Option<(&str, &str)> {
    if !name.contains('.') {
        return None;
    }
    let category_end = name.find(|c: char| !c.is_ascii_lowercase())?;
    if category_end == 0 {
        return None;
    }
    let (category, mut rest) = name.split_at(category_end);
    if let Some(after_dash) = rest.strip_prefix('-') {
        let digits = after_dash.find(|c: char| !c.is_ascii_digit()).unwrap_or(0);
        if digits > 0 && after_dash[digits..].starts_with("tb") {
            rest = &after_dash[digits + 2..];
        }
    }
    let generation_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    if generation_end == 0 || !rest[generation_end..].contains('.') {
        return None;
    }
    Some((category, &rest[..generation_end]))
}

/// Every well-known label of the type, in reference 1.4's order; a label the type does not
/// have is `DoesNotExist`.
#[expect(
    clippy::too_many_lines,
    reason = "one statement per well-known label, in reference 1.4's order"
)]
fn requirements(
    info: &InstanceTypeInfo,
    placement: Placement<'_>,
    family: AmiFamily,
    region: &str,
    interner: &mut LabelInterner,
) -> Requirements {
    let arch = kube_architecture(info);
    let os: Option<&str> = if !family.is_windows() {
        Some(labels::OS_LINUX)
    } else if arch == labels::ARCH_AMD64 {
        Some(labels::OS_WINDOWS)
    } else {
        None
    };
    let zones: Vec<&String> = placement
        .offered_zones
        .iter()
        .filter(|zone| placement.subnet_zones.contains_key(*zone))
        .collect();
    let zone_ids: Vec<&String> = zones
        .iter()
        .filter_map(|zone| placement.subnet_zones.get(*zone))
        .filter(|id| !id.is_empty())
        .collect();
    let capacity_types = info
        .usage_classes
        .iter()
        .filter(|c| *c == labels::CAPACITY_TYPE_ON_DEMAND || *c == labels::CAPACITY_TYPE_SPOT);
    let category_generation = category_and_generation(&info.name);
    let family_size = info
        .name
        .split_once('.')
        .filter(|(_, size)| !size.contains('.'));
    let gpu = (info.gpus.len() == 1).then(|| &info.gpus[0]);
    // Neuron devices win over the older inference-accelerator description of the same chips.
    let accelerator: Option<(String, String, u32)> = if info.neuron_devices.len() == 1 {
        let device = &info.neuron_devices[0];
        Some((lower_kebab(&device.name), "aws".to_owned(), device.count))
    } else if info.neuron_devices.is_empty() && info.inference_accelerators.len() == 1 {
        let accelerator = &info.inference_accelerators[0];
        Some((
            lower_kebab(&accelerator.name),
            lower_kebab(&accelerator.manufacturer),
            accelerator.count,
        ))
    } else {
        None
    };

    let mut out = vec![
        interner.requirement(labels::INSTANCE_TYPE, [&info.name]),
        interner.requirement(labels::ARCH, [&arch]),
        interner.requirement(labels::OS, os),
        interner.requirement(labels::ZONE, zones),
        interner.requirement(labels::REGION, [region]),
        interner.requirement(labels::WINDOWS_BUILD, amifamily::windows_build(family)),
        interner.requirement(labels::CAPACITY_TYPE, capacity_types),
        interner.requirement(labels::INSTANCE_CPU, [info.vcpus.to_string()]),
        interner.requirement(
            labels::INSTANCE_CPU_MANUFACTURER,
            Some(lower_kebab(&info.cpu_manufacturer)).filter(|m| !m.is_empty()),
        ),
        interner.requirement(
            labels::INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
            info.sustained_clock_speed_mhz.map(|mhz| mhz.to_string()),
        ),
        interner.requirement(labels::INSTANCE_MEMORY, [info.memory_mib.to_string()]),
        interner.requirement(
            labels::INSTANCE_EBS_BANDWIDTH,
            info.ebs_bandwidth_mbps.map(|b| b.to_string()),
        ),
        interner.requirement(
            labels::INSTANCE_NETWORK_BANDWIDTH,
            info.network_bandwidth_mbps.map(|b| b.to_string()),
        ),
        interner.requirement(
            labels::INSTANCE_CATEGORY,
            category_generation.map(|(c, _)| c),
        ),
        interner.requirement(
            labels::INSTANCE_GENERATION,
            category_generation.map(|(_, g)| g),
        ),
        interner.requirement(labels::INSTANCE_FAMILY, family_size.map(|(f, _)| f)),
        interner.requirement(labels::INSTANCE_SIZE, family_size.map(|(_, s)| s)),
        interner.requirement(
            labels::INSTANCE_LOCAL_NVME,
            info.instance_storage
                .as_ref()
                .filter(|s| s.nvme)
                .map(|s| s.total_gb.to_string()),
        ),
        interner.requirement(labels::INSTANCE_GPU_NAME, gpu.map(|g| lower_kebab(&g.name))),
        interner.requirement(
            labels::INSTANCE_GPU_MANUFACTURER,
            gpu.map(|g| lower_kebab(&g.manufacturer)),
        ),
        interner.requirement(labels::INSTANCE_GPU_COUNT, gpu.map(|g| g.count.to_string())),
        interner.requirement(
            labels::INSTANCE_GPU_MEMORY,
            gpu.map(|g| g.memory_mib.to_string()),
        ),
        interner.requirement(
            labels::INSTANCE_ACCELERATOR_NAME,
            accelerator.as_ref().map(|a| a.0.as_str()),
        ),
        interner.requirement(
            labels::INSTANCE_ACCELERATOR_MANUFACTURER,
            accelerator.as_ref().map(|a| a.1.as_str()),
        ),
        interner.requirement(
            labels::INSTANCE_ACCELERATOR_COUNT,
            accelerator.as_ref().map(|a| a.2.to_string()),
        ),
        interner.requirement(labels::INSTANCE_HYPERVISOR, [&info.hypervisor]),
        interner.requirement(
            labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
            [info.encryption_in_transit.to_string()],
        ),
        interner.requirement(labels::CAPACITY_RESERVATION_ID, None::<&str>),
    ];
    if !zone_ids.is_empty() {
        out.push(interner.requirement(labels::ZONE_ID, zone_ids));
    }
    Requirements::from_requirements(out)
}

/// Memory capacity in bytes: MiB less the arm64 CMA reservation, less the VM overhead share
/// (rounded up to whole MiB).
fn memory(info: &InstanceTypeInfo, vm_memory_overhead_percent: f64) -> i64 {
    let mut mib = info.memory_mib;
    if info.architectures.first().is_some_and(|a| a == "arm64") {
        mib = mib.saturating_sub(ARM64_CMA_RESERVED_MIB);
    }
    let bytes = i64::try_from(mib).unwrap_or(i64::MAX / MIB) * MIB;
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_precision_loss,
        reason = "memory sizes are far below 2^52 bytes; the overhead is rounded up to whole MiB"
    )]
    let overhead_mib = (bytes as f64 * vm_memory_overhead_percent / MIB as f64).ceil() as i64;
    bytes - overhead_mib * MIB
}

/// Ephemeral storage in bytes: the size `domain::amifamily` picks, parsed.
fn ephemeral_storage(
    info: &InstanceTypeInfo,
    nodeclass: &NodeClassSettings,
    family: AmiFamily,
) -> Result<i64, ResolveError> {
    let size = amifamily::ephemeral_storage(
        family,
        &nodeclass.block_device_mappings,
        nodeclass.instance_store_policy,
        info.instance_storage
            .as_ref()
            .and_then(|s| i64::try_from(s.total_gb).ok()),
    );
    resources::parse_units(&size).map_err(|source| ResolveError {
        field: "spec.blockDeviceMappings[].ebs.volumeSize".to_owned(),
        source,
    })
}

/// `(ENIs of the default card - RESERVED_ENIS) * (IPv4 per ENI - 1) + 2`, the VPC CNI limit.
#[must_use]
pub fn eni_limited_pods(info: &InstanceTypeInfo, reserved_enis: u32) -> i64 {
    let usable = i64::from(info.max_enis.saturating_sub(reserved_enis));
    if usable == 0 {
        return 0;
    }
    usable * (i64::from(info.ipv4_per_eni) - 1) + 2
}

fn pods(
    info: &InstanceTypeInfo,
    kubelet: &KubeletSettings,
    family: FeatureFlags,
    eni_pods: i64,
) -> i64 {
    let mut count = match kubelet.max_pods {
        Some(max) => i64::from(max),
        None if family.supports_eni_limited_pod_density => eni_pods,
        None => i64::from(NON_ENI_LIMITED_MAX_PODS),
    };
    if let Some(per_core) = kubelet.pods_per_core.filter(|p| *p > 0)
        && family.pods_per_core_enabled
    {
        count = count.min(i64::from(per_core) * i64::from(info.vcpus));
    }
    count
}

/// Sets user-given reservations (`kubeReserved`, `systemReserved`) on `out`, in domain units,
/// `pid` left out.
fn apply_user_resources(
    out: &mut Resources,
    values: &BTreeMap<String, String>,
    field: &str,
) -> Result<(), ResolveError> {
    for (name, value) in values.iter().filter(|(name, _)| name.as_str() != PID) {
        let amount = resources::parse_resource(name, value).map_err(|source| ResolveError {
            field: format!("{field}.{name}"),
            source,
        })?;
        out.set(name, amount);
    }
    Ok(())
}

fn user_resources(
    values: &BTreeMap<String, String>,
    field: &str,
) -> Result<Resources, ResolveError> {
    let mut out = Resources::new();
    apply_user_resources(&mut out, values, field)?;
    Ok(out)
}

fn kube_reserved(
    vcpus: u32,
    pods: i64,
    user: &BTreeMap<String, String>,
) -> Result<Resources, ResolveError> {
    let mut out = Resources::new();
    out.memory = (KUBE_RESERVED_MIB_PER_POD * pods + KUBE_RESERVED_MIB_BASE) * MIB;
    out.ephemeral_storage = KUBE_RESERVED_EPHEMERAL_BYTES;
    let cpu = i64::from(vcpus) * MILLIS_PER_CPU;
    for (start, end, share) in KUBE_RESERVED_CPU_RANGES {
        if cpu >= start {
            let span = if cpu < end { cpu - start } else { end - start };
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_precision_loss,
                reason = "millicore spans are small; Karpenter truncates each range's share"
            )]
            let part = (span as f64 * share) as i64;
            out.cpu += part;
        }
    }
    apply_user_resources(&mut out, user, "spec.kubelet.kubeReserved")?;
    Ok(out)
}

/// A signal value in bytes: a percentage of the capacity (100% means disabled, so 0) or a
/// quantity.
fn eviction_signal(capacity: i64, value: &str, field: &str) -> Result<i64, ResolveError> {
    if let Some(percent) = value.strip_suffix('%') {
        let percent: f64 = percent.trim().parse().map_err(|_| ResolveError {
            field: field.to_owned(),
            source: QuantityError::Malformed {
                value: value.to_owned(),
                rule: "expected a percentage such as 10%",
            },
        })?;
        let percent = if (percent - 100.0).abs() < f64::EPSILON {
            0.0
        } else {
            percent
        };
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_precision_loss,
            reason = "Karpenter computes the threshold as ceil(capacity / 100 * percent) in float"
        )]
        let bytes = (capacity as f64 / 100.0 * percent).ceil() as i64;
        return Ok(bytes);
    }
    resources::parse_units(value).map_err(|source| ResolveError {
        field: field.to_owned(),
        source,
    })
}

fn eviction_threshold(
    memory: i64,
    storage: i64,
    kubelet: &KubeletSettings,
    family: FeatureFlags,
) -> Result<Resources, ResolveError> {
    let mut out = Resources::new();
    out.memory = EVICTION_MEMORY_BYTES;
    out.ephemeral_storage = eviction_signal(storage, EVICTION_NODEFS_DEFAULT, "default")?;
    let mut signals = vec![(&kubelet.eviction_hard, "spec.kubelet.evictionHard")];
    if family.eviction_soft_enabled {
        signals.push((&kubelet.eviction_soft, "spec.kubelet.evictionSoft"));
    }
    let (mut memory_override, mut storage_override) = (None::<i64>, None::<i64>);
    for (map, field) in signals {
        if let Some(value) = map.get(MEMORY_AVAILABLE) {
            let threshold = eviction_signal(memory, value, &format!("{field}.{MEMORY_AVAILABLE}"))?;
            memory_override = Some(memory_override.map_or(threshold, |m| m.max(threshold)));
        }
        if let Some(value) = map.get(NODEFS_AVAILABLE) {
            let threshold =
                eviction_signal(storage, value, &format!("{field}.{NODEFS_AVAILABLE}"))?;
            storage_override = Some(storage_override.map_or(threshold, |s| s.max(threshold)));
        }
    }
    if let Some(memory) = memory_override {
        out.memory = memory;
    }
    if let Some(storage) = storage_override {
        out.ephemeral_storage = storage;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::ec2::{Gpu, InstanceStorage, NeuronDevice};
    use karpenter_core::domain::resources::{CPU, MEMORY};

    fn m5_large() -> InstanceTypeInfo {
        InstanceTypeInfo {
            name: "m5.large".into(),
            vcpus: 2,
            memory_mib: 8192,
            architectures: vec!["x86_64".into()],
            virtualization_types: vec!["hvm".into()],
            usage_classes: vec!["on-demand".into(), "spot".into()],
            hypervisor: "nitro".into(),
            cpu_manufacturer: "Intel".into(),
            sustained_clock_speed_mhz: Some(3100),
            max_enis: 3,
            ipv4_per_eni: 10,
            network_bandwidth_mbps: Some(750),
            ebs_bandwidth_mbps: Some(4750),
            ..InstanceTypeInfo::default()
        }
    }

    fn settings() -> ResolveSettings {
        ResolveSettings {
            region: "us-west-2".into(),
            vm_memory_overhead_percent: 0.075,
            reserved_enis: 0,
        }
    }

    fn zones() -> (BTreeSet<String>, BTreeMap<String, String>) {
        (
            ["us-west-2a", "us-west-2b", "us-west-2d"]
                .map(String::from)
                .into(),
            [
                ("us-west-2a", "usw2-az2"),
                ("us-west-2b", "usw2-az1"),
                ("us-west-2c", "usw2-az3"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .into(),
        )
    }

    fn resolve_with(info: &InstanceTypeInfo, nodeclass: &NodeClassSettings) -> InstanceType {
        let (offered, subnets) = zones();
        let placement = Placement {
            offered_zones: &offered,
            subnet_zones: &subnets,
        };
        resolve(
            info,
            placement,
            nodeclass,
            &settings(),
            &mut LabelInterner::default(),
        )
        .expect("resolves")
    }

    fn values<'a>(it: &'a InstanceType, key: &str) -> Vec<&'a str> {
        it.requirements
            .get(key)
            .map(|r| r.values().iter().map(|v| &**v).collect())
            .unwrap_or_default()
    }

    fn does_not_exist(it: &InstanceType, key: &str) -> bool {
        it.requirements.get(key).is_some_and(Requirement::is_empty)
    }

    #[test]
    fn m5_large_gets_karpenters_labels() {
        let it = resolve_with(&m5_large(), &NodeClassSettings::default());
        assert_eq!(values(&it, labels::INSTANCE_CATEGORY), ["m"]);
        assert_eq!(values(&it, labels::INSTANCE_GENERATION), ["5"]);
        assert_eq!(values(&it, labels::INSTANCE_FAMILY), ["m5"]);
        assert_eq!(values(&it, labels::INSTANCE_SIZE), ["large"]);
        assert_eq!(values(&it, labels::INSTANCE_CPU_MANUFACTURER), ["intel"]);
        assert_eq!(
            values(&it, labels::INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ),
            ["3100"]
        );
        assert_eq!(values(&it, labels::ARCH), ["amd64"]);
        assert_eq!(values(&it, labels::OS), ["linux"]);
        // Offered in a, b, d; subnets in a, b, c: zones a and b.
        assert_eq!(values(&it, labels::ZONE), ["us-west-2a", "us-west-2b"]);
        assert_eq!(values(&it, labels::ZONE_ID), ["usw2-az1", "usw2-az2"]);
        assert_eq!(values(&it, labels::CAPACITY_TYPE), ["on-demand", "spot"]);
        assert_eq!(values(&it, labels::INSTANCE_EBS_BANDWIDTH), ["4750"]);
        assert!(does_not_exist(&it, labels::INSTANCE_GPU_NAME));
        assert!(does_not_exist(&it, labels::WINDOWS_BUILD));
        assert!(does_not_exist(&it, labels::CAPACITY_RESERVATION_ID));
        assert!(it.offerings.is_empty());
    }

    #[test]
    fn m5_large_capacity_and_allocatable_match_karpenter() {
        let it = resolve_with(&m5_large(), &NodeClassSettings::default());
        // 8192 MiB less ceil(8192 * 0.075) = 615 MiB.
        assert_eq!(it.capacity.memory, (8192 - 615) * MIB);
        // 3 ENIs * (10 - 1) + 2 = 29 pods.
        assert_eq!(it.capacity.pods, 29);
        assert_eq!(it.capacity.ephemeral_storage, 20 * GIB);
        // kube-reserved: 60m + 10m cpu; (11 * 29 + 255) MiB memory.
        assert_eq!(it.overhead.kube_reserved.cpu, 70);
        assert_eq!(it.overhead.kube_reserved.memory, 574 * MIB);
        assert_eq!(it.allocatable().cpu, 1930);
        assert_eq!(it.allocatable().memory, (8192 - 615 - 574 - 100) * MIB);
        // 20Gi less 1Gi kube-reserved less 10% eviction (rounded up to whole bytes).
        let eviction = (20 * GIB * 10 + 99) / 100;
        assert_eq!(it.allocatable().ephemeral_storage, 19 * GIB - eviction);
    }

    #[test]
    fn max_pods_and_pods_per_core_cap_pods_but_memory_overhead_stays_eni_based() {
        let nodeclass = NodeClassSettings {
            kubelet: KubeletSettings {
                max_pods: Some(110),
                pods_per_core: Some(4),
                ..KubeletSettings::default()
            },
            ..NodeClassSettings::default()
        };
        let it = resolve_with(&m5_large(), &nodeclass);
        assert_eq!(it.capacity.pods, 8);
        assert_eq!(it.overhead.kube_reserved.memory, 574 * MIB);
    }

    #[test]
    fn bottlerocket_ignores_pods_per_core_and_sizes_kube_reserved_by_pods() {
        let nodeclass = NodeClassSettings {
            ami_family: Some(AmiFamily::Bottlerocket),
            kubelet: KubeletSettings {
                max_pods: Some(50),
                pods_per_core: Some(4),
                ..KubeletSettings::default()
            },
            ..NodeClassSettings::default()
        };
        let it = resolve_with(&m5_large(), &nodeclass);
        assert_eq!(it.capacity.pods, 50);
        assert_eq!(it.overhead.kube_reserved.memory, (11 * 50 + 255) * MIB);
    }

    #[test]
    fn windows_gets_110_pods_a_build_label_and_private_ips() {
        let nodeclass = NodeClassSettings {
            ami_family: Some(AmiFamily::Windows2022),
            ..NodeClassSettings::default()
        };
        let it = resolve_with(&m5_large(), &nodeclass);
        assert_eq!(it.capacity.pods, 110);
        assert_eq!(values(&it, labels::OS), ["windows"]);
        assert_eq!(values(&it, labels::WINDOWS_BUILD), ["10.0.20348"]);
        assert_eq!(it.capacity.get(labels::RESOURCE_PRIVATE_IPV4_ADDRESS), 9);
        assert_eq!(it.capacity.ephemeral_storage, 50 * GIB);
    }

    #[test]
    fn block_device_mappings_and_raid0_set_ephemeral_storage() {
        let mut info = m5_large();
        info.instance_storage = Some(InstanceStorage {
            total_gb: 75,
            nvme: true,
        });
        let root = NodeClassSettings {
            block_device_mappings: vec![BlockDeviceMapping {
                device_name: Some("/dev/xvdb".into()),
                ebs: Some(karpenter_core::apis::ec2nodeclass::BlockDevice {
                    volume_size: Some("100Gi".into()),
                    ..Default::default()
                }),
                root_volume: Some(true),
            }],
            ..NodeClassSettings::default()
        };
        let it = resolve_with(&info, &root);
        assert_eq!(it.capacity.ephemeral_storage, 100 * GIB);
        assert_eq!(values(&it, labels::INSTANCE_LOCAL_NVME), ["75"]);

        let raid = NodeClassSettings {
            instance_store_policy: Some(InstanceStorePolicy::RAID0),
            ..root
        };
        let it = resolve_with(&info, &raid);
        assert_eq!(it.capacity.ephemeral_storage, 75_000_000_000);
    }

    #[test]
    fn trunking_types_offer_pod_enis_and_others_none() {
        let it = resolve_with(&m5_large(), &NodeClassSettings::default());
        assert_eq!(it.capacity.get(labels::RESOURCE_AWS_POD_ENI), 9);
        assert_eq!(it.allocatable().get(labels::RESOURCE_AWS_POD_ENI), 9);
        let mut t3 = m5_large();
        t3.name = "t3.large".into();
        let it = resolve_with(&t3, &NodeClassSettings::default());
        assert_eq!(it.capacity.get(labels::RESOURCE_AWS_POD_ENI), 0);
    }

    #[test]
    fn gpus_neuron_and_efa_become_extended_resources_and_labels() {
        let mut info = m5_large();
        info.name = "p4d.24xlarge".into();
        info.gpus = vec![Gpu {
            name: "A100".into(),
            manufacturer: "NVIDIA".into(),
            count: 8,
            memory_mib: 40960,
        }];
        info.efa_max_interfaces = 4;
        let it = resolve_with(&info, &NodeClassSettings::default());
        assert_eq!(it.capacity.get(labels::RESOURCE_NVIDIA_GPU), 8);
        assert_eq!(it.capacity.get(labels::RESOURCE_EFA), 4);
        assert_eq!(it.allocatable().get(labels::RESOURCE_NVIDIA_GPU), 8);
        assert_eq!(values(&it, labels::INSTANCE_GPU_NAME), ["a100"]);
        assert_eq!(values(&it, labels::INSTANCE_GPU_MANUFACTURER), ["nvidia"]);
        assert_eq!(values(&it, labels::INSTANCE_GPU_MEMORY), ["40960"]);

        let mut inf = m5_large();
        inf.name = "inf2.xlarge".into();
        inf.neuron_devices = vec![NeuronDevice {
            name: "Inferentia2".into(),
            count: 1,
            cores_per_device: 2,
            memory_mib: 32768,
        }];
        let it = resolve_with(&inf, &NodeClassSettings::default());
        assert_eq!(it.capacity.get(labels::RESOURCE_AWS_NEURON), 1);
        assert_eq!(it.capacity.get(labels::RESOURCE_AWS_NEURON_CORE), 2);
        assert_eq!(
            values(&it, labels::INSTANCE_ACCELERATOR_NAME),
            ["inferentia2"]
        );
        assert_eq!(
            values(&it, labels::INSTANCE_ACCELERATOR_MANUFACTURER),
            ["aws"]
        );
    }

    #[test]
    fn arm64_loses_the_cma_reservation_and_eviction_hard_overrides_defaults() {
        let mut info = m5_large();
        info.name = "m7g.large".into();
        info.architectures = vec!["arm64".into()];
        let nodeclass = NodeClassSettings {
            kubelet: KubeletSettings {
                eviction_hard: [(MEMORY_AVAILABLE.to_owned(), "500Mi".to_owned())].into(),
                ..KubeletSettings::default()
            },
            ..NodeClassSettings::default()
        };
        let it = resolve_with(&info, &nodeclass);
        // 8128 MiB less ceil(8128 * 0.075) = 610 MiB.
        assert_eq!(it.capacity.memory, (8128 - 610) * MIB);
        assert_eq!(it.overhead.eviction_threshold.memory, 500 * MIB);
        assert_eq!(values(&it, labels::ARCH), ["arm64"]);
    }

    #[test]
    fn reservations_override_defaults_and_pid_stays_out_of_allocatable() {
        let nodeclass = NodeClassSettings {
            kubelet: KubeletSettings {
                kube_reserved: [
                    (CPU.to_owned(), "250m".to_owned()),
                    (PID.to_owned(), "1000".to_owned()),
                ]
                .into(),
                system_reserved: [(MEMORY.to_owned(), "1Gi".to_owned())].into(),
                ..KubeletSettings::default()
            },
            ..NodeClassSettings::default()
        };
        let it = resolve_with(&m5_large(), &nodeclass);
        assert_eq!(it.overhead.kube_reserved.cpu, 250);
        assert_eq!(it.overhead.system_reserved.memory, GIB);
        assert_eq!(it.allocatable().get(PID), 0);
        assert_eq!(it.allocatable().cpu, 1750);
    }

    #[test]
    fn a_bad_quantity_names_its_field() {
        let nodeclass = NodeClassSettings {
            kubelet: KubeletSettings {
                kube_reserved: [("memory".to_owned(), "lots".to_owned())].into(),
                ..KubeletSettings::default()
            },
            ..NodeClassSettings::default()
        };
        let (offered, subnets) = zones();
        let error = resolve(
            &m5_large(),
            Placement {
                offered_zones: &offered,
                subnet_zones: &subnets,
            },
            &nodeclass,
            &settings(),
            &mut LabelInterner::default(),
        )
        .expect_err("rejected");
        assert_eq!(error.field, "spec.kubelet.kubeReserved.memory");
    }

    #[test]
    fn interned_types_share_label_values() {
        let mut interner = LabelInterner::default();
        let (offered, subnets) = zones();
        let placement = Placement {
            offered_zones: &offered,
            subnet_zones: &subnets,
        };
        let nodeclass = NodeClassSettings::default();
        let a = resolve(
            &m5_large(),
            placement,
            &nodeclass,
            &settings(),
            &mut interner,
        )
        .expect("resolves");
        let mut c5 = m5_large();
        c5.name = "c5.large".into();
        let b = resolve(&c5, placement, &nodeclass, &settings(), &mut interner).expect("resolves");
        let os = |it: &InstanceType| {
            Arc::clone(&it.requirements.get(labels::OS).expect("os").values()[0])
        };
        assert!(Arc::ptr_eq(&os(&a), &os(&b)));
    }

    #[test]
    fn category_and_generation_follow_karpenters_pattern() {
        assert_eq!(category_and_generation("c7gn.large"), Some(("c", "7")));
        assert_eq!(category_and_generation("u-6tb1.metal"), Some(("u", "1")));
        assert_eq!(category_and_generation("inf2.xlarge"), Some(("inf", "2")));
        assert_eq!(category_and_generation("mac2-m2.metal"), Some(("mac", "2")));
        assert_eq!(category_and_generation("metal"), None);
    }
}
