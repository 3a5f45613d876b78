//! Throughput and memory of the Kubernetes API emulator at the scale of a large simulation:
//! 10,000 pods and 5,000 nodes.
//!
//! - `list/*`: a full list served by the emulator (raw HTTP through the service), in one page or
//!   in kube-rs's pages of 500, and the same list decoded into typed objects by kube-rs (what
//!   the daemon pays).
//! - `watch/catch_up_5000`: a watch resuming 5,000 events back reads them all.
//! - `write/patch_pod_status`: merge patches of pod status (the simulation's hottest write).
//!
//! Before the benchmarks it prints the load time and the memory held: the emulator's own count
//! of stored bytes and the process's resident set growth.
//!
//! Run: `cargo bench --bench emulator -- --quick`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::cast_precision_loss,
    reason = "benchmark setup: a failed unwrap is a broken benchmark; sizes are reported approximately"
)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group};
use http_body_util::{BodyExt as _, Full};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use karpenter::emulator::{Emulator, EmulatorService};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::runtime::Runtime;
use tower_service::Service as _;

const PODS: usize = 10_000;
const NODES: usize = 5_000;
const NAMESPACES: usize = 20;
const CATCH_UP: usize = 5_000;

fn pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("app-{}-{i:05}", i % 100),
            "namespace": format!("team-{}", i % NAMESPACES),
            "labels": { "app": format!("app-{}", i % 100), "pod-template-hash": "7d9f8c6b5", "tier": if i.is_multiple_of(3) { "front" } else { "back" } },
            "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("app-{}-7d9f8c6b5", i % 100), "uid": "5b0a3c9e-0000-4000-8000-000000000000", "controller": true, "blockOwnerDeletion": true }],
        },
        "spec": {
            "nodeName": format!("node-{:04}", i % NODES),
            "containers": [{
                "name": "app",
                "image": "registry.example.com/team/app:1.42.0",
                "ports": [{ "containerPort": 8080, "protocol": "TCP" }],
                "resources": { "requests": { "cpu": "500m", "memory": "512Mi" }, "limits": { "memory": "1Gi" } },
                "env": [{ "name": "LOG_LEVEL", "value": "info" }],
            }],
            "tolerations": [
                { "key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 },
                { "key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 },
            ],
            "nodeSelector": { "kubernetes.io/os": "linux" },
        },
    }))
    .unwrap()
}

fn node(i: usize) -> Node {
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("node-{i:04}"),
            "labels": {
                "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": format!("node-{i:04}"),
                "node.kubernetes.io/instance-type": "m5.2xlarge", "topology.kubernetes.io/zone": format!("us-west-2{}", ["a", "b", "c"][i % 3]),
                "karpenter.sh/capacity-type": if i.is_multiple_of(2) { "spot" } else { "on-demand" }, "karpenter.sh/nodepool": "default",
                "karpenter.sh/registered": "true", "karpenter.sh/initialized": "true",
            },
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": { "providerID": format!("aws:///us-west-2a/i-{i:017x}") },
        "status": {
            "capacity": { "cpu": "8", "memory": "32386524Ki", "pods": "58", "ephemeral-storage": "20959212Ki" },
            "allocatable": { "cpu": "7910m", "memory": "31369692Ki", "pods": "58", "ephemeral-storage": "18242267924" },
            "conditions": [
                { "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status", "lastHeartbeatTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z" },
                { "type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "", "lastHeartbeatTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z" },
            ],
            "nodeInfo": { "kubeletVersion": "v1.33.0-eks", "containerRuntimeVersion": "containerd://1.7.27", "kernelVersion": "6.1.0", "osImage": "Amazon Linux 2023", "operatingSystem": "linux", "architecture": "amd64", "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": "" },
        },
    }))
    .unwrap()
}

/// Resident set size in bytes (Linux), or 0 where unavailable.
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

