//! Server-side apply (`application/apply-patch+yaml`), the subset kube-rs `Patch::Apply` and
//! `kubectl apply --server-side` callers rely on.
//!
//! Each apply records the fields its manager set in `metadata.managedFields` (operation `Apply`,
//! `fieldsV1` format). The next apply by the same manager merges its configuration into the
//! live object and removes the fields it set before but no longer sets (unless another applier
//! also owns them). Setting a field another applier owns to a different value is a 409 conflict
//! naming the field and the owner, unless `force=true`, which takes the field over.
//!
//! Not modelled: ownership by non-apply writers (updates and patches do not record managed
//! fields, so they never conflict), and list-type annotations of CRD schemas (lists of custom
//! resources are atomic, as in an unannotated CRD). Lists of built-in kinds merge by the keys
//! of [`super::strategic::list_strategy`].

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde_json::{Map, Value, json};

use super::kinds::Behavior;
use super::strategic::{ListStrategy, list_strategy};

/// One step of a field path in `fieldsV1` notation: `f:name`, `k:{"type":"Ready"}`, `v:"x"`.
type Path = Vec<String>;

/// The fields a configuration sets: leaves, and list items identified by key or value.
pub(crate) type FieldSet = BTreeSet<Path>;

/// A field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApplyConflict {
    pub manager: String,
    pub field: String,
}

/// The fields of an applied configuration, ignoring `apiVersion`, `kind` and identity metadata.
pub(crate) fn fields_of(behavior: Behavior, config: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    if let Value::Object(map) = config {
        for (key, value) in map {
            if matches!(key.as_str(), "apiVersion" | "kind") {
                continue;
            }
            if key == "metadata" {
                if let Value::Object(meta) = value {
                    for (field, child) in meta {
                        if matches!(
                            field.as_str(),
                            "labels" | "annotations" | "finalizers" | "ownerReferences"
                        ) {
                            collect(
                                behavior,
                                child,
                                &mut vec!["f:metadata".into(), format!("f:{field}")],
                                "metadata",
                                field,
                                &mut out,
                            );
                        }
                    }
                }
                continue;
            }
            collect(
                behavior,
                value,
                &mut vec![format!("f:{key}")],
                "",
                key,
                &mut out,
            );
        }
    }
    out
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

fn collect(
    behavior: Behavior,
    value: &Value,
    prefix: &mut Path,
    parent: &str,
    field: &str,
    out: &mut FieldSet,
) {
    let here = join(parent, field);
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                prefix.push(format!("f:{key}"));
                collect(behavior, child, prefix, &here, key, out);
                prefix.pop();
            }
        }
        Value::Array(items) => match list_strategy(behavior, &here) {
            ListStrategy::MergeByKey(key) => {
                for item in items {
                    let Some(id) = item.get(key) else { continue };
                    prefix.push(format!("k:{}", json!({ key: id })));
                    out.insert(prefix.clone());
                    if let Value::Object(fields) = item {
                        for (name, child) in fields {
                            prefix.push(format!("f:{name}"));
                            collect(behavior, child, prefix, &here, name, out);
                            prefix.pop();
                        }
                    }
                    prefix.pop();
                }
            }
            ListStrategy::MergePrimitives => {
                for item in items {
                    prefix.push(format!("v:{item}"));
                    out.insert(prefix.clone());
                    prefix.pop();
                }
            }
            ListStrategy::Atomic => {
                out.insert(prefix.clone());
            }
        },
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// `fieldsV1` tree of a field set.
pub(crate) fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for (depth, step) in path.iter().enumerate() {
            let entry = node.entry(step.clone()).or_insert_with(|| json!({}));
            let Value::Object(child) = entry else { break };
            if depth + 1 == path.len()
                && set
                    .iter()
                    .any(|p| p.len() > path.len() && p.starts_with(path))
            {
                child.insert(".".into(), json!({}));
            }
            node = child;
        }
    }
    Value::Object(root)
}

/// The field set of a `fieldsV1` tree.
pub(crate) fn from_fields_v1(tree: &Value) -> FieldSet {
    fn walk(node: &Map<String, Value>, prefix: &mut Path, out: &mut FieldSet) {
        for (step, child) in node {
            if step == "." {
                out.insert(prefix.clone());
                continue;
            }
            prefix.push(step.clone());
            match child {
                Value::Object(map) if !map.is_empty() => walk(map, prefix, out),
                _ => {
                    out.insert(prefix.clone());
                }
            }
            prefix.pop();
        }
    }
    let mut out = FieldSet::new();
    if let Value::Object(map) = tree {
        walk(map, &mut Vec::new(), &mut out);
    }
    out
}

