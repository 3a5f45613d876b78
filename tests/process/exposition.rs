//! A strict line checker for the Prometheus / `OpenMetrics` text exposition format, as scrapers
//! read it: metadata (`# HELP`, `# TYPE`, `# UNIT`) before a family's samples and at most once,
//! each family's samples together, sample names that fit the family's type (`_total` and
//! `_created` for counters; `_bucket`, `_sum`, `_count` for histograms), well-formed names, label
//! sets and values, no sample twice, cumulative histogram buckets ending in `+Inf` equal to
//! `_count`, and one `# EOF` at the very end when the text is `OpenMetrics`.

use std::collections::{BTreeMap, BTreeSet};

/// What a valid exposition holds.
#[derive(Debug, Default)]
pub struct Exposition {
    /// Family name -> type.
    pub families: BTreeMap<String, String>,
    pub samples: usize,
}

const TYPES: [&str; 8] = [
    "counter",
    "gauge",
    "histogram",
    "gaugehistogram",
    "summary",
    "info",
    "stateset",
    "unknown",
];

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ if text
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E')) =>
        {
            text.parse::<f64>()
                .map_err(|e| format!("value {text:?}: {e}"))
        }
        _ => Err(format!("value {text:?} is not a number")),
    }
}

/// Parses `{a="x",b="y"}` at the start of `text`; returns the labels and the rest.
fn parse_labels(text: &str) -> Result<(Labels, &str), String> {
    let mut labels = Vec::new();
    let mut rest = text.strip_prefix('{').ok_or("labels must start with {")?;
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let (name, after) = rest
            .split_once("=\"")
            .ok_or_else(|| format!("label without =\" in {text:?}"))?;
        if !is_label_name(name) {
            return Err(format!("label name {name:?}"));
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?} in label {name}")),
                },
                Some((i, '"')) => break i,
                Some((_, '\n')) => return Err(format!("raw newline in label {name}")),
                Some((_, c)) => value.push(c),
                None => return Err(format!("unterminated value of label {name}")),
            }
        };
        if labels.iter().any(|(n, _)| n == name) {
            return Err(format!("label {name} twice"));
        }
        labels.push((name.to_owned(), value));
        rest = &after[end + 1..];
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err(format!("expected , or }} after label {name}"));
        }
    }
}

/// The family a sample belongs to, given the families declared so far.
fn family_of<'a>(name: &'a str, families: &BTreeMap<String, String>) -> (&'a str, &'a str) {
    for suffix in [
        "_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info",
    ] {
        if let Some(base) = name.strip_suffix(suffix)
            && families.contains_key(base)
        {
            return (base, suffix);
        }
    }
    (name, "")
}

fn suffix_allowed(kind: &str, suffix: &str) -> bool {
    match kind {
        "counter" => matches!(suffix, "_total" | "_created"),
        "histogram" => matches!(suffix, "_bucket" | "_count" | "_sum" | "_created"),
        "gaugehistogram" => matches!(suffix, "_bucket" | "_gcount" | "_gsum"),
        "summary" => matches!(suffix, "" | "_count" | "_sum" | "_created"),
        "info" => suffix == "_info",
        _ => suffix.is_empty(),
    }
}

type Labels = Vec<(String, String)>;
/// A histogram series: its family and its labels without `le`.
type Series = (String, Labels);

/// The state of one pass over an exposition.
#[derive(Default)]
struct Checker {
    openmetrics: bool,
    exposition: Exposition,
    /// (family, HELP/TYPE/UNIT) seen.
    metadata: BTreeSet<(String, String)>,
    /// Families whose lines ended (another family's line came).
    finished: BTreeSet<String>,
    current: Option<String>,
    /// (sample name, sorted labels) seen.
    seen: BTreeSet<(String, Labels)>,
    /// Families with samples.
    sampled: BTreeSet<String>,
    /// Histogram buckets (le, cumulative count) in order, and `_count`s.
    buckets: BTreeMap<Series, Vec<(f64, f64)>>,
    counts: BTreeMap<Series, f64>,
}

impl Checker {
    /// The lines of `family` continue or begin here; a family may not come back.
    fn enter(&mut self, family: &str) -> Result<(), String> {
        if self.current.as_deref() != Some(family) {
            if self.finished.contains(family) {
                return Err(format!("family {family} appears in two places"));
            }
            if let Some(previous) = self.current.take() {
                self.finished.insert(previous);
            }
            self.current = Some(family.to_owned());
        }
        Ok(())
    }

