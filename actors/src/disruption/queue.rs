//! The orchestration queue (Karpenter's `disruption.queue`, core
//! `pkg/controllers/disruption/orchestration/queue.go`) as data: the commands being carried
//! out, each waiting for its replacements to be `Initialized` before its candidates are deleted,
//! and the history of commands for `karpenter explain node`, `/debug` and the simulation report.
//!
//! The actor owns the IO ([`super::execute`]); this module decides, for one command at one
//! instant, what the next step is ([`Queued::next_step`]).

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use karpenter_core::domain::disruption::{CommandCandidate, CommandDecision, Method};

/// A command older than this is given up: candidates untainted, failure counted (Karpenter's
/// `maxRetryDuration`).
pub const COMMAND_TIMEOUT: Duration = Duration::from_mins(10);
/// A replacement missing from the view this long after the command started was deleted
/// (Karpenter waits 5 s for its cache to show a fresh NodeClaim).
pub const REPLACEMENT_GRACE: Duration = Duration::from_secs(5);
/// Commands kept in the history.
pub const HISTORY_LIMIT: usize = 1000;

/// How a command ended, or where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state", content = "reason")]
pub enum CommandState {
    /// Waiting 15 s for validation.
    Validating,
    /// Abandoned by validation.
    Abandoned(String),
    /// Candidates tainted, replacements launching.
    Executing,
    /// Candidates deleted.
    Succeeded,
    /// Given up; candidates untainted.
    Failed(String),
}

/// One disruption command, for the history.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionRecord {
    pub id: u64,
    /// RFC 3339, when the round decided it.
    pub decided_at: String,
    /// `emptiness`, `drift`, `multi-node`, `single-node` or `repack`.
    pub method: &'static str,
    /// `Empty`, `Drifted` or `Underutilized`.
    pub reason: &'static str,
    /// `delete` or `replace`.
    pub decision: &'static str,
    pub candidates: Vec<CommandCandidate>,
    /// The replacement NodeClaims created (empty before execution).
    pub replacements: Vec<String>,
    /// Per planned replacement, its cheapest kept instance type.
    pub replacement_types: Vec<String>,
    pub price_before: Option<f64>,
    pub price_after: Option<f64>,
    pub state: CommandState,
}

/// The method's name in records and logs.
#[must_use]
pub fn method_name(method: Method) -> &'static str {
    match method {
        Method::Emptiness => "emptiness",
        Method::Drift => "drift",
        Method::MultiNode => "multi-node",
        Method::SingleNode => "single-node",
        Method::Repack => "repack",
    }
}

/// A replacement NodeClaim of a queued command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    pub name: String,
    pub initialized: bool,
}

/// A command in the queue.
#[derive(Debug, Clone)]
pub struct Queued {
    pub id: u64,
    pub method: Method,
    pub decision: CommandDecision,
    pub candidates: Vec<CommandCandidate>,
    pub replacements: Vec<Replacement>,
    pub added: Instant,
}

/// What a replacement looks like in the view now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplacementSeen {
    Missing,
    Launching,
    Initialized,
}

/// The next thing to do for a queued command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Replacements still coming up (their names, for the `DisruptionWaitingReadiness` events).
    Wait(Vec<String>),
    /// Every replacement is initialized: delete the candidates.
    DeleteCandidates,
    /// Give up: untaint the candidates, count the replacements that never initialized.
    Fail { reason: String, launches: usize },
}

impl Queued {
    /// Karpenter's `Command.Reason()`: `underutilized/replace`, `empty/delete`...
    #[must_use]
    pub fn reason(&self) -> String {
        format!("{}/{}", self.method.reason_label(), self.decision.as_str())
    }

    /// The state node names of its candidates.
    pub fn candidate_names(&self) -> impl Iterator<Item = &str> {
        self.candidates.iter().map(|c| c.name.as_str())
    }

