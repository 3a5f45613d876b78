//! aws-sdk adapters for the AWS ports of `karpenter_actors::ports`.
//!
//! [`AwsClients::connect`] builds one SDK configuration from the standard credential and region
//! chain plus `Settings.aws_region` and `Settings.aws_endpoint_url` (emulators such as moto), and
//! one adapter per service over it. The SDK's own retries are off: every adapter call goes
//! through [`call`], which retries throttling, server and transport failures with the shared
//! [`RetryPolicy`] and turns SDK errors into structured
//! [`karpenter_actors::ports::aws_error::AwsError`]s in one place ([`error::from_sdk`]).

pub mod ec2;
pub mod eks;
pub mod error;
pub mod eventbridge;
pub mod iam;
pub mod pricing;
pub mod sqs;
pub mod ssm;

use std::future::Future;
use std::sync::Arc;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use karpenter_actors::ports::aws_error::{AwsError, AwsService};
use karpenter_actors::providers::cloud_provider::{AwsProviderSettings, AwsProviders};
use karpenter_config::Settings;

pub use karpenter_actors::retry::RetryPolicy;

/// Runs one SDK call under the retry policy; failures become structured errors.
pub(crate) async fn call<C, T, E, F, Fut>(
    retry: &RetryPolicy,
    service: AwsService,
    operation: &'static str,
    client: &C,
    call: F,
) -> Result<T, AwsError>
where
    C: Clone,
    F: Fn(C) -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    retry
        .run(|| {
            // Boxed: SDK futures are tens of kilobytes, too large to move around inline.
            let fut = Box::pin(call(client.clone()));
            async move {
                fut.await
                    .map_err(|e| error::from_sdk(service, operation, &e))
            }
        })
        .await
}

/// Where and as whom to connect; built from [`Settings`], overridable in tests.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
    /// Static credentials (tests against emulators); `None` uses the standard chain.
    pub static_credentials: Option<(String, String)>,
    pub retry: RetryPolicy,
}

impl Connection {
    #[must_use]
    pub fn from_settings(settings: &Settings) -> Self {
        Connection {
            region: settings.aws_region.clone(),
            endpoint_url: settings
                .aws_endpoint_url
                .as_ref()
                .map(|u| u.as_str().to_owned()),
            static_credentials: None,
            retry: RetryPolicy::default(),
        }
    }

    /// Loads the SDK configuration: the standard chain, with this connection's overrides.
    pub async fn sdk_config(&self) -> SdkConfig {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            // Retries are ours (see the module docs); one attempt per SDK call.
            .retry_config(RetryConfig::disabled());
        if let Some(region) = &self.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        if let Some((id, secret)) = &self.static_credentials {
            loader = loader.credentials_provider(aws_sdk_ec2::config::Credentials::new(
                id, secret, None, None, "static",
            ));
        }
        loader.load().await
    }
}

/// One adapter per AWS service, sharing one SDK configuration.
#[derive(Debug, Clone)]
pub struct AwsClients {
    pub ec2: Arc<ec2::Ec2Adapter>,
    pub sqs: Arc<sqs::SqsAdapter>,
    pub eventbridge: Arc<eventbridge::EventBridgeAdapter>,
    pub iam: Arc<iam::IamAdapter>,
    pub ssm: Arc<ssm::SsmAdapter>,
    pub pricing: Arc<pricing::PricingAdapter>,
    pub eks: Arc<eks::EksAdapter>,
    /// The region the SDK resolved (settings, environment, profile or IMDS); empty if none.
    pub region: String,
}

impl AwsClients {
    /// Builds every adapter. The Pricing API is served from a few regions only; its client
    /// uses the endpoint region Karpenter picks for the cluster's region.
    pub async fn connect(connection: &Connection) -> Self {
        let config = connection.sdk_config().await;
        let retry = connection.retry;
        let region = config.region().map(ToString::to_string).unwrap_or_default();
        let mut pricing_config = aws_sdk_pricing::config::Builder::from(&config);
        if connection.endpoint_url.is_none() {
            pricing_config =
                pricing_config.region(Region::new(pricing::pricing_endpoint_region(&region)));
        }
        AwsClients {
            ec2: Arc::new(ec2::Ec2Adapter::new(
                aws_sdk_ec2::Client::new(&config),
                retry,
            )),
            sqs: Arc::new(sqs::SqsAdapter::new(
                aws_sdk_sqs::Client::new(&config),
                retry,
            )),
            eventbridge: Arc::new(eventbridge::EventBridgeAdapter::new(
                aws_sdk_eventbridge::Client::new(&config),
                retry,
            )),
            iam: Arc::new(iam::IamAdapter::new(
                aws_sdk_iam::Client::new(&config),
                retry,
            )),
            ssm: Arc::new(ssm::SsmAdapter::new(
                aws_sdk_ssm::Client::new(&config),
                retry,
            )),
            pricing: Arc::new(pricing::PricingAdapter::new(
                aws_sdk_pricing::Client::from_conf(pricing_config.build()),
                retry,
            )),
            eks: Arc::new(eks::EksAdapter::new(
                aws_sdk_eks::Client::new(&config),
                retry,
            )),
            region,
        }
    }

    /// The AWS providers over these adapters (the Pricing API unless `ISOLATED_VPC`); the
    /// cloud provider is `AwsCloudProvider::new(view, providers, clock, settings)`. Must run on
    /// the tokio runtime (the batchers and the launch-template janitor start here).
    pub fn providers(
        &self,
        settings: &AwsProviderSettings,
    ) -> Result<AwsProviders, karpenter_actors::providers::pricing::PricingError> {
        let pricing: Option<Arc<dyn karpenter_actors::ports::pricing::PricingApi>> =
            (!settings.isolated_vpc).then(|| Arc::clone(&self.pricing) as _);
        AwsProviders::new(Arc::clone(&self.ec2) as _, pricing, settings)
    }
}
