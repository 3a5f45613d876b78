//! What each AMI family implies besides its user data (reference 1.3 and 4.2 `amifamily`):
//! default block devices, the device that holds ephemeral storage, the feature flags that change
//! allocatable math, the public SSM parameters behind an alias, and the choice of AMIs among the
//! images `DescribeImages` returned.
//!
//! Data flow for an alias (`al2023@latest`): the `NodeClass` work parses it with [`Alias::parse`],
//! asks [`alias_parameters`] which SSM parameters to read for the cluster's Kubernetes version,
//! reads them (through the SSM port), describes the image ids it got, and passes the images with
//! [`known_requirements`] to [`select_amis`], whose result is `status.amis`. Selector terms by
//! id, name or tags skip the SSM step and pass no known requirements: each image then serves
//! its architecture only.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

use crate::apis::ec2nodeclass::{
    Ami, AmiFamily, AmiRequirement, BlockDevice, BlockDeviceMapping, InstanceStorePolicy,
    VolumeType,
};
use crate::apis::labels::{
    ARCH, ARCH_AMD64, ARCH_ARM64, INSTANCE_ACCELERATOR_COUNT, INSTANCE_GPU_COUNT, OS, OS_WINDOWS,
    WINDOWS_BUILD,
};

/// Size of the default EBS volume (AL2, AL2023, Bottlerocket's data volume) and the ephemeral
/// storage assumed when nothing says otherwise.
pub const DEFAULT_VOLUME_SIZE: &str = "20Gi";
/// Bottlerocket's OS volume (`/dev/xvda`); its data lives on `/dev/xvdb`.
const BOTTLEROCKET_OS_VOLUME_SIZE: &str = "4Gi";
/// Windows images need a larger root volume.
const WINDOWS_ROOT_VOLUME_SIZE: &str = "50Gi";
/// Root device of AL2, AL2023 and Bottlerocket images.
const XVDA: &str = "/dev/xvda";
/// Bottlerocket's data device, which holds containers and ephemeral storage.
const XVDB: &str = "/dev/xvdb";
/// Root device of Windows images.
const SDA1: &str = "/dev/sda1";
/// Pods per node for families without ENI-limited pod density (Windows): the kubelet default.
pub const NON_ENI_LIMITED_MAX_PODS: i32 = 110;
/// `node.kubernetes.io/windows-build` of Windows Server 2019.
pub const WINDOWS_2019_BUILD: &str = "10.0.17763";
/// `node.kubernetes.io/windows-build` of Windows Server 2022.
pub const WINDOWS_2022_BUILD: &str = "10.0.20348";
/// The alias version that follows the newest release.
pub const ALIAS_VERSION_LATEST: &str = "latest";

// ---- block devices ---------------------------------------------------------------------------

/// The EBS volume Karpenter gives a family's data device by default: 20 GiB gp3, encrypted.
#[must_use]
pub fn default_ebs(volume_size: &str) -> BlockDevice {
    BlockDevice {
        encrypted: Some(true),
        volume_type: Some(VolumeType::Gp3),
        volume_size: Some(volume_size.to_owned()),
        ..BlockDevice::default()
    }
}

/// Block devices used when the EC2NodeClass lists none: AL2/AL2023 `/dev/xvda` 20Gi,
/// Bottlerocket `/dev/xvda` 4Gi and `/dev/xvdb` 20Gi, Windows `/dev/sda1` 50Gi, Custom none
/// (the AMI's own mappings apply).
#[must_use]
pub fn default_block_device_mappings(family: AmiFamily) -> Vec<BlockDeviceMapping> {
    let mapping = |device: &str, size: &str| BlockDeviceMapping {
        device_name: Some(device.to_owned()),
        ebs: Some(default_ebs(size)),
        root_volume: None,
    };
    match family {
        AmiFamily::AL2 | AmiFamily::AL2023 => vec![mapping(XVDA, DEFAULT_VOLUME_SIZE)],
        AmiFamily::Bottlerocket => vec![
            mapping(XVDA, BOTTLEROCKET_OS_VOLUME_SIZE),
            mapping(XVDB, DEFAULT_VOLUME_SIZE),
        ],
        AmiFamily::Windows2019 | AmiFamily::Windows2022 => {
            vec![mapping(SDA1, WINDOWS_ROOT_VOLUME_SIZE)]
        }
        AmiFamily::Custom => Vec::new(),
    }
}