    /// Marks replacements initialized from what the view shows and says what comes next.
    pub fn next_step(&mut self, now: Instant, seen: impl Fn(&str) -> ReplacementSeen) -> Step {
        let age = now.saturating_duration_since(self.added);
        if age > COMMAND_TIMEOUT {
            return self.fail(format!("command reached timeout after {}s", age.as_secs()));
        }
        let mut waiting = Vec::new();
        for replacement in self.replacements.iter_mut().filter(|r| !r.initialized) {
            match seen(&replacement.name) {
                ReplacementSeen::Initialized => replacement.initialized = true,
                ReplacementSeen::Missing if age > REPLACEMENT_GRACE => {
                    let reason = format!("replacement {} was deleted", replacement.name);
                    return self.fail(reason);
                }
                ReplacementSeen::Missing | ReplacementSeen::Launching => {
                    waiting.push(replacement.name.clone());
                }
            }
        }
        if waiting.is_empty() {
            Step::DeleteCandidates
        } else {
            Step::Wait(waiting)
        }
    }

    fn fail(&self, reason: String) -> Step {
        Step::Fail {
            reason,
            launches: self.replacements.iter().filter(|r| !r.initialized).count(),
        }
    }
}

/// The queue: commands in flight, found by candidate.
#[derive(Debug, Default)]
pub struct Queue {
    pub commands: Vec<Queued>,
}

impl Queue {
    /// State node names with a command in flight.
    #[must_use]
    pub fn candidates(&self) -> BTreeSet<String> {
        self.commands
            .iter()
            .flat_map(|c| c.candidate_names().map(str::to_owned))
            .collect()
    }

    /// Whether any of these nodes is already being disrupted.
    #[must_use]
    pub fn has_any<'a>(&self, mut nodes: impl Iterator<Item = &'a str>) -> bool {
        let queued = self.candidates();
        nodes.any(|n| queued.contains(n))
    }

    /// NodeClaim names of every candidate in flight.
    #[must_use]
    pub fn nodeclaims(&self) -> BTreeSet<String> {
        self.commands
            .iter()
            .flat_map(|c| c.candidates.iter().map(|n| n.node_claim.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(replacements: &[&str]) -> Queued {
        Queued {
            id: 1,
            method: Method::SingleNode,
            decision: if replacements.is_empty() {
                CommandDecision::Delete
            } else {
                CommandDecision::Replace
            },
            candidates: vec![CommandCandidate {
                name: "n1".to_owned(),
                node_claim: "c1".to_owned(),
                node_pool: "default".to_owned(),
                instance_type: None,
                capacity_type: None,
                zone: None,
                price: None,
                reschedulable_pods: 0,
            }],
            replacements: replacements
                .iter()
                .map(|n| Replacement {
                    name: (*n).to_owned(),
                    initialized: false,
                })
                .collect(),
            added: Instant::now(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn candidates_go_once_every_replacement_is_initialized() {
        let mut command = queued(&["r1", "r2"]);
        let start = command.added;
        let step = command.next_step(start, |name| {
            if name == "r1" {
                ReplacementSeen::Initialized
            } else {
                ReplacementSeen::Launching
            }
        });
        assert_eq!(step, Step::Wait(vec!["r2".to_owned()]));
        assert!(command.replacements[0].initialized);
        let step = command.next_step(start + Duration::from_secs(30), |_| {
            ReplacementSeen::Initialized
        });
        assert_eq!(step, Step::DeleteCandidates);
        assert_eq!(command.reason(), "underutilized/replace");
    }

    #[tokio::test(start_paused = true)]
    async fn a_command_times_out_after_ten_minutes_counting_the_uninitialized_replacements() {
        let mut command = queued(&["r1"]);
        let late = command.added + COMMAND_TIMEOUT + Duration::from_secs(1);
        match command.next_step(late, |_| ReplacementSeen::Launching) {
            Step::Fail { reason, launches } => {
                assert!(reason.contains("timeout"), "{reason}");
                assert_eq!(launches, 1);
            }
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_replacement_missing_after_the_grace_fails_the_command() {
        let mut command = queued(&["r1"]);
        let early = command.added + Duration::from_secs(2);
        assert_eq!(
            command.next_step(early, |_| ReplacementSeen::Missing),
            Step::Wait(vec!["r1".to_owned()])
        );
        let later = command.added + Duration::from_secs(6);
        assert!(matches!(
            command.next_step(later, |_| ReplacementSeen::Missing),
            Step::Fail { .. }
        ));
    }

    #[test]
    fn a_delete_command_deletes_at_once() {
        let mut command = queued(&[]);
        let now = command.added;
        assert_eq!(
            command.next_step(now, |_| ReplacementSeen::Missing),
            Step::DeleteCandidates
        );
        assert_eq!(command.reason(), "underutilized/delete");
    }
}
