//! Taints as the CRDs carry them: the shape of `corev1.Taint` with Karpenter's schema (an enum
//! of effects, key and value patterns), convertible to and from the k8s-openapi type.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use super::schema::QUALIFIED_NAME_PATTERN;

/// What a taint does to pods that do not tolerate it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::PreferNoSchedule => "PreferNoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }

    #[must_use]
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "NoSchedule" => Some(Self::NoSchedule),
            "PreferNoSchedule" => Some(Self::PreferNoSchedule),
            "NoExecute" => Some(Self::NoExecute),
            _ => None,
        }
    }
}

/// A taint on the nodes of a `NodeClaim`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// Required. The taint key to be applied to a node.
    #[schemars(length(min = 1), pattern(QUALIFIED_NAME_PATTERN))]
    pub key: String,
    /// The taint value corresponding to the taint key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(QUALIFIED_NAME_PATTERN))]
    pub value: Option<String>,
    /// Required. The effect of the taint on pods that do not tolerate the taint.
    pub effect: TaintEffect,
    /// When the taint was added; only written for `NoExecute` taints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<Time>,
}

impl Taint {
    #[must_use]
    pub fn new(key: &str, value: Option<&str>, effect: TaintEffect) -> Self {
        Self {
            key: key.to_owned(),
            value: value.map(str::to_owned),
            effect,
            time_added: None,
        }
    }

    /// Same key and effect: Kubernetes treats such taints as the same taint.
    #[must_use]
    pub fn matches(&self, other: &core::Taint) -> bool {
        self.key == other.key && self.effect.as_str() == other.effect
    }
}

impl From<&Taint> for core::Taint {
    fn from(taint: &Taint) -> Self {
        core::Taint {
            key: taint.key.clone(),
            value: taint.value.clone(),
            effect: taint.effect.as_str().to_owned(),
            time_added: taint.time_added.clone(),
        }
    }
}

/// A `corev1.Taint` whose effect is not one of the three Kubernetes knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("taint {key:?} has unknown effect {effect:?}")]
pub struct UnknownTaintEffect {
    pub key: String,
    pub effect: String,
}

impl TryFrom<&core::Taint> for Taint {
    type Error = UnknownTaintEffect;

    fn try_from(taint: &core::Taint) -> Result<Self, Self::Error> {
        let effect = TaintEffect::parse(&taint.effect).ok_or_else(|| UnknownTaintEffect {
            key: taint.key.clone(),
            effect: taint.effect.clone(),
        })?;
        Ok(Self {
            key: taint.key.clone(),
            value: taint.value.clone(),
            effect,
            time_added: taint.time_added.clone(),
        })
    }
}
