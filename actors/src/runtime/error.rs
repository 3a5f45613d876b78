//! The kit's error types: what a handler reports ([`ActorError`]), what a caller of a request
//! gets ([`SendError`]), what an event sender gets ([`Overflow`]), why a child stopped
//! ([`StopReason`]) and why an actor or group could not be started ([`SpawnError`]).
//!
//! Every error has `category()`, a bounded label for metrics and Kubernetes events.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The category of errors produced by the fault injector.
pub const INJECTED_CATEGORY: &str = "injected";

/// A failure reported by a handler or by `started`.
///
/// A recoverable error is counted, stored as the actor's last error and returned to the caller;
/// the actor keeps its state. A fatal error does the same and then stops the instance: its
/// supervisor restarts a fresh one (see [`crate::runtime`] for what happens to queued messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ActorError {
    category: &'static str,
    message: String,
    /// The message as `/debug/actors` shows it, when it differs: without the text of an AWS
    /// error in its chain (see [`crate::logs::public_text`]).
    public: Option<String>,
    fatal: bool,
}

impl ActorError {
    /// A recoverable error: counted and returned, the actor keeps running.
    #[must_use]
    pub fn new(category: &'static str, message: impl Into<String>) -> Self {
        Self {
            category,
            message: message.into(),
            public: None,
            fatal: false,
        }
    }

    /// A fatal error: the instance is stopped and its supervisor restarts a fresh one.
    #[must_use]
    pub fn fatal(category: &'static str, message: impl Into<String>) -> Self {
        Self {
            category,
            message: message.into(),
            public: None,
            fatal: true,
        }
    }

    /// A recoverable error from any error type, its message including the source chain.
    #[must_use]
    pub fn from_error(category: &'static str, error: &(dyn std::error::Error + 'static)) -> Self {
        Self {
            public: Some(crate::logs::public_text(error)),
            ..Self::new(category, karpenter_core::errors::chain(error))
        }
    }

    /// [`Self::from_error`] with our own context before the error's chain (`context: chain`).
    #[must_use]
    pub fn with_context(
        category: &'static str,
        context: &str,
        error: &(dyn std::error::Error + 'static),
    ) -> Self {
        Self {
            public: Some(format!("{context}: {}", crate::logs::public_text(error))),
            ..Self::new(
                category,
                format!("{context}: {}", karpenter_core::errors::chain(error)),
            )
        }
    }

    /// The same error, made fatal.
    #[must_use]
    pub fn into_fatal(mut self) -> Self {
        self.fatal = true;
        self
    }

    /// Label for metrics and events, chosen by the handler.
    #[must_use]
    pub fn category(&self) -> &'static str {
        self.category
    }

    /// Whether the instance is restarted after this error.
    #[must_use]
    pub fn is_fatal(&self) -> bool {
        self.fatal
    }

    /// The message, without the category.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The message as readers outside the process see it (`/debug/actors`): AWS service text
    /// withheld, its structured fields kept.
    #[must_use]
    pub fn public_message(&self) -> &str {
        self.public.as_deref().unwrap_or(&self.message)
    }

    /// `category: public message`, what the registry keeps as the actor's last error.
    pub(crate) fn public_text(&self) -> String {
        format!("{}: {}", self.category, self.public_message())
    }

    pub(crate) fn injected(kind: &str, message: &str) -> Self {
        Self::new(
            INJECTED_CATEGORY,
            format!("injected error in {kind} handling {message}"),
        )
    }
}

/// Why a request got no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// No reply within the caller's timeout. The message may still be handled later; its
    /// reply is then discarded.
    #[error("{kind} {key}: no reply to {message} within {timeout:?}")]
    Timeout {
        kind: &'static str,
        key: Arc<str>,
        message: &'static str,
        timeout: Duration,
    },
    /// The actor was stopped before it handled the message (or is stopped now).
    #[error("{kind} {key} is stopped; {message} was not handled")]
    Stopped {
        kind: &'static str,
        key: Arc<str>,
        message: &'static str,
    },
    /// The handler panicked; the instance is being restarted by its supervisor.
    #[error("{kind} {key} panicked handling {message}: {panic}")]
    Panicked {
        kind: &'static str,
        key: Arc<str>,
        message: &'static str,
        panic: String,
    },
    /// The handler returned an error (fatal or not).
    #[error("{kind} {key} failed handling {message}: {error}")]
    Failed {
        kind: &'static str,
        key: Arc<str>,
        message: &'static str,
        error: ActorError,
    },
    /// The supervisor restarted or stopped the actor while the handler was running (for
    /// example a sibling failed in a one-for-all group); the handler was cancelled.
    #[error("{kind} {key} was interrupted by its supervisor while handling {message}")]
    Interrupted {
        kind: &'static str,
        key: Arc<str>,
        message: &'static str,
    },
    /// The fault injector dropped the message.
    #[error("{kind} {key} dropped {message} (injected fault)")]
    Dropped {
        kind: &'static str,
        key: Arc<str>,
        message: &'static str,
    },
    /// A family has no actor under this key.
    #[error("no {kind} for key {key}")]
    NoActor { kind: &'static str, key: Arc<str> },
    /// The actor kept failing and its group parked it; it is retried later.
    #[error("{kind} {key} is parked after repeated failures; {message} was not sent")]
    Parked {
        kind: &'static str,
        key: Arc<str>,
        message: &'static str,
    },
}

