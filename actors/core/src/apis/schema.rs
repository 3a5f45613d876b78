//! Helpers that shape the generated OpenAPI schema: CEL rules, Kubernetes quantities, and the
//! restricted-label rules built from the constants in [`super::labels`] so the CRD and the Rust
//! validation read the same lists.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

use super::labels::{self, LabelUse};

/// Kubernetes' quantity pattern (`resource.Quantity`).
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
/// A qualified name with an optional DNS-subdomain prefix: label keys, taint keys.
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";
/// A label value: empty, or alphanumerics with `-_.` inside.
pub const LABEL_VALUE_PATTERN: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// Longest label value Kubernetes accepts.
pub const LABEL_VALUE_MAX_LENGTH: u64 = 63;
/// Longest qualified label key (253 prefix + `/` + 63 name - 1).
pub const LABEL_KEY_MAX_LENGTH: u64 = 316;

/// Appends CEL rules (`x-kubernetes-validations`) to a schema.
pub fn add_rules(schema: &mut Schema, rules: impl IntoIterator<Item = (String, String)>) {
    let entries: Vec<Value> = rules
        .into_iter()
        .map(|(rule, message)| json!({ "rule": rule, "message": message }))
        .collect();
    if let Some(object) = schema.as_object_mut() {
        match object.get_mut("x-kubernetes-validations") {
            Some(Value::Array(existing)) => existing.extend(entries),
            _ => {
                object.insert("x-kubernetes-validations".into(), Value::Array(entries));
            }
        }
    }
}

/// A map of resource names to quantities (`corev1.ResourceList`).
#[must_use]
pub fn resource_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": quantity_schema(),
    })
}

fn quantity_schema() -> Value {
    json!({
        "anyOf": [{ "type": "integer" }, { "type": "string" }],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": true,
    })
}

/// Map of label keys to values as Kubernetes' `ObjectMeta.labels`, with the restricted-domain
/// rules for `NodePool` template labels.
#[must_use]
pub fn template_labels(_: &mut SchemaGenerator) -> Schema {
    let mut schema = json_schema!({
        "type": "object",
        "maxProperties": 100,
        "additionalProperties": {
            "type": "string",
            "maxLength": LABEL_VALUE_MAX_LENGTH,
            "pattern": LABEL_VALUE_PATTERN,
        },
    });
    add_rules(
        &mut schema,
        restricted_label_rules(LabelUse::TemplateLabel, "x", |condition| {
            format!("self.all(x, {condition})")
        }),
    );
    schema
}

/// A plain `map[string]string` (annotations, tags).
#[must_use]
pub fn string_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "additionalProperties": { "type": "string" } })
}

/// Requirement keys of a `NodePool` (which may not require its own `NodePool` label).
#[must_use]
pub fn nodepool_requirement_key(_: &mut SchemaGenerator) -> Schema {
    requirement_key(LabelUse::NodePoolRequirement)
}

/// Requirement keys of a `NodeClaim`.
#[must_use]
pub fn nodeclaim_requirement_key(_: &mut SchemaGenerator) -> Schema {
    requirement_key(LabelUse::NodeClaimRequirement)
}

fn requirement_key(usage: LabelUse) -> Schema {
    let mut schema = json_schema!({
        "type": "string",
        "maxLength": LABEL_KEY_MAX_LENGTH,
        "pattern": QUALIFIED_NAME_PATTERN,
    });
    add_rules(
        &mut schema,
        restricted_label_rules(usage, "self", str::to_owned),
    );
    schema
}

/// CEL equivalents of [`labels::restriction`]: one rule per message about the key named `var`.
fn restricted_label_rules(
    usage: LabelUse,
    var: &str,
    wrap: impl Fn(&str) -> String,
) -> Vec<(String, String)> {
    let quoted = |keys: &[&str]| {
        keys.iter()
            .map(|k| format!("\"{k}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let kubernetes_io_allowed: Vec<&str> = [
        "beta.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "failure-domain.beta.kubernetes.io/zone",
        labels::ZONE,
        labels::REGION,
    ]
    .into_iter()
    .chain((usage != LabelUse::TemplateLabel).then_some(labels::INSTANCE_TYPE))
    .chain([labels::ARCH, labels::OS, labels::WINDOWS_BUILD])
    .collect();
    let domain = format!(r#"{var}.find("^([^/]+)")"#);
    let mut rules = vec![
        (
            format!(
                "{var} in [{}] || {domain}.endsWith(\"node.kubernetes.io\") || {domain}.endsWith(\"node-restriction.kubernetes.io\") || !{domain}.endsWith(\"kubernetes.io\")",
                quoted(&kubernetes_io_allowed)
            ),
            "label domain \"kubernetes.io\" is restricted",
        ),
        (
            format!("{domain}.endsWith(\"kops.k8s.io\") || !{domain}.endsWith(\"k8s.io\")"),
            "label domain \"k8s.io\" is restricted",
        ),
        (
            format!(
                "{var} in [{}] || !{domain}.endsWith(\"karpenter.sh\")",
                quoted(&[labels::CAPACITY_TYPE, labels::NODEPOOL])
            ),
            "label domain \"karpenter.sh\" is restricted",
        ),
    ];
    if usage != LabelUse::NodeClaimRequirement {
        rules.push((
            format!("{var} != \"{}\"", labels::NODEPOOL),
            "label \"karpenter.sh/nodepool\" is restricted",
        ));
    }
    rules.push((
        format!("{var} != \"{}\"", labels::HOSTNAME),
        "label \"kubernetes.io/hostname\" is restricted",
    ));
    rules.push((
        format!(
            "{var} in [{}] || !{domain}.endsWith(\"karpenter.k8s.aws\")",
            quoted(labels::AWS_WELL_KNOWN_LABELS)
        ),
        "label domain \"karpenter.k8s.aws\" is restricted",
    ));
    rules
        .into_iter()
        .map(|(rule, message)| (wrap(&rule), message.to_owned()))
        .collect()
}

/// Schema of a type that serializes as a plain string with a pattern.
#[must_use]
pub fn pattern_string(pattern: &str) -> Schema {
    json_schema!({ "type": "string", "pattern": pattern })
}

/// The schema a type would get on its own, inlined.
pub fn inline<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}
