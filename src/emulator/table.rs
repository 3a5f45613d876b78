//! `meta.k8s.io/v1` Table responses, which `kubectl get` asks for (`Accept: ...;as=Table`):
//! server-side columns per kind (the everyday columns of the built-in printers, and the
//! `additionalPrinterColumns` of our CRDs, evaluated with a `JSONPath` subset), with the full object
//! in each row so `-A`, `--show-labels` and `-L` work.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt as _;
use serde_json::{Value, json};

use super::api::Shared;
use super::body::EmulatorBody;
use super::kinds::{Behavior, KindId, ResourceKind};
use super::store::StoredObject;

/// One column: header, type, and how to compute the cell.
struct Column {
    name: String,
    type_: String,
    priority: i64,
    cell: Cell,
}

enum Cell {
    Name,
    Age,
    Path(String),
    PodReady,
    PodStatus,
    PodRestarts,
    NodeStatus,
    Holder,
}

fn column(name: &str, cell: Cell) -> Column {
    Column {
        name: name.to_owned(),
        type_: "string".to_owned(),
        priority: 0,
        cell,
    }
}

fn columns(kind: &ResourceKind) -> Vec<Column> {
    let path = |p: &str| Cell::Path(p.to_owned());
    let mut out = vec![column("Name", Cell::Name)];
    match kind.behavior {
        Behavior::Pod => {
            out.push(column("Ready", Cell::PodReady));
            out.push(column("Status", Cell::PodStatus));
            out.push(column("Restarts", Cell::PodRestarts));
            out.push(column("Age", Cell::Age));
            let mut ip = column("IP", path(".status.podIP"));
            ip.priority = 1;
            out.push(ip);
            let mut node = column("Node", path(".spec.nodeName"));
            node.priority = 1;
            out.push(node);
        }
        Behavior::Node => {
            out.push(column("Status", Cell::NodeStatus));
            out.push(column("Age", Cell::Age));
            out.push(column("Version", path(".status.nodeInfo.kubeletVersion")));
        }
        Behavior::Namespace => {
            out.push(column("Status", path(".status.phase")));
            out.push(column("Age", Cell::Age));
        }
        Behavior::CoreEvent | Behavior::EventsV1 => {
            out.push(column("Type", path(".type")));
            out.push(column("Reason", path(".reason")));
            out.push(column("Object", path(".involvedObject.name")));
            out.push(column("Message", path(".message")));
        }
        Behavior::PodDisruptionBudget => {
            out.push(column("Min Available", path(".spec.minAvailable")));
            out.push(column("Max Unavailable", path(".spec.maxUnavailable")));
            out.push(column(
                "Allowed Disruptions",
                path(".status.disruptionsAllowed"),
            ));
            out.push(column("Age", Cell::Age));
        }
        Behavior::Custom(_) => {
            for printer in &kind.printer_columns {
                let cell = if printer.type_ == "date" {
                    Cell::Path(printer.json_path.clone())
                } else {
                    path(&printer.json_path)
                };
                out.push(Column {
                    name: printer.name.clone(),
                    type_: printer.type_.clone(),
                    priority: printer.priority,
                    cell,
                });
            }
        }
        _ if kind.kind == "Lease" => {
            out.push(column("Holder", Cell::Holder));
            out.push(column("Age", Cell::Age));
        }
        _ => out.push(column("Age", Cell::Age)),
    }
    out
}

/// Kubernetes' short human duration (`45s`, `3m20s`, `5h`, `12d`).
pub(crate) fn human_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if d < 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
}

fn age(shared: &Shared, timestamp: Option<&str>) -> String {
    let Some(then) = timestamp.and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
        return "<unknown>".to_owned();
    };
    let now = (shared.config.clock)();
    human_duration(now.as_second() - then.as_second())
}

/// Evaluates the `JSONPath` subset of printer columns: `.a.b`, escaped dots (`.labels.a\.b/c`),
/// `[n]`, and `[?(@.field=="value")]` filters.
pub(crate) fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut node = object;
    let mut rest = path.trim_start_matches('{').trim_end_matches('}');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let mut name = String::new();
            let mut chars = after.char_indices().peekable();
            let mut consumed = after.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            name.push(escaped);
                        }
                    }
                    '.' | '[' => {
                        consumed = i;
                        break;
                    }
                    _ => name.push(c),
                }
            }
            node = node.get(&name)?;
            rest = &after[consumed..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            let inner = &after[..end];
            rest = &after[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, value) = filter.split_once("==")?;
                let value = value.trim().trim_matches('"').trim_matches('\'');
                node = node
                    .as_array()?
                    .iter()
                    .find(|item| item.get(field.trim()).and_then(Value::as_str) == Some(value))?;
            } else {
                node = node.get(inner.parse::<usize>().ok()?)?;
            }
        } else {
            return None;
        }
    }
    Some(node)
}

fn text(value: Option<&Value>) -> Value {
    match value {
        None | Some(Value::Null) => json!("<none>"),
        Some(Value::String(s)) => json!(s),
        Some(other) => json!(other.to_string()),
    }
}

