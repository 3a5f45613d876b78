//! Watch streams: newline-delimited `{"type": ..., "object": ...}` events read from a kind's
//! history after the watcher's resourceVersion, filtered by namespace and selectors.
//!
//! A watch without a resourceVersion (or with `0`, or with `sendInitialEvents=true`) first
//! sends the current objects as ADDED (and, with `sendInitialEvents`, a BOOKMARK marking the end
//! of them). It then follows the history: an object that starts or stops matching the
//! selectors arrives as ADDED or DELETED, as from the real server. A resourceVersion older than
//! the retained history gets an ERROR event with a 410 `Status`, after which the client
//! re-lists. With `allowWatchBookmarks`, an idle watch gets a BOOKMARK every
//! `bookmark_interval`. The stream ends at `timeoutSeconds`, when the emulator closes all
//! watches ([`super::Emulator::close_watches`]), or when the client goes away.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

use super::api::{ListOptions, Shared, Target};
use super::body::EmulatorBody;
use super::kinds::KindId;
use super::status::ApiError;
use super::store::{EventType, HistoryEvent, ReadPosition, StoredObject};

/// Events read from the history per wake-up; bounds one chunk of the response.
const BATCH: usize = 512;
/// Server-side watch timeout when the client sets none (the real server picks 30 to 60 min).
const DEFAULT_TIMEOUT: Duration = Duration::from_mins(30);

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// Send the current objects first, then follow.
    Now,
    /// Follow from after this resourceVersion.
    After(u64),
}

/// A watch request.
#[derive(Debug, Clone)]
pub(crate) struct WatchRequest {
    pub target: Target,
    pub list: ListOptions,
    pub start: Start,
    pub bookmarks: bool,
    pub send_initial_events: bool,
    pub timeout: Option<Duration>,
}

struct State {
    shared: Arc<Shared>,
    request: WatchRequest,
    storage: KindId,
    cursor: u64,
    /// `cursor`, shared with the store so the history keeps what this watch has yet to read.
    position: ReadPosition,
    changes: watch::Receiver<u64>,
    epoch: watch::Receiver<u64>,
    deadline: Instant,
    pending: Option<Bytes>,
    done: bool,
}

/// Starts a watch; the body streams until the watch ends.
pub(crate) fn start(shared: Arc<Shared>, request: WatchRequest) -> Result<EmulatorBody, ApiError> {
    let storage = shared.kinds.get(request.target.kind).storage;
    let changes = shared.store.subscribe(storage);
    let epoch = shared.watch_epoch.subscribe();
    let timeout = request.timeout.unwrap_or(DEFAULT_TIMEOUT);
    // Registered before the initial list, so nothing after it is dropped before the watch reads.
    let position = shared.store.follow(
        storage,
        match request.start {
            Start::After(rv) if !request.send_initial_events => Some(rv),
            _ => None,
        },
    );
    let (cursor, pending) = match request.start {
        Start::After(rv) if !request.send_initial_events => (rv, None),
        _ => {
            let (items, rv, _) = shared.list_items(
                &request.target,
                &ListOptions {
                    limit: None,
                    continue_token: None,
                    ..request.list.clone()
                },
            )?;
            let mut chunk = Vec::new();
            for item in &items {
                write_event(
                    &mut chunk,
                    EventType::Added.as_str(),
                    &shared.render(request.target.kind, item),
                );
            }
            if request.send_initial_events && request.bookmarks {
                write_bookmark(&mut chunk, &shared, request.target.kind, rv, true);
            }
            (rv, (!chunk.is_empty()).then(|| Bytes::from(chunk)))
        }
    };
    position.advance(cursor);
    let state = State {
        shared,
        request,
        storage,
        cursor,
        position,
        changes,
        epoch,
        deadline: Instant::now() + timeout,
        pending,
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut state| async move {
        let chunk = next_chunk(&mut state).await?;
        Some((chunk, state))
    });
    Ok(EmulatorBody::Stream(stream.boxed()))
}

impl State {
    fn advance(&mut self, rv: u64) {
        self.cursor = self.cursor.max(rv);
        self.position.advance(self.cursor);
    }
}

