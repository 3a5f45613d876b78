//! Registration: the Node a launched NodeClaim's kubelet created, found by provider id, and the
//! changes that make it Karpenter's (Karpenter's `lifecycle/registration.go`):
//!
//! - our termination finalizer and an owner reference to the NodeClaim;
//! - the NodeClaim's taints and startup taints merged in (taints already there, by key and
//!   effect, are kept), unless the node carries `karpenter.sh/do-not-sync-taints=true` (v1.5:
//!   the kubelet registered them itself);
//! - the NodeClaim's annotations and labels copied on, `karpenter.sh/registered=true`;
//! - the `karpenter.sh/unregistered:NoExecute` taint removed (the kubelet registers with it so
//!   no pod lands before this sync).
//!
//! Pure functions: the actor finds the nodes with [`matching_nodes`] and applies
//! [`sync_node`] through a `ClusterApi::update_node` change.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSpec, Taint as ApiTaint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use karpenter_core::apis::labels;
use karpenter_core::apis::taints::Taint;
use karpenter_core::apis::{NodeClaim, SlimNode, SlimNodeClaim};

/// What looking up a NodeClaim's Node found.
#[derive(Debug, Clone)]
pub enum NodeLookup {
    NotFound,
    Found(Arc<SlimNode>),
    /// More than one Node claims the provider id: an invariant violation.
    Multiple(usize),
}

/// The Nodes whose `spec.providerID` is `provider_id`.
#[must_use]
pub fn matching_nodes(nodes: &[Arc<SlimNode>], provider_id: &str) -> NodeLookup {
    let mut found = nodes
        .iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id));
    match (found.next(), found.count()) {
        (None, _) => NodeLookup::NotFound,
        (Some(node), 0) => NodeLookup::Found(Arc::clone(node)),
        (Some(_), more) => NodeLookup::Multiple(more + 1),
    }
}

/// Whether a taint has the key and effect of `taint` (Kubernetes' `MatchTaint`).
fn matches(node_taint: &ApiTaint, key: &str, effect: &str) -> bool {
    node_taint.key == key && node_taint.effect == effect
}

/// Whether the node still carries the `karpenter.sh/unregistered:NoExecute` taint.
#[must_use]
pub fn has_unregistered_taint(node: &SlimNode) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|t| matches(t, labels::UNREGISTERED_TAINT, "NoExecute"))
        })
}

/// Whether Karpenter has synced the node before (it carries the registered label).
#[must_use]
pub fn is_registered(node: &SlimNode) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(labels::REGISTERED))
}

/// Whether the node asks Karpenter to leave its taints alone.
#[must_use]
pub fn skips_taint_sync(metadata: &ObjectMeta) -> bool {
    metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::DO_NOT_SYNC_TAINTS))
        .is_some_and(|v| v == "true")
}

