//! The one error type every AWS port returns, with the structured details of Karpenter v1.5's
//! structured error handler (service, operation, request id, HTTP status, error code) as fields,
//! and the error class decided once from the error code.
//!
//! Data flow: an adapter (`src/aws`) or kwok builds an [`AwsError`] from a failed call with
//! [`AwsError::new`]; the class comes from [`AwsErrorClass::classify`]. Providers branch on the
//! class (`is_not_found`, `is_insufficient_capacity`, ...), metrics and events use
//! [`AwsError::category`], and logs carry the fields. The message is the service's own text,
//! unchanged.

use std::fmt;

/// The AWS service a call went to, named as Karpenter's `aws-service-name` log key spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AwsService {
    Ec2,
    Eks,
    Sqs,
    EventBridge,
    Iam,
    Ssm,
    Pricing,
}

impl AwsService {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            AwsService::Ec2 => "EC2",
            AwsService::Eks => "EKS",
            AwsService::Sqs => "SQS",
            AwsService::EventBridge => "EventBridge",
            AwsService::Iam => "IAM",
            AwsService::Ssm => "SSM",
            AwsService::Pricing => "Pricing",
        }
    }
}

impl fmt::Display for AwsService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of failure an AWS error is, decided once from its code (and HTTP status when the
/// code says nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AwsErrorClass {
    /// The named resource does not exist (instance, launch template, queue, profile, parameter).
    NotFound,
    /// EC2 has no capacity for the request (ICE and its relatives); the offering is marked
    /// unavailable for 3 minutes.
    InsufficientCapacity,
    /// Request rate exceeded; retried with backoff.
    Throttled,
    /// The credentials lack a permission or are invalid.
    Unauthorized,
    /// Spot could not be used because the spot service-linked role is missing and may not be
    /// created (`AuthFailure.ServiceLinkedRoleCreationNotPermitted`): the whole spot capacity
    /// type is marked unavailable.
    SpotServiceLinkedRoleMissing,
    /// A resource with that name already exists.
    AlreadyExists,
    /// A dry run would have succeeded (`DryRunOperation`).
    DryRunSucceeded,
    /// The client token was used before with other parameters (`IdempotentParameterMismatch`):
    /// EC2 refuses the request without acting on it, and a retry with the same token fails the
    /// same way. The caller must pick a new token (after looking for what the earlier request
    /// with that token launched).
    IdempotentParameterMismatch,
    /// The service failed (HTTP 5xx or an internal-error code).
    Server,
    /// No response: connection or I/O failure before a status arrived.
    Transport,
    /// No response in time: an attempt outran its timeout (connect, read or attempt), or the
    /// operation its deadline across retries. The request may have been carried out, so it is
    /// retried like a transport failure, and only where a retry is safe (idempotent calls, or
    /// calls with a client token such as `CreateFleet`).
    Timeout,
    /// Anything else: a bad request, a conflict, an unknown code.
    Other,
}

/// Codes that mean "no capacity" (Karpenter's unfulfillable-capacity list, reference 4.4).
const INSUFFICIENT_CAPACITY_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "ReservationCapacityExceeded",
    "InsufficientCapacity",
];

const THROTTLING_CODES: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
    "TransactionInProgressException",
    "ProvisionedThroughputExceededException",
    "BandwidthLimitExceeded",
];

const NOT_FOUND_CODES: &[&str] = &[
    "NotFound",
    "NoSuchEntity",
    "ParameterNotFound",
    "ParameterVersionNotFound",
    "ResourceNotFoundException",
    "QueueDoesNotExist",
    "AWS.SimpleQueueService.NonExistentQueue",
    "InvalidLaunchTemplateName.NotFoundException",
    "InvalidLaunchTemplateId.NotFound",
    "InvalidLaunchTemplateId.Malformed",
];

const LAUNCH_TEMPLATE_NOT_FOUND_CODES: &[&str] = &[
    "InvalidLaunchTemplateName.NotFoundException",
    "InvalidLaunchTemplateId.NotFound",
];

const UNAUTHORIZED_CODES: &[&str] = &[
    "UnauthorizedOperation",
    "AccessDenied",
    "AccessDeniedException",
    "AuthFailure",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
    "MissingAuthenticationToken",
    "OptInRequired",
];

