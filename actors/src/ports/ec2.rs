//! The narrow EC2 port: only the calls Karpenter makes (reference 4.2), with our own request and
//! response types so nothing above `src/aws` sees aws-sdk types.
//!
//! Data flow: providers in `crate::providers` call an [`Ec2Api`]; `src/aws/ec2.rs` implements it over
//! aws-sdk-ec2 (walking every page of paginated calls), `crate::kwok::ec2` in memory. Both return
//! the same shapes and the same [`AwsError`] codes.

use karpenter_core::domain::instance_type::CapacityType;
use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::jiff::Timestamp;

use super::aws_error::AwsError;

/// An EC2 `Filter`: a name such as `tag:karpenter.sh/discovery` or `instance-state-name` and the
/// values any of which matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Filter {
    pub name: String,
    pub values: Vec<String>,
}

impl Filter {
    #[must_use]
    pub fn new(name: &str, values: &[&str]) -> Self {
        Filter {
            name: name.to_owned(),
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }
    }

    /// `tag:<key>` with the given values.
    #[must_use]
    pub fn tag(key: &str, values: &[&str]) -> Self {
        Filter::new(&format!("tag:{key}"), values)
    }

    /// `tag-key` = key: resources carrying the tag with any value.
    #[must_use]
    pub fn tag_key(key: &str) -> Self {
        Filter::new("tag-key", &[key])
    }
}

/// Resource tags as a sorted map (sorted so requests compare and hash deterministically).
pub type Tags = BTreeMap<String, String>;

// ---- instance types ----------------------------------------------------------------------------

