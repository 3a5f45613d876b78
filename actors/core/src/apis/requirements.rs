//! Node selector requirements with `minValues`, as `NodePool` templates and `NodeClaim`s carry
//! them (Karpenter's `NodeSelectorRequirementWithMinValues`).

use serde::{Deserialize, Serialize};

use super::schema::{LABEL_VALUE_MAX_LENGTH, LABEL_VALUE_PATTERN};

/// Largest `minValues` Karpenter accepts.
pub const MAX_MIN_VALUES: i64 = 50;
/// Most requirements a template may carry.
pub const MAX_REQUIREMENTS: usize = 100;

/// How a requirement relates a label key to its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

impl Operator {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::In => "In",
            Self::NotIn => "NotIn",
            Self::Exists => "Exists",
            Self::DoesNotExist => "DoesNotExist",
            Self::Gt => "Gt",
            Self::Lt => "Lt",
        }
    }
}

/// One requirement. The key schema differs between `NodePool`s and `NodeClaim`s (a `NodeClaim`
/// may require its own `NodePool` label), so the two kinds use [`NodePoolRequirement`] and
/// [`NodeClaimRequirement`], which share this shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// Alpha: the least number of distinct values the launch must be able to choose from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i64>,
}

impl Requirement {
    #[must_use]
    pub fn new(key: &str, operator: Operator, values: &[&str]) -> Self {
        Self {
            key: key.to_owned(),
            operator,
            values: values.iter().map(|&v| v.to_owned()).collect(),
            min_values: None,
        }
    }
}

macro_rules! requirement_schema {
    ($name:ident, $key_schema:literal, $doc:literal) => {
        #[doc = $doc]
        #[derive(
            Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
        )]
        #[serde(rename_all = "camelCase")]
        #[schemars(rename = "NodeSelectorRequirementWithMinValues")]
        pub struct $name {
            /// The label key that the selector applies to.
            #[schemars(schema_with = $key_schema)]
            pub key: String,
            /// Represents a key's relationship to a set of values.
            pub operator: Operator,
            /// An array of string values: non-empty for `In`/`NotIn`, empty for
            /// `Exists`/`DoesNotExist`, a single integer for `Gt`/`Lt`.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            // Karpenter's CRD puts the label-value bounds on the list itself, where the API
            // server ignores them; carried the same way so we accept the values Karpenter does.
            #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
            #[schemars(extend("maxLength" = LABEL_VALUE_MAX_LENGTH, "pattern" = LABEL_VALUE_PATTERN))]
            pub values: Vec<String>,
            /// Alpha: the minimum number of unique values required to define the flexibility
            /// of the specific requirement.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[schemars(range(min = 1, max = MAX_MIN_VALUES))]
            pub min_values: Option<i64>,
        }

        impl From<$name> for Requirement {
            fn from(r: $name) -> Self {
                Self {
                    key: r.key,
                    operator: r.operator,
                    values: r.values,
                    min_values: r.min_values,
                }
            }
        }

        impl From<Requirement> for $name {
            fn from(r: Requirement) -> Self {
                Self {
                    key: r.key,
                    operator: r.operator,
                    values: r.values,
                    min_values: r.min_values,
                }
            }
        }

        impl $name {
            /// The shape shared by both kinds.
            #[must_use]
            pub fn as_requirement(&self) -> Requirement {
                Requirement::from(self.clone())
            }
        }
    };
}

requirement_schema!(
    NodePoolRequirement,
    "crate::apis::schema::nodepool_requirement_key",
    "A requirement in a `NodePool` template."
);
requirement_schema!(
    NodeClaimRequirement,
    "crate::apis::schema::nodeclaim_requirement_key",
    "A requirement of a `NodeClaim`."
);

/// The CEL rules Karpenter puts on a requirements list.
pub const REQUIREMENTS_RULES: &[(&str, &str)] = &[
    (
        "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
        "requirements with operator 'In' must have a value defined",
    ),
    (
        "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
        "requirements operator 'Gt' or 'Lt' must have a single positive integer value",
    ),
    (
        "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
    ),
];

/// Adds [`REQUIREMENTS_RULES`] and the item limit to a requirements list schema.
pub fn requirements_list_rules(schema: &mut schemars::Schema) {
    super::schema::add_rules(
        schema,
        REQUIREMENTS_RULES
            .iter()
            .map(|(rule, message)| ((*rule).to_owned(), (*message).to_owned())),
    );
    schema.insert("maxItems".into(), MAX_REQUIREMENTS.into());
}
