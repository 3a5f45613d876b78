//! [`PodMeta`]: a pod's metadata as the daemon keeps it, and [`WirePod`], the pod as the watch
//! reads it.
//!
//! A k8s-openapi `ObjectMeta` is about 350 bytes inline before anything is set, and a pod's
//! one-label map is a whole B-tree leaf (640 bytes) of its own; at 50,000 pods that was most of
//! a pod's memory in the view. But the pods of one workload have equal labels, annotations,
//! owner references, namespace and `generateName`: a [`PodMeta`] keeps its own name, uid,
//! version, times and finalizers, and shares the rest ([`SharedPodMeta`]) with every pod that
//! has an equal one, as [`SlimPodSpec`](super::SlimPodSpec) shares a workload's spec.
//!
//! ```text
//! watch (JSON Pod) -> WirePod (ObjectMeta) -> SlimPod { metadata: PodMeta -> Arc<SharedPodMeta> }
//!                                                                (interned: one per workload)
//! ```
//!
//! The fields keep `ObjectMeta`'s names and (but for the boxed ones below) types, the shared ones
//! read through `Deref`, so `pod.metadata.labels.as_ref()` reads as on an `ObjectMeta`; a write
//! through `DerefMut` copies the shared part first. The pod's own strings and its finalizers are
//! boxed slices: they never grow once decoded, and 8 bytes less each, with the spec's node name
//! and the status's phase and nominated node, keep a `SlimPod` in its `Arc` within the
//! allocator's 256-byte class instead of the 320-byte one. The name and uid are `Arc<str>`, which
//! the scheduler's conversion of the pod (kept per pod by the Provisioner and the disruption
//! actor) shares instead of copying; the resourceVersion is a `Box<str>`, the finalizers a
//! `Box<[String]>`. All read as strings through `as_deref()` as the `ObjectMeta` ones do. What is
//! not kept: `managedFields`, `selfLink`, `generation` (a pod has none). A `SlimPod` is not a
//! `kube::Resource` (it has no `ObjectMeta` to lend); [`WirePod`] is the one the watch and kube's
//! API types are built on.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Serialize};

use super::pod::{SlimPod, SlimPodSpec, SlimPodStatus};
use crate::domain::interner::Interner;

/// A pod's metadata: its own fields here, the workload's behind [`Deref`] (module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodMeta {
    pub name: Option<Arc<str>>,
    pub uid: Option<Arc<str>>,
    pub resource_version: Option<Box<str>>,
    pub creation_timestamp: Option<Time>,
    pub deletion_timestamp: Option<Time>,
    pub deletion_grace_period_seconds: Option<i64>,
    pub finalizers: Option<Box<[String]>>,
    pub shared: Arc<SharedPodMeta>,
}

/// The metadata the pods of one workload have in common.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SharedPodMeta {
    pub namespace: Option<String>,
    pub generate_name: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub owner_references: Option<Vec<OwnerReference>>,
}

/// Every pod's shared metadata, one per distinct value.
static SHARED_METAS: Interner<SharedPodMeta> = Interner::new();

/// `OwnerReference` only derives `PartialEq`, but holds no float: equality is an equivalence,
/// as the interner needs.
impl Eq for SharedPodMeta {}

/// Hashes the namespace, the labels and the owners' uids; the interner's equality compares the
/// rest. Equal values hash equally, as `Hash` must.
impl Hash for SharedPodMeta {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.namespace.hash(state);
        self.labels.hash(state);
        for owner in self.owner_references.iter().flatten() {
            owner.uid.hash(state);
        }
    }
}

impl Deref for PodMeta {
    type Target = SharedPodMeta;

    fn deref(&self) -> &SharedPodMeta {
        &self.shared
    }
}

impl DerefMut for PodMeta {
    fn deref_mut(&mut self) -> &mut SharedPodMeta {
        Arc::make_mut(&mut self.shared)
    }
}

