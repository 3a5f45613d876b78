//! Launch templates (reference 4.2 `launchtemplate`): one per distinct launch configuration,
//! named `karpenter.k8s.aws/<hash>`, created on demand, cached for a minute from its last use
//! and deleted in EC2 when that minute passes unused.
//!
//! Data flow: for a launch, [`resolve`] (pure) groups the candidate instance types by the AMI
//! they map to, their max pods and (when EFA is requested) their EFA count, as Karpenter's AMI
//! resolver does, and builds each group's `CreateLaunchTemplate` request: AMI, user data from
//! [`karpenter_core::domain::userdata::render`] (labels from [`karpenter_core::domain::userdata::launch_labels`],
//! the NodeClaim's taints and startup taints), block devices with every EBS field (the family's
//! defaults when the class has none), metadata options, security groups, instance profile,
//! monitoring, network interfaces for EFA, a public IP or IPv6, and tags for the template, its
//! network interfaces and spot requests. The name is a stable hash of all of that.
//! [`LaunchTemplateProvider::ensure_all`] makes sure each exists (cache, then
//! `DescribeLaunchTemplates`, then `CreateLaunchTemplate`). The janitor
//! ([`LaunchTemplateJanitorActor`], an actor of the AWS group) deletes expired ones every
//! [`JANITOR_PERIOD`]; [`LaunchTemplateProvider::delete_all`]
//! removes a class's templates when the class goes; [`LaunchTemplateProvider::hydrate`] loads
//! the cluster's templates after a restart so they expire (and are deleted) like the others.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use super::ami_mapping::{AmiRequirementsError, map_to_instance_types};
use super::instance_types::ami_family;
use crate::ports::aws_error::{AwsError, AwsErrorClass};
use crate::ports::ec2::{
    CreateLaunchTemplateRequest, DescribeLaunchTemplatesRequest, Ec2Api, Filter, LaunchBlockDevice,
    LaunchMetadataOptions, LaunchNetworkInterface, LaunchTemplate, LaunchTemplateData,
    LaunchTemplateRef, Tags,
};
use crate::runtime::{
    ActorCtx, ActorError, ActorRef, GroupRef, Handles, Mail, SpawnError, Supervised,
};
use karpenter_core::apis::EC2NodeClass;
use karpenter_core::apis::ec2nodeclass::{
    BlockDeviceMapping, HttpTokens, MetadataOptions, Toggle, VolumeType,
};
use karpenter_core::apis::labels;
use karpenter_core::apis::nodeclaim::NodeClaim;
use karpenter_core::apis::requirements::Requirement as ApiRequirement;
use karpenter_core::domain::amifamily;
use karpenter_core::domain::instance_type::CapacityType;
use karpenter_core::domain::instance_type::InstanceType;
use karpenter_core::domain::resources;
use karpenter_core::domain::userdata::{self, ClusterInfo, UserDataError, UserDataInput};

/// Prefix of every launch template Karpenter creates.
pub const LAUNCH_TEMPLATE_NAME_PREFIX: &str = "karpenter.k8s.aws";
/// How long a launch template stays cached after its last use; when it expires unused it is
/// deleted in EC2 (Karpenter's launch-template cache TTL).
pub const LAUNCH_TEMPLATE_TTL: Duration = Duration::from_mins(1);
/// How often the janitor looks for expired templates (Karpenter's cache cleanup interval).
pub const JANITOR_PERIOD: Duration = Duration::from_mins(1);
const GIB: i64 = 1 << 30;

/// Why launch templates could not be resolved or ensured.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LaunchTemplateError {
    #[error("ec2nodeclass {nodeclass}: no amis exist given constraints")]
    NoAmis { nodeclass: String },
    #[error("ec2nodeclass {nodeclass}: no instance types satisfy requirements of amis {amis:?}")]
    NoCompatibleAmi {
        nodeclass: String,
        amis: Vec<String>,
    },
    #[error("ec2nodeclass {nodeclass}: no security groups are present in the status")]
    NoSecurityGroups { nodeclass: String },
    #[error("ec2nodeclass {nodeclass}: no instance profile is present in the status")]
    NoInstanceProfile { nodeclass: String },
    #[error("ec2nodeclass {nodeclass}: {source}")]
    AmiRequirements {
        nodeclass: String,
        source: AmiRequirementsError,
    },
    #[error("ec2nodeclass {nodeclass}: {source}")]
    UserData {
        nodeclass: String,
        source: UserDataError,
    },
    /// A block device value EC2 cannot take; `field` is the path in the class.
    #[error("ec2nodeclass {nodeclass}: {field}: {message}")]
    BlockDevice {
        nodeclass: String,
        field: String,
        message: String,
    },
    #[error("{operation} launch template {name}: {source}")]
    Aws {
        operation: &'static str,
        name: String,
        source: Box<AwsError>,
    },
}

