//! The OpenAPI v3 documents kubectl reads: `/openapi/v3` lists one document per group version,
//! and each document declares, per kind, the PATCH operation with the `fieldValidation` query
//! parameter (kubectl checks it to send `fieldValidation=Strict` and leave validation to the
//! server) and, for our CRDs, the schema (for `kubectl explain`).
//!
//! Built-in kinds carry no schema here, so kubectl computes strategic merge patches from its own
//! compiled-in types, as it does against servers without OpenAPI.

use serde_json::{Map, Value, json};

use super::kinds::Kinds;

fn document_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`.
pub(crate) fn v3_index(kinds: &Kinds) -> Value {
    let paths: Map<String, Value> = kinds
        .group_versions()
        .into_iter()
        .map(|(group, version)| {
            let path = document_path(&group, &version);
            let url = json!({ "serverRelativeURL": format!("/openapi/v3/{path}?hash=emulator") });
            (path, url)
        })
        .collect();
    json!({ "paths": paths })
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/<group>/<version>`.
pub(crate) fn v3_group_version(kinds: &Kinds, path: &str) -> Option<Value> {
    let (group, version) = kinds
        .group_versions()
        .into_iter()
        .find(|(group, version)| document_path(group, version) == path)?;
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for (_, kind) in kinds
        .iter()
        .filter(|(_, k)| k.group == group && k.version == version)
    {
        let gvk = json!({ "group": kind.group, "version": kind.version, "kind": kind.kind });
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let item = if kind.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", kind.plural)
        } else {
            format!("{prefix}/{}/{{name}}", kind.plural)
        };
        let query = |name: &str| json!({ "name": name, "in": "query", "schema": { "type": "string", "uniqueItems": true } });
        let operation = |action: &str| {
            json!({
                "operationId": format!("{action}{}", kind.kind),
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [query("dryRun"), query("fieldManager"), query("fieldValidation")],
                "responses": { "200": { "description": "OK" } },
            })
        };
        paths.insert(
            item,
            json!({ "patch": operation("patch"), "put": operation("put") }),
        );
        if let Some(schema) = &kind.schema {
            let mut schema = schema.clone();
            schema["x-kubernetes-group-version-kind"] = json!([gvk]);
            let name = format!(
                "{}.{}.{}",
                kind.group.split('.').rev().collect::<Vec<_>>().join("."),
                kind.version,
                kind.kind
            );
            schemas.insert(name, schema);
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": "v1.33.0" },
        "paths": paths,
        "components": { "schemas": schemas },
    }))
}
