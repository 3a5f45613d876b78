//! The one place where aws-sdk errors become [`AwsError`]s: service, operation, request id, HTTP
//! status and error code are read from the SDK error, the class is derived from the code, and
//! the error is logged with those fields (Karpenter v1.5's structured error handler). The
//! message is the service's own text, unchanged. A call that got no answer in time (the SDK's
//! attempt timeout, or a connect or read timeout of its HTTP client) is a `timeout`-class error.

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_types::request_id::RequestId;
use karpenter_actors::ports::aws_error::{AwsError, AwsService};

/// Converts a failed SDK call into an [`AwsError`] and logs it.
pub fn from_sdk<E>(
    service: AwsService,
    operation: &'static str,
    error: &SdkError<E, HttpResponse>,
) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let timed_out = match error {
        SdkError::TimeoutError(_) => Some("attempt"),
        SdkError::DispatchFailure(failure) if failure.is_timeout() => Some("connect or read"),
        _ => None,
    };
    if let Some(what) = timed_out {
        let aws = AwsError::timeout(service, operation, what, None);
        aws.log();
        return aws;
    }
    let meta = error.meta();
    let code = meta.code();
    let message = meta
        .message()
        .map_or_else(|| DisplayErrorContext(error).to_string(), str::to_owned);
    let mut aws = AwsError::new(service, operation, code, message);
    if let Some(status) = error.raw_response().map(|r| r.status().as_u16()) {
        aws = aws.with_status(status);
    }
    if let Some(request_id) = meta.request_id().or_else(|| error.request_id()) {
        aws = aws.with_request_id(request_id);
    }
    aws.log();
    aws
}