const ALREADY_EXISTS_CODES: &[&str] = &[
    "EntityAlreadyExists",
    "InvalidLaunchTemplateName.AlreadyExistsException",
    "ResourceAlreadyExistsException",
    "QueueAlreadyExists",
    "QueueNameExists",
    "ParameterAlreadyExists",
    "AlreadyExists",
];

const SERVER_CODES: &[&str] = &[
    "InternalError",
    "InternalFailure",
    "InternalServerError",
    "ServiceUnavailable",
    "Unavailable",
    "InternalException",
];

/// The code EC2 returns when spot needs its service-linked role and may not create it.
pub const SPOT_SERVICE_LINKED_ROLE_CODE: &str = "AuthFailure.ServiceLinkedRoleCreationNotPermitted";
/// The code of a dry run that would have succeeded.
pub const DRY_RUN_OPERATION_CODE: &str = "DryRunOperation";
/// The code EC2 answers when a client token is reused with different parameters.
pub const IDEMPOTENT_PARAMETER_MISMATCH_CODE: &str = "IdempotentParameterMismatch";

impl AwsErrorClass {
    /// Classifies an error from its code and HTTP status; the code wins when it is known.
    #[must_use]
    pub fn classify(code: Option<&str>, status: Option<u16>) -> Self {
        if let Some(code) = code {
            if code == SPOT_SERVICE_LINKED_ROLE_CODE {
                return AwsErrorClass::SpotServiceLinkedRoleMissing;
            }
            if code == DRY_RUN_OPERATION_CODE {
                return AwsErrorClass::DryRunSucceeded;
            }
            if code == IDEMPOTENT_PARAMETER_MISMATCH_CODE {
                return AwsErrorClass::IdempotentParameterMismatch;
            }
            if INSUFFICIENT_CAPACITY_CODES.contains(&code) {
                return AwsErrorClass::InsufficientCapacity;
            }
            if THROTTLING_CODES.contains(&code) {
                return AwsErrorClass::Throttled;
            }
            if NOT_FOUND_CODES.contains(&code) || code.ends_with(".NotFound") {
                return AwsErrorClass::NotFound;
            }
            if UNAUTHORIZED_CODES.contains(&code) || code.starts_with("AuthFailure") {
                return AwsErrorClass::Unauthorized;
            }
            if ALREADY_EXISTS_CODES.contains(&code) || code.ends_with(".Duplicate") {
                return AwsErrorClass::AlreadyExists;
            }
            if SERVER_CODES.contains(&code) {
                return AwsErrorClass::Server;
            }
        }
        match status {
            Some(429) => AwsErrorClass::Throttled,
            Some(401 | 403) => AwsErrorClass::Unauthorized,
            Some(404) => AwsErrorClass::NotFound,
            Some(500..=599) => AwsErrorClass::Server,
            None if code.is_none() => AwsErrorClass::Transport,
            _ => AwsErrorClass::Other,
        }
    }

    /// A bounded label for metrics and event reasons.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            AwsErrorClass::NotFound => "not_found",
            AwsErrorClass::InsufficientCapacity => "insufficient_capacity",
            AwsErrorClass::Throttled => "throttled",
            AwsErrorClass::Unauthorized => "unauthorized",
            AwsErrorClass::SpotServiceLinkedRoleMissing => "spot_service_linked_role_missing",
            AwsErrorClass::AlreadyExists => "already_exists",
            AwsErrorClass::DryRunSucceeded => "dry_run",
            AwsErrorClass::IdempotentParameterMismatch => "idempotent_parameter_mismatch",
            AwsErrorClass::Server => "server",
            AwsErrorClass::Transport => "transport",
            AwsErrorClass::Timeout => "timeout",
            AwsErrorClass::Other => "other",
        }
    }

    /// Whether retrying the same request later may succeed (throttling, server, transport and
    /// timeout failures).
    #[must_use]
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            AwsErrorClass::Throttled
                | AwsErrorClass::Server
                | AwsErrorClass::Transport
                | AwsErrorClass::Timeout
        )
    }

    /// Whether the request may have been carried out although it failed (a server error, or no
    /// answer at all): a create must be retried with the same client token, never afresh.
    #[must_use]
    pub fn is_ambiguous(self) -> bool {
        matches!(
            self,
            AwsErrorClass::Server | AwsErrorClass::Transport | AwsErrorClass::Timeout
        )
    }
}

