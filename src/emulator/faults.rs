//! Test hooks: faults injected per verb and resource (an error status, a delay, or both), and
//! the log of every request the emulator served.
//!
//! The request handler asks [`Faults::check`] before doing anything; a matching rule delays the
//! request (tokio time, so a paused clock skips it) and may answer with its error instead. Rules
//! can be limited to a number of matches or to a seeded share of them. Every request is appended
//! to the [`RequestLog`] with its verb, resource and response code, and counted there per verb,
//! resource and subresource for the whole run (the log itself keeps only the latest).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use karpenter_core::draw::unit_draw;

/// What a request does, as Kubernetes names it (RBAC verbs, plus discovery).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    /// `/api`, `/apis`, `/version`, `/openapi`.
    Discovery,
}

impl Verb {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
            Self::Discovery => "discovery",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error a fault answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedError {
    pub code: u16,
    /// The `Status` reason (`InternalError`, `TooManyRequests`, `ServiceUnavailable`...).
    pub reason: String,
    pub message: String,
}

/// A fault: which requests it matches and what it does to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRule {
    verb: Option<Verb>,
    resource: Option<String>,
    subresource: Option<String>,
    name: Option<String>,
    delay: Option<Duration>,
    error: Option<InjectedError>,
    remaining: Option<usize>,
    /// [`FaultRule::share`]: (seed, parts per million of the matching requests).
    share: Option<(u64, u32)>,
    /// Matching requests so far, per verb and object (the draw's counter).
    seen: HashMap<String, u64>,
}

impl FaultRule {
    /// Fails matching requests with `code` (reason derived from the code).
    #[must_use]
    pub fn fail(code: u16) -> Self {
        let reason = match code {
            409 => "Conflict",
            410 => "Expired",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Self {
            error: Some(InjectedError {
                code,
                reason: reason.to_owned(),
                message: format!("injected fault: {code}"),
            }),
            ..Self::any()
        }
    }

    /// Delays matching requests by `delay`, then serves them.
    #[must_use]
    pub fn delay(delay: Duration) -> Self {
        Self {
            delay: Some(delay),
            ..Self::any()
        }
    }

    fn any() -> Self {
        Self {
            verb: None,
            resource: None,
            subresource: None,
            name: None,
            delay: None,
            error: None,
            remaining: None,
            share: None,
            seen: HashMap::new(),
        }
    }

    /// Only requests with this verb.
    #[must_use]
    pub fn on(mut self, verb: Verb) -> Self {
        self.verb = Some(verb);
        self
    }

    /// Only requests for this resource (plural, as in the URL: `pods`, `nodeclaims`).
    #[must_use]
    pub fn resource(mut self, plural: &str) -> Self {
        self.resource = Some(plural.to_owned());
        self
    }

    /// Only requests for this subresource (`status`, `eviction`, `binding`).
    #[must_use]
    pub fn subresource(mut self, subresource: &str) -> Self {
        self.subresource = Some(subresource.to_owned());
        self
    }

    /// Only requests naming this object.
    #[must_use]
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// Also delay before failing.
    #[must_use]
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Replace the message of the injected error.
    #[must_use]
    pub fn message(mut self, message: &str) -> Self {
        if let Some(error) = &mut self.error {
            message.clone_into(&mut error.message);
        }
        self
    }

    /// Only a seeded share (`fraction`, in [0, 1]) of the requests it matches: a request is
    /// taken when a draw of (seed, rule, verb and object, how many such requests came before)
    /// falls below the share, so a run that makes the same requests sees the same faults,
    /// however its clients interleave.
    #[must_use]
    pub fn share(mut self, fraction: f64, seed: u64) -> Self {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a fraction clamped to [0, 1], times a million"
        )]
        let ppm = (fraction.clamp(0.0, 1.0) * 1_000_000.0).round() as u32;
        self.share = Some((seed, ppm));
        self
    }

    /// Whether this matching request is in the rule's share (counts it).
    fn drawn(&mut self, index: usize, request: &RequestRecord) -> bool {
        let Some((seed, ppm)) = self.share else {
            return true;
        };
        let key = format!(
            "{} {} {}",
            request.verb,
            request.path,
            request.subresource.as_deref().unwrap_or_default()
        );
        let occurrence = self.seen.entry(key.clone()).or_default();
        *occurrence += 1;
        let parts: [&[u8]; 3] = [
            &index.to_le_bytes(),
            key.as_bytes(),
            &occurrence.to_le_bytes(),
        ];
        unit_draw(seed, &parts) * 1_000_000.0 < f64::from(ppm)
    }

    /// Match only the next `n` requests, then stop.
    #[must_use]
    pub fn times(mut self, n: usize) -> Self {
        self.remaining = Some(n);
        self
    }

    fn matches(&self, request: &RequestRecord) -> bool {
        self.verb.is_none_or(|v| v == request.verb)
            && self
                .resource
                .as_ref()
                .is_none_or(|r| request.resource.as_deref() == Some(r))
            && self
                .subresource
                .as_ref()
                .is_none_or(|s| request.subresource.as_deref() == Some(s))
            && self
                .name
                .as_ref()
                .is_none_or(|n| request.name.as_deref() == Some(n))
    }
}

/// What the handler must do for a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FaultOutcome {
    pub delay: Option<Duration>,
    pub error: Option<InjectedError>,
}

/// The injected faults, in the order they were added (the first match wins).
#[derive(Debug, Default)]
pub struct Faults {
    rules: Mutex<Vec<FaultRule>>,
    /// Requests a rule delayed or failed so far.
    injected: AtomicUsize,
}

