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
//! Karpenter's own custom kinds travel as [`Lenient`] (each object's text set aside, then
//! decoded as the type, so a decode error belongs to one object and only such an object is
//! read a second time, for its metadata); the built-in kinds decode as they are, since the API
//! server guarantees their shape. Pods decode straight into a
//! [`WirePod`], which names only the fields the daemon reads, so the rest of a Pod is never
//! built, and become a [`SlimPod`], whose metadata is shared with its workload's pods; Nodes
//! decode straight into a [`WireNode`] (its capacity and allocatable shared with every node of
//! equal ones) and become a [`SlimNode`], whose labels and annotations are shared too, as a
//! NodeClaim's are once it becomes a [`SlimNodeClaim`]. Every
//! decoded object then loses what no reader of the store looks at (`managedFields`, kubectl's
//! last-applied annotation) before the store keeps it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_core::apis::{
    EC2NodeClass, NodeClaim, NodePool, SlimNode, SlimNodeClaim, SlimPod, WireNode, WirePod,
};
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
pub trait WireFormat: Sized {
    type Wire: Resource<DynamicType = ()> + DeserializeOwned + Clone + fmt::Debug + Send + Sync;

    /// The typed object, or why this one cannot be read.
    fn decode(wire: Self::Wire) -> Result<Self, Box<Undecodable>>;
}

/// Drops what no reader of the store looks at, of every kind: `metadata.managedFields` (the API
/// server's field-ownership record, often larger than the rest of a Pod on a real cluster;
/// `None` is "unchanged" should an object from the store ever be written back) and kubectl's
/// last-applied annotation (the whole object again, as last applied); then what
/// [`Slim::slim`] drops of the kind. Every write re-reads the object from the API server
/// before patching it (`KubeClusterApi::update`), so nothing dropped here is written back.
fn strip<K: Resource + Slim>(object: &mut K) {
    let metadata = object.meta_mut();
    metadata.managed_fields = None;
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        dense(annotations);
    }
    if let Some(labels) = metadata.labels.as_mut() {
        dense(labels);
    }
    object.slim();
    object.compact();
}

/// Entries a B-tree node of the standard library's `BTreeMap` holds.
const BTREE_NODE_ENTRIES: usize = 11;

/// Rebuilds a map whose entries fill more than one B-tree node so that its nodes are full.
///
/// A map decodes one entry at a time in key order, and a full node splits about in half, so
/// such a map is left with nodes about half full: a simulated Node's or NodeClaim's 21 to 23
/// labels took three leaves and a root, where two leaves and a root hold them (each node 640
/// bytes with the allocator's rounding; the 5,000-node scale run held 119,000 such nodes at
/// its peak, most of them in the maps of watched Nodes and NodeClaims). Collected from its
/// sorted entries at once (`FromIterator` builds in bulk), every node but the last two is
/// full. The entries move; nothing is copied. A clone keeps the shape it is given, so
/// [`Slim::compact`] keeps the map dense.
fn dense<K: Ord, V>(map: &mut BTreeMap<K, V>) {
    if map.len() > BTREE_NODE_ENTRIES {
        *map = std::mem::take(map).into_iter().collect();
    }
}

/// The annotation `kubectl apply` leaves on any kind it applied.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The fields of a kind that no reader of the store looks at, dropped as each object arrives.
/// Pods need nothing here: they decode as [`SlimPod`], which has only the fields read.
pub trait Slim: Clone {
    fn slim(&mut self) {}

    /// Gives back the spare capacity decoding leaves in the object's lists (a decoded list
    /// grows by doubling from four entries, so a one-entry list holds room for four), as the
    /// object is kept in the store for as long as it is current: by default a clone, whose
    /// lists are exactly sized.
    fn compact(&mut self) {
        *self = self.clone();
    }
}

/// A Node decodes as a [`WireNode`], which never reads what the daemon does not; its lists
/// are sized as it becomes a [`SlimNode`].
impl Slim for WireNode {
    fn compact(&mut self) {}
}

