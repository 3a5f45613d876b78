//! Karpenter's log lines: the JSON shape of Karpenter v1.5's zap logger as a `tracing` layer
//! ([`KarpenterJson`]), and the conventions call sites follow so that their fields come out as
//! Karpenter's.
//!
//! Data flow: a `tracing` event -> the subscriber's filter ([`level_filter`]: `LOG_LEVEL` for
//! our crates, WARN and up for dependencies) -> [`KarpenterJson`]: the event's fields are
//! rendered into reused buffers, the sampler admits it (per level and message: the first 100
//! each second, then every 100th) and one line is assembled: `level`, `time`, `logger`,
//! `caller` (debug only), `message`, `commit`, the context fields of the spans it runs in (root
//! first: the actor kit's `reconcile` span gives controller-runtime's `controller`,
//! `controllerGroup`, `controllerKind`, the object, `namespace`, `name`, `reconcileID`), the
//! event's own fields, the structured fields of its error, `error` -> every output sink
//! (`LOG_OUTPUT_PATHS`). A sink that fails to write is reported on the error sinks
//! (`LOG_ERROR_OUTPUT_PATHS`), as zap's `ErrorOutput` is.
//!
//! Conventions (a field is rendered from its name and value, so a call site chooses both):
//! - **Keys** are Karpenter's: hyphenated ones as string literals (`"provider-id" = %id`),
//!   camelCase and dotted ones as identifiers (`messageKind = ...`, `taint.Key = ...`).
//! - **Object references**: the kind is the key and the name the value: `NodeClaim = %name`
//!   gives `"NodeClaim":{"name":"default-x"}`; namespaced kinds take `namespace/name`
//!   (`Pod = %key` gives `{"name":"x","namespace":"y"}`). The kinds are [`OBJECT_KINDS`].
//! - **Errors**: `error = logs::err(&error)` records the error itself: `error` is the text of
//!   its whole source chain (`a: b: c`), and an [`AwsError`] in the chain adds Karpenter's
//!   top-level `aws-*` fields (and their `(k=v, ...)` suffix to the text, as Karpenter's
//!   structured errors have). `error` is always the last key.
//! - **Durations**: `duration = %GoDuration(elapsed)` gives Go's form, `"100.761702ms"`,
//!   `"15m0s"`.
//! - **Maps and lists** (resource lists, node lists): a `%`/`?` value whose text is a JSON
//!   object or array is embedded as JSON, compacted (`allocatable = %json(&map)` gives
//!   `{"cpu":"5150m"}`; `?vec_of_strings` is already an array). Any other text is a string.
//!   Values recorded as numbers or booleans stay numbers and booleans.
//! - **Levels**: Karpenter logs DEBUG, INFO and ERROR only. Our call sites use the level
//!   Karpenter uses for the same situation; a dependency's WARN is written as INFO (klog
//!   warnings reach Karpenter's logr logger as Info), TRACE never.
//!
//! [`AwsError`]: crate::ports::aws_error::AwsError

mod layer;
mod render;
mod sample;
mod sink;

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use karpenter_config::LogLevel;
use tracing::Span;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;

use crate::runtime::ControllerId;

pub use layer::{KarpenterJson, WallClock};
pub use render::{WITHHELD_AWS_MESSAGE, format_time, public_text};
pub use sample::{SAMPLE_FIRST, SAMPLE_THEREAFTER, SAMPLE_TICK, Sampler};
pub use sink::{LogLine, MemorySink, Sink, SinkError};

/// Every line's `logger`: Karpenter's root logger is named `controller`.
pub const LOGGER: &str = "controller";

/// The message of the one line written when the build carries no commit.
pub const NO_COMMIT_MESSAGE: &str = "Unable to read vcs.revision from binary";

/// Keys rendered as Kubernetes object references (klog's `ObjectRef`), with whether the kind
/// is namespaced (its value is then `namespace/name`).
pub const OBJECT_KINDS: &[(&str, bool)] = &[
    ("NodeClaim", false),
    ("Node", false),
    ("NodePool", false),
    ("EC2NodeClass", false),
    ("Pod", true),
    ("PodDisruptionBudget", true),
    ("VolumeAttachment", false),
    ("PersistentVolumeClaim", true),
    ("StorageClass", false),
    ("DaemonSet", true),
    ("Lease", true),
];

