//! Decoding watched objects one at a time: a NodePool, NodeClaim or EC2NodeClass this version's
//! types cannot read (written under a newer CRD version, or by hand past the schema) must not
//! fail the whole LIST of its kind, which kube-runtime would retry forever while the daemon
//! waits for its cache to sync.
//!
//! ```text
//! watch stream of Wire objects -> WireFormat::decode -> Ok(object)  -> store, subscribers
//!                                                     \-> Err(skip) -> metric, event, log
//! ```
//!
//! Karpenter's own custom kinds travel as [`Lenient`] (JSON first, then the typed object, so a
//! decode error belongs to one object); the built-in kinds decode as they are, with no second
//! pass, since the API server guarantees their shape.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool};
use kube::Resource;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};

/// An object that failed to decode: its metadata (when that much could be read) and why.
#[derive(Debug, Clone)]
pub struct Undecodable {
    pub metadata: ObjectMeta,
    pub error: String,
}

/// How a watched kind travels on the wire and becomes the typed object.
pub trait WireFormat: Resource<DynamicType = ()> + Sized {
    type Wire: Resource<DynamicType = ()> + DeserializeOwned + Clone + fmt::Debug + Send + Sync;

    /// The typed object, or why this one cannot be read.
    fn decode(wire: Self::Wire) -> Result<Self, Box<Undecodable>>;
}

/// Drops what no reader of the store looks at: `metadata.managedFields` (the API server's
/// field-ownership record, often larger than the rest of a Pod on a real cluster; `None` is
/// "unchanged" should an object from the store ever be written back).
fn strip<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

macro_rules! strict {
    ($($type:ty),*) => {
        $(impl WireFormat for $type {
            type Wire = $type;
            fn decode(mut wire: Self::Wire) -> Result<Self, Box<Undecodable>> {
                strip(&mut wire);
                Ok(wire)
            }
        })*
    };
}

strict!(
    Node,
    Pod,
    DaemonSet,
    PodDisruptionBudget,
    VolumeAttachment,
    PersistentVolumeClaim,
    Namespace
);

macro_rules! lenient {
    ($($type:ty),*) => {
        $(impl WireFormat for $type {
            type Wire = Lenient<$type>;
            fn decode(wire: Self::Wire) -> Result<Self, Box<Undecodable>> {
                let mut object = wire.object.map_err(|error| {
                    Box::new(Undecodable {
                        metadata: wire.metadata,
                        error,
                    })
                })?;
                strip(&mut object);
                Ok(object)
            }
        })*
    };
}

lenient!(NodeClaim, NodePool, EC2NodeClass);

/// A custom object read leniently: its metadata always (or the decode of the whole event
/// fails, as it would for any kind), the typed object if it decodes.
#[derive(Debug, Clone)]
pub struct Lenient<K> {
    metadata: ObjectMeta,
    object: Result<K, String>,
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        let metadata = match value.get("metadata") {
            Some(metadata) => ObjectMeta::deserialize(metadata).map_err(D::Error::custom)?,
            None => ObjectMeta::default(),
        };
        let object = K::deserialize(value).map_err(|e| e.to_string());
        Ok(Self { metadata, object })
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Lenient<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodepool_that_does_not_decode_keeps_its_metadata_and_the_reason() {
        let wire: Lenient<NodePool> = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "future", "uid": "u-1", "resourceVersion": "7"},
            "spec": {"template": {"spec": {"requirements": "not a list"}}},
        }))
        .unwrap();
        let skipped = NodePool::decode(wire).unwrap_err();
        assert_eq!(skipped.metadata.name.as_deref(), Some("future"));
        assert!(skipped.error.contains("invalid type"), "{}", skipped.error);
    }

    #[test]
    fn a_nodepool_that_decodes_is_the_typed_object() {
        let wire: Lenient<NodePool> = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            }}},
        }))
        .unwrap();
        let pool = NodePool::decode(wire).unwrap();
        assert_eq!(pool.metadata.name.as_deref(), Some("default"));
    }

    /// A managedFields entry as a real API server writes it for a kubectl apply.
    fn managed() -> serde_json::Value {
        serde_json::json!([{
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-01-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
        }])
    }

    #[test]
    fn built_in_and_custom_kinds_are_stored_without_managed_fields() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"},
                         "managedFields": managed()},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        }))
        .unwrap();
        assert!(pod.metadata.managed_fields.is_some());
        let pod = Pod::decode(pod).unwrap();
        assert_eq!(pod.metadata.managed_fields, None);
        assert_eq!(pod.metadata.labels.unwrap()["app"], "web");

        let wire: Lenient<NodePool> = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default", "managedFields": managed()},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            }}},
        }))
        .unwrap();
        let pool = NodePool::decode(wire).unwrap();
        assert_eq!(pool.metadata.managed_fields, None);
    }
}