/// A pod's only lists outside its shared spec are its owner references and finalizers (its
/// conditions are sized as they are filtered), which becoming a [`SlimPod`] sizes: there is
/// nothing for a clone to give back, on the busiest watch.
impl Slim for WirePod {
    fn compact(&mut self) {}
}
impl Slim for DaemonSet {}
impl Slim for PodDisruptionBudget {}
impl Slim for VolumeAttachment {}
impl Slim for PersistentVolumeClaim {}
impl Slim for Namespace {}
/// A NodeClaim's labels and annotations are interned as it becomes a [`SlimNodeClaim`], so a
/// clone of them would be thrown away (on every NodeClaim event): only the lists it keeps as
/// decoded are sized.
impl Slim for NodeClaim {
    fn compact(&mut self) {
        if let Some(finalizers) = self.metadata.finalizers.as_mut() {
            finalizers.shrink_to_fit();
        }
        if let Some(owners) = self.metadata.owner_references.as_mut() {
            owners.shrink_to_fit();
        }
        self.spec = self.spec.clone();
        self.status = self.status.clone();
    }
}
impl Slim for NodePool {}
impl Slim for EC2NodeClass {}

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

/// A pod becomes a [`SlimPod`], its metadata shared with its workload's pods.
impl WireFormat for SlimPod {
    type Wire = WirePod;

    fn decode(mut wire: WirePod) -> Result<Self, Box<Undecodable>> {
        strip(&mut wire);
        Ok(Self::from(wire))
    }
}

/// A Node becomes a [`SlimNode`], its labels and annotations shared with every Node that has
/// the same ones (but the hostname), its lists sized by a clone.
impl WireFormat for SlimNode {
    type Wire = WireNode;

    fn decode(mut wire: WireNode) -> Result<Self, Box<Undecodable>> {
        strip(&mut wire);
        Ok(Self::from(wire).clone())
    }
}

strict!(
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
                let mut object = wire.object?;
                strip(&mut object);
                Ok(object)
            }
        })*
    };
}

lenient!(NodePool, EC2NodeClass);

/// A NodeClaim is read leniently and becomes a [`SlimNodeClaim`], its labels and annotations
/// shared with every NodeClaim that has the same ones.
impl WireFormat for SlimNodeClaim {
    type Wire = Lenient<NodeClaim>;

    fn decode(wire: Self::Wire) -> Result<Self, Box<Undecodable>> {
        let mut object = wire.object?;
        strip(&mut object);
        Ok(Self::from(object))
    }
}

/// A custom object read leniently: the typed object if it decodes, else its metadata (or the
/// decode of the whole event fails, as it would for any kind) and why.
#[derive(Debug, Clone)]
pub struct Lenient<K> {
    object: Result<K, Box<Undecodable>>,
}