impl LaunchTemplateError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::NoAmis { .. } | Self::NoCompatibleAmi { .. } => "no_amis",
            Self::NoSecurityGroups { .. } => "no_security_groups",
            Self::NoInstanceProfile { .. } => "no_instance_profile",
            Self::AmiRequirements { source, .. } => source.category(),
            Self::UserData { source, .. } => source.category(),
            Self::BlockDevice { .. } => "invalid_block_device",
            Self::Aws { source, .. } => source.category(),
        }
    }

    /// The AWS error behind it, if any.
    #[must_use]
    pub fn aws(&self) -> Option<&AwsError> {
        match self {
            Self::Aws { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// What a launch needs launch templates for.
#[derive(Debug, Clone, Copy)]
pub struct LaunchInput<'a> {
    pub nodeclass: &'a EC2NodeClass,
    pub nodeclaim: &'a NodeClaim,
    /// The candidate instance types, cheapest first.
    pub instance_types: &'a [Arc<InstanceType>],
    pub capacity_type: CapacityType,
    /// The launch's tags (the class's tags and Karpenter's ownership tags).
    pub tags: &'a Tags,
}

/// One launch template and the instance types that launch with it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedLaunchTemplate {
    pub name: String,
    pub image_id: String,
    pub max_pods: i64,
    pub efa_count: i64,
    /// In the order they were given (cheapest first).
    pub instance_types: Vec<Arc<InstanceType>>,
    /// What `CreateLaunchTemplate` is sent when the template does not exist.
    pub request: CreateLaunchTemplateRequest,
}

fn nodeclass_name(nodeclass: &EC2NodeClass) -> String {
    nodeclass.metadata.name.clone().unwrap_or_default()
}

/// FNV-1a over the request: stable across processes and Rust releases, so a restarted
/// controller finds the templates it made.
fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The name of a template: the prefix and a hash of its data and tags.
#[must_use]
pub fn launch_template_name(data: &LaunchTemplateData, tags: &Tags) -> String {
    format!(
        "{LAUNCH_TEMPLATE_NAME_PREFIX}/{}",
        stable_hash(&format!("{data:?}{tags:?}"))
    )
}

fn volume_type(volume_type: VolumeType) -> &'static str {
    match volume_type {
        VolumeType::Standard => "standard",
        VolumeType::Io1 => "io1",
        VolumeType::Io2 => "io2",
        VolumeType::Gp2 => "gp2",
        VolumeType::Sc1 => "sc1",
        VolumeType::St1 => "st1",
        VolumeType::Gp3 => "gp3",
    }
}

/// The class's block devices (or the family's defaults) as EC2 takes them; sizes round up to
/// whole GiB. Errors name the class `nodeclass` and the field.
pub(crate) fn block_devices(
    nodeclass: &str,
    mappings: &[BlockDeviceMapping],
) -> Result<Vec<LaunchBlockDevice>, LaunchTemplateError> {
    let invalid = |index: usize, field: &str, message: String| LaunchTemplateError::BlockDevice {
        nodeclass: nodeclass.to_owned(),
        field: format!("spec.blockDeviceMappings[{index}].{field}"),
        message,
    };
    let to_i32 = |index: usize, field: &str, value: Option<i64>| {
        value
            .map(|v| {
                i32::try_from(v).map_err(|_| invalid(index, field, format!("{v} is out of range")))
            })
            .transpose()
    };
    mappings
        .iter()
        .enumerate()
        .map(|(index, mapping)| {
            let ebs = mapping.ebs.clone().unwrap_or_default();
            let volume_size_gib = ebs
                .volume_size
                .as_deref()
                .map(|size| {
                    let bytes = resources::parse_units(size)
                        .map_err(|e| invalid(index, "ebs.volumeSize", e.to_string()))?;
                    i32::try_from((bytes + GIB - 1) / GIB).map_err(|_| {
                        invalid(index, "ebs.volumeSize", format!("{size} is too large"))
                    })
                })
                .transpose()?;
            Ok(LaunchBlockDevice {
                device_name: mapping.device_name.clone().unwrap_or_default(),
                volume_size_gib,
                volume_type: ebs.volume_type.map(|t| volume_type(t).to_owned()),
                iops: to_i32(index, "ebs.iops", ebs.iops)?,
                throughput: to_i32(index, "ebs.throughput", ebs.throughput)?,
                encrypted: ebs.encrypted,
                kms_key_id: ebs.kms_key_id,
                delete_on_termination: ebs.delete_on_termination,
                snapshot_id: ebs.snapshot_id,
                volume_initialization_rate: ebs.volume_initialization_rate,
            })
        })
        .collect()
}