impl Faults {
    /// Adds a rule.
    pub fn inject(&self, rule: FaultRule) {
        self.rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(rule);
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Rules with matches left.
    #[must_use]
    pub fn active(&self) -> usize {
        self.rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Requests a rule delayed or failed so far.
    #[must_use]
    pub fn injected(&self) -> usize {
        self.injected.load(Ordering::Relaxed)
    }

    pub(crate) fn check(&self, request: &RequestRecord) -> FaultOutcome {
        let mut rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(index) = rules
            .iter_mut()
            .enumerate()
            .position(|(index, r)| r.matches(request) && r.drawn(index, request))
        else {
            return FaultOutcome::default();
        };
        self.injected.fetch_add(1, Ordering::Relaxed);
        let rule = &mut rules[index];
        let outcome = FaultOutcome {
            delay: rule.delay,
            error: rule.error.clone(),
        };
        if let Some(remaining) = &mut rule.remaining {
            *remaining = remaining.saturating_sub(1);
            if *remaining == 0 {
                rules.remove(index);
            }
        }
        outcome
    }
}

/// One served request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    pub query: String,
    pub verb: Verb,
    /// The resource plural, when the path names one.
    pub resource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// The HTTP status of the response (200 for a watch that started).
    pub code: u16,
}

/// How many requests of one verb, resource and subresource the emulator served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestCount {
    pub verb: Verb,
    /// The resource plural (empty for discovery).
    pub resource: String,
    /// The subresource (empty for the object itself).
    pub subresource: String,
    pub count: u64,
}

/// What [`RequestLog`] counts by: verb, resource, subresource.
type CountKey = (Verb, String, String);

/// The most recent requests, bounded so a long simulation does not grow without limit, and
/// the count of every request served, per verb, resource and subresource.
#[derive(Debug)]
pub(crate) struct RequestLog {
    capacity: usize,
    records: Mutex<VecDeque<RequestRecord>>,
    counts: Mutex<BTreeMap<CountKey, u64>>,
}

impl RequestLog {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            records: Mutex::new(VecDeque::new()),
            counts: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn push(&self, record: RequestRecord) {
        {
            let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
            let key = (
                record.verb,
                record.resource.clone().unwrap_or_default(),
                record.subresource.clone().unwrap_or_default(),
            );
            *counts.entry(key).or_default() += 1;
        }
        if self.capacity == 0 {
            return;
        }
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        if records.len() == self.capacity {
            records.pop_front();
        }
        records.push_back(record);
    }

    pub fn snapshot(&self) -> Vec<RequestRecord> {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    pub fn clear(&self) {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Every verb, resource and subresource served so far with its count, most requested
    /// first (ties in the verbs' order, then by resource and subresource).
    pub fn counts(&self) -> Vec<RequestCount> {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let mut counts: Vec<RequestCount> = counts
            .iter()
            .map(|((verb, resource, subresource), count)| RequestCount {
                verb: *verb,
                resource: resource.clone(),
                subresource: subresource.clone(),
                count: *count,
            })
            .collect();
        counts.sort_by_key(|c| std::cmp::Reverse(c.count));
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(verb: Verb, resource: &str) -> RequestRecord {
        RequestRecord {
            method: "GET".into(),
            path: String::new(),
            query: String::new(),
            verb,
            resource: Some(resource.into()),
            namespace: None,
            name: None,
            subresource: None,
            code: 0,
        }
    }

    #[test]
    fn the_log_counts_every_request_though_it_keeps_only_the_latest() {
        let log = RequestLog::new(1);
        log.push(request(Verb::List, "pods"));
        log.push(request(Verb::Get, "nodes"));
        log.push(request(Verb::List, "pods"));
        let mut status = request(Verb::Patch, "pods");
        status.subresource = Some("status".into());
        log.push(status);
        assert_eq!(log.snapshot().len(), 1);
        let counts = log.counts();
        let counted: Vec<(Verb, &str, &str, u64)> = counts
            .iter()
            .map(|c| (c.verb, &*c.resource, &*c.subresource, c.count))
            .collect();
        assert_eq!(
            counted,
            vec![
                (Verb::List, "pods", "", 2),
                (Verb::Get, "nodes", "", 1),
                (Verb::Patch, "pods", "status", 1),
            ]
        );
    }

    #[test]
    fn a_limited_rule_stops_after_its_matches() {
        let faults = Faults::default();
        faults.inject(
            FaultRule::fail(500)
                .on(Verb::Watch)
                .resource("pods")
                .times(2),
        );
        assert!(faults.check(&request(Verb::List, "pods")).error.is_none());
        assert!(faults.check(&request(Verb::Watch, "nodes")).error.is_none());
        assert_eq!(
            faults
                .check(&request(Verb::Watch, "pods"))
                .error
                .unwrap()
                .code,
            500
        );
        assert!(faults.check(&request(Verb::Watch, "pods")).error.is_some());
        assert!(faults.check(&request(Verb::Watch, "pods")).error.is_none());
        assert_eq!(faults.active(), 0);
    }

    #[test]
    fn a_shared_rule_takes_a_seeded_share_of_its_requests() {
        let outcomes = || {
            let faults = Faults::default();
            faults.inject(FaultRule::fail(500).on(Verb::List).share(0.25, 4));
            let taken: Vec<bool> = (0..2_000)
                .map(|_| faults.check(&request(Verb::List, "pods")).error.is_some())
                .collect();
            assert!(faults.check(&request(Verb::Get, "pods")).error.is_none());
            assert_eq!(faults.injected(), taken.iter().filter(|t| **t).count());
            taken
        };
        let taken = outcomes();
        let failed = taken.iter().filter(|t| **t).count();
        assert!((400..600).contains(&failed), "{failed} of 2000");
        assert_eq!(outcomes(), taken, "the same seed takes the same requests");
    }
}