async fn load(emulator: &Emulator) {
    let client = emulator.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for n in 0..NAMESPACES {
        let namespace =
            serde_json::from_value(json!({ "metadata": { "name": format!("team-{n}") } })).unwrap();
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for i in 0..NODES {
        nodes
            .create(&PostParams::default(), &node(i))
            .await
            .unwrap();
    }
    for i in 0..PODS {
        let pod = pod(i);
        let api: Api<Pod> =
            Api::namespaced(client.clone(), pod.metadata.namespace.as_deref().unwrap());
        api.create(&PostParams::default(), &pod).await.unwrap();
    }
}

async fn get(service: &mut EmulatorService, uri: &str) -> Bytes {
    let request = http::Request::get(uri)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = service.call(request).await.unwrap();
    response.into_body().collect().await.unwrap().to_bytes()
}

/// Reads a watch until `events` events arrived.
async fn watch(service: &mut EmulatorService, uri: &str, events: usize) {
    let request = http::Request::get(uri)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let mut body = service.call(request).await.unwrap().into_body();
    let mut seen = 0;
    while seen < events {
        let frame = body.frame().await.unwrap().unwrap();
        let data = frame.into_data().unwrap();
        seen += data.split(|b| *b == b'\n').count() - 1;
    }
}

/// Loads the cluster and prints load time and memory.
fn load_and_report(runtime: &Runtime) -> Emulator {
    let before = resident_bytes();
    let emulator = Emulator::new().unwrap();
    let started = Instant::now();
    runtime.block_on(load(&emulator));
    let loaded = started.elapsed();
    let after = resident_bytes();
    let stats = emulator.stats();
    let stored: usize = stats.iter().map(|s| s.object_bytes).sum();
    let history: usize = stats.iter().map(|s| s.history_bytes).sum();
    println!(
        "loaded {PODS} pods and {NODES} nodes through kube-rs in {loaded:.2?} ({:.0} creates/s)",
        (PODS + NODES) as f64 / loaded.as_secs_f64()
    );
    println!(
        "memory: stored objects {:.1} MiB, history not shared with them {:.1} MiB, process RSS grew {:.1} MiB",
        stored as f64 / 1_048_576.0,
        history as f64 / 1_048_576.0,
        after.saturating_sub(before) as f64 / 1_048_576.0
    );
    for stat in stats.iter().filter(|s| s.objects > 100) {
        println!(
            "  {}: {} objects, {:.0} bytes each",
            stat.kind,
            stat.objects,
            stat.object_bytes as f64 / stat.objects as f64
        );
    }
    emulator
}

fn list_benches(c: &mut Criterion, runtime: &Runtime, emulator: &Emulator) {
    let service = emulator.service();
    let mut list = c.benchmark_group("list");
    list.sample_size(10)
        .measurement_time(Duration::from_secs(5));
    list.throughput(Throughput::Elements(PODS as u64));
    list.bench_function("pods_10000_raw", |b| {
        let mut service = service.clone();
        b.iter(|| runtime.block_on(get(&mut service, "/api/v1/pods")));
    });
    list.bench_function("pods_10000_pages_of_500_raw", |b| {
        let mut service = service.clone();
        b.iter(|| runtime.block_on(paged(&mut service)));
    });
    list.bench_function("pods_10000_typed_by_kube_rs", |b| {
        let pods: Api<Pod> = Api::all(emulator.client());
        b.iter(|| runtime.block_on(pods.list(&ListParams::default())).unwrap());
    });
    list.bench_function("pods_selected_by_label_raw", |b| {
        let mut service = service.clone();
        b.iter(|| {
            runtime.block_on(get(
                &mut service,
                "/api/v1/pods?labelSelector=tier+in+(front)",
            ))
        });
    });
    list.throughput(Throughput::Elements(NODES as u64));
    list.bench_function("nodes_5000_raw", |b| {
        let mut service = service.clone();
        b.iter(|| runtime.block_on(get(&mut service, "/api/v1/nodes")));
    });
    list.finish();
}

/// Lists all pods in pages of 500, as kube-rs's watcher does.
async fn paged(service: &mut EmulatorService) {
    let mut token = String::new();
    loop {
        let uri = format!("/api/v1/pods?limit=500&continue={}", form_encode(&token));
        let page = get(service, &uri).await;
        match continue_token(&page) {
            Some(next) => token = next,
            None => break,
        }
    }
}

/// The continue token of a list page, read from its metadata (which comes first) without
/// parsing the items, so the benchmark measures the emulator rather than the client.
fn continue_token(page: &[u8]) -> Option<String> {
    let head = &page[..page.len().min(512)];
    let end = head.windows(9).position(|w| w == b"\"items\":[")?;
    let metadata: serde_json::Value =
        serde_json::from_slice(&[&head[..end], b"\"items\":[]}"].concat()).ok()?;
    metadata
        .pointer("/metadata/continue")
        .and_then(|c| c.as_str())
        .map(str::to_owned)
}

fn write_benches(c: &mut Criterion, runtime: &Runtime, emulator: &Emulator) {
    let mut writes = c.benchmark_group("write");
    writes
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    writes.throughput(Throughput::Elements(1));
    let pods: Api<Pod> = Api::namespaced(emulator.client(), "team-0");
    let mut round = 0_u64;
    writes.bench_function("patch_pod_status", |b| {
        b.iter(|| {
            round += 1;
            let patch = json!({ "status": { "phase": "Running", "podIP": format!("10.0.{}.{}", round % 250, round % 200) } });
            runtime
                .block_on(pods.patch_status("app-0-00000", &PatchParams::default(), &Patch::Merge(&patch)))
                .unwrap()
        });
    });
    writes.finish();
}

fn watch_benches(c: &mut Criterion, runtime: &Runtime, emulator: &Emulator) {
    // History for the catch-up: CATCH_UP label changes of pods.
    let start_rv = emulator.resource_version();
    runtime.block_on(async {
        for i in 0..CATCH_UP {
            let pod = pod(i);
            let api: Api<Pod> = Api::namespaced(
                emulator.client(),
                pod.metadata.namespace.as_deref().unwrap(),
            );
            let labels = json!({ "metadata": { "labels": { "round": "1" } } });
            api.patch(
                pod.metadata.name.as_deref().unwrap(),
                &PatchParams::default(),
                &Patch::Merge(&labels),
            )
            .await
            .unwrap();
        }
    });
    let mut watches = c.benchmark_group("watch");
    watches
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    watches.throughput(Throughput::Elements(CATCH_UP as u64));
    watches.bench_function("catch_up_5000", |b| {
        let mut service = emulator.service();
        let uri = format!("/api/v1/pods?watch=true&resourceVersion={start_rv}");
        b.iter(|| runtime.block_on(watch(&mut service, &uri, CATCH_UP)));
    });
    watches.finish();
}

fn benches(c: &mut Criterion) {
    let runtime = Runtime::new().unwrap();
    // kube clients spawn their request buffer on the current runtime.
    let _entered = runtime.enter();
    let emulator = load_and_report(&runtime);
    list_benches(c, &runtime, &emulator);
    write_benches(c, &runtime, &emulator);
    watch_benches(c, &runtime, &emulator);
}

fn form_encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

criterion_group!(emulator, benches);

fn main() {
    emulator();
    Criterion::default().configure_from_args().final_summary();
}
