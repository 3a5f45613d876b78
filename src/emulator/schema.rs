//! Admission of our custom resources, in the API server's order: prune unknown fields (or reject
//! them under `fieldValidation=Strict`), apply schema defaults, validate against the generated
//! schema and rules with [`Validator`], then the transition rules that compare with the old
//! object (`self == oldSelf` in the CRDs), which the stateless validator cannot check.
//!
//! Violations become the 422 `Status` a real server returns, with one cause per field path.

use karpenter_core::apis::validation::{Kind as CrdKind, Outcome, Validator};
use serde_json::Value;

use super::kinds::ResourceKind;
use super::status::{ApiError, Cause};

/// How to treat unknown fields (`fieldValidation` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and return a `Warning` header (the server's default).
    Warn,
    /// Reject the request with 400.
    Strict,
}

impl FieldValidation {
    pub fn parse(text: Option<&str>) -> Result<Self, ApiError> {
        match text {
            None | Some("" | "Warn") => Ok(Self::Warn),
            Some("Ignore") => Ok(Self::Ignore),
            Some("Strict") => Ok(Self::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of Ignore, Warn or Strict, got {other:?}"
            ))),
        }
    }
}

/// Removes fields the schema does not declare; returns their paths.
pub(crate) fn prune(schema: &Value, value: &mut Value) -> Vec<String> {
    let mut removed = Vec::new();
    prune_at(schema, value, &Path::Root, &mut removed);
    removed
}

