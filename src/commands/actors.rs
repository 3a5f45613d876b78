//! `karpenter actors [--url URL]`: the live actors of a running daemon, read from its
//! `/debug/actors` (the kit's registry snapshot), as a table or JSON, filtered and sorted.
//!
//! Data flow: GET the snapshot ([`crate::http::get`]) -> parse it ([`RegistrySnapshot`]) ->
//! [`select`] (kind, filter, sort) -> [`render`] the table (or print the selected actors as
//! JSON). The pure steps are public so tests need no daemon.

use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

use clap::{Args, ValueEnum};
use karpenter_actors::runtime::{ActorSnapshot, RegistrySnapshot};

use super::Status;
use crate::http::{self, ACTORS_PATH};

/// Where a daemon on this machine serves `/debug/actors` (`METRICS_PORT`'s default).
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";
/// How long to wait for the daemon.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Columns to sort by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum SortKey {
    /// Kind, then key.
    #[default]
    Kind,
    Key,
    State,
    /// Deepest mailbox first.
    Mailbox,
    /// Most messages handled first.
    Handled,
    /// Most errors (and panics) first.
    Errors,
    /// Most restarts first.
    Restarts,
    /// Slowest average handler first.
    Latency,
}

/// Options of `karpenter actors`.
#[derive(Debug, Clone, Default, Args)]
pub struct ActorsArgs {
    /// The daemon's metrics address (`/debug/actors` is appended unless the URL has a path).
    #[arg(long, value_name = "URL", default_value = DEFAULT_URL)]
    pub url: String,
    /// Sort by this column.
    #[arg(long, value_enum, default_value_t = SortKey::Kind)]
    pub sort: SortKey,
    /// Only actors of this kind (e.g. NodeClaimActor).
    #[arg(long, value_name = "KIND")]
    pub kind: Option<String>,
    /// Only actors whose kind, key, state or last error contains this text.
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
    /// Print the selected actors as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The `/debug/actors` URL of `url`.
#[must_use]
pub fn actors_url(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    let has_path = trimmed
        .split_once("://")
        .map_or(trimmed, |(_, rest)| rest)
        .contains('/');
    if has_path {
        trimmed.to_owned()
    } else {
        format!("{trimmed}{ACTORS_PATH}")
    }
}

/// The actors the arguments select, in their order.
#[must_use]
pub fn select<'a>(snapshot: &'a RegistrySnapshot, args: &ActorsArgs) -> Vec<&'a ActorSnapshot> {
    let mut actors: Vec<&ActorSnapshot> = snapshot
        .actors
        .iter()
        .filter(|a| args.kind.as_deref().is_none_or(|k| a.kind == k))
        .filter(|a| {
            args.filter.as_deref().is_none_or(|text| {
                a.kind.contains(text)
                    || a.key.contains(text)
                    || a.state.contains(text)
                    || a.last_error.as_deref().is_some_and(|e| e.contains(text))
            })
        })
        .collect();
    let by_name =
        |a: &&ActorSnapshot, b: &&ActorSnapshot| (&a.kind, &a.key).cmp(&(&b.kind, &b.key));
    match args.sort {
        SortKey::Kind => actors.sort_by(by_name),
        SortKey::Key => actors.sort_by(|a, b| a.key.cmp(&b.key).then_with(|| by_name(a, b))),
        SortKey::State => actors.sort_by(|a, b| a.state.cmp(&b.state).then_with(|| by_name(a, b))),
        SortKey::Mailbox => actors.sort_by(|a, b| {
            b.mailbox_depth
                .cmp(&a.mailbox_depth)
                .then_with(|| by_name(a, b))
        }),
        SortKey::Handled => {
            actors.sort_by(|a, b| b.handled.cmp(&a.handled).then_with(|| by_name(a, b)));
        }
        SortKey::Errors => actors.sort_by(|a, b| {
            (b.errors + b.panics)
                .cmp(&(a.errors + a.panics))
                .then_with(|| by_name(a, b))
        }),
        SortKey::Restarts => {
            actors.sort_by(|a, b| b.restarts.cmp(&a.restarts).then_with(|| by_name(a, b)));
        }
        SortKey::Latency => actors.sort_by(|a, b| {
            b.latency
                .avg_seconds
                .total_cmp(&a.latency.avg_seconds)
                .then_with(|| by_name(a, b))
        }),
    }
    actors
}

/// A parked actor's state with the time to its retry (`parked (4m12s)`).
fn state(actor: &ActorSnapshot) -> String {
    match actor.unpark_in_seconds {
        Some(seconds) => {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "whole seconds of a parking (at most an hour) for display"
            )]
            let whole = seconds.max(0.0).ceil() as u64;
            format!("{} ({}m{}s)", actor.state, whole / 60, whole % 60)
        }
        None => actor.state.clone(),
    }
}

