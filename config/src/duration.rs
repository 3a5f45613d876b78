//! Go's duration syntax (`time.ParseDuration` / `Duration.String`), which Karpenter's duration
//! settings use: `10s`, `1m30s`, `100ms`, `1.5h`. A value is one or more `<number><unit>` terms;
//! the number may have a fraction, the unit is one of `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`.
//!
//! Differences from Go, on purpose: a sign is rejected (no setting is a negative duration), and
//! the fraction is computed with integers (Go uses floats, so a value can differ by a nanosecond).
//! Like Go, `0` alone is accepted and values above Go's `math.MaxInt64` nanoseconds are rejected,
//! so every value Karpenter accepts parses to the same duration here.

use std::fmt::Write as _;
use std::time::Duration;

/// The longest duration Go's `time.Duration` holds: `math.MaxInt64` nanoseconds, about 292 years.
/// Longer inputs are rejected, as Go rejects them.
pub const MAX_GO_DURATION: Duration = Duration::new(9_223_372_036, 854_775_807);

const NANOS_PER_MICRO: u128 = 1_000;
const NANOS_PER_MILLI: u128 = 1_000_000;
const NANOS_PER_SECOND: u128 = 1_000_000_000;
const NANOS_PER_MINUTE: u128 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: u128 = 60 * NANOS_PER_MINUTE;

/// Fraction digits kept; further ones are below a nanosecond even for hours (1 h = 3.6e12 ns).
const MAX_FRACTION_DIGITS: usize = 18;

/// A string that is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {kind}")]
pub struct ParseDurationError {
    input: String,
    kind: ParseDurationErrorKind,
}

impl ParseDurationError {
    /// The rejected input.
    #[must_use]
    pub fn input(&self) -> &str {
        &self.input
    }

    /// The rule the input broke.
    #[must_use]
    pub fn kind(&self) -> &ParseDurationErrorKind {
        &self.kind
    }

    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        "invalid_duration"
    }
}

/// The rule a rejected duration broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseDurationErrorKind {
    /// The input is empty.
    #[error("empty (expected a number and a unit, e.g. 10s, 1m30s or 100ms)")]
    Empty,
    /// The input starts with `+` or `-`.
    #[error("a sign is not allowed (expected a number and a unit, e.g. 10s)")]
    Signed,
    /// A unit (or the end of a term) came where a number was expected.
    #[error("expected a number before each unit (e.g. 10s, 1m30s or 100ms)")]
    MissingNumber,
    /// A number is not followed by a unit.
    #[error("missing unit (expected ns, us, ms, s, m or h)")]
    MissingUnit,
    /// A unit that Go does not know.
    #[error("unknown unit {0:?} (expected ns, us, ms, s, m or h)")]
    UnknownUnit(String),
    /// The total exceeds [`MAX_GO_DURATION`].
    #[error("out of range (at most 2562047h47m16.854775807s)")]
    OutOfRange,
}

/// Parses a Go duration string such as `10s`, `1m30s`, `100ms` or `1.5h`.
pub fn parse_go_duration(input: &str) -> Result<Duration, ParseDurationError> {
    parse_nanos(input)
        .map(Duration::from_nanos)
        .map_err(|kind| ParseDurationError {
            input: input.to_owned(),
            kind,
        })
}

fn parse_nanos(input: &str) -> Result<u64, ParseDurationErrorKind> {
    use ParseDurationErrorKind as Kind;

    let max = MAX_GO_DURATION.as_nanos();
    if input.is_empty() {
        return Err(Kind::Empty);
    }
    if input.starts_with(['+', '-']) {
        return Err(Kind::Signed);
    }
    // Go's special case: a bare zero needs no unit.
    if input == "0" {
        return Ok(0);
    }

    let mut total: u128 = 0;
    let mut rest = input;
    while !rest.is_empty() {
        let (whole, after_whole) = split_digits(rest);
        let (fraction, after_number) = match after_whole.strip_prefix('.') {
            Some(after_dot) => split_digits(after_dot),
            None => ("", after_whole),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(Kind::MissingNumber);
        }
        let unit_len = after_number
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after_number.len());
        let (unit, next) = after_number.split_at(unit_len);
        if unit.is_empty() {
            return Err(Kind::MissingUnit);
        }
        let unit_nanos = unit_nanos(unit).ok_or_else(|| Kind::UnknownUnit(unit.to_owned()))?;

        let whole_nanos = digits_value(whole, max)
            .and_then(|value| value.checked_mul(unit_nanos))
            .ok_or(Kind::OutOfRange)?;
        let kept = &fraction[..fraction.len().min(MAX_FRACTION_DIGITS)];
        let numerator = digits_value(kept, u128::MAX).ok_or(Kind::OutOfRange)?;
        let fraction_nanos = numerator * unit_nanos / 10u128.pow(digit_count(kept));
        total = total + whole_nanos + fraction_nanos;
        if total > max {
            return Err(Kind::OutOfRange);
        }
        rest = next;
    }
    u64::try_from(total).map_err(|_| Kind::OutOfRange)
}

