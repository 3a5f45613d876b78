//! [`Ec2Api`] over aws-sdk-ec2. Each call goes through [`Ec2Adapter::call`]: the retry policy
//! around the SDK call, and SDK errors mapped once by [`super::error::from_sdk`]. Paginated calls
//! walk every page. SDK types are converted to the port's types here and nowhere else.

use async_trait::async_trait;
use aws_sdk_ec2 as ec2;
use aws_sdk_ec2::types as t;
use k8s_openapi::jiff::Timestamp;
use karpenter_actors::ports::aws_error::{AwsError, AwsService};
use karpenter_actors::ports::ec2::{
    AvailabilityZone, CreateFleetRequest, CreateFleetResponse, CreateLaunchTemplateRequest,
    DescribeImagesRequest, DescribeInstancesRequest, DescribeLaunchTemplatesRequest, Ec2Api,
    Filter, FleetError, FleetInstance, Gpu, Image, InferenceAccelerator, Instance, InstanceState,
    InstanceStateChange, InstanceStorage, InstanceTypeInfo, InstanceTypeOffering, LaunchTemplate,
    LaunchTemplateData, LaunchTemplateRef, NeuronDevice, RunInstancesRequest, SecurityGroup,
    SpotPrice, SpotPriceHistoryRequest, Subnet, Tags,
};
use karpenter_actors::retry::RetryPolicy;
use karpenter_core::domain::instance_type::CapacityType;

use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;

/// Karpenter pages `DescribeInstanceTypes` and `DescribeSubnets` in pages of 100 and 500.
const INSTANCE_TYPES_PAGE_SIZE: i32 = 100;

/// The EC2 adapter.
#[derive(Debug, Clone)]
pub struct Ec2Adapter {
    client: ec2::Client,
    retry: RetryPolicy,
}

fn filters(filters: &[Filter]) -> Option<Vec<t::Filter>> {
    (!filters.is_empty()).then(|| {
        filters
            .iter()
            .map(|f| {
                t::Filter::builder()
                    .name(&f.name)
                    .set_values(Some(f.values.clone()))
                    .build()
            })
            .collect()
    })
}

fn tags_of(tags: &[t::Tag]) -> Tags {
    tags.iter()
        .filter_map(|tag| Some((tag.key()?.to_owned(), tag.value().unwrap_or("").to_owned())))
        .collect()
}

fn ec2_tags(tags: &Tags) -> Vec<t::Tag> {
    tags.iter()
        .map(|(k, v)| t::Tag::builder().key(k).value(v).build())
        .collect()
}

fn tag_spec(resource: t::ResourceType, tags: &Tags) -> t::TagSpecification {
    t::TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(ec2_tags(tags)))
        .build()
}

fn timestamp(value: Option<&aws_smithy_types::DateTime>) -> Option<Timestamp> {
    let value = value?;
    Timestamp::new(value.secs(), i32::try_from(value.subsec_nanos()).ok()?).ok()
}

fn count(value: Option<i32>) -> u32 {
    value.and_then(|v| u32::try_from(v).ok()).unwrap_or(0)
}

fn mib(value: Option<i64>) -> u64 {
    value.and_then(|v| u64::try_from(v).ok()).unwrap_or(0)
}

