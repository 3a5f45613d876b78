//! Valid documents of the three kinds, shared by the validation tests, and the violations the
//! shared [`Validator`] finds in a document.

use std::sync::LazyLock;

use karpenter_core::apis::validation::{Outcome, Validator, Violation};
use serde_json::{Value, json};

pub static VALIDATOR: LazyLock<Validator> =
    LazyLock::new(|| Validator::new().expect("generated schema patterns compile"));

/// A valid `NodePool`.
pub fn nodepool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": { "name": "default" },
        "spec": {
            "template": {
                "metadata": { "labels": { "team": "a" } },
                "spec": {
                    "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
                    "requirements": [
                        { "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"] }
                    ],
                }
            },
            "disruption": { "consolidateAfter": "30s" },
        }
    })
}

/// A valid `NodeClaim`.
pub fn nodeclaim() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": { "name": "default-x7k2p" },
        "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": [
                { "key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"] }
            ],
            "resources": { "requests": { "cpu": "1500m", "memory": "2Gi", "pods": 3 } },
        }
    })
}

/// A valid `EC2NodeClass`.
pub fn nodeclass() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": { "name": "default" },
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{ "alias": "al2023@latest" }],
            "subnetSelectorTerms": [{ "tags": { "karpenter.sh/discovery": "c" } }],
            "securityGroupSelectorTerms": [{ "tags": { "karpenter.sh/discovery": "c" } }],
        }
    })
}

/// Every violation of `document`, which must be one of our kinds.
pub fn violations(document: &Value) -> Vec<Violation> {
    match VALIDATOR.validate(document) {
        Outcome::Checked { violations, .. } => violations,
        Outcome::Skipped { reason } => panic!("document skipped: {reason}"),
    }
}
