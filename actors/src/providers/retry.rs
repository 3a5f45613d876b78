//! [`RetryingEc2`]: the [`RetryPolicy`] the aws-sdk adapters use, in front of any [`Ec2Api`]
//! (kwok in tests and `simulate`), so both retry throttling and server errors the same way.

use std::sync::Arc;

use async_trait::async_trait;

use crate::ports::aws_error::AwsError;
use crate::ports::ec2::{
    AvailabilityZone, CreateFleetRequest, CreateFleetResponse, CreateLaunchTemplateRequest,
    DescribeImagesRequest, DescribeInstancesRequest, DescribeLaunchTemplatesRequest, Ec2Api,
    Filter, Image, Instance, InstanceStateChange, InstanceTypeInfo, InstanceTypeOffering,
    LaunchTemplate, LaunchTemplateRef, RunInstancesRequest, SecurityGroup, SpotPrice,
    SpotPriceHistoryRequest, Subnet, Tags,
};
use crate::retry::RetryPolicy;

/// An [`Ec2Api`] that retries the calls of another with a [`RetryPolicy`].
#[derive(Debug, Clone)]
pub struct RetryingEc2 {
    inner: Arc<dyn Ec2Api>,
    policy: RetryPolicy,
}

impl RetryingEc2 {
    #[must_use]
    pub fn new(inner: Arc<dyn Ec2Api>, policy: RetryPolicy) -> Self {
        RetryingEc2 { inner, policy }
    }
}

#[async_trait]
impl Ec2Api for RetryingEc2 {
    async fn describe_instance_types(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InstanceTypeInfo>, AwsError> {
        self.policy
            .run(|| self.inner.describe_instance_types(filters))
            .await
    }
    async fn describe_instance_type_offerings(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InstanceTypeOffering>, AwsError> {
        self.policy
            .run(|| self.inner.describe_instance_type_offerings(filters))
            .await
    }
    async fn describe_spot_price_history(
        &self,
        request: &SpotPriceHistoryRequest,
    ) -> Result<Vec<SpotPrice>, AwsError> {
        self.policy
            .run(|| self.inner.describe_spot_price_history(request))
            .await
    }
    async fn describe_subnets(&self, filters: &[Filter]) -> Result<Vec<Subnet>, AwsError> {
        self.policy
            .run(|| self.inner.describe_subnets(filters))
            .await
    }
    async fn describe_security_groups(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<SecurityGroup>, AwsError> {
        self.policy
            .run(|| self.inner.describe_security_groups(filters))
            .await
    }
    async fn describe_images(
        &self,
        request: &DescribeImagesRequest,
    ) -> Result<Vec<Image>, AwsError> {
        self.policy
            .run(|| self.inner.describe_images(request))
            .await
    }
    async fn describe_availability_zones(&self) -> Result<Vec<AvailabilityZone>, AwsError> {
        self.policy
            .run(|| self.inner.describe_availability_zones())
            .await
    }
    async fn create_launch_template(
        &self,
        request: &CreateLaunchTemplateRequest,
    ) -> Result<LaunchTemplate, AwsError> {
        self.policy
            .run(|| self.inner.create_launch_template(request))
            .await
    }
    async fn describe_launch_templates(
        &self,
        request: &DescribeLaunchTemplatesRequest,
    ) -> Result<Vec<LaunchTemplate>, AwsError> {
        self.policy
            .run(|| self.inner.describe_launch_templates(request))
            .await
    }
    async fn delete_launch_template(&self, template: &LaunchTemplateRef) -> Result<(), AwsError> {
        self.policy
            .run(|| self.inner.delete_launch_template(template))
            .await
    }
    async fn create_fleet(
        &self,
        request: &CreateFleetRequest,
    ) -> Result<CreateFleetResponse, AwsError> {
        self.policy.run(|| self.inner.create_fleet(request)).await
    }
    async fn run_instances(
        &self,
        request: &RunInstancesRequest,
    ) -> Result<Vec<Instance>, AwsError> {
        self.policy.run(|| self.inner.run_instances(request)).await
    }
    async fn describe_instances(
        &self,
        request: &DescribeInstancesRequest,
    ) -> Result<Vec<Instance>, AwsError> {
        self.policy
            .run(|| self.inner.describe_instances(request))
            .await
    }
    async fn terminate_instances(
        &self,
        instance_ids: &[String],
    ) -> Result<Vec<InstanceStateChange>, AwsError> {
        self.policy
            .run(|| self.inner.terminate_instances(instance_ids))
            .await
    }
    async fn create_tags(&self, resource_ids: &[String], tags: &Tags) -> Result<(), AwsError> {
        self.policy
            .run(|| self.inner.create_tags(resource_ids, tags))
            .await
    }
}
