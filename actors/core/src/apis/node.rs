//! [`SlimNode`]: a `v1` Node as the daemon keeps it, with only the fields it reads.
//!
//! A k8s-openapi `Node` carries every field of the API inline: about 1.8 KB before any is set
//! (the kubelet's system info, config source, daemon endpoints...), and its capacity and
//! allocatable are two maps of a B-tree node and a few strings each, equal on every node of
//! one instance type. At 5,000 nodes the watched Nodes were about 40 MB of the daemon's view.
//! A `SlimNode` keeps the metadata, the spec (taints, provider ID, `unschedulable`) and of the
//! status the capacity, allocatable, conditions and phase, with the same JSON and Rust field
//! names, so `node.spec.as_ref().and_then(|s| s.provider_id.as_deref())` reads as before; the
//! two resource lists are [`SharedResources`], held once per distinct list as a NodeClaim's
//! are.
//!
//! Its metadata is a [`SlimMeta`]: `ObjectMeta`'s fields, but the labels and annotations are
//! [`LabelMap`](super::LabelMap)s, which share every entry but the hostname with the Nodes
//! that have the same ones (a Node's 24 labels and 4 annotations were 4 KB of its 5 KB). A
//! `SlimMeta` is not an `ObjectMeta`, so a `SlimNode` is not a `kube::Resource`: the watch
//! reads a [`WireNode`] (the same fields with a whole `ObjectMeta`), which becomes a
//! `SlimNode` before anything keeps it, as a pod's [`WirePod`](super::WirePod) does.
//! [`MetaFields`](super::MetaFields) reads the few fields that code shared between kinds looks
//! at, of either.
//!
//! ```text
//! watch (JSON Node) -> serde -> WireNode (capacity, allocatable interned)
//!                   -> SlimNode (labels, annotations shared) -> the view's store
//!                                                      -> registration, scheduling, disruption,
//!                                                         metrics, the simulation
//! k8s-openapi Node (writes' answers, tests) -> From -> SlimNode
//! ```
//!
//! What is not kept (never decoded): the kubelet's images, volumes, addresses, system info,
//! daemon endpoints, config, runtime handlers and features, and `managedFields`. A write
//! never starts from a `SlimNode`: the daemon's writes re-read the Node from the API server,
//! so nothing it drops is ever written back.

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::shared::SharedResources;
use super::slim_meta::SlimMeta;

/// A Node with the fields the daemon reads (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SlimNode {
    pub metadata: SlimMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<NodeSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<SlimNodeStatus>,
}

impl SlimNode {
    /// Its name (what `kube::ResourceExt::name_any` answers of a Node).
    #[must_use]
    pub fn name_any(&self) -> String {
        self.metadata.name.clone().unwrap_or_default()
    }

    /// Whether the node carries Karpenter's `karpenter.sh/disrupted:NoSchedule` taint (a
    /// disruption is taking it down).
    #[must_use]
    pub fn is_disrupted(&self) -> bool {
        self.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|taints| {
                taints
                    .iter()
                    .any(|t| t.key == super::labels::DISRUPTED_TAINT && t.effect == "NoSchedule")
            })
    }
}

/// A Node as the watch reads it: [`SlimNode`]'s fields with a whole `ObjectMeta`, so kube's
/// watcher, which tracks `metadata.resourceVersion` through `kube::Resource`, can read it. It
/// becomes a [`SlimNode`] before anything keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WireNode {
    pub metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<NodeSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<SlimNodeStatus>,
}

impl From<WireNode> for SlimNode {
    fn from(node: WireNode) -> Self {
        Self {
            metadata: node.metadata.into(),
            spec: node.spec,
            status: node.status,
        }
    }
}

/// The status fields of [`SlimNode`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SlimNodeStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<SharedResources>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocatable: Option<SharedResources>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<NodeCondition>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

impl From<Node> for SlimNode {
    fn from(node: Node) -> Self {
        Self {
            metadata: node.metadata.into(),
            spec: node.spec,
            status: node.status.map(SlimNodeStatus::from),
        }
    }
}

/// Clones only what a `SlimNode` keeps (a whole Node's status carries its images and system
/// info, most of its size).
impl From<&Node> for SlimNode {
    fn from(node: &Node) -> Self {
        Self {
            metadata: node.metadata.clone().into(),
            spec: node.spec.clone(),
            status: node.status.as_ref().map(|status| SlimNodeStatus {
                capacity: status.capacity.clone().map(SharedResources::from),
                allocatable: status.allocatable.clone().map(SharedResources::from),
                conditions: status.conditions.clone(),
                phase: status.phase.clone(),
            }),
        }
    }
}

impl From<NodeStatus> for SlimNodeStatus {
    fn from(status: NodeStatus) -> Self {
        Self {
            capacity: status.capacity.map(SharedResources::from),
            allocatable: status.allocatable.map(SharedResources::from),
            conditions: status.conditions,
            phase: status.phase,
        }
    }
}

/// The Node a `SlimNode` was read from, less what it does not keep (tests compare the two).
impl From<SlimNode> for Node {
    fn from(node: SlimNode) -> Self {
        Self {
            metadata: node.metadata.into(),
            spec: node.spec,
            status: node.status.map(|status| NodeStatus {
                capacity: status.capacity.map(|list| list.to_map()),
                allocatable: status.allocatable.map(|list| list.to_map()),
                conditions: status.conditions,
                phase: status.phase,
                ..NodeStatus::default()
            }),
        }
    }
}

