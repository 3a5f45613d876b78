//! What `run` reads from the cluster at startup, against the emulator: the Kubernetes version
//! (`/version`) and the cluster DNS address (the kube-dns Service).

use k8s_openapi::api::core::v1::Service;
use karpenter::commands::run::{RunError, check_version};
use karpenter::discovery::cluster_dns;
use karpenter::emulator::{Emulator, EmulatorConfig};
use karpenter::kube::version::KubeVersionSource;
use karpenter_actors::logs::{KarpenterJson, LogLine, MemorySink, level_filter};
use karpenter_config::LogLevel;
use karpenter_config::Settings;
use karpenter_core::domain::version::VersionVerdict;
use kube::Api;
use kube::api::PostParams;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{Layer as _, Registry};

/// `/version` of an emulator reporting 1.`minor`, as `run` reads it without `EKS_CONTROL_PLANE`.
fn source(minor: &str) -> KubeVersionSource {
    KubeVersionSource::new(emulator(minor).client())
}

fn emulator(minor: &str) -> Emulator {
    Emulator::with_config(EmulatorConfig {
        kubernetes_version: ("1".into(), minor.into()),
        ..EmulatorConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn a_server_older_than_1_26_is_refused_with_a_clear_message() {
    let error = check_version(&source("25"), &Settings::default())
        .await
        .unwrap_err();
    assert!(matches!(error, RunError::Unsupported(_)));
    let message = error.to_string();
    assert!(message.contains("1.25 is not supported"), "{message}");
    assert!(message.contains("1.26 or newer"), "{message}");
}

#[tokio::test]
async fn supported_servers_pass_and_newer_ones_warn() {
    let verdict = check_version(&source("33"), &Settings::default())
        .await
        .unwrap();
    assert!(matches!(verdict, VersionVerdict::Supported(_)));
    let verdict = check_version(&source("34+"), &Settings::default())
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
    let error = check_version(&source("29"), &settings).await.unwrap_err();
    assert!(error.to_string().contains("1.30 or newer"), "{error}");
}

/// A subscriber writing Karpenter's JSON lines at `level` into `memory`.
fn json_logs(memory: &MemorySink, level: LogLevel) -> impl tracing::Subscriber + Send + Sync {
    Registry::default().with(
        KarpenterJson::new(vec![memory.sink()])
            .sampling(false)
            .with_filter(level_filter(level)),
    )
}

#[test]
fn run_refuses_to_start_without_a_cluster_name() {
    let args = karpenter::commands::run::RunArgs {
        settings: Box::default(),
        kubeconfig: None,
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    let memory = MemorySink::new();
    let status = tracing::subscriber::with_default(json_logs(&memory, LogLevel::Info), || {
        karpenter::commands::run::run(&args, &mut out, &mut err)
    });
    assert_eq!(status.code(), 2);
    assert!(out.is_empty() && err.is_empty(), "everything is a log line");
    let lines = memory.lines();
    assert_eq!(lines.len(), 1, "{}", memory.text());
    assert_eq!(lines[0].str("level"), Some("ERROR"));
    let error = lines[0].str("error").unwrap_or_default();
    assert!(error.contains("CLUSTER_NAME"), "{error}");
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

/// Runs the `karpenter` binary with only `env` set; returns its exit code, stdout and stderr.
fn run_process(env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .arg("run")
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn the_run_process_says_why_it_cannot_start_in_json_lines_on_stdout() {
    let (code, stdout, stderr) = run_process(&[]);
    assert_eq!(code, Some(2));
    assert!(stderr.is_empty(), "{stderr}");
    let lines: Vec<LogLine> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let error = lines
        .iter()
        .find(|l| l.str("level") == Some("ERROR"))
        .unwrap();
    assert_eq!(error.keys()[..4], ["level", "time", "logger", "message"]);
    assert!(error.str("error").unwrap().contains("CLUSTER_NAME"));
    assert!(error.get("caller").is_none(), "caller only at debug");
}

#[test]
fn the_run_process_writes_to_log_output_paths_with_the_caller_at_debug() {
    let path = std::env::temp_dir().join(format!("karpenter-run-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let (code, stdout, stderr) = run_process(&[
        ("LOG_LEVEL", "debug"),
        ("LOG_OUTPUT_PATHS", path.to_str().unwrap()),
    ]);
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(code, Some(2));
    assert!(stdout.is_empty() && stderr.is_empty(), "{stdout}{stderr}");
    let lines: Vec<LogLine> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(!lines.is_empty());
    for line in &lines {
        assert_eq!(
            line.keys()[..5],
            ["level", "time", "logger", "caller", "message"]
        );
    }
}

#[test]
fn the_run_process_reports_an_unopenable_log_output_as_json_on_stderr() {
    let (code, stdout, stderr) = run_process(&[(
        "LOG_OUTPUT_PATHS",
        "/nonexistent-karpenter-dir/karpenter.log",
    )]);
    assert_eq!(code, Some(2));
    assert!(stdout.is_empty(), "{stdout}");
    let line: LogLine = serde_json::from_str(stderr.trim_end()).unwrap();
    assert_eq!(line.str("level"), Some("ERROR"));
    assert!(
        line.str("error")
            .unwrap()
            .contains("/nonexistent-karpenter-dir")
    );
}
