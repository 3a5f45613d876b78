//! What the API server does to an object on its way into storage, as pure functions over JSON:
//! system metadata on create (uid, creationTimestamp, generation), per-kind defaults (a new
//! Pod is `Pending` with the scheduler's defaults), the split between the main resource and the
//! status subresource on update, immutable system fields, the generation bump on spec changes,
//! the finalizer rules, and the Pod update restrictions.

use serde_json::{Map, Value, json};

use super::kinds::{Behavior, ResourceKind};
use super::status::{ApiError, Cause};

/// Metadata the server owns: kept from the stored object on every update.
const SYSTEM_METADATA: &[&str] = &[
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "name",
    "namespace",
    "selfLink",
];

/// Pod spec fields an update may change (Kubernetes' pod update validation).
const MUTABLE_POD_SPEC: &[&str] = &[
    "activeDeadlineSeconds",
    "tolerations",
    "schedulingGates",
    "terminationGracePeriodSeconds",
];

/// Sets `metadata.<field>`, creating `metadata` when absent (no-op on a non-object).
pub(crate) fn set_meta(object: &mut Value, field: &str, value: Value) {
    let Value::Object(root) = object else { return };
    let metadata = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    if let Value::Object(map) = metadata {
        map.insert(field.to_owned(), value);
    }
}

/// Removes `metadata.<field>`.
pub(crate) fn remove_meta(object: &mut Value, field: &str) {
    if let Some(Value::Object(map)) = object.get_mut("metadata") {
        map.remove(field);
    }
}

pub(crate) fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

pub(crate) fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// Checks that `apiVersion` and `kind`, when present, are the resource's.
pub(crate) fn check_type(kind: &ResourceKind, object: &Value) -> Result<(), ApiError> {
    if !object.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    let expected = kind.api_version();
    if let Some(api_version) = object.get("apiVersion").and_then(Value::as_str)
        && api_version != expected
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({expected})"
        )));
    }
    if let Some(found) = object.get("kind").and_then(Value::as_str)
        && found != kind.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({found}) does not match the expected kind ({})",
            kind.kind
        )));
    }
    Ok(())
}

/// A DNS-1123 subdomain problem with `name`, if any (the rule for most object names).
pub(crate) fn name_problem(name: &str) -> Option<String> {
    if name.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    let valid = name.split('.').all(|label| {
        !label.is_empty()
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    });
    (!valid).then(|| {
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into()
    })
}

/// Stamps a new object: identity, system metadata, and the kind's defaults.
pub(crate) fn prepare_create(
    kind: &ResourceKind,
    object: &mut Value,
    namespace: &str,
    name: &str,
    uid: &str,
    now: &str,
) {
    let Value::Object(root) = object else { return };
    // Events of both APIs are stored in the core form.
    let api_version = if kind.behavior == Behavior::EventsV1 {
        "v1".to_owned()
    } else {
        kind.api_version()
    };
    root.insert("apiVersion".into(), json!(api_version));
    root.insert("kind".into(), json!(kind.kind));
    set_meta(object, "name", json!(name));
    if kind.namespaced {
        set_meta(object, "namespace", json!(namespace));
    } else {
        remove_meta(object, "namespace");
    }
    set_meta(object, "uid", json!(uid));
    set_meta(object, "creationTimestamp", json!(now));
    set_meta(object, "generation", json!(1));
    for field in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        remove_meta(object, field);
    }
    match kind.behavior {
        Behavior::Pod => default_pod(object),
        Behavior::Namespace => {
            if let Value::Object(root) = object {
                root.insert("status".into(), json!({ "phase": "Active" }));
            }
        }
        Behavior::Custom(_) if kind.status_subresource => {
            if let Value::Object(map) = object {
                map.remove("status");
            }
        }
        _ => {}
    }
}

/// A new Pod: the scheduler-relevant defaults and a fresh `Pending` status (the server ignores a
/// status sent on create).
fn default_pod(pod: &mut Value) {
    let Value::Object(root) = pod else { return };
    let spec = root.entry("spec").or_insert_with(|| json!({}));
    if let Value::Object(spec) = spec {
        for (field, default) in [
            ("schedulerName", json!("default-scheduler")),
            ("restartPolicy", json!("Always")),
            ("dnsPolicy", json!("ClusterFirst")),
            ("terminationGracePeriodSeconds", json!(30)),
            ("priority", json!(0)),
        ] {
            spec.entry(field).or_insert(default);
        }
    }
    root.insert("status".into(), json!({ "phase": "Pending" }));
}

