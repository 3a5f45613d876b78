//! The emulator on loopback: kube-rs through a written kubeconfig, `karpenter simulate --serve`,
//! and kubectl's everyday verbs, its protobuf `create` generators among them (skipped with a note
//! when kubectl is not installed).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::Pod;
use karpenter::commands::simulate::{self, SimulateArgs};
use karpenter::emulator::{Emulator, LoopbackServer};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::json;

use crate::support::{client_for, pod, served};

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("karpenter-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn kube_rs_reaches_the_loopback_server_through_its_kubeconfig() {
    let (emulator, server, client) = served().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.create(&PostParams::default(), &pod("remote", json!({})))
        .await
        .unwrap();
    let listed = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items[0].name_any(), "remote");
    // The in-process client sees the same cluster.
    let local: Api<Pod> = Api::namespaced(emulator.client(), "default");
    assert!(local.get("remote").await.is_ok());
    // So does the daemon's own connection code, from a kubeconfig file.
    let dir = scratch_dir("connect");
    let path = dir.join("kubeconfig");
    server.write_kubeconfig(&path).unwrap();
    let connected = karpenter::kube::connect(Some(&path)).await.unwrap();
    assert!(
        Api::<Pod>::default_namespaced(connected)
            .get("remote")
            .await
            .is_ok()
    );
    std::fs::remove_dir_all(dir).ok();
    server.shutdown().await;
}

