//! Budget schedules in the dialect Karpenter evaluates them with: robfig/cron v3.0.1's
//! `ParseStandard` on `"TZ=UTC " + schedule`, and `SpecSchedule.Next` (spec section 5.1).
//!
//! The CRD validation (`apis::validation::nodepool::parse_schedule`) uses croner, which accepts
//! more than robfig does (day-of-week `7`, `L`/`W`/`#`, a `+` prefix, upper-case descriptors)
//! and decides "either day field may match" differently. Karpenter's runtime is robfig, and a
//! schedule robfig refuses makes the whole NodePool's budgets fail closed, so the decision uses
//! this small evaluator rather than croner: five fields, `*`/`?`, `a`, `a-b`, `/step` and month
//! and weekday names, robfig's day rule (if either day field "is a star", both must match,
//! otherwise either may), robfig's search (strictly after the start, second granularity, in
//! UTC, nothing within five years means "no next time").

use std::fmt;

use k8s_openapi::jiff::Timestamp;

/// robfig's marker bit for a field written as a star (`*` or `?` without a step above 1).
const STAR_BIT: u64 = 1 << 63;
/// robfig gives up looking for the next time this many years after the start.
const SEARCH_YEARS: i64 = 5;
const SECONDS_PER_DAY: i64 = 86_400;

/// A schedule robfig would refuse (the message follows robfig's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cron schedule {schedule:?}: {problem}")]
pub struct CronError {
    pub schedule: String,
    pub problem: String,
}

/// One field's bounds and names.
struct Bounds {
    min: u32,
    max: u32,
    names: &'static [(&'static str, u32)],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DAYS_OF_MONTH: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
const DAYS_OF_WEEK: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &[
        ("sun", 0),
        ("mon", 1),
        ("tue", 2),
        ("wed", 3),
        ("thu", 4),
        ("fri", 5),
        ("sat", 6),
    ],
};

/// A parsed schedule: one bit per allowed value of each field, plus [`STAR_BIT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CronSchedule {
    minute: u64,
    hour: u64,
    day_of_month: u64,
    month: u64,
    day_of_week: u64,
}

impl fmt::Display for CronSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "minutes {:#x}, hours {:#x}, days {:#x}, months {:#x}, weekdays {:#x}",
            self.minute, self.hour, self.day_of_month, self.month, self.day_of_week
        )
    }
}