fn toggle(value: Toggle) -> &'static str {
    match value {
        Toggle::Enabled => "enabled",
        Toggle::Disabled => "disabled",
    }
}

/// The class's instance metadata options as EC2 takes them.
pub(crate) fn metadata_options(options: &MetadataOptions) -> LaunchMetadataOptions {
    LaunchMetadataOptions {
        http_endpoint: toggle(options.http_endpoint).to_owned(),
        http_tokens: match options.http_tokens {
            HttpTokens::Required => "required",
            HttpTokens::Optional => "optional",
        }
        .to_owned(),
        http_put_response_hop_limit: i32::try_from(options.http_put_response_hop_limit)
            .unwrap_or(1),
        http_protocol_ipv6: toggle(options.http_protocol_ipv6).to_owned(),
    }
}

/// Network interfaces: one EFA interface per network card when the group uses EFA (only the
/// first on device 0), else one interface when a public IP or IPv6 must be set on it, else none
/// (security groups then go on the template). Karpenter always writes the one interface; EC2
/// treats both forms alike.
fn network_interfaces(
    efa_count: i64,
    security_groups: &[String],
    associate_public_ip_address: Option<bool>,
    ipv6: bool,
) -> Vec<LaunchNetworkInterface> {
    let interface = |card: i32| LaunchNetworkInterface {
        device_index: i32::from(card != 0),
        network_card_index: Some(card),
        efa: true,
        security_group_ids: security_groups.to_vec(),
        associate_public_ip_address,
        primary_ipv6: ipv6,
    };
    if efa_count > 0 {
        let cards = i32::try_from(efa_count).unwrap_or(i32::MAX);
        return (0..cards).map(interface).collect();
    }
    if associate_public_ip_address.is_some() || ipv6 {
        return vec![LaunchNetworkInterface {
            device_index: 0,
            network_card_index: None,
            efa: false,
            security_group_ids: security_groups.to_vec(),
            associate_public_ip_address,
            primary_ipv6: ipv6,
        }];
    }
    Vec::new()
}

/// The groups of a launch: (AMI, max pods, EFA count) with their instance types, in the order
/// the AMI mapping and the types give.
type Group = (String, i64, i64, Vec<Arc<InstanceType>>);

fn groups(input: &LaunchInput<'_>) -> Result<Vec<Group>, LaunchTemplateError> {
    let name = nodeclass_name(input.nodeclass);
    let amis = input
        .nodeclass
        .status
        .as_ref()
        .map(|s| s.amis.as_slice())
        .unwrap_or_default();
    if amis.is_empty() {
        return Err(LaunchTemplateError::NoAmis { nodeclass: name });
    }
    let mapped = map_to_instance_types(input.instance_types, amis).map_err(|source| {
        LaunchTemplateError::AmiRequirements {
            nodeclass: name.clone(),
            source,
        }
    })?;
    if mapped.is_empty() {
        let mut ids: Vec<String> = amis.iter().map(|a| a.id.clone()).collect();
        ids.dedup();
        return Err(LaunchTemplateError::NoCompatibleAmi {
            nodeclass: name,
            amis: ids,
        });
    }
    let efa_requested = input
        .nodeclaim
        .spec
        .resources
        .requests
        .contains_key(labels::RESOURCE_EFA);
    let mut out: Vec<Group> = Vec::new();
    for (ami, types) in mapped {
        for it in types {
            let max_pods = it.capacity.pods;
            let efa = if efa_requested {
                it.capacity.get(labels::RESOURCE_EFA)
            } else {
                0
            };
            match out
                .iter_mut()
                .find(|(a, p, e, _)| *a == ami && *p == max_pods && *e == efa)
            {
                Some(group) => group.3.push(it),
                None => out.push((ami.clone(), max_pods, efa, vec![it])),
            }
        }
    }
    Ok(out)
}

/// What every template of a launch shares: the class's groups, profile and volumes, the
/// kubelet labels and taints.
struct Common {
    security_groups: Vec<String>,
    instance_profile: String,
    labels: std::collections::BTreeMap<String, String>,
    taints: Vec<karpenter_core::apis::taints::Taint>,
    block_device_mappings: Vec<LaunchBlockDevice>,
}

