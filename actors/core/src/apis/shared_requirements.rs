//! A `NodeClaim`'s requirements list, shared by every `NodeClaim` whose list is equal.
//!
//! A `NodeClaim` carries the requirements of the launch that made it: the NodePool's, the
//! pods', and an instance-type requirement of up to 60 values. The NodeClaims of one
//! scheduling decision carry equal lists, and each list was its own 2.6 KB of the daemon's
//! view per NodeClaim (13 MB at 5,000 nodes); shared, a scale-up holds a few dozen.
//!
//! ```text
//! JSON / Vec --> SharedRequirements::from: an equal list already held -> that Arc
//!                                          else -> a new one, held for the next
//! read: Deref to the Vec (as the field was) | change: DerefMut copies it first (copy on write)
//! ```
//!
//! It serializes, deserializes and describes its schema as the plain list does: the wire and
//! the CRD are unchanged.

use std::borrow::Cow;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::requirements::NodeClaimRequirement;
use crate::domain::interner::Interner;

/// Every list in use, once.
static LISTS: Interner<Vec<NodeClaimRequirement>> = Interner::new();

/// A `NodeClaim`'s `spec.requirements` (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SharedRequirements(Arc<Vec<NodeClaimRequirement>>);

impl Default for SharedRequirements {
    fn default() -> Self {
        Self::from(Vec::new())
    }
}

impl From<Vec<NodeClaimRequirement>> for SharedRequirements {
    fn from(list: Vec<NodeClaimRequirement>) -> Self {
        Self(LISTS.intern(list))
    }
}

impl Deref for SharedRequirements {
    type Target = Vec<NodeClaimRequirement>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// A change copies the list unless this `NodeClaim` alone holds it; the changed list is its
/// own until the next decode shares it again.
impl DerefMut for SharedRequirements {
    fn deref_mut(&mut self) -> &mut Self::Target {
        Arc::make_mut(&mut self.0)
    }
}

impl Serialize for SharedRequirements {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SharedRequirements {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<NodeClaimRequirement>::deserialize(deserializer).map(Self::from)
    }
}

impl schemars::JsonSchema for SharedRequirements {
    fn inline_schema() -> bool {
        <Vec<NodeClaimRequirement>>::inline_schema()
    }

    fn schema_name() -> Cow<'static, str> {
        <Vec<NodeClaimRequirement>>::schema_name()
    }

    fn schema_id() -> Cow<'static, str> {
        <Vec<NodeClaimRequirement>>::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <Vec<NodeClaimRequirement>>::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::requirements::Operator;

    fn list(types: &[&str]) -> Vec<NodeClaimRequirement> {
        vec![NodeClaimRequirement {
            key: "node.kubernetes.io/instance-type".to_owned(),
            operator: Operator::In,
            values: types.iter().map(|&t| t.to_owned()).collect(),
            min_values: None,
        }]
    }

    #[test]
    fn equal_lists_share_one_allocation_and_a_change_copies() {
        let first: SharedRequirements =
            serde_json::from_value(serde_json::to_value(list(&["m5.large", "c5.large"])).unwrap())
                .unwrap();
        let second = SharedRequirements::from(list(&["m5.large", "c5.large"]));
        let other = SharedRequirements::from(list(&["r5.large"]));
        assert!(Arc::ptr_eq(&first.0, &second.0));
        assert!(!Arc::ptr_eq(&first.0, &other.0));

        let mut changed = second.clone();
        changed[0].values.push("m6i.large".to_owned());
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].values, ["m5.large", "c5.large"]);
        assert_eq!(changed[0].values, ["m5.large", "c5.large", "m6i.large"]);
        assert!(!Arc::ptr_eq(&first.0, &changed.0));
    }

    #[test]
    fn the_wire_and_the_schema_are_the_plain_lists() {
        let plain = list(&["m5.large"]);
        let shared = SharedRequirements::from(plain.clone());
        assert_eq!(
            serde_json::to_value(&shared).unwrap(),
            serde_json::to_value(&plain).unwrap()
        );
        assert_eq!(
            schemars::schema_for!(SharedRequirements),
            schemars::schema_for!(Vec<NodeClaimRequirement>)
        );
    }
}
