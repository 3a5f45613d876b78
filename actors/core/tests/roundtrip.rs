//! Karpenter-shaped YAML deserializes into our types and serializes back with the same field
//! names, nothing lost, and Karpenter's defaults filled in.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::path::PathBuf;

use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool};
use serde_json::{Value, json};

fn examples() -> Vec<Value> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "examples missing in {}", dir.display());
    files
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            karpenter_core::yaml::documents::<Value>(&text)
                .into_iter()
                .map(Result::unwrap)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every leaf of `original` is present, unchanged, in `round_tripped` (which may add defaults).
#[track_caller]
fn assert_contains(original: &Value, round_tripped: &Value, path: &str) {
    match original {
        Value::Object(fields) => {
            for (name, value) in fields {
                let other = round_tripped
                    .get(name)
                    .unwrap_or_else(|| panic!("{path}.{name} lost in round trip: {round_tripped}"));
                assert_contains(value, other, &format!("{path}.{name}"));
            }
        }
        Value::Array(items) => {
            let others = round_tripped
                .as_array()
                .unwrap_or_else(|| panic!("{path} not a list"));
            assert_eq!(items.len(), others.len(), "{path}");
            for (index, (item, other)) in items.iter().zip(others).enumerate() {
                assert_contains(item, other, &format!("{path}[{index}]"));
            }
        }
        // Quantities may be written as numbers (`cpu: 1000`) and come back as strings.
        Value::Number(number) if round_tripped.is_string() => {
            assert_eq!(
                round_tripped.as_str(),
                Some(number.to_string().as_str()),
                "{path}"
            );
        }
        scalar => assert_eq!(scalar, round_tripped, "{path}"),
    }
}

fn round_trip(document: &Value) -> Value {
    match document["kind"].as_str() {
        Some("NodePool") => {
            serde_json::to_value(serde_json::from_value::<NodePool>(document.clone()).unwrap())
                .unwrap()
        }
        Some("EC2NodeClass") => {
            serde_json::to_value(serde_json::from_value::<EC2NodeClass>(document.clone()).unwrap())
                .unwrap()
        }
        Some("NodeClaim") => {
            serde_json::to_value(serde_json::from_value::<NodeClaim>(document.clone()).unwrap())
                .unwrap()
        }
        other => panic!("unexpected kind {other:?}"),
    }
}

#[test]
fn every_example_round_trips_without_losing_or_renaming_fields() {
    for document in examples() {
        assert_contains(&document, &round_trip(&document), "");
    }
}

#[test]
fn nodepool_defaults_match_karpenter() {
    let document = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": { "name": "p" },
        "spec": { "template": { "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": [],
        } } }
    });
    let value = round_trip(&document);
    assert_eq!(value["spec"]["template"]["spec"]["expireAfter"], "720h");
    assert_eq!(
        value["spec"]["disruption"],
        json!({ "consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{ "nodes": "10%" }] })
    );
}

#[test]
fn budget_nodes_default_to_ten_percent() {
    let document = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": { "name": "p" },
        "spec": {
            "template": { "spec": {
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
                "requirements": [],
            } },
            "disruption": { "consolidateAfter": "1m", "budgets": [{ "reasons": ["Empty"] }] },
        }
    });
    assert_eq!(
        round_trip(&document)["spec"]["disruption"]["budgets"][0]["nodes"],
        "10%"
    );
}

#[test]
fn ec2nodeclass_metadata_options_default_to_imdsv2_with_hop_limit_one() {
    let document = json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": { "name": "c" },
        "spec": {
            "role": "r",
            "amiSelectorTerms": [{ "alias": "al2023@latest" }],
            "subnetSelectorTerms": [{ "id": "subnet-1" }],
            "securityGroupSelectorTerms": [{ "id": "sg-1" }],
        }
    });
    assert_eq!(
        round_trip(&document)["spec"]["metadataOptions"],
        json!({ "httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required" })
    );
}

#[test]
fn a_launched_nodeclaim_with_status_round_trips() {
    let text = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-x7k2p
  labels:
    karpenter.sh/nodepool: default
    node.kubernetes.io/instance-type: m5.large
  finalizers: [karpenter.sh/termination]
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements:
    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge], minValues: 2}
    - {key: karpenter.sh/nodepool, operator: In, values: [default]}
  resources:
    requests: {cpu: 1500m, memory: 3Gi, pods: "4"}
  taints:
    - {key: dedicated, value: batch, effect: NoSchedule}
  expireAfter: 720h
  terminationGracePeriod: 1h
status:
  providerID: aws:///us-west-2a/i-0123456789abcdef0
  imageID: ami-0123456789abcdef0
  nodeName: ip-10-0-1-23.us-west-2.compute.internal
  capacity: {cpu: "2", memory: 7910Mi, pods: "29"}
  allocatable: {cpu: 1930m, memory: 7220Mi, pods: "29"}
  lastPodEventTime: "2025-05-01T12:00:00Z"
  conditions:
    - {type: Launched, status: "True", reason: Launched, message: "", lastTransitionTime: "2025-05-01T11:58:00Z"}
    - {type: Ready, status: "True", reason: Ready, message: "", lastTransitionTime: "2025-05-01T11:59:30Z", observedGeneration: 1}
"#;
    let document: Value = karpenter_core::yaml::from_str(text).unwrap();
    assert_contains(&document, &round_trip(&document), "");
}