fn capacity_type(lifecycle: Option<&str>) -> CapacityType {
    if lifecycle == Some("spot") {
        CapacityType::Spot
    } else {
        CapacityType::OnDemand
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one field conversion per line of the port's InstanceTypeInfo"
)]
fn instance_type_info(info: &t::InstanceTypeInfo) -> InstanceTypeInfo {
    let network = info.network_info();
    let default_card = network
        .and_then(t::NetworkInfo::default_network_card_index)
        .unwrap_or(0);
    let cards = network
        .map(t::NetworkInfo::network_cards)
        .unwrap_or_default();
    let max_enis = cards
        .iter()
        .find(|c| c.network_card_index() == Some(default_card))
        .and_then(t::NetworkCardInfo::maximum_network_interfaces)
        .or_else(|| network.and_then(t::NetworkInfo::maximum_network_interfaces));
    let bandwidth: f64 = cards
        .iter()
        .filter_map(t::NetworkCardInfo::baseline_bandwidth_in_gbps)
        .sum();
    let processor = info.processor_info();
    let ebs = info.ebs_info();
    let storage = info.instance_storage_info();
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "clock speeds and bandwidths are small positive numbers"
    )]
    InstanceTypeInfo {
        name: info
            .instance_type()
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default(),
        vcpus: count(info.v_cpu_info().and_then(t::VCpuInfo::default_v_cpus)),
        memory_mib: mib(info.memory_info().and_then(t::MemoryInfo::size_in_mib)),
        architectures: processor
            .map(|p| {
                p.supported_architectures()
                    .iter()
                    .map(|a| a.as_str().to_owned())
                    .collect()
            })
            .unwrap_or_default(),
        virtualization_types: info
            .supported_virtualization_types()
            .iter()
            .map(|v| v.as_str().to_owned())
            .collect(),
        usage_classes: info
            .supported_usage_classes()
            .iter()
            .map(|u| u.as_str().to_owned())
            .collect(),
        hypervisor: info
            .hypervisor()
            .map(|h| h.as_str().to_owned())
            .unwrap_or_default(),
        bare_metal: info.bare_metal().unwrap_or(false),
        burstable: info.burstable_performance_supported().unwrap_or(false),
        cpu_manufacturer: processor
            .and_then(t::ProcessorInfo::manufacturer)
            .unwrap_or("")
            .to_owned(),
        sustained_clock_speed_mhz: processor
            .and_then(t::ProcessorInfo::sustained_clock_speed_in_ghz)
            .map(|ghz| (ghz * 1000.0).round() as u32),
        max_enis: count(max_enis),
        ipv4_per_eni: count(network.and_then(t::NetworkInfo::ipv4_addresses_per_interface)),
        efa_max_interfaces: count(
            network
                .and_then(t::NetworkInfo::efa_info)
                .and_then(t::EfaInfo::maximum_efa_interfaces),
        ),
        encryption_in_transit: network
            .and_then(t::NetworkInfo::encryption_in_transit_supported)
            .unwrap_or(false),
        network_bandwidth_mbps: (bandwidth > 0.0).then(|| (bandwidth * 1000.0).round() as u64),
        ebs_bandwidth_mbps: ebs
            .filter(|e| e.ebs_optimized_support() == Some(&t::EbsOptimizedSupport::Default))
            .and_then(t::EbsInfo::ebs_optimized_info)
            .and_then(t::EbsOptimizedInfo::maximum_bandwidth_in_mbps)
            .and_then(|b| u64::try_from(b).ok()),
        instance_storage: storage.and_then(|s| {
            Some(InstanceStorage {
                total_gb: u64::try_from(s.total_size_in_gb()?).ok()?,
                nvme: s.nvme_support() != Some(&t::EphemeralNvmeSupport::Unsupported),
            })
        }),
        gpus: info
            .gpu_info()
            .map(|g| {
                g.gpus()
                    .iter()
                    .map(|gpu| Gpu {
                        name: gpu.name().unwrap_or("").to_owned(),
                        manufacturer: gpu.manufacturer().unwrap_or("").to_owned(),
                        count: count(gpu.count()),
                        memory_mib: mib(gpu
                            .memory_info()
                            .and_then(t::GpuDeviceMemoryInfo::size_in_mib)
                            .map(i64::from)),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        neuron_devices: info
            .neuron_info()
            .map(|n| {
                n.neuron_devices()
                    .iter()
                    .map(|d| NeuronDevice {
                        name: d.name().unwrap_or("").to_owned(),
                        count: count(d.count()),
                        cores_per_device: count(
                            d.core_info().and_then(t::NeuronDeviceCoreInfo::count),
                        ),
                        memory_mib: mib(d
                            .memory_info()
                            .and_then(t::NeuronDeviceMemoryInfo::size_in_mib)
                            .map(i64::from)),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        inference_accelerators: info
            .inference_accelerator_info()
            .map(|a| {
                a.accelerators()
                    .iter()
                    .map(|a| InferenceAccelerator {
                        name: a.name().unwrap_or("").to_owned(),
                        manufacturer: a.manufacturer().unwrap_or("").to_owned(),
                        count: count(a.count()),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

fn instance(i: &t::Instance) -> Option<Instance> {
    Some(Instance {
        id: i.instance_id()?.to_owned(),
        instance_type: i
            .instance_type()
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default(),
        zone: i
            .placement()
            .and_then(t::Placement::availability_zone)
            .unwrap_or("")
            .to_owned(),
        subnet_id: i.subnet_id().unwrap_or("").to_owned(),
        image_id: i.image_id().unwrap_or("").to_owned(),
        state: i
            .state()
            .and_then(t::InstanceState::name)
            .and_then(|n| InstanceState::parse(n.as_str()))
            .unwrap_or(InstanceState::Pending),
        capacity_type: capacity_type(i.instance_lifecycle().map(t::InstanceLifecycleType::as_str)),
        launch_time: timestamp(i.launch_time()),
        private_dns_name: i.private_dns_name().unwrap_or("").to_owned(),
        security_group_ids: i
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_owned))
            .collect(),
        capacity_reservation_id: i.capacity_reservation_id().map(str::to_owned),
        tags: tags_of(i.tags()),
    })
}

fn launch_template(lt: &t::LaunchTemplate) -> LaunchTemplate {
    LaunchTemplate {
        id: lt.launch_template_id().unwrap_or("").to_owned(),
        name: lt.launch_template_name().unwrap_or("").to_owned(),
        latest_version: lt.latest_version_number().unwrap_or(0),
        tags: tags_of(lt.tags()),
    }
}

fn state(value: Option<&t::InstanceState>) -> InstanceState {
    value
        .and_then(t::InstanceState::name)
        .and_then(|n| InstanceState::parse(n.as_str()))
        .unwrap_or(InstanceState::Pending)
}

fn launch_block_devices(
    data: &LaunchTemplateData,
) -> Vec<t::LaunchTemplateBlockDeviceMappingRequest> {
    data.block_device_mappings
        .iter()
        .map(|m| {
            t::LaunchTemplateBlockDeviceMappingRequest::builder()
                .device_name(&m.device_name)
                .ebs(
                    t::LaunchTemplateEbsBlockDeviceRequest::builder()
                        .set_volume_size(m.volume_size_gib)
                        .set_volume_type(m.volume_type.as_deref().map(t::VolumeType::from))
                        .set_iops(m.iops)
                        .set_throughput(m.throughput)
                        .set_encrypted(m.encrypted)
                        .set_kms_key_id(m.kms_key_id.clone())
                        .set_delete_on_termination(m.delete_on_termination)
                        .set_snapshot_id(m.snapshot_id.clone())
                        .set_volume_initialization_rate(m.volume_initialization_rate)
                        .build(),
                )
                .build()
        })
        .collect()
}

fn launch_network_interfaces(
    data: &LaunchTemplateData,
) -> Vec<t::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest> {
    data.network_interfaces
        .iter()
        .map(|interface| {
            t::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                .device_index(interface.device_index)
                .set_network_card_index(interface.network_card_index)
                .set_interface_type(interface.efa.then(|| "efa".to_owned()))
                .set_groups(Some(interface.security_group_ids.clone()))
                .set_associate_public_ip_address(interface.associate_public_ip_address)
                .set_primary_ipv6(interface.primary_ipv6.then_some(true))
                .set_ipv6_address_count(interface.primary_ipv6.then_some(1))
                .build()
        })
        .collect()
}

fn launch_template_data(data: &LaunchTemplateData) -> t::RequestLaunchTemplateData {
    let mappings = launch_block_devices(data);
    let mut builder = t::RequestLaunchTemplateData::builder()
        .set_image_id(data.image_id.clone())
        .set_user_data(data.user_data.clone())
        .set_security_group_ids(
            (!data.security_group_ids.is_empty()).then(|| data.security_group_ids.clone()),
        )
        .set_block_device_mappings((!mappings.is_empty()).then_some(mappings))
        .monitoring(
            t::LaunchTemplatesMonitoringRequest::builder()
                .enabled(data.detailed_monitoring)
                .build(),
        );
    if let Some(profile) = &data.instance_profile_name {
        builder = builder.iam_instance_profile(
            t::LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .name(profile)
                .build(),
        );
    }
    if let Some(metadata) = &data.metadata_options {
        builder = builder.metadata_options(
            t::LaunchTemplateInstanceMetadataOptionsRequest::builder()
                .http_endpoint(t::LaunchTemplateInstanceMetadataEndpointState::from(
                    metadata.http_endpoint.as_str(),
                ))
                .http_tokens(t::LaunchTemplateHttpTokensState::from(
                    metadata.http_tokens.as_str(),
                ))
                .http_put_response_hop_limit(metadata.http_put_response_hop_limit)
                .http_protocol_ipv6(t::LaunchTemplateInstanceMetadataProtocolIpv6::from(
                    metadata.http_protocol_ipv6.as_str(),
                ))
                // Karpenter's tags (kubernetes.io/cluster/*) are not valid IMDS tag names, and an
                // account default could turn IMDS tags on: always off, as Karpenter sets it.
                .instance_metadata_tags(t::LaunchTemplateInstanceMetadataTagsState::Disabled)
                .build(),
        );
    }
    let interfaces = launch_network_interfaces(data);
    if !interfaces.is_empty() {
        builder = builder.set_network_interfaces(Some(interfaces));
    }
    for (resource, tags) in [
        (
            t::ResourceType::NetworkInterface,
            &data.network_interface_tags,
        ),
        (
            t::ResourceType::SpotInstancesRequest,
            &data.spot_request_tags,
        ),
    ] {
        if !tags.is_empty() {
            builder = builder.tag_specifications(
                t::LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(resource)
                    .set_tags(Some(ec2_tags(tags)))
                    .build(),
            );
        }
    }
    if !data.instance_tags.is_empty() {
        builder = builder
            .tag_specifications(
                t::LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(t::ResourceType::Instance)
                    .set_tags(Some(ec2_tags(&data.instance_tags)))
                    .build(),
            )
            .tag_specifications(
                t::LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(t::ResourceType::Volume)
                    .set_tags(Some(ec2_tags(&data.instance_tags)))
                    .build(),
            );
    }
    builder.build()
}

/// A `RunInstances` call carrying a launch specification inline (the `NodeClass` validation
/// dry run): the template's fields, with the request's tags on the instance and its volumes.
fn inline_launch_data(
    call: ec2::operation::run_instances::builders::RunInstancesFluentBuilder,
    data: &LaunchTemplateData,
    tags: &Tags,
) -> ec2::operation::run_instances::builders::RunInstancesFluentBuilder {
    let mappings: Vec<t::BlockDeviceMapping> = data
        .block_device_mappings
        .iter()
        .map(|m| {
            t::BlockDeviceMapping::builder()
                .device_name(&m.device_name)
                .ebs(
                    t::EbsBlockDevice::builder()
                        .set_volume_size(m.volume_size_gib)
                        .set_volume_type(m.volume_type.as_deref().map(t::VolumeType::from))
                        .set_iops(m.iops)
                        .set_throughput(m.throughput)
                        .set_encrypted(m.encrypted)
                        .set_kms_key_id(m.kms_key_id.clone())
                        .set_delete_on_termination(m.delete_on_termination)
                        .set_snapshot_id(m.snapshot_id.clone())
                        .set_volume_initialization_rate(m.volume_initialization_rate)
                        .build(),
                )
                .build()
        })
        .collect();
    let mut call = call
        .set_image_id(data.image_id.clone())
        .set_user_data(data.user_data.clone())
        .set_security_group_ids(
            (!data.security_group_ids.is_empty()).then(|| data.security_group_ids.clone()),
        )
        .set_block_device_mappings((!mappings.is_empty()).then_some(mappings))
        .monitoring(
            t::RunInstancesMonitoringEnabled::builder()
                .enabled(data.detailed_monitoring)
                .build(),
        );
    if let Some(profile) = &data.instance_profile_name {
        call = call.iam_instance_profile(
            t::IamInstanceProfileSpecification::builder()
                .name(profile)
                .build(),
        );
    }
    if let Some(metadata) = &data.metadata_options {
        call = call.metadata_options(
            t::InstanceMetadataOptionsRequest::builder()
                .http_endpoint(t::InstanceMetadataEndpointState::from(
                    metadata.http_endpoint.as_str(),
                ))
                .http_tokens(t::HttpTokensState::from(metadata.http_tokens.as_str()))
                .http_put_response_hop_limit(metadata.http_put_response_hop_limit)
                .http_protocol_ipv6(t::InstanceMetadataProtocolState::from(
                    metadata.http_protocol_ipv6.as_str(),
                ))
                .build(),
        );
    }
    let mut all_tags = data.instance_tags.clone();
    all_tags.extend(tags.clone());
    if !all_tags.is_empty() {
        call = call
            .tag_specifications(tag_spec(t::ResourceType::Instance, &all_tags))
            .tag_specifications(tag_spec(t::ResourceType::Volume, &all_tags));
    }
    call
}

fn fleet_response(out: &ec2::operation::create_fleet::CreateFleetOutput) -> CreateFleetResponse {
    let overrides_of = |lt: Option<&t::LaunchTemplateAndOverridesResponse>| {
        lt.and_then(t::LaunchTemplateAndOverridesResponse::overrides)
            .cloned()
    };
    CreateFleetResponse {
        fleet_id: out.fleet_id().map(str::to_owned),
        instances: out
            .instances()
            .iter()
            .map(|i| {
                let overrides = overrides_of(i.launch_template_and_overrides());
                FleetInstance {
                    instance_ids: i.instance_ids().to_vec(),
                    instance_type: i
                        .instance_type()
                        .map(|t| t.as_str().to_owned())
                        .unwrap_or_default(),
                    zone: overrides
                        .as_ref()
                        .and_then(|o| o.availability_zone())
                        .unwrap_or("")
                        .to_owned(),
                    subnet_id: overrides
                        .as_ref()
                        .and_then(|o| o.subnet_id())
                        .unwrap_or("")
                        .to_owned(),
                    image_id: overrides
                        .as_ref()
                        .and_then(|o| o.image_id())
                        .map(str::to_owned),
                    capacity_type: capacity_type(i.lifecycle().map(t::InstanceLifecycle::as_str)),
                }
            })
            .collect(),
        errors: out
            .errors()
            .iter()
            .map(|e| {
                let overrides = overrides_of(e.launch_template_and_overrides());
                FleetError {
                    code: e.error_code().unwrap_or("").to_owned(),
                    message: e.error_message().unwrap_or("").to_owned(),
                    instance_type: overrides
                        .as_ref()
                        .and_then(|o| o.instance_type())
                        .map(|t| t.as_str().to_owned()),
                    zone: overrides
                        .as_ref()
                        .and_then(|o| o.availability_zone())
                        .map(str::to_owned),
                    subnet_id: overrides
                        .as_ref()
                        .and_then(|o| o.subnet_id())
                        .map(str::to_owned),
                }
            })
            .collect(),
        request_id: aws_types::request_id::RequestId::request_id(out).map(str::to_owned),
    }
}

impl Ec2Adapter {
    #[must_use]
    pub fn new(client: ec2::Client, retry: RetryPolicy) -> Self {
        Ec2Adapter { client, retry }
    }

    async fn call<T, E, F, Fut>(&self, operation: &'static str, call: F) -> Result<T, AwsError>
    where
        F: Fn(ec2::Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        super::call(&self.retry, AwsService::Ec2, operation, &self.client, call).await
    }
}

#[async_trait]
impl Ec2Api for Ec2Adapter {
    async fn describe_instance_types(
        &self,
        filter: &[Filter],
    ) -> Result<Vec<InstanceTypeInfo>, AwsError> {
        let items = self
            .call("DescribeInstanceTypes", |c| {
                c.describe_instance_types()
                    .set_filters(filters(filter))
                    .max_results(INSTANCE_TYPES_PAGE_SIZE)
                    .into_paginator()
                    .items()
                    .send()
                    .try_collect()
            })
            .await?;
        Ok(items.iter().map(instance_type_info).collect())
    }

    async fn describe_instance_type_offerings(
        &self,
        filter: &[Filter],
    ) -> Result<Vec<InstanceTypeOffering>, AwsError> {
        let items = self
            .call("DescribeInstanceTypeOfferings", |c| {
                c.describe_instance_type_offerings()
                    .location_type(t::LocationType::AvailabilityZone)
                    .set_filters(filters(filter))
                    .into_paginator()
                    .items()
                    .send()
                    .try_collect()
            })
            .await?;
        Ok(items
            .iter()
            .filter_map(|o| {
                Some(InstanceTypeOffering {
                    instance_type: o.instance_type()?.as_str().to_owned(),
                    location: o.location()?.to_owned(),
                })
            })
            .collect())
    }

    async fn describe_spot_price_history(
        &self,
        request: &SpotPriceHistoryRequest,
    ) -> Result<Vec<SpotPrice>, AwsError> {
        let start = request
            .start_time
            .map(|t| aws_smithy_types::DateTime::from_secs(t.as_second()));
        let items = self
            .call("DescribeSpotPriceHistory", |c| {
                c.describe_spot_price_history()
                    .set_instance_types((!request.instance_types.is_empty()).then(|| {
                        request
                            .instance_types
                            .iter()
                            .map(|t| t::InstanceType::from(t.as_str()))
                            .collect()
                    }))
                    .set_product_descriptions(
                        (!request.product_descriptions.is_empty())
                            .then(|| request.product_descriptions.clone()),
                    )
                    .set_start_time(start)
                    .into_paginator()
                    .items()
                    .send()
                    .try_collect()
            })
            .await?;
        Ok(items
            .iter()
            .filter_map(|p| {
                Some(SpotPrice {
                    instance_type: p.instance_type()?.as_str().to_owned(),
                    zone: p.availability_zone()?.to_owned(),
                    price: p.spot_price()?.parse().ok()?,
                    timestamp: timestamp(p.timestamp()).unwrap_or(Timestamp::UNIX_EPOCH),
                })
            })
            .collect())
    }

    async fn describe_subnets(&self, filter: &[Filter]) -> Result<Vec<Subnet>, AwsError> {
        let items = self
            .call("DescribeSubnets", |c| {
                c.describe_subnets()
                    .set_filters(filters(filter))
                    .into_paginator()
                    .items()
                    .send()
                    .try_collect()
            })
            .await?;
        Ok(items
            .iter()
            .map(|s| Subnet {
                id: s.subnet_id().unwrap_or("").to_owned(),
                zone: s.availability_zone().unwrap_or("").to_owned(),
                zone_id: s.availability_zone_id().unwrap_or("").to_owned(),
                vpc_id: s.vpc_id().unwrap_or("").to_owned(),
                available_ip_address_count: count(s.available_ip_address_count()),
                map_public_ip_on_launch: s.map_public_ip_on_launch().unwrap_or(false),
                tags: tags_of(s.tags()),
            })
            .collect())
    }

    async fn describe_security_groups(
        &self,
        filter: &[Filter],
    ) -> Result<Vec<SecurityGroup>, AwsError> {
        let items = self
            .call("DescribeSecurityGroups", |c| {
                c.describe_security_groups()
                    .set_filters(filters(filter))
                    .into_paginator()
                    .items()
                    .send()
                    .try_collect()
            })
            .await?;
        Ok(items
            .iter()
            .map(|g| SecurityGroup {
                id: g.group_id().unwrap_or("").to_owned(),
                name: g.group_name().unwrap_or("").to_owned(),
                vpc_id: g.vpc_id().unwrap_or("").to_owned(),
                tags: tags_of(g.tags()),
            })
            .collect())
    }

    async fn describe_images(
        &self,
        request: &DescribeImagesRequest,
    ) -> Result<Vec<Image>, AwsError> {
        let items = self
            .call("DescribeImages", |c| {
                c.describe_images()
                    .set_image_ids(
                        (!request.image_ids.is_empty()).then(|| request.image_ids.clone()),
                    )
                    .set_owners((!request.owners.is_empty()).then(|| request.owners.clone()))
                    .set_filters(filters(&request.filters))
                    .set_include_deprecated(request.include_deprecated.then_some(true))
                    .into_paginator()
                    .items()
                    .send()
                    .try_collect()
            })
            .await?;
        Ok(items
            .iter()
            .map(|i| Image {
                id: i.image_id().unwrap_or("").to_owned(),
                name: i.name().unwrap_or("").to_owned(),
                architecture: i
                    .architecture()
                    .map(|a| a.as_str().to_owned())
                    .unwrap_or_default(),
                creation_date: i.creation_date().unwrap_or("").to_owned(),
                deprecation_time: i.deprecation_time().map(str::to_owned),
                owner_id: i.owner_id().unwrap_or("").to_owned(),
                state: i.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
                tags: tags_of(i.tags()),
            })
            .collect())
    }

    async fn describe_availability_zones(&self) -> Result<Vec<AvailabilityZone>, AwsError> {
        let out = self
            .call("DescribeAvailabilityZones", |c| {
                c.describe_availability_zones().send()
            })
            .await?;
        Ok(out
            .availability_zones()
            .iter()
            .map(|z| AvailabilityZone {
                name: z.zone_name().unwrap_or("").to_owned(),
                zone_id: z.zone_id().unwrap_or("").to_owned(),
                zone_type: z.zone_type().unwrap_or("availability-zone").to_owned(),
            })
            .collect())
    }

    async fn create_launch_template(
        &self,
        request: &CreateLaunchTemplateRequest,
    ) -> Result<LaunchTemplate, AwsError> {
        let template_data = launch_template_data(&request.data);
        let out = self
            .call("CreateLaunchTemplate", |c| {
                c.create_launch_template()
                    .launch_template_name(&request.name)
                    .launch_template_data(template_data.clone())
                    .set_tag_specifications(
                        (!request.tags.is_empty()).then(|| {
                            vec![tag_spec(t::ResourceType::LaunchTemplate, &request.tags)]
                        }),
                    )
                    .dry_run(request.dry_run)
                    .send()
            })
            .await?;
        Ok(out
            .launch_template()
            .map(launch_template)
            .unwrap_or_default())
    }

    async fn describe_launch_templates(
        &self,
        request: &DescribeLaunchTemplatesRequest,
    ) -> Result<Vec<LaunchTemplate>, AwsError> {
        let items = self
            .call("DescribeLaunchTemplates", |c| {
                c.describe_launch_templates()
                    .set_launch_template_names(
                        (!request.names.is_empty()).then(|| request.names.clone()),
                    )
                    .set_filters(filters(&request.filters))
                    .into_paginator()
                    .items()
                    .send()
                    .try_collect()
            })
            .await?;
        Ok(items.iter().map(launch_template).collect())
    }

    async fn delete_launch_template(&self, template: &LaunchTemplateRef) -> Result<(), AwsError> {
        self.call("DeleteLaunchTemplate", |c| {
            let call = c.delete_launch_template();
            match template {
                LaunchTemplateRef::Id(id) => call.launch_template_id(id),
                LaunchTemplateRef::Name(name) => call.launch_template_name(name),
            }
            .send()
        })
        .await?;
        Ok(())
    }

    async fn create_fleet(
        &self,
        request: &CreateFleetRequest,
    ) -> Result<CreateFleetResponse, AwsError> {
        let configs: Vec<t::FleetLaunchTemplateConfigRequest> = request
            .launch_template_configs
            .iter()
            .map(|config| {
                t::FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        t::FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_name(&config.launch_template_name)
                            .version(&config.version)
                            .build(),
                    )
                    .set_overrides(Some(
                        config
                            .overrides
                            .iter()
                            .map(|o| {
                                t::FleetLaunchTemplateOverridesRequest::builder()
                                    .instance_type(t::InstanceType::from(o.instance_type.as_str()))
                                    .subnet_id(&o.subnet_id)
                                    .availability_zone(&o.zone)
                                    .set_image_id(o.image_id.clone())
                                    .build()
                            })
                            .collect(),
                    ))
                    .build()
            })
            .collect();
        let capacity = i32::try_from(request.total_target_capacity).unwrap_or(i32::MAX);
        let target = t::TargetCapacitySpecificationRequest::builder()
            .total_target_capacity(capacity)
            .default_target_capacity_type(t::DefaultTargetCapacityType::from(
                request.capacity_type.as_str(),
            ))
            .build();
        let tag_specs = if request.tags.is_empty() {
            None
        } else {
            Some(vec![
                tag_spec(t::ResourceType::Instance, &request.tags),
                tag_spec(t::ResourceType::Volume, &request.tags),
                tag_spec(t::ResourceType::Fleet, &request.tags),
            ])
        };
        let out = self
            .call("CreateFleet", |c| {
                let mut call = c
                    .create_fleet()
                    .r#type(t::FleetType::Instant)
                    .set_launch_template_configs(Some(configs.clone()))
                    .target_capacity_specification(target.clone())
                    .set_tag_specifications(tag_specs.clone())
                    .set_client_token(request.client_token.clone())
                    .set_context(request.context.clone())
                    .dry_run(request.dry_run);
                call = match request.capacity_type {
                    CapacityType::Spot => call.spot_options(
                        t::SpotOptionsRequest::builder()
                            .allocation_strategy(t::SpotAllocationStrategy::from(
                                request.allocation_strategy.as_str(),
                            ))
                            .build(),
                    ),
                    // Reserved capacity is on-demand capacity in the reservation the launch
                    // template names.
                    CapacityType::OnDemand | CapacityType::Reserved => call.on_demand_options(
                        t::OnDemandOptionsRequest::builder()
                            .allocation_strategy(t::FleetOnDemandAllocationStrategy::from(
                                request.allocation_strategy.as_str(),
                            ))
                            .build(),
                    ),
                };
                call.send()
            })
            .await?;
        Ok(fleet_response(&out))
    }

    async fn run_instances(
        &self,
        request: &RunInstancesRequest,
    ) -> Result<Vec<Instance>, AwsError> {
        let out = self
            .call("RunInstances", |c| {
                let call = c.run_instances();
                let call = match &request.launch_data {
                    Some(data) => inline_launch_data(call, data, &request.tags),
                    None => call
                        .launch_template(
                            t::LaunchTemplateSpecification::builder()
                                .launch_template_name(&request.launch_template_name)
                                .build(),
                        )
                        .set_tag_specifications(
                            (!request.tags.is_empty())
                                .then(|| vec![tag_spec(t::ResourceType::Instance, &request.tags)]),
                        ),
                };
                call.instance_type(t::InstanceType::from(request.instance_type.as_str()))
                    .set_subnet_id(request.subnet_id.clone())
                    .set_image_id(request.image_id.clone())
                    .min_count(1)
                    .max_count(1)
                    .dry_run(request.dry_run)
                    .send()
            })
            .await?;
        Ok(out.instances().iter().filter_map(instance).collect())
    }

    async fn describe_instances(
        &self,
        request: &DescribeInstancesRequest,
    ) -> Result<Vec<Instance>, AwsError> {
        let pages = self
            .call("DescribeInstances", |c| {
                c.describe_instances()
                    .set_instance_ids(
                        (!request.instance_ids.is_empty()).then(|| request.instance_ids.clone()),
                    )
                    .set_filters(filters(&request.filters))
                    .into_paginator()
                    .send()
                    .try_collect()
            })
            .await?;
        Ok(pages
            .iter()
            .flat_map(ec2::operation::describe_instances::DescribeInstancesOutput::reservations)
            .flat_map(t::Reservation::instances)
            .filter_map(instance)
            .collect())
    }

    async fn terminate_instances(
        &self,
        instance_ids: &[String],
    ) -> Result<Vec<InstanceStateChange>, AwsError> {
        let out = self
            .call("TerminateInstances", |c| {
                c.terminate_instances()
                    .set_instance_ids(Some(instance_ids.to_vec()))
                    .send()
            })
            .await?;
        Ok(out
            .terminating_instances()
            .iter()
            .map(|change| InstanceStateChange {
                instance_id: change.instance_id().unwrap_or("").to_owned(),
                previous_state: state(change.previous_state()),
                current_state: state(change.current_state()),
            })
            .collect())
    }

    async fn create_tags(&self, resource_ids: &[String], tags: &Tags) -> Result<(), AwsError> {
        self.call("CreateTags", |c| {
            c.create_tags()
                .set_resources(Some(resource_ids.to_vec()))
                .set_tags(Some(ec2_tags(tags)))
                .send()
        })
        .await?;
        Ok(())
    }
}
