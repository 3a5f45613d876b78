//! A Prometheus summary, which `prometheus-client` lacks, for the two families Karpenter exports
//! as summaries and its performance dashboard reads by `quantile`:
//! `karpenter_nodes_termination_duration_seconds` and `karpenter_pods_startup_duration_seconds`.
//!
//! Observations are kept for [`MAX_AGE`] (Prometheus' Go client's default window; at most
//! [`MAX_SAMPLES`] per series) and the quantiles [`QUANTILES`] (Karpenter's objectives) are
//! computed exactly over them at each scrape; `_sum` and `_count` cover every observation.
//! A [`Summary`] is not in the `prometheus-client` Registry: the daemon's `/metrics` appends its
//! text ([`TextFamily::encode_text`]) after the registries, in the same format.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Karpenter's summary objectives (`pkg/metrics.SummaryObjectives`).
pub const QUANTILES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];
/// How long an observation counts in the quantiles (the Go client's `DefMaxAge`).
pub const MAX_AGE: Duration = Duration::from_mins(10);
/// Observations kept per series at most: a burst of terminations beyond it ages the oldest out
/// early, bounding memory (10,000 floats and instants, about 240 KB).
pub const MAX_SAMPLES: usize = 10_000;

/// A family the daemon's `/metrics` writes itself, in the Prometheus text format.
pub trait TextFamily: Send + Sync + std::fmt::Debug {
    /// Appends the family (`# HELP`, `# TYPE` and its samples); nothing when it has no series.
    fn encode_text(&self, out: &mut String) -> std::fmt::Result;
}

/// A label set: (name, value) pairs in order.
pub type SummaryLabels = Vec<(&'static str, String)>;

#[derive(Debug, Default)]
struct Series {
    window: VecDeque<(Instant, f64)>,
    sum: f64,
    count: u64,
}

/// One summary family (see the module docs). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Summary {
    name: &'static str,
    help: &'static str,
    series: Arc<Mutex<BTreeMap<SummaryLabels, Series>>>,
}

impl Summary {
    #[must_use]
    pub fn new(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            series: Arc::default(),
        }
    }

    /// Records `value` in the series of `labels`.
    pub fn observe(&self, labels: SummaryLabels, value: f64) {
        let now = Instant::now();
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = series.entry(labels).or_default();
        entry.window.push_back((now, value));
        if entry.window.len() > MAX_SAMPLES {
            entry.window.pop_front();
        }
        entry.sum += value;
        entry.count += 1;
    }

    /// The `_count` of the series of `labels` (tests and reports).
    #[must_use]
    pub fn count(&self, labels: &SummaryLabels) -> u64 {
        self.series
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(labels)
            .map_or(0, |s| s.count)
    }
}

/// The `q` quantile of sorted `values` (nearest rank), NaN when empty, as the Go client's.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[expect(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a rank within a window of at most MAX_SAMPLES"
    )]
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn write_labels(out: &mut String, labels: &SummaryLabels, extra: Option<(&str, &str)>) {
    let pairs: Vec<String> = labels
        .iter()
        .map(|(name, value)| format!("{name}=\"{}\"", escape(value)))
        .chain(extra.map(|(name, value)| format!("{name}=\"{value}\"")))
        .collect();
    if !pairs.is_empty() {
        out.push('{');
        out.push_str(&pairs.join(","));
        out.push('}');
    }
}

/// A float as the text format writes it (`1.0`, `NaN`).
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.1}")
    } else {
        format!("{value}")
    }
}

impl TextFamily for Summary {
    fn encode_text(&self, out: &mut String) -> std::fmt::Result {
        let now = Instant::now();
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        if series.is_empty() {
            return Ok(());
        }
        writeln!(
            out,
            "# HELP {} {}.",
            self.name,
            self.help.trim_end_matches('.')
        )?;
        writeln!(out, "# TYPE {} summary", self.name)?;
        for (labels, entry) in series.iter_mut() {
            while entry
                .window
                .front()
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) > MAX_AGE)
            {
                entry.window.pop_front();
            }
            let mut sorted: Vec<f64> = entry.window.iter().map(|(_, v)| *v).collect();
            sorted.sort_by(f64::total_cmp);
            for q in QUANTILES {
                out.push_str(self.name);
                // The Go client's label value (`0`, `0.5`, `1`), which dashboards match.
                write_labels(out, labels, Some(("quantile", &format!("{q}"))));
                writeln!(out, " {}", number(quantile(&sorted, q)))?;
            }
            write!(out, "{}_sum", self.name)?;
            write_labels(out, labels, None);
            writeln!(out, " {}", number(entry.sum))?;
            write!(out, "{}_count", self.name)?;
            write_labels(out, labels, None);
            writeln!(out, " {}", entry.count)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(summary: &Summary) -> String {
        let mut out = String::new();
        summary.encode_text(&mut out).unwrap();
        out
    }

    #[tokio::test(start_paused = true)]
    async fn quantiles_cover_the_last_ten_minutes_and_sum_and_count_everything() {
        let summary = Summary::new("s_seconds", "Some time");
        assert_eq!(text(&summary), "", "no series, no family");
        let pool = || vec![("nodepool", "default".to_owned())];
        for value in [9.0, 1.0, 5.0, 3.0] {
            summary.observe(pool(), value);
        }
        let first = text(&summary);
        for line in [
            "# HELP s_seconds Some time.",
            "# TYPE s_seconds summary",
            "s_seconds{nodepool=\"default\",quantile=\"0\"} 1.0",
            "s_seconds{nodepool=\"default\",quantile=\"0.5\"} 3.0",
            "s_seconds{nodepool=\"default\",quantile=\"0.9\"} 9.0",
            "s_seconds{nodepool=\"default\",quantile=\"1\"} 9.0",
            "s_seconds_sum{nodepool=\"default\"} 18.0",
            "s_seconds_count{nodepool=\"default\"} 4",
        ] {
            assert!(first.lines().any(|l| l == line), "{line} in\n{first}");
        }
        tokio::time::advance(MAX_AGE + Duration::from_secs(1)).await;
        summary.observe(pool(), 2.0);
        let later = text(&summary);
        assert!(
            later.contains("s_seconds{nodepool=\"default\",quantile=\"1\"} 2.0"),
            "{later}"
        );
        assert!(
            later.contains("s_seconds_count{nodepool=\"default\"} 5"),
            "{later}"
        );
        tokio::time::advance(MAX_AGE + Duration::from_secs(1)).await;
        assert!(text(&summary).contains("quantile=\"0.5\"} NaN"));
    }

    #[test]
    fn an_unlabeled_summary_has_only_the_quantile_label() {
        let summary = Summary::new("u", "U");
        summary.observe(Vec::new(), 0.25);
        let out = text(&summary);
        assert!(out.contains("u{quantile=\"0.99\"} 0.25\n"), "{out}");
        assert!(out.contains("u_sum 0.25\nu_count 1\n"), "{out}");
    }
}