/// The device whose volume holds the kubelet's and containerd's data.
#[must_use]
pub fn ephemeral_block_device(family: AmiFamily) -> Option<&'static str> {
    match family {
        AmiFamily::AL2 | AmiFamily::AL2023 => Some(XVDA),
        AmiFamily::Bottlerocket => Some(XVDB),
        AmiFamily::Windows2019 | AmiFamily::Windows2022 => Some(SDA1),
        AmiFamily::Custom => None,
    }
}

/// The node's ephemeral-storage capacity as a quantity (`20Gi`, `900G`), chosen as Karpenter
/// does: with `RAID0` the instance's total instance storage when it has any; else the volume
/// marked `rootVolume`; else, for Custom, the last mapping's volume; else the mapping of the
/// family's ephemeral device; else the family default's size; else 20Gi.
#[must_use]
pub fn ephemeral_storage(
    family: AmiFamily,
    block_device_mappings: &[BlockDeviceMapping],
    instance_store_policy: Option<InstanceStorePolicy>,
    instance_storage_total_gb: Option<i64>,
) -> String {
    if instance_store_policy == Some(InstanceStorePolicy::RAID0)
        && let Some(total) = instance_storage_total_gb
    {
        return format!("{total}G");
    }
    let size_of =
        |mapping: &BlockDeviceMapping| mapping.ebs.as_ref().and_then(|ebs| ebs.volume_size.clone());
    if !block_device_mappings.is_empty() {
        if let Some(size) = block_device_mappings
            .iter()
            .find(|m| m.root_volume == Some(true))
            .and_then(size_of)
        {
            return size;
        }
        if family == AmiFamily::Custom {
            return block_device_mappings
                .last()
                .and_then(size_of)
                .unwrap_or_else(|| DEFAULT_VOLUME_SIZE.to_owned());
        }
        if let Some(size) = block_device_mappings
            .iter()
            .find(|m| m.device_name.as_deref() == ephemeral_block_device(family))
            .and_then(size_of)
        {
            return size;
        }
    }
    default_block_device_mappings(family)
        .iter()
        .find(|m| m.device_name.as_deref() == ephemeral_block_device(family))
        .and_then(size_of)
        .unwrap_or_else(|| DEFAULT_VOLUME_SIZE.to_owned())
}

// ---- feature flags ---------------------------------------------------------------------------

/// Family differences that change a node's allocatable resources.
#[expect(
    clippy::struct_excessive_bools,
    reason = "four independent facts, named as Karpenter's FeatureFlags"
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureFlags {
    /// kube-reserved memory uses the ENI-limited pod count even when `maxPods` is set.
    pub uses_eni_limited_memory_overhead: bool,
    /// `kubelet.podsPerCore` caps the pod count.
    pub pods_per_core_enabled: bool,
    /// `kubelet.evictionSoft` counts in the eviction threshold subtracted from allocatable.
    pub eviction_soft_enabled: bool,
    /// Default max pods follow the ENI limits; otherwise [`NON_ENI_LIMITED_MAX_PODS`].
    pub supports_eni_limited_pod_density: bool,
}

/// The family's flags. Bottlerocket renders `evictionSoft` into its settings since v1.5 but
/// Karpenter's flag stayed false (its zero value), so allocatable still ignores it there.
#[must_use]
pub fn feature_flags(family: AmiFamily) -> FeatureFlags {
    match family {
        AmiFamily::AL2 | AmiFamily::AL2023 | AmiFamily::Custom => FeatureFlags {
            uses_eni_limited_memory_overhead: true,
            pods_per_core_enabled: true,
            eviction_soft_enabled: true,
            supports_eni_limited_pod_density: true,
        },
        AmiFamily::Bottlerocket => FeatureFlags {
            uses_eni_limited_memory_overhead: false,
            pods_per_core_enabled: false,
            eviction_soft_enabled: false,
            supports_eni_limited_pod_density: true,
        },
        AmiFamily::Windows2019 | AmiFamily::Windows2022 => FeatureFlags {
            uses_eni_limited_memory_overhead: false,
            pods_per_core_enabled: true,
            eviction_soft_enabled: true,
            supports_eni_limited_pod_density: false,
        },
    }
}

/// `node.kubernetes.io/windows-build` of a Windows family.
#[must_use]
pub fn windows_build(family: AmiFamily) -> Option<&'static str> {
    match family {
        AmiFamily::Windows2019 => Some(WINDOWS_2019_BUILD),
        AmiFamily::Windows2022 => Some(WINDOWS_2022_BUILD),
        _ => None,
    }
}