/// Adds the NodeClaim's ownership, taints, annotations and labels to a node's metadata and
/// spec (a Node being written, or a copy of the view's to tell whether a write is needed).
pub fn sync_node(
    metadata: &mut ObjectMeta,
    spec: &mut Option<NodeSpec>,
    nodeclaim: &SlimNodeClaim,
) {
    let finalizers = metadata.finalizers.get_or_insert_default();
    if !finalizers
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
    {
        finalizers.push(labels::TERMINATION_FINALIZER.to_owned());
    }
    let uid = nodeclaim.metadata.uid.clone().unwrap_or_default();
    let owners = metadata.owner_references.get_or_insert_default();
    if !owners.iter().any(|o| o.uid == uid) {
        owners.push(OwnerReference {
            api_version: NodeClaim::api_version(&()).into_owned(),
            kind: NodeClaim::kind(&()).into_owned(),
            name: nodeclaim.metadata.name.clone().unwrap_or_default(),
            uid,
            block_owner_deletion: Some(true),
            controller: None,
        });
    }
    let sync_taints = !skips_taint_sync(metadata);
    let spec = spec.get_or_insert_default();
    let mut taints = spec.taints.take().unwrap_or_default();
    if sync_taints {
        for taint in nodeclaim
            .spec
            .taints
            .iter()
            .chain(&nodeclaim.spec.startup_taints)
        {
            merge_taint(&mut taints, taint);
        }
    }
    taints.retain(|t| !matches(t, labels::UNREGISTERED_TAINT, "NoExecute"));
    spec.taints = (!taints.is_empty()).then_some(taints);
    if let Some(annotations) = &nodeclaim.metadata.annotations
        && !annotations.is_empty()
    {
        metadata
            .annotations
            .get_or_insert_default()
            .extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let node_labels = metadata.labels.get_or_insert_default();
    if let Some(claimed) = &nodeclaim.metadata.labels {
        node_labels.extend(claimed.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    node_labels.insert(labels::REGISTERED.to_owned(), "true".to_owned());
}

/// Karpenter's `Taints.Merge`: adds the taint unless one with its key and effect is there.
fn merge_taint(taints: &mut Vec<ApiTaint>, taint: &Taint) {
    if !taints.iter().any(|t| taint.matches(t)) {
        taints.push(ApiTaint::from(taint));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use karpenter_core::apis::taints::TaintEffect;
    use std::collections::BTreeMap;

    fn nodeclaim() -> SlimNodeClaim {
        let mut nodeclaim: SlimNodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {
                "name": "default-abc", "uid": "uid-1",
                "labels": { "karpenter.sh/nodepool": "default", "team": "a" },
                "annotations": { "karpenter.sh/nodepool-hash": "123" },
            },
            "spec": {
                "requirements": [],
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
                "taints": [{ "key": "dedicated", "value": "gpu", "effect": "NoSchedule" }],
                "startupTaints": [{ "key": "cni-not-ready", "effect": "NoSchedule" }],
            },
        }))
        .unwrap();
        nodeclaim
            .spec
            .taints
            .push(Taint::new("shared", None, TaintEffect::NoExecute));
        nodeclaim
    }

    fn node(labels: &[(&str, &str)], taints: &[(&str, &str)]) -> SlimNode {
        SlimNode {
            metadata: ObjectMeta {
                name: Some("ip-10-0-0-1".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..ObjectMeta::default()
            }
            .into(),
            spec: Some(NodeSpec {
                provider_id: Some("aws:///us-west-2a/i-1".into()),
                taints: Some(
                    taints
                        .iter()
                        .map(|(key, effect)| ApiTaint {
                            key: (*key).to_owned(),
                            effect: (*effect).to_owned(),
                            ..ApiTaint::default()
                        })
                        .collect(),
                ),
                ..NodeSpec::default()
            }),
            status: None,
        }
    }

    /// [`sync_node`] on a view's Node, as the lifecycle's probe runs it.
    fn sync(node: &mut SlimNode, nodeclaim: &SlimNodeClaim) {
        let mut metadata = ObjectMeta::from(node.metadata.clone());
        sync_node(&mut metadata, &mut node.spec, nodeclaim);
        node.metadata = metadata.into();
    }

    fn taint_keys(node: &SlimNode) -> Vec<String> {
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(|t| t.iter().map(|t| t.key.clone()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_synced_node_is_owned_labelled_tainted_and_unblocked() {
        let mut node = node(&[], &[(labels::UNREGISTERED_TAINT, "NoExecute")]);
        sync(&mut node, &nodeclaim());
        assert_eq!(
            node.metadata.finalizers.as_deref(),
            Some(&[labels::TERMINATION_FINALIZER.to_owned()][..])
        );
        let owner = &node.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.api_version.as_str()),
            ("NodeClaim", "karpenter.sh/v1")
        );
        assert_eq!(taint_keys(&node), ["dedicated", "shared", "cni-not-ready"]);
        let node_labels = node.metadata.labels.as_ref().unwrap();
        assert_eq!(node_labels.get(labels::REGISTERED).unwrap(), "true");
        assert_eq!(node_labels.get("team").unwrap(), "a");
        assert_eq!(
            node.metadata
                .annotations
                .as_ref()
                .unwrap()
                .get("karpenter.sh/nodepool-hash")
                .unwrap(),
            "123"
        );
        let again = node.clone();
        sync(&mut node, &nodeclaim());
        assert_eq!(node, again, "syncing twice changes nothing");
    }

    #[test]
    fn do_not_sync_taints_leaves_the_taints_but_still_drops_unregistered() {
        let mut node = node(
            &[(labels::DO_NOT_SYNC_TAINTS, "true")],
            &[
                ("kubelet-set", "NoSchedule"),
                (labels::UNREGISTERED_TAINT, "NoExecute"),
            ],
        );
        sync(&mut node, &nodeclaim());
        assert_eq!(taint_keys(&node), ["kubelet-set"]);
        assert!(!has_unregistered_taint(&node));
        assert!(is_registered(&node));
    }

    #[test]
    fn duplicate_provider_ids_are_reported() {
        let one = Arc::new(node(&[], &[]));
        let two = Arc::new(node(&[], &[]));
        assert!(matches!(
            matching_nodes(&[Arc::clone(&one)], "aws:///us-west-2a/i-1"),
            NodeLookup::Found(_)
        ));
        assert!(matches!(
            matching_nodes(&[one, two], "aws:///us-west-2a/i-1"),
            NodeLookup::Multiple(2)
        ));
        assert!(matches!(matching_nodes(&[], "x"), NodeLookup::NotFound));
    }
}
