//! Karpenter's cloud provider call metrics (`pkg/cloudprovider/metrics`): a decorator around
//! the [`CloudProvider`] port that times every call Karpenter times and counts its failures.
//!
//! ```text
//! actor handler (controller C, runtime::current_controller) -> MeteredCloudProvider::create
//!   -> inner provider -> duration{controller=C, method="Create", provider}
//!                     -> on error: errors_total{..., error="InsufficientCapacityError" | ...}
//! ```
//!
//! The daemon's assembly wraps the cloud provider the actors get with it, inside the leadership
//! gate (a call the gate refuses never reaches the cloud, so it is not timed).
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `karpenter_cloudprovider_duration_seconds` | histogram (Prometheus' default buckets) | controller, method, provider |
//! | `karpenter_cloudprovider_errors_total` | counter | controller, method, provider, error |
//!
//! `controller` is Karpenter's controller name of the actor handler the call comes from, `""`
//! from elsewhere (a task an actor spawned), as Karpenter's when its context names none.
//! `method` is Karpenter's method name; `error` is Karpenter's error type for the three it
//! tells apart, `""` for the others (bounded sets).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use karpenter_core::apis::EC2NodeClass;
use karpenter_core::apis::nodeclaim::NodeClaim;
use karpenter_core::apis::nodepool::NodePool;
use karpenter_core::apis::{SlimNode, SlimNodeClaim};
use karpenter_core::domain::tags::Tags;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use crate::metrics::DEFAULT_BUCKETS_SECONDS;
use crate::ports::cloud_provider::{
    CloudProvider, CloudProviderError, DriftReason, InstanceTypes, RepairPolicy,
};
use crate::runtime::current_controller;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CallLabels {
    controller: &'static str,
    method: &'static str,
    provider: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ErrorLabels {
    controller: &'static str,
    method: &'static str,
    provider: &'static str,
    error: &'static str,
}

fn default_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS_SECONDS)
}

/// The two families; cheap to clone.
#[derive(Debug, Clone)]
pub struct CloudProviderMetrics {
    duration: Family<CallLabels, Histogram, fn() -> Histogram>,
    errors: Family<ErrorLabels, Counter>,
}

impl Default for CloudProviderMetrics {
    /// Unregistered families (tests).
    fn default() -> Self {
        Self {
            duration: Family::new_with_constructor(default_histogram),
            errors: Family::default(),
        }
    }
}

/// Karpenter's error type label of a failed call.
fn error_type(error: &CloudProviderError) -> &'static str {
    match error {
        CloudProviderError::InsufficientCapacity { .. } => "InsufficientCapacityError",
        CloudProviderError::NodeClaimNotFound { .. } => "NodeClaimNotFoundError",
        CloudProviderError::NodeClassNotReady { .. } => "NodeClassNotReadyError",
        _ => "",
    }
}

impl CloudProviderMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "karpenter_cloudprovider_duration_seconds",
            "Duration of cloud provider method calls. Labeled by the controller, method name and provider.",
            metrics.duration.clone(),
        );
        registry.register(
            "karpenter_cloudprovider_errors",
            "Total number of errors returned from CloudProvider calls.",
            metrics.errors.clone(),
        );
        metrics
    }

    fn record<T>(
        &self,
        method: &'static str,
        provider: &'static str,
        took: Duration,
        result: &Result<T, CloudProviderError>,
    ) {
        let controller = current_controller();
        self.duration
            .get_or_create(&CallLabels {
                controller,
                method,
                provider,
            })
            .observe(took.as_secs_f64());
        if let Err(error) = result {
            self.errors
                .get_or_create(&ErrorLabels {
                    controller,
                    method,
                    provider,
                    error: error_type(error),
                })
                .inc();
        }
    }

    /// `karpenter_cloudprovider_errors_total` for one label set (tests).
    #[must_use]
    pub fn errors_count(
        &self,
        controller: &'static str,
        method: &'static str,
        provider: &'static str,
        error: &'static str,
    ) -> u64 {
        self.errors
            .get_or_create(&ErrorLabels {
                controller,
                method,
                provider,
                error,
            })
            .get()
    }
}

/// The cloud provider, its calls timed and counted (see the module docs).
#[derive(Debug)]
pub struct MeteredCloudProvider {
    inner: Arc<dyn CloudProvider>,
    metrics: CloudProviderMetrics,
}