fn split_digits(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(end)
}

/// `digits.len()` as a `u32` exponent; callers pass at most [`MAX_FRACTION_DIGITS`] digits.
fn digit_count(digits: &str) -> u32 {
    u32::try_from(digits.len()).unwrap_or(u32::MAX)
}

/// The value of a string of ASCII digits, or `None` above `limit`. Stops as soon as the limit is
/// passed, so arbitrarily long inputs cannot overflow.
fn digits_value(digits: &str, limit: u128) -> Option<u128> {
    digits.bytes().try_fold(0u128, |value, digit| {
        value
            .checked_mul(10)?
            .checked_add(u128::from(digit - b'0'))
            .filter(|&value| value <= limit)
    })
}

fn unit_nanos(unit: &str) -> Option<u128> {
    match unit {
        "ns" => Some(1),
        // U+00B5 micro sign and U+03BC Greek mu, both accepted by Go.
        "us" | "\u{b5}s" | "\u{3bc}s" => Some(NANOS_PER_MICRO),
        "ms" => Some(NANOS_PER_MILLI),
        "s" => Some(NANOS_PER_SECOND),
        "m" => Some(NANOS_PER_MINUTE),
        "h" => Some(NANOS_PER_HOUR),
        _ => None,
    }
}

/// Formats a duration the way Go's `Duration.String` does: `0s`, `1.5µs`, `100ms`, `1.5s`,
/// `1m30s`, `1h30m0s`. The output parses back to the same duration with [`parse_go_duration`]
/// (up to [`MAX_GO_DURATION`]).
#[must_use]
pub fn format_go_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < NANOS_PER_MICRO {
        return format!("{nanos}ns");
    }
    if nanos < NANOS_PER_MILLI {
        return format!("{}\u{b5}s", decimal(nanos, NANOS_PER_MICRO, 3));
    }
    if nanos < NANOS_PER_SECOND {
        return format!("{}ms", decimal(nanos, NANOS_PER_MILLI, 6));
    }

    let hours = nanos / NANOS_PER_HOUR;
    let minutes = nanos / NANOS_PER_MINUTE % 60;
    let second_nanos = nanos % NANOS_PER_MINUTE;
    let mut out = String::new();
    if hours > 0 {
        let _ = write!(out, "{hours}h");
    }
    if hours > 0 || minutes > 0 {
        let _ = write!(out, "{minutes}m");
    }
    let _ = write!(out, "{}s", decimal(second_nanos, NANOS_PER_SECOND, 9));
    out
}

