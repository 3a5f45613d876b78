//! Startup checks on a parsed [`Settings`]: the rules that span several settings, the settings
//! `run` requires, and the single-setting rules again (clap enforces them when parsing, but a
//! `Settings` built in code, e.g. from a simulator scenario, bypasses clap).
//!
//! Karpenter's own checks (aws `options_validation.go`, core `options.go`) are the single-setting
//! ones and the required cluster name. The cross-field rules are ours; each rejects a combination
//! that Karpenter accepts but that cannot do what it says.

use crate::error::SettingsError;
use crate::settings::Settings;

impl Settings {
    /// Checks the rules every subcommand needs: single-setting ranges, then cross-field rules.
    /// Returns the first broken rule.
    pub fn validate(&self) -> Result<(), SettingsError> {
        self.validate_ranges()?;
        self.validate_combinations()
    }

    /// Checks everything [`validate`](Self::validate) does, and the settings `run` requires
    /// (`CLUSTER_NAME`). Returns the first broken rule, required settings first.
    pub fn validate_for_run(&self) -> Result<(), SettingsError> {
        if self.cluster_name.as_deref().is_none_or(str::is_empty) {
            return Err(SettingsError::MissingClusterName);
        }
        self.validate()
    }

    fn validate_ranges(&self) -> Result<(), SettingsError> {
        const POSITIVE: &str = "must be greater than 0";
        let out_of_range = |env, flag, value: String, rule| SettingsError::OutOfRange {
            env,
            flag,
            value,
            rule,
        };
        if self.kube_client_qps == 0 {
            return Err(out_of_range(
                "KUBE_CLIENT_QPS",
                "--kube-client-qps",
                "0".to_owned(),
                POSITIVE,
            ));
        }
        if self.kube_client_burst == 0 {
            return Err(out_of_range(
                "KUBE_CLIENT_BURST",
                "--kube-client-burst",
                "0".to_owned(),
                POSITIVE,
            ));
        }
        if self.cpu_requests == 0 {
            return Err(out_of_range(
                "CPU_REQUESTS",
                "--cpu-requests",
                "0".to_owned(),
                POSITIVE,
            ));
        }
        if self.memory_limit < -1 {
            return Err(out_of_range(
                "MEMORY_LIMIT",
                "--memory-limit",
                self.memory_limit.to_string(),
                "must be a number of bytes, or -1 for no limit",
            ));
        }
        let overhead = self.vm_memory_overhead_percent;
        if !overhead.is_finite() || overhead < 0.0 {
            return Err(out_of_range(
                "VM_MEMORY_OVERHEAD_PERCENT",
                "--vm-memory-overhead-percent",
                overhead.to_string(),
                "must be a finite number of at least 0",
            ));
        }
        Ok(())
    }

    fn validate_combinations(&self) -> Result<(), SettingsError> {
        // Karpenter accepts idle > max (the max window then always closes the batch first), but
        // such a setting is a mistake: the idle window it asks for can never take effect.
        if self.batch_idle_duration > self.batch_max_duration {
            return Err(SettingsError::BatchIdleExceedsMax {
                idle: self.batch_idle_duration,
                max: self.batch_max_duration,
            });
        }
        // Port 0 asks the OS for a free port, so two zeros do not collide.
        if self.metrics_port == self.health_probe_port && self.metrics_port != 0 {
            return Err(SettingsError::PortsCollide {
                port: self.metrics_port,
            });
        }
        if self.interruption_rebalance_replace
            && self.interruption_queue.as_deref().is_none_or(str::is_empty)
        {
            return Err(SettingsError::RebalanceReplaceWithoutQueue);
        }
        Ok(())
    }
}
