//! aws-sdk adapters for the AWS ports of `karpenter_actors::ports`.
//!
//! [`AwsClients::connect`] builds one SDK configuration from the standard credential and region
//! chain plus `Settings.aws_region` and `Settings.aws_endpoint_url` (emulators such as moto), and
//! one adapter per service over it. The SDK's own retries are off: every adapter call goes
//! through [`call`], which retries throttling, server, transport and timeout failures with the
//! shared [`RetryPolicy`] and turns SDK errors into structured
//! [`karpenter_actors::ports::aws_error::AwsError`]s in one place ([`error::from_sdk`]).
//!
//! No call waits forever ([`Timeouts`]): the SDK bounds each attempt (connect, first byte of
//! the answer, the whole attempt), and [`call`] bounds the operation across our retries; a
//! call past either fails with the `timeout` class (retried like a transport failure, and a
//! `CreateFleet` that timed out is re-sent with the same client token). SQS `ReceiveMessage`
//! long-polls, so its attempt gets the poll's wait on top ([`long_poll_timeouts`]).

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
use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use karpenter_actors::ports::aws_error::{AwsError, AwsService};
use karpenter_actors::providers::cloud_provider::{AwsProviderSettings, AwsProviders};
use karpenter_config::Settings;

pub use karpenter_actors::retry::RetryPolicy;

/// How long to wait for a connection to an AWS endpoint: a regional endpoint connects in
/// milliseconds, and the SDK's own default is about this.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one attempt of a call may take, first byte of the answer included: EC2's calls
/// answer within a second or two, an instant `CreateFleet` of 60 types within a few; an attempt
/// silent for this long is lost, and retrying it is safe (idempotent calls, or a client token).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one operation may take across our own retries (5 attempts, waits of at most 5 s):
/// a launch, a reconcile or the interruption poll waits no longer than this on AWS.
pub const OPERATION_TIMEOUT: Duration = Duration::from_mins(2);
/// What a long poll's attempt gets on top of its wait (the answer comes when the wait ends).
pub const LONG_POLL_MARGIN: Duration = Duration::from_secs(10);

/// The SDK's per-attempt timeouts (see the module docs); `Default` is production's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    /// One attempt, and the first byte of its answer.
    pub attempt: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: CONNECT_TIMEOUT,
            attempt: ATTEMPT_TIMEOUT,
        }
    }
}

impl Timeouts {
    /// The SDK's timeout configuration for ordinary calls.
    #[must_use]
    pub fn sdk(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .read_timeout(self.attempt)
            .operation_attempt_timeout(self.attempt)
            .build()
    }
}

/// The SDK's timeouts for a long poll that waits up to `wait` before answering (SQS
/// `ReceiveMessage`): its read and attempt timeouts are the wait plus [`LONG_POLL_MARGIN`].
#[must_use]
pub fn long_poll_timeouts(wait: Duration) -> TimeoutConfig {
    let attempt = wait + LONG_POLL_MARGIN;
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(attempt)
        .operation_attempt_timeout(attempt)
        .build()
}

/// Runs one SDK call under the retry policy, within [`OPERATION_TIMEOUT`]; failures become
/// structured errors.
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
    call_within(OPERATION_TIMEOUT, retry, service, operation, client, call).await
}

/// [`call`] with another deadline for the whole operation, retries included.
pub(crate) async fn call_within<C, T, E, F, Fut>(
    deadline: Duration,
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
    let attempts = retry.run(|| {
        // Boxed: SDK futures are tens of kilobytes, too large to move around inline.
        let fut = Box::pin(call(client.clone()));
        async move {
            fut.await
                .map_err(|e| error::from_sdk(service, operation, &e))
        }
    });
    tokio::time::timeout(deadline, attempts)
        .await
        .unwrap_or_else(|_| {
            let error = AwsError::timeout(service, operation, "operation", Some(deadline));
            error.log();
            Err(error)
        })
}