impl MeteredCloudProvider {
    #[must_use]
    pub fn new(inner: Arc<dyn CloudProvider>, metrics: CloudProviderMetrics) -> Self {
        Self { inner, metrics }
    }

    async fn timed<T>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<T, CloudProviderError>>,
    ) -> Result<T, CloudProviderError> {
        let started = Instant::now();
        let result = call.await;
        self.metrics
            .record(method, self.inner.name(), started.elapsed(), &result);
        result
    }
}

#[async_trait]
impl CloudProvider for MeteredCloudProvider {
    async fn create(&self, nodeclaim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        self.timed("Create", self.inner.create(nodeclaim)).await
    }

    async fn delete(&self, nodeclaim: &NodeClaim) -> Result<(), CloudProviderError> {
        self.timed("Delete", self.inner.delete(nodeclaim)).await
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        self.timed("Get", self.inner.get(provider_id)).await
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        self.timed("List", self.inner.list()).await
    }

    async fn list_brief(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        self.timed("List", self.inner.list_brief()).await
    }

    async fn instance_types(
        &self,
        nodepool: &NodePool,
    ) -> Result<InstanceTypes, CloudProviderError> {
        self.timed("GetInstanceTypes", self.inner.instance_types(nodepool))
            .await
    }

    async fn is_drifted(
        &self,
        nodeclaim: &SlimNodeClaim,
    ) -> Result<Option<DriftReason>, CloudProviderError> {
        self.timed("IsDrifted", self.inner.is_drifted(nodeclaim))
            .await
    }

    fn validation_launches(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<Vec<(String, String)>, CloudProviderError> {
        self.inner.validation_launches(nodeclass)
    }

    // Not one of Karpenter's CloudProvider methods (its tagging controller calls EC2 itself):
    // not timed.
    async fn tag_instance(
        &self,
        nodeclaim: &SlimNodeClaim,
        tags: &Tags,
    ) -> Result<(), CloudProviderError> {
        self.inner.tag_instance(nodeclaim, tags).await
    }

    fn node_registered(&self, nodeclaim: &SlimNodeClaim, node: &SlimNode) {
        self.inner.node_registered(nodeclaim, node);
    }

    fn repair_policies(&self) -> Cow<'static, [RepairPolicy]> {
        self.inner.repair_policies()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeCloudProvider;

    #[tokio::test]
    async fn calls_are_timed_and_failures_counted_by_karpenters_error_type() {
        let mut registry = Registry::default();
        let metrics = CloudProviderMetrics::register(&mut registry);
        let fake = Arc::new(FakeCloudProvider::with_instance_types(Vec::new()));
        let metered = MeteredCloudProvider::new(fake.clone(), metrics.clone());
        let provider = fake.name();

        metered.list().await.unwrap();
        let missing = metered.get("aws:///us-west-2a/i-0123456789").await;
        assert!(
            matches!(missing, Err(CloudProviderError::NodeClaimNotFound { .. })),
            "{missing:?}"
        );

        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            format!(
                "karpenter_cloudprovider_duration_seconds_count{{controller=\"\",method=\"List\",provider=\"{provider}\"}} 1"
            ),
            format!(
                "karpenter_cloudprovider_duration_seconds_count{{controller=\"\",method=\"Get\",provider=\"{provider}\"}} 1"
            ),
            format!(
                "karpenter_cloudprovider_errors_total{{controller=\"\",method=\"Get\",provider=\"{provider}\",error=\"NodeClaimNotFoundError\"}} 1"
            ),
        ] {
            assert!(text.contains(&line), "missing {line} in\n{text}");
        }
        assert!(
            !text.contains("method=\"List\",provider=\"aws\",error"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_controller_is_the_running_handlers() {
        let metrics = CloudProviderMetrics::default();
        let metered = MeteredCloudProvider::new(
            Arc::new(FakeCloudProvider::with_instance_types(Vec::new())),
            metrics.clone(),
        );
        let provider = metered.name();
        crate::runtime::in_controller("nodeclaim.lifecycle", async {
            let _ = metered.get("aws:///us-west-2a/i-0123456789").await;
        })
        .await;
        assert_eq!(
            metrics.errors_count(
                "nodeclaim.lifecycle",
                "Get",
                provider,
                "NodeClaimNotFoundError"
            ),
            1
        );
    }
}