// ---- aliases and their SSM parameters --------------------------------------------------------

/// The version part of an alias.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AliasVersion {
    /// Follows the newest release; the SSM parameters are mutable.
    Latest,
    /// A release, e.g. `v20240807` (AL2/AL2023) or `v1.20.0` (Bottlerocket).
    Pinned(String),
}

/// A parsed `amiSelectorTerms[].alias`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Alias {
    pub family: AmiFamily,
    pub version: AliasVersion,
}

/// Why an alias cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AliasError {
    #[error("alias {alias:?} is improperly formatted, must match the format 'family@version'")]
    Malformed { alias: String },
    #[error(
        "alias {alias:?}: family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022'"
    )]
    UnknownFamily { alias: String },
    #[error("alias {alias:?}: windows families may only specify version 'latest'")]
    WindowsVersionPinned { alias: String },
    #[error("alias {alias:?}: version may not contain '/' or whitespace")]
    InvalidVersion { alias: String },
}

impl AliasError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        "invalid_alias"
    }
}

impl Alias {
    /// Parses `family@version`, with the CRD's rules.
    pub fn parse(alias: &str) -> Result<Self, AliasError> {
        let (family, version) = alias
            .split_once('@')
            .filter(|(f, v)| !f.is_empty() && !v.is_empty())
            .ok_or_else(|| AliasError::Malformed {
                alias: alias.to_owned(),
            })?;
        let family = AmiFamily::ALIASED
            .into_iter()
            .find(|f| f.alias_name() == family)
            .ok_or_else(|| AliasError::UnknownFamily {
                alias: alias.to_owned(),
            })?;
        let version = if version == ALIAS_VERSION_LATEST {
            AliasVersion::Latest
        } else if family.is_windows() {
            return Err(AliasError::WindowsVersionPinned {
                alias: alias.to_owned(),
            });
        } else if version.contains('/') || version.chars().any(char::is_whitespace) {
            return Err(AliasError::InvalidVersion {
                alias: alias.to_owned(),
            });
        } else {
            AliasVersion::Pinned(version.to_owned())
        };
        Ok(Self { family, version })
    }

    /// The SSM parameters this alias reads for a Kubernetes version (`1.33`).
    #[must_use]
    pub fn parameters(&self, kubernetes_version: &str) -> Vec<AliasParameter> {
        alias_parameters(self, kubernetes_version)
    }
}

/// Which accelerators an EKS-optimized image is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    Standard,
    Nvidia,
    Neuron,
}

impl Variant {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Standard => "standard",
            Self::Nvidia => "nvidia",
            Self::Neuron => "neuron",
        }
    }

    /// The instance requirements this variant serves: standard images avoid GPU and
    /// accelerator instances, nvidia images need GPUs, neuron images need accelerators.
    #[must_use]
    pub fn requirements(self) -> Vec<AmiRequirement> {
        match self {
            Self::Standard => vec![
                requirement(INSTANCE_ACCELERATOR_COUNT, "DoesNotExist", &[]),
                requirement(INSTANCE_GPU_COUNT, "DoesNotExist", &[]),
            ],
            Self::Nvidia => vec![requirement(INSTANCE_GPU_COUNT, "Exists", &[])],
            Self::Neuron => vec![requirement(INSTANCE_ACCELERATOR_COUNT, "Exists", &[])],
        }
    }
}

/// One public SSM parameter an alias reads, and the requirement sets the image it names
/// serves (the architecture requirement is added from the image itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliasParameter {
    pub name: String,
    /// `latest` parameters change over time: cached briefly and re-read when their AMI is
    /// deprecated.
    pub mutable: bool,
    pub requirement_sets: Vec<Vec<AmiRequirement>>,
}