impl CronSchedule {
    /// Parses a budget schedule as Karpenter does: `"TZ=UTC " + schedule` through robfig's
    /// standard parser. The forced time zone prefix means a schedule that itself names one
    /// (`TZ=...` or `CRON_TZ=...`) ends up with six fields and is refused.
    pub fn parse(schedule: &str) -> Result<Self, CronError> {
        let error = |problem: String| CronError {
            schedule: schedule.to_owned(),
            problem,
        };
        // robfig strips "TZ=UTC" up to the first space and trims what follows.
        let spec = schedule.trim();
        if let Some(descriptor) = spec.strip_prefix('@') {
            return Self::descriptor(descriptor)
                .ok_or_else(|| error(format!("unrecognized descriptor: {spec}")));
        }
        let fields: Vec<&str> = spec.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(error(format!(
                "expected exactly 5 fields, found {}: {fields:?}",
                fields.len()
            )));
        }
        Ok(Self {
            minute: field(fields[0], &MINUTES).map_err(&error)?,
            hour: field(fields[1], &HOURS).map_err(&error)?,
            day_of_month: field(fields[2], &DAYS_OF_MONTH).map_err(&error)?,
            month: field(fields[3], &MONTHS).map_err(&error)?,
            day_of_week: field(fields[4], &DAYS_OF_WEEK).map_err(&error)?,
        })
    }

    /// robfig's descriptors, matched exactly (lower case). `@every <duration>` also parses in
    /// robfig, but the CRD's schedule pattern cannot let it through, so it is refused here.
    fn descriptor(name: &str) -> Option<Self> {
        let all = |bounds: &Bounds| bits(bounds.min, bounds.max, 1) | STAR_BIT;
        let at = |value: u32| 1u64 << value;
        let (minute, hour, day_of_month, month, day_of_week) = match name {
            "yearly" | "annually" => (at(0), at(0), at(1), at(1), all(&DAYS_OF_WEEK)),
            "monthly" => (at(0), at(0), at(1), all(&MONTHS), all(&DAYS_OF_WEEK)),
            "weekly" => (at(0), at(0), all(&DAYS_OF_MONTH), all(&MONTHS), at(0)),
            "daily" | "midnight" => (
                at(0),
                at(0),
                all(&DAYS_OF_MONTH),
                all(&MONTHS),
                all(&DAYS_OF_WEEK),
            ),
            "hourly" => (
                at(0),
                all(&HOURS),
                all(&DAYS_OF_MONTH),
                all(&MONTHS),
                all(&DAYS_OF_WEEK),
            ),
            _ => return None,
        };
        Some(Self {
            minute,
            hour,
            day_of_month,
            month,
            day_of_week,
        })
    }

    /// robfig's `Next`: the first whole second strictly after `after` the schedule fires at,
    /// in UTC; `None` when there is none within five years (robfig's zero time).
    #[must_use]
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        // "Start at the earliest possible time (the upcoming second)."
        let whole = after.as_second() - i64::from(after.subsec_nanosecond() < 0);
        let start = whole.checked_add(1)?;
        let mut t = Civil::from_unix(start);
        let year_limit = i64::from(t.year) + SEARCH_YEARS;
        let mut added = false;
        'wrap: loop {
            if i64::from(t.year) > year_limit {
                return None;
            }
            while self.month & (1 << t.month) == 0 {
                if !added {
                    added = true;
                    t = Civil::date(t.year, t.month, 1);
                }
                t = t.next_month();
                if t.month == 1 {
                    continue 'wrap;
                }
            }
            while !self.day_matches(&t) {
                if !added {
                    added = true;
                    t = Civil::date(t.year, t.month, t.day);
                }
                t = t.plus_seconds(SECONDS_PER_DAY);
                if t.day == 1 {
                    continue 'wrap;
                }
            }
            while self.hour & (1 << t.hour) == 0 {
                if !added {
                    added = true;
                    t = Civil {
                        minute: 0,
                        second: 0,
                        ..t
                    };
                }
                t = t.plus_seconds(3600);
                if t.hour == 0 {
                    continue 'wrap;
                }
            }
            while self.minute & (1 << t.minute) == 0 {
                if !added {
                    added = true;
                    t = Civil { second: 0, ..t };
                }
                t = t.plus_seconds(60);
                if t.minute == 0 {
                    continue 'wrap;
                }
            }
            // The standard parser's seconds field is always "0".
            while t.second != 0 {
                added = true;
                t = t.plus_seconds(1);
                if t.second == 0 {
                    continue 'wrap;
                }
            }
            return Timestamp::from_second(t.to_unix()).ok();
        }
    }

    /// robfig's `dayMatches`: with a star in either day field both must match, otherwise
    /// either may.
    fn day_matches(&self, t: &Civil) -> bool {
        let dom = self.day_of_month & (1 << t.day) != 0;
        let dow = self.day_of_week & (1 << t.weekday()) != 0;
        if self.day_of_month & STAR_BIT != 0 || self.day_of_week & STAR_BIT != 0 {
            dom && dow
        } else {
            dom || dow
        }
    }
}

/// robfig's `getField`: comma-separated ranges (empty pieces are dropped, as Go's
/// `FieldsFunc` drops them).
fn field(text: &str, bounds: &Bounds) -> Result<u64, String> {
    let mut out = 0;
    for range in text.split(',').filter(|r| !r.is_empty()) {
        out |= parse_range(range, bounds)?;
    }
    Ok(out)
}

/// robfig's `getRange`: `*`/`?`, `a`, `a-b`, each with an optional `/step`; `a/step` means
/// `a-max/step`; a star stays a star only without a step above 1.
fn parse_range(expr: &str, bounds: &Bounds) -> Result<u64, String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_and_high.len() == 1;
    let (start, mut end, mut extra) = if low_and_high[0] == "*" || low_and_high[0] == "?" {
        (bounds.min, bounds.max, STAR_BIT)
    } else {
        let start = int_or_name(low_and_high[0], bounds)?;
        let end = match low_and_high.len() {
            1 => start,
            2 => int_or_name(low_and_high[1], bounds)?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
        (start, end, 0)
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = non_negative(range_and_step[1])?;
            if single {
                end = bounds.max;
            }
            if step > 1 {
                extra = 0;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < bounds.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            bounds.min
        ));
    }
    if end > bounds.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            bounds.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(bits(start, end, step) | extra)
}

