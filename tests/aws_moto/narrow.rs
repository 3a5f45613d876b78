//! An EC2 port that asks for a few instance types only: moto's full catalogue takes seconds to
//! walk, and the cloud-provider scenario needs two types. Every other call goes through as is.

use std::sync::Arc;

use async_trait::async_trait;
use karpenter_actors::ports::aws_error::AwsError;
use karpenter_actors::ports::ec2::{
    AvailabilityZone, CreateFleetRequest, CreateFleetResponse, CreateLaunchTemplateRequest,
    DescribeImagesRequest, DescribeInstancesRequest, DescribeLaunchTemplatesRequest, Ec2Api,
    Filter, Image, Instance, InstanceStateChange, InstanceTypeInfo, InstanceTypeOffering,
    LaunchTemplate, LaunchTemplateRef, RunInstancesRequest, SecurityGroup, SpotPrice,
    SpotPriceHistoryRequest, Subnet, Tags,
};

/// Narrows the catalogue calls to `instance_types`.
#[derive(Debug)]
pub struct NarrowCatalogue {
    pub inner: Arc<dyn Ec2Api>,
    pub instance_types: Vec<String>,
}

impl NarrowCatalogue {
    fn with_types(&self, filters: &[Filter]) -> Vec<Filter> {
        let names: Vec<&str> = self.instance_types.iter().map(String::as_str).collect();
        let mut narrowed = filters.to_vec();
        narrowed.push(Filter::new("instance-type", &names));
        narrowed
    }
}

#[async_trait]
impl Ec2Api for NarrowCatalogue {
    async fn describe_instance_types(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InstanceTypeInfo>, AwsError> {
        self.inner
            .describe_instance_types(&self.with_types(filters))
            .await
    }

    async fn describe_instance_type_offerings(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InstanceTypeOffering>, AwsError> {
        self.inner
            .describe_instance_type_offerings(&self.with_types(filters))
            .await
    }

    async fn describe_spot_price_history(
        &self,
        request: &SpotPriceHistoryRequest,
    ) -> Result<Vec<SpotPrice>, AwsError> {
        let mut narrowed = request.clone();
        narrowed.instance_types.clone_from(&self.instance_types);
        self.inner.describe_spot_price_history(&narrowed).await
    }

    async fn describe_subnets(&self, filters: &[Filter]) -> Result<Vec<Subnet>, AwsError> {
        self.inner.describe_subnets(filters).await
    }

    async fn describe_security_groups(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<SecurityGroup>, AwsError> {
        self.inner.describe_security_groups(filters).await
    }

    async fn describe_images(
        &self,
        request: &DescribeImagesRequest,
    ) -> Result<Vec<Image>, AwsError> {
        self.inner.describe_images(request).await
    }

    async fn describe_availability_zones(&self) -> Result<Vec<AvailabilityZone>, AwsError> {
        self.inner.describe_availability_zones().await
    }

    async fn create_launch_template(
        &self,
        request: &CreateLaunchTemplateRequest,
    ) -> Result<LaunchTemplate, AwsError> {
        self.inner.create_launch_template(request).await
    }

    async fn describe_launch_templates(
        &self,
        request: &DescribeLaunchTemplatesRequest,
    ) -> Result<Vec<LaunchTemplate>, AwsError> {
        self.inner.describe_launch_templates(request).await
    }

    async fn delete_launch_template(&self, template: &LaunchTemplateRef) -> Result<(), AwsError> {
        self.inner.delete_launch_template(template).await
    }

    async fn create_fleet(
        &self,
        request: &CreateFleetRequest,
    ) -> Result<CreateFleetResponse, AwsError> {
        self.inner.create_fleet(request).await
    }

    async fn run_instances(
        &self,
        request: &RunInstancesRequest,
    ) -> Result<Vec<Instance>, AwsError> {
        self.inner.run_instances(request).await
    }

    async fn describe_instances(
        &self,
        request: &DescribeInstancesRequest,
    ) -> Result<Vec<Instance>, AwsError> {
        self.inner.describe_instances(request).await
    }

    async fn terminate_instances(
        &self,
        instance_ids: &[String],
    ) -> Result<Vec<InstanceStateChange>, AwsError> {
        self.inner.terminate_instances(instance_ids).await
    }

    async fn create_tags(&self, resource_ids: &[String], tags: &Tags) -> Result<(), AwsError> {
        self.inner.create_tags(resource_ids, tags).await
    }
}
