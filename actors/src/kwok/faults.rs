//! Fault hooks and call recording shared by the kwok ports: every call is recorded (operation
//! and a one-line detail), and can be made to fail — the next N calls of an operation, or every
//! call matching a predicate — with any [`AwsError`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use karpenter_core::draw::unit_draw;

use crate::ports::aws_error::{AwsError, AwsService};

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCall {
    pub operation: &'static str,
    /// What the call was about (ids, names), for assertions.
    pub detail: String,
}

type Predicate = Arc<dyn Fn(&RecordedCall) -> bool + Send + Sync>;
/// The error a matching call answers with (a fixed one, or one drawn per call).
type ErrorOf = Arc<dyn Fn(&RecordedCall) -> AwsError + Send + Sync>;

struct Rule {
    /// Fails the response after the call took effect (a lost answer) instead of the call.
    after: bool,
    matches: Predicate,
    /// `None`: every matching call fails.
    remaining: Option<usize>,
    error: ErrorOf,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule")
            .field("after", &self.after)
            .field("remaining", &self.remaining)
            .finish_non_exhaustive()
    }
}

fn fixed(error: AwsError) -> ErrorOf {
    Arc::new(move |_: &RecordedCall| error.clone())
}

/// A seeded share of calls fails ([`Faults::fail_share`]): which calls, and with which error.
#[derive(Debug, Clone)]
pub struct FailShare {
    pub seed: u64,
    /// The fraction of calls that fail, in [0, 1].
    pub share: f64,
    /// The service the errors name.
    pub service: AwsService,
    /// `(code, HTTP status)` of the errors, one drawn per failing call.
    pub errors: Vec<(&'static str, u16)>,
    /// Operations spared (e.g. those a process start needs).
    pub spare: Vec<&'static str>,
}

/// Programmable failures and the call log of one kwok service.
#[derive(Debug, Default)]
pub struct Faults {
    rules: Mutex<Vec<Rule>>,
    calls: Mutex<Vec<RecordedCall>>,
    /// Calls answered with an injected error so far.
    injected: AtomicUsize,
}

impl Faults {
    /// The next `count` calls of `operation` fail with `error`.
    pub fn fail_next(&self, operation: &'static str, count: usize, error: AwsError) {
        self.add(
            Arc::new(move |call: &RecordedCall| call.operation == operation),
            Some(count),
            fixed(error),
        );
    }

    /// The next `count` calls of `operation` take effect but answer `error`, as when a response
    /// is lost on the way back. Services check these with [`Faults::check_response`].
    pub fn lose_next_responses(&self, operation: &'static str, count: usize, error: AwsError) {
        self.rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Rule {
                after: true,
                matches: Arc::new(move |call: &RecordedCall| call.operation == operation),
                remaining: Some(count),
                error: fixed(error),
            });
    }

    /// After a call took effect: the injected error that replaces its answer, if any.
    pub fn check_response(&self, operation: &'static str) -> Result<(), AwsError> {
        let call = RecordedCall {
            operation,
            detail: String::new(),
        };
        let mut rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        let failure = rules
            .iter_mut()
            .find(|rule| rule.after && rule.remaining != Some(0) && (rule.matches)(&call))
            .map(|rule| {
                if let Some(remaining) = rule.remaining.as_mut() {
                    *remaining -= 1;
                }
                (rule.error)(&call)
            });
        rules.retain(|rule| rule.remaining != Some(0));
        drop(rules);
        self.count_injected(failure.is_some());
        failure.map_or(Ok(()), Err)
    }

    /// Every call for which `predicate` holds fails with `error`, until [`Faults::clear`].
    pub fn fail_when(
        &self,
        predicate: impl Fn(&RecordedCall) -> bool + Send + Sync + 'static,
        error: AwsError,
    ) {
        self.add(Arc::new(predicate), None, fixed(error));
    }