/// The SSM parameters behind an alias, in a fixed order (reference 4.2 `amifamily`). A
/// parameter that does not exist (a variant not built for this version) is skipped by the
/// caller; the alias fails only when none resolves.
#[must_use]
pub fn alias_parameters(alias: &Alias, kubernetes_version: &str) -> Vec<AliasParameter> {
    let k8s = kubernetes_version;
    let mutable = alias.version == AliasVersion::Latest;
    let pinned = match &alias.version {
        AliasVersion::Latest => None,
        AliasVersion::Pinned(version) => Some(version.as_str()),
    };
    let variants = |name: String, variants: &[Variant]| AliasParameter {
        name,
        mutable,
        requirement_sets: variants.iter().map(|v| v.requirements()).collect(),
    };
    match alias.family {
        AmiFamily::AL2 => {
            let release = |prefix: &str| {
                pinned.map_or_else(
                    || "recommended".to_owned(),
                    |v| format!("amazon-eks-{prefix}node-{k8s}-{v}"),
                )
            };
            let path = |suffix: &str, prefix: &str| {
                format!(
                    "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2{suffix}/{}/image_id",
                    release(prefix)
                )
            };
            vec![
                variants(path("", ""), &[Variant::Standard]),
                variants(path("-arm64", "arm64-"), &[Variant::Standard]),
                variants(path("-gpu", "gpu-"), &[Variant::Neuron, Variant::Nvidia]),
            ]
        }
        AmiFamily::AL2023 => {
            let arch_variants: [(&str, &[Variant]); 2] = [
                (
                    "x86_64",
                    &[Variant::Standard, Variant::Nvidia, Variant::Neuron],
                ),
                ("arm64", &[Variant::Standard, Variant::Nvidia]),
            ];
            arch_variants
                .into_iter()
                .flat_map(|(arch, list)| {
                    list.iter().map(move |variant| {
                        let v = variant.as_str();
                        let release = pinned.map_or_else(
                            || "recommended".to_owned(),
                            |version| format!("amazon-eks-node-al2023-{arch}-{v}-{k8s}-{version}"),
                        );
                        (
                            format!(
                                "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/{v}/{release}/image_id"
                            ),
                            *variant,
                        )
                    })
                })
                .map(|(name, variant)| variants(name, &[variant]))
                .collect()
        }
        AmiFamily::Bottlerocket => {
            // Bottlerocket's parameters name versions without the `v`.
            let version = pinned.map_or(ALIAS_VERSION_LATEST, |v| v.trim_start_matches('v'));
            let path = |flavor: &str, arch: &str| {
                format!("/aws/service/bottlerocket/aws-k8s-{k8s}{flavor}/{arch}/{version}/image_id")
            };
            vec![
                variants(path("", "x86_64"), &[Variant::Standard, Variant::Neuron]),
                variants(path("", "arm64"), &[Variant::Standard]),
                variants(path("-nvidia", "x86_64"), &[Variant::Nvidia]),
                variants(path("-nvidia", "arm64"), &[Variant::Nvidia]),
            ]
        }
        AmiFamily::Windows2019 | AmiFamily::Windows2022 => {
            let (year, build) = if alias.family == AmiFamily::Windows2019 {
                ("2019", WINDOWS_2019_BUILD)
            } else {
                ("2022", WINDOWS_2022_BUILD)
            };
            vec![AliasParameter {
                name: format!(
                    "/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}/image_id"
                ),
                // Windows aliases only follow `latest`.
                mutable: true,
                requirement_sets: vec![vec![
                    requirement(OS, "In", &[OS_WINDOWS]),
                    requirement(WINDOWS_BUILD, "In", &[build]),
                ]],
            }]
        }
        AmiFamily::Custom => Vec::new(),
    }
}

/// Image id -> requirement sets, from the parameters that resolved (parameter, image id). Two
/// parameters naming the same image contribute both their sets.
#[must_use]
pub fn known_requirements<'a>(
    resolved: impl IntoIterator<Item = (&'a AliasParameter, &'a str)>,
) -> BTreeMap<String, Vec<Vec<AmiRequirement>>> {
    let mut known: BTreeMap<String, Vec<Vec<AmiRequirement>>> = BTreeMap::new();
    for (parameter, image_id) in resolved {
        let sets = known.entry(image_id.to_owned()).or_default();
        for set in &parameter.requirement_sets {
            if !sets.contains(set) {
                sets.push(set.clone());
            }
        }
    }
    known
}

// ---- AMI selection ---------------------------------------------------------------------------

/// An image as `DescribeImages` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageCandidate {
    pub id: String,
    pub name: String,
    /// EC2's architecture (`x86_64`, `arm64`; others are not launchable by Karpenter).
    pub architecture: String,
    /// RFC 3339 (`2024-08-07T21:17:33.000Z`).
    pub creation_date: Option<String>,
    /// RFC 3339; the image is deprecated from then on.
    pub deprecation_time: Option<String>,
}

/// The images one `DescribeImages` query returned, with what its SSM parameters said the
/// images serve (empty for queries by id, name, tags or custom parameter).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryImages {
    pub known_requirements: BTreeMap<String, Vec<Vec<AmiRequirement>>>,
    pub images: Vec<ImageCandidate>,
}

