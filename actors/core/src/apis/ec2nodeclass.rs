//! `karpenter.k8s.aws/v1` `EC2NodeClass`: how to launch an EC2 instance for a node: subnets,
//! security groups, AMIs, instance profile, kubelet settings, block devices, metadata options
//! (reference section 1.3). Resolved into its status by the `NodeClassActor`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;

/// Most selector terms of each kind.
pub const MAX_SELECTOR_TERMS: usize = 30;
/// Most tags a selector term may match on.
pub const MAX_SELECTOR_TAGS: usize = 20;
/// Largest alias (`family@version`).
pub const MAX_ALIAS_LENGTH: usize = 30;
/// Most block device mappings.
pub const MAX_BLOCK_DEVICE_MAPPINGS: usize = 50;
/// EBS volume size: 1 GiB to 64 TB in Gi, G, Ti or T.
pub const VOLUME_SIZE_PATTERN: &str = r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$";
/// Eviction thresholds: a percentage or a quantity.
pub const EVICTION_THRESHOLD_PATTERN: &str = r"^((\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%||(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?)$";
/// AMI families an alias may name.
pub const ALIAS_FAMILIES: &[&str] = &[
    "al2",
    "al2023",
    "bottlerocket",
    "windows2019",
    "windows2022",
];
/// Signals kubelet eviction thresholds may use.
pub const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];
/// Resources kubelet reservations may name.
pub const RESERVED_RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];
/// Tag keys Karpenter owns and users may not set.
pub const RESTRICTED_TAGS: &[&str] = &[
    "eks:eks-cluster-name",
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "karpenter.k8s.aws/ec2nodeclass",
];

/// How Karpenter launches EC2 instances for the NodePools that reference this class.
#[expect(
    clippy::duplicated_attributes,
    reason = "kube's derive takes one printcolumn(...) per column, and their fields repeat"
)]
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    plural = "ec2nodeclasses",
    status = "EC2NodeClassStatus",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    category = "karpenter",
    doc = "EC2NodeClass is the Schema for the EC2NodeClass API",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Role",
        type_ = "string",
        json_path = ".spec.role",
        priority = "1"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = spec_rules)]
pub struct EC2NodeClassSpec {
    /// Subnets to launch into, by tags or id; terms are ORed.
    #[schemars(length(max = MAX_SELECTOR_TERMS))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.size() != 0", "message": "subnetSelectorTerms cannot be empty"},
        {"rule": "self.all(x, has(x.tags) || has(x.id))", "message": "expected at least one, got none, ['tags', 'id']"},
        {"rule": "!self.all(x, has(x.id) && has(x.tags))", "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term"},
    ]))]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// Security groups for the instances, by tags, id or name; terms are ORed.
    #[schemars(length(max = MAX_SELECTOR_TERMS))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.size() != 0", "message": "securityGroupSelectorTerms cannot be empty"},
        {"rule": "self.all(x, has(x.tags) || has(x.id) || has(x.name))", "message": "expected at least one, got none, ['tags', 'id', 'name']"},
        {"rule": "!self.all(x, has(x.id) && (has(x.tags) || has(x.name)))", "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"},
        {"rule": "!self.all(x, has(x.name) && (has(x.tags) || has(x.id)))", "message": "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"},
    ]))]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// On-demand capacity reservations to launch into (`ReservedCapacity` feature gate).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_SELECTOR_TERMS))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(x, has(x.tags) || has(x.id))", "message": "expected at least one, got none, ['tags', 'id']"},
        {"rule": "!self.all(x, has(x.id) && (has(x.tags) || has(x.ownerID)))", "message": "'id' is mutually exclusive, cannot be set along with tags in a capacity reservation selector term"},
    ]))]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    /// Public IP on the primary network interface.
    #[serde(
        default,
        rename = "associatePublicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// AMIs to launch: an alias alone, or ids, names, tags, SSM parameters; terms are ORed.
    #[schemars(length(min = 1, max = MAX_SELECTOR_TERMS))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))", "message": "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']"},
        {"rule": "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))", "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"},
        {"rule": "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))", "message": "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"},
        {"rule": "!(self.exists(x, has(x.alias)) && self.size() != 1)", "message": "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"},
    ]))]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// The AMI family: user data format and default block devices. Implied by an alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<AmiFamily>,
    /// User data merged with Karpenter's (verbatim for `Custom`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// IAM role for the instance profile Karpenter creates; exclusive with `instanceProfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self != ''", "message": "role cannot be empty"},
        {"rule": "self == oldSelf", "message": "immutable field changed"},
    ]))]
    pub role: Option<String>,
    /// An existing instance profile to use as is; exclusive with `role`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "instanceProfile cannot be empty"}]))]
    pub instance_profile: Option<String>,
    /// Tags for instances, volumes, launch templates and fleet requests.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(k, k != '')", "message": "empty tag keys aren't supported"},
        {"rule": "self.all(k, k !='eks:eks-cluster-name')", "message": "tag contains a restricted tag matching eks:eks-cluster-name"},
        {"rule": "self.all(k, !k.startsWith('kubernetes.io/cluster') )", "message": "tag contains a restricted tag matching kubernetes.io/cluster/"},
        {"rule": "self.all(k, k != 'karpenter.sh/nodepool')", "message": "tag contains a restricted tag matching karpenter.sh/nodepool"},
        {"rule": "self.all(k, k !='karpenter.sh/nodeclaim')", "message": "tag contains a restricted tag matching karpenter.sh/nodeclaim"},
        {"rule": "self.all(k, k !='karpenter.k8s.aws/ec2nodeclass')", "message": "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass"},
    ]))]
    pub tags: BTreeMap<String, String>,
    /// Kubelet settings rendered into user data and used for allocatable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// Volumes attached at launch; the root volume's size is the node's ephemeral storage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_BLOCK_DEVICE_MAPPINGS))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1", "message": "must have only one blockDeviceMappings with rootVolume"}]))]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// How instance-store disks are used (`RAID0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// Detailed CloudWatch monitoring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Instance metadata service options; IMDSv2 required with hop limit 1 by default.
    #[serde(default = "default_metadata_options")]
    pub metadata_options: MetadataOptions,
    /// Reserved EC2 field passed to CreateFleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