fn millis(seconds: f64) -> String {
    if seconds <= 0.0 {
        "-".to_owned()
    } else if seconds < 0.001 {
        format!("{:.0}µs", seconds * 1e6)
    } else if seconds < 1.0 {
        format!("{:.1}ms", seconds * 1e3)
    } else {
        format!("{seconds:.2}s")
    }
}

/// The table of `actors`, with a summary line of the whole snapshot.
#[must_use]
pub fn render(snapshot: &RegistrySnapshot, actors: &[&ActorSnapshot]) -> String {
    let mut rows: Vec<[String; 8]> = vec![[
        "KIND".into(),
        "KEY".into(),
        "STATE".into(),
        "MAILBOX".into(),
        "HANDLED".into(),
        "ERRORS".into(),
        "RESTARTS".into(),
        "LATENCY AVG/MAX".into(),
    ]];
    for actor in actors {
        rows.push([
            actor.kind.clone(),
            actor.key.clone(),
            state(actor),
            format!("{}/{}", actor.mailbox_depth, actor.mailbox_capacity),
            actor.handled.to_string(),
            if actor.panics > 0 {
                format!("{} ({} panics)", actor.errors, actor.panics)
            } else {
                actor.errors.to_string()
            },
            actor.restarts.to_string(),
            format!(
                "{}/{}",
                millis(actor.latency.avg_seconds),
                millis(actor.latency.max_seconds)
            ),
        ]);
    }
    let widths: Vec<usize> = (0..8)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, width))| {
                if c >= 3 {
                    format!("{cell:>width$}")
                } else {
                    format!("{cell:<width$}")
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    let escalations: u64 = snapshot.supervisors.iter().map(|s| s.escalations).sum();
    let _ = writeln!(
        out,
        "{} of {} actors shown, {} parked, {} supervisor groups, {} escalations",
        actors.len(),
        snapshot.actors.len(),
        snapshot.parked(),
        snapshot.supervisors.len(),
        escalations
    );
    out
}

/// Why the actor snapshot could not be had.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(transparent)]
    Http(#[from] http::HttpError),
    #[error("{url} answered {status}: {body}")]
    Status {
        url: String,
        status: ::http::StatusCode,
        body: String,
    },
    #[error(
        "{url} does not serve the actor table: the daemon serves its debug endpoints only with \
         ENABLE_PROFILING=true (--enable-profiling; the chart's settings.enableProfiling)"
    )]
    ProfilingDisabled { url: String },
    #[error("{url} did not answer an actor snapshot")]
    Decode {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

impl FetchError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Http(error) => error.category(),
            Self::Status { .. } => "status",
            Self::ProfilingDisabled { .. } => "profiling_disabled",
            Self::Decode { .. } => "decode",
        }
    }
}

/// Fetches and parses the snapshot.
pub async fn fetch(url: &str) -> Result<RegistrySnapshot, FetchError> {
    let url = actors_url(url);
    let (status, body) = http::get(&url, FETCH_TIMEOUT).await?;
    if status == ::http::StatusCode::NOT_FOUND {
        return Err(FetchError::ProfilingDisabled { url });
    }
    if !status.is_success() {
        return Err(FetchError::Status {
            url,
            status,
            body: String::from_utf8_lossy(&body).trim().to_owned(),
        });
    }
    serde_json::from_slice(&body).map_err(|source| FetchError::Decode { url, source })
}

/// Runs the command.
pub fn run(args: &ActorsArgs, out: &mut impl Write, err: &mut impl Write) -> Status {
    let Some(runtime) = super::current_thread_runtime(err) else {
        return Status::Problems;
    };
    let snapshot = match runtime.block_on(fetch(&args.url)) {
        Ok(snapshot) => snapshot,
        Err(error) => {
            let _ = writeln!(err, "error: {}", karpenter_core::errors::chain(&error));
            return Status::BadInput;
        }
    };
    print(&snapshot, args, out);
    Status::Success
}

