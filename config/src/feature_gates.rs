//! `FEATURE_GATES`: Karpenter's alpha features, written `NodeRepair=true,SpotToSpotConsolidation=false`.
//!
//! Parsing follows Kubernetes' `MapStringBool` (which Karpenter uses): items are separated by
//! commas, whitespace around items, names and values is ignored, empty items are skipped, any
//! subset in any order, a later item wins, values use Go's boolean spellings. Unlike Karpenter,
//! which silently ignores unknown gates, an unknown gate is an error: a misspelt gate would
//! otherwise leave a feature off without a word.

use std::fmt;
use std::str::FromStr;

use crate::values::parse_go_bool;

const NODE_REPAIR: &str = "NodeRepair";
const RESERVED_CAPACITY: &str = "ReservedCapacity";
const SPOT_TO_SPOT_CONSOLIDATION: &str = "SpotToSpotConsolidation";

/// Karpenter v1.5's feature gates; all off by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FeatureGates {
    /// `NodeRepair`: replace nodes whose conditions the cloud provider marks unhealthy.
    pub node_repair: bool,
    /// `ReservedCapacity`: launch into on-demand capacity reservations.
    pub reserved_capacity: bool,
    /// `SpotToSpotConsolidation`: consolidation may replace a spot node with a cheaper spot node.
    pub spot_to_spot_consolidation: bool,
}

/// A `FEATURE_GATES` value that cannot be parsed. Each variant names the offending item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGatesError {
    /// An item without `=`.
    #[error("missing \"=\" in feature gate item {item:?} (expected {item}=true or {item}=false)")]
    MissingValue { item: String },
    /// A gate name Karpenter v1.5 does not have.
    #[error(
        "unknown feature gate {gate:?} in item {item:?} (known gates: NodeRepair, ReservedCapacity, SpotToSpotConsolidation)"
    )]
    UnknownGate { gate: String, item: String },
    /// A value that is not a boolean.
    #[error(
        "invalid value {value:?} for feature gate {gate} in item {item:?} (expected true or false)"
    )]
    InvalidValue {
        gate: String,
        item: String,
        value: String,
    },
}

impl FeatureGatesError {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        "invalid_feature_gates"
    }
}

impl FromStr for FeatureGates {
    type Err = FeatureGatesError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let mut gates = Self::default();
        for item in input
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            let Some((gate, value)) = item.split_once('=') else {
                return Err(FeatureGatesError::MissingValue {
                    item: item.to_owned(),
                });
            };
            let (gate, value) = (gate.trim(), value.trim());
            let slot = match gate {
                NODE_REPAIR => &mut gates.node_repair,
                RESERVED_CAPACITY => &mut gates.reserved_capacity,
                SPOT_TO_SPOT_CONSOLIDATION => &mut gates.spot_to_spot_consolidation,
                _ => {
                    return Err(FeatureGatesError::UnknownGate {
                        gate: gate.to_owned(),
                        item: item.to_owned(),
                    });
                }
            };
            *slot = parse_go_bool(value).map_err(|_| FeatureGatesError::InvalidValue {
                gate: gate.to_owned(),
                item: item.to_owned(),
                value: value.to_owned(),
            })?;
        }
        Ok(gates)
    }
}

/// Karpenter's spelling with every gate, in Karpenter's order:
/// `NodeRepair=false,ReservedCapacity=false,SpotToSpotConsolidation=false`.
impl fmt::Display for FeatureGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{NODE_REPAIR}={},{RESERVED_CAPACITY}={},{SPOT_TO_SPOT_CONSOLIDATION}={}",
            self.node_repair, self.reserved_capacity, self.spot_to_spot_consolidation
        )
    }
}

/// Clap value parser.
pub(crate) fn parse_feature_gates(input: &str) -> Result<FeatureGates, FeatureGatesError> {
    input.parse()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_subset_in_any_order_with_whitespace_parses() {
        let cases = [
            ("", FeatureGates::default()),
            (
                "NodeRepair=true",
                FeatureGates {
                    node_repair: true,
                    ..FeatureGates::default()
                },
            ),
            (
                " SpotToSpotConsolidation = true , NodeRepair=false,,",
                FeatureGates {
                    spot_to_spot_consolidation: true,
                    ..FeatureGates::default()
                },
            ),
            (
                "ReservedCapacity=True,NodeRepair=1,SpotToSpotConsolidation=t",
                FeatureGates {
                    node_repair: true,
                    reserved_capacity: true,
                    spot_to_spot_consolidation: true,
                },
            ),
            ("NodeRepair=true,NodeRepair=false", FeatureGates::default()),
        ];
        for (input, expected) in cases {
            assert_eq!(input.parse::<FeatureGates>(), Ok(expected), "{input:?}");
        }
    }

    #[test]
    fn display_is_karpenters_default_spelling_and_parses_back() {
        let default = FeatureGates::default();
        assert_eq!(
            default.to_string(),
            "NodeRepair=false,ReservedCapacity=false,SpotToSpotConsolidation=false"
        );
        let all = FeatureGates {
            node_repair: true,
            reserved_capacity: true,
            spot_to_spot_consolidation: true,
        };
        assert_eq!(all.to_string().parse(), Ok(all));
    }

    #[test]
    fn errors_name_the_gate_and_the_item() {
        let unknown = "NodeRepair=true, Drift=true".parse::<FeatureGates>();
        assert_eq!(
            unknown,
            Err(FeatureGatesError::UnknownGate {
                gate: "Drift".to_owned(),
                item: "Drift=true".to_owned()
            })
        );
        let missing = "NodeRepair".parse::<FeatureGates>().expect_err("no =");
        assert_eq!(
            missing.to_string(),
            r#"missing "=" in feature gate item "NodeRepair" (expected NodeRepair=true or NodeRepair=false)"#
        );
        let bad_bool = "SpotToSpotConsolidation=yes"
            .parse::<FeatureGates>()
            .expect_err("not a bool");
        assert_eq!(
            bad_bool.to_string(),
            r#"invalid value "yes" for feature gate SpotToSpotConsolidation in item "SpotToSpotConsolidation=yes" (expected true or false)"#
        );
        assert_eq!(bad_bool.category(), "invalid_feature_gates");
    }
}