fn spec_rules(schema: &mut schemars::Schema) {
    let mut rules: Vec<(String, String)> = vec![
        (
            "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))".into(),
            "must specify exactly one of ['role', 'instanceProfile']".into(),
        ),
        (
            "(has(oldSelf.role) && has(self.role)) || (has(oldSelf.instanceProfile) && has(self.instanceProfile))".into(),
            "changing from 'instanceProfile' to 'role' is not supported. You must delete and recreate this node class if you want to change this.".into(),
        ),
    ];
    for family in AmiFamily::ALIASED {
        rules.push((
            format!(
                "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == '{}') ? (self.amiFamily == 'Custom' || self.amiFamily == '{}') : true)",
                family.alias_name(),
                family.as_str()
            ),
            family.alias_family_message().to_owned(),
        ));
    }
    rules.push((
        "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)".into(),
        "must specify amiFamily if amiSelectorTerms does not contain an alias".into(),
    ));
    super::schema::add_rules(schema, rules);
}

/// A tag map in a selector term: at most 20 entries, no empty keys or values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(extend("maxProperties" = MAX_SELECTOR_TAGS))]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "self.all(k, k != '' && self[k] != '')", "message": "empty tag keys or values aren't supported"}]))]
pub struct SelectorTags(pub BTreeMap<String, String>);

/// Selects subnets by tags (`*` matches any value) or by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SubnetSelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<SelectorTags>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("subnet-[0-9a-z]+"))]
    pub id: Option<String>,
}

/// Selects security groups by tags, id or name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecurityGroupSelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<SelectorTags>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("sg-[0-9a-z]+"))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Selects capacity reservations by tags (and owner) or id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CapacityReservationSelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<SelectorTags>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("^cr-[0-9a-z]+$"))]
    pub id: Option<String>,
    /// Account that owns the reservation.
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("^[0-9]{12}$"))]
    pub owner_id: Option<String>,
}

/// Selects AMIs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    /// `family@version`, e.g. `al2023@latest`, `bottlerocket@v1.20.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_ALIAS_LENGTH))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.matches('^[a-zA-Z0-9]+@.+$')", "message": "'alias' is improperly formatted, must match the format 'family@version'"},
        {"rule": "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022']", "message": "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022'"},
        {"rule": "self.split('@')[0] in ['windows2019','windows2022'] ? self.split('@')[1] == 'latest' : true", "message": "windows families may only specify version 'latest'"},
    ]))]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<SelectorTags>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern("ami-[0-9a-z]+"))]
    pub id: Option<String>,
    /// AMI name; wildcards allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Owner account id or alias (`self`, `amazon`); defaults to `self,amazon` with `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// SSM parameter (name or ARN) holding an AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

