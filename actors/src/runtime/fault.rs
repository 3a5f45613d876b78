//! Deterministic fault injection: a seeded plan the runtime consults before each handler (and
//! before each `started`, under the message name [`STARTED_HOOK`]). A matching rule makes the
//! handler panic, return an error, stall for a delay, or drops the message.
//!
//! A rule selects by actor kind, key (exact, or a prefix ending in `*`), message type name, the
//! Nth matching message, and a probability; `times` caps how often it fires. Occurrences are
//! counted per rule and per actor (kind + key), and a probability draw is a hash of (seed, rule,
//! kind, key, message, occurrence): the same plan and seed give the same failures however the
//! actors interleave. Every injected fault is logged ([`FaultPlan::injected`]).
//!
//! Plans are built in tests with [`FaultRule`] or loaded from YAML/JSON (for `simulate --chaos`):
//!
//! ```yaml
//! seed: 42
//! rules:
//!   - kind: NodeClaimActor
//!     key: "default-*"
//!     message: Reconcile
//!     nth: 2
//!     action: panic
//!   - kind: NodePoolActor
//!     probability: 0.1
//!     action: delay
//!     delay: 2s
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use karpenter_config::parse_go_duration;
use karpenter_core::draw::unit_draw;
use serde::{Deserialize, Serialize};

/// The message name under which `started` consults the plan.
pub const STARTED_HOOK: &str = "started";

/// At most this many injected faults are kept in the log; a chaos run injects far fewer, and
/// the cap keeps a long simulation's memory flat.
pub const MAX_INJECTION_LOG: usize = 10_000;

/// What a rule does to the message it selects.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FaultAction {
    /// The handler panics (caught and supervised like any panic).
    Panic,
    /// The handler returns a recoverable [`super::ActorError`] with category `injected`.
    Error,
    /// The handler starts after this delay (tokio time), holding the mailbox meanwhile.
    Delay(Duration),
    /// The message is dropped; a requester gets [`super::SendError::Dropped`] at once.
    Drop,
}

impl fmt::Display for FaultAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Panic => f.write_str("panic"),
            Self::Error => f.write_str("error"),
            Self::Delay(delay) => write!(f, "delay {delay:?}"),
            Self::Drop => f.write_str("drop"),
        }
    }
}

/// One selector and action.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRule {
    kind: Option<String>,
    key: Option<String>,
    message: Option<String>,
    nth: Option<u64>,
    probability: Option<f64>,
    times: Option<u64>,
    action: FaultAction,
}

impl FaultRule {
    /// A rule that applies `action` to every message until narrowed.
    #[must_use]
    pub fn new(action: FaultAction) -> Self {
        Self {
            kind: None,
            key: None,
            message: None,
            nth: None,
            probability: None,
            times: None,
            action,
        }
    }

    /// Only actors of this kind.
    #[must_use]
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Only this key, or keys starting with the prefix before a trailing `*`.
    #[must_use]
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Only this message type ([`super::Mail::NAME`], or [`STARTED_HOOK`]).
    #[must_use]
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// Only the Nth matching message (1-based) of each actor.
    #[must_use]
    pub fn nth(mut self, nth: u64) -> Self {
        self.nth = Some(nth);
        self
    }

    /// Each matching message with this probability (deterministic for a seed).
    #[must_use]
    pub fn probability(mut self, probability: f64) -> Self {
        self.probability = Some(probability);
        self
    }

    /// At most this many times per actor.
    #[must_use]
    pub fn times(mut self, times: u64) -> Self {
        self.times = Some(times);
        self
    }

    fn matches(&self, kind: &str, key: &str, message: &str) -> bool {
        self.kind.as_deref().is_none_or(|k| k == kind)
            && self.message.as_deref().is_none_or(|m| m == message)
            && self
                .key
                .as_deref()
                .is_none_or(|pattern| match pattern.strip_suffix('*') {
                    Some(prefix) => key.starts_with(prefix),
                    None => pattern == key,
                })
    }

