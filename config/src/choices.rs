//! Settings that take one of a closed set of words: `LOG_LEVEL` and `PREFERENCE_POLICY`. Spellings
//! and case follow Karpenter exactly (core `pkg/operator/options/options.go`): `debug`, `info`,
//! `error`; `Respect`, `Ignore`. Matching is case-sensitive, as in Karpenter.

use std::fmt;

/// Log verbosity (`LOG_LEVEL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
#[value(rename_all = "lower")]
pub enum LogLevel {
    /// Everything, including per-decision details.
    Debug,
    /// Normal operation (Karpenter's default).
    #[default]
    Info,
    /// Errors only.
    Error,
}

impl LogLevel {
    /// Karpenter's spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Error => "error",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses `LOG_LEVEL` as Karpenter does: an empty value is the default (`info`), anything else
/// must be one of the levels (the error lists them).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogLevelParser;

impl clap::builder::TypedValueParser for LogLevelParser {
    type Value = LogLevel;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<LogLevel, clap::Error> {
        if value.is_empty() {
            return Ok(LogLevel::default());
        }
        clap::builder::EnumValueParser::<LogLevel>::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            <LogLevel as clap::ValueEnum>::value_variants()
                .iter()
                .filter_map(clap::ValueEnum::to_possible_value),
        ))
    }
}

/// How the scheduler treats preferences (`PREFERENCE_POLICY`): preferred node and pod
/// (anti-)affinities and `ScheduleAnyway` topology spread constraints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
#[value(rename_all = "PascalCase")]
pub enum PreferencePolicy {
    /// Try to satisfy preferences, relaxing them one by one when a pod does not fit (Karpenter's
    /// default).
    #[default]
    Respect,
    /// Schedule as if no preference were set.
    Ignore,
}

impl PreferencePolicy {
    /// Karpenter's spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Respect => "Respect",
            Self::Ignore => "Ignore",
        }
    }
}

impl fmt::Display for PreferencePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn spellings_round_trip_case_sensitively() {
        for level in LogLevel::value_variants() {
            assert_eq!(LogLevel::from_str(level.as_str(), false), Ok(*level));
        }
        for policy in PreferencePolicy::value_variants() {
            assert_eq!(
                PreferencePolicy::from_str(policy.as_str(), false),
                Ok(*policy)
            );
        }
        assert!(LogLevel::from_str("Info", false).is_err());
        assert!(PreferencePolicy::from_str("respect", false).is_err());
    }
}