fn common(input: &LaunchInput<'_>) -> Result<Common, LaunchTemplateError> {
    let nodeclass = input.nodeclass;
    let name = nodeclass_name(nodeclass);
    let status = nodeclass.status.clone().unwrap_or_default();
    let security_groups: Vec<String> = status
        .security_groups
        .iter()
        .map(|g| g.id.clone())
        .collect();
    if security_groups.is_empty() {
        return Err(LaunchTemplateError::NoSecurityGroups { nodeclass: name });
    }
    let Some(instance_profile) = status.instance_profile.clone().filter(|p| !p.is_empty()) else {
        return Err(LaunchTemplateError::NoInstanceProfile { nodeclass: name });
    };
    let requirements: Vec<ApiRequirement> = input
        .nodeclaim
        .spec
        .requirements
        .iter()
        .cloned()
        .map(ApiRequirement::from)
        .collect();
    let labels = userdata::launch_labels(
        &input.nodeclaim.metadata.labels.clone().unwrap_or_default(),
        &requirements,
        input.capacity_type.as_str(),
    );
    let taints = input
        .nodeclaim
        .spec
        .taints
        .iter()
        .chain(&input.nodeclaim.spec.startup_taints)
        .cloned()
        .collect();
    let spec = &nodeclass.spec;
    let mappings = if spec.block_device_mappings.is_empty() {
        amifamily::default_block_device_mappings(ami_family(spec))
    } else {
        spec.block_device_mappings.clone()
    };
    Ok(Common {
        security_groups,
        instance_profile,
        labels,
        taints,
        block_device_mappings: block_devices(&nodeclass_name(nodeclass), &mappings)?,
    })
}

/// The launch templates a launch needs, each with its instance types (pure).
pub fn resolve(
    input: &LaunchInput<'_>,
    cluster: &ClusterInfo,
) -> Result<Vec<ResolvedLaunchTemplate>, LaunchTemplateError> {
    let common = common(input)?;
    let spec = &input.nodeclass.spec;
    let family = ami_family(spec);
    let ipv6 = cluster.dns_ips.first().is_some_and(IpAddr::is_ipv6);
    let mut out = Vec::new();
    for (image_id, max_pods, efa_count, instance_types) in groups(input)? {
        let user_data = userdata::render(
            family,
            &UserDataInput {
                cluster: cluster.clone(),
                kubelet: spec.kubelet.clone().unwrap_or_default(),
                max_pods: i32::try_from(max_pods).unwrap_or(i32::MAX),
                labels: common.labels.clone(),
                taints: common.taints.clone(),
                instance_store_policy: spec.instance_store_policy,
                user_data: spec.user_data.clone(),
            },
        )
        .map_err(|source| LaunchTemplateError::UserData {
            nodeclass: nodeclass_name(input.nodeclass),
            source,
        })?;
        let interfaces = network_interfaces(
            efa_count,
            &common.security_groups,
            spec.associate_public_ip_address,
            ipv6,
        );
        let data = LaunchTemplateData {
            image_id: Some(image_id.clone()),
            user_data: Some(user_data.to_base64()),
            instance_profile_name: Some(common.instance_profile.clone()),
            security_group_ids: if interfaces.is_empty() {
                common.security_groups.clone()
            } else {
                Vec::new()
            },
            block_device_mappings: common.block_device_mappings.clone(),
            metadata_options: Some(metadata_options(&spec.metadata_options)),
            detailed_monitoring: spec.detailed_monitoring.unwrap_or(false),
            associate_public_ip_address: spec.associate_public_ip_address,
            instance_tags: Tags::new(),
            network_interfaces: interfaces,
            network_interface_tags: input.tags.clone(),
            spot_request_tags: if input.capacity_type == CapacityType::Spot {
                input.tags.clone()
            } else {
                Tags::new()
            },
        };
        let template_name = launch_template_name(&data, input.tags);
        out.push(ResolvedLaunchTemplate {
            name: template_name.clone(),
            image_id,
            max_pods,
            efa_count,
            instance_types,
            request: CreateLaunchTemplateRequest {
                name: template_name,
                data,
                tags: input.tags.clone(),
                dry_run: false,
            },
        });
    }
    Ok(out)
}

/// What the provider is built from.
#[derive(Debug, Clone)]
pub struct LaunchTemplateDeps {
    pub ec2: Arc<dyn Ec2Api>,
    /// Cluster facts for user data; `name` is also the `eks:eks-cluster-name` tag value.
    pub cluster: ClusterInfo,
}

#[derive(Debug, Clone)]
struct Cached {
    id: String,
    expires: Instant,
}

/// Ensures, caches and deletes launch templates.
#[derive(Debug)]
pub struct LaunchTemplateProvider {
    ec2: Arc<dyn Ec2Api>,
    cluster: RwLock<ClusterInfo>,
    cache: Mutex<HashMap<String, Cached>>,
    /// Held while ensuring, so concurrent launches create each template once.
    ensuring: tokio::sync::Mutex<()>,
}

