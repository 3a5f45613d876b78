//! `create`: a NodeClaim becomes an instance (see the parent module's docs for the flow).
//!
//! Before launching, the NodeClaim's launch group ([`launch_group`], its class's hash folded
//! in by [`launch_group_tag`]) is asked for an orphan to adopt: an instance launched for a
//! NodeClaim of the same group by a process that died before writing its provider id (see
//! `crate::nodeclaim::launch` for why a group, and `crate::providers::instances` for the
//! bookkeeping). It is taken when its type, zone and capacity type are allowed by the
//! NodeClaim's requirements and its allocatable fits the requests, the one the NodeClaim's own
//! labels describe first; the launch itself is tagged with the group.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::filter::LaunchCandidates;
use super::hydrate::{InstanceFacts, hydrate, provider_id};
use super::{AwsCloudProvider, readiness};
use crate::nodeclaim::launch::{launch_group, launch_group_tag};
use crate::ports::aws_error::{AwsError, AwsErrorClass};
use crate::ports::cloud_provider::CloudProviderError;
use crate::ports::ec2::{FleetLaunchTemplateConfig, Instance, Tags};
use crate::providers::instance_type_provider::InstanceTypes;
use crate::providers::instances::{
    Adoption, InstancesError, LaunchRequest, LaunchedInstance, capacity_type_for, overrides,
    with_capacity_type,
};
use crate::providers::launch_subnets::ZonalSubnet;
use crate::providers::launch_templates::{
    LaunchInput, LaunchTemplateError, ResolvedLaunchTemplate,
};
use karpenter_core::apis::conditions::{ConditionStatus, nodeclaim as reasons};
use karpenter_core::apis::nodeclaim::NodeClaim;
use karpenter_core::apis::requirements::Requirement as ApiRequirement;
use karpenter_core::apis::{EC2NodeClass, labels};
use karpenter_core::domain::instance_type::CapacityType;
use karpenter_core::domain::instance_type::InstanceType;
use karpenter_core::domain::requirements::{AllowUndefined, Requirements};
use karpenter_core::domain::resources::Resources;
use karpenter_core::domain::tags::{RestrictedTags, launch_tags};

/// Karpenter warns when an on-demand launch that could have been spot has fewer types than
/// this: spot was likely unavailable for lack of flexibility.
const INSTANCE_TYPE_FLEXIBILITY_THRESHOLD: usize = 5;
/// The `Launched` reason of a failure Karpenter has no specific reason for.
const REASON_LAUNCH_FAILED: &str = "LaunchFailed";

