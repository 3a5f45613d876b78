//! The CRD YAML committed under `charts/karpenter-crd/templates/` and `charts/karpenter/crds/` is
//! what `karpenter crds` generates from the Rust types. Regenerate with
//! `cargo run -- crds --output-dir charts/karpenter-crd/templates` and
//! `cargo run -- crds --output-dir charts/karpenter/crds`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::path::PathBuf;

use karpenter::commands::crds;

#[test]
fn committed_crds_match_the_rust_types() {
    for chart_dir in ["charts/karpenter-crd/templates", "charts/karpenter/crds"] {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(chart_dir);
        for (name, generated) in crds::render().unwrap() {
            let committed = std::fs::read_to_string(dir.join(name))
                .unwrap_or_else(|e| panic!("{name} missing from {}: {e}", dir.display()));
            assert!(
                committed == generated,
                "{chart_dir}/{name} is out of date; run `cargo run -- crds --output-dir {chart_dir}`"
            );
        }
    }
}

#[test]
fn crds_are_cluster_scoped_with_status_and_karpenter_names() {
    let expected = [
        ("nodepools.karpenter.sh", "NodePool", vec![]),
        ("nodeclaims.karpenter.sh", "NodeClaim", vec![]),
        (
            "ec2nodeclasses.karpenter.k8s.aws",
            "EC2NodeClass",
            vec!["ec2nc", "ec2ncs"],
        ),
    ];
    for (crd, (name, kind, short_names)) in karpenter_core::apis::crd::all().iter().zip(expected) {
        assert_eq!(crd["metadata"]["name"], name);
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(crd["spec"]["names"]["kind"], kind);
        assert_eq!(crd["spec"]["names"]["listKind"], format!("{kind}List"));
        assert_eq!(
            crd["spec"]["names"]["categories"],
            serde_json::json!(["karpenter"])
        );
        let actual_short: Vec<&str> = crd["spec"]["names"]["shortNames"]
            .as_array()
            .map(|names| names.iter().filter_map(|n| n.as_str()).collect())
            .unwrap_or_default();
        assert_eq!(actual_short, short_names);
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1");
        assert_eq!(version["subresources"]["status"], serde_json::json!({}));
        assert!(
            version["additionalPrinterColumns"]
                .as_array()
                .is_some_and(|c| !c.is_empty())
        );
    }
}