fn cell(shared: &Shared, column: &Column, object: &Value) -> Value {
    let meta = |f: &str| {
        object
            .pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
    };
    match &column.cell {
        Cell::Name => json!(meta("name").unwrap_or_default()),
        Cell::Age => json!(age(shared, meta("creationTimestamp"))),
        Cell::Path(path) if column.type_ == "date" => {
            json!(age(shared, json_path(object, path).and_then(Value::as_str)))
        }
        Cell::Path(path) => text(json_path(object, path)),
        Cell::PodReady => {
            let total = object
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = object
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
            json!(format!("{ready}/{total}"))
        }
        Cell::PodStatus => {
            if object.pointer("/metadata/deletionTimestamp").is_some() {
                json!("Terminating")
            } else {
                text(object.pointer("/status/phase"))
            }
        }
        Cell::PodRestarts => {
            let restarts: i64 = object
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .map_or(0, |s| {
                    s.iter().filter_map(|c| c["restartCount"].as_i64()).sum()
                });
            json!(restarts)
        }
        Cell::NodeStatus => {
            let ready = json_path(object, ".status.conditions[?(@.type==\"Ready\")].status");
            let mut status = match ready.and_then(Value::as_str) {
                Some("True") => "Ready".to_owned(),
                Some(_) => "NotReady".to_owned(),
                None => "Unknown".to_owned(),
            };
            if object.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
                status.push_str(",SchedulingDisabled");
            }
            json!(status)
        }
        Cell::Holder => text(object.pointer("/spec/holderIdentity")),
    }
}

fn definitions(kind: &ResourceKind) -> Vec<Value> {
    columns(kind)
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.type_,
                "format": if matches!(c.cell, Cell::Name) { "name" } else { "" },
                "description": "",
                "priority": c.priority,
            })
        })
        .collect()
}

fn row(shared: &Shared, kind: &ResourceKind, object: &Value) -> Value {
    let cells: Vec<Value> = columns(kind)
        .iter()
        .map(|c| cell(shared, c, object))
        .collect();
    json!({ "cells": cells, "object": object })
}

fn table(kind: &ResourceKind, rows: &[Value], metadata: &Value) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions(kind),
        "rows": rows,
    })
}

/// A list as a Table.
pub(crate) fn list(
    shared: &Shared,
    kind: KindId,
    items: &[Arc<StoredObject>],
    rv: u64,
    next: Option<String>,
) -> Value {
    let resource = shared.kinds.get(kind);
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let value = serde_json::from_slice(&shared.render(kind, item)).unwrap_or(Value::Null);
            row(shared, resource, &value)
        })
        .collect();
    let mut metadata = json!({ "resourceVersion": rv.to_string() });
    if let Some(next) = next {
        metadata["continue"] = json!(next);
    }
    table(resource, &rows, &metadata)
}

/// One object as a Table.
pub(crate) fn single(shared: &Shared, kind: KindId, object: &Value) -> Value {
    let resource = shared.kinds.get(kind);
    table(resource, &[row(shared, resource, object)], &json!({}))
}

/// A watch whose event objects become one-row Tables.
pub(crate) fn watch_rows(shared: Arc<Shared>, kind: KindId, body: EmulatorBody) -> EmulatorBody {
    let EmulatorBody::Stream(stream) = body else {
        return body;
    };
    let mapped = stream.map(move |chunk| {
        let resource = shared.kinds.get(kind);
        let mut out = Vec::with_capacity(chunk.len() * 2);
        for line in chunk.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let Ok(mut event) = serde_json::from_slice::<Value>(line) else {
                continue;
            };
            let is_object = matches!(
                event["type"].as_str(),
                Some("ADDED" | "MODIFIED" | "DELETED")
            );
            if is_object {
                let object = event["object"].take();
                event["object"] = table(resource, &[row(&shared, resource, &object)], &json!({}));
            }
            out.extend_from_slice(event.to_string().as_bytes());
            out.push(b'\n');
        }
        Bytes::from(out)
    });
    EmulatorBody::Stream(mapped.boxed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printer_column_paths_follow_escapes_and_filters() {
        let object = json!({
            "metadata": { "labels": { "node.kubernetes.io/instance-type": "m5.large" } },
            "status": { "conditions": [{ "type": "Launched", "status": "True" }, { "type": "Ready", "status": "False" }] },
        });
        let instance = json_path(
            &object,
            ".metadata.labels.node\\.kubernetes\\.io/instance-type",
        );
        assert_eq!(instance, Some(&json!("m5.large")));
        let ready = json_path(&object, ".status.conditions[?(@.type==\"Ready\")].status");
        assert_eq!(ready, Some(&json!("False")));
        assert_eq!(
            json_path(&object, ".status.conditions[0].type"),
            Some(&json!("Launched"))
        );
        assert_eq!(json_path(&object, ".spec.missing"), None);
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_duration(45), "45s");
        assert_eq!(human_duration(200), "3m20s");
        assert_eq!(human_duration(4 * 3600), "4h");
        assert_eq!(human_duration(3 * 86_400 + 3600), "3d1h");
    }
}