/// The object to store for an update of `old` to `new` through the main resource
/// (`subresource` None) or `status`. Status and spec are separated when the kind has a status
/// subresource; system metadata always comes from `old`. `keep_managed_fields` keeps the
/// candidate's `managedFields` (server-side apply computed them).
pub(crate) fn merge_update(
    kind: &ResourceKind,
    old: &Value,
    new: Value,
    subresource: Option<&str>,
    keep_managed_fields: bool,
) -> Value {
    let mut merged = match subresource {
        // `new` is mostly `old` with a changed status (a status patch is applied to the stored
        // object): then it is the answer as it is, without a copy of `old`.
        Some("status") if !keep_managed_fields && all_but_status_equal(old, &new) => return new,
        Some("status") => {
            let mut merged = old.clone();
            if let Value::Object(map) = &mut merged {
                match new.get("status") {
                    Some(status) => {
                        map.insert("status".into(), status.clone());
                    }
                    None => {
                        map.remove("status");
                    }
                }
            }
            if keep_managed_fields && let Some(fields) = new.pointer("/metadata/managedFields") {
                set_meta(&mut merged, "managedFields", fields.clone());
            }
            return merged;
        }
        _ => new,
    };
    if kind.status_subresource
        && let Value::Object(map) = &mut merged
    {
        match old.get("status") {
            Some(status) => {
                map.insert("status".into(), status.clone());
            }
            None => {
                map.remove("status");
            }
        }
    }
    if let Value::Object(map) = &mut merged {
        for field in ["apiVersion", "kind"] {
            if let Some(value) = old.get(field) {
                map.insert(field.to_owned(), value.clone());
            }
        }
    }
    let old_meta = old.get("metadata").and_then(Value::as_object);
    let mut preserved: Vec<&str> = SYSTEM_METADATA.to_vec();
    if !keep_managed_fields {
        preserved.push("managedFields");
    }
    for field in preserved {
        match old_meta.and_then(|m| m.get(field)) {
            Some(value) => set_meta(&mut merged, field, value.clone()),
            None => remove_meta(&mut merged, field),
        }
    }
    merged
}

/// Everything but metadata and status: a change here bumps `metadata.generation`.
fn spec_part(object: &Value) -> Vec<(&String, &Value)> {
    object
        .as_object()
        .map(|map| {
            map.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether two objects agree on everything but their status.
fn all_but_status_equal(a: &Value, b: &Value) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            let rest = |map: &'_ serde_json::Map<String, Value>| {
                map.len() - usize::from(map.contains_key("status"))
            };
            rest(a) == rest(b)
                && a.iter()
                    .filter(|(k, _)| k.as_str() != "status")
                    .all(|(k, v)| b.get(k) == Some(v))
        }
        _ => false,
    }
}

/// Bumps `metadata.generation` when the spec part changed.
pub(crate) fn bump_generation(old: &Value, new: &mut Value) {
    if spec_part(old) != spec_part(new) {
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        set_meta(new, "generation", json!(generation + 1));
    }
}

/// Rules every update obeys, whatever the kind.
pub(crate) fn check_update(kind: &ResourceKind, old: &Value, new: &Value) -> Result<(), ApiError> {
    let name = meta_str(old, "name").unwrap_or_default();
    if is_deleting(old) {
        let before = finalizers(old);
        if finalizers(new).iter().any(|f| !before.contains(f)) {
            return Err(ApiError::invalid(
                kind,
                name,
                &[Cause {
                    reason: "FieldValueForbidden",
                    field: "metadata.finalizers".into(),
                    message:
                        "Forbidden: no new finalizers can be added if the object is being deleted"
                            .into(),
                }],
            ));
        }
    }
    if kind.behavior == Behavior::Pod
        && old.get("spec") != new.get("spec")
        && masked_pod_spec(old) != masked_pod_spec(new)
    {
        return Err(ApiError::invalid(
            kind,
            name,
            &[Cause {
                reason: "FieldValueForbidden",
                field: "spec".into(),
                message: "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)".into(),
            }],
        ));
    }
    Ok(())
}