/// `kubernetes.io/arch` of an EC2 architecture.
#[must_use]
pub fn kube_architecture(ec2_architecture: &str) -> Option<&'static str> {
    match ec2_architecture {
        "x86_64" => Some(ARCH_AMD64),
        "arm64" => Some(ARCH_ARM64),
        _ => None,
    }
}

/// `status.amis`: for each distinct requirement set (architecture plus variant), the best image
/// serving it: a non-deprecated image beats a deprecated one, then the newest creation date
/// wins, then the greater name, then the smaller id. The list is ordered newest first, then by
/// id; each entry's requirements are sorted by key length, then key, as Karpenter writes them.
/// Dates that do not parse count as the oldest possible and never deprecated.
#[must_use]
pub fn select_amis(queries: &[QueryImages], now: Timestamp) -> Vec<Ami> {
    let mut best: BTreeMap<RequirementKey, Candidate> = BTreeMap::new();
    for query in queries {
        for image in &query.images {
            let Some(arch) = kube_architecture(&image.architecture) else {
                continue;
            };
            let arch_requirement = requirement(ARCH, "In", &[arch]);
            let sets: Vec<Vec<AmiRequirement>> = match query.known_requirements.get(&image.id) {
                Some(known) if !known.is_empty() => known
                    .iter()
                    .map(|set| {
                        let mut set = set.clone();
                        set.retain(|r| r.key != ARCH);
                        set.push(arch_requirement.clone());
                        set
                    })
                    .collect(),
                _ => vec![vec![arch_requirement.clone()]],
            };
            let created = image.creation_date.as_deref().and_then(parse_time);
            let deprecated = image
                .deprecation_time
                .as_deref()
                .and_then(parse_time)
                .is_some_and(|at| at.as_second() <= now.as_second());
            for mut set in sets {
                sort_requirements(&mut set);
                let key = requirement_key(&set);
                let candidate = Candidate {
                    image,
                    created,
                    deprecated,
                    requirements: set,
                };
                match best.get(&key) {
                    Some(current) if compare(current, &candidate) != Ordering::Greater => {}
                    _ => {
                        best.insert(key, candidate);
                    }
                }
            }
        }
    }
    let mut chosen: Vec<(RequirementKey, Candidate)> = best.into_iter().collect();
    chosen.sort_by(|(key_a, a), (key_b, b)| {
        seconds(b.created)
            .cmp(&seconds(a.created))
            .then_with(|| a.image.id.cmp(&b.image.id))
            .then_with(|| key_a.cmp(key_b))
    });
    chosen
        .into_iter()
        .map(|(_, c)| Ami {
            id: c.image.id.clone(),
            name: Some(c.image.name.clone()).filter(|n| !n.is_empty()),
            deprecated: c.deprecated.then_some(true),
            requirements: c.requirements,
        })
        .collect()
}

/// Sorts requirements by key length, then key (Karpenter's status order), values sorted.
pub fn sort_requirements(requirements: &mut [AmiRequirement]) {
    for r in requirements.iter_mut() {
        r.values.sort();
    }
    requirements.sort_by(|a, b| {
        a.key
            .len()
            .cmp(&b.key.len())
            .then_with(|| a.key.cmp(&b.key))
            .then_with(|| a.operator.cmp(&b.operator))
    });
}

/// A requirement of an AMI's status.
#[must_use]
pub fn requirement(key: &str, operator: &str, values: &[&str]) -> AmiRequirement {
    AmiRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values: values.iter().map(|&v| v.to_owned()).collect(),
    }
}

type RequirementKey = Vec<(String, String, Vec<String>)>;

fn requirement_key(sorted: &[AmiRequirement]) -> RequirementKey {
    sorted
        .iter()
        .map(|r| (r.key.clone(), r.operator.clone(), r.values.clone()))
        .collect()
}

struct Candidate<'a> {
    image: &'a ImageCandidate,
    created: Option<Timestamp>,
    deprecated: bool,
    requirements: Vec<AmiRequirement>,
}

/// `Less` when `a` is the better image.
fn compare(a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
    a.deprecated
        .cmp(&b.deprecated)
        .then_with(|| seconds(b.created).cmp(&seconds(a.created)))
        .then_with(|| b.image.name.cmp(&a.image.name))
        .then_with(|| a.image.id.cmp(&b.image.id))
}

fn seconds(time: Option<Timestamp>) -> i64 {
    time.map_or(i64::MIN, Timestamp::as_second)
}

fn parse_time(text: &str) -> Option<Timestamp> {
    text.parse().ok()
}