    /// A seeded share of the calls (all but the spared operations) fails with errors drawn from
    /// the list, until [`Faults::clear`]. A call decides by a draw of (seed, operation, detail,
    /// how many such calls came before), not of its place among all calls: callers that
    /// interleave differently still see the same failures.
    pub fn fail_share(&self, plan: FailShare) {
        if plan.errors.is_empty() {
            return;
        }
        let counts: Arc<Mutex<HashMap<(&'static str, String), u64>>> = Arc::default();
        let drawn = Arc::new(AtomicU64::new(0));
        let FailShare {
            seed,
            share: fraction,
            service,
            errors,
            spare: spared,
        } = plan;
        let drawn_by_match = Arc::clone(&drawn);
        let matches = move |call: &RecordedCall| {
            if spared.contains(&call.operation) {
                return false;
            }
            let mut counts = counts.lock().unwrap_or_else(PoisonError::into_inner);
            let count = counts
                .entry((call.operation, call.detail.clone()))
                .or_default();
            *count += 1;
            let parts: [&[u8]; 3] = [
                call.operation.as_bytes(),
                call.detail.as_bytes(),
                &count.to_le_bytes(),
            ];
            let draw = unit_draw(seed, &parts);
            drawn_by_match.store(draw.to_bits(), Ordering::Relaxed);
            draw < fraction
        };
        let error = move |call: &RecordedCall| {
            // Which error: the failing draw, spread over [0, share) -> the list.
            let draw = f64::from_bits(drawn.load(Ordering::Relaxed));
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss,
                reason = "an index below errors.len() from a fraction in [0, 1)"
            )]
            let index = ((draw / fraction * errors.len() as f64) as usize).min(errors.len() - 1);
            let (code, status) = errors[index];
            AwsError::new(
                service,
                call.operation,
                Some(code),
                format!("injected by a chaos run: {code}"),
            )
            .with_status(status)
            .with_request_id("kwok-chaos")
        };
        self.add(Arc::new(matches), None, Arc::new(error));
    }

    /// Calls answered with an injected error so far (before or after taking effect).
    #[must_use]
    pub fn injected(&self) -> usize {
        self.injected.load(Ordering::Relaxed)
    }

    fn count_injected(&self, failed: bool) {
        if failed {
            self.injected.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn add(&self, matches: Predicate, remaining: Option<usize>, error: ErrorOf) {
        self.rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Rule {
                after: false,
                matches,
                remaining,
                error,
            });
    }

    pub fn clear(&self) {
        self.rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Records a call and returns the injected error, if a rule matches.
    pub fn check(
        &self,
        operation: &'static str,
        detail: impl Into<String>,
    ) -> Result<(), AwsError> {
        let call = RecordedCall {
            operation,
            detail: detail.into(),
        };
        let mut rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        let failure = rules
            .iter_mut()
            .find(|rule| !rule.after && rule.remaining != Some(0) && (rule.matches)(&call))
            .map(|rule| {
                if let Some(remaining) = rule.remaining.as_mut() {
                    *remaining -= 1;
                }
                (rule.error)(&call)
            });
        rules.retain(|rule| rule.remaining != Some(0));
        drop(rules);
        self.count_injected(failure.is_some());
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(call);
        failure.map_or(Ok(()), Err)
    }

    /// Every call so far.
    #[must_use]
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Number of calls of one operation so far.
    #[must_use]
    pub fn count(&self, operation: &str) -> usize {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|c| c.operation == operation)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error() -> AwsError {
        AwsError::new(
            AwsService::Ec2,
            "CreateFleet",
            Some("InternalError"),
            "boom",
        )
        .with_status(500)
    }

    #[test]
    fn the_next_n_calls_fail_then_calls_succeed() {
        let faults = Faults::default();
        faults.fail_next("CreateFleet", 2, error());
        assert!(faults.check("CreateFleet", "").is_err());
        assert!(faults.check("DescribeInstances", "").is_ok());
        assert!(faults.check("CreateFleet", "").is_err());
        assert!(faults.check("CreateFleet", "").is_ok());
        assert_eq!(faults.count("CreateFleet"), 3);
    }

    #[test]
    fn a_predicate_fails_only_matching_calls() {
        let faults = Faults::default();
        faults.fail_when(|call| call.detail.contains("i-bad"), error());
        assert!(faults.check("TerminateInstances", "i-bad").is_err());
        assert!(faults.check("TerminateInstances", "i-good").is_ok());
        assert!(faults.check("TerminateInstances", "i-bad").is_err());
        faults.clear();
        assert!(faults.check("TerminateInstances", "i-bad").is_ok());
    }

    #[test]
    fn a_share_of_calls_fails_with_drawn_errors_and_spared_operations_never_fail() {
        let run = || {
            let faults = Faults::default();
            faults.fail_share(FailShare {
                seed: 9,
                share: 0.2,
                service: AwsService::Ec2,
                errors: vec![("RequestLimitExceeded", 503), ("InternalError", 500)],
                spare: vec!["DescribeInstanceTypes"],
            });
            let outcomes: Vec<Option<String>> = (0..1_000)
                .map(|_| {
                    faults
                        .check("CreateFleet", "")
                        .err()
                        .map(|e| format!("{:?} {:?} {}", e.code, e.status, e.operation))
                })
                .collect();
            assert!((0..100).all(|_| faults.check("DescribeInstanceTypes", "").is_ok()));
            (outcomes, faults.injected())
        };
        let (outcomes, injected) = run();
        let failed: Vec<&String> = outcomes.iter().flatten().collect();
        assert!(
            (150..250).contains(&failed.len()),
            "{} of 1000 failed",
            failed.len()
        );
        assert_eq!(injected, failed.len());
        assert!(
            failed
                .iter()
                .any(|f| f.contains("RequestLimitExceeded") && f.contains("503"))
        );
        assert!(
            failed
                .iter()
                .any(|f| f.contains("InternalError") && f.contains("500"))
        );
        assert!(failed.iter().all(|f| f.ends_with("CreateFleet")));
        assert_eq!(run().0, outcomes, "the same seed fails the same calls");
    }
}