/// A pod spec without the fields an update may change.
fn masked_pod_spec(pod: &Value) -> Value {
    let mut spec = pod.get("spec").cloned().unwrap_or(Value::Null);
    if let Value::Object(map) = &mut spec {
        for field in MUTABLE_POD_SPEC {
            map.remove(*field);
        }
        for list in ["containers", "initContainers"] {
            if let Some(Value::Array(containers)) = map.get_mut(list) {
                for container in containers {
                    if let Value::Object(c) = container {
                        c.remove("image");
                    }
                }
            }
        }
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulator::kinds::Kinds;

    fn kind(plural: &str) -> ResourceKind {
        let kinds = Kinds::new();
        kinds.get(kinds.find("", "v1", plural).unwrap()).clone()
    }

    #[test]
    fn updates_through_the_main_resource_keep_the_stored_status() {
        let node = kind("nodes");
        let old = json!({ "metadata": { "name": "n", "uid": "u" }, "spec": {}, "status": { "phase": "Running" } });
        let new = json!({ "metadata": { "name": "n", "uid": "other" }, "spec": { "unschedulable": true }, "status": { "phase": "Gone" } });
        let merged = merge_update(&node, &old, new, None, false);
        assert_eq!(merged["status"]["phase"], "Running");
        assert_eq!(merged["metadata"]["uid"], "u");
        assert_eq!(merged["spec"]["unschedulable"], true);
    }

    #[test]
    fn status_updates_change_only_the_status() {
        let node = kind("nodes");
        let old = json!({ "metadata": { "name": "n", "labels": { "a": "1" } }, "spec": {} });
        let new = json!({ "metadata": { "name": "n", "labels": {} }, "spec": { "unschedulable": true }, "status": { "phase": "Running" } });
        let merged = merge_update(&node, &old, new, Some("status"), false);
        assert_eq!(merged["metadata"]["labels"]["a"], "1");
        assert!(merged["spec"].get("unschedulable").is_none());
        assert_eq!(merged["status"]["phase"], "Running");
    }

    #[test]
    fn a_status_update_that_changes_only_the_status_is_taken_as_it_is() {
        let node = kind("nodes");
        let old = json!({ "metadata": { "name": "n" }, "spec": { "a": 1 }, "status": { "phase": "Pending" } });
        let new = json!({ "metadata": { "name": "n" }, "spec": { "a": 1 }, "status": { "phase": "Running" } });
        assert_eq!(
            merge_update(&node, &old, new.clone(), Some("status"), false),
            new
        );
        let cleared = json!({ "metadata": { "name": "n" }, "spec": { "a": 1 } });
        let merged = merge_update(&node, &old, cleared, Some("status"), false);
        assert!(merged.get("status").is_none());
        assert_eq!(merged["spec"]["a"], 1);
        // One more field than `old` outside the status is not taken.
        let extra =
            json!({ "metadata": { "name": "n" }, "spec": { "a": 1 }, "extra": true, "status": {} });
        assert!(
            merge_update(&node, &old, extra, Some("status"), false)
                .get("extra")
                .is_none()
        );
    }

    #[test]
    fn generation_moves_only_with_the_spec() {
        let old = json!({ "metadata": { "generation": 3 }, "spec": { "a": 1 }, "status": {} });
        let mut same = json!({ "metadata": { "generation": 3, "labels": { "x": "y" } }, "spec": { "a": 1 }, "status": { "b": 2 } });
        bump_generation(&old, &mut same);
        assert_eq!(same["metadata"]["generation"], 3);
        let mut changed = json!({ "metadata": { "generation": 3 }, "spec": { "a": 2 } });
        bump_generation(&old, &mut changed);
        assert_eq!(changed["metadata"]["generation"], 4);
    }

    #[test]
    fn pods_cannot_be_moved_to_another_node_by_update() {
        let pod = kind("pods");
        let old = json!({ "metadata": { "name": "p" }, "spec": { "nodeName": "a", "containers": [{ "name": "c", "image": "v1" }] } });
        let image = json!({ "metadata": { "name": "p" }, "spec": { "nodeName": "a", "containers": [{ "name": "c", "image": "v2" }] } });
        assert!(check_update(&pod, &old, &image).is_ok());
        let moved = json!({ "metadata": { "name": "p" }, "spec": { "nodeName": "b", "containers": [{ "name": "c", "image": "v1" }] } });
        assert_eq!(check_update(&pod, &old, &moved).unwrap_err().code, 422);
    }

    #[test]
    fn finalizers_cannot_be_added_while_deleting() {
        let node = kind("nodes");
        let old = json!({ "metadata": { "name": "n", "deletionTimestamp": "2025-01-01T00:00:00Z", "finalizers": ["a"] } });
        let new = json!({ "metadata": { "name": "n", "finalizers": ["a", "b"] } });
        assert_eq!(check_update(&node, &old, &new).unwrap_err().code, 422);
    }

    #[test]
    fn names_must_be_dns_subdomains() {
        assert!(name_problem("web-1.example").is_none());
        assert!(name_problem("Web").is_some());
        assert!(name_problem("-web").is_some());
        assert!(name_problem("").is_some());
    }
}
