//! The CustomResourceDefinitions of the three kinds, generated from the Rust types.
//!
//! kube's derive produces the schema; [`tidy`] then shapes it like Karpenter's published CRDs:
//! `apiVersion`, `kind` and `metadata` at the root, int-or-string quantities as
//! `anyOf: [integer, string]`, no `nullable` on optional fields (Karpenter omits absent fields
//! rather than sending null), no Rust integer formats, and whole numbers written as integers.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_core::CustomResourceExt;
use serde_json::{Value, json};

use super::{EC2NodeClass, NodeClaim, NodePool};

/// File names used in `charts/karpenter-crd/templates/`, in the order of [`all`].
pub const FILE_NAMES: [&str; 3] = [
    "karpenter.sh_nodepools.yaml",
    "karpenter.sh_nodeclaims.yaml",
    "karpenter.k8s.aws_ec2nodeclasses.yaml",
];

/// The three CRDs as JSON, in a stable order: NodePool, NodeClaim, EC2NodeClass.
#[must_use]
pub fn all() -> [Value; 3] {
    [NodePool::crd(), NodeClaim::crd(), EC2NodeClass::crd()].map(|crd| tidy(&crd))
}

/// The `openAPIV3Schema` of a CRD.
#[must_use]
pub fn schema_of(crd: &Value) -> Value {
    crd.pointer("/spec/versions/0/schema/openAPIV3Schema")
        .cloned()
        .unwrap_or(Value::Null)
}

fn tidy(crd: &CustomResourceDefinition) -> Value {
    let mut value = serde_json::to_value(crd).unwrap_or(Value::Null);
    if let Some(Value::Object(names)) = value.pointer_mut("/spec/names")
        && let Some(kind) = names.get("kind").and_then(Value::as_str)
    {
        let list_kind = format!("{kind}List");
        names.insert("listKind".into(), Value::String(list_kind));
    }
    if let Some(Value::Object(root)) = value.pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
    {
        root.remove("title");
        if let Some(Value::Object(properties)) = root.get_mut("properties") {
            properties.insert("apiVersion".into(), json!({ "type": "string" }));
            properties.insert("kind".into(), json!({ "type": "string" }));
            properties.insert("metadata".into(), json!({ "type": "object" }));
        }
    }
    normalize(&mut value);
    value
}

fn normalize(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("nullable") == Some(&Value::Bool(true)) {
                map.remove("nullable");
            }
            let rust_format = map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|format| {
                    matches!(
                        format,
                        "uint"
                            | "uint8"
                            | "uint16"
                            | "uint32"
                            | "uint64"
                            | "int"
                            | "double"
                            | "float"
                    )
                });
            if rust_format {
                map.remove("format");
            }
            // kube marks optional enums with a null member; absence already covers that.
            if let Some(Value::Array(members)) = map.get_mut("enum") {
                members.retain(|member| !member.is_null());
            }
            if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
                map.insert(
                    "anyOf".into(),
                    json!([{ "type": "integer" }, { "type": "string" }]),
                );
            }
            map.values_mut().for_each(normalize);
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        Value::Number(number) => {
            if let Some(float) = number
                .as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
            {
                // Exact: the value is whole and far inside i64's range.
                #[expect(
                    clippy::cast_possible_truncation,
                    reason = "checked whole and in range"
                )]
                let whole = float as i64;
                *value = Value::from(whole);
            }
        }
        _ => {}
    }
}
