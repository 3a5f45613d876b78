//! Checks a JSON document against a CRD's `openAPIV3Schema` as the API server does before CEL:
//! types, unknown fields (strict field validation), required fields, enums, patterns, lengths,
//! bounds, item and property counts, int-or-string, date-time formats, and `metadata`.
//!
//! The schema is the one generated from the Rust types ([`crate::apis::crd`]), so the patterns
//! and bounds live in one place: the type definitions.

use std::collections::HashMap;

use regex::Regex;
use serde_json::{Map, Value};

use super::path::{FieldPath, Violations};

/// Longest value the checker quotes back in a message.
const MAX_QUOTED: usize = 64;

/// A CRD schema with its patterns compiled.
#[derive(Debug)]
pub struct SchemaChecker {
    schema: Value,
    patterns: HashMap<String, Regex>,
}

/// A pattern in a generated schema that the regex engine refuses: a bug in our types.
#[derive(Debug, thiserror::Error)]
#[error("schema pattern {pattern:?} does not compile: {source}")]
pub struct BadPattern {
    pub pattern: String,
    #[source]
    pub source: regex::Error,
}

impl SchemaChecker {
    pub fn new(schema: Value) -> Result<Self, BadPattern> {
        let mut patterns = HashMap::new();
        collect_patterns(&schema, &mut patterns)?;
        Ok(Self { schema, patterns })
    }

    /// Every schema violation of `document`.
    pub fn check(&self, document: &Value, violations: &mut Violations) {
        self.check_node(&self.schema, document, None, &FieldPath::root(), violations);
    }

    /// The schema violations of `document` as an update of `old`, ratcheted as the API server
    /// does (`CRDValidationRatcheting`, on by default since Kubernetes 1.30): a value equal to
    /// the old one at the same path is not checked again, so an object stored under an older
    /// schema can still be written where it did not change. Object fields correlate by name;
    /// a list is compared whole.
    pub fn check_update(&self, document: &Value, old: &Value, violations: &mut Violations) {
        self.check_node(
            &self.schema,
            document,
            Some(old),
            &FieldPath::root(),
            violations,
        );
    }

    fn check_node(
        &self,
        schema: &Value,
        value: &Value,
        old: Option<&Value>,
        path: &FieldPath,
        out: &mut Violations,
    ) {
        if old == Some(value) {
            return;
        }
        if path.as_str() == "metadata" {
            check_metadata(value, path, out);
            return;
        }
        let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        if int_or_string {
            if !(value.is_string() || value.is_i64() || value.is_u64()) {
                out.add(
                    path,
                    format!("must be an integer or a string, got {}", describe(value)),
                );
                return;
            }
        } else if let Some(expected) = schema.get("type").and_then(Value::as_str)
            && !type_matches(expected, value)
        {
            out.add(
                path,
                format!("must be of type {expected}, got {}", describe(value)),
            );
            return;
        }
        self.check_scalar(schema, value, path, out);
        match value {
            Value::Object(map) => {
                let old = old.and_then(Value::as_object);
                self.check_object(schema, map, old, path, out);
            }
            Value::Array(items) => self.check_array(schema, items, path, out),
            _ => {}
        }
    }

    fn check_scalar(&self, schema: &Value, value: &Value, path: &FieldPath, out: &mut Violations) {
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            let names: Vec<String> = allowed.iter().map(quote).collect();
            out.add(
                path,
                format!(
                    "unsupported value {}: supported values: {}",
                    quote(value),
                    names.join(", ")
                ),
            );
        }
        if let Value::String(text) = value {
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
                && let Some(regex) = self.patterns.get(pattern)
                && !regex.is_match(text)
            {
                out.add(
                    path,
                    format!("{} does not match pattern {pattern}", quote(value)),
                );
            }
            let length = text.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && length > max
            {
                out.add(path, format!("may not be longer than {max} characters"));
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && length < min
            {
                out.add(path, format!("must be at least {min} characters long"));
            }
            if schema.get("format").and_then(Value::as_str) == Some("date-time")
                && text.parse::<k8s_openapi::jiff::Timestamp>().is_err()
            {
                out.add(
                    path,
                    format!("{} is not an RFC 3339 date-time", quote(value)),
                );
            }
        }
        if let Some(number) = value.as_f64()
            && value.is_number()
        {
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
                && number < min
            {
                out.add(path, format!("must be greater than or equal to {min}"));
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
                && number > max
            {
                out.add(path, format!("must be less than or equal to {max}"));
            }
        }
    }

    fn check_object(
        &self,
        schema: &Value,
        map: &Map<String, Value>,
        old: Option<&Map<String, Value>>,
        path: &FieldPath,
        out: &mut Violations,
    ) {
        let properties = schema.get("properties").and_then(Value::as_object);
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for name in required.iter().filter_map(Value::as_str) {
                // The API server defaults before it validates: a required field with a default
                // (a budget's `nodes`) is never missing from what it checks.
                let defaulted = properties
                    .and_then(|p| p.get(name))
                    .is_some_and(|p| p.get("default").is_some());
                if !defaulted && map.get(name).is_none_or(Value::is_null) {
                    out.add(&path.child(name), "Required value");
                }
            }
        }
        if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
            && map.len() as u64 > max
        {
            out.add(path, format!("must have at most {max} entries"));
        }
        let additional = schema.get("additionalProperties").filter(|a| a.is_object());
        let preserve =
            schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        // Like the API server, a null in a non-nullable field counts as absent.
        for (name, child) in map.iter().filter(|(_, child)| !child.is_null()) {
            let old_child = old.and_then(|o| o.get(name));
            if let Some(child_schema) = properties.and_then(|p| p.get(name)) {
                self.check_node(child_schema, child, old_child, &path.child(name), out);
            } else if let Some(value_schema) = additional {
                self.check_node(value_schema, child, old_child, &path.key(name), out);
            } else if !preserve && (properties.is_some() || path.as_str() == "<root>") {
                out.add(&path.child(name), "unknown field");
            }
        }
    }

