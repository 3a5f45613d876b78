//! Parts of a `NodeClaim` that many `NodeClaim`s have equal, held once: its requirements list
//! ([`SharedRequirements`]) and its resource lists ([`SharedResources`]: `spec.resources.requests`,
//! `status.capacity`, `status.allocatable`).
//!
//! A `NodeClaim` carries the requirements of the launch that made it: the NodePool's, the
//! pods', and an instance-type requirement of up to 60 values. The NodeClaims of one
//! scheduling decision carry equal lists, and each list was its own 2.6 KB of the daemon's
//! view per NodeClaim (13 MB at 5,000 nodes); shared, a scale-up holds a few dozen. Its
//! capacity and allocatable are those of its instance type, and its requests those of the pods
//! planned onto it: three maps of a 640-byte B-tree node and a few strings each, about 2 KB per
//! `NodeClaim` (10 MB at 5,000 nodes), where the NodeClaims of one instance type and workload
//! can hold one of each.
//!
//! ```text
//! JSON / value --> Shared::from: an equal value already held -> that Arc
//!                                else -> a new one, held for the next
//! read: Deref to the value (as the field was) | change: DerefMut copies it first (copy on write)
//! ```
//!
//! A [`Shared`] field serializes, deserializes and describes its schema as the plain value does:
//! the wire and the CRD are unchanged.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::requirements::NodeClaimRequirement;
use crate::domain::interner::Interner;

/// A value that [`Shared`] holds once per distinct value, in its own interner.
pub trait Interned: Hash + Eq + Sized + 'static {
    /// Every value of the type in use, once.
    fn interner() -> &'static Interner<Self>;
}

/// A value shared with every equal one (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Shared<T: Interned>(Arc<T>);

impl<T: Interned> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T: Interned + Default> Default for Shared<T> {
    fn default() -> Self {
        Self::from(T::default())
    }
}

impl<T: Interned> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Self(T::interner().intern(value))
    }
}

impl<T: Interned> Deref for Shared<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// A change copies the value unless this holder alone holds it; the changed value is its own
/// until the next decode shares it again.
impl<T: Interned + Clone> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

impl<T: Interned + Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de, T: Interned + DeserializeOwned> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Self::from)
    }
}

impl<T: Interned + schemars::JsonSchema> schemars::JsonSchema for Shared<T> {
    fn inline_schema() -> bool {
        T::inline_schema()
    }

    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }

    fn schema_id() -> Cow<'static, str> {
        T::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
}

/// A `NodeClaim`'s `spec.requirements`.
pub type SharedRequirements = Shared<Vec<NodeClaimRequirement>>;

static REQUIREMENT_LISTS: Interner<Vec<NodeClaimRequirement>> = Interner::new();

impl Interned for Vec<NodeClaimRequirement> {
    fn interner() -> &'static Interner<Self> {
        &REQUIREMENT_LISTS
    }
}

/// A resource list (`cpu`, `memory`, `pods`...: quantities by name), as a `NodeClaim`'s
/// requests, capacity and allocatable hold it. Reads as the `BTreeMap` it wraps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ResourceList(pub BTreeMap<String, Quantity>);

/// A `NodeClaim`'s `spec.resources.requests`, `status.capacity` or `status.allocatable`.
pub type SharedResources = Shared<ResourceList>;

static RESOURCE_LISTS: Interner<ResourceList> = Interner::new();

impl Interned for ResourceList {
    fn interner() -> &'static Interner<Self> {
        &RESOURCE_LISTS
    }
}

/// A `Quantity` is its text: equality compares texts, an equivalence, as the interner needs.
impl Eq for ResourceList {}

impl Hash for ResourceList {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.0.len());
        for (name, quantity) in &self.0 {
            name.hash(state);
            quantity.0.hash(state);
        }
    }
}

impl Deref for ResourceList {
    type Target = BTreeMap<String, Quantity>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for ResourceList {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl From<BTreeMap<String, Quantity>> for SharedResources {
    fn from(map: BTreeMap<String, Quantity>) -> Self {
        Self::from(ResourceList(map))
    }
}

/// Iterates as the map does (`for (name, quantity) in &status.capacity`).
impl<'a> IntoIterator for &'a SharedResources {
    type Item = (&'a String, &'a Quantity);
    type IntoIter = std::collections::btree_map::Iter<'a, String, Quantity>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.0.iter()
    }
}

/// Compares with a plain map (tests state what a list holds as a map).
impl PartialEq<BTreeMap<String, Quantity>> for SharedResources {
    fn eq(&self, map: &BTreeMap<String, Quantity>) -> bool {
        self.0.0 == *map
    }
}

impl SharedResources {
    /// Whether the list is empty (for `skip_serializing_if`).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.0.is_empty()
    }

    /// The list as a plain map.
    #[must_use]
    pub fn to_map(&self) -> BTreeMap<String, Quantity> {
        self.0.0.clone()
    }
}

impl schemars::JsonSchema for ResourceList {
    fn schema_name() -> Cow<'static, str> {
        <BTreeMap<String, Quantity>>::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <BTreeMap<String, Quantity>>::json_schema(generator)
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

    fn resources(entries: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        entries
            .iter()
            .map(|&(name, value)| (name.to_owned(), Quantity(value.to_owned())))
            .collect()
    }

    #[test]
    fn nodeclaims_of_one_instance_type_share_their_resource_lists() {
        let status = serde_json::json!({
            "capacity": { "cpu": "2", "memory": "8Gi", "pods": "29" },
            "allocatable": { "cpu": "1930m", "memory": "7Gi", "pods": "29" },
        });
        let first: crate::apis::NodeClaimStatus = serde_json::from_value(status.clone()).unwrap();
        let second: crate::apis::NodeClaimStatus = serde_json::from_value(status).unwrap();
        assert!(Arc::ptr_eq(&first.capacity.0, &second.capacity.0));
        assert!(Arc::ptr_eq(&first.allocatable.0, &second.allocatable.0));
        assert!(!Arc::ptr_eq(&first.capacity.0, &first.allocatable.0));
        assert_eq!(
            first.capacity,
            resources(&[("cpu", "2"), ("memory", "8Gi"), ("pods", "29")])
        );
        assert_eq!(first.capacity.get("cpu"), Some(&Quantity("2".to_owned())));

        let mut changed = second.clone();
        changed
            .capacity
            .insert("cpu".to_owned(), Quantity("4".to_owned()));
        assert_eq!(first.capacity.get("cpu"), Some(&Quantity("2".to_owned())));
        assert_eq!(changed.capacity.get("cpu"), Some(&Quantity("4".to_owned())));
        assert!(!Arc::ptr_eq(&first.capacity.0, &changed.capacity.0));
    }

    #[test]
    fn a_resource_list_is_the_plain_map_on_the_wire() {
        let plain = resources(&[("cpu", "500m"), ("memory", "1Gi")]);
        let shared = SharedResources::from(plain.clone());
        assert_eq!(
            serde_json::to_value(&shared).unwrap(),
            serde_json::to_value(&plain).unwrap()
        );
        let empty = crate::apis::NodeClaimStatus::default();
        assert_eq!(serde_json::to_value(&empty).unwrap(), serde_json::json!({}));
        let (same, none) = (
            SharedResources::from(plain.clone()),
            SharedResources::default(),
        );
        assert!(same == plain);
        assert!(none != plain);
    }
}