#[tokio::test]
async fn simulate_serve_writes_a_kubeconfig_and_stops_when_told() {
    let dir = scratch_dir("simulate");
    let path = dir.join("kubeconfig");
    let args = SimulateArgs {
        serve: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig: Some(path.clone()),
        ..SimulateArgs::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut out = Vec::new();
    let mut err = Vec::new();
    let path_for_task = path.clone();
    let checker = tokio::spawn(async move {
        // The command writes the kubeconfig before it waits for the stop signal.
        while !path_for_task.exists() {
            tokio::task::yield_now().await;
        }
        let text = std::fs::read_to_string(&path_for_task).unwrap();
        let client = client_for(&text).await;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
        let found = namespaces.get("kube-system").await.is_ok();
        let _ = stop.send(());
        found
    });
    let status = simulate::serve_until(
        &args,
        async {
            let _ = stopped.await;
        },
        &mut out,
        &mut err,
    )
    .await;
    assert!(checker.await.unwrap(), "the served emulator answered");
    assert_eq!(status.code(), 0, "{}", String::from_utf8_lossy(&err));
    let printed = String::from_utf8(out).unwrap();
    assert!(
        printed.contains(&format!("kubeconfig: {}", path.display())),
        "{printed}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn simulate_without_serve_explains_what_is_missing() {
    let args = SimulateArgs {
        serve: None,
        kubeconfig: None,
        ..SimulateArgs::default()
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    let status = simulate::serve_until(&args, async {}, &mut out, &mut err).await;
    assert_eq!(status.code(), 2);
    assert!(String::from_utf8(err).unwrap().contains("--serve"));
}

/// An emulator on loopback with its kubeconfig written in a scratch directory named `name`.
async fn served_for_kubectl(name: &str) -> (Emulator, LoopbackServer, PathBuf, PathBuf) {
    let emulator = Emulator::new().unwrap();
    let server = emulator
        .serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let dir = scratch_dir(name);
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    (emulator, server, dir, kubeconfig)
}

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs kubectl against `kubeconfig`; returns stdout, failing the test on a non-zero exit.
fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

const NODEPOOL: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
";

const CONFIGMAP: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  a: b
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectls_everyday_verbs_work_against_the_emulator() {
    if !kubectl_available() {
        println!("note: kubectl is not installed; skipping the kubectl smoke test");
        return;
    }
    let (_emulator, server, dir, kubeconfig) = served_for_kubectl("kubectl").await;
    std::fs::write(dir.join("nodepool.yaml"), NODEPOOL).unwrap();
    std::fs::write(dir.join("configmap.yaml"), CONFIGMAP).unwrap();
    let dir_for_blocking = dir.clone();
    tokio::task::spawn_blocking(move || exercise_kubectl(&dir_for_blocking, &kubeconfig))
        .await
        .unwrap();
    server.shutdown().await;
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_sends_protobuf_and_the_emulator_stores_it() {
    if !kubectl_available() {
        println!("note: kubectl is not installed; skipping the kubectl create (protobuf) test");
        return;
    }
    let (emulator, server, dir, kubeconfig) = served_for_kubectl("kubectl-create").await;
    let config = kubeconfig.clone();
    tokio::task::spawn_blocking(move || {
        let k = |line: &str| kubectl(&config, &words(line));
        assert!(k("create namespace team").contains("namespace/team created"));
        assert!(
            k("create configmap settings -n team --from-literal=a=b")
                .contains("configmap/settings created")
        );
        assert!(
            k("create deployment web -n team --image=nginx --replicas=2")
                .contains("deployment.apps/web created")
        );
        assert!(
            k("create poddisruptionbudget web -n team --selector=app=web --min-available=1")
                .contains("poddisruptionbudget.policy/web created")
        );
        assert!(
            k("create service clusterip web -n team --tcp=80:8080").contains("service/web created")
        );
    })
    .await
    .unwrap();
    let client = emulator.client();
    let namespace: k8s_openapi::api::core::v1::Namespace =
        Api::all(client.clone()).get("team").await.unwrap();
    assert_eq!(namespace.name_any(), "team");
    let map: k8s_openapi::api::core::v1::ConfigMap = Api::namespaced(client.clone(), "team")
        .get("settings")
        .await
        .unwrap();
    assert_eq!(map.data.unwrap()["a"], "b");
    let web: k8s_openapi::api::apps::v1::Deployment =
        Api::namespaced(client, "team").get("web").await.unwrap();
    let spec = web.spec;
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.containers[0].image.as_deref(), Some("nginx"));
    server.shutdown().await;
    std::fs::remove_dir_all(dir).ok();
}

/// Splits a kubectl command line on spaces (for arguments without spaces).
fn words(line: &str) -> Vec<&str> {
    line.split(' ').collect()
}

/// The kubectl session of the smoke test (blocking: kubectl runs as child processes).
fn exercise_kubectl(dir: &Path, kubeconfig: &Path) {
    let k = |line: &str| kubectl(kubeconfig, &words(line));
    let nodepool_file = dir.join("nodepool.yaml").display().to_string();
    let configmap_file = dir.join("configmap.yaml").display().to_string();

    // A watch started first sees the pod created below.
    let mut watch = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(words("get pods -w -o name"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    assert!(
        k(&format!("apply -f {nodepool_file}")).contains("nodepool.karpenter.sh/default created")
    );
    assert!(k("get nodepools").contains("default"));
    assert!(k(&format!("create -f {configmap_file}")).contains("configmap/settings created"));
    assert!(k("run web --image=nginx --labels=app=web,tier=front").contains("pod/web created"));
    k("label pod web env=prod");
    let selected =
        |selector: &str| kubectl(kubeconfig, &["get", "pods", "-l", selector, "-o", "name"]);
    assert_eq!(selected("env in (prod,dev),tier").trim(), "pod/web");
    assert_eq!(selected("env notin (prod)").trim(), "");
    assert_eq!(
        k("get pods --field-selector status.phase=Pending -o name").trim(),
        "pod/web"
    );
    k(r#"patch pod web -p {"metadata":{"labels":{"patched":"strategic"}}}"#);
    k(r#"patch nodepool default --type merge -p {"spec":{"weight":10}}"#);
    assert_eq!(
        k("get nodepool default -o jsonpath={.spec.weight}").trim(),
        "10"
    );
    k("label nodepool default team=a");
    let rejected = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(words(
            r#"patch nodepool default --type merge -p {"spec":{"weight":1000}}"#,
        ))
        .output()
        .unwrap();
    assert!(!rejected.status.success());
    assert!(String::from_utf8_lossy(&rejected.stderr).contains("spec.weight"));
    let web = dir.join("web.yaml");
    std::fs::write(&web, k("get pod web -o yaml")).unwrap();
    assert!(k(&format!("replace -f {}", web.display())).contains("pod/web replaced"));
    assert!(k("delete pod web").contains("deleted"));
    assert!(k(&format!("delete -f {nodepool_file}")).contains("deleted"));
    assert_eq!(k("get nodepools -o name").trim(), "");

    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    watch.kill().ok();
    watch.wait().ok();
    assert_eq!(first, "pod/web");
}