/// Karpenter's `ToReasonMessage`: a condition reason and message for an AWS failure.
#[must_use]
pub fn reason_message(error: &AwsError) -> (&'static str, &'static str) {
    let code = error.code.as_deref().unwrap_or_default();
    let text = error.message.as_str();
    let has = |needle: &str| code.contains(needle) || text.contains(needle);
    if error.class == AwsErrorClass::SpotServiceLinkedRoleMissing {
        return (
            reasons::REASON_SPOT_SLR_CREATION_FAILED,
            "User does not have sufficient permission to create the Spot ServiceLinkedRole to launch spot instances",
        );
    }
    if error.class == AwsErrorClass::Unauthorized || has("AuthFailure") {
        if text.contains("with an explicit deny in a permissions boundary") {
            return (
                "Unauthorized",
                "User is not authorized to perform this operation due to a permission boundary",
            );
        }
        if text.contains("with an explicit deny in a service control policy") {
            return (
                "Unauthorized",
                "User is not authorized to perform this operation due to a service control policy",
            );
        }
        return (
            "Unauthorized",
            "User is not authorized to perform this operation because no identity-based policy allows it",
        );
    }
    let table: [(&str, &str, &str); 9] = [
        (
            "iamInstanceProfile.name is invalid",
            "InstanceProfileNameInvalid",
            "Instance profile name used from EC2NodeClass status does not exist",
        ),
        (
            "InvalidLaunchTemplateId.NotFound",
            "LaunchTemplateNotFound",
            "Launch template used for instance launch wasn't found",
        ),
        (
            "InvalidAMIID.Malformed",
            "InvalidAMIID",
            "AMI used for instance launch is invalid",
        ),
        (
            "RequestLimitExceeded",
            "RequestLimitExceeded",
            "Request limit exceeded",
        ),
        (
            "InternalError",
            "InternalError",
            "An internal error has occurred",
        ),
        (
            "MaxFleetCountExceeded",
            "FleetQuotaExceeded",
            "A fleet launch was requested but this would exceed your fleet request quota",
        ),
        (
            "PendingVerification",
            "AccountPendingVerification",
            "An instance launch was requested but the request for launching resources in this region is still being verified",
        ),
        (
            "MaxSpotInstanceCountExceeded",
            "SpotQuotaExceeded",
            "A spot instance launch was requested but this would exceed your spot instance quota",
        ),
        (
            "VcpuLimitExceeded",
            "VCPULimitExceeded",
            "An instance was requested that would exceed your VCPU quota",
        ),
    ];
    if let Some((_, reason, message)) = table.iter().find(|(needle, _, _)| has(needle)) {
        return (reason, message);
    }
    if has("InsufficientFreeAddressesInSubnet") {
        return (
            "InsufficientFreeAddressesInSubnet",
            "There are not enough free IP addresses to launch an instance in this subnet",
        );
    }
    (REASON_LAUNCH_FAILED, "Instance launch failed")
}

fn create_error(reason: &str, message: String) -> CloudProviderError {
    CloudProviderError::Create {
        reason: reason.to_owned(),
        message,
    }
}

/// The NodeClaim's requirements in the domain's algebra.
pub(super) fn nodeclaim_requirements(
    nodeclaim: &NodeClaim,
) -> Result<Requirements, karpenter_core::domain::requirements::RequirementError> {
    let api: Vec<ApiRequirement> = nodeclaim
        .spec
        .requirements
        .iter()
        .cloned()
        .map(ApiRequirement::from)
        .collect();
    Requirements::from_api(&api)
}

/// The tags of a NodeClaim's instance: its class's and its NodePool's (Karpenter's `GetTags`).
fn nodeclaim_tags(
    nodeclass: &EC2NodeClass,
    nodeclaim: &NodeClaim,
    cluster_name: &str,
) -> Result<Tags, RestrictedTags> {
    let nodepool = nodeclaim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODEPOOL))
        .map_or("", String::as_str);
    launch_tags(
        &nodeclaim.spec.node_class_ref.name,
        &nodeclass.spec,
        cluster_name,
        nodepool,
    )
}

/// One attempt's failure: a launch template vanished (retried once), or a final error.
enum Attempt {
    TemplatesNotFound(Vec<String>, CloudProviderError),
    Failed(CloudProviderError),
}

/// Everything a launch attempt reads.
struct Launch<'a> {
    nodeclass: &'a EC2NodeClass,
    nodeclaim: &'a NodeClaim,
    name: &'a str,
    uid: &'a str,
    requirements: &'a Requirements,
    instance_types: &'a [Arc<InstanceType>],
    capacity_type: CapacityType,
    tags: &'a Tags,
    /// The [`crate::nodeclaim::launch::LAUNCH_GROUP`] tag of the launch.
    launch_group: &'a str,
}

/// Whether `instance` can serve a NodeClaim with these requirements and requests: its type is
/// one of the class's and compatible, it runs in an offering (zone, capacity type) the
/// requirements allow, and its allocatable fits the requests.
fn can_serve(
    instance: &Instance,
    instance_types: &[Arc<InstanceType>],
    requirements: &Requirements,
    requests: &Resources,
) -> bool {
    let Some(it) = instance_types
        .iter()
        .find(|it| it.name == instance.instance_type)
    else {
        return false;
    };
    requirements.is_compatible(&it.requirements, AllowUndefined::WellKnown)
        && it.offerings.iter().any(|offering| {
            offering.zone() == Some(instance.zone.as_str())
                && offering.capacity_type() == Some(instance.capacity_type.as_str())
                && offering.is_compatible(requirements)
        })
        && requests.fits_in(it.allocatable())
}