/// Where and as whom to connect; built from [`Settings`], overridable in tests.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
    /// Static credentials (tests against emulators); `None` uses the standard chain.
    pub static_credentials: Option<(String, String)>,
    pub retry: RetryPolicy,
    pub timeouts: Timeouts,
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
            timeouts: Timeouts::default(),
        }
    }

    /// Loads the SDK configuration: the standard chain, with this connection's overrides.
    pub async fn sdk_config(&self) -> SdkConfig {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            // Retries are ours (see the module docs); one attempt per SDK call, bounded.
            .retry_config(RetryConfig::disabled())
            .timeout_config(self.timeouts.sdk());
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
        clock: Arc<dyn karpenter_actors::ports::clock::Clock>,
    ) -> Result<AwsProviders, karpenter_actors::providers::pricing::PricingError> {
        let pricing: Option<Arc<dyn karpenter_actors::ports::pricing::PricingApi>> =
            (!settings.isolated_vpc).then(|| Arc::clone(&self.pricing) as _);
        AwsProviders::new(Arc::clone(&self.ec2) as _, pricing, settings, clock)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use karpenter_actors::ports::aws_error::AwsErrorClass;
    use karpenter_actors::ports::ec2::{DescribeInstancesRequest, Ec2Api};
    use tokio::net::TcpListener;

    use super::*;

    /// A loopback endpoint that accepts connections, reads nothing and never answers; counts
    /// the connections.
    async fn silent_endpoint() -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
        });
        (url, accepted)
    }

    fn connection(url: String, retry: RetryPolicy) -> Connection {
        Connection {
            region: Some("us-west-2".into()),
            endpoint_url: Some(url),
            static_credentials: Some(("testing".into(), "testing".into())),
            retry,
            timeouts: Timeouts::default(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_that_gets_no_answer_times_out_and_is_retried() {
        let (url, accepted) = silent_endpoint().await;
        let clients = AwsClients::connect(&connection(url, RetryPolicy::fast())).await;
        let started = tokio::time::Instant::now();
        let error = clients
            .ec2
            .describe_instances(&DescribeInstancesRequest::default())
            .await
            .expect_err("nobody answers");
        assert_eq!(error.class, AwsErrorClass::Timeout, "{error:?}");
        assert_eq!(error.category(), "timeout");
        assert_eq!(
            (error.service, error.operation),
            (AwsService::Ec2, "DescribeInstances")
        );
        assert_eq!((error.status, error.code.as_deref()), (None, None));
        // Every attempt ran into the attempt timeout; none waited longer.
        let attempts = karpenter_actors::retry::DEFAULT_MAX_ATTEMPTS;
        let elapsed = started.elapsed();
        assert!(elapsed >= ATTEMPT_TIMEOUT * 5, "{elapsed:?}");
        assert!(elapsed < OPERATION_TIMEOUT, "{elapsed:?}");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            attempts,
            "one connection per attempt"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_operation_ends_at_its_deadline_across_retries() {
        let (url, _) = silent_endpoint().await;
        let config = connection(url, RetryPolicy::default()).sdk_config().await;
        let client = aws_sdk_ec2::Client::new(&config);
        let started = tokio::time::Instant::now();
        let deadline = Duration::from_secs(30);
        let error = call_within(
            deadline,
            &RetryPolicy::default(),
            AwsService::Ec2,
            "CreateFleet",
            &client,
            |c| c.describe_instances().send(),
        )
        .await
        .expect_err("nobody answers");
        assert_eq!(started.elapsed(), deadline);
        assert!(error.is_timeout());
        assert_eq!(
            error.to_string(),
            "CreateFleet: no answer within the operation timeout of 30s"
        );
    }

    #[test]
    fn a_long_poll_waits_longer_than_an_ordinary_call() {
        let ordinary = Timeouts::default().sdk();
        let poll = long_poll_timeouts(Duration::from_secs(20));
        assert_eq!(ordinary.operation_attempt_timeout(), Some(ATTEMPT_TIMEOUT));
        assert_eq!(ordinary.read_timeout(), Some(ATTEMPT_TIMEOUT));
        assert_eq!(ordinary.connect_timeout(), Some(CONNECT_TIMEOUT));
        assert_eq!(
            poll.operation_attempt_timeout(),
            Some(Duration::from_secs(30))
        );
        assert_eq!(poll.read_timeout(), Some(Duration::from_secs(30)));
        assert!(poll.operation_attempt_timeout() > ordinary.operation_attempt_timeout());
    }
}