    /// `# HELP`, `# TYPE`, `# UNIT` (other comments only outside `OpenMetrics`).
    fn comment(&mut self, comment: &str) -> Result<(), String> {
        let mut parts = comment.trim_start().splitn(3, ' ');
        let keyword = parts.next().unwrap_or("");
        let (name, rest) = (parts.next().unwrap_or(""), parts.next());
        match keyword {
            "HELP" | "TYPE" | "UNIT" => {}
            _ if self.openmetrics => return Err("unknown comment".to_owned()),
            _ => return Ok(()),
        }
        if !is_metric_name(name) {
            return Err(format!("metric name {name:?}"));
        }
        self.enter(name)?;
        if !self.metadata.insert((name.to_owned(), keyword.to_owned())) {
            return Err(format!("second # {keyword} for {name}"));
        }
        if keyword == "TYPE" {
            let kind = rest.unwrap_or("");
            let kind = if kind == "untyped" { "unknown" } else { kind };
            if !TYPES.contains(&kind) {
                return Err(format!("type {kind:?}"));
            }
            if self.sampled.contains(name) {
                return Err(format!("# TYPE of {name} after its samples"));
            }
            self.exposition
                .families
                .insert(name.to_owned(), kind.to_owned());
        }
        Ok(())
    }

    /// A sample: a name, optional labels, a value, an optional timestamp.
    fn sample(&mut self, line: &str) -> Result<(), String> {
        let name_end = line.find(['{', ' ']).ok_or("no value")?;
        let name = &line[..name_end];
        if !is_metric_name(name) {
            return Err(format!("metric name {name:?}"));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..])?
        } else {
            (Vec::new(), &line[name_end..])
        };
        let fields: Vec<&str> = rest
            .strip_prefix(' ')
            .ok_or("no space before the value")?
            .split(' ')
            .collect();
        if fields.len() > 2 || fields.iter().any(|f| f.is_empty()) {
            return Err("expected a value and at most a timestamp".to_owned());
        }
        let value = parse_value(fields[0])?;
        if let Some(timestamp) = fields.get(1) {
            parse_value(timestamp)?;
        }
        let (family, suffix) = family_of(name, &self.exposition.families);
        let Some(kind) = self.exposition.families.get(family).cloned() else {
            if self.openmetrics {
                return Err(format!("sample of {family} without a # TYPE"));
            }
            return self.record(name, family, labels);
        };
        if !suffix_allowed(&kind, suffix) {
            return Err(format!("sample {name} in a {kind} family {family}"));
        }
        if matches!(kind.as_str(), "counter" | "histogram") && suffix != "_created" && value < 0.0 {
            return Err("a negative count".to_owned());
        }
        if kind == "histogram" {
            let series: Series = (
                family.to_owned(),
                labels.iter().filter(|(n, _)| n != "le").cloned().collect(),
            );
            match suffix {
                "_bucket" => {
                    let le = labels
                        .iter()
                        .find(|(n, _)| n == "le")
                        .ok_or("a bucket without le")?;
                    let bound = parse_value(&le.1)?;
                    self.buckets.entry(series).or_default().push((bound, value));
                }
                "_count" => {
                    self.counts.insert(series, value);
                }
                _ => {}
            }
        }
        self.record(name, family, labels)
    }

    fn record(&mut self, name: &str, family: &str, mut labels: Labels) -> Result<(), String> {
        self.enter(family)?;
        self.sampled.insert(family.to_owned());
        labels.sort();
        if !self.seen.insert((name.to_owned(), labels)) {
            return Err("the same sample twice".to_owned());
        }
        self.exposition.samples += 1;
        Ok(())
    }

    /// Buckets cumulative and increasing, ending in `+Inf` equal to `_count`.
    fn histograms(&self) -> Result<(), String> {
        for (series, points) in &self.buckets {
            let mut previous = (f64::NEG_INFINITY, 0.0);
            for &(bound, count) in points {
                if bound <= previous.0 || count < previous.1 {
                    return Err(format!(
                        "histogram {} {:?}: buckets not increasing at le={bound}",
                        series.0, series.1
                    ));
                }
                previous = (bound, count);
            }
            if previous.0 < f64::INFINITY {
                return Err(format!(
                    "histogram {} {:?} has no +Inf bucket",
                    series.0, series.1
                ));
            }
            if self.counts.get(series) != Some(&previous.1) {
                return Err(format!(
                    "histogram {} {:?}: +Inf bucket {} but _count {:?}",
                    series.0,
                    series.1,
                    previous.1,
                    self.counts.get(series)
                ));
            }
        }
        Ok(())
    }
}