/// AMI families: user data format and defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AmiFamily {
    AL2,
    AL2023,
    Bottlerocket,
    Custom,
    Windows2019,
    Windows2022,
}

impl AmiFamily {
    /// Families an alias can name.
    pub const ALIASED: [Self; 5] = [
        Self::AL2,
        Self::AL2023,
        Self::Bottlerocket,
        Self::Windows2019,
        Self::Windows2022,
    ];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AL2 => "AL2",
            Self::AL2023 => "AL2023",
            Self::Bottlerocket => "Bottlerocket",
            Self::Custom => "Custom",
            Self::Windows2019 => "Windows2019",
            Self::Windows2022 => "Windows2022",
        }
    }

    /// The family's name in an alias (`al2023@latest`).
    #[must_use]
    pub fn alias_name(self) -> &'static str {
        match self {
            Self::AL2 => "al2",
            Self::AL2023 => "al2023",
            Self::Bottlerocket => "bottlerocket",
            Self::Custom => "custom",
            Self::Windows2019 => "windows2019",
            Self::Windows2022 => "windows2022",
        }
    }

    /// The family an alias names.
    #[must_use]
    pub fn from_alias(alias: &str) -> Option<Self> {
        let family = alias.split('@').next()?;
        Self::ALIASED.into_iter().find(|f| f.alias_name() == family)
    }

    /// Karpenter's message when `amiFamily` disagrees with this family's alias.
    #[must_use]
    pub fn alias_family_message(self) -> &'static str {
        match self {
            Self::AL2 => "if set, amiFamily must be 'AL2' or 'Custom' when using an AL2 alias",
            Self::AL2023 => {
                "if set, amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias"
            }
            Self::Bottlerocket => {
                "if set, amiFamily must be 'Bottlerocket' or 'Custom' when using a Bottlerocket alias"
            }
            Self::Windows2019 => {
                "if set, amiFamily must be 'Windows2019' or 'Custom' when using a Windows2019 alias"
            }
            Self::Windows2022 | Self::Custom => {
                "if set, amiFamily must be 'Windows2022' or 'Custom' when using a Windows2022 alias"
            }
        }
    }

    #[must_use]
    pub fn is_windows(self) -> bool {
        matches!(self, Self::Windows2019 | Self::Windows2022)
    }
}

/// How instance-store `NVMe` disks are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum InstanceStorePolicy {
    /// Stripe all instance-store disks for kubelet and containerd.
    RAID0,
}

/// Kubelet settings Karpenter renders into user data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ?  self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent  : true", "message": "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent"},
    {"rule": "has(self.evictionSoft) ? self.evictionSoft.all(e, (e in self.evictionSoftGracePeriod)):true", "message": "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod"},
    {"rule": "has(self.evictionSoftGracePeriod) ? self.evictionSoftGracePeriod.all(e, (e in self.evictionSoft)):true", "message": "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft"},
]))]
pub struct KubeletConfiguration {
    /// Cluster DNS server addresses.
    #[serde(default, rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    /// Most pods on the node; overrides the ENI-limited default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_pods: Option<i32>,
    /// Pods per vCPU cap (not supported on Bottlerocket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pods_per_core: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "reserved_schema::<true>")]
    pub system_reserved: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "reserved_schema::<false>")]
    pub kube_reserved: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "eviction_schema::<0>")]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "eviction_schema::<1>")]
    pub eviction_soft: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "eviction_schema::<2>")]
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    /// Longest grace period (seconds) for pods evicted on a soft threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    #[serde(
        default,
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_high_threshold_percent: Option<i32>,
    #[serde(
        default,
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// CPU CFS quota enforcement for containers with CPU limits.
    #[serde(
        default,
        rename = "cpuCFSQuota",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
}

/// `['a','b']`'s inside: how the CRD messages list allowed keys.
pub(crate) fn quoted_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|i| format!("'{i}'"))
        .collect::<Vec<_>>()
        .join(",")
}

