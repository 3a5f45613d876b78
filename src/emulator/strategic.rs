//! Strategic merge patch (`application/strategic-merge-patch+json`) for built-in kinds, the
//! subset kubectl and controllers use.
//!
//! Maps merge recursively and `null` deletes a key, as in a JSON merge patch. Lists follow the
//! patch strategy of their field in the Kubernetes Go types ([`list_strategy`]): merged by a key
//! (`status.conditions` by `type`, `spec.containers` by `name`, ...), merged as a set of
//! primitives (`metadata.finalizers`), or replaced whole (everything else, including
//! `spec.taints` and `spec.tolerations`, which carry no patch strategy in Kubernetes).
//!
//! Directives: `$patch: replace` and `$patch: delete` on maps and list items,
//! `$deleteFromPrimitiveList/<field>`, `$retainKeys`, and `$setElementOrder/<field>` (the merged
//! list is reordered to it; items it does not name keep their place at the end). Custom
//! resources reject strategic merge patches with 415, as the real server does.

use serde_json::{Map, Value};

use super::kinds::Behavior;
use super::status::ApiError;

/// How a list field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListStrategy {
    Atomic,
    /// Items are maps identified by this key.
    MergeByKey(&'static str),
    /// Items are primitives merged as a set.
    MergePrimitives,
}

/// Pod spec lists with a merge key (paths relative to a pod spec).
const POD_SPEC_LISTS: &[(&str, ListStrategy)] = &[
    ("containers", ListStrategy::MergeByKey("name")),
    ("initContainers", ListStrategy::MergeByKey("name")),
    ("ephemeralContainers", ListStrategy::MergeByKey("name")),
    (
        "containers.ports",
        ListStrategy::MergeByKey("containerPort"),
    ),
    (
        "initContainers.ports",
        ListStrategy::MergeByKey("containerPort"),
    ),
    ("containers.env", ListStrategy::MergeByKey("name")),
    ("initContainers.env", ListStrategy::MergeByKey("name")),
    (
        "containers.volumeMounts",
        ListStrategy::MergeByKey("mountPath"),
    ),
    (
        "initContainers.volumeMounts",
        ListStrategy::MergeByKey("mountPath"),
    ),
    (
        "containers.volumeDevices",
        ListStrategy::MergeByKey("devicePath"),
    ),
    ("volumes", ListStrategy::MergeByKey("name")),
    ("imagePullSecrets", ListStrategy::MergeByKey("name")),
    ("hostAliases", ListStrategy::MergeByKey("ip")),
    ("schedulingGates", ListStrategy::MergeByKey("name")),
    ("resourceClaims", ListStrategy::MergeByKey("name")),
];

/// The patch strategy of the list at `path` (field names from the root, dot-joined).
pub(crate) fn list_strategy(behavior: Behavior, at: &str) -> ListStrategy {
    match at {
        "metadata.finalizers" => return ListStrategy::MergePrimitives,
        "metadata.ownerReferences" => return ListStrategy::MergeByKey("uid"),
        "status.conditions" => {
            return if matches!(behavior, Behavior::Custom(_)) {
                ListStrategy::Atomic
            } else {
                ListStrategy::MergeByKey("type")
            };
        }
        _ => {}
    }
    let pod_spec = match behavior {
        Behavior::Pod => at.strip_prefix("spec."),
        Behavior::Generic => at.strip_prefix("spec.template.spec."),
        _ => None,
    };
    if let Some(relative) = pod_spec {
        return POD_SPEC_LISTS
            .iter()
            .find(|(p, _)| *p == relative)
            .map_or(ListStrategy::Atomic, |(_, s)| *s);
    }
    match (behavior, at) {
        (Behavior::Pod, "status.podIPs" | "status.hostIPs") => ListStrategy::MergeByKey("ip"),
        (Behavior::Node, "status.addresses") => ListStrategy::MergeByKey("type"),
        (Behavior::Node, "spec.podCIDRs") => ListStrategy::MergePrimitives,
        (Behavior::Generic, "spec.ports") => ListStrategy::MergeByKey("port"),
        _ => ListStrategy::Atomic,
    }
}

/// Why a strategic merge patch could not be applied: a 400 `BadRequest` for the client that
/// sent it (the `Status` reason is its category).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PatchError {
    #[error("a strategic merge patch must be a JSON object")]
    NotAnObject,
    #[error("unknown patch directive {directive:?} at {at}")]
    UnknownDirective { directive: String, at: String },
    #[error("{at}: list items must be objects with key {merge_key}")]
    ItemNotAnObject { at: String, merge_key: &'static str },
    #[error("{at}: an item is missing its merge key {merge_key}")]
    MissingMergeKey { at: String, merge_key: &'static str },
}

impl From<PatchError> for ApiError {
    fn from(error: PatchError) -> Self {
        ApiError::bad_request(error.to_string())
    }
}

/// Applies a strategic merge `patch` to `target`.
pub(crate) fn apply(
    behavior: Behavior,
    target: &mut Value,
    patch: &Value,
) -> Result<(), PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::NotAnObject);
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(map) = target {
        merge_map(behavior, map, patch, "")?;
    }
    Ok(())
}