/// Where a pruned value sits, written out only for a field that is removed (rendering every
/// path of every admitted object was 2% of a 5,000-node scale-up).
enum Path<'a> {
    Root,
    /// `parent.name`, or `name` at the root.
    Field(&'a Path<'a>, &'a str),
    /// `parent[key]`: an entry of a map.
    Key(&'a Path<'a>, &'a str),
    /// `parent[index]`: an item of a list.
    Index(&'a Path<'a>, usize),
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Field(Path::Root, name) => f.write_str(name),
            Path::Field(parent, name) => write!(f, "{parent}.{name}"),
            Path::Key(parent, key) => write!(f, "{parent}[{key}]"),
            Path::Index(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

fn prune_at(schema: &Value, value: &mut Value, path: &Path<'_>, removed: &mut Vec<String>) {
    if matches!(path, Path::Field(Path::Root, "metadata"))
        || schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
    {
        return;
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            if let Some(additional) = additional {
                for (key, child) in map.iter_mut() {
                    prune_at(additional, child, &Path::Key(path, key), removed);
                }
                return;
            }
            let Some(properties) = properties else { return };
            map.retain(|key, _| {
                let known = properties.contains_key(key);
                if !known {
                    removed.push(Path::Field(path, key).to_string());
                }
                known
            });
            for (key, child) in map.iter_mut() {
                if let Some(child_schema) = properties.get(key) {
                    prune_at(child_schema, child, &Path::Field(path, key), removed);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter_mut().enumerate() {
                    prune_at(item_schema, item, &Path::Index(path, index), removed);
                }
            }
        }
        _ => {}
    }
}

/// Fills absent fields that have a schema `default`, recursively.
pub(crate) fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, child_schema) in properties {
                    if !map.contains_key(key)
                        && let Some(default) = child_schema.get("default")
                    {
                        map.insert(key.clone(), default.clone());
                    }
                    if let Some(child) = map.get_mut(key) {
                        apply_defaults(child_schema, child);
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                for child in map.values_mut() {
                    apply_defaults(additional, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply_defaults(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Prunes, defaults and validates a custom resource about to be stored; returns warnings.
pub(crate) fn admit(
    validator: &Validator,
    kind: &ResourceKind,
    crd_kind: CrdKind,
    object: &mut Value,
    old: Option<&Value>,
    field_validation: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut warnings = Vec::new();
    if let Some(schema) = &kind.schema {
        let removed = prune(schema, object);
        if !removed.is_empty() {
            match field_validation {
                FieldValidation::Strict => {
                    let listed: Vec<String> = removed
                        .iter()
                        .map(|p| format!("unknown field \"{p}\""))
                        .collect();
                    return Err(ApiError::bad_request(format!(
                        "strict decoding error: {}",
                        listed.join(", ")
                    )));
                }
                FieldValidation::Warn => {
                    warnings.extend(removed.iter().map(|p| format!("unknown field \"{p}\"")));
                }
                FieldValidation::Ignore => {}
            }
        }
        apply_defaults(schema, object);
    }
    let mut causes: Vec<Cause> = Vec::new();
    let outcome = match old {
        Some(old) => validator.validate_update(object, old),
        None => validator.validate(object),
    };
    if let Outcome::Checked { violations, .. } = outcome {
        causes.extend(violations.into_iter().map(|v| Cause {
            reason: if v.message == "Required value" {
                "FieldValueRequired"
            } else {
                "FieldValueInvalid"
            },
            field: v.path,
            message: v.message,
        }));
    }
    if let Some(old) = old {
        causes.extend(transition_violations(crd_kind, old, object));
    }
    if causes.is_empty() {
        Ok(warnings)
    } else {
        Err(ApiError::invalid(kind, &name, &causes))
    }
}

/// The CRDs' `oldSelf` rules.
fn transition_violations(kind: CrdKind, old: &Value, new: &Value) -> Vec<Cause> {
    let invalid = |field: &str, message: &str| Cause {
        reason: "FieldValueInvalid",
        field: field.to_owned(),
        message: format!("Invalid value: \"object\": {message}"),
    };
    let mut out = Vec::new();
    match kind {
        CrdKind::NodeClaim => {
            if old.get("spec") != new.get("spec") {
                out.push(invalid("spec", "spec is immutable"));
            }
        }
        CrdKind::NodePool => {
            let reference = "/spec/template/spec/nodeClassRef";
            for field in ["group", "kind"] {
                let pointer = format!("{reference}/{field}");
                if let (Some(before), Some(after)) = (old.pointer(&pointer), new.pointer(&pointer))
                    && before != after
                {
                    out.push(invalid(
                        "spec.template.spec.nodeClassRef",
                        &format!("nodeClassRef.{field} is immutable"),
                    ));
                }
            }
        }
        CrdKind::EC2NodeClass => {
            let role = |v: &Value| v.pointer("/spec/role").cloned();
            let profile = |v: &Value| v.pointer("/spec/instanceProfile").cloned();
            if let (Some(before), Some(after)) = (role(old), role(new))
                && before != after
            {
                out.push(Cause {
                    reason: "FieldValueInvalid",
                    field: "spec.role".into(),
                    message: format!("Invalid value: {after}: immutable field changed"),
                });
            }
            let keeps_role = role(old).is_some() && role(new).is_some();
            let keeps_profile = profile(old).is_some() && profile(new).is_some();
            if !(keeps_role || keeps_profile) {
                out.push(invalid(
                    "spec",
                    "changing from 'instanceProfile' to 'role' is not supported. You must delete and recreate this node class if you want to change this.",
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_pruned_with_their_paths() {
        let schema = json!({ "type": "object", "properties": {
            "spec": { "type": "object", "properties": { "a": { "type": "string" } } },
        } });
        let mut value = json!({ "spec": { "a": "x", "b": 1 }, "extra": true });
        let removed = prune(&schema, &mut value);
        assert_eq!(removed, ["extra", "spec.b"]);
        assert_eq!(value, json!({ "spec": { "a": "x" } }));
    }

    #[test]
    fn pruned_paths_name_list_items_and_map_entries() {
        let item = json!({ "type": "object", "properties": { "k": { "type": "string" } } });
        let schema = json!({ "type": "object", "properties": {
            "metadata": { "type": "object" },
            "spec": { "type": "object", "properties": {
                "list": { "type": "array", "items": item },
                "map": { "type": "object", "additionalProperties": item },
            } },
        } });
        let mut value = json!({
            "metadata": { "name": "kept", "anything": 1 },
            "spec": {
                "list": [{ "k": "a" }, { "k": "b", "x": 1 }],
                "map": { "one": { "k": "c", "y": 2 } },
            },
        });
        let removed = prune(&schema, &mut value);
        assert_eq!(removed, ["spec.list[1].x", "spec.map[one].y"]);
        assert_eq!(value["metadata"]["anything"], 1, "metadata is never pruned");
    }

    #[test]
    fn defaults_fill_absent_fields_inside_present_parents() {
        let schema = json!({ "type": "object", "properties": {
            "spec": { "type": "object", "default": {}, "properties": {
                "weight": { "type": "integer", "default": 10 },
            } },
        } });
        let mut value = json!({});
        apply_defaults(&schema, &mut value);
        assert_eq!(value, json!({ "spec": { "weight": 10 } }));
    }
}