fn reserved_schema<const SYSTEM: bool>(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let field = if SYSTEM {
        "systemReserved"
    } else {
        "kubeReserved"
    };
    let keys = RESERVED_RESOURCES
        .iter()
        .map(|k| format!("x=='{k}'"))
        .collect::<Vec<_>>();
    let mut schema = schemars::json_schema!({
        "type": "object",
        "additionalProperties": { "type": "string", "pattern": super::schema::QUANTITY_PATTERN },
    });
    let message_keys = format!(
        "valid keys for {field} are [{}]",
        quoted_list(RESERVED_RESOURCES)
    );
    let negative = format!("{field} value cannot be a negative resource quantity");
    super::schema::add_rules(
        &mut schema,
        [
            (format!("self.all(x, {})", keys.join(" || ")), message_keys),
            ("self.all(x, !self[x].startsWith('-'))".to_owned(), negative),
        ],
    );
    schema
}

fn eviction_schema<const KIND: u8>(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let field = match KIND {
        0 => "evictionHard",
        1 => "evictionSoft",
        _ => "evictionSoftGracePeriod",
    };
    let mut values = serde_json::json!({ "type": "string" });
    if KIND != 2 {
        values["pattern"] = EVICTION_THRESHOLD_PATTERN.into();
    }
    let mut schema = schemars::json_schema!({ "type": "object", "additionalProperties": values });
    let signals = quoted_list(EVICTION_SIGNALS);
    super::schema::add_rules(
        &mut schema,
        [(
            format!("self.all(x, x in [{signals}])"),
            format!("valid keys for {field} are [{signals}]"),
        )],
    );
    schema
}

/// A volume attached at launch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// Device name, e.g. `/dev/xvda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// This volume is the root volume; its size is the node's ephemeral storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
}

/// EBS volume settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.snapshotID) || has(self.volumeSize)", "message": "snapshotID or volumeSize must be defined"},
    {"rule": "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')", "message": "snapshotID must be set when volumeInitializationRate is set"},
]))]
pub struct BlockDevice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Provisioned IOPS (io1, io2, gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    /// Throughput in MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// Rate (MiB/s) at which a volume restored from a snapshot is initialized (v1.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 300))]
    pub volume_initialization_rate: Option<i32>,
    /// Size, e.g. `20Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(VOLUME_SIZE_PATTERN))]
    pub volume_size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<VolumeType>,
}

/// EBS volume types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    Standard,
    Io1,
    Io2,
    Gp2,
    Sc1,
    St1,
    Gp3,
}

/// Instance metadata service options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    #[serde(default = "enabled")]
    pub http_endpoint: Toggle,
    #[serde(default = "disabled", rename = "httpProtocolIPv6")]
    pub http_protocol_ipv6: Toggle,
    #[serde(default = "default_hop_limit")]
    #[schemars(range(min = 1, max = 64))]
    pub http_put_response_hop_limit: i64,
    #[serde(default)]
    pub http_tokens: HttpTokens,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        default_metadata_options()
    }
}

fn default_metadata_options() -> MetadataOptions {
    MetadataOptions {
        http_endpoint: Toggle::Enabled,
        http_protocol_ipv6: Toggle::Disabled,
        http_put_response_hop_limit: default_hop_limit(),
        http_tokens: HttpTokens::Required,
    }
}

fn enabled() -> Toggle {
    Toggle::Enabled
}

fn disabled() -> Toggle {
    Toggle::Disabled
}

fn default_hop_limit() -> i64 {
    1
}

/// `enabled` or `disabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Toggle {
    Enabled,
    Disabled,
}

/// Whether IMDS requires session tokens (IMDSv2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HttpTokens {
    #[default]
    Required,
    Optional,
}

/// What the class resolved to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<Subnet>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<SecurityGroup>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<CapacityReservation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<Ami>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::apis::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// A resolved subnet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    #[serde(default, rename = "zoneID", skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

/// A resolved security group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecurityGroup {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A resolved capacity reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservation {
    pub availability_zone: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    #[schemars(pattern("^cr-[0-9a-z]+$"))]
    pub id: String,
    pub instance_match_criteria: InstanceMatchCriteria,
    pub instance_type: String,
    #[serde(rename = "ownerID")]
    #[schemars(pattern("^[0-9]{12}$"))]
    pub owner_id: String,
}

/// Which instances a capacity reservation accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMatchCriteria {
    Open,
    Targeted,
}

/// A resolved AMI and the instance requirements it serves (architecture, GPU variant).
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub struct Ami {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<bool>,
    pub requirements: Vec<AmiRequirement>,
}

/// A node selector requirement in an AMI's status.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub struct AmiRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub values: Vec<String>,
}