    fn validate(&self, path: &str) -> Result<(), FaultPlanError> {
        let invalid = |field: &str, rule: &str| FaultPlanError::Invalid {
            path: format!("{path}.{field}"),
            rule: rule.to_owned(),
        };
        if self.nth == Some(0) {
            return Err(invalid(
                "nth",
                "must be at least 1 (occurrences count from 1)",
            ));
        }
        if self.times == Some(0) {
            return Err(invalid("times", "must be at least 1"));
        }
        if let Some(p) = self.probability
            && !(0.0..=1.0).contains(&p)
        {
            return Err(invalid("probability", "must be between 0 and 1"));
        }
        if let Some(key) = &self.key
            && key.trim_end_matches('*').contains('*')
        {
            return Err(invalid("key", "`*` is only allowed once, at the end"));
        }
        Ok(())
    }
}

/// An injected fault, as logged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InjectedFault {
    pub rule: usize,
    pub kind: String,
    pub key: String,
    pub message: String,
    /// The occurrence (1-based) of the message for this rule and actor.
    pub occurrence: u64,
    pub action: String,
}

#[derive(Debug, Default)]
struct Counts {
    seen: u64,
    fired: u64,
}

#[derive(Debug, Default)]
struct PlanState {
    counts: HashMap<(usize, String), Counts>,
    log: Vec<InjectedFault>,
}

/// A seeded set of rules; the first rule that fires for a message decides.
#[derive(Debug)]
pub struct FaultPlan {
    seed: u64,
    rules: Vec<FaultRule>,
    state: Mutex<PlanState>,
    /// Set by [`Self::disarm`]: no rule fires any more.
    disarmed: AtomicBool,
}

impl FaultPlan {
    /// An empty plan with this seed.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            rules: Vec::new(),
            state: Mutex::default(),
            disarmed: AtomicBool::new(false),
        }
    }

    /// Adds a rule (rules are tried in order).
    ///
    /// # Errors
    /// A rule that breaks a rule of the file format (nth 0, probability outside 0..=1, ...).
    pub fn with_rule(mut self, rule: FaultRule) -> Result<Self, FaultPlanError> {
        rule.validate(&format!("rules[{}]", self.rules.len()))?;
        self.rules.push(rule);
        Ok(self)
    }

    /// Parses a plan from YAML (JSON is YAML too, but [`Self::from_json`] gives JSON errors).
    pub fn from_yaml(text: &str) -> Result<Self, FaultPlanError> {
        let file: FaultPlanFile = karpenter_core::yaml::from_str(text)
            .map_err(|e| FaultPlanError::Parse(e.to_string()))?;
        file.into_plan()
    }

    /// Parses a plan from JSON.
    pub fn from_json(text: &str) -> Result<Self, FaultPlanError> {
        let file: FaultPlanFile =
            serde_json::from_str(text).map_err(|e| FaultPlanError::Parse(e.to_string()))?;
        file.into_plan()
    }

    /// The seed.
    #[must_use]
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Stops injecting: from now on no rule fires (a chaos run's calm end). The log stays.
    pub fn disarm(&self) {
        self.disarmed.store(true, Ordering::Relaxed);
    }

    /// The faults injected so far, in order (at most [`MAX_INJECTION_LOG`]).
    #[must_use]
    pub fn injected(&self) -> Vec<InjectedFault> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .log
            .clone()
    }

    /// Decides the fault for one message about to be handled.
    pub(crate) fn decide(&self, kind: &str, key: &str, message: &str) -> Option<FaultAction> {
        if self.rules.is_empty() || self.disarmed.load(Ordering::Relaxed) {
            return None;
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut chosen = None;
        for (index, rule) in self.rules.iter().enumerate() {
            if !rule.matches(kind, key, message) {
                continue;
            }
            // Every matching rule counts the message, so a rule's `nth` does not depend on
            // whether an earlier rule fired.
            let counts = state
                .counts
                .entry((index, format!("{kind}/{key}")))
                .or_default();
            counts.seen += 1;
            let occurrence = counts.seen;
            if chosen.is_some()
                || rule.nth.is_some_and(|nth| nth != occurrence)
                || rule.times.is_some_and(|times| counts.fired >= times)
                || rule.probability.is_some_and(|p| {
                    message_draw(self.seed, index, kind, key, message, occurrence) >= p
                })
            {
                continue;
            }
            counts.fired += 1;
            chosen = Some(rule.action);
            if state.log.len() < MAX_INJECTION_LOG {
                state.log.push(InjectedFault {
                    rule: index,
                    kind: kind.to_owned(),
                    key: key.to_owned(),
                    message: message.to_owned(),
                    occurrence,
                    action: rule.action.to_string(),
                });
            }
        }
        chosen
    }
}

