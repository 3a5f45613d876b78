//! [`SlimMeta`]: the metadata of a watched Node or NodeClaim as the daemon keeps it.
//!
//! A decoded `ObjectMeta` holds its labels and annotations as `BTreeMap<String, String>`s of
//! their own: a simulated Node's or NodeClaim's 21 to 23 labels and its annotations are about
//! 4 KB, and the Nodes and NodeClaims of one pool, instance type, zone and capacity type carry
//! the same ones. A `SlimMeta` has `ObjectMeta`'s other fields, with the same names and types,
//! and keeps the two maps as [`LabelMap`]s, each shared with every object that has the same
//! one (but a Node's hostname label).
//!
//! ```text
//! ObjectMeta (decoded, or a write's answer) --From--> SlimMeta (maps interned) --> the view
//! SlimMeta --From--> ObjectMeta (maps rebuilt): serialization, a write from a kept object
//! ```
//!
//! [`MetaFields`] reads the few fields that code shared between kinds looks at, of either.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Serialize};

use super::label_map::LabelMap;

/// A watched Node's or NodeClaim's metadata: `ObjectMeta`'s fields with their names and types,
/// but the labels and the annotations, which are [`LabelMap`]s shared with every object that
/// has the same ones (a Node's hostname label its own), and `managedFields`, which is not
/// kept.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlimMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub generation: Option<i64>,
    pub creation_timestamp: Option<Time>,
    pub deletion_timestamp: Option<Time>,
    pub deletion_grace_period_seconds: Option<i64>,
    pub finalizers: Option<Vec<String>>,
    pub owner_references: Option<Vec<OwnerReference>>,
    pub labels: Option<LabelMap>,
    pub annotations: Option<LabelMap>,
}

/// The one kind of metadata built from the other: every field both have moved, the labels
/// and annotations converted by `$map`, the rest (of an `ObjectMeta`) from `$rest`.
macro_rules! moved_meta {
    ($meta:ident, $map:expr $(, $rest:expr)?) => {
        Self {
            name: $meta.name,
            namespace: $meta.namespace,
            uid: $meta.uid,
            resource_version: $meta.resource_version,
            generation: $meta.generation,
            creation_timestamp: $meta.creation_timestamp,
            deletion_timestamp: $meta.deletion_timestamp,
            deletion_grace_period_seconds: $meta.deletion_grace_period_seconds,
            finalizers: $meta.finalizers,
            owner_references: $meta.owner_references,
            labels: $meta.labels.map($map),
            annotations: $meta.annotations.map($map),
            $(..$rest)?
        }
    };
}

impl From<ObjectMeta> for SlimMeta {
    fn from(meta: ObjectMeta) -> Self {
        moved_meta!(meta, LabelMap::from)
    }
}

impl From<SlimMeta> for ObjectMeta {
    fn from(meta: SlimMeta) -> Self {
        moved_meta!(meta, |map: LabelMap| map.to_map(), Self::default())
    }
}

/// Read and written as an `ObjectMeta`.
impl<'de> Deserialize<'de> for SlimMeta {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ObjectMeta::deserialize(deserializer).map(Self::from)
    }
}

impl Serialize for SlimMeta {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ObjectMeta::from(self.clone()).serialize(serializer)
    }
}

/// The metadata fields read of more than one kind, of an `ObjectMeta` or a [`SlimMeta`] alike.
pub trait MetaFields {
    fn finalizers(&self) -> &[String];
    fn annotation(&self, key: &str) -> Option<&str>;
    fn label(&self, key: &str) -> Option<&str>;
    fn name(&self) -> Option<&str>;
    fn namespace(&self) -> Option<&str>;
    fn deletion_timestamp(&self) -> Option<&Time>;
    fn creation_timestamp(&self) -> Option<&Time>;
    fn generation(&self) -> Option<i64>;
}

/// The same field names on both, so one body reads either.
macro_rules! meta_fields {
    ($($meta:ty),*) => {
        $(impl MetaFields for $meta {
            fn finalizers(&self) -> &[String] {
                self.finalizers.as_deref().unwrap_or_default()
            }

            fn annotation(&self, key: &str) -> Option<&str> {
                self.annotations.as_ref()?.get(key).map(String::as_str)
            }

            fn label(&self, key: &str) -> Option<&str> {
                self.labels.as_ref()?.get(key).map(String::as_str)
            }

            fn name(&self) -> Option<&str> {
                self.name.as_deref()
            }

            fn namespace(&self) -> Option<&str> {
                self.namespace.as_deref()
            }

            fn deletion_timestamp(&self) -> Option<&Time> {
                self.deletion_timestamp.as_ref()
            }

            fn creation_timestamp(&self) -> Option<&Time> {
                self.creation_timestamp.as_ref()
            }

            fn generation(&self) -> Option<i64> {
                self.generation
            }
        })*
    };
}

meta_fields!(ObjectMeta, SlimMeta);
