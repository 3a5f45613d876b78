//! Retries of AWS calls that may succeed later (throttling, server errors, lost responses), with
//! exponential backoff and jitter from `backon`. One policy for every caller: the aws-sdk
//! adapters wrap each call in [`RetryPolicy::run`], and [`RetryingEc2`] puts the same policy in
//! front of any [`Ec2Api`] (kwok in tests and `simulate`).
//!
//! Sleeps are tokio sleeps, so paused-clock tests advance through them instantly.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use backon::{ExponentialBuilder, Retryable};

use crate::ports::aws_error::AwsError;
use crate::ports::ec2::{
    AvailabilityZone, CreateFleetRequest, CreateFleetResponse, CreateLaunchTemplateRequest,
    DescribeImagesRequest, DescribeInstancesRequest, DescribeLaunchTemplatesRequest, Ec2Api,
    Filter, Image, Instance, InstanceStateChange, InstanceTypeInfo, InstanceTypeOffering,
    LaunchTemplate, LaunchTemplateRef, RunInstancesRequest, SecurityGroup, SpotPrice,
    SpotPriceHistoryRequest, Subnet, Tags,
};

/// First backoff step; AWS's standard retry mode starts in the same range.
const DEFAULT_MIN_DELAY: Duration = Duration::from_millis(100);
/// Longest single wait, so a throttled controller still makes progress every few seconds.
const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(5);
/// Attempts in total (the first call and four retries).
const DEFAULT_MAX_ATTEMPTS: usize = 5;

/// How retryable AWS errors are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub min_delay: Duration,
    pub max_delay: Duration,
    /// Attempts in total; 1 disables retries.
    pub max_attempts: usize,
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            min_delay: DEFAULT_MIN_DELAY,
            max_delay: DEFAULT_MAX_DELAY,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// A policy for tests: millisecond waits, no jitter.
    #[must_use]
    pub fn fast() -> Self {
        RetryPolicy {
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            jitter: false,
        }
    }

    #[must_use]
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::fast()
        }
    }

    fn backoff(&self) -> ExponentialBuilder {
        let builder = ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.max_attempts.saturating_sub(1));
        if self.jitter {
            builder.with_jitter()
        } else {
            builder
        }
    }

    /// Runs `call` until it succeeds, fails with a non-retryable error, or the attempts run out.
    /// Each retried failure is logged with its structured fields.
    pub async fn run<T, F, Fut>(&self, call: F) -> Result<T, AwsError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, AwsError>>,
    {
        call.retry(self.backoff())
            .sleep(tokio::time::sleep)
            .when(AwsError::is_retryable)
            .notify(|error: &AwsError, wait: Duration| {
                tracing::debug!(
                    aws_service_name = error.service.as_str(),
                    aws_operation_name = error.operation,
                    aws_error_code = error.code.as_deref().unwrap_or(""),
                    aws_status_code = error.status.unwrap_or(0),
                    wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    "retrying aws call"
                );
            })
            .await
    }
}

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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::ports::aws_error::AwsService;

    fn throttled() -> AwsError {
        AwsError::new(
            AwsService::Ec2,
            "DescribeInstances",
            Some("RequestLimitExceeded"),
            "slow down",
        )
        .with_status(503)
    }

    #[tokio::test(start_paused = true)]
    async fn throttling_is_retried_until_it_succeeds() {
        let calls = AtomicUsize::new(0);
        let result = RetryPolicy::default()
            .run(|| async {
                if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(throttled())
                } else {
                    Ok(7)
                }
            })
            .await;
        assert_eq!(result, Ok(7));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_after_the_last_attempt_with_the_last_error() {
        let calls = AtomicUsize::new(0);
        let result: Result<(), AwsError> = RetryPolicy::fast()
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(throttled())
            })
            .await;
        assert_eq!(
            result.map_err(|e| e.class),
            Err(crate::ports::aws_error::AwsErrorClass::Throttled)
        );
        assert_eq!(calls.load(Ordering::SeqCst), DEFAULT_MAX_ATTEMPTS);
    }

    #[tokio::test(start_paused = true)]
    async fn errors_that_cannot_succeed_later_are_not_retried() {
        let calls = AtomicUsize::new(0);
        let result: Result<(), AwsError> = RetryPolicy::default()
            .run(|| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(AwsError::new(
                    AwsService::Ec2,
                    "CreateFleet",
                    Some("UnauthorizedOperation"),
                    "no",
                ))
            })
            .await;
        assert!(result.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