/// A uniform draw in [0, 1) from the seed and the message's identity.
fn message_draw(
    seed: u64,
    rule: usize,
    kind: &str,
    key: &str,
    message: &str,
    occurrence: u64,
) -> f64 {
    let rule_bytes = (rule as u64).to_le_bytes();
    let occurrence_bytes = occurrence.to_le_bytes();
    unit_draw(
        seed,
        &[
            &rule_bytes,
            kind.as_bytes(),
            key.as_bytes(),
            message.as_bytes(),
            &occurrence_bytes,
        ],
    )
}

/// A plan that could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultPlanError {
    /// Not valid YAML/JSON, or a field of the wrong type or unknown.
    #[error("fault plan: {0}")]
    Parse(String),
    /// A field breaks a rule.
    #[error("fault plan: {path}: {rule}")]
    Invalid { path: String, rule: String },
}

impl FaultPlanError {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Parse(_) => "fault_plan_parse",
            Self::Invalid { .. } => "fault_plan_invalid",
        }
    }
}

/// The file form of a plan.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultPlanFile {
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub rules: Vec<FaultRuleFile>,
}

/// The file form of a rule.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRuleFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nth: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u64>,
    pub action: FaultActionName,
    /// A Go duration (`500ms`, `2s`); required for and only allowed with `action: delay`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<String>,
}

/// The action names of the file form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultActionName {
    Panic,
    Error,
    Delay,
    Drop,
}

