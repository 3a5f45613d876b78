//! `ValidationSucceeded` (reference 1.3, 4.2 "nodeclass validation", 5.1 "dynamic instance-type
//! validation"): can the controller launch from this class at all?
//!
//! Checked in order, the first problem deciding the condition:
//!
//! 1. the resolution conditions: any False makes validation False, any Unknown makes it
//!    Unknown (`DependenciesNotReady`);
//! 2. the tags: a tag Karpenter owns makes it False (`TagValidationFailed`);
//! 3. the user data: it is rendered once with representative inputs, and bad user data
//!    (unparseable TOML, MIME or YAML; bad kubelet settings) makes it False
//!    (`UserDataValidationFailed`, ours: Karpenter only finds out when a launch fails);
//! 4. the controller's permissions, with dry runs of `CreateFleet`, `CreateLaunchTemplate` and
//!    `RunInstances` through the EC2 port: `UnauthorizedOperation` makes it False with the
//!    call's reason (`CreateFleetAuthCheckFailed`, ...). Their verdict is cached for 10 minutes
//!    per class and resolved state, as Karpenter does.
//!
//! The dry runs launch what the cloud provider picks (v1.5 dynamic instance-type validation,
//! `CloudProvider::validation_launches`): a type one of the class's NodePools could launch, on
//! the AMI it maps to. Without a pick (no NodePool yet, Windows, no cloud provider) they launch
//! the first AMI of the status that a standard (non-GPU) instance can run, on `m5.large`
//! (amd64) or `m6g.large` (arm64), Karpenter's fallback types.

use karpenter_core::domain::instance_type::CapacityType;
use std::collections::BTreeMap;
use std::hash::{Hash as _, Hasher as _};
use std::time::Duration;

use crate::ports::aws_error::{AwsError, AwsErrorClass};
use crate::ports::ec2::{
    CreateFleetRequest, CreateLaunchTemplateRequest, Ec2Api, FleetLaunchTemplateConfig,
    FleetOverride, LaunchTemplateData, RunInstancesRequest, Tags,
};
use karpenter_core::apis::conditions::{Condition, ConditionStatus, ec2nodeclass as types};
use karpenter_core::apis::ec2nodeclass::{
    Ami, BlockDeviceMapping, EC2NodeClassSpec, EC2NodeClassStatus,
};
use karpenter_core::apis::labels::{
    ARCH, ARCH_AMD64, ARCH_ARM64, CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND,
};
use karpenter_core::apis::requirements::Operator;
use karpenter_core::domain::amifamily::{Variant, default_block_device_mappings};
use karpenter_core::domain::nodeclass_hash::resolved_ami_family;
use karpenter_core::domain::requirements::{AllowUndefined, Requirement, Requirements};
use karpenter_core::domain::userdata::{self, ClusterInfo, UserData, UserDataError, UserDataInput};

use super::status::{ConditionUpdate, status_of};
use crate::providers::ami_mapping;
use crate::providers::launch_templates::{block_devices, metadata_options};

/// How long a dry-run verdict is reused for the same class and resolved state (Karpenter's
/// validation cache TTL): the calls cost API quota and rarely change their answer.
pub const VALIDATION_CACHE_TTL: Duration = Duration::from_mins(10);
/// Karpenter's message while the resolution conditions are not all True.
pub const DEPENDENCIES_MESSAGE: &str =
    "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution";
/// The conditions validation waits for.
pub const REQUIRED_CONDITIONS: [&str; 4] = [
    types::AMIS_READY,
    types::INSTANCE_PROFILE_READY,
    types::SECURITY_GROUPS_READY,
    types::SUBNETS_READY,
];
/// Karpenter's fallback instance types for the dry runs, one per architecture.
pub const FALLBACK_INSTANCE_TYPES: [(&str, &str); 2] =
    [("m5.large", ARCH_AMD64), ("m6g.large", ARCH_ARM64)];
/// Max pods rendered into the representative user data: the kubelet's default.
const REPRESENTATIVE_MAX_PODS: i32 = 110;
/// Karpenter's made-up launch template and overrides for the `CreateFleet` dry run.
const MOCK_LAUNCH_TEMPLATE: &str = "mock-lt-name";
const MOCK_OVERRIDES: [(&str, &str); 2] = [
    ("t3.micro", "subnet-1234567890abcdef0"),
    ("t3.small", "subnet-1234567890abcdef1"),
];

