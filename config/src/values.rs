//! Parsers for the scalar settings (booleans, counts, limits, percentages, optional strings), used
//! as clap value parsers so a bad value is reported by clap with the flag, the env var name (as the
//! value name) and the rule. The same rules are re-checked by `Settings::validate` for settings
//! built in code.

use std::convert::Infallible;

/// A scalar setting value that breaks its rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Not one of Go's `strconv.ParseBool` spellings.
    #[error("invalid boolean {input:?} (expected true or false)")]
    Boolean { input: String },
    /// Not a whole number greater than zero.
    #[error("invalid number {input:?}: expected a whole number greater than 0")]
    NotPositive { input: String },
    /// Not a byte count and not `-1`.
    #[error("invalid memory limit {input:?}: expected a number of bytes, or -1 for no limit")]
    MemoryLimit { input: String },
    /// Not a finite number of at least zero.
    #[error("invalid percentage {input:?}: expected a finite number of at least 0")]
    Percentage { input: String },
}

impl ValueError {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        "invalid_value"
    }
}

/// Parses a boolean with Go's `strconv.ParseBool` spellings (`true`, `false`, `1`, `0`, `t`, `f`,
/// `T`, `F`, `TRUE`, `FALSE`, `True`, `False`), which is what Karpenter accepts from env vars.
/// Karpenter falls back to the default on anything else; an error is kinder than a silent default.
pub(crate) fn parse_go_bool(input: &str) -> Result<bool, ValueError> {
    match input {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(ValueError::Boolean {
            input: input.to_owned(),
        }),
    }
}

/// A `u32` greater than zero (client QPS and burst, CPU millicores).
pub(crate) fn parse_positive_u32(input: &str) -> Result<u32, ValueError> {
    input
        .parse::<u32>()
        .ok()
        .filter(|&value| value > 0)
        .ok_or_else(|| ValueError::NotPositive {
            input: input.to_owned(),
        })
}

/// A memory limit in bytes, or `-1` for none (Karpenter's default).
pub(crate) fn parse_memory_limit(input: &str) -> Result<i64, ValueError> {
    input
        .parse::<i64>()
        .ok()
        .filter(|&value| value >= -1)
        .ok_or_else(|| ValueError::MemoryLimit {
            input: input.to_owned(),
        })
}

/// A finite fraction of at least zero (`0.075` = 7.5 %).
pub(crate) fn parse_non_negative_fraction(input: &str) -> Result<f64, ValueError> {
    input
        .parse::<f64>()
        .ok()
        .filter(|value| value.is_finite() && *value >= 0.0)
        .ok_or_else(|| ValueError::Percentage {
            input: input.to_owned(),
        })
}

/// A string setting whose empty value means "unset", as in Karpenter.
#[expect(
    clippy::unnecessary_wraps,
    reason = "clap value parsers return a Result"
)]
pub(crate) fn parse_optional_text(input: &str) -> Result<Option<String>, Infallible> {
    Ok((!input.is_empty()).then(|| input.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_accept_go_spellings_only() {
        for input in ["true", "True", "TRUE", "t", "T", "1"] {
            assert_eq!(parse_go_bool(input), Ok(true), "{input}");
        }
        for input in ["false", "False", "FALSE", "f", "F", "0"] {
            assert_eq!(parse_go_bool(input), Ok(false), "{input}");
        }
        for input in ["", "yes", "no", "on", "tRUE", " true"] {
            assert!(parse_go_bool(input).is_err(), "{input:?}");
        }
    }

    #[test]
    fn positive_numbers_reject_zero_negatives_and_text() {
        assert_eq!(parse_positive_u32("1"), Ok(1));
        for input in ["0", "-1", "", "1.5", "abc"] {
            assert!(parse_positive_u32(input).is_err(), "{input:?}");
        }
    }

    #[test]
    fn memory_limit_is_bytes_or_minus_one() {
        assert_eq!(parse_memory_limit("-1"), Ok(-1));
        assert_eq!(parse_memory_limit("0"), Ok(0));
        assert_eq!(parse_memory_limit("1073741824"), Ok(1 << 30));
        assert!(parse_memory_limit("-2").is_err());
        assert!(parse_memory_limit("1Gi").is_err());
    }

    #[test]
    fn fractions_must_be_finite_and_not_negative() {
        assert_eq!(parse_non_negative_fraction("0.075"), Ok(0.075));
        assert_eq!(parse_non_negative_fraction("0"), Ok(0.0));
        for input in ["-0.1", "NaN", "inf", "", "7.5%"] {
            assert!(parse_non_negative_fraction(input).is_err(), "{input:?}");
        }
    }

    #[test]
    fn empty_text_means_unset() {
        assert_eq!(parse_optional_text(""), Ok(None));
        assert_eq!(parse_optional_text("x"), Ok(Some("x".to_owned())));
    }
}
