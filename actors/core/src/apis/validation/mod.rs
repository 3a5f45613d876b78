//! Validation of `NodePool`, `NodeClaim` and `EC2NodeClass` documents, reporting every
//! violation at once with its field path, as the API server would.
//!
//! A document flows through two stages. [`structural`] checks the raw JSON against the
//! generated CRD schema (types, unknown fields, patterns, enums, bounds). The document is then
//! deserialized into its Rust type and the CEL and runtime rules run over it ([`nodepool`],
//! [`nodeclaim`], [`ec2nodeclass`]). Types are lenient where the schema has patterns, so both
//! stages report together; only a document whose JSON types are wrong stops after the first.

mod common;
pub mod ec2nodeclass;
pub mod nodeclaim;
pub mod nodepool;
mod path;
pub mod structural;

use serde_json::Value;

pub use path::{FieldPath, Violation, Violations};
use structural::{BadPattern, SchemaChecker};

use super::crd;
use super::labels::{AWS_GROUP, CORE_GROUP, VERSION};
use super::{EC2NodeClassSpec, NodeClaimSpec, NodePoolSpec};

/// The kinds this module validates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    NodePool,
    NodeClaim,
    EC2NodeClass,
}

impl Kind {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NodePool => "NodePool",
            Self::NodeClaim => "NodeClaim",
            Self::EC2NodeClass => "EC2NodeClass",
        }
    }

    fn group(self) -> &'static str {
        match self {
            Self::NodePool | Self::NodeClaim => CORE_GROUP,
            Self::EC2NodeClass => AWS_GROUP,
        }
    }

    fn from_name(kind: &str) -> Option<Self> {
        [Self::NodePool, Self::NodeClaim, Self::EC2NodeClass]
            .into_iter()
            .find(|k| k.as_str() == kind)
    }
}

/// What validation made of one document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A document of one of our kinds, with its name and problems (none when valid).
    Checked {
        kind: Kind,
        name: String,
        violations: Vec<Violation>,
    },
    /// Not one of our kinds; the reason says what it was.
    Skipped { reason: String },
}

/// Validates documents against the schemas and rules of the three CRDs.
#[derive(Debug)]
pub struct Validator {
    nodepool: SchemaChecker,
    nodeclaim: SchemaChecker,
    ec2nodeclass: SchemaChecker,
}

impl Validator {
    /// Builds the schema checkers from the generated CRDs.
    pub fn new() -> Result<Self, BadPattern> {
        let [nodepool, nodeclaim, ec2nodeclass] = crd::all().map(|crd| crd::schema_of(&crd));
        Ok(Self {
            nodepool: SchemaChecker::new(nodepool)?,
            nodeclaim: SchemaChecker::new(nodeclaim)?,
            ec2nodeclass: SchemaChecker::new(ec2nodeclass)?,
        })
    }

    /// Validates one parsed document (any kind; others are skipped).
    #[must_use]
    pub fn validate(&self, document: &Value) -> Outcome {
        self.validate_with(document, None)
    }

    /// Validates `document` as an update of `old`, ratcheted as the API server does: schema
    /// checks skip the values that did not change ([`SchemaChecker::check_update`]), and the
    /// rules (all on the spec) are not run again when the spec did not change, as
    /// `CRDValidationRatcheting` does for `x-kubernetes-validations` on unchanged values. A
    /// status or metadata write therefore costs no spec decoding.
    #[must_use]
    pub fn validate_update(&self, document: &Value, old: &Value) -> Outcome {
        self.validate_with(document, Some(old))
    }

    fn validate_with(&self, document: &Value, old: Option<&Value>) -> Outcome {
        let Some(object) = document.as_object() else {
            return Outcome::Skipped {
                reason: "not a Kubernetes object (expected a mapping)".to_owned(),
            };
        };
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind_name = object.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = document
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("<unnamed>")
            .to_owned();
        let Some(kind) = Kind::from_name(kind_name) else {
            let described = if kind_name.is_empty() {
                "a document without kind"
            } else {
                kind_name
            };
            return Outcome::Skipped {
                reason: format!("{described} is not validated"),
            };
        };
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        if group != kind.group() {
            return Outcome::Skipped {
                reason: format!(
                    "{kind_name} in group {group:?} is not one of ours ({})",
                    kind.group()
                ),
            };
        }
        let mut violations = Violations::default();
        if version != VERSION {
            violations.add(
                &FieldPath::root().child("apiVersion"),
                format!(
                    "{api_version} is not served; use {}/{VERSION}",
                    kind.group()
                ),
            );
            return Outcome::Checked {
                kind,
                name,
                violations: violations.into_vec(),
            };
        }
        // Most writes carry no null field: then the document is checked as it is, uncopied.
        let pruned = if structural::has_null_fields(document) {
            let mut pruned = document.clone();
            structural::prune_nulls(&mut pruned);
            std::borrow::Cow::Owned(pruned)
        } else {
            std::borrow::Cow::Borrowed(document)
        };
        match old {
            Some(old) => self
                .checker(kind)
                .check_update(&pruned, old, &mut violations),
            None => self.checker(kind).check(&pruned, &mut violations),
        }
        let spec_unchanged = old.is_some_and(|old| old.get("spec") == document.get("spec"));
        if !spec_unchanged {
            check_rules(kind, &pruned, &mut violations);
        }
        Outcome::Checked {
            kind,
            name,
            violations: violations.into_vec(),
        }
    }

    fn checker(&self, kind: Kind) -> &SchemaChecker {
        match kind {
            Kind::NodePool => &self.nodepool,
            Kind::NodeClaim => &self.nodeclaim,
            Kind::EC2NodeClass => &self.ec2nodeclass,
        }
    }
}

/// Runs the typed rules when the spec deserializes; when it does not, the schema stage has
/// already reported why (a wrong JSON type).
fn check_rules(kind: Kind, document: &Value, out: &mut Violations) {
    let Some(spec) = document.get("spec").cloned() else {
        return;
    };
    match kind {
        Kind::NodePool => {
            if let Ok(spec) = serde_json::from_value::<NodePoolSpec>(spec) {
                nodepool::check(&spec, out);
            }
        }
        Kind::NodeClaim => {
            if let Ok(spec) = serde_json::from_value::<NodeClaimSpec>(spec) {
                nodeclaim::check(&spec, out);
            }
        }
        Kind::EC2NodeClass => {
            if let Ok(spec) = serde_json::from_value::<EC2NodeClassSpec>(spec) {
                ec2nodeclass::check(&spec, out);
            }
        }
    }
}

/// Every rule violation of a typed `NodePool` (for runtime validation of objects already
/// admitted by the API server).
#[must_use]
pub fn nodepool_violations(spec: &NodePoolSpec) -> Vec<Violation> {
    let mut out = Violations::default();
    nodepool::check(spec, &mut out);
    out.into_vec()
}

/// Every rule violation of a typed `EC2NodeClass`.
#[must_use]
pub fn ec2nodeclass_violations(spec: &EC2NodeClassSpec) -> Vec<Violation> {
    let mut out = Violations::default();
    ec2nodeclass::check(spec, &mut out);
    out.into_vec()
}
