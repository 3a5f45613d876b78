//! Initialization: when a registered node is ready for pods (Karpenter's
//! `lifecycle/initialization.go`): its `Ready` condition is `True`, no startup taint of the
//! NodeClaim and no known ephemeral taint is left, and every resource the NodeClaim requested is
//! in the node's allocatable (device plugins register extended resources late). Then the
//! NodeClaimActor labels the node `karpenter.sh/initialized=true` and sets `Initialized`.

use k8s_openapi::api::core::v1::Taint as ApiTaint;

use karpenter_core::apis::conditions::nodeclaim as reasons;
use karpenter_core::apis::labels;
use karpenter_core::apis::{SlimNode, SlimNodeClaim};
use karpenter_core::domain::resources::parse_resource;

/// Why a node is not initialized yet: the `Initialized=Unknown` reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotInitialized {
    pub reason: &'static str,
    pub message: String,
}

/// Taints that appear while a node starts and go away on their own (Karpenter's
/// `KnownEphemeralTaints`), as key, value (if it must match) and effect.
pub const KNOWN_EPHEMERAL_TAINTS: [(&str, &str); 4] = [
    (labels::NOT_READY_TAINT, "NoSchedule"),
    (labels::UNREACHABLE_TAINT, "NoSchedule"),
    (labels::UNINITIALIZED_TAINT, "NoSchedule"),
    (labels::UNREGISTERED_TAINT, "NoExecute"),
];

/// Whether the node's `Ready` condition is `True`.
#[must_use]
pub fn is_ready(node: &SlimNode) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

fn node_taints(node: &SlimNode) -> &[ApiTaint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// Karpenter's rendering of a taint: `key=value:Effect` or `key:Effect`.
#[must_use]
pub fn format_taint(taint: &ApiTaint) -> String {
    match taint.value.as_deref() {
        None | Some("") => format!("{}:{}", taint.key, taint.effect),
        Some(value) => format!("{}={value}:{}", taint.key, taint.effect),
    }
}

/// `Ok` when the node is initialized, else why not.
pub fn check(node: &SlimNode, nodeclaim: &SlimNodeClaim) -> Result<(), NotInitialized> {
    if !is_ready(node) {
        return Err(NotInitialized {
            reason: reasons::REASON_NODE_NOT_READY,
            message: "Node status is NotReady".to_owned(),
        });
    }
    let taints = node_taints(node);
    if let Some(taint) = taints
        .iter()
        .find(|t| nodeclaim.spec.startup_taints.iter().any(|s| s.matches(t)))
    {
        return Err(NotInitialized {
            reason: reasons::REASON_STARTUP_TAINTS_EXIST,
            message: format!("StartupTaint {:?} still exists", format_taint(taint)),
        });
    }
    if let Some(taint) = KNOWN_EPHEMERAL_TAINTS
        .iter()
        .find_map(|(key, effect)| taints.iter().find(|t| t.key == *key && t.effect == *effect))
    {
        return Err(NotInitialized {
            reason: reasons::REASON_KNOWN_EPHEMERAL_TAINTS_EXIST,
            message: format!("KnownEphemeralTaint {:?} still exists", format_taint(taint)),
        });
    }
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    for (name, quantity) in &nodeclaim.spec.resources.requests {
        if parse_resource(name, &quantity.0).unwrap_or(0) == 0 {
            continue;
        }
        let registered = allocatable
            .and_then(|a| a.get(name))
            .and_then(|q| parse_resource(name, &q.0).ok())
            .unwrap_or(0);
        if registered == 0 {
            return Err(NotInitialized {
                reason: reasons::REASON_RESOURCE_NOT_REGISTERED,
                message: format!("Resource {name:?} was requested but not registered"),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn nodeclaim() -> SlimNodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": { "name": "default-abc" },
            "spec": {
                "requirements": [],
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
                "startupTaints": [{ "key": "cni-not-ready", "effect": "NoSchedule" }],
                "resources": { "requests": { "cpu": "1", "nvidia.com/gpu": "1" } },
            },
        }))
        .unwrap()
    }

    fn node(ready: bool, taints: &[(&str, &str)], gpus: &str) -> SlimNode {
        SlimNode::from(Node {
            spec: Some(NodeSpec {
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
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..NodeCondition::default()
                }]),
                allocatable: Some(BTreeMap::from([
                    ("cpu".to_owned(), Quantity("2".into())),
                    ("nvidia.com/gpu".to_owned(), Quantity(gpus.into())),
                ])),
                ..NodeStatus::default()
            }),
            ..Node::default()
        })
    }

    #[test]
    fn each_blocker_is_reported_with_karpenters_reason() {
        let claim = nodeclaim();
        let cases = [
            (node(false, &[], "1"), reasons::REASON_NODE_NOT_READY),
            (
                node(true, &[("cni-not-ready", "NoSchedule")], "1"),
                reasons::REASON_STARTUP_TAINTS_EXIST,
            ),
            (
                node(true, &[(labels::NOT_READY_TAINT, "NoSchedule")], "1"),
                reasons::REASON_KNOWN_EPHEMERAL_TAINTS_EXIST,
            ),
            (
                node(true, &[], "0"),
                reasons::REASON_RESOURCE_NOT_REGISTERED,
            ),
        ];
        for (node, reason) in cases {
            assert_eq!(check(&node, &claim).unwrap_err().reason, reason);
        }
        assert_eq!(
            check(&node(true, &[("other", "NoSchedule")], "1"), &claim),
            Ok(())
        );
    }

    #[test]
    fn messages_name_the_taint_like_karpenter() {
        let error = check(
            &node(true, &[("cni-not-ready", "NoSchedule")], "1"),
            &nodeclaim(),
        )
        .unwrap_err();
        assert_eq!(
            error.message,
            "StartupTaint \"cni-not-ready:NoSchedule\" still exists"
        );
    }
}