/// `value / unit` as a decimal without trailing zeros; `unit` is `10^fraction_digits`.
fn decimal(value: u128, unit: u128, fraction_digits: usize) -> String {
    let whole = value / unit;
    let fraction = value % unit;
    if fraction == 0 {
        return whole.to_string();
    }
    let digits = format!("{fraction:0fraction_digits$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn go_durations_parse_and_format_back_in_go_style() {
        // (input, parsed, Go's Duration.String of the parsed value)
        let cases: &[(&str, Duration, &str)] = &[
            ("0s", Duration::ZERO, "0s"),
            ("0", Duration::ZERO, "0s"),
            ("1ns", Duration::from_nanos(1), "1ns"),
            ("1500ns", Duration::from_nanos(1500), "1.5µs"),
            ("2us", Duration::from_micros(2), "2µs"),
            ("2µs", Duration::from_micros(2), "2µs"),
            ("2\u{3bc}s", Duration::from_micros(2), "2µs"), // Greek mu
            ("100ms", Duration::from_millis(100), "100ms"),
            ("500ms", Duration::from_millis(500), "500ms"),
            ("1.5ms", Duration::from_micros(1500), "1.5ms"),
            ("1s", Duration::from_secs(1), "1s"),
            ("1.5s", Duration::from_millis(1500), "1.5s"),
            (".5s", Duration::from_millis(500), "500ms"),
            ("1.s", Duration::from_secs(1), "1s"),
            ("10s", Duration::from_secs(10), "10s"),
            ("90s", Duration::from_secs(90), "1m30s"),
            ("1m30s", Duration::from_secs(90), "1m30s"),
            ("1h", Duration::from_hours(1), "1h0m0s"),
            ("1h30m", Duration::from_mins(90), "1h30m0s"),
            ("1.5h", Duration::from_mins(90), "1h30m0s"),
            (
                "2h45m10.25s",
                Duration::from_millis(9_910_250),
                "2h45m10.25s",
            ),
            ("1s500ms", Duration::from_millis(1500), "1.5s"),
            (
                "2562047h47m16.854775807s",
                MAX_GO_DURATION,
                "2562047h47m16.854775807s",
            ),
        ];
        for &(input, expected, formatted) in cases {
            let parsed = parse_go_duration(input)
                .unwrap_or_else(|err| panic!("{input:?} should parse: {err}"));
            assert_eq!(parsed, expected, "parsing {input:?}");
            assert_eq!(
                format_go_duration(parsed),
                formatted,
                "formatting {input:?}"
            );
            assert_eq!(
                parse_go_duration(formatted).ok(),
                Some(expected),
                "re-parsing {formatted:?}"
            );
        }
    }

    #[test]
    fn malformed_durations_are_rejected_with_the_rule_they_break() {
        use ParseDurationErrorKind as Kind;
        let cases: &[(&str, Kind)] = &[
            ("", Kind::Empty),
            ("-1s", Kind::Signed),
            ("+1s", Kind::Signed),
            ("abc", Kind::MissingNumber),
            (".s", Kind::MissingNumber),
            ("s", Kind::MissingNumber),
            ("10", Kind::MissingUnit),
            ("1.5", Kind::MissingUnit),
            ("1s5", Kind::MissingUnit),
            ("1.5.5s", Kind::MissingUnit),
            ("10d", Kind::UnknownUnit("d".to_owned())),
            ("10 s", Kind::UnknownUnit(" s".to_owned())),
            ("10S", Kind::UnknownUnit("S".to_owned())),
            ("2562047h47m16.854775808s", Kind::OutOfRange),
            ("99999999999999999999999999h", Kind::OutOfRange),
        ];
        for (input, kind) in cases {
            let err = parse_go_duration(input).expect_err(input);
            assert_eq!(err.kind(), kind, "{input:?}");
            assert_eq!(err.input(), *input);
        }
    }

    #[test]
    fn duration_errors_quote_the_input_and_list_the_units() {
        let err = parse_go_duration("10").expect_err("no unit");
        assert_eq!(
            err.to_string(),
            r#"invalid duration "10": missing unit (expected ns, us, ms, s, m or h)"#
        );
        assert_eq!(err.category(), "invalid_duration");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn parsing_arbitrary_strings_never_panics(input in any::<String>()) {
            let _ = parse_go_duration(&input);
        }

        #[test]
        fn parsing_duration_shaped_strings_never_panics(input in "[0-9.]{0,30}(ns|us|µs|ms|s|m|h|x)?([0-9.]{0,30}(s|m|h))*") {
            let _ = parse_go_duration(&input);
        }

        #[test]
        fn every_go_duration_survives_a_format_parse_round_trip(nanos in 0..=MAX_GO_DURATION.as_nanos()) {
            let duration = Duration::from_nanos(u64::try_from(nanos).unwrap());
            prop_assert_eq!(parse_go_duration(&format_go_duration(duration)).ok(), Some(duration));
        }
    }
}
