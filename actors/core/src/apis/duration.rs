//! Durations as the CRDs spell them: `720h`, `1h30m`, `Never`.
//!
//! The wire form is kept as written (so a round trip returns the user's text and an invalid
//! value still deserializes, to be reported by validation with its path); [`parse`] turns it into
//! a [`std::time::Duration`] where a decision needs one.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use super::schema::pattern_string;

/// `expireAfter`, `consolidateAfter`: one or more `<n>(s|m|h)` groups, or `Never`.
pub const NILLABLE_DURATION_PATTERN: &str = r"^(([0-9]+(s|m|h))+|Never)$";
/// `terminationGracePeriod`: one or more `<n>(s|m|h)` groups.
pub const DURATION_PATTERN: &str = r"^([0-9]+(s|m|h))+$";
/// Budget `duration`: hours and minutes only (cron has no seconds); Go's formatter appends `0s`.
pub const BUDGET_DURATION_PATTERN: &str = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$";

/// The literal that disables an expiry or consolidation.
pub const NEVER: &str = "Never";

/// A duration that may be `Never` (Karpenter's `NillableDuration`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NillableDuration(pub String);

impl NillableDuration {
    #[must_use]
    pub fn never() -> Self {
        Self(NEVER.to_owned())
    }

    #[must_use]
    pub fn from_duration(duration: Duration) -> Self {
        Self(format_duration(duration))
    }

    /// `None` for `Never`.
    pub fn get(&self) -> Result<Option<Duration>, InvalidDuration> {
        if self.0 == NEVER {
            return Ok(None);
        }
        parse(&self.0).map(Some)
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl JsonSchema for NillableDuration {
    fn schema_name() -> Cow<'static, str> {
        "NillableDuration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        pattern_string(NILLABLE_DURATION_PATTERN)
    }
}

/// A duration without `Never` (`terminationGracePeriod`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KubeDuration(pub String);

impl KubeDuration {
    #[must_use]
    pub fn from_duration(duration: Duration) -> Self {
        Self(format_duration(duration))
    }

    pub fn get(&self) -> Result<Duration, InvalidDuration> {
        parse(&self.0)
    }
}

impl fmt::Display for KubeDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl JsonSchema for KubeDuration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        pattern_string(DURATION_PATTERN)
    }
}

/// A duration string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {value:?}: {reason}")]
pub struct InvalidDuration {
    pub value: String,
    pub reason: String,
}

/// Parses a Go duration (`1h30m`, `90s`, `1.5h`, `300ms`).
pub fn parse(value: &str) -> Result<Duration, InvalidDuration> {
    karpenter_config::parse_go_duration(value).map_err(|error| InvalidDuration {
        value: value.to_owned(),
        reason: error.kind().to_string(),
    })
}

/// Formats a duration the way the CRDs write them: `720h`, `1h30m`, `45s`, `0s`.
#[must_use]
pub fn format_duration(duration: Duration) -> String {
    let total = duration.as_secs();
    let (hours, minutes, seconds) = (total / 3600, (total % 3600) / 60, total % 60);
    let mut text = String::new();
    for (amount, unit) in [(hours, 'h'), (minutes, 'm')] {
        if amount > 0 {
            text.push_str(&amount.to_string());
            text.push(unit);
        }
    }
    if seconds > 0 || text.is_empty() {
        text.push_str(&seconds.to_string());
        text.push('s');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_has_no_duration() {
        assert_eq!(NillableDuration::never().get(), Ok(None));
    }

    #[test]
    fn durations_parse_and_format_in_crd_style() {
        let cases = [
            ("720h", 720 * 3600),
            ("1h30m", 5400),
            ("45s", 45),
            ("0s", 0),
        ];
        for (text, seconds) in cases {
            let duration = Duration::from_secs(seconds);
            assert_eq!(
                NillableDuration(text.into()).get(),
                Ok(Some(duration)),
                "{text}"
            );
            assert_eq!(format_duration(duration), text);
        }
    }

    #[test]
    fn a_malformed_duration_is_an_error_naming_the_value() {
        let error = KubeDuration("5x".into()).get().unwrap_err();
        assert_eq!(error.value, "5x");
    }
}