impl SendError {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Timeout { .. } => "timeout",
            Self::Stopped { .. } => "stopped",
            Self::Panicked { .. } => "panicked",
            Self::Failed { error, .. } => error.category(),
            Self::Interrupted { .. } => "interrupted",
            Self::Dropped { .. } => "dropped",
            Self::NoActor { .. } => "no_actor",
            Self::Parked { .. } => "parked",
        }
    }

    /// The handler's error, when the handler returned one.
    #[must_use]
    pub fn actor_error(&self) -> Option<&ActorError> {
        match self {
            Self::Failed { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Why an event was not queued. Counted in the actor's `overflows` (full mailbox) or as a
/// dropped message (stopped actor).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Overflow {
    /// The mailbox holds `capacity` messages already.
    #[error("mailbox of {kind} {key} is full ({capacity} messages); {message} not queued")]
    MailboxFull {
        kind: &'static str,
        key: Arc<str>,
        message: &'static str,
        capacity: usize,
    },
    /// The actor is stopped.
    #[error("{kind} {key} is stopped; {message} not queued")]
    Stopped {
        kind: &'static str,
        key: Arc<str>,
        message: &'static str,
    },
    /// A family has no actor under this key.
    #[error("no {kind} for key {key}; {message} not queued")]
    NoActor {
        kind: &'static str,
        key: Arc<str>,
        message: &'static str,
    },
    /// The actor kept failing and its group parked it (counted as dropped, reason `parked`).
    #[error("{kind} {key} is parked after repeated failures; {message} not queued")]
    Parked {
        kind: &'static str,
        key: Arc<str>,
        message: &'static str,
    },
}

impl Overflow {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::MailboxFull { .. } => "mailbox_full",
            Self::Stopped { .. } => "stopped",
            Self::NoActor { .. } => "no_actor",
            Self::Parked { .. } => "parked",
        }
    }
}

/// Why a child stopped, as it reports it to its supervisor (`ChildStopped { reason }`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "camelCase")]
pub enum StopReason {
    /// The actor asked to stop ([`super::ActorCtx::stop`]).
    Normal,
    /// A handler or `started` panicked.
    Panicked { message: String, panic: String },
    /// A handler returned a fatal error.
    Failed { message: String, error: String },
    /// Building the actor or its `started` failed.
    StartFailed { error: String },
    /// A child group exceeded its restart intensity and gave up.
    Escalated { group: String, cause: String },
    /// Its supervisor stopped it.
    Shutdown,
}

impl StopReason {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Panicked { .. } => "panicked",
            Self::Failed { .. } => "failed",
            Self::StartFailed { .. } => "start_failed",
            Self::Escalated { .. } => "escalated",
            Self::Shutdown => "shutdown",
        }
    }

    /// Whether the child stopped on its own account without failing.
    #[must_use]
    pub fn is_normal(&self) -> bool {
        matches!(self, Self::Normal | Self::Shutdown)
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Normal => f.write_str("stopped normally"),
            Self::Panicked { message, panic } => write!(f, "panicked handling {message}: {panic}"),
            Self::Failed { message, error } => write!(f, "failed handling {message}: {error}"),
            Self::StartFailed { error } => write!(f, "failed to start: {error}"),
            Self::Escalated { group, cause } => {
                write!(f, "group {group} gave up restarting: {cause}")
            }
            Self::Shutdown => f.write_str("stopped by its supervisor"),
        }
    }
}

/// Why an actor or a group could not be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// Not called on a thread that runs an actix system (`actix::System` / `#[actix::test]`).
    #[error("starting {what}: no actix arbiter on this thread (run inside an actix::System)")]
    NoArbiter { what: String },
    /// The supervising group is stopped.
    #[error("starting {what}: group {group} is stopped")]
    GroupStopped { what: String, group: &'static str },
}

impl SpawnError {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::NoArbiter { .. } => "no_arbiter",
            Self::GroupStopped { .. } => "group_stopped",
        }
    }
}