/// Checks `text`; the first problem names its line.
pub fn check(text: &str) -> Result<Exposition, String> {
    let mut checker = Checker {
        openmetrics: text.contains("# EOF"),
        ..Checker::default()
    };
    let lines: Vec<&str> = text.split('\n').collect();
    let last = lines.len() - 1;
    if !lines[last].is_empty() {
        return Err("the text does not end with a newline".to_owned());
    }
    for (index, line) in lines[..last].iter().enumerate() {
        let at = |why: String| format!("line {}: {why}: {line:?}", index + 1);
        if *line == "# EOF" {
            if index + 1 != last {
                return Err(at("# EOF before the end".to_owned()));
            }
        } else if line.is_empty() {
            return Err(at("empty line".to_owned()));
        } else if let Some(comment) = line.strip_prefix('#') {
            checker.comment(comment).map_err(at)?;
        } else {
            checker.sample(line).map_err(at)?;
        }
    }
    if checker.openmetrics && lines.get(last.wrapping_sub(1)) != Some(&"# EOF") {
        return Err("OpenMetrics text must end with # EOF".to_owned());
    }
    checker.histograms()?;
    Ok(checker.exposition)
}

#[test]
fn the_checker_accepts_openmetrics_as_prometheus_client_writes_it() {
    let text = "# HELP karpenter_nodeclaims_created Created.\n\
                # TYPE karpenter_nodeclaims_created counter\n\
                karpenter_nodeclaims_created_total{nodepool=\"default\",reason=\"provisioning\"} 2\n\
                # HELP karpenter_actor_handler_duration_seconds Time.\n\
                # TYPE karpenter_actor_handler_duration_seconds histogram\n\
                # UNIT karpenter_actor_handler_duration_seconds seconds\n\
                karpenter_actor_handler_duration_seconds_sum{kind=\"A\"} 0.5\n\
                karpenter_actor_handler_duration_seconds_count{kind=\"A\"} 3\n\
                karpenter_actor_handler_duration_seconds_bucket{le=\"0.1\",kind=\"A\"} 1\n\
                karpenter_actor_handler_duration_seconds_bucket{le=\"+Inf\",kind=\"A\"} 3\n\
                # TYPE up gauge\n\
                up 1\n\
                # EOF\n";
    let exposition = check(text).unwrap();
    assert_eq!(exposition.samples, 6);
    assert_eq!(exposition.families.len(), 3);
}

#[test]
fn the_checker_names_each_kind_of_problem() {
    let cases = [
        (
            "# TYPE a counter\na_total 1\n# EOF\n# EOF\n",
            "# EOF before the end",
        ),
        ("# TYPE a counter\na 1\n# EOF\n", "in a counter family"),
        ("# TYPE a gauge\na 1\na 2\n# EOF\n", "twice"),
        ("# TYPE a gauge\na{b=\"x\" 1\n# EOF\n", "expected , or }"),
        ("# TYPE a gauge\na{1b=\"x\"} 1\n# EOF\n", "label name"),
        ("# TYPE a gauge\na one\n# EOF\n", "not a number"),
        (
            "# TYPE a gauge\n# TYPE b gauge\nb 1\na 1\n# EOF\n",
            "two places",
        ),
        (
            "# TYPE a gauge\n# TYPE a gauge\na 1\n# EOF\n",
            "second # TYPE",
        ),
        ("# TYPE a gauge\n\na 1\n# EOF\n", "empty line"),
        ("b 1\n# EOF\n", "without a # TYPE"),
        (
            "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n# EOF\n",
            "not increasing",
        ),
        (
            "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_count 1\n# EOF\n",
            "no +Inf bucket",
        ),
        (
            "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n# EOF\n",
            "but _count",
        ),
        ("# TYPE a gauge\na 1", "newline"),
        ("a 1\n# TYPE a gauge\n", "after its samples"),
    ];
    for (text, problem) in cases {
        let error = check(text).expect_err(text);
        assert!(error.contains(problem), "{text:?}: {error}");
    }
}