/// A failed AWS call with its structured details. `Display` is the service's message unchanged;
/// the details are fields (and log fields, see [`AwsError::log`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AwsError {
    pub service: AwsService,
    /// The API operation, e.g. `CreateFleet`.
    pub operation: &'static str,
    pub request_id: Option<String>,
    /// HTTP status of the response; `None` when no response arrived.
    pub status: Option<u16>,
    /// The AWS error code, e.g. `InsufficientInstanceCapacity`.
    pub code: Option<String>,
    pub message: String,
    pub class: AwsErrorClass,
}

impl AwsError {
    /// An error with a code and message; the class is derived from the code.
    #[must_use]
    pub fn new(
        service: AwsService,
        operation: &'static str,
        code: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        AwsError {
            service,
            operation,
            request_id: None,
            status: None,
            code: code.map(str::to_owned),
            message: message.into(),
            class: AwsErrorClass::classify(code, None),
        }
    }

    /// Sets the HTTP status and re-classifies (a status can decide a code-less error).
    #[must_use]
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self.class = AwsErrorClass::classify(self.code.as_deref(), Some(status));
        self
    }

    /// A call that got no answer within `limit`; `what` says which limit (`"attempt"`,
    /// `"connect"`, `"read"`, `"operation deadline"`). It has no code and no status.
    #[must_use]
    pub fn timeout(
        service: AwsService,
        operation: &'static str,
        what: &str,
        limit: Option<std::time::Duration>,
    ) -> Self {
        let message = match limit {
            Some(limit) => format!("{operation}: no answer within the {what} timeout of {limit:?}"),
            None => format!("{operation}: no answer within the {what} timeout"),
        };
        AwsError {
            service,
            operation,
            request_id: None,
            status: None,
            code: None,
            message,
            class: AwsErrorClass::Timeout,
        }
    }

    #[must_use]
    pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into());
        self
    }

    /// A bounded label for metrics and Kubernetes events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        self.class.as_str()
    }

    #[must_use]
    pub fn is_not_found(&self) -> bool {
        self.class == AwsErrorClass::NotFound
    }

    #[must_use]
    pub fn is_insufficient_capacity(&self) -> bool {
        self.class == AwsErrorClass::InsufficientCapacity
    }

    #[must_use]
    pub fn is_retryable(&self) -> bool {
        self.class.is_retryable()
    }

    /// See [`AwsErrorClass::is_ambiguous`].
    #[must_use]
    pub fn is_ambiguous(&self) -> bool {
        self.class.is_ambiguous()
    }

    #[must_use]
    pub fn is_timeout(&self) -> bool {
        self.class == AwsErrorClass::Timeout
    }

    /// Whether EC2 refused a reused client token (see
    /// [`AwsErrorClass::IdempotentParameterMismatch`]).
    #[must_use]
    pub fn is_idempotent_parameter_mismatch(&self) -> bool {
        self.class == AwsErrorClass::IdempotentParameterMismatch
    }

    /// Whether a launch template named in the request has gone (the launch is retried once with a
    /// fresh template, as Karpenter does).
    #[must_use]
    pub fn is_launch_template_not_found(&self) -> bool {
        self.code
            .as_deref()
            .is_some_and(|code| LAUNCH_TEMPLATE_NOT_FOUND_CODES.contains(&code))
    }

    /// Writes the failed call as one debug line with Karpenter's structured `aws-*` fields
    /// (rendered from the error itself, see [`crate::logs`]). Debug, not error: every failure
    /// is also returned, and the caller that handles it logs it at the level Karpenter uses
    /// (most end in a `Reconciler error` with the same fields); this line traces each call.
    pub fn log(&self) {
        tracing::debug!(
            class = self.category(),
            error = crate::logs::err(self),
            "aws request failed"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_code_family_gets_its_class() {
        let cases = [
            (
                "InsufficientInstanceCapacity",
                AwsErrorClass::InsufficientCapacity,
            ),
            ("UnfulfillableCapacity", AwsErrorClass::InsufficientCapacity),
            ("RequestLimitExceeded", AwsErrorClass::Throttled),
            ("ThrottlingException", AwsErrorClass::Throttled),
            ("InvalidInstanceID.NotFound", AwsErrorClass::NotFound),
            ("NoSuchEntity", AwsErrorClass::NotFound),
            ("ParameterNotFound", AwsErrorClass::NotFound),
            ("UnauthorizedOperation", AwsErrorClass::Unauthorized),
            (
                SPOT_SERVICE_LINKED_ROLE_CODE,
                AwsErrorClass::SpotServiceLinkedRoleMissing,
            ),
            ("AuthFailure", AwsErrorClass::Unauthorized),
            ("EntityAlreadyExists", AwsErrorClass::AlreadyExists),
            (
                "InvalidLaunchTemplateName.AlreadyExistsException",
                AwsErrorClass::AlreadyExists,
            ),
            ("DryRunOperation", AwsErrorClass::DryRunSucceeded),
            (
                "IdempotentParameterMismatch",
                AwsErrorClass::IdempotentParameterMismatch,
            ),
            ("InternalError", AwsErrorClass::Server),
            ("InvalidParameterValue", AwsErrorClass::Other),
        ];
        for (code, class) in cases {
            assert_eq!(
                AwsErrorClass::classify(Some(code), Some(400)),
                class,
                "{code}"
            );
        }
    }

    #[test]
    fn a_reused_client_token_is_its_own_class_and_is_not_retried_as_is() {
        let error = AwsError::new(
            AwsService::Ec2,
            "CreateFleet",
            Some(IDEMPOTENT_PARAMETER_MISMATCH_CODE),
            "The client token was used with different parameters.",
        )
        .with_status(400);
        assert!(error.is_idempotent_parameter_mismatch());
        assert_eq!(error.category(), "idempotent_parameter_mismatch");
        assert!(
            !error.is_retryable(),
            "the same token fails the same way again"
        );
    }

    #[test]
    fn a_status_decides_when_the_code_is_unknown_or_missing() {
        assert_eq!(
            AwsErrorClass::classify(None, Some(503)),
            AwsErrorClass::Server
        );
        assert_eq!(
            AwsErrorClass::classify(Some("Weird"), Some(429)),
            AwsErrorClass::Throttled
        );
        assert_eq!(
            AwsErrorClass::classify(None, None),
            AwsErrorClass::Transport
        );
        assert_eq!(
            AwsErrorClass::classify(None, Some(400)),
            AwsErrorClass::Other
        );
    }

    #[test]
    fn the_message_is_displayed_unchanged_and_fields_stay_fields() {
        let error = AwsError::new(
            AwsService::Ec2,
            "CreateFleet",
            Some("InsufficientInstanceCapacity"),
            "We currently do not have sufficient capacity",
        )
        .with_status(400)
        .with_request_id("req-1");
        assert_eq!(
            error.to_string(),
            "We currently do not have sufficient capacity"
        );
        assert_eq!(error.category(), "insufficient_capacity");
        assert_eq!(error.request_id.as_deref(), Some("req-1"));
        assert!(error.is_insufficient_capacity());
        assert!(!error.is_retryable());
    }

    #[test]
    fn a_timeout_has_its_own_class_and_is_retried_as_an_ambiguous_failure() {
        let error = AwsError::timeout(
            AwsService::Ec2,
            "CreateFleet",
            "attempt",
            Some(std::time::Duration::from_secs(30)),
        );
        assert_eq!(error.category(), "timeout");
        assert!(error.is_timeout());
        assert!(error.is_retryable());
        assert!(error.is_ambiguous(), "the fleet may have launched");
        assert_eq!((error.code.as_deref(), error.status), (None, None));
        assert_eq!(
            error.to_string(),
            "CreateFleet: no answer within the attempt timeout of 30s"
        );
        assert!(!AwsErrorClass::Throttled.is_ambiguous());
    }

    #[test]
    fn launch_template_not_found_is_recognised() {
        let error = AwsError::new(
            AwsService::Ec2,
            "CreateFleet",
            Some("InvalidLaunchTemplateName.NotFoundException"),
            "gone",
        );
        assert!(error.is_launch_template_not_found());
        assert!(error.is_not_found());
    }
}