impl LaunchTemplateProvider {
    #[must_use]
    pub fn new(deps: LaunchTemplateDeps) -> Self {
        LaunchTemplateProvider {
            ec2: deps.ec2,
            cluster: RwLock::new(deps.cluster),
            cache: Mutex::new(HashMap::new()),
            ensuring: tokio::sync::Mutex::new(()),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cached>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cluster facts user data is rendered with.
    #[must_use]
    pub fn cluster(&self) -> ClusterInfo {
        self.cluster
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the cluster facts (for example once the service CIDR is discovered).
    pub fn set_cluster(&self, cluster: ClusterInfo) {
        *self.cluster.write().unwrap_or_else(PoisonError::into_inner) = cluster;
    }

    /// The launch templates of a launch, each made sure to exist in EC2.
    pub async fn ensure_all(
        &self,
        input: &LaunchInput<'_>,
    ) -> Result<Vec<ResolvedLaunchTemplate>, LaunchTemplateError> {
        let resolved = resolve(input, &self.cluster())?;
        let _ensuring = self.ensuring.lock().await;
        for template in &resolved {
            self.ensure(&template.request).await?;
        }
        Ok(resolved)
    }

    /// A cache hit refreshes the entry's TTL; a miss finds or creates the template.
    async fn ensure(
        &self,
        request: &CreateLaunchTemplateRequest,
    ) -> Result<(), LaunchTemplateError> {
        let name = &request.name;
        if let Some(entry) = self.cache().get_mut(name) {
            entry.expires = Instant::now() + LAUNCH_TEMPLATE_TTL;
            return Ok(());
        }
        let template = match self.describe(name).await? {
            Some(found) => found,
            None => match self.ec2.create_launch_template(request).await {
                Ok(created) => {
                    tracing::debug!(
                        "launch-template-name" = %name,
                        id = %created.id,
                        "created launch template"
                    );
                    created
                }
                // Made meanwhile by another controller: use it.
                Err(error) if error.class == AwsErrorClass::AlreadyExists => self
                    .describe(name)
                    .await?
                    .ok_or_else(|| LaunchTemplateError::Aws {
                        operation: "creating",
                        name: name.clone(),
                        source: Box::new(error),
                    })?,
                Err(source) => {
                    return Err(LaunchTemplateError::Aws {
                        operation: "creating",
                        name: name.clone(),
                        source: Box::new(source),
                    });
                }
            },
        };
        self.remember(&template);
        Ok(())
    }

    async fn describe(&self, name: &str) -> Result<Option<LaunchTemplate>, LaunchTemplateError> {
        match self
            .ec2
            .describe_launch_templates(&DescribeLaunchTemplatesRequest {
                names: vec![name.to_owned()],
                filters: Vec::new(),
            })
            .await
        {
            Ok(found) => Ok(found.into_iter().find(|t| t.name == name)),
            Err(error) if error.is_not_found() => Ok(None),
            Err(source) => Err(LaunchTemplateError::Aws {
                operation: "describing",
                name: name.to_owned(),
                source: Box::new(source),
            }),
        }
    }

    fn remember(&self, template: &LaunchTemplate) {
        self.cache().insert(
            template.name.clone(),
            Cached {
                id: template.id.clone(),
                expires: Instant::now() + LAUNCH_TEMPLATE_TTL,
            },
        );
    }

    /// Forgets a template that EC2 says does not exist, so the next launch re-creates it.
    pub fn invalidate(&self, name: &str) {
        tracing::debug!(
            "launch-template-name" = %name,
            "invalidating launch template in the cache because it no longer exists"
        );
        self.cache().remove(name);
    }

    /// The cached template names (for tests and debugging).
    #[must_use]
    pub fn cached(&self) -> Vec<String> {
        let mut names: Vec<String> = self.cache().keys().cloned().collect();
        names.sort();
        names
    }

    /// Deletes, in EC2, the templates whose TTL passed; returns how many went.
    pub async fn evict_expired(&self) -> usize {
        let now = Instant::now();
        let expired: Vec<(String, Cached)> = {
            let mut cache = self.cache();
            let names: Vec<String> = cache
                .iter()
                .filter(|(_, c)| c.expires <= now)
                .map(|(n, _)| n.clone())
                .collect();
            names
                .into_iter()
                .filter_map(|n| cache.remove(&n).map(|c| (n, c)))
                .collect()
        };
        let mut deleted = 0;
        for (name, cached) in expired {
            match self
                .ec2
                .delete_launch_template(&LaunchTemplateRef::Id(cached.id.clone()))
                .await
            {
                Ok(()) => {
                    deleted += 1;
                    tracing::debug!(
                        "launch-template-name" = %name,
                        id = %cached.id,
                        "deleted launch template"
                    );
                }
                Err(error) if error.is_not_found() => {}
                Err(error) => {
                    tracing::error!(
                        "launch-template-name" = %name,
                        error = crate::logs::err(&error),
                        "failed deleting launch template"
                    );
                }
            }
        }
        deleted
    }

    /// Loads the cluster's templates (tagged `eks:eks-cluster-name`) into the cache, so those
    /// left by a previous run expire and are deleted; call once when elected leader.
    pub async fn hydrate(&self) -> Result<usize, AwsError> {
        let cluster = self.cluster().name;
        let found = self
            .ec2
            .describe_launch_templates(&DescribeLaunchTemplatesRequest {
                names: Vec::new(),
                filters: vec![Filter::tag(labels::TAG_EKS_CLUSTER_NAME, &[&cluster])],
            })
            .await?;
        for template in &found {
            self.remember(template);
        }
        Ok(found.len())
    }

    /// Deletes every template of the cluster made for this `EC2NodeClass` (its deletion);
    /// returns how many went. Every template is tried; the first failure is returned.
    pub async fn delete_all(&self, nodeclass: &str) -> Result<usize, LaunchTemplateError> {
        let cluster = self.cluster().name;
        let found = self
            .ec2
            .describe_launch_templates(&DescribeLaunchTemplatesRequest {
                names: Vec::new(),
                filters: vec![
                    Filter::tag(labels::TAG_EKS_CLUSTER_NAME, &[&cluster]),
                    Filter::tag(labels::TAG_EC2NODECLASS, &[nodeclass]),
                ],
            })
            .await
            .map_err(|source| LaunchTemplateError::Aws {
                operation: "listing",
                name: format!("{LAUNCH_TEMPLATE_NAME_PREFIX}/* of ec2nodeclass {nodeclass}"),
                source: Box::new(source),
            })?;
        let mut first_error = None;
        let mut deleted = 0;
        for template in found {
            self.cache().remove(&template.name);
            match self
                .ec2
                .delete_launch_template(&LaunchTemplateRef::Name(template.name.clone()))
                .await
            {
                Ok(()) => deleted += 1,
                Err(error) if error.is_not_found() => {}
                Err(source) => {
                    first_error.get_or_insert(LaunchTemplateError::Aws {
                        operation: "deleting",
                        name: template.name,
                        source: Box::new(source),
                    });
                }
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(deleted),
        }
    }
}

/// Sweep the cache now: delete the templates whose TTL passed; replies how many went.
#[derive(Debug)]
pub struct Sweep;

impl Mail for Sweep {
    type Reply = usize;
    const NAME: &'static str = "Sweep";
}

/// The janitor's own timer: a sweep, and the next timer.
#[derive(Debug)]
pub struct SweepTick;

impl Mail for SweepTick {
    type Reply = ();
    const NAME: &'static str = "SweepTick";
}

/// The launch-template cache's janitor: every [`JANITOR_PERIOD`] it deletes, in EC2, the
/// templates no launch used for [`LAUNCH_TEMPLATE_TTL`]. A sweep that fails on one template
/// logs it and goes on; the template is tried again when it is cached and expires again.
#[derive(Debug)]
pub struct LaunchTemplateJanitorActor {
    templates: Arc<LaunchTemplateProvider>,
}

impl LaunchTemplateJanitorActor {
    /// Its key in the AWS group.
    pub const KEY: &'static str = "launch-templates";

    /// Starts the janitor of `templates` under `group`.
    pub fn start(
        group: &GroupRef,
        templates: &Arc<LaunchTemplateProvider>,
    ) -> Result<ActorRef<Self>, SpawnError> {
        group.spawn::<Self>(Self::KEY, Arc::clone(templates))
    }
}

impl Supervised for LaunchTemplateJanitorActor {
    const KIND: &'static str = "LaunchTemplateJanitorActor";
    // Its own timer and an occasional sweep asked for by a test or an operator.
    const MAILBOX_CAPACITY: usize = 4;
    type Deps = Arc<LaunchTemplateProvider>;

    fn build(_key: &str, templates: &Arc<LaunchTemplateProvider>) -> Result<Self, ActorError> {
        Ok(Self {
            templates: Arc::clone(templates),
        })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.set_state("waiting");
        ctx.send_after(JANITOR_PERIOD, SweepTick);
        Ok(())
    }
}

impl LaunchTemplateJanitorActor {
    async fn sweep(&self, ctx: &ActorCtx<Self>) -> usize {
        ctx.set_state("sweeping");
        let deleted = self.templates.evict_expired().await;
        ctx.set_state("waiting");
        deleted
    }
}

impl Handles<Sweep> for LaunchTemplateJanitorActor {
    async fn handle(&mut self, _: Sweep, ctx: &mut ActorCtx<Self>) -> Result<usize, ActorError> {
        Ok(self.sweep(ctx).await)
    }
}

impl Handles<SweepTick> for LaunchTemplateJanitorActor {
    async fn handle(&mut self, _: SweepTick, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        self.sweep(ctx).await;
        ctx.send_after(JANITOR_PERIOD, SweepTick);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use karpenter_core::apis::ec2nodeclass::{
        Ami, AmiRequirement, EC2NodeClassStatus, SecurityGroup,
    };
    use karpenter_core::domain::instance_type::Overhead;
    use karpenter_core::domain::requirements::{Requirement, Requirements};
    use karpenter_core::domain::resources::Resources;

    fn it(name: &str, arch: &str, pods: i64, efa: i64) -> Arc<InstanceType> {
        let mut capacity = Resources::core(2000, 8 << 30, pods);
        capacity.set(labels::RESOURCE_EFA, efa);
        Arc::new(InstanceType::new(
            name,
            Requirements::from_requirements([
                Requirement::in_values(labels::INSTANCE_TYPE, &[name]),
                Requirement::in_values(labels::ARCH, &[arch]),
            ]),
            Vec::new(),
            capacity,
            Overhead::default(),
        ))
    }

    fn class(spec: &serde_json::Value) -> EC2NodeClass {
        let mut spec_json = serde_json::json!({
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "node",
        });
        if let (Some(base), Some(extra)) = (spec_json.as_object_mut(), spec.as_object()) {
            base.extend(extra.clone());
        }
        let mut class =
            EC2NodeClass::new("default", serde_json::from_value(spec_json).expect("spec"));
        let ami = |id: &str, arch: &str| Ami {
            id: id.into(),
            name: None,
            deprecated: None,
            requirements: vec![AmiRequirement {
                key: labels::ARCH.into(),
                operator: "In".into(),
                values: vec![arch.into()],
            }],
        };
        class.status = Some(EC2NodeClassStatus {
            security_groups: vec![SecurityGroup {
                id: "sg-1".into(),
                name: None,
            }],
            amis: vec![ami("ami-x86", "amd64"), ami("ami-arm", "arm64")],
            instance_profile: Some("profile".into()),
            ..EC2NodeClassStatus::default()
        });
        class
    }

    fn claim(requests: &serde_json::Value) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "c", "labels": {labels::NODEPOOL: "default"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
                "resources": {"requests": requests},
            },
        }))
        .expect("nodeclaim")
    }

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            name: "test".into(),
            endpoint: "https://test".into(),
            ca_bundle: None,
            dns_ips: vec!["10.100.0.10".parse().expect("ip")],
            service_cidr: Some("10.100.0.0/16".into()),
        }
    }

    fn resolve_for(
        class: &EC2NodeClass,
        claim: &NodeClaim,
        types: &[Arc<InstanceType>],
    ) -> Result<Vec<ResolvedLaunchTemplate>, LaunchTemplateError> {
        resolve(
            &LaunchInput {
                nodeclass: class,
                nodeclaim: claim,
                instance_types: types,
                capacity_type: CapacityType::OnDemand,
                tags: &Tags::from([(labels::TAG_EC2NODECLASS.to_owned(), "default".to_owned())]),
            },
            &cluster(),
        )
    }

    #[test]
    fn instance_types_group_by_ami_and_max_pods_with_one_template_each() {
        let types = [
            it("m5.large", "amd64", 29, 0),
            it("c5.large", "amd64", 29, 0),
            it("m5.xlarge", "amd64", 58, 0),
            it("m7g.large", "arm64", 29, 0),
        ];
        let resolved = resolve_for(
            &class(&serde_json::json!({})),
            &claim(&serde_json::json!({})),
            &types,
        )
        .expect("resolves");
        let groups: Vec<(&str, i64, Vec<&str>)> = resolved
            .iter()
            .map(|t| {
                (
                    t.image_id.as_str(),
                    t.max_pods,
                    t.instance_types.iter().map(|i| i.name.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            groups,
            [
                ("ami-x86", 29, vec!["m5.large", "c5.large"]),
                ("ami-x86", 58, vec!["m5.xlarge"]),
                ("ami-arm", 29, vec!["m7g.large"]),
            ]
        );
        let names: BTreeSet<&str> = resolved.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names.len(), 3, "distinct configurations get distinct names");
        // Resolving again names the same templates.
        let again = resolve_for(
            &class(&serde_json::json!({})),
            &claim(&serde_json::json!({})),
            &types,
        )
        .expect("resolves");
        assert_eq!(again[0].name, resolved[0].name);
        let data = &resolved[0].request.data;
        assert_eq!(data.security_group_ids, ["sg-1"]);
        assert!(data.network_interfaces.is_empty());
        assert_eq!(
            resolved[0].request.tags[labels::TAG_EC2NODECLASS],
            "default"
        );
    }

    #[test]
    fn requested_efa_puts_one_efa_interface_per_card_and_the_groups_on_them() {
        let types = [
            it("p5.48xlarge", "amd64", 100, 2),
            it("m5.large", "amd64", 100, 0),
        ];
        let resolved = resolve_for(
            &class(&serde_json::json!({})),
            &claim(&serde_json::json!({labels::RESOURCE_EFA: "1"})),
            &types,
        )
        .expect("resolves");
        assert_eq!(resolved.len(), 2, "EFA counts split the templates");
        let efa = resolved
            .iter()
            .find(|t| t.efa_count == 2)
            .expect("efa group");
        let interfaces = &efa.request.data.network_interfaces;
        assert_eq!(interfaces.len(), 2);
        assert!(
            interfaces
                .iter()
                .all(|i| i.efa && i.security_group_ids == ["sg-1"])
        );
        assert_eq!(
            (interfaces[0].device_index, interfaces[1].device_index),
            (0, 1)
        );
        assert!(efa.request.data.security_group_ids.is_empty());
        // Without an EFA request, the same types share a template.
        let plain = resolve_for(
            &class(&serde_json::json!({})),
            &claim(&serde_json::json!({})),
            &types,
        )
        .expect("resolves");
        assert_eq!(plain.len(), 1);
    }

    #[test]
    fn block_devices_carry_every_ebs_field_and_bottlerocket_gets_its_two_volumes() {
        let types = [it("m5.large", "amd64", 29, 0)];
        let with_volumes = class(&serde_json::json!({
            "associatePublicIPAddress": true,
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {
                "volumeSize": "100G", "volumeType": "io2", "iops": 3000, "throughput": 125,
                "encrypted": true, "kmsKeyID": "key", "deleteOnTermination": false,
                "snapshotID": "snap-1", "volumeInitializationRate": 150}}],
        }));
        let resolved =
            resolve_for(&with_volumes, &claim(&serde_json::json!({})), &types).expect("resolves");
        let data = &resolved[0].request.data;
        assert_eq!(
            data.block_device_mappings,
            [LaunchBlockDevice {
                device_name: "/dev/xvda".into(),
                // 100 GB is 93.1 GiB: rounded up.
                volume_size_gib: Some(94),
                volume_type: Some("io2".into()),
                iops: Some(3000),
                throughput: Some(125),
                encrypted: Some(true),
                kms_key_id: Some("key".into()),
                delete_on_termination: Some(false),
                snapshot_id: Some("snap-1".into()),
                volume_initialization_rate: Some(150),
            }]
        );
        assert_eq!(
            data.network_interfaces.len(),
            1,
            "a public IP needs the interface"
        );
        assert_eq!(
            data.network_interfaces[0].associate_public_ip_address,
            Some(true)
        );

        let bottlerocket = class(&serde_json::json!({
            "amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
        }));
        let resolved =
            resolve_for(&bottlerocket, &claim(&serde_json::json!({})), &types).expect("resolves");
        let devices: Vec<(&str, Option<i32>)> = resolved[0]
            .request
            .data
            .block_device_mappings
            .iter()
            .map(|d| (d.device_name.as_str(), d.volume_size_gib))
            .collect();
        assert_eq!(devices, [("/dev/xvda", Some(4)), ("/dev/xvdb", Some(20))]);
    }

    #[test]
    fn unusable_classes_fail_with_the_field_or_the_missing_status() {
        let types = [it("m5.large", "amd64", 29, 0)];
        let mut no_groups = class(&serde_json::json!({}));
        if let Some(status) = no_groups.status.as_mut() {
            status.security_groups.clear();
        }
        assert!(matches!(
            resolve_for(&no_groups, &claim(&serde_json::json!({})), &types),
            Err(LaunchTemplateError::NoSecurityGroups { .. })
        ));
        let huge = class(&serde_json::json!({
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi", "iops": 99_999_999_999_i64}}],
        }));
        let error =
            resolve_for(&huge, &claim(&serde_json::json!({})), &types).expect_err("refused");
        assert_eq!(error.category(), "invalid_block_device");
        assert!(
            error
                .to_string()
                .contains("spec.blockDeviceMappings[0].ebs.iops"),
            "{error}"
        );
        let bad_toml = class(&serde_json::json!({
            "amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
            "userData": "[settings.kubernetes\nbroken",
        }));
        let error =
            resolve_for(&bad_toml, &claim(&serde_json::json!({})), &types).expect_err("refused");
        assert!(
            matches!(error, LaunchTemplateError::UserData { .. }),
            "{error:?}"
        );
        let s390 = [it("z.large", "s390x", 29, 0)];
        assert!(matches!(
            resolve_for(
                &class(&serde_json::json!({})),
                &claim(&serde_json::json!({})),
                &s390
            ),
            Err(LaunchTemplateError::NoCompatibleAmi { .. })
        ));
    }
}