/// Targets whose events are ours: the workspace's crates (`karpenter`, `karpenter_actors`,
/// `karpenter_core`, `karpenter_config`; a target matches by prefix).
const OUR_TARGETS: &str = "karpenter";

/// The filter for `LOG_LEVEL`: our crates at that level, dependencies at WARN and up (at
/// ERROR only when `LOG_LEVEL=error`), so `debug` does not pour out hyper's and the AWS SDK's
/// internals.
#[must_use]
pub fn level_filter(level: LogLevel) -> Targets {
    let (ours, others) = match level {
        LogLevel::Debug => (LevelFilter::DEBUG, LevelFilter::WARN),
        LogLevel::Info => (LevelFilter::INFO, LevelFilter::WARN),
        LogLevel::Error => (LevelFilter::ERROR, LevelFilter::ERROR),
    };
    Targets::new()
        .with_default(others)
        .with_target(OUR_TARGETS, ours)
}

/// The span every handler of an actor runs in (the actor kit enters it): controller-runtime's
/// reconcile context, `controller`, `controllerGroup`, `controllerKind`, the object,
/// `namespace`, `name`, `reconcileID` (see the module docs for how they render). `controller`
/// overrides `id.name` for a message handled on behalf of another of Karpenter's controllers.
/// Level ERROR so that it is there for every line that passes the filter.
#[must_use]
pub fn reconcile_span(id: &ControllerId, controller: Option<&'static str>, key: &str) -> Span {
    let controller = controller.unwrap_or(id.name);
    if id.kind.is_empty() {
        // A singleton: controller-runtime's request key is empty and there is no object.
        tracing::error_span!(
            "reconcile",
            controller,
            namespace = "",
            "name" = "",
            reconcileID = %ReconcileId::next(),
        )
    } else {
        tracing::error_span!(
            "reconcile",
            controller,
            controllerGroup = id.group,
            controllerKind = id.kind,
            object = key,
            namespace = "",
            "name" = key,
            reconcileID = %ReconcileId::next(),
        )
    }
}

/// An error as a log value: `error = logs::err(&error)` (see the module docs).
#[must_use]
pub fn err<E: std::error::Error + 'static>(error: &E) -> &(dyn std::error::Error + 'static) {
    error
}

/// A duration in Go's `time.Duration` form (`"1.5s"`, `"15m0s"`, `"100.761702ms"`), as
/// Karpenter's logs print durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoDuration(pub Duration);

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        if nanos == 0 {
            return f.write_str("0s");
        }
        if nanos < 1_000 {
            return write!(f, "{nanos}ns");
        }
        if nanos < 1_000_000 {
            write_fraction(f, nanos, 1_000)?;
            return f.write_str("µs");
        }
        if nanos < 1_000_000_000 {
            write_fraction(f, nanos, 1_000_000)?;
            return f.write_str("ms");
        }
        let seconds = self.0.as_secs();
        let (hours, minutes) = (seconds / 3600, seconds / 60 % 60);
        if hours > 0 {
            write!(f, "{hours}h{minutes}m")?;
        } else if minutes > 0 {
            write!(f, "{minutes}m")?;
        }
        write_fraction(
            f,
            u128::from(seconds % 60) * 1_000_000_000 + u128::from(self.0.subsec_nanos()),
            1_000_000_000,
        )?;
        f.write_str("s")
    }
}

/// `value / unit` with the remainder as a decimal fraction, trailing zeros left out.
fn write_fraction(f: &mut fmt::Formatter<'_>, value: u128, unit: u128) -> fmt::Result {
    let (whole, rest) = (value / unit, value % unit);
    write!(f, "{whole}")?;
    if rest == 0 {
        return Ok(());
    }
    let digits = unit.ilog10() as usize;
    let fraction = format!("{rest:0digits$}");
    write!(f, ".{}", fraction.trim_end_matches('0'))
}

/// A value written as compact JSON, for maps and lists (`allocatable = %json(&map)`); see the
/// module docs. Serialize maps as `BTreeMap`s so the keys are sorted, as zap sorts them.
#[derive(Debug, Clone, Copy)]
pub struct Json<'a, T: ?Sized>(pub &'a T);

/// Shorthand for [`Json`].
#[must_use]
pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> Json<'_, T> {
    Json(value)
}