impl From<ObjectMeta> for PodMeta {
    fn from(meta: ObjectMeta) -> Self {
        Self {
            name: meta.name.map(Arc::from),
            uid: meta.uid.map(Arc::from),
            resource_version: meta.resource_version.map(Box::from),
            creation_timestamp: meta.creation_timestamp,
            deletion_timestamp: meta.deletion_timestamp,
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            finalizers: meta.finalizers.map(Box::from),
            shared: SHARED_METAS.intern(SharedPodMeta {
                namespace: meta.namespace,
                generate_name: meta.generate_name,
                labels: meta.labels,
                annotations: meta.annotations,
                owner_references: meta.owner_references.map(shrunk),
            }),
        }
    }
}

impl From<PodMeta> for ObjectMeta {
    fn from(meta: PodMeta) -> Self {
        let shared = Arc::unwrap_or_clone(meta.shared);
        Self {
            name: meta.name.as_deref().map(str::to_owned),
            uid: meta.uid.as_deref().map(str::to_owned),
            resource_version: meta.resource_version.map(String::from),
            creation_timestamp: meta.creation_timestamp,
            deletion_timestamp: meta.deletion_timestamp,
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            finalizers: meta.finalizers.map(Vec::from),
            namespace: shared.namespace,
            generate_name: shared.generate_name,
            labels: shared.labels,
            annotations: shared.annotations,
            owner_references: shared.owner_references,
            ..Self::default()
        }
    }
}

/// Read and written as an `ObjectMeta`.
impl<'de> Deserialize<'de> for PodMeta {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ObjectMeta::deserialize(deserializer).map(Self::from)
    }
}

impl Serialize for PodMeta {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ObjectMeta::from(self.clone()).serialize(serializer)
    }
}

/// A pod as the watch reads it: [`SlimPod`]'s fields with a whole `ObjectMeta`, so kube's
/// watcher, which tracks `metadata.resourceVersion` through `kube::Resource`, can read it. It
/// becomes a [`SlimPod`] before anything keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WirePod {
    pub metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<SlimPodSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<SlimPodStatus>,
}

impl From<WirePod> for SlimPod {
    fn from(pod: WirePod) -> Self {
        Self {
            metadata: pod.metadata.into(),
            spec: pod.spec,
            status: pod.status,
        }
    }
}

served_as!(WirePod, Pod);

/// What `kube::ResourceExt` answers of a `Pod`, answered of a [`SlimPod`].
impl SlimPod {
    /// The name, or (for a pod not yet created) its `generateName`.
    #[must_use]
    pub fn name_any(&self) -> String {
        let meta = &self.metadata;
        meta.name
            .as_deref()
            .or(meta.generate_name.as_deref())
            .unwrap_or_default()
            .to_owned()
    }

    #[must_use]
    pub fn namespace(&self) -> Option<String> {
        self.metadata.namespace.clone()
    }

    #[must_use]
    pub fn uid(&self) -> Option<String> {
        self.metadata.uid.as_deref().map(str::to_owned)
    }

    #[must_use]
    pub fn resource_version(&self) -> Option<String> {
        self.metadata.resource_version.as_deref().map(str::to_owned)
    }

    /// The labels (empty when it has none).
    #[must_use]
    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.metadata.labels.as_ref().unwrap_or(&EMPTY)
    }

    /// The annotations (empty when it has none).
    #[must_use]
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        self.metadata.annotations.as_ref().unwrap_or(&EMPTY)
    }

    #[must_use]
    pub fn owner_references(&self) -> &[OwnerReference] {
        self.metadata
            .owner_references
            .as_deref()
            .unwrap_or_default()
    }
}

static EMPTY: BTreeMap<String, String> = BTreeMap::new();