/// Karpenter's message for an authorization failure.
#[must_use]
pub fn failure_message(reason: &str) -> &'static str {
    match reason {
        types::REASON_CREATE_FLEET_AUTH_CHECK_FAILED => {
            "Controller isn't authorized to call ec2:CreateFleet"
        }
        types::REASON_CREATE_LAUNCH_TEMPLATE_AUTH_CHECK_FAILED => {
            "Controller isn't authorized to call ec2:CreateLaunchTemplate"
        }
        types::REASON_RUN_INSTANCES_AUTH_CHECK_FAILED => {
            "Controller isn't authorized to call ec2:RunInstances"
        }
        _ => "",
    }
}

/// `ValidationSucceeded` while the resolution conditions are not all True; `None` when they
/// are.
#[must_use]
pub fn dependencies_not_ready(conditions: &[Condition]) -> Option<ConditionUpdate> {
    let statuses: Vec<ConditionStatus> = REQUIRED_CONDITIONS
        .iter()
        .map(|type_| status_of(conditions, type_))
        .collect();
    if statuses.contains(&ConditionStatus::False) {
        Some(ConditionUpdate::not_ready(
            types::VALIDATION_SUCCEEDED,
            types::REASON_DEPENDENCIES_NOT_READY,
            DEPENDENCIES_MESSAGE,
        ))
    } else if statuses.contains(&ConditionStatus::Unknown) {
        Some(ConditionUpdate::unknown(
            types::VALIDATION_SUCCEEDED,
            types::REASON_DEPENDENCIES_NOT_READY,
            DEPENDENCIES_MESSAGE,
        ))
    } else {
        None
    }
}

/// What rendering the class's user data once told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserDataCheck {
    Rendered(UserData),
    /// AL2023 needs the cluster's service CIDR, which the daemon has not learnt: the class is
    /// not ready (root `NodeClassNotReady`), but its user data may be fine.
    ClusterCidrUnknown,
    /// The user data or kubelet settings cannot be rendered; the message says why.
    Invalid(String),
}

/// Renders the class's user data with representative inputs: its kubelet settings, the
/// kubelet's default max pods, an on-demand capacity-type label, no taints.
#[must_use]
pub fn check_user_data(spec: &EC2NodeClassSpec, cluster: &ClusterInfo) -> UserDataCheck {
    let input = UserDataInput {
        cluster: cluster.clone(),
        kubelet: spec.kubelet.clone().unwrap_or_default(),
        max_pods: REPRESENTATIVE_MAX_PODS,
        labels: BTreeMap::from([(CAPACITY_TYPE.to_owned(), CAPACITY_TYPE_ON_DEMAND.to_owned())]),
        taints: Vec::new(),
        instance_store_policy: spec.instance_store_policy,
        user_data: spec.user_data.clone(),
    };
    match userdata::render(resolved_ami_family(spec), &input) {
        Ok(rendered) => UserDataCheck::Rendered(rendered),
        Err(UserDataError::MissingClusterCidr { .. }) => UserDataCheck::ClusterCidrUnknown,
        Err(error) => UserDataCheck::Invalid(error.to_string()),
    }
}

/// The instance type and AMI the dry runs launch: the first AMI of the status that one of the
/// fallback types can run (standard variant first), else the first AMI on the type of its
/// architecture.
#[must_use]
pub fn validation_launch(amis: &[Ami]) -> Option<(&'static str, &Ami)> {
    let fallback = |arch: &str| -> Requirements {
        let mut requirements = Requirements::new();
        for requirement in Variant::Standard.requirements() {
            if let Some(r) =
                to_requirement(&requirement.key, &requirement.operator, &requirement.values)
            {
                requirements.add(r);
            }
        }
        requirements.add(Requirement::in_values(ARCH, &[arch]));
        for key in [
            karpenter_core::apis::labels::OS,
            karpenter_core::apis::labels::WINDOWS_BUILD,
        ] {
            requirements.add(Requirement::exists(key));
        }
        requirements
    };
    let candidates: Vec<(&'static str, Requirements)> = FALLBACK_INSTANCE_TYPES
        .iter()
        .map(|(name, arch)| (*name, fallback(arch)))
        .collect();
    for ami in amis {
        let Ok(ami_requirements) = ami_mapping::ami_requirements(ami) else {
            continue;
        };
        for (name, instance) in &candidates {
            if instance.is_compatible(&ami_requirements, AllowUndefined::None) {
                return Some((name, ami));
            }
        }
    }
    let ami = amis.first()?;
    let arm = ami
        .requirements
        .iter()
        .any(|r| r.key == ARCH && r.values.iter().any(|v| v == ARCH_ARM64));
    Some((if arm { "m6g.large" } else { "m5.large" }, ami))
}

fn to_requirement(key: &str, operator: &str, values: &[String]) -> Option<Requirement> {
    let operator = match operator {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::Gt,
        "Lt" => Operator::Lt,
        _ => return None,
    };
    Requirement::new(key, operator, values).ok()
}

/// The validation cache key: the class name and a hash of what the dry runs depend on
/// (Karpenter's: subnets, security groups, AMIs, instance profile, metadata options, block
/// devices, tags).
#[must_use]
pub fn cache_key(spec: &EC2NodeClassSpec, status: &EC2NodeClassStatus, tags: &Tags) -> u64 {
    let inputs = serde_json::json!([
        status.subnets,
        status.security_groups,
        status.amis,
        status.instance_profile,
        spec.metadata_options,
        spec.block_device_mappings,
        tags,
    ]);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    inputs.to_string().hash(&mut hasher);
    hasher.finish()
}

/// What the dry runs decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    /// A call was refused; the reason names it (`CreateFleetAuthCheckFailed`, ...).
    Failed(&'static str),
    /// Ask again soon: throttled, or the new instance profile is not visible to EC2 yet.
    Retry(String),
}

/// Everything the dry runs send.
#[derive(Debug, Clone)]
pub struct DryRunInput<'a> {
    pub class_name: &'a str,
    pub spec: &'a EC2NodeClassSpec,
    /// The status as this reconcile resolved it.
    pub status: &'a EC2NodeClassStatus,
    pub tags: &'a Tags,
    pub user_data: Option<&'a UserData>,
    pub instance_type: &'a str,
    pub image_id: &'a str,
}