/// The value at a field path, if present.
fn lookup<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut node = object;
    for step in path {
        node = step_into(node, step)?;
    }
    Some(node)
}

fn step_into<'a>(node: &'a Value, step: &str) -> Option<&'a Value> {
    if let Some(field) = step.strip_prefix("f:") {
        node.get(field)
    } else if let Some(key) = step.strip_prefix("k:") {
        let key: Map<String, Value> = serde_json::from_str(key).ok()?;
        node.as_array()?
            .iter()
            .find(|item| key.iter().all(|(k, v)| item.get(k) == Some(v)))
    } else if let Some(value) = step.strip_prefix("v:") {
        let value: Value = serde_json::from_str(value).ok()?;
        node.as_array()?.iter().find(|item| **item == value)
    } else {
        None
    }
}

/// Removes the field at `path` (a leaf, a keyed item or a set value).
fn remove(object: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = object;
    for step in parents {
        let next = if let Some(field) = step.strip_prefix("f:") {
            node.get_mut(field)
        } else if let Some(key) = step.strip_prefix("k:") {
            let Ok(key) = serde_json::from_str::<Map<String, Value>>(key) else {
                return;
            };
            node.as_array_mut().and_then(|items| {
                items
                    .iter_mut()
                    .find(|item| key.iter().all(|(k, v)| item.get(k) == Some(v)))
            })
        } else {
            None
        };
        match next {
            Some(next) => node = next,
            None => return,
        }
    }
    if let Some(field) = last.strip_prefix("f:") {
        if let Value::Object(map) = node {
            map.remove(field);
        }
    } else if let Some(key) = last.strip_prefix("k:") {
        if let (Ok(key), Value::Array(items)) =
            (serde_json::from_str::<Map<String, Value>>(key), node)
        {
            items.retain(|item| !key.iter().all(|(k, v)| item.get(k) == Some(v)));
        }
    } else if let Some(value) = last.strip_prefix("v:")
        && let (Ok(value), Value::Array(items)) = (serde_json::from_str::<Value>(value), node)
    {
        items.retain(|item| *item != value);
    }
}