    fn check_array(&self, schema: &Value, items: &[Value], path: &FieldPath, out: &mut Violations) {
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && items.len() as u64 > max
        {
            out.add(path, format!("must have at most {max} items"));
        }
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            out.add(path, format!("must have at least {min} items"));
        }
        if let Some(item_schema) = schema.get("items") {
            for (index, item) in items.iter().enumerate() {
                self.check_node(item_schema, item, None, &path.index(index), out);
            }
        }
    }
}

/// Removes null-valued fields, as the API server prunes them before storing an object.
/// Whether [`prune_nulls`] would remove anything: a field anywhere set to `null`.
#[must_use]
pub fn has_null_fields(value: &Value) -> bool {
    match value {
        Value::Object(map) => map
            .values()
            .any(|child| child.is_null() || has_null_fields(child)),
        Value::Array(items) => items.iter().any(has_null_fields),
        _ => false,
    }
}

pub fn prune_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, child| !child.is_null());
            map.values_mut().for_each(prune_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(prune_nulls),
        _ => {}
    }
}

fn collect_patterns(schema: &Value, into: &mut HashMap<String, Regex>) -> Result<(), BadPattern> {
    match schema {
        Value::Object(map) => {
            if let Some(Value::String(pattern)) = map.get("pattern")
                && !into.contains_key(pattern)
            {
                let regex = Regex::new(pattern).map_err(|source| BadPattern {
                    pattern: pattern.clone(),
                    source,
                })?;
                into.insert(pattern.clone(), regex);
            }
            map.values()
                .try_for_each(|child| collect_patterns(child, into))
        }
        Value::Array(items) => items
            .iter()
            .try_for_each(|child| collect_patterns(child, into)),
        _ => Ok(()),
    }
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        _ => true,
    }
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn quote(value: &Value) -> String {
    let text = match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    if text.chars().count() > MAX_QUOTED {
        let truncated: String = text.chars().take(MAX_QUOTED).collect();
        format!("{truncated}...")
    } else {
        text
    }
}

/// The `ObjectMeta` fields a client may send.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Longest object name (DNS subdomain).
const MAX_NAME_LENGTH: usize = 253;

fn check_metadata(value: &Value, path: &FieldPath, out: &mut Violations) {
    let Value::Object(map) = value else {
        out.add(
            path,
            format!("must be of type object, got {}", describe(value)),
        );
        return;
    };
    for name in map.keys() {
        if !OBJECT_META_FIELDS.contains(&name.as_str()) {
            out.add(&path.child(name), "unknown field");
        }
    }
    match (map.get("name"), map.get("generateName")) {
        (Some(Value::String(name)), _) => {
            if let Some(problem) = dns_subdomain_problem(name) {
                out.add(
                    &path.child("name"),
                    format!("{} {problem}", quote(&map["name"])),
                );
            }
        }
        (Some(other), _) => {
            out.add(
                &path.child("name"),
                format!("must be of type string, got {}", describe(other)),
            );
        }
        (None, Some(Value::String(_))) => {}
        (None, _) => out.add(
            &path.child("name"),
            "Required value: name or generateName is required",
        ),
    }
    for field in ["labels", "annotations"] {
        match map.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(entries)) => {
                for (key, entry) in entries {
                    if !entry.is_string() {
                        out.add(
                            &path.child(field).key(key),
                            format!("must be of type string, got {}", describe(entry)),
                        );
                    }
                }
            }
            Some(other) => {
                out.add(
                    &path.child(field),
                    format!("must be of type object, got {}", describe(other)),
                );
            }
        }
    }
    if let Some(finalizers) = map.get("finalizers")
        && !finalizers
            .as_array()
            .is_some_and(|f| f.iter().all(Value::is_string))
    {
        out.add(&path.child("finalizers"), "must be a list of strings");
    }
}

/// Why `name` is not a DNS-1123 subdomain, Kubernetes' rule for cluster-scoped object names.
#[must_use]
pub fn dns_subdomain_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".to_owned());
    }
    if name.len() > MAX_NAME_LENGTH {
        return Some(format!("must be no more than {MAX_NAME_LENGTH} characters"));
    }
    let valid_label = |label: &str| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.split('.').all(valid_label) {
        None
    } else {
        Some(
            "is not a valid DNS subdomain: lowercase alphanumerics, '-' and '.', starting and ending with an alphanumeric"
                .to_owned(),
        )
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// `has_null_fields` says whether `prune_nulls` would change a document.
    #[test]
    fn a_null_field_at_any_depth_is_found_and_a_null_list_item_is_not() {
        let documents = [
            json!({ "spec": { "a": 1, "b": [{ "c": "x" }] } }),
            json!({ "spec": { "a": null } }),
            json!({ "spec": { "b": [{ "c": null }] } }),
            json!({ "spec": { "b": [null, 1] } }),
            json!({ "status": null }),
        ];
        let found: Vec<bool> = documents.iter().map(has_null_fields).collect();
        assert_eq!(found, [false, true, true, false, true]);
        for document in documents {
            let mut pruned = document.clone();
            prune_nulls(&mut pruned);
            assert_eq!(pruned != document, has_null_fields(&document), "{document}");
        }
    }
}
