//! What `run` reads from the cluster at startup, against the emulator: the Kubernetes version
//! (`/version`) and the cluster DNS address (the kube-dns Service).

use k8s_openapi::api::core::v1::Service;
use karpenter::commands::run::{RunError, check_version};
use karpenter::discovery::cluster_dns;
use karpenter::emulator::{Emulator, EmulatorConfig};
use karpenter_config::Settings;
use karpenter_core::domain::version::VersionVerdict;
use kube::Api;
use kube::api::PostParams;

fn emulator(minor: &str) -> Emulator {
    Emulator::with_config(EmulatorConfig {
        kubernetes_version: ("1".into(), minor.into()),
        ..EmulatorConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn a_server_older_than_1_26_is_refused_with_a_clear_message() {
    let error = check_version(&emulator("25").client(), &Settings::default())
        .await
        .unwrap_err();
    assert!(matches!(error, RunError::Unsupported(_)));
    let message = error.to_string();
    assert!(message.contains("1.25 is not supported"), "{message}");
    assert!(message.contains("1.26 or newer"), "{message}");
}

#[tokio::test]
async fn supported_servers_pass_and_newer_ones_warn() {
    let verdict = check_version(&emulator("33").client(), &Settings::default())
        .await
        .unwrap();
    assert!(matches!(verdict, VersionVerdict::Supported(_)));
    let verdict = check_version(&emulator("34+").client(), &Settings::default())
        .await
        .unwrap();
    assert!(verdict.warning().is_some_and(|w| w.contains("1.34")));
}

#[tokio::test]
async fn kubernetes_min_version_can_raise_the_floor() {
    let settings = Settings {
        kubernetes_min_version: "1.30.0".into(),
        ..Settings::default()
    };
    let error = check_version(&emulator("29").client(), &settings)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("1.30 or newer"), "{error}");
}

#[test]
fn run_refuses_to_start_without_a_cluster_name() {
    let args = karpenter::commands::run::RunArgs {
        settings: Box::default(),
        kubeconfig: None,
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    let status = karpenter::commands::run::run(&args, &mut out, &mut err);
    assert_eq!(status.code(), 2);
    let err = String::from_utf8(err).unwrap();
    assert!(err.contains("CLUSTER_NAME"), "{err}");
}

#[tokio::test]
async fn the_cluster_dns_address_comes_from_the_kube_dns_service() {
    let emulator = emulator("33");
    let client = emulator.client();
    assert_eq!(cluster_dns(&client).await.unwrap(), None);
    let service: Service = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system"},
        "spec": {"clusterIP": "10.100.0.10", "ports": [{"port": 53, "protocol": "UDP"}]}
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), "kube-system")
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    assert_eq!(
        cluster_dns(&client).await.unwrap(),
        Some("10.100.0.10".parse::<std::net::IpAddr>().unwrap())
    );
}
