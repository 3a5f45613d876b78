//! Errors of [`Settings::validate`](crate::Settings::validate) and
//! [`Settings::validate_for_run`](crate::Settings::validate_for_run): rules that span settings, or
//! that a `Settings` built in code (not parsed by clap) may break. Each message names the env var
//! and the flag, and the rule.

use std::time::Duration;

use crate::duration::format_go_duration;

/// A setting, or a combination of settings, that the daemon cannot start with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// `run` needs the cluster name for resource discovery and tagging (Karpenter: "missing field,
    /// cluster-name").
    #[error("missing required setting CLUSTER_NAME (--cluster-name): the name of the EKS cluster")]
    MissingClusterName,
    /// A single setting outside its range.
    #[error("invalid setting {env} ({flag}) {value}: {rule}")]
    OutOfRange {
        env: &'static str,
        flag: &'static str,
        value: String,
        rule: &'static str,
    },
    /// The idle window would never close a batch before the maximum window does.
    #[error(
        "batch idle duration {} exceeds batch max duration {}: BATCH_IDLE_DURATION (--batch-idle-duration) must not exceed BATCH_MAX_DURATION (--batch-max-duration)",
        format_go_duration(*idle),
        format_go_duration(*max)
    )]
    BatchIdleExceedsMax { idle: Duration, max: Duration },
    /// Both HTTP servers would bind the same port.
    #[error(
        "metrics and health probe servers both use port {port}: METRICS_PORT (--metrics-port) and HEALTH_PROBE_PORT (--health-probe-port) must differ"
    )]
    PortsCollide { port: u16 },
    /// Rebalance recommendations arrive on the interruption queue; without one the flag does nothing.
    #[error(
        "rebalance replacement needs an interruption queue: INTERRUPTION_REBALANCE_REPLACE (--interruption-rebalance-replace) requires INTERRUPTION_QUEUE (--interruption-queue)"
    )]
    RebalanceReplaceWithoutQueue,
}

impl SettingsError {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::MissingClusterName => "missing_setting",
            Self::OutOfRange { .. } => "invalid_setting",
            Self::BatchIdleExceedsMax { .. }
            | Self::PortsCollide { .. }
            | Self::RebalanceReplaceWithoutQueue => "conflicting_settings",
        }
    }
}