fn int_or_name(text: &str, bounds: &Bounds) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some((_, value)) = bounds.names.iter().find(|(name, _)| *name == lower) {
        return Ok(*value);
    }
    non_negative(text)
}

/// robfig's `mustParseInt`: Go's `strconv.Atoi` (an optional sign, decimal digits), refusing
/// negatives.
fn non_negative(text: &str) -> Result<u32, String> {
    let digits = text.strip_prefix('+').unwrap_or(text);
    let negative = digits.starts_with('-');
    let digits = digits.strip_prefix('-').unwrap_or(digits);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("failed to parse int from {text}: invalid syntax"));
    }
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("failed to parse int from {text}: value out of range"))?;
    if negative && value != 0 {
        return Err(format!("negative number ({text}) not allowed: {text}"));
    }
    // Anything past the largest bound (59) is refused by the range checks anyway.
    Ok(u32::try_from(value.min(1 << 20)).unwrap_or(u32::MAX))
}

fn bits(min: u32, max: u32, step: u32) -> u64 {
    let mut out = 0;
    let mut value = min;
    while value <= max {
        out |= 1 << value;
        value += step;
    }
    out
}

/// A UTC calendar time at second precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Civil {
    year: i32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl Civil {
    fn date(year: i32, month: u32, day: u32) -> Self {
        Self {
            year,
            month,
            day,
            hour: 0,
            minute: 0,
            second: 0,
        }
    }

    /// Howard Hinnant's `civil_from_days`.
    fn from_unix(seconds: i64) -> Self {
        let days = seconds.div_euclid(SECONDS_PER_DAY);
        let rest = seconds.rem_euclid(SECONDS_PER_DAY);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        let small = |v: i64| u32::try_from(v).unwrap_or(0);
        Self {
            year: i32::try_from(year).unwrap_or(i32::MAX),
            month: small(month),
            day: small(day),
            hour: small(rest / 3600),
            minute: small(rest % 3600 / 60),
            second: small(rest % 60),
        }
    }

    /// Howard Hinnant's `days_from_civil`, plus the time of day.
    fn to_unix(self) -> i64 {
        let year = i64::from(self.year) - i64::from(self.month <= 2);
        let era = year.div_euclid(400);
        let yoe = year.rem_euclid(400);
        let month = i64::from(self.month);
        let mp = if month > 2 { month - 3 } else { month + 9 };
        let doy = (153 * mp + 2) / 5 + i64::from(self.day) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        days * SECONDS_PER_DAY
            + i64::from(self.hour) * 3600
            + i64::from(self.minute) * 60
            + i64::from(self.second)
    }

    fn plus_seconds(self, seconds: i64) -> Self {
        Self::from_unix(self.to_unix() + seconds)
    }

    /// Go's `AddDate(0, 1, 0)` from the first of a month.
    fn next_month(self) -> Self {
        if self.month == 12 {
            Self::date(self.year + 1, 1, self.day)
        } else {
            Self::date(self.year, self.month + 1, self.day)
        }
    }

    /// 0 = Sunday.
    fn weekday(self) -> u32 {
        let days = self.to_unix().div_euclid(SECONDS_PER_DAY);
        // 1970-01-01 was a Thursday.
        u32::try_from((days + 4).rem_euclid(7)).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> Timestamp {
        text.parse().expect("valid timestamp")
    }

    #[test]
    fn civil_round_trips_across_leap_years_and_centuries() {
        for text in [
            "1970-01-01T00:00:00Z",
            "2000-02-29T23:59:59Z",
            "2024-12-31T12:34:56Z",
            "2100-03-01T00:00:00Z",
            "1969-12-31T23:59:59Z",
        ] {
            let seconds = ts(text).as_second();
            assert_eq!(Civil::from_unix(seconds).to_unix(), seconds, "{text}");
        }
        // 2024-06-02 is a Sunday.
        assert_eq!(
            Civil::from_unix(ts("2024-06-02T10:00:00Z").as_second()).weekday(),
            0
        );
    }

    #[test]
    fn next_is_strictly_after_at_second_granularity() {
        let daily = CronSchedule::parse("0 0 * * *").expect("valid");
        assert_eq!(
            daily.next_after(ts("2024-06-01T00:00:00Z")),
            Some(ts("2024-06-02T00:00:00Z"))
        );
        assert_eq!(
            daily.next_after(ts("2024-05-31T23:59:59.5Z")),
            Some(ts("2024-06-01T00:00:00Z"))
        );
    }
}