/// Runs the three dry runs in Karpenter's order; the first refusal decides.
pub async fn dry_runs(ec2: &dyn Ec2Api, input: &DryRunInput<'_>) -> Result<Verdict, AwsError> {
    let fleet = CreateFleetRequest {
        client_token: None,
        capacity_type: CapacityType::OnDemand,
        total_target_capacity: 1,
        allocation_strategy: "lowest-price".to_owned(),
        launch_template_configs: vec![FleetLaunchTemplateConfig {
            launch_template_name: MOCK_LAUNCH_TEMPLATE.to_owned(),
            version: "1".to_owned(),
            overrides: MOCK_OVERRIDES
                .iter()
                .map(|(instance_type, subnet)| FleetOverride {
                    instance_type: (*instance_type).to_owned(),
                    subnet_id: (*subnet).to_owned(),
                    zone: String::new(),
                    image_id: None,
                })
                .collect(),
        }],
        tags: input.tags.clone(),
        context: input.spec.context.clone(),
        dry_run: true,
    };
    let outcome = ec2.create_fleet(&fleet).await.map(|_| ());
    if let Some(verdict) = judge(outcome, types::REASON_CREATE_FLEET_AUTH_CHECK_FAILED)? {
        return Ok(verdict);
    }
    let data = launch_data(input);
    let template = CreateLaunchTemplateRequest {
        name: format!("karpenter.k8s.aws/validation-{}", input.class_name),
        data: data.clone(),
        tags: input.tags.clone(),
        dry_run: true,
    };
    let outcome = ec2.create_launch_template(&template).await.map(|_| ());
    if let Some(verdict) = judge(
        outcome,
        types::REASON_CREATE_LAUNCH_TEMPLATE_AUTH_CHECK_FAILED,
    )? {
        return Ok(verdict);
    }
    let run = RunInstancesRequest {
        launch_template_name: String::new(),
        instance_type: input.instance_type.to_owned(),
        subnet_id: input.status.subnets.first().map(|s| s.id.clone()),
        image_id: Some(input.image_id.to_owned()),
        tags: input.tags.clone(),
        dry_run: true,
        launch_data: Some(data),
    };
    let outcome = ec2.run_instances(&run).await.map(|_| ());
    if let Err(error) = &outcome
        && is_instance_profile_not_found(error)
    {
        return Ok(Verdict::Retry(format!(
            "instance profile not visible to EC2 yet: {error}"
        )));
    }
    Ok(judge(outcome, types::REASON_RUN_INSTANCES_AUTH_CHECK_FAILED)?.unwrap_or(Verdict::Passed))
}

/// `None`: the dry run would have succeeded; a verdict otherwise; an error for anything a dry
/// run should never answer.
fn judge(outcome: Result<(), AwsError>, reason: &'static str) -> Result<Option<Verdict>, AwsError> {
    match outcome {
        // An implementation that ignores the dry-run flag and succeeds is as good as a pass.
        Ok(()) => Ok(None),
        Err(error) => match error.class {
            AwsErrorClass::DryRunSucceeded => Ok(None),
            AwsErrorClass::Unauthorized => Ok(Some(Verdict::Failed(reason))),
            AwsErrorClass::Throttled => Ok(Some(Verdict::Retry(format!(
                "{} dry run throttled: {error}",
                error.operation
            )))),
            _ => Err(error),
        },
    }
}