impl<T: serde::Serialize + ?Sized> fmt::Display for Json<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A value that cannot be serialized is written as null rather than failing the line.
        match serde_json::to_string(self.0) {
            Ok(text) => f.write_str(&text),
            Err(_) => f.write_str("null"),
        }
    }
}

/// A list of names the way Karpenter's provisioner prints pods and instance types: at most
/// `max`, then ` and N other(s)` (`"a, b, c and 7 other(s)"`).
#[derive(Debug, Clone, Copy)]
pub struct Truncated<'a, T> {
    pub items: &'a [T],
    pub max: usize,
}

impl<T: fmt::Display> fmt::Display for Truncated<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, item) in self.items.iter().take(self.max).enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{item}")?;
        }
        if self.items.len() > self.max {
            write!(f, " and {} other(s)", self.items.len() - self.max)?;
        }
        Ok(())
    }
}

/// controller-runtime's `reconcileID`: a random (version 4) UUID per reconcile. Made from a
/// per-process random seed and a counter, so it costs no system call and no lock, and touches
/// no random generator a simulation replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReconcileId(u128);

impl ReconcileId {
    /// The next id of this process.
    #[must_use]
    pub fn next() -> Self {
        static SEED: OnceLock<u64> = OnceLock::new();
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let seed = *SEED.get_or_init(|| {
            use std::hash::{BuildHasher as _, Hasher as _};
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u32(std::process::id());
            hasher.finish()
        });
        let count = COUNTER.fetch_add(1, Ordering::Relaxed);
        let high = splitmix64(seed ^ count.wrapping_mul(2));
        let low = splitmix64(seed ^ count.wrapping_mul(2).wrapping_add(1));
        let mut bits = (u128::from(high) << 64) | u128::from(low);
        // Version 4, variant 10xx.
        bits = (bits & !(0xF << 76)) | (0x4 << 76);
        bits = (bits & !(0x3 << 62)) | (0x2 << 62);
        Self(bits)
    }
}

impl fmt::Display for ReconcileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            v >> 96,
            (v >> 80) & 0xFFFF,
            (v >> 64) & 0xFFFF,
            (v >> 48) & 0xFFFF,
            v & 0xFFFF_FFFF_FFFF
        )
    }
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod value_tests {
    use super::*;

    #[test]
    fn durations_print_as_go_prints_them() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(250), "250ns"),
            (Duration::from_nanos(1_500), "1.5µs"),
            (Duration::from_nanos(100_761_702), "100.761702ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_mins(15), "15m0s"),
            (Duration::from_mins(3), "3m0s"),
            (Duration::from_hours(1), "1h0m0s"),
            (Duration::from_millis(3_723_250), "1h2m3.25s"),
        ];
        for (duration, text) in cases {
            assert_eq!(GoDuration(duration).to_string(), text, "{duration:?}");
        }
    }

    #[test]
    fn long_lists_name_five_and_count_the_others() {
        let names = ["a", "b", "c", "d", "e", "f", "g"];
        let text = Truncated {
            items: &names,
            max: 5,
        }
        .to_string();
        assert_eq!(text, "a, b, c, d, e and 2 other(s)");
        let short = Truncated {
            items: &names[..2],
            max: 5,
        }
        .to_string();
        assert_eq!(short, "a, b");
    }

    #[test]
    fn reconcile_ids_are_distinct_version_4_uuids() {
        let first = ReconcileId::next().to_string();
        let second = ReconcileId::next().to_string();
        assert_ne!(first, second);
        for id in [&first, &second] {
            let parts: Vec<&str> = id.split('-').collect();
            assert_eq!(
                parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
                [8, 4, 4, 4, 12],
                "{id}"
            );
            assert!(parts[2].starts_with('4'), "version 4: {id}");
            assert!(
                matches!(parts[3].chars().next(), Some('8' | '9' | 'a' | 'b')),
                "variant 10xx: {id}"
            );
        }
    }

    #[test]
    fn json_values_serialize_compactly_with_sorted_map_keys() {
        let map: std::collections::BTreeMap<&str, &str> =
            [("pods", "8"), ("cpu", "5150m")].into_iter().collect();
        assert_eq!(json(&map).to_string(), r#"{"cpu":"5150m","pods":"8"}"#);
    }
}