/// A list decoded with room to spare, sized to its entries (it is kept as long as the pod).
fn shrunk<T>(mut list: Vec<T>) -> Vec<T> {
    list.shrink_to_fit();
    list
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    fn meta(name: &str, app: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("shop".to_owned()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some("7".to_owned()),
            labels: Some([("app".to_owned(), app.to_owned())].into()),
            annotations: Some([("a".to_owned(), "b".to_owned())].into()),
            owner_references: Some(vec![OwnerReference {
                kind: "ReplicaSet".to_owned(),
                name: format!("{app}-rs"),
                uid: format!("rs-{app}"),
                ..OwnerReference::default()
            }]),
            finalizers: Some(vec!["f".to_owned()]),
            managed_fields: Some(vec![ManagedFieldsEntry::default()]),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn pods_of_one_workload_share_their_metadata_and_a_write_copies_it() {
        let (a, b, other) = (
            PodMeta::from(meta("a", "web")),
            PodMeta::from(meta("b", "web")),
            PodMeta::from(meta("c", "db")),
        );
        assert!(Arc::ptr_eq(&a.shared, &b.shared));
        assert!(!Arc::ptr_eq(&a.shared, &other.shared));
        assert_eq!(a.name.as_deref(), Some("a"));
        assert_eq!(b.uid.as_deref(), Some("uid-b"));
        assert_eq!(a.labels.as_ref().unwrap()["app"], "web");
        assert_eq!(other.labels.as_ref().unwrap()["app"], "db");

        let mut changed = b.clone();
        changed
            .labels
            .get_or_insert_default()
            .insert("tier".to_owned(), "front".to_owned());
        assert!(!Arc::ptr_eq(&changed.shared, &a.shared));
        assert_eq!(a.labels.as_ref().unwrap().len(), 1, "not written through");
        assert_eq!(changed.labels.as_ref().unwrap().len(), 2);
    }

    #[test]
    fn it_round_trips_through_object_meta_less_what_is_not_kept() {
        let original = meta("a", "web");
        let back = ObjectMeta::from(PodMeta::from(original.clone()));
        assert_eq!(back.managed_fields, None);
        assert_eq!(
            back,
            ObjectMeta {
                managed_fields: None,
                ..original
            }
        );
        let json = serde_json::to_value(PodMeta::from(meta("a", "web"))).unwrap();
        assert_eq!(json["labels"]["app"], "web");
        assert_eq!(json["ownerReferences"][0]["uid"], "rs-web");
        assert!(json.get("managedFields").is_none());
        let read: PodMeta = serde_json::from_value(json).unwrap();
        assert_eq!(read, PodMeta::from(meta("a", "web")));
    }

    #[test]
    fn it_answers_what_resource_ext_answers_of_a_pod() {
        use kube_core::ResourceExt as _;
        let full = Pod {
            metadata: meta("a", "web"),
            ..Pod::default()
        };
        let slim = SlimPod::from(full.clone());
        assert_eq!(slim.name_any(), full.name_any());
        assert_eq!(slim.namespace(), full.namespace());
        assert_eq!(slim.uid(), full.uid());
        assert_eq!(slim.resource_version(), full.resource_version());
        assert_eq!(slim.labels(), full.labels());
        assert_eq!(slim.annotations(), full.annotations());
        assert_eq!(slim.owner_references(), full.owner_references());

        let unnamed = SlimPod::from(Pod {
            metadata: ObjectMeta {
                generate_name: Some("web-".to_owned()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        });
        assert_eq!(unnamed.name_any(), "web-");
        assert!(unnamed.labels().is_empty());
        assert!(unnamed.owner_references().is_empty());
    }

    #[test]
    fn the_wire_pod_is_addressed_as_a_v1_pod_and_becomes_a_slim_one() {
        use kube_core::Resource;
        assert_eq!(WirePod::kind(&()), "Pod");
        assert_eq!(WirePod::api_version(&()), "v1");
        assert_eq!(WirePod::plural(&()), "pods");
        let wire = WirePod {
            metadata: meta("a", "web"),
            ..WirePod::default()
        };
        let slim = SlimPod::from(wire);
        assert_eq!(slim.metadata, PodMeta::from(meta("a", "web")));
    }
}