/// Karpenter's readiness gate: a class `Ready=False` ends the NodeClaim, `Unknown` retries.
fn ready_to_launch(nodeclass: &EC2NodeClass, class_name: &str) -> Result<(), CloudProviderError> {
    match readiness(nodeclass) {
        (ConditionStatus::True, _) => Ok(()),
        (ConditionStatus::False, _) => Err(CloudProviderError::NodeClassNotReady {
            nodeclass: class_name.to_owned(),
        }),
        (ConditionStatus::Unknown, message) => Err(create_error(
            reasons::REASON_NODE_CLASS_READINESS_UNKNOWN,
            format!("NodeClass is in Ready=Unknown, {message}"),
        )),
    }
}

/// The launch group tag of a NodeClaim's launches from this class.
fn group_tag(nodeclaim: &NodeClaim, nodeclass: &EC2NodeClass) -> String {
    launch_group_tag(
        &launch_group(nodeclaim),
        class_annotation(nodeclass, labels::EC2NODECLASS_HASH),
    )
}

fn class_annotation<'a>(nodeclass: &'a EC2NodeClass, key: &str) -> Option<&'a str> {
    nodeclass
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The class's hash annotations on the launched NodeClaim (Karpenter stamps them at launch).
fn stamp_class_hashes(created: &mut NodeClaim, nodeclass: &EC2NodeClass) {
    let annotations = created
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    for key in [labels::EC2NODECLASS_HASH, labels::EC2NODECLASS_HASH_VERSION] {
        if let Some(value) = class_annotation(nodeclass, key) {
            annotations.insert(key.to_owned(), value.to_owned());
        }
    }
}

/// Whether `instance` is the one the NodeClaim's labels describe (type and zone, when written).
fn described_by_labels(nodeclaim: &NodeClaim, instance: &Instance) -> bool {
    let claim_labels = nodeclaim.metadata.labels.as_ref();
    let label = |key: &str| claim_labels.and_then(|l| l.get(key));
    label(labels::INSTANCE_TYPE).is_some_and(|t| *t == instance.instance_type)
        && label(labels::ZONE).is_none_or(|z| *z == instance.zone)
}

fn template_error(error: &LaunchTemplateError) -> CloudProviderError {
    let message = match error.aws() {
        Some(aws) => {
            let (reason, message) = reason_message(aws);
            return create_error(
                reason,
                format!("Error getting launch template configs: {message} ({error})"),
            );
        }
        None => error.to_string(),
    };
    create_error(
        REASON_LAUNCH_FAILED,
        format!("Error getting launch template configs: {message}"),
    )
}

fn launch_error(nodeclaim: &str, error: InstancesError) -> CloudProviderError {
    match error {
        InstancesError::InsufficientCapacity { source, .. } => {
            CloudProviderError::InsufficientCapacity {
                nodeclaim: nodeclaim.to_owned(),
                message: source.to_string(),
            }
        }
        InstancesError::Launch { source, .. } | InstancesError::Aws(source) => {
            let (reason, message) = reason_message(&source);
            create_error(
                reason,
                format!("Error creating fleet request: {message} ({source})"),
            )
        }
        InstancesError::Adopt { source, .. } => {
            let (reason, message) = reason_message(&source);
            create_error(
                reason,
                format!(
                    "Error looking for instances launched before a restart: {message} ({source})"
                ),
            )
        }
        other => create_error(REASON_LAUNCH_FAILED, other.to_string()),
    }
}

