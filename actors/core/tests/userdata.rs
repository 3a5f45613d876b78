//! User data of every AMI family against golden files, merges with users' user data, the
//! errors bad user data gives, and rendering that never panics.
//!
//! Goldens live in `actors/core/tests/fixtures/userdata/<scenario>.golden`, the users' inputs in
//! `fixtures/userdata/inputs/`. After an intended change to the output, regenerate them with
//!
//! ```sh
//! UPDATE_GOLDEN=1 cargo nextest run -p karpenter-core --test userdata
//! ```
//!
//! and review the diff before committing.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use karpenter_core::apis::ec2nodeclass::{AmiFamily, InstanceStorePolicy, KubeletConfiguration};
use karpenter_core::apis::requirements::{Operator, Requirement};
use karpenter_core::apis::taints::{Taint, TaintEffect};
use karpenter_core::domain::userdata::{
    self, ClusterInfo, UserDataError, UserDataInput, launch_labels, mime,
};
use proptest::prelude::*;

const ALL_FAMILIES: [AmiFamily; 6] = [
    AmiFamily::AL2,
    AmiFamily::AL2023,
    AmiFamily::Bottlerocket,
    AmiFamily::Windows2019,
    AmiFamily::Windows2022,
    AmiFamily::Custom,
];

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/userdata")
}