fn join(at: &str, field: &str) -> String {
    if at.is_empty() {
        field.to_owned()
    } else {
        format!("{at}.{field}")
    }
}

fn merge_map(
    behavior: Behavior,
    target: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    at: &str,
) -> Result<(), PatchError> {
    if let Some(directive) = patch.get("$patch").and_then(Value::as_str) {
        match directive {
            "replace" => {
                *target = strip(patch);
                return Ok(());
            }
            "delete" => {
                target.clear();
                return Ok(());
            }
            "merge" => {}
            other => {
                return Err(PatchError::UnknownDirective {
                    directive: other.to_owned(),
                    at: at.to_owned(),
                });
            }
        }
    }
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let remove = value.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(items)) = target.get_mut(field) {
                items.retain(|item| !remove.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        let child_path = join(at, key);
        match value {
            Value::Null => {
                target.remove(key);
            }
            Value::Object(nested) => {
                if nested.get("$patch").and_then(Value::as_str) == Some("delete") {
                    target.remove(key);
                    continue;
                }
                if let Some(Value::Object(child)) = target.get_mut(key) {
                    merge_map(behavior, child, nested, &child_path)?;
                } else {
                    let mut fresh = Map::new();
                    merge_map(behavior, &mut fresh, nested, &child_path)?;
                    target.insert(key.clone(), Value::Object(fresh));
                }
            }
            Value::Array(items) => {
                let strategy = list_strategy(behavior, &child_path);
                let existing = match target.remove(key) {
                    Some(Value::Array(existing)) => existing,
                    _ => Vec::new(),
                };
                let mut merged = merge_list(behavior, existing, items, strategy, &child_path)?;
                if let Some(Value::Array(order)) = patch.get(&format!("$setElementOrder/{key}")) {
                    reorder(&mut merged, order, strategy);
                }
                target.insert(key.clone(), Value::Array(merged));
            }
            scalar => {
                target.insert(key.clone(), scalar.clone());
            }
        }
    }
    if let Some(Value::Array(retain)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        target.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(())
}

fn merge_list(
    behavior: Behavior,
    mut existing: Vec<Value>,
    patch: &[Value],
    strategy: ListStrategy,
    at: &str,
) -> Result<Vec<Value>, PatchError> {
    let replace = patch
        .iter()
        .any(|item| item.get("$patch").and_then(Value::as_str) == Some("replace"));
    if replace {
        return Ok(patch
            .iter()
            .filter(|item| item.get("$patch").is_none())
            .map(strip_value)
            .collect());
    }
    match strategy {
        ListStrategy::Atomic => Ok(patch.iter().map(strip_value).collect()),
        ListStrategy::MergePrimitives => {
            for item in patch {
                if !existing.contains(item) {
                    existing.push(item.clone());
                }
            }
            Ok(existing)
        }
        ListStrategy::MergeByKey(merge_key) => {
            for item in patch {
                let Value::Object(item_patch) = item else {
                    return Err(PatchError::ItemNotAnObject {
                        at: at.to_owned(),
                        merge_key,
                    });
                };
                let Some(key_value) = item_patch.get(merge_key) else {
                    return Err(PatchError::MissingMergeKey {
                        at: at.to_owned(),
                        merge_key,
                    });
                };
                let position = existing
                    .iter()
                    .position(|e| e.get(merge_key) == Some(key_value));
                let delete = item_patch.get("$patch").and_then(Value::as_str) == Some("delete");
                match (position, delete) {
                    (Some(index), true) => {
                        existing.remove(index);
                    }
                    (None, true) => {}
                    (Some(index), false) => {
                        if let Some(Value::Object(current)) = existing.get_mut(index) {
                            merge_map(behavior, current, item_patch, at)?;
                        }
                    }
                    (None, false) => {
                        let mut fresh = Map::new();
                        merge_map(behavior, &mut fresh, item_patch, at)?;
                        existing.push(Value::Object(fresh));
                    }
                }
            }
            Ok(existing)
        }
    }
}

fn reorder(items: &mut [Value], order: &[Value], strategy: ListStrategy) {
    let rank = |item: &Value| -> usize {
        let position = match strategy {
            ListStrategy::MergeByKey(key) => order
                .iter()
                .position(|o| o.get(key).is_some() && o.get(key) == item.get(key)),
            _ => order.iter().position(|o| o == item),
        };
        position.unwrap_or(usize::MAX)
    };
    items.sort_by_key(rank);
}

fn strip(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| (k.clone(), strip_value(v)))
        .collect()
}