impl AwsCloudProvider {
    pub(super) async fn create_nodeclaim(
        &self,
        nodeclaim: &NodeClaim,
    ) -> Result<NodeClaim, CloudProviderError> {
        let name = nodeclaim.metadata.name.clone().unwrap_or_default();
        let class_name = &nodeclaim.spec.node_class_ref.name;
        let Some(nodeclass) = self.nodeclass(class_name) else {
            // No capacity is possible without the class: the NodeClaim goes, as Karpenter does.
            return Err(CloudProviderError::InsufficientCapacity {
                nodeclaim: name,
                message: format!("resolving node class, ec2nodeclass {class_name:?} not found"),
            });
        };
        ready_to_launch(&nodeclass, class_name)?;
        let (requirements, requests, all, candidates) = self.candidates(&nodeclass, nodeclaim)?;
        let tags = nodeclaim_tags(&nodeclass, nodeclaim, &self.cluster_name).map_err(|error| {
            tracing::debug!(error = crate::logs::err(&error), "failed building tags");
            CloudProviderError::NodeClassNotReady {
                nodeclass: class_name.clone(),
            }
        })?;
        let uid = nodeclaim
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| name.clone());
        let group = group_tag(nodeclaim, &nodeclass);
        // A retried create finds the instance this NodeClaim already launched, and a NodeClaim
        // whose launch was lost with its process adopts what it launched (even when its
        // offering has since become unavailable).
        let instance = if let Some(instance) = self.providers.instances.launched(&uid) {
            instance
        } else if let Some(instance) = self
            .adopt(
                nodeclaim,
                &name,
                &uid,
                &group,
                &requirements,
                &requests,
                &all,
            )
            .await?
        {
            instance
        } else if candidates.instance_types.is_empty() {
            return Err(CloudProviderError::InsufficientCapacity {
                nodeclaim: name,
                message: "all requested instance types were unavailable during launch".to_owned(),
            });
        } else {
            let capacity_type = capacity_type_for(&requirements, &candidates.instance_types);
            let launch = Launch {
                nodeclass: &nodeclass,
                nodeclaim,
                name: &name,
                uid: &uid,
                requirements: &requirements,
                instance_types: &candidates.instance_types,
                capacity_type,
                tags: &tags,
                launch_group: &group,
            };
            self.launch(&launch).await?
        };
        let instance_type = candidates
            .instance_types
            .iter()
            .chain(all.iter())
            .find(|it| it.name == instance.instance_type)
            .cloned();
        let mut created = nodeclaim.clone();
        let facts = InstanceFacts {
            id: &instance.id,
            zone: &instance.zone,
            image_id: instance.image_id.as_deref(),
            capacity_type: instance.capacity_type,
            nodepool: tags.get(labels::TAG_NODEPOOL).map(String::as_str),
            efa: nodeclaim
                .spec
                .resources
                .requests
                .contains_key(labels::RESOURCE_EFA),
            reservation_id: None,
        };
        hydrate(
            &mut created,
            &facts,
            instance_type.as_deref(),
            Some(&nodeclass),
        );
        stamp_class_hashes(&mut created, &nodeclass);
        Ok(created)
    }

    /// An orphan of the NodeClaim's launch group it can use (see the module docs).
    #[expect(
        clippy::too_many_arguments,
        reason = "what the create path resolved, passed on rather than resolved twice"
    )]
    async fn adopt(
        &self,
        nodeclaim: &NodeClaim,
        name: &str,
        uid: &str,
        group: &str,
        requirements: &Requirements,
        requests: &Resources,
        instance_types: &[Arc<InstanceType>],
    ) -> Result<Option<LaunchedInstance>, CloudProviderError> {
        let accepts =
            |instance: &Instance| can_serve(instance, instance_types, requirements, requests);
        let prefers = |instance: &Instance| described_by_labels(nodeclaim, instance);
        let owned = |instance: &Instance| {
            self.view
                .nodeclaim_by_provider_id(&provider_id(&instance.zone, &instance.id))
                .is_some()
        };
        self.providers
            .instances
            .adopt(&Adoption {
                nodeclaim: name,
                nodeclaim_uid: uid,
                launch_group: group,
                accepts: &accepts,
                prefers: &prefers,
                owned: &owned,
            })
            .await
            .map_err(|error| launch_error(name, error))
    }

    /// The class's instance types and the NodeClaim's launch candidates among them.
    fn candidates(
        &self,
        nodeclass: &EC2NodeClass,
        nodeclaim: &NodeClaim,
    ) -> Result<
        (
            Requirements,
            Resources,
            InstanceTypes,
            Arc<LaunchCandidates>,
        ),
        CloudProviderError,
    > {
        let resolution_failed = |message: String| {
            create_error(
                reasons::REASON_INSTANCE_TYPE_RESOLUTION_FAILED,
                format!("Error resolving instance types: {message}"),
            )
        };
        let requirements =
            nodeclaim_requirements(nodeclaim).map_err(|e| resolution_failed(e.to_string()))?;
        let requests = Resources::from_requests(&nodeclaim.spec.resources.requests)
            .map_err(|e| resolution_failed(e.to_string()))?;
        let all = self
            .providers
            .instance_types
            .list_for(nodeclass)
            .map_err(|e| resolution_failed(e.to_string()))?;
        let candidates = self
            .candidates
            .candidates(&all, &requirements, &requests)
            .map_err(|e| {
                create_error(
                    reasons::REASON_INSTANCE_TYPE_FILTERING_FAILED,
                    format!(
                        "Error truncating instance types based on the passed-in requirements: {e}"
                    ),
                )
            })?;
        if !candidates.rejected.is_empty() {
            tracing::debug!(
                "instance-types" = %candidates.rejected.join(", "),
                "filtered out instance types from launch"
            );
        }
        Ok((requirements, requests, all, candidates))
    }

    /// Launches, retrying once when a launch template vanished (its cache entry is dropped so
    /// the retry re-creates it).
    async fn launch(&self, launch: &Launch<'_>) -> Result<LaunchedInstance, CloudProviderError> {
        match self.launch_once(launch).await {
            Ok(instance) => Ok(instance),
            Err(Attempt::Failed(error)) => Err(error),
            Err(Attempt::TemplatesNotFound(names, _)) => {
                for name in &names {
                    self.providers.launch_templates.invalidate(name);
                }
                match self.launch_once(launch).await {
                    Ok(instance) => Ok(instance),
                    Err(Attempt::Failed(error) | Attempt::TemplatesNotFound(_, error)) => {
                        Err(error)
                    }
                }
            }
        }
    }

    async fn launch_once(&self, launch: &Launch<'_>) -> Result<LaunchedInstance, Attempt> {
        let providers = &self.providers;
        let zonal: BTreeMap<String, ZonalSubnet> = providers
            .subnets
            .zonal_subnets_for_launch(
                launch.nodeclass,
                launch.instance_types,
                launch.capacity_type,
            )
            .await
            .map_err(|e| {
                Attempt::Failed(create_error(
                    reasons::REASON_SUBNET_RESOLUTION_FAILED,
                    format!("Error getting subnets: {e}"),
                ))
            })?;
        let templates = providers
            .launch_templates
            .ensure_all(&LaunchInput {
                nodeclass: launch.nodeclass,
                nodeclaim: launch.nodeclaim,
                instance_types: launch.instance_types,
                capacity_type: launch.capacity_type,
                tags: launch.tags,
            })
            .await
            .map_err(|e| Attempt::Failed(template_error(&e)))?;
        Self::check_on_demand_fallback(launch);
        let subnet_ids: BTreeMap<String, String> = zonal
            .iter()
            .map(|(zone, subnet)| (zone.clone(), subnet.id.clone()))
            .collect();
        let pinned = with_capacity_type(launch.requirements, launch.capacity_type);
        let configs: Vec<FleetLaunchTemplateConfig> = templates
            .iter()
            .map(|template| FleetLaunchTemplateConfig {
                launch_template_name: template.name.clone(),
                version: "$Latest".to_owned(),
                overrides: overrides(
                    &template.instance_types,
                    &subnet_ids,
                    &pinned,
                    Some(&template.image_id),
                ),
            })
            .collect();
        let request = LaunchRequest {
            nodeclaim: launch.name.to_owned(),
            nodeclaim_uid: launch.uid.to_owned(),
            capacity_type: launch.capacity_type,
            launch_templates: configs,
            tags: launch.tags.clone(),
            context: launch.nodeclass.spec.context.clone(),
            launch_group: Some(launch.launch_group.to_owned()),
        };
        let outcome = providers.instances.create(&request).await;
        providers.subnets.update_inflight(
            &zonal,
            outcome.as_ref().ok().map(|i| i.subnet_id.as_str()),
            launch.instance_types,
            launch.capacity_type,
        );
        match outcome {
            Ok(mut instance) => {
                if instance.image_id.is_none() {
                    instance.image_id = image_of(&templates, &instance.instance_type);
                }
                Ok(instance)
            }
            Err(InstancesError::Launch { source, .. }) if source.is_launch_template_not_found() => {
                let names = templates.iter().map(|t| t.name.clone()).collect();
                let error = create_error(
                    "LaunchTemplateNotFound",
                    format!("Launch templates not found when creating fleet request: {source}"),
                );
                Err(Attempt::TemplatesNotFound(names, error))
            }
            Err(error) => Err(Attempt::Failed(launch_error(launch.name, error))),
        }
    }

    /// Karpenter's `checkODFallback` warning.
    fn check_on_demand_fallback(launch: &Launch<'_>) {
        let spot_allowed = launch
            .requirements
            .get(labels::CAPACITY_TYPE)
            .is_none_or(|r| r.has(labels::CAPACITY_TYPE_SPOT));
        if launch.capacity_type == CapacityType::OnDemand
            && spot_allowed
            && launch.instance_types.len() < INSTANCE_TYPE_FLEXIBILITY_THRESHOLD
        {
            tracing::error!(
                error = %format_args!(
                    "at least {INSTANCE_TYPE_FLEXIBILITY_THRESHOLD} instance types are recommended \
                     when flexible to spot but requesting on-demand, the current provisioning \
                     request only has {} instance type options",
                    launch.instance_types.len()
                ),
                "failed while checking on-demand fallback"
            );
        }
    }
}

fn image_of(templates: &[ResolvedLaunchTemplate], instance_type: &str) -> Option<String> {
    templates
        .iter()
        .find(|t| t.instance_types.iter().any(|it| it.name == instance_type))
        .map(|t| t.image_id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::aws_error::AwsService;

    #[test]
    fn aws_failures_get_karpenters_condition_reasons() {
        let error = |code: &str, message: &str| {
            AwsError::new(AwsService::Ec2, "CreateFleet", Some(code), message)
        };
        assert_eq!(
            reason_message(&error("UnauthorizedOperation", "denied")).0,
            "Unauthorized"
        );
        assert_eq!(
            reason_message(&error(
                "AuthFailure.ServiceLinkedRoleCreationNotPermitted",
                "no role"
            ))
            .0,
            "SpotSLRCreationFailed"
        );
        assert_eq!(
            reason_message(&error("VcpuLimitExceeded", "quota")).0,
            "VCPULimitExceeded"
        );
        assert_eq!(
            reason_message(&error(
                "InvalidParameterValue",
                "iamInstanceProfile.name is invalid"
            ))
            .0,
            "InstanceProfileNameInvalid"
        );
        assert_eq!(reason_message(&error("Bogus", "?")).0, "LaunchFailed");
    }
}