fn write_event(out: &mut Vec<u8>, event_type: &str, object: &[u8]) {
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(event_type.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
}

fn write_bookmark(out: &mut Vec<u8>, shared: &Shared, kind: KindId, rv: u64, initial_end: bool) {
    let kind = shared.kinds.get(kind);
    let mut metadata = json!({ "resourceVersion": rv.to_string() });
    if initial_end {
        metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
    }
    let object =
        json!({ "kind": kind.kind, "apiVersion": kind.api_version(), "metadata": metadata });
    write_event(out, "BOOKMARK", object.to_string().as_bytes());
}

fn matches(state: &State, object: &StoredObject) -> bool {
    let list = &state.request.list;
    state
        .request
        .target
        .namespace
        .as_deref()
        .is_none_or(|ns| *object.key.namespace == *ns)
        && list.labels.matches(&object.labels)
        && list.fields.matches(
            &object.key.name,
            &object.key.namespace,
            &object.fields,
            || object.value(),
        )
}

/// The event type a filtered watcher sees for `event`, if any.
fn filtered_type(state: &State, event: &HistoryEvent) -> Option<EventType> {
    let now = matches(state, &event.object);
    match event.event_type {
        EventType::Added => now.then_some(EventType::Added),
        EventType::Deleted => event
            .previous
            .as_ref()
            .map_or(now, |p| matches(state, p))
            .then_some(EventType::Deleted),
        EventType::Modified => {
            let before = event.previous.as_ref().is_some_and(|p| matches(state, p));
            match (before, now) {
                (true, true) => Some(EventType::Modified),
                (true, false) => Some(EventType::Deleted),
                (false, true) => Some(EventType::Added),
                (false, false) => None,
            }
        }
    }
}

enum Read {
    Events(Vec<HistoryEvent>),
    TooOld(u64),
    Idle(u64),
}

async fn next_chunk(state: &mut State) -> Option<Bytes> {
    if let Some(pending) = state.pending.take() {
        return Some(pending);
    }
    if state.done {
        return None;
    }
    loop {
        let cursor = state.cursor;
        let storage = state.storage;
        let read =
            state
                .shared
                .store
                .read(|view| match view.events_since(storage, cursor, BATCH) {
                    Err(too_old) => Read::TooOld(too_old.oldest_available),
                    Ok(events) if events.is_empty() => Read::Idle(view.rv()),
                    Ok(events) => Read::Events(events),
                });
        match read {
            Read::TooOld(oldest) => {
                state.done = true;
                let status =
                    ApiError::gone(format!("too old resource version: {cursor} ({oldest})"))
                        .to_status();
                let mut out = Vec::new();
                write_event(&mut out, "ERROR", status.to_string().as_bytes());
                return Some(Bytes::from(out));
            }
            Read::Events(events) => {
                let mut out = Vec::new();
                for event in &events {
                    if let Some(event_type) = filtered_type(state, event) {
                        let object = state
                            .shared
                            .render(state.request.target.kind, &event.object);
                        write_event(&mut out, event_type.as_str(), &object);
                    }
                }
                if let Some(last) = events.last() {
                    state.advance(last.object.rv);
                }
                if !out.is_empty() {
                    return Some(Bytes::from(out));
                }
            }
            Read::Idle(latest) => {
                let bookmark_interval = state.shared.config.bookmark_interval;
                let bookmarks = state.request.bookmarks;
                tokio::select! {
                    changed = state.changes.changed() => {
                        if changed.is_err() {
                            return None;
                        }
                    }
                    _ = state.epoch.changed() => return None,
                    () = tokio::time::sleep_until(state.deadline) => return None,
                    () = tokio::time::sleep(bookmark_interval), if bookmarks => {
                        // Nothing of this kind happened up to `latest`: resuming there is safe.
                        state.advance(latest);
                        let mut out = Vec::new();
                        write_bookmark(&mut out, &state.shared, state.request.target.kind, state.cursor, false);
                        return Some(Bytes::from(out));
                    }
                }
            }
        }
    }
}

/// Parses a `resourceVersion` query value for a watch.
pub(crate) fn parse_start(resource_version: Option<&str>) -> Result<Start, ApiError> {
    match resource_version {
        None | Some("" | "0") => Ok(Start::Now),
        Some(text) => text.parse::<u64>().map(Start::After).map_err(|_| {
            ApiError::bad_request(format!(
                "resourceVersion {text:?} is not a valid resource version"
            ))
        }),
    }
}

/// A chunk's events, for tests.
#[cfg(test)]
fn parse_chunk(chunk: &[u8]) -> Vec<serde_json::Value> {
    chunk
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .filter_map(|line| serde_json::from_slice(line).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_one_json_document_per_line() {
        let mut out = Vec::new();
        write_event(&mut out, "ADDED", br#"{"a":1}"#);
        write_event(&mut out, "DELETED", br#"{"a":2}"#);
        let events = parse_chunk(&out);
        assert_eq!(events.len(), 2);
        assert_eq!(events[1]["type"], "DELETED");
        assert_eq!(events[1]["object"]["a"], 2);
    }

    #[test]
    fn zero_and_empty_resource_versions_start_with_the_current_state() {
        assert_eq!(parse_start(None).unwrap(), Start::Now);
        assert_eq!(parse_start(Some("0")).unwrap(), Start::Now);
        assert_eq!(parse_start(Some("42")).unwrap(), Start::After(42));
        assert_eq!(parse_start(Some("x")).unwrap_err().code, 400);
    }
}