fn input_file(name: &str) -> String {
    std::fs::read_to_string(fixtures().join("inputs").join(name)).unwrap()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn cluster() -> ClusterInfo {
    ClusterInfo {
        name: "test-cluster".into(),
        endpoint: "https://test-cluster.example.com".into(),
        // base64 of "ca-bundle\n"
        ca_bundle: Some("Y2EtYnVuZGxlCg==".into()),
        dns_ips: vec!["10.100.0.10".parse().unwrap()],
        service_cidr: Some("10.100.0.0/16".into()),
    }
}

/// The smallest launch: no kubelet settings, the group's max pods, the NodeClaim's own labels.
fn minimal() -> UserDataInput {
    UserDataInput {
        cluster: cluster(),
        max_pods: 29,
        labels: launch_labels(
            &map(&[
                ("karpenter.sh/nodepool", "default"),
                ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ]),
            &[],
            "on-demand",
        ),
        ..UserDataInput::default()
    }
}

/// Every kubelet setting Karpenter renders, NodePool labels, requirements and taints.
fn full_kubelet() -> UserDataInput {
    let kubelet = KubeletConfiguration {
        cluster_dns: vec!["10.0.0.10".into()],
        max_pods: Some(58),
        pods_per_core: Some(10),
        system_reserved: Some(map(&[
            ("cpu", "100m"),
            ("memory", "100Mi"),
            ("ephemeral-storage", "1Gi"),
        ])),
        kube_reserved: Some(map(&[
            ("cpu", "200m"),
            ("memory", "200Mi"),
            ("pid", "1000"),
        ])),
        eviction_hard: Some(map(&[
            ("memory.available", "5%"),
            ("nodefs.available", "10%"),
        ])),
        eviction_soft: Some(map(&[
            ("memory.available", "10%"),
            ("nodefs.available", "15%"),
        ])),
        eviction_soft_grace_period: Some(map(&[
            ("memory.available", "1m30s"),
            ("nodefs.available", "2m"),
        ])),
        eviction_max_pod_grace_period: Some(60),
        image_gc_high_threshold_percent: Some(85),
        image_gc_low_threshold_percent: Some(80),
        cpu_cfs_quota: Some(false),
    };
    let labels = launch_labels(
        &map(&[
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("team", "ml"),
            ("node-restriction.kubernetes.io/secret", "never-injected"),
            ("kops.k8s.io/instancegroup", "never-injected"),
        ]),
        &[
            Requirement::new("project", Operator::In, &["apollo"]),
            Requirement::new("topology.kubernetes.io/zone", Operator::In, &["us-west-2a"]),
            Requirement::new("stage", Operator::In, &["dev", "prod"]),
        ],
        "spot",
    );
    UserDataInput {
        kubelet,
        max_pods: 110,
        labels,
        taints: vec![
            Taint::new("dedicated", Some("ml"), TaintEffect::NoSchedule),
            Taint::new("example.com/not-ready", None, TaintEffect::NoExecute),
            Taint::new("dedicated", Some("gpu"), TaintEffect::PreferNoSchedule),
        ],
        ..minimal()
    }
}

fn with_user_data(mut input: UserDataInput, user_data: &str) -> UserDataInput {
    input.user_data = Some(user_data.to_owned());
    input
}

fn with_raid0(mut input: UserDataInput) -> UserDataInput {
    input.instance_store_policy = Some(InstanceStorePolicy::RAID0);
    input
}

/// Every golden scenario: name, family, input.
fn scenarios() -> Vec<(&'static str, AmiFamily, UserDataInput)> {
    use AmiFamily::{AL2, AL2023, Bottlerocket, Custom, Windows2019, Windows2022};
    let mut ipv6 = minimal();
    ipv6.cluster.dns_ips = vec!["fd00:10:96::a".parse().unwrap()];
    vec![
        ("al2_minimal", AL2, minimal()),
        ("al2_kubelet", AL2, full_kubelet()),
        (
            "al2_mime_merged",
            AL2,
            with_user_data(full_kubelet(), &input_file("al2_mime.txt")),
        ),
        (
            "al2_shell_merged",
            AL2,
            with_user_data(minimal(), &input_file("al2_shell.txt")),
        ),
        ("al2_raid0", AL2, with_raid0(minimal())),
        ("al2_ipv6", AL2, ipv6),
        ("al2023_minimal", AL2023, minimal()),
        ("al2023_kubelet", AL2023, full_kubelet()),
        (
            "al2023_nodeconfig_merged",
            AL2023,
            with_user_data(full_kubelet(), &input_file("al2023_nodeconfig.txt")),
        ),
        (
            "al2023_shell_merged",
            AL2023,
            with_user_data(minimal(), &input_file("al2023_shell.txt")),
        ),
        (
            "al2023_mime_merged",
            AL2023,
            with_user_data(minimal(), &input_file("al2023_mime.txt")),
        ),
        ("al2023_raid0", AL2023, with_raid0(minimal())),
        ("bottlerocket_minimal", Bottlerocket, minimal()),
        ("bottlerocket_kubelet", Bottlerocket, full_kubelet()),
        (
            "bottlerocket_toml_merged",
            Bottlerocket,
            with_user_data(full_kubelet(), &input_file("bottlerocket.toml")),
        ),
        (
            "bottlerocket_raid0",
            Bottlerocket,
            with_raid0(with_user_data(minimal(), &input_file("bottlerocket.toml"))),
        ),
        ("windows2019_minimal", Windows2019, minimal()),
        ("windows2022_kubelet", Windows2022, full_kubelet()),
        (
            "windows2022_merged",
            Windows2022,
            with_user_data(minimal(), &input_file("windows.ps1")),
        ),
        (
            "windows2022_tagged_merged",
            Windows2022,
            with_user_data(minimal(), &input_file("windows_tagged.ps1")),
        ),
        (
            "custom_verbatim",
            Custom,
            with_user_data(full_kubelet(), &input_file("custom.txt")),
        ),
    ]
}

fn render(family: AmiFamily, input: &UserDataInput) -> String {
    userdata::render(family, input)
        .unwrap_or_else(|e| panic!("{family:?}: {e}"))
        .into_string()
}

/// Compares with the golden file, or rewrites it when `UPDATE_GOLDEN` is set. Returns a
/// description of the first difference.
fn check_golden(name: &str, actual: &str) -> Option<String> {
    let path = fixtures().join(format!("{name}.golden"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return None;
    }
    let Ok(expected) = std::fs::read_to_string(&path) else {
        return Some(format!("{name}: no golden file (run with UPDATE_GOLDEN=1)"));
    };
    if expected == actual {
        return None;
    }
    let line = expected
        .lines()
        .zip(actual.lines())
        .position(|(e, a)| e != a)
        .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
    Some(format!(
        "{name}: differs at line {}\n  expected: {:?}\n  actual:   {:?}",
        line + 1,
        expected.lines().nth(line),
        actual.lines().nth(line)
    ))
}

#[test]
fn every_family_renders_its_golden_user_data() {
    let failures: Vec<String> = scenarios()
        .iter()
        .filter_map(|(name, family, input)| check_golden(name, &render(*family, input)))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn rendering_is_deterministic_and_hash_stable() {
    for (name, family, input) in scenarios() {
        assert_eq!(
            render(family, &input),
            render(family, &input.clone()),
            "{name}"
        );
    }
    // The same TOML with its tables in another order renders byte-equal.
    let reordered = "[settings.ntp]\ntime-servers = [\"169.254.169.123\"]\n[settings.kubernetes]\ncluster-name = 'x'\n";
    let original = "[settings.kubernetes]\ncluster-name = 'x'\n[settings.ntp]\ntime-servers = [\"169.254.169.123\"]\n";
    assert_eq!(
        render(
            AmiFamily::Bottlerocket,
            &with_user_data(minimal(), reordered)
        ),
        render(
            AmiFamily::Bottlerocket,
            &with_user_data(minimal(), original)
        ),
    );
}

#[test]
fn every_family_but_custom_registers_taints_and_the_do_not_sync_label() {
    for family in ALL_FAMILIES {
        let text = render(family, &full_kubelet());
        let expect_karpenter = family != AmiFamily::Custom;
        assert_eq!(
            text.contains("karpenter.sh/do-not-sync-taints"),
            expect_karpenter,
            "{family:?}"
        );
        assert_eq!(
            text.contains("karpenter.sh/unregistered"),
            expect_karpenter,
            "{family:?}"
        );
        assert_eq!(text.contains("dedicated"), expect_karpenter, "{family:?}");
        assert!(!text.contains("never-injected"), "{family:?}: {text}");
    }
}

#[test]
fn single_valued_requirements_are_labels_and_multi_valued_are_not() {
    let text = render(AmiFamily::AL2, &full_kubelet());
    assert!(text.contains("project=apollo"), "{text}");
    assert!(!text.contains("stage="), "{text}");
    assert!(!text.contains("topology.kubernetes.io/zone"), "{text}");
    assert!(text.contains("karpenter.sh/capacity-type=spot"), "{text}");
}

#[test]
fn al2_puts_the_users_parts_first_and_bootstrap_last() {
    let text = render(
        AmiFamily::AL2,
        &with_user_data(minimal(), &input_file("al2_mime.txt")),
    );
    let parts = mime::parse(&text).unwrap();
    assert_eq!(parts.len(), 3);
    assert_eq!(
        parts[0].body,
        "#!/bin/bash\necho \"Running custom user data script\"\n"
    );
    assert_eq!(parts[1].media_type().as_deref(), Some("text/cloud-config"));
    assert!(
        parts[2]
            .body
            .contains("/etc/eks/bootstrap.sh 'test-cluster'")
    );
}

#[test]
fn al2023_merges_user_node_configs_before_karpenters() {
    let text = render(
        AmiFamily::AL2023,
        &with_user_data(full_kubelet(), &input_file("al2023_nodeconfig.txt")),
    );
    let parts = mime::parse(&text).unwrap();
    assert_eq!(parts.len(), 2);
    for part in &parts {
        assert_eq!(
            part.media_type().as_deref(),
            Some("application/node.eks.aws")
        );
    }
    let ours: serde_json::Value = karpenter_core::yaml::from_str(&parts[1].body).unwrap();
    let config = &ours["spec"]["kubelet"]["config"];
    assert_eq!(config["maxPods"], serde_json::Value::from(58));
    assert_eq!(
        config["evictionSoftGracePeriod"]["memory.available"],
        serde_json::Value::from("1m30s")
    );
    assert_eq!(
        config["evictionSoftGracePeriod"]["nodefs.available"],
        serde_json::Value::from("2m0s")
    );
    assert_eq!(
        ours["spec"]["cluster"]["cidr"],
        serde_json::Value::from("10.100.0.0/16")
    );
    assert_eq!(
        ours["spec"]["cluster"]["certificateAuthority"],
        serde_json::Value::from("Y2EtYnVuZGxlCg==")
    );
}

#[test]
fn bottlerocket_merges_settings_and_passes_unknown_keys_through() {
    let text = render(
        AmiFamily::Bottlerocket,
        &with_user_data(full_kubelet(), &input_file("bottlerocket.toml")),
    );
    let doc: toml::Table = text.parse().unwrap();
    let k8s = doc["settings"]["kubernetes"].as_table().unwrap();
    assert_eq!(
        k8s["api-server"].as_str(),
        Some("https://test-cluster.example.com")
    );
    assert_eq!(k8s["cluster-name"].as_str(), Some("test-cluster"));
    assert_eq!(k8s["max-pods"].as_integer(), Some(58));
    assert_eq!(k8s["single-process-oom-kill"].as_bool(), Some(true));
    assert_eq!(k8s["registry-qps"].as_integer(), Some(20));
    assert_eq!(
        k8s["eviction-soft"]["memory.available"].as_str(),
        Some("10%")
    );
    assert_eq!(
        k8s["eviction-soft-grace-period"]["memory.available"].as_str(),
        Some("1m30s")
    );
    assert_eq!(k8s["eviction-max-pod-grace-period"].as_integer(), Some(60));
    assert_eq!(
        k8s["eviction-hard"]["memory.available"].as_str(),
        Some("5%")
    );
    assert_eq!(k8s["image-gc-high-threshold-percent"].as_str(), Some("85"));
    assert_eq!(k8s["cpu-cfs-quota-enforced"].as_bool(), Some(false));
    let labels = k8s["node-labels"].as_table().unwrap();
    assert_eq!(labels["custom-node-label"].as_str(), Some("custom"));
    assert_eq!(labels["team"].as_str(), Some("ml"));
    let taints = k8s["node-taints"].as_table().unwrap();
    assert!(!taints.contains_key("replace"), "the NodePool owns taints");
    assert_eq!(
        taints["dedicated"].as_array().unwrap(),
        &vec![
            toml::Value::from("ml:NoSchedule"),
            toml::Value::from("gpu:PreferNoSchedule")
        ]
    );
    assert_eq!(
        taints["karpenter.sh/unregistered"].as_array().unwrap(),
        &vec![toml::Value::from(":NoExecute")]
    );
    assert_eq!(
        doc["settings"]["network"]["hostname"].as_str(),
        Some("test.local")
    );
    assert!(doc["settings"]["bootstrap-commands"]["010-tune"].is_table());
}

#[test]
fn windows_runs_the_users_script_before_bootstrap_once() {
    let text = render(
        AmiFamily::Windows2022,
        &with_user_data(minimal(), &input_file("windows_tagged.ps1")),
    );
    assert_eq!(text.matches("<powershell>").count(), 1, "{text}");
    let user = text.find("Running custom user data script").unwrap();
    let bootstrap = text.find("Start-EKSBootstrap.ps1").unwrap();
    assert!(user < bootstrap);
    assert!(
        text.ends_with("</powershell>\n<persist>true</persist>"),
        "{text}"
    );
}

#[test]
fn custom_user_data_is_passed_verbatim() {
    let input = with_user_data(full_kubelet(), "anything at all\r\n");
    assert_eq!(render(AmiFamily::Custom, &input), "anything at all\r\n");
    assert_eq!(render(AmiFamily::Custom, &minimal()), "");
}

#[test]
fn user_data_base64_decodes_to_the_text() {
    use base64::Engine as _;
    let rendered = userdata::render(AmiFamily::AL2, &minimal()).unwrap();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(rendered.to_base64())
        .unwrap();
    assert_eq!(decoded, rendered.as_str().as_bytes());
}

// ---- errors ----------------------------------------------------------------------------------

fn render_error(family: AmiFamily, input: &UserDataInput) -> UserDataError {
    let error = userdata::render(family, input).expect_err("rendering should fail");
    assert!(
        error.to_string().starts_with(family.as_str()),
        "the message names the family: {error}"
    );
    error
}

#[test]
fn unparseable_mime_is_an_al2_user_data_error() {
    let input = with_user_data(
        minimal(),
        "MIME-Version: 1.0\nContent-Type: text/plain\n\nhi",
    );
    let error = render_error(AmiFamily::AL2, &input);
    assert!(
        matches!(error, UserDataError::InvalidMime { .. }),
        "{error}"
    );
    assert_eq!(error.category(), "invalid_user_data");
    assert!(error.is_user_data_error());
    assert!(error.to_string().contains("not multipart"), "{error}");
}

#[test]
fn mime_without_closing_delimiter_is_an_al2023_user_data_error() {
    let input = with_user_data(
        minimal(),
        "Content-Type: multipart/mixed; boundary=x\n\n--x\nContent-Type: text/x-shellscript\n\necho\n",
    );
    let error = render_error(AmiFamily::AL2023, &input);
    assert!(
        error.to_string().contains("no closing delimiter \"--x--\""),
        "{error}"
    );
}

#[test]
fn a_node_config_part_that_is_not_yaml_is_an_al2023_error_naming_the_part() {
    let input = with_user_data(
        minimal(),
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: text/x-shellscript\n\necho\n--//\nContent-Type: application/node.eks.aws\n\nspec: [unclosed\n--//--\n",
    );
    let error = render_error(AmiFamily::AL2023, &input);
    assert!(
        matches!(error, UserDataError::InvalidNodeConfig { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("MIME part 2"), "{error}");
}

#[test]
fn a_declared_node_config_that_does_not_parse_is_an_al2023_error() {
    let input = with_user_data(
        minimal(),
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet: {config: [\n",
    );
    let error = render_error(AmiFamily::AL2023, &input);
    assert!(error.to_string().contains("the user data"), "{error}");
}

#[test]
fn al2023_needs_the_cluster_cidr() {
    let mut input = minimal();
    input.cluster.service_cidr = None;
    let error = render_error(AmiFamily::AL2023, &input);
    assert_eq!(
        error,
        UserDataError::MissingClusterCidr {
            family: AmiFamily::AL2023
        }
    );
    assert_eq!(error.category(), "cluster_cidr_unknown");
    assert!(!error.is_user_data_error());
    input.cluster.service_cidr = Some("10.100.0.0".into());
    assert!(matches!(
        render_error(AmiFamily::AL2023, &input),
        UserDataError::InvalidClusterCidr { .. }
    ));
}

#[test]
fn a_ca_bundle_that_is_not_base64_is_an_al2023_error() {
    let mut input = minimal();
    input.cluster.ca_bundle = Some("not base64!".into());
    assert!(matches!(
        render_error(AmiFamily::AL2023, &input),
        UserDataError::InvalidCaBundle { .. }
    ));
}

#[test]
fn unparseable_toml_is_a_bottlerocket_error_with_its_line() {
    let input = with_user_data(minimal(), "[settings.kubernetes]\nmax-pods = \n");
    let error = render_error(AmiFamily::Bottlerocket, &input);
    assert!(
        matches!(error, UserDataError::InvalidToml { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("line 2"), "{error}");
}

#[test]
fn settings_that_are_not_tables_are_bottlerocket_errors_naming_the_key() {
    for (text, key) in [
        ("settings = 5\n", "`settings`"),
        ("[settings]\nkubernetes = 'x'\n", "`settings.kubernetes`"),
        (
            "[settings.kubernetes]\nnode-labels = ['a']\n",
            "`settings.kubernetes.node-labels`",
        ),
    ] {
        let error = render_error(AmiFamily::Bottlerocket, &with_user_data(minimal(), text));
        assert!(
            matches!(error, UserDataError::TomlNotATable { .. }),
            "{error}"
        );
        assert!(error.to_string().contains(key), "{error}");
    }
}

#[test]
fn unbalanced_powershell_tags_are_windows_errors() {
    let input = with_user_data(minimal(), "<powershell>\nWrite-Host hi\n");
    let error = render_error(AmiFamily::Windows2019, &input);
    assert!(
        matches!(error, UserDataError::InvalidPowerShell { .. }),
        "{error}"
    );
}

#[test]
fn bad_cluster_dns_and_grace_periods_name_the_value() {
    let mut input = minimal();
    input.kubelet.cluster_dns = vec!["kube-dns".into()];
    let error = render_error(AmiFamily::AL2, &input);
    assert!(error.to_string().contains("\"kube-dns\""), "{error}");

    let mut input = minimal();
    input.kubelet.eviction_soft_grace_period = Some(map(&[("memory.available", "soon")]));
    let error = render_error(AmiFamily::Bottlerocket, &input);
    assert!(
        error
            .to_string()
            .contains("evictionSoftGracePeriod[memory.available] \"soon\""),
        "{error}"
    );
    assert_eq!(error.category(), "invalid_kubelet_configuration");
}

// ---- never panics ----------------------------------------------------------------------------

/// Arbitrary text, sometimes behind a prefix that sends it down a family's parser.
fn user_data_strategy() -> impl Strategy<Value = String> {
    let prefix = prop_oneof![
        Just(String::new()),
        Just("MIME-Version: 1.0\n".to_owned()),
        Just("Content-Type: multipart/mixed; boundary=\"//\"\n\n--//\n".to_owned()),
        Just("[settings.kubernetes]\n".to_owned()),
        Just("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n".to_owned()),
        Just("<powershell>\n".to_owned()),
    ];
    let body = prop_oneof![
        any::<String>(),
        "[ -~\n\t]{0,200}",
        "(--//|--//--|Content-Type: [a-z/.]{1,20}|\n|\r\n|[a-z\\-]{1,10} = [0-9'\"\\[\\]]{1,5}|<powershell>|</powershell>|: |- ){0,30}",
    ];
    (prefix, body).prop_map(|(p, b)| p + &b)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn rendering_never_panics_on_arbitrary_user_data(user_data in user_data_strategy()) {
        for family in ALL_FAMILIES {
            let input = with_user_data(minimal(), &user_data);
            match userdata::render(family, &input) {
                Ok(rendered) => prop_assert!(family == AmiFamily::Custom || !rendered.as_str().is_empty()),
                Err(error) => prop_assert!(error.is_user_data_error(), "{family:?}: {error}"),
            }
        }
    }
}