fn strip_value(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(strip(map)),
        Value::Array(items) => Value::Array(items.iter().map(strip_value).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn node_conditions_merge_by_type_and_taints_are_replaced() {
        let mut node = json!({
            "spec": { "taints": [{ "key": "a", "effect": "NoSchedule" }] },
            "status": { "conditions": [
                { "type": "Ready", "status": "False" },
                { "type": "MemoryPressure", "status": "False" },
            ] },
        });
        let patch = json!({
            "spec": { "taints": [{ "key": "b", "effect": "NoExecute" }] },
            "status": { "conditions": [{ "type": "Ready", "status": "True" }] },
        });
        apply(Behavior::Node, &mut node, &patch).unwrap();
        assert_eq!(
            node["spec"]["taints"],
            json!([{ "key": "b", "effect": "NoExecute" }])
        );
        assert_eq!(
            node["status"]["conditions"][0],
            json!({ "type": "Ready", "status": "True" })
        );
        assert_eq!(node["status"]["conditions"][1]["type"], "MemoryPressure");
    }

    #[test]
    fn finalizers_merge_as_a_set_and_can_be_deleted_by_directive() {
        let mut pod = json!({ "metadata": { "finalizers": ["a", "b"] } });
        apply(
            Behavior::Pod,
            &mut pod,
            &json!({ "metadata": { "finalizers": ["b", "c"] } }),
        )
        .unwrap();
        assert_eq!(pod["metadata"]["finalizers"], json!(["a", "b", "c"]));
        apply(
            Behavior::Pod,
            &mut pod,
            &json!({ "metadata": { "$deleteFromPrimitiveList/finalizers": ["a"] } }),
        )
        .unwrap();
        assert_eq!(pod["metadata"]["finalizers"], json!(["b", "c"]));
    }

    #[test]
    fn containers_merge_by_name_and_items_can_be_deleted() {
        let mut pod = json!({ "spec": { "containers": [
            { "name": "app", "image": "v1" }, { "name": "sidecar", "image": "s1" },
        ] } });
        let patch = json!({ "spec": { "containers": [
            { "name": "app", "image": "v2" }, { "name": "sidecar", "$patch": "delete" },
        ] } });
        apply(Behavior::Pod, &mut pod, &patch).unwrap();
        assert_eq!(
            pod["spec"]["containers"],
            json!([{ "name": "app", "image": "v2" }])
        );
    }

    #[test]
    fn deployment_templates_use_the_pod_spec_strategies() {
        let mut deployment = json!({ "spec": { "template": { "spec": { "containers": [
            { "name": "app", "image": "v1" },
        ] } } } });
        let patch = json!({ "spec": { "template": { "spec": { "containers": [
            { "name": "log", "image": "l1" },
        ] } } } });
        apply(Behavior::Generic, &mut deployment, &patch).unwrap();
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn null_removes_labels_and_replace_directive_replaces_a_map() {
        let mut node = json!({ "metadata": { "labels": { "a": "1", "b": "2" } } });
        apply(
            Behavior::Node,
            &mut node,
            &json!({ "metadata": { "labels": { "a": null, "c": "3" } } }),
        )
        .unwrap();
        assert_eq!(node["metadata"]["labels"], json!({ "b": "2", "c": "3" }));
        apply(
            Behavior::Node,
            &mut node,
            &json!({ "metadata": { "labels": { "$patch": "replace", "z": "9" } } }),
        )
        .unwrap();
        assert_eq!(node["metadata"]["labels"], json!({ "z": "9" }));
    }

    #[test]
    fn set_element_order_reorders_the_merged_list() {
        let mut pod = json!({ "spec": { "containers": [{ "name": "a" }, { "name": "b" }] } });
        let patch = json!({ "spec": {
            "$setElementOrder/containers": [{ "name": "b" }, { "name": "a" }],
            "containers": [{ "name": "a", "image": "x" }],
        } });
        apply(Behavior::Pod, &mut pod, &patch).unwrap();
        assert_eq!(pod["spec"]["containers"][0]["name"], "b");
        assert_eq!(pod["spec"]["containers"][1]["image"], "x");
    }

    #[test]
    fn malformed_patches_are_refused_with_the_path_named() {
        let mut pod = json!({"spec": {"containers": [{"name": "app"}]}});
        let error = apply(Behavior::Pod, &mut pod, &json!([])).unwrap_err();
        assert_eq!(error, PatchError::NotAnObject);
        let error = apply(
            Behavior::Pod,
            &mut pod,
            &json!({"spec": {"containers": [{"image": "nginx"}]}}),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "spec.containers: an item is missing its merge key name"
        );
        let error = apply(
            Behavior::Pod,
            &mut pod,
            &json!({"metadata": {"$patch": "shuffle"}}),
        )
        .unwrap_err();
        assert!(
            matches!(error, PatchError::UnknownDirective { ref directive, .. } if directive == "shuffle"),
            "{error}"
        );
    }
}