/// Prints the selection of `snapshot` as the arguments ask.
pub fn print(snapshot: &RegistrySnapshot, args: &ActorsArgs, out: &mut impl Write) {
    let actors = select(snapshot, args);
    if args.json {
        let text = serde_json::to_string_pretty(&actors).unwrap_or_default();
        let _ = writeln!(out, "{text}");
    } else {
        let _ = out.write_all(render(snapshot, &actors).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> RegistrySnapshot {
        serde_json::from_value(serde_json::json!({
            "actors": [
                {"kind": "NodeClaimActor", "key": "default-b", "state": "launching", "startedAtUnixMs": 0, "uptimeSeconds": 1.0,
                 "restarts": 2, "handled": 10, "handledByMessage": {}, "errors": 1, "panics": 1, "mailboxDepth": 3,
                 "mailboxCapacity": 32, "overflows": 0, "latency": {"lastSeconds": 0.002, "avgSeconds": 0.002, "maxSeconds": 0.5},
                 "lastError": "launching: InsufficientInstanceCapacity"},
                {"kind": "NodeClaimActor", "key": "default-a", "state": "registered", "startedAtUnixMs": 0, "uptimeSeconds": 1.0,
                 "restarts": 0, "handled": 50, "handledByMessage": {}, "errors": 0, "panics": 0, "mailboxDepth": 0,
                 "mailboxCapacity": 32, "overflows": 0, "latency": {"lastSeconds": 0.0001, "avgSeconds": 0.0001, "maxSeconds": 0.001},
                 "lastError": null},
                {"kind": "NodePoolActor", "key": "default", "state": "running", "startedAtUnixMs": 0, "uptimeSeconds": 1.0,
                 "restarts": 0, "handled": 5, "handledByMessage": {}, "errors": 0, "panics": 0, "mailboxDepth": 0,
                 "mailboxCapacity": 16, "overflows": 0, "latency": {"lastSeconds": 0.0, "avgSeconds": 0.0, "maxSeconds": 0.0},
                 "lastError": null}
            ],
            "supervisors": []
        }))
        .expect("a snapshot")
    }

    fn keys(actors: &[&ActorSnapshot]) -> Vec<String> {
        actors.iter().map(|a| a.key.clone()).collect()
    }

    #[test]
    fn actors_sort_by_kind_then_key_and_by_restarts_descending() {
        let snapshot = snapshot();
        let args = ActorsArgs::default();
        assert_eq!(
            keys(&select(&snapshot, &args)),
            ["default-a", "default-b", "default"]
        );
        let args = ActorsArgs {
            sort: SortKey::Restarts,
            ..ActorsArgs::default()
        };
        assert_eq!(keys(&select(&snapshot, &args))[0], "default-b");
        let args = ActorsArgs {
            sort: SortKey::Handled,
            ..ActorsArgs::default()
        };
        assert_eq!(keys(&select(&snapshot, &args))[0], "default-a");
    }

    #[test]
    fn kind_and_filter_narrow_the_table() {
        let snapshot = snapshot();
        let args = ActorsArgs {
            kind: Some("NodePoolActor".into()),
            ..ActorsArgs::default()
        };
        assert_eq!(keys(&select(&snapshot, &args)), ["default"]);
        let args = ActorsArgs {
            filter: Some("Insufficient".into()),
            ..ActorsArgs::default()
        };
        assert_eq!(keys(&select(&snapshot, &args)), ["default-b"]);
    }

    #[test]
    fn the_table_has_every_column_and_a_summary() {
        let snapshot = snapshot();
        let args = ActorsArgs::default();
        let table = render(&snapshot, &select(&snapshot, &args));
        let header = table.lines().next().unwrap_or_default();
        for column in [
            "KIND", "KEY", "STATE", "MAILBOX", "HANDLED", "ERRORS", "RESTARTS", "LATENCY",
        ] {
            assert!(header.contains(column), "{header}");
        }
        assert!(table.contains("1 (1 panics)"), "{table}");
        assert!(table.contains("3/32"), "{table}");
        assert!(table.contains("2.0ms/500.0ms"), "{table}");
        assert!(
            table.ends_with("3 of 3 actors shown, 0 parked, 0 supervisor groups, 0 escalations\n")
        );
    }

    #[test]
    fn a_parked_actor_shows_the_time_to_its_retry_and_is_counted() {
        let mut snapshot = snapshot();
        snapshot.actors[0].state = "parked".into();
        snapshot.actors[0].unpark_in_seconds = Some(251.5);
        let args = ActorsArgs {
            filter: Some("parked".into()),
            ..ActorsArgs::default()
        };
        let selected = select(&snapshot, &args);
        assert_eq!(keys(&selected), ["default-b"]);
        let table = render(&snapshot, &selected);
        assert!(table.contains("parked (4m12s)"), "{table}");
        assert!(table.contains("1 of 3 actors shown, 1 parked,"), "{table}");
        // The field is left out of the JSON of an actor that is not parked.
        let json = serde_json::to_value(&snapshot.actors[1]).unwrap();
        assert!(json.get("unparkInSeconds").is_none(), "{json}");
        assert_eq!(
            serde_json::to_value(&snapshot.actors[0]).unwrap()["unparkInSeconds"],
            251.5
        );
    }

    #[test]
    fn a_bare_address_gets_the_actors_path() {
        assert_eq!(
            actors_url("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/debug/actors"
        );
        assert_eq!(
            actors_url("http://127.0.0.1:8080/"),
            "http://127.0.0.1:8080/debug/actors"
        );
        assert_eq!(
            actors_url("http://h:1/custom/actors"),
            "http://h:1/custom/actors"
        );
    }
}
