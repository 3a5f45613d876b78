//! Retries of calls to outside systems that may succeed later, with backoff (and jitter) from
//! `backon`: one [`RetryPolicy`] for every caller. The aws-sdk adapters wrap each call in
//! [`RetryPolicy::run`] (throttling, server errors, lost responses);
//! [`crate::providers::retry::RetryingEc2`] puts the same policy in front of kwok's EC2; the
//! Kubernetes adapter retries writes that lost a race with [`RetryPolicy::run_when`].
//!
//! Sleeps are tokio sleeps, so paused-clock tests advance through them instantly.

use std::future::Future;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

use crate::ports::aws_error::AwsError;

/// First backoff step; AWS's standard retry mode starts in the same range.
const DEFAULT_MIN_DELAY: Duration = Duration::from_millis(100);
/// Longest single wait, so a throttled controller still makes progress every few seconds.
const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(5);
/// Attempts in total (the first call and four retries).
pub const DEFAULT_MAX_ATTEMPTS: usize = 5;

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

    /// `attempts` tries `delay` apart, without jitter (client-go's `retry.DefaultRetry` is 5
    /// tries 10 ms apart, for writes that lost an optimistic-concurrency race).
    #[must_use]
    pub fn constant(delay: Duration, attempts: usize) -> Self {
        RetryPolicy {
            min_delay: delay,
            max_delay: delay,
            max_attempts: attempts,
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
        match (self.jitter, crate::jitter::next_jitter_seed()) {
            (true, Some(seed)) => builder.with_jitter().with_jitter_seed(seed),
            (true, None) => builder.with_jitter(),
            (false, _) => builder,
        }
    }

    /// Runs `call` until it succeeds, fails with an error `retryable` refuses, or the attempts
    /// run out.
    pub async fn run_when<T, E, F, Fut>(
        &self,
        call: F,
        retryable: impl FnMut(&E) -> bool,
    ) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        call.retry(self.backoff())
            .sleep(tokio::time::sleep)
            .when(retryable)
            .await
    }

    /// Runs an AWS call until it succeeds, fails with a non-retryable error (not throttling, a
    /// server error or a lost response), or the attempts run out. Each retried failure is logged
    /// with its structured fields.
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
                    wait = %crate::logs::GoDuration(wait),
                    error = crate::logs::err(error),
                    "retrying aws call"
                );
            })
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
    async fn a_constant_policy_retries_only_what_the_caller_calls_retryable() {
        let calls = AtomicUsize::new(0);
        let result: Result<(), &str> = RetryPolicy::constant(Duration::from_millis(10), 3)
            .run_when(
                || async {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        Err("conflict")
                    } else {
                        Err("gone")
                    }
                },
                |error: &&str| *error == "conflict",
            )
            .await;
        assert_eq!(result, Err("gone"));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
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