impl FaultPlanFile {
    /// Checks every rule and builds the plan.
    pub fn into_plan(self) -> Result<FaultPlan, FaultPlanError> {
        let mut plan = FaultPlan::new(self.seed);
        for (index, rule) in self.rules.into_iter().enumerate() {
            let path = format!("rules[{index}]");
            let action = match (rule.action, rule.delay.as_deref()) {
                (FaultActionName::Delay, Some(text)) => {
                    FaultAction::Delay(parse_go_duration(text).map_err(|e| {
                        FaultPlanError::Invalid {
                            path: format!("{path}.delay"),
                            rule: e.to_string(),
                        }
                    })?)
                }
                (FaultActionName::Delay, None) => {
                    return Err(FaultPlanError::Invalid {
                        path: format!("{path}.delay"),
                        rule: "required when action is delay".to_owned(),
                    });
                }
                (_, Some(_)) => {
                    return Err(FaultPlanError::Invalid {
                        path: format!("{path}.delay"),
                        rule: "only allowed when action is delay".to_owned(),
                    });
                }
                (FaultActionName::Panic, None) => FaultAction::Panic,
                (FaultActionName::Error, None) => FaultAction::Error,
                (FaultActionName::Drop, None) => FaultAction::Drop,
            };
            plan = plan.with_rule(FaultRule {
                kind: rule.kind,
                key: rule.key,
                message: rule.message,
                nth: rule.nth,
                probability: rule.probability,
                times: rule.times,
                action,
            })?;
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_fires_once_per_actor_on_that_occurrence() {
        let plan = FaultPlan::new(1)
            .with_rule(FaultRule::new(FaultAction::Panic).message("Launch").nth(2))
            .unwrap();
        let fired: Vec<_> = (0..3)
            .map(|_| plan.decide("NodeClaimActor", "a", "Launch"))
            .collect();
        assert_eq!(fired, vec![None, Some(FaultAction::Panic), None]);
        assert_eq!(
            plan.decide("NodeClaimActor", "b", "Launch"),
            None,
            "b's first Launch"
        );
        assert_eq!(
            plan.decide("NodeClaimActor", "b", "Launch"),
            Some(FaultAction::Panic)
        );
        assert_eq!(plan.decide("NodeClaimActor", "a", "Other"), None);
    }

    #[test]
    fn key_prefix_and_times_narrow_a_rule() {
        let plan = FaultPlan::new(1)
            .with_rule(FaultRule::new(FaultAction::Drop).key("default-*").times(1))
            .unwrap();
        assert_eq!(plan.decide("K", "other", "M"), None);
        assert_eq!(plan.decide("K", "default-1", "M"), Some(FaultAction::Drop));
        assert_eq!(plan.decide("K", "default-1", "M"), None);
        assert_eq!(plan.decide("K", "default-2", "M"), Some(FaultAction::Drop));
    }

    #[test]
    fn probability_draws_depend_only_on_seed_and_identity() {
        let draws = |seed| -> Vec<bool> {
            let plan = FaultPlan::new(seed)
                .with_rule(FaultRule::new(FaultAction::Error).probability(0.3))
                .unwrap();
            (0..200)
                .map(|i| plan.decide("K", &format!("k{}", i % 7), "M").is_some())
                .collect()
        };
        assert_eq!(draws(7), draws(7));
        assert_ne!(draws(7), draws(8));
        let hits = draws(7).iter().filter(|hit| **hit).count();
        assert!((30..90).contains(&hits), "about 30% of 200, got {hits}");
    }

    #[test]
    fn yaml_plan_with_a_delay_loads() {
        let plan = FaultPlan::from_yaml(
            "seed: 3\nrules:\n  - kind: K\n    action: delay\n    delay: 1m30s\n  - action: drop\n",
        )
        .unwrap();
        assert_eq!(plan.seed(), 3);
        assert_eq!(
            plan.decide("K", "x", "M"),
            Some(FaultAction::Delay(Duration::from_secs(90)))
        );
        assert_eq!(plan.decide("J", "x", "M"), Some(FaultAction::Drop));
    }

    #[test]
    fn json_plan_loads() {
        let plan =
            FaultPlan::from_json(r#"{"seed": 9, "rules": [{"message": "M", "action": "panic"}]}"#)
                .unwrap();
        assert_eq!(plan.decide("K", "x", "M"), Some(FaultAction::Panic));
    }

    #[test]
    fn bad_rules_are_rejected_with_their_path() {
        let cases = [
            ("rules:\n  - action: delay\n", "rules[0].delay"),
            (
                "rules:\n  - action: panic\n  - action: delay\n    delay: soon\n",
                "rules[1].delay",
            ),
            (
                "rules:\n  - action: panic\n    delay: 1s\n",
                "rules[0].delay",
            ),
            ("rules:\n  - action: panic\n    nth: 0\n", "rules[0].nth"),
            (
                "rules:\n  - action: panic\n    probability: 1.5\n",
                "rules[0].probability",
            ),
            ("rules:\n  - action: panic\n    key: a*b\n", "rules[0].key"),
        ];
        for (yaml, path) in cases {
            match FaultPlan::from_yaml(yaml) {
                Err(FaultPlanError::Invalid { path: got, .. }) => assert_eq!(got, path, "{yaml}"),
                other => panic!("{yaml}: expected an invalid {path}, got {other:?}"),
            }
        }
        assert!(matches!(
            FaultPlan::from_yaml("rules:\n  - action: explode\n"),
            Err(FaultPlanError::Parse(_))
        ));
        assert!(matches!(
            FaultPlan::from_yaml("seed: 1\nrulez: []\n"),
            Err(FaultPlanError::Parse(_))
        ));
    }
}