/// Deep-merges an applied configuration into the live object.
fn merge(behavior: Behavior, live: &mut Value, config: &Value, path: &str) {
    match (live, config) {
        (Value::Object(target), Value::Object(source)) => {
            for (key, value) in source {
                let child_path = join(path, key);
                match (target.get_mut(key), value) {
                    (Some(existing @ Value::Object(_)), Value::Object(_)) => {
                        merge(behavior, existing, value, &child_path);
                    }
                    (Some(Value::Array(existing)), Value::Array(items)) => {
                        match list_strategy(behavior, &child_path) {
                            ListStrategy::MergeByKey(merge_key) => {
                                for item in items {
                                    let found = existing.iter_mut().find(|e| {
                                        e.get(merge_key).is_some()
                                            && e.get(merge_key) == item.get(merge_key)
                                    });
                                    match found {
                                        Some(current) => {
                                            merge(behavior, current, item, &child_path);
                                        }
                                        None => existing.push(item.clone()),
                                    }
                                }
                            }
                            ListStrategy::MergePrimitives => {
                                for item in items {
                                    if !existing.contains(item) {
                                        existing.push(item.clone());
                                    }
                                }
                            }
                            ListStrategy::Atomic => existing.clone_from(items),
                        }
                    }
                    _ => {
                        target.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (target, source) => *target = source.clone(),
    }
}

/// Applies `config` for `manager` to `live` (an empty object when creating), updating
/// `metadata.managedFields`. `timestamp` is recorded in the manager's entry.
pub(crate) fn apply(
    behavior: Behavior,
    live: &mut Value,
    config: &Value,
    manager: &str,
    force: bool,
    subresource: Option<&str>,
    timestamp: &str,
) -> Result<(), Vec<ApplyConflict>> {
    let new_fields = fields_of(behavior, config);
    let mut entries: Vec<Value> = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let is_apply = |e: &Value| e.get("operation").and_then(Value::as_str) == Some("Apply");
    let same_subresource = |e: &Value| e.get("subresource").and_then(Value::as_str) == subresource;
    let mut previous = FieldSet::new();
    let mut others: Vec<(String, FieldSet, usize)> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        if !is_apply(entry) {
            continue;
        }
        let fields = from_fields_v1(entry.get("fieldsV1").unwrap_or(&Value::Null));
        let owner = entry
            .get("manager")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if owner == manager && same_subresource(entry) {
            previous = fields;
        } else {
            others.push((owner.to_owned(), fields, index));
        }
    }
    let mut conflicts = Vec::new();
    for path in &new_fields {
        for (owner, fields, _) in &others {
            if fields.contains(path) && lookup(live, path) != lookup(config, path) {
                conflicts.push(ApplyConflict {
                    manager: owner.clone(),
                    field: readable(path),
                });
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    for path in previous.difference(&new_fields) {
        if !others.iter().any(|(_, fields, _)| fields.contains(path)) {
            remove(live, path);
        }
    }
    merge(behavior, live, config, "");
    // A forced apply takes the fields over from their previous owners.
    for (_, fields, index) in &mut others {
        let before = fields.len();
        fields.retain(|path| !new_fields.contains(path));
        if fields.len() != before
            && let Some(entry) = entries.get_mut(*index)
        {
            entry["fieldsV1"] = to_fields_v1(fields);
        }
    }
    entries.retain(|e| {
        !(is_apply(e)
            && e.get("manager").and_then(Value::as_str) == Some(manager)
            && same_subresource(e))
    });
    let api_version = config.get("apiVersion").cloned().unwrap_or(Value::Null);
    let mut entry = json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": timestamp,
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(&new_fields),
    });
    if let Some(subresource) = subresource {
        entry["subresource"] = json!(subresource);
    }
    entries.push(entry);
    if let Some(metadata) = live.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.insert("managedFields".into(), Value::Array(entries));
    }
    Ok(())
}

/// `.spec.replicas` or `.status.conditions[type="Ready"].status`, for conflict messages.
fn readable(path: &[String]) -> String {
    let mut out = String::new();
    for step in path {
        if let Some(field) = step.strip_prefix("f:") {
            out.push('.');
            out.push_str(field);
        } else if let Some(key) = step.strip_prefix("k:") {
            if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(key) {
                let parts: Vec<String> = map.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let _ = write!(out, "[{}]", parts.join(","));
            }
        } else if let Some(value) = step.strip_prefix("v:") {
            let _ = write!(out, "[={value}]");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2025-01-01T00:00:00Z";

    #[test]
    fn fields_a_manager_stops_applying_are_removed() {
        let mut live = json!({ "metadata": { "name": "x" } });
        let first = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "x", "labels": { "a": "1", "b": "2" } }, "data": { "k": "v" } });
        apply(Behavior::Generic, &mut live, &first, "me", false, None, NOW).unwrap();
        assert_eq!(live["metadata"]["labels"], json!({ "a": "1", "b": "2" }));
        let second = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "x", "labels": { "a": "1" } } });
        apply(
            Behavior::Generic,
            &mut live,
            &second,
            "me",
            false,
            None,
            NOW,
        )
        .unwrap();
        assert_eq!(live["metadata"]["labels"], json!({ "a": "1" }));
        assert!(live.get("data").and_then(|d| d.get("k")).is_none());
    }

    #[test]
    fn a_different_value_for_another_appliers_field_conflicts_unless_forced() {
        let mut live = json!({ "metadata": { "name": "x" } });
        let mine = json!({ "data": { "k": "v" } });
        apply(Behavior::Generic, &mut live, &mine, "a", false, None, NOW).unwrap();
        let theirs = json!({ "data": { "k": "w" } });
        let conflicts =
            apply(Behavior::Generic, &mut live, &theirs, "b", false, None, NOW).unwrap_err();
        assert_eq!(
            conflicts,
            vec![ApplyConflict {
                manager: "a".into(),
                field: ".data.k".into()
            }]
        );
        apply(Behavior::Generic, &mut live, &theirs, "b", true, None, NOW).unwrap();
        assert_eq!(live["data"]["k"], "w");
        // The field moved to b: a no longer owns it.
        let entries = live["metadata"]["managedFields"].as_array().unwrap();
        let a = entries.iter().find(|e| e["manager"] == "a").unwrap();
        assert!(from_fields_v1(&a["fieldsV1"]).is_empty());
    }

    #[test]
    fn keyed_list_items_merge_and_round_trip_through_fields_v1() {
        let config = json!({ "status": { "conditions": [{ "type": "Ready", "status": "True" }] } });
        let set = fields_of(Behavior::Node, &config);
        assert_eq!(from_fields_v1(&to_fields_v1(&set)), set);
        let mut live = json!({ "metadata": {}, "status": { "conditions": [{ "type": "DiskPressure", "status": "False" }] } });
        apply(
            Behavior::Node,
            &mut live,
            &config,
            "kubelet",
            false,
            Some("status"),
            NOW,
        )
        .unwrap();
        assert_eq!(live["status"]["conditions"].as_array().unwrap().len(), 2);
    }
}