served_as!(WireNode, Node);

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    fn node_json(name: &str, cpu: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"providerID": format!("aws:///us-west-2a/{name}"), "unschedulable": true},
            "status": {
                "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": cpu, "memory": "7Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                "phase": "Running",
                "nodeInfo": {"kubeletVersion": "v1.33.0", "machineID": "m", "bootID": "b",
                             "containerRuntimeVersion": "c", "kernelVersion": "k",
                             "kubeProxyVersion": "", "operatingSystem": "linux",
                             "architecture": "amd64", "osImage": "o", "systemUUID": "s"},
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "images": [{"names": ["registry/image:1"], "sizeBytes": 1}]
            }
        })
    }

    #[test]
    fn decodes_the_fields_it_keeps_and_skips_the_rest() {
        let node: SlimNode = serde_json::from_value(node_json("a", "4")).unwrap();
        assert_eq!(node.metadata.name.as_deref(), Some("a"));
        assert_eq!(
            node.metadata
                .labels
                .as_ref()
                .unwrap()
                .get("kubernetes.io/hostname")
                .unwrap(),
            "a"
        );
        let spec = node.spec.as_ref().unwrap();
        assert_eq!(spec.provider_id.as_deref(), Some("aws:///us-west-2a/a"));
        assert_eq!(spec.unschedulable, Some(true));
        let status = node.status.as_ref().unwrap();
        let cpu = Quantity("4".to_owned());
        assert_eq!(status.capacity.as_ref().unwrap().get("cpu"), Some(&cpu));
        assert_eq!(
            status.allocatable.as_ref().unwrap().get("memory"),
            Some(&Quantity("7Gi".to_owned()))
        );
        assert_eq!(status.conditions.as_ref().unwrap()[0].type_, "Ready");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let written = serde_json::to_value(&node).unwrap();
        assert!(written["status"].get("nodeInfo").is_none());
        assert!(written["status"].get("images").is_none());
    }

    #[test]
    fn nodes_of_one_instance_type_share_their_resource_lists() {
        let a: SlimNode = serde_json::from_value(node_json("a", "4")).unwrap();
        let b: SlimNode = serde_json::from_value(node_json("b", "4")).unwrap();
        let c: SlimNode = serde_json::from_value(node_json("c", "8")).unwrap();
        let capacity = |node: &SlimNode| {
            let list: &BTreeMap<String, Quantity> =
                node.status.as_ref().unwrap().capacity.as_ref().unwrap();
            std::ptr::from_ref(list)
        };
        assert_eq!(capacity(&a), capacity(&b), "equal lists are one allocation");
        assert_ne!(capacity(&a), capacity(&c), "a different list is its own");
    }

    #[test]
    fn nodes_alike_but_for_their_hostname_share_their_labels_and_annotations() {
        let with_pool = |name: &str, pool: &str| {
            let mut json = node_json(name, "4");
            json["metadata"]["labels"]["karpenter.sh/nodepool"] = pool.into();
            json["metadata"]["annotations"] =
                serde_json::json!({"karpenter.sh/nodepool-hash": "1"});
            serde_json::from_value::<SlimNode>(json).unwrap()
        };
        let (a, b, other) = (
            with_pool("a", "default"),
            with_pool("b", "default"),
            with_pool("c", "batch"),
        );
        let labels = |node: &SlimNode| node.metadata.labels.clone().unwrap();
        assert!(labels(&a).shares_with(&labels(&b)));
        assert!(!labels(&a).shares_with(&labels(&other)));
        assert_eq!(labels(&a).get("kubernetes.io/hostname").unwrap(), "a");
        assert_eq!(labels(&b).get("kubernetes.io/hostname").unwrap(), "b");
        let annotations = |node: &SlimNode| node.metadata.annotations.clone().unwrap();
        assert!(annotations(&a).shares_with(&annotations(&other)));
        let written = serde_json::to_value(&a).unwrap();
        assert_eq!(written["metadata"]["labels"]["kubernetes.io/hostname"], "a");
        assert_eq!(
            written["metadata"]["labels"]["karpenter.sh/nodepool"],
            "default"
        );
    }

    #[test]
    fn converts_from_and_to_a_whole_node_keeping_what_it_reads() {
        let whole: Node = serde_json::from_value(node_json("a", "4")).unwrap();
        let slim = SlimNode::from(whole.clone());
        let decoded: SlimNode = serde_json::from_value(node_json("a", "4")).unwrap();
        assert_eq!(slim, decoded, "converting keeps what decoding keeps");
        let back = Node::from(slim);
        assert_eq!(back.metadata, whole.metadata);
        assert_eq!(back.spec, whole.spec);
        let (status, original) = (back.status.unwrap(), whole.status.unwrap());
        assert_eq!(status.capacity, original.capacity);
        assert_eq!(status.allocatable, original.allocatable);
        assert_eq!(status.conditions, original.conditions);
        assert!(status.node_info.is_none() && original.node_info.is_some());
    }
}