/// Only the metadata of an object that did not decode as its type.
#[derive(Deserialize)]
struct MetadataOnly {
    #[serde(default)]
    metadata: ObjectMeta,
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Lenient<K> {
    /// The object's text is set aside as it is and decoded as the type; only when that fails
    /// is it read again for its metadata. (Read first into a `serde_json::Value`, every
    /// NodeClaim on the watch was built twice, map by map, and its metadata a third time.)
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<serde_json::value::RawValue>::deserialize(deserializer)?;
        let object = serde_json::from_str::<K>(raw.get()).map_err(|error| {
            serde_json::from_str::<MetadataOnly>(raw.get()).map(|only| {
                Box::new(Undecodable {
                    metadata: only.metadata,
                    error: error.to_string(),
                })
            })
        });
        match object {
            Ok(object) => Ok(Self { object: Ok(object) }),
            Err(Ok(undecodable)) => Ok(Self {
                object: Err(undecodable),
            }),
            Err(Err(unreadable)) => Err(D::Error::custom(unreadable)),
        }
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
        match &self.object {
            Ok(object) => object.meta(),
            Err(undecodable) => &undecodable.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.object {
            Ok(object) => object.meta_mut(),
            Err(undecodable) => &mut undecodable.metadata,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use karpenter_core::apis::MetaFields;
    use karpenter_core::domain::scheduling::SchedulingPod;

    /// A Pod as a real cluster serves it: applied with kubectl, with env, probes, mounts, an
    /// ephemeral debug container and container statuses.
    fn real_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web-7d4b9c6f5-x2x9q", "namespace": "shop", "uid": "u-1",
                "resourceVersion": "812", "labels": {"app": "web"},
                "annotations": {
                    "karpenter.sh/do-not-disrupt": "true",
                    LAST_APPLIED: "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"spec\":{}}",
                },
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-7d4b9c6f5", "uid": "rs-1", "controller": true}],
            },
            "spec": {
                "nodeName": "ip-10-0-1-7.ec2.internal",
                "nodeSelector": {"kubernetes.io/arch": "amd64"},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "priority": 100,
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web"}}],
                "initContainers": [{
                    "name": "log-shipper", "image": "fluent-bit:3", "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "50m"}},
                    "env": [{"name": "LEVEL", "value": "info"}],
                }],
                "containers": [{
                    "name": "web", "image": "shop/web:1.42",
                    "command": ["/bin/web"], "args": ["--port=8080"],
                    "env": [{"name": "DB_HOST", "value": "db.shop"}, {"name": "MODE", "value": "prod"}],
                    "ports": [{"containerPort": 8080, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                }],
                "ephemeralContainers": [{"name": "debugger", "image": "busybox"}],
            },
            "status": {
                "phase": "Running",
                "nominatedNodeName": "ip-10-0-1-7.ec2.internal",
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "web", "image": "shop/web:1.42", "imageID": "sha256:abc",
                    "ready": true, "restartCount": 0, "state": {"running": {}}}],
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_keeps_what_the_daemon_reads_and_drops_the_rest() {
        let json = serde_json::to_value(real_pod()).unwrap();
        let pod = SlimPod::decode(serde_json::from_value(json).unwrap()).unwrap();
        let meta = &pod.metadata;
        let annotations = meta.annotations.as_ref().unwrap();
        assert!(!annotations.contains_key(LAST_APPLIED));
        assert_eq!(annotations["karpenter.sh/do-not-disrupt"], "true");
        assert_eq!(meta.labels.as_ref().unwrap()["app"], "web");
        assert_eq!(
            meta.owner_references.as_ref().unwrap()[0].kind,
            "ReplicaSet"
        );
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("ip-10-0-1-7.ec2.internal"));
        assert!(spec.node_selector.is_some() && spec.tolerations.is_some());
        assert_eq!(spec.priority, Some(100));
        assert!(spec.volumes.is_some(), "volume detachment reads the claims");
        let web = &spec.containers[0];
        assert_eq!(web.name, "web");
        assert_eq!(
            web.resources,
            real_pod().spec.unwrap().containers[0].resources
        );
        assert_eq!(web.ports.as_ref().unwrap()[0].host_port, Some(8080));
        let sidecar = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
        assert!(sidecar.resources.is_some());
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.conditions.as_ref().unwrap().len(), 2);
        assert!(status.nominated_node_name.is_some());
        // What the daemon does not read is not there to be read.
        let kept = serde_json::to_value(&pod).unwrap();
        assert!(kept["spec"].get("ephemeralContainers").is_none());
        assert!(kept["spec"]["containers"][0].get("env").is_none());
        assert!(
            kept["spec"]["containers"][0]
                .get("readinessProbe")
                .is_none()
        );
        assert!(kept["status"].get("containerStatuses").is_none());
        // The scheduler reads the decoded pod as it reads the whole one.
        let whole = SchedulingPod::from_pod(&SlimPod::from(real_pod())).unwrap();
        let decoded = SchedulingPod::from_pod(&pod).unwrap();
        assert_eq!(format!("{whole:?}"), format!("{decoded:?}"));
    }

    #[test]
    fn a_node_keeps_what_the_daemon_reads_and_never_decodes_the_kubelets_account_of_itself() {
        let json = serde_json::json!({
            "metadata": {"name": "n", "labels": {"karpenter.sh/nodepool": "default"},
                         "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {"providerID": "aws:///us-west-2a/i-1", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "capacity": {"cpu": "4"}, "allocatable": {"cpu": "3900m"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320_000}],
                "volumesInUse": ["kubernetes.io/csi/ebs.csi.aws.com^vol-1"],
                "volumesAttached": [{"name": "kubernetes.io/csi/ebs.csi.aws.com^vol-1", "devicePath": ""}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {"architecture": "arm64", "bootID": "b", "containerRuntimeVersion": "containerd://2.0",
                    "kernelVersion": "6.1", "kubeProxyVersion": "", "kubeletVersion": "v1.33.0",
                    "machineID": "m", "operatingSystem": "linux", "osImage": "Amazon Linux 2023", "systemUUID": "u"},
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "runtimeHandlers": [{"name": "runc", "features": {"recursiveReadOnlyMounts": true}}],
                "features": {"supplementalGroupsPolicy": true},
            },
        });
        let whole: k8s_openapi::api::core::v1::Node = serde_json::from_value(json.clone()).unwrap();
        let wire: WireNode = serde_json::from_value(json).unwrap();
        let slim = SlimNode::decode(wire).unwrap();
        let kept = serde_json::to_value(&slim).unwrap();
        assert!(kept["metadata"].get("managedFields").is_none());
        let status = slim.status.as_ref().unwrap();
        let original = whole.status.as_ref().unwrap();
        assert_eq!(
            status.capacity.as_ref().unwrap(),
            original.capacity.as_ref().unwrap()
        );
        assert_eq!(
            status.allocatable.as_ref().unwrap(),
            original.allocatable.as_ref().unwrap()
        );
        assert_eq!(status.conditions, original.conditions);
        assert_eq!(slim.spec, whole.spec);
        assert_eq!(
            slim.metadata.labels.unwrap(),
            whole.metadata.labels.unwrap()
        );
        let kept_status: Vec<&String> = kept["status"].as_object().unwrap().keys().collect();
        assert_eq!(kept_status, ["allocatable", "capacity", "conditions"]);
    }

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
    fn custom_objects_decode_from_watch_text_and_an_unreadable_metadata_fails_the_event() {
        let event = r#"{"type":"MODIFIED","object":{"apiVersion":"karpenter.sh/v1",
            "kind":"NodePool","metadata":{"name":"next","resourceVersion":"9"},
            "spec":{"template":{"spec":{"requirements":{"key":"zone"}}}}}}"#;
        let event: kube::core::WatchEvent<Lenient<NodePool>> = serde_json::from_str(event).unwrap();
        let kube::core::WatchEvent::Modified(wire) = event else {
            panic!("a modification");
        };
        assert_eq!(wire.meta().resource_version.as_deref(), Some("9"));
        let skipped = NodePool::decode(wire).unwrap_err();
        assert_eq!(skipped.metadata.name.as_deref(), Some("next"));
        assert!(skipped.error.contains("invalid type"), "{}", skipped.error);

        let unreadable = r#"{"type":"ADDED","object":{"kind":"NodePool","metadata":{"name":7}}}"#;
        let error = serde_json::from_str::<kube::core::WatchEvent<Lenient<NodePool>>>(unreadable)
            .unwrap_err();
        assert!(error.to_string().contains("invalid type"), "{error}");
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
        let pod: WirePod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"},
                         "managedFields": managed()},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        }))
        .unwrap();
        assert!(pod.metadata.managed_fields.is_some());
        let pod = SlimPod::decode(pod).unwrap();
        let kept = serde_json::to_value(&pod).unwrap();
        assert!(kept["metadata"].get("managedFields").is_none(), "{kept}");
        assert_eq!(pod.metadata.labels.as_ref().unwrap()["app"], "web");

        let wire: Lenient<NodePool> = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default", "managedFields": managed(),
                         "annotations": {LAST_APPLIED: "{}", "team": "a"}},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            }}},
        }))
        .unwrap();
        let pool = NodePool::decode(wire).unwrap();
        assert_eq!(pool.metadata.managed_fields, None);
        let annotations = pool.metadata.annotations.unwrap();
        assert!(!annotations.contains_key(LAST_APPLIED), "{annotations:?}");
        assert_eq!(annotations["team"], "a");
    }

    #[test]
    fn a_nodeclaim_decodes_slim_with_its_lists_sized_and_its_labels_shared() {
        let wire = |name: &str| -> Lenient<NodeClaim> {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {
                    "name": name,
                    "labels": {"karpenter.sh/nodepool": "default", "team": "a"},
                    "annotations": {LAST_APPLIED: "{}", "karpenter.sh/nodepool-hash": "1"},
                    "finalizers": ["karpenter.sh/termination"],
                },
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [],
                    "taints": [{"key": "dedicated", "effect": "NoSchedule"}],
                },
                "status": {"conditions": [{
                    "type": "Launched", "status": "True", "reason": "Launched", "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }]},
            }))
            .unwrap()
        };
        let a = SlimNodeClaim::decode(wire("a")).unwrap();
        let b = SlimNodeClaim::decode(wire("b")).unwrap();
        assert_eq!(a.metadata.label("team"), Some("a"));
        assert_eq!(
            a.metadata.annotation("karpenter.sh/nodepool-hash"),
            Some("1")
        );
        assert_eq!(a.metadata.annotation(LAST_APPLIED), None);
        let labels = |claim: &SlimNodeClaim| claim.metadata.labels.clone().unwrap();
        assert!(labels(&a).shares_with(&labels(&b)));
        // A decoded list grows by doubling from four entries; a kept one holds no spare room.
        let finalizers = a.metadata.finalizers.as_ref().unwrap();
        assert_eq!((finalizers.len(), finalizers.capacity()), (1, 1));
        assert_eq!(a.spec.taints.capacity(), 1);
        assert_eq!(a.status.as_ref().unwrap().conditions.capacity(), 1);
    }
}