/// EC2's answer when a freshly created instance profile has not propagated yet.
fn is_instance_profile_not_found(error: &AwsError) -> bool {
    let code = error.code.as_deref().unwrap_or_default();
    (code == "InvalidParameterValue" || error.is_not_found())
        && error
            .message
            .to_ascii_lowercase()
            .contains("instance profile")
}

/// The launch specification of the dry runs.
fn launch_data(input: &DryRunInput<'_>) -> LaunchTemplateData {
    let family = resolved_ami_family(input.spec);
    let mappings: Vec<BlockDeviceMapping> = if input.spec.block_device_mappings.is_empty() {
        default_block_device_mappings(family)
    } else {
        input.spec.block_device_mappings.clone()
    };
    LaunchTemplateData {
        image_id: Some(input.image_id.to_owned()),
        // Custom classes without user data render nothing; EC2 gets no user data then.
        user_data: input
            .user_data
            .filter(|u| !u.as_str().is_empty())
            .map(UserData::to_base64),
        instance_profile_name: input.status.instance_profile.clone(),
        security_group_ids: input
            .status
            .security_groups
            .iter()
            .map(|g| g.id.clone())
            .collect(),
        // Bad sizes are the launch's error to report; the dry runs go without those devices.
        block_device_mappings: block_devices(input.class_name, &mappings).unwrap_or_default(),
        metadata_options: Some(metadata_options(&input.spec.metadata_options)),
        detailed_monitoring: input.spec.detailed_monitoring.unwrap_or(false),
        associate_public_ip_address: input.spec.associate_public_ip_address,
        instance_tags: input.tags.clone(),
        ..LaunchTemplateData::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::apis::ec2nodeclass::AmiRequirement;
    use karpenter_core::apis::labels::{INSTANCE_GPU_COUNT, OS, OS_WINDOWS};
    use karpenter_core::domain::amifamily::requirement;

    fn ami(id: &str, requirements: Vec<AmiRequirement>) -> Ami {
        Ami {
            id: id.into(),
            name: None,
            deprecated: None,
            requirements,
        }
    }

    #[test]
    fn the_dry_runs_skip_gpu_amis_and_pick_the_type_of_the_architecture() {
        let gpu = ami(
            "ami-gpu",
            vec![
                requirement(ARCH, "In", &[ARCH_AMD64]),
                requirement(INSTANCE_GPU_COUNT, "Exists", &[]),
            ],
        );
        let mut arm = Variant::Standard.requirements();
        arm.push(requirement(ARCH, "In", &[ARCH_ARM64]));
        let amis = [gpu, ami("ami-arm", arm)];
        let (instance_type, chosen) = validation_launch(&amis).unwrap();
        assert_eq!(instance_type, "m6g.large");
        assert_eq!(chosen.id, "ami-arm");
    }

    #[test]
    fn windows_amis_run_on_the_amd64_fallback() {
        let windows = ami(
            "ami-win",
            vec![
                requirement(ARCH, "In", &[ARCH_AMD64]),
                requirement(OS, "In", &[OS_WINDOWS]),
            ],
        );
        let amis = [windows];
        assert_eq!(validation_launch(&amis).unwrap().0, "m5.large");
        assert!(validation_launch(&[]).is_none());
    }

    #[test]
    fn dependencies_decide_before_anything_else() {
        let mut conditions = Vec::new();
        assert_eq!(
            dependencies_not_ready(&conditions).unwrap().status,
            ConditionStatus::Unknown
        );
        let mut plan = super::super::status::StatusPlan::default();
        for type_ in REQUIRED_CONDITIONS {
            plan.set(ConditionUpdate::ready(type_));
        }
        let mut status = EC2NodeClassStatus::default();
        plan.apply(&mut status, None, k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        conditions = status.conditions;
        assert!(dependencies_not_ready(&conditions).is_none());
    }

    #[test]
    fn volume_sizes_convert_as_karpenter_does() {
        let mapping = BlockDeviceMapping {
            device_name: Some("/dev/xvda".into()),
            ebs: Some(karpenter_core::domain::amifamily::default_ebs("20Gi")),
            root_volume: None,
        };
        let device = block_devices("c", std::slice::from_ref(&mapping))
            .unwrap()
            .remove(0);
        assert_eq!(device.volume_size_gib, Some(20));
        let odd = BlockDeviceMapping {
            ebs: Some(karpenter_core::domain::amifamily::default_ebs("100G")),
            ..mapping
        };
        // 100 GB is 93.13 GiB, rounded up.
        assert_eq!(
            block_devices("c", &[odd]).unwrap()[0].volume_size_gib,
            Some(94)
        );
        assert_eq!(device.volume_type.as_deref(), Some("gp3"));
    }
}
