//! Fault hooks and call recording shared by the kwok ports: every call is recorded (operation
//! and a one-line detail), and can be made to fail — the next N calls of an operation, or every
//! call matching a predicate — with any [`AwsError`].

use std::sync::{Arc, Mutex, PoisonError};

use crate::ports::aws_error::AwsError;

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCall {
    pub operation: &'static str,
    /// What the call was about (ids, names), for assertions.
    pub detail: String,
}

type Predicate = Arc<dyn Fn(&RecordedCall) -> bool + Send + Sync>;

struct Rule {
    /// Fails the response after the call took effect (a lost answer) instead of the call.
    after: bool,
    matches: Predicate,
    /// `None`: every matching call fails.
    remaining: Option<usize>,
    error: AwsError,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule")
            .field("remaining", &self.remaining)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

/// Programmable failures and the call log of one kwok service.
#[derive(Debug, Default)]
pub struct Faults {
    rules: Mutex<Vec<Rule>>,
    calls: Mutex<Vec<RecordedCall>>,
}

impl Faults {
    /// The next `count` calls of `operation` fail with `error`.
    pub fn fail_next(&self, operation: &'static str, count: usize, error: AwsError) {
        self.add(
            Arc::new(move |call: &RecordedCall| call.operation == operation),
            Some(count),
            error,
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
                error,
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
                rule.error.clone()
            });
        rules.retain(|rule| rule.remaining != Some(0));
        failure.map_or(Ok(()), Err)
    }

    /// Every call for which `predicate` holds fails with `error`, until [`Faults::clear`].
    pub fn fail_when(
        &self,
        predicate: impl Fn(&RecordedCall) -> bool + Send + Sync + 'static,
        error: AwsError,
    ) {
        self.add(Arc::new(predicate), None, error);
    }

    fn add(&self, matches: Predicate, remaining: Option<usize>, error: AwsError) {
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
                rule.error.clone()
            });
        rules.retain(|rule| rule.remaining != Some(0));
        drop(rules);
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
    use crate::ports::aws_error::AwsService;

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
}