/// One `InstanceTypeInfo`, reduced to what the instance-type provider reads.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InstanceTypeInfo {
    pub name: String,
    pub vcpus: u32,
    pub memory_mib: u64,
    /// `x86_64`, `arm64`, ...
    pub architectures: Vec<String>,
    pub virtualization_types: Vec<String>,
    /// `on-demand`, `spot`, `capacity-block`.
    pub usage_classes: Vec<String>,
    /// `nitro`, `xen`, or empty for bare metal.
    pub hypervisor: String,
    pub bare_metal: bool,
    pub burstable: bool,
    pub cpu_manufacturer: String,
    pub sustained_clock_speed_mhz: Option<u32>,
    /// Network interfaces of the default network card (the VPC CNI uses only that card).
    pub max_enis: u32,
    pub ipv4_per_eni: u32,
    pub efa_max_interfaces: u32,
    pub encryption_in_transit: bool,
    /// Baseline network bandwidth over all cards.
    pub network_bandwidth_mbps: Option<u64>,
    /// Maximum EBS bandwidth, when the type is EBS-optimised by default.
    pub ebs_bandwidth_mbps: Option<u64>,
    pub instance_storage: Option<InstanceStorage>,
    pub gpus: Vec<Gpu>,
    pub neuron_devices: Vec<NeuronDevice>,
    pub inference_accelerators: Vec<InferenceAccelerator>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceStorage {
    pub total_gb: u64,
    /// `NVMe` is supported or required.
    pub nvme: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Gpu {
    pub name: String,
    pub manufacturer: String,
    pub count: u32,
    pub memory_mib: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NeuronDevice {
    pub name: String,
    pub count: u32,
    pub cores_per_device: u32,
    pub memory_mib: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InferenceAccelerator {
    pub name: String,
    pub manufacturer: String,
    pub count: u32,
}

/// An instance type offered in a location (an availability zone name for Karpenter's calls).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceTypeOffering {
    pub instance_type: String,
    pub location: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpotPrice {
    pub instance_type: String,
    pub zone: String,
    /// USD per hour.
    pub price: f64,
    pub timestamp: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpotPriceHistoryRequest {
    pub instance_types: Vec<String>,
    /// `Linux/UNIX`, `Linux/UNIX (Amazon VPC)`.
    pub product_descriptions: Vec<String>,
    /// Only prices in effect at or after this time.
    pub start_time: Option<Timestamp>,
}

// ---- network, images, zones ----------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    pub zone_id: String,
    pub vpc_id: String,
    pub available_ip_address_count: u32,
    pub map_public_ip_on_launch: bool,
    pub tags: Tags,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    pub vpc_id: String,
    pub tags: Tags,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeImagesRequest {
    pub image_ids: Vec<String>,
    pub owners: Vec<String>,
    pub filters: Vec<Filter>,
    /// Also return deprecated images (EC2 omits them by default); the AMI provider sets it so
    /// a pinned image keeps resolving, marked deprecated, after AWS deprecates it.
    pub include_deprecated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Image {
    pub id: String,
    pub name: String,
    pub architecture: String,
    /// RFC 3339, as EC2 reports it.
    pub creation_date: String,
    pub deprecation_time: Option<String>,
    pub owner_id: String,
    pub state: String,
    pub tags: Tags,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AvailabilityZone {
    pub name: String,
    pub zone_id: String,
    /// `availability-zone`, `local-zone`, `wavelength-zone`.
    pub zone_type: String,
}

// ---- launch templates ------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateLaunchTemplateRequest {
    pub name: String,
    pub data: LaunchTemplateData,
    pub tags: Tags,
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchTemplateData {
    pub image_id: Option<String>,
    /// Base64, as EC2 takes it.
    pub user_data: Option<String>,
    pub instance_profile_name: Option<String>,
    pub security_group_ids: Vec<String>,
    pub block_device_mappings: Vec<LaunchBlockDevice>,
    pub metadata_options: Option<LaunchMetadataOptions>,
    pub detailed_monitoring: bool,
    pub associate_public_ip_address: Option<bool>,
    /// Tags put on instances and volumes launched from the template.
    pub instance_tags: Tags,
    /// Network interfaces to attach (EFA cards, a public IP, IPv6); when present the security
    /// groups are set on them and `security_group_ids` is empty, as EC2 requires.
    pub network_interfaces: Vec<LaunchNetworkInterface>,
    /// Tags put on network interfaces launched from the template.
    pub network_interface_tags: Tags,
    /// Tags put on spot requests (spot launch templates only).
    pub spot_request_tags: Tags,
}

/// One network interface of a launch template.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchNetworkInterface {
    pub device_index: i32,
    pub network_card_index: Option<i32>,
    /// An Elastic Fabric Adapter interface (`InterfaceType=efa`).
    pub efa: bool,
    pub security_group_ids: Vec<String>,
    pub associate_public_ip_address: Option<bool>,
    /// IPv6 clusters: a primary IPv6 address (and one IPv6 address) on the interface.
    pub primary_ipv6: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchBlockDevice {
    pub device_name: String,
    pub volume_size_gib: Option<i32>,
    pub volume_type: Option<String>,
    pub iops: Option<i32>,
    pub throughput: Option<i32>,
    pub encrypted: Option<bool>,
    pub kms_key_id: Option<String>,
    pub delete_on_termination: Option<bool>,
    pub snapshot_id: Option<String>,
    pub volume_initialization_rate: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchMetadataOptions {
    pub http_endpoint: String,
    pub http_tokens: String,
    pub http_put_response_hop_limit: i32,
    pub http_protocol_ipv6: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchTemplate {
    pub id: String,
    pub name: String,
    pub latest_version: i64,
    pub tags: Tags,
}

/// A launch template named by id or by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LaunchTemplateRef {
    Id(String),
    Name(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeLaunchTemplatesRequest {
    pub names: Vec<String>,
    pub filters: Vec<Filter>,
}

// ---- fleets and instances --------------------------------------------------------------------

/// An instant `CreateFleet` request. Equal requests (ignoring the client token) may be merged by
/// the batcher into one call with a larger target capacity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CreateFleetRequest {
    /// Idempotency token (at most 64 ASCII characters): EC2 answers a request repeated with
    /// the same token with the first result (for at least a day), and refuses the token with
    /// other parameters (`IdempotentParameterMismatch`) without acting. The instances provider
    /// derives it from the batch's NodeClaims and the request; moto ignores it.
    pub client_token: Option<String>,
    pub capacity_type: CapacityType,
    pub total_target_capacity: u32,
    /// `price-capacity-optimized` (spot) or `lowest-price` (on-demand).
    pub allocation_strategy: String,
    pub launch_template_configs: Vec<FleetLaunchTemplateConfig>,
    /// Tags for the instance, its volumes and the fleet.
    pub tags: Tags,
    pub context: Option<String>,
    pub dry_run: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FleetLaunchTemplateConfig {
    pub launch_template_name: String,
    /// `$Latest` in Karpenter's requests.
    pub version: String,
    pub overrides: Vec<FleetOverride>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FleetOverride {
    pub instance_type: String,
    pub subnet_id: String,
    pub zone: String,
    pub image_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateFleetResponse {
    pub fleet_id: Option<String>,
    pub instances: Vec<FleetInstance>,
    pub errors: Vec<FleetError>,
    /// Request id of the call, kept for structured errors on a 200 without instances.
    pub request_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetInstance {
    pub instance_ids: Vec<String>,
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: String,
    pub image_id: Option<String>,
    pub capacity_type: CapacityType,
}

/// One per-override failure of an instant fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetError {
    pub code: String,
    pub message: String,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub subnet_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunInstancesRequest {
    pub launch_template_name: String,
    pub instance_type: String,
    pub subnet_id: Option<String>,
    pub image_id: Option<String>,
    pub tags: Tags,
    pub dry_run: bool,
    /// The launch specification inline instead of a launch template (the `NodeClass`
    /// validation dry run, which has no template): `launch_template_name` is then ignored.
    pub launch_data: Option<LaunchTemplateData>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeInstancesRequest {
    pub instance_ids: Vec<String>,
    pub filters: Vec<Filter>,
}

/// EC2 instance states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InstanceState {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
    Stopping,
    Stopped,
}

impl InstanceState {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Pending => "pending",
            InstanceState::Running => "running",
            InstanceState::ShuttingDown => "shutting-down",
            InstanceState::Terminated => "terminated",
            InstanceState::Stopping => "stopping",
            InstanceState::Stopped => "stopped",
        }
    }

    /// Parses EC2's state name; `None` for an unknown one.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "pending" => InstanceState::Pending,
            "running" => InstanceState::Running,
            "shutting-down" => InstanceState::ShuttingDown,
            "terminated" => InstanceState::Terminated,
            "stopping" => InstanceState::Stopping,
            "stopped" => InstanceState::Stopped,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: String,
    pub image_id: String,
    pub state: InstanceState,
    pub capacity_type: CapacityType,
    pub launch_time: Option<Timestamp>,
    pub private_dns_name: String,
    pub security_group_ids: Vec<String>,
    pub capacity_reservation_id: Option<String>,
    pub tags: Tags,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceStateChange {
    pub instance_id: String,
    pub previous_state: InstanceState,
    pub current_state: InstanceState,
}

/// The EC2 calls Karpenter makes. Paginated calls return every page.
#[async_trait]
pub trait Ec2Api: Send + Sync + std::fmt::Debug {
    async fn describe_instance_types(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InstanceTypeInfo>, AwsError>;

    /// Offerings with `LocationType=availability-zone`.
    async fn describe_instance_type_offerings(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InstanceTypeOffering>, AwsError>;

    async fn describe_spot_price_history(
        &self,
        request: &SpotPriceHistoryRequest,
    ) -> Result<Vec<SpotPrice>, AwsError>;

    async fn describe_subnets(&self, filters: &[Filter]) -> Result<Vec<Subnet>, AwsError>;

    async fn describe_security_groups(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<SecurityGroup>, AwsError>;

    async fn describe_images(
        &self,
        request: &DescribeImagesRequest,
    ) -> Result<Vec<Image>, AwsError>;

    async fn describe_availability_zones(&self) -> Result<Vec<AvailabilityZone>, AwsError>;

    async fn create_launch_template(
        &self,
        request: &CreateLaunchTemplateRequest,
    ) -> Result<LaunchTemplate, AwsError>;

    async fn describe_launch_templates(
        &self,
        request: &DescribeLaunchTemplatesRequest,
    ) -> Result<Vec<LaunchTemplate>, AwsError>;

    async fn delete_launch_template(&self, template: &LaunchTemplateRef) -> Result<(), AwsError>;

    async fn create_fleet(
        &self,
        request: &CreateFleetRequest,
    ) -> Result<CreateFleetResponse, AwsError>;

    /// Used by `NodeClass` validation as a dry run; a dry run that would succeed fails with class
    /// `DryRunSucceeded`, as EC2 does.
    async fn run_instances(&self, request: &RunInstancesRequest)
    -> Result<Vec<Instance>, AwsError>;

    async fn describe_instances(
        &self,
        request: &DescribeInstancesRequest,
    ) -> Result<Vec<Instance>, AwsError>;

    async fn terminate_instances(
        &self,
        instance_ids: &[String],
    ) -> Result<Vec<InstanceStateChange>, AwsError>;

    async fn create_tags(&self, resource_ids: &[String], tags: &Tags) -> Result<(), AwsError>;
}
