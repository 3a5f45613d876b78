//! The daemon's endpoints over real HTTP (wall clock, loopback): /metrics, /healthz, /readyz
//! with named checks, /debug/actors and `karpenter actors` reading it, `/debug/explain/node/`
//! and `karpenter explain node` reading that.

use std::time::Duration;

use karpenter::commands::actors::{self, ActorsArgs};
use karpenter::commands::explain;
use karpenter::daemon::DaemonAssembly;
use karpenter::emulator::Emulator;
use karpenter::http;
use karpenter_actors::runtime::RegistrySnapshot;

use super::support::{inputs, options, settings, world};

const TIMEOUT: Duration = Duration::from_secs(10);

async fn get(url: &str) -> (u16, String) {
    let (status, body) = http::get(url, TIMEOUT).await.unwrap();
    (status.as_u16(), String::from_utf8_lossy(&body).into_owned())
}

/// Polls `url` until it answers 200 (bounded by the test timeout, not a timing assertion).
async fn until_ok(url: &str) -> String {
    tokio::time::timeout(TIMEOUT, async {
        loop {
            let (status, body) = get(url).await;
            if status == 200 {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{url} never answered 200"))
}

#[actix::test]
async fn probes_metrics_and_the_actor_table_answer_over_http() {
    let emulator = Emulator::new().unwrap();
    let world = world();
    world
        .create_interruption_queue("test-cluster", "test-cluster")
        .await
        .unwrap();
    let daemon = DaemonAssembly::start(
        inputs(
            &emulator,
            &world,
            settings(Some("test-cluster"), false),
            "solo",
        ),
        options(),
    )
    .await
    .unwrap();
    let health = daemon.health_url().unwrap();
    let metrics = daemon.metrics_url().unwrap();

    let (status, body) = get(&format!("{health}/healthz")).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let ready = until_ok(&format!("{health}/readyz?verbose")).await;
    for check in [
        "cache-synced",
        "crds",
        "aws",
        "interruption-queue",
        "leader-election",
    ] {
        assert!(ready.contains(&format!("[+]{check} ok")), "{ready}");
    }

    let snapshot: RegistrySnapshot =
        serde_json::from_str(&until_ok(&format!("{metrics}/debug/actors")).await).unwrap();
    let _ = snapshot;
    let text = until_ok(&format!("{metrics}/metrics")).await;
    assert!(text.contains("karpenter_actor_live_actors"), "{text}");
    // The disruption actor's first round (right after the relists) fills its gauges.
    let disruption = tokio::time::timeout(TIMEOUT, async {
        loop {
            let text = until_ok(&format!("{metrics}/metrics")).await;
            if text.contains("karpenter_voluntary_disruption_eligible_nodes{reason=\"empty\"} 0") {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the disruption actor's metrics are served");
    assert!(
        disruption.contains(
            "# TYPE karpenter_voluntary_disruption_decision_evaluation_duration_seconds histogram"
        ),
        "{disruption}"
    );
    assert!(text.trim_end().ends_with("# EOF"));
    assert_eq!(
        text.matches("# EOF").count(),
        1,
        "one EOF for all registries"
    );

    // `karpenter actors` against the same daemon, once the interruption actor runs.
    let table = tokio::time::timeout(TIMEOUT, async {
        loop {
            let snapshot = actors::fetch(&metrics).await.unwrap();
            if snapshot
                .actor("InterruptionActor", "interruption")
                .is_some()
            {
                let mut out = Vec::new();
                actors::print(&snapshot, &ActorsArgs::default(), &mut out);
                return String::from_utf8(out).unwrap();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    assert!(table.starts_with("KIND"), "{table}");
    assert!(table.contains("InterruptionActor"), "{table}");
    assert!(table.contains("DisruptionActor"), "{table}");

    // `karpenter explain node` through the daemon's own HTTP server and its bridge to the
    // actors: a node no round has seen.
    let node = explain::fetch_node(&metrics, "ip-10-0-0-1").await.unwrap();
    assert_eq!(
        node.verdicts,
        [karpenter_actors::disruption::NodeVerdict::NotSeen]
    );
    daemon.shutdown(Duration::from_secs(1)).await;
}

#[actix::test]
async fn a_missing_interruption_queue_fails_readiness_with_its_name() {
    let emulator = Emulator::new().unwrap();
    let world = world();
    let daemon = DaemonAssembly::start(
        inputs(
            &emulator,
            &world,
            settings(Some("no-such-queue"), false),
            "solo",
        ),
        options(),
    )
    .await
    .unwrap();
    let url = format!("{}/readyz", daemon.health_url().unwrap());
    let body = tokio::time::timeout(TIMEOUT, async {
        loop {
            let (status, body) = get(&url).await;
            if status == 500 && body.contains("[+]crds ok") && body.contains("[+]aws ok") {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    assert!(
        body.contains("[-]interruption-queue failed: SQS queue no-such-queue"),
        "{body}"
    );
    let unknown = get(&format!("{}/nope", daemon.metrics_url().unwrap())).await;
    assert_eq!(unknown.0, 404);
    daemon.shutdown(Duration::from_secs(1)).await;
}

#[actix::test]
async fn without_enable_profiling_the_debug_endpoints_are_not_served_and_the_clients_say_why() {
    let emulator = Emulator::new().unwrap();
    let world = world();
    let mut settings = settings(None, false);
    settings.enable_profiling = false;
    let daemon = DaemonAssembly::start(inputs(&emulator, &world, settings, "solo"), options())
        .await
        .unwrap();
    let metrics = daemon.metrics_url().unwrap();
    assert_eq!(get(&format!("{metrics}/debug/actors")).await.0, 404);
    assert_eq!(
        get(&format!("{metrics}/debug/explain/node/ip-10-0-0-1"))
            .await
            .0,
        404
    );
    let text = until_ok(&format!("{metrics}/metrics")).await;
    assert!(text.contains("karpenter_cluster_state_synced"), "{text}");
    let error = actors::fetch(&metrics).await.unwrap_err().to_string();
    assert!(error.contains("ENABLE_PROFILING=true"), "{error}");
    let error = explain::fetch_node(&metrics, "ip-10-0-0-1")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("ENABLE_PROFILING=true"), "{error}");
    daemon.shutdown(Duration::from_secs(1)).await;
}

#[actix::test]
async fn healthz_names_a_check_per_watch_and_the_change_pump() {
    let emulator = Emulator::new().unwrap();
    let world = world();
    let daemon = DaemonAssembly::start(
        inputs(&emulator, &world, settings(None, false), "solo"),
        options(),
    )
    .await
    .unwrap();
    let health = daemon.health_url().unwrap();
    let body = until_ok(&format!("{health}/healthz?verbose")).await;
    for check in [
        "watch-pods",
        "watch-nodeclaims",
        "watch-nodes",
        "change-pump",
        "actors",
    ] {
        assert!(body.contains(&format!("[+]{check} ok")), "{body}");
    }
    daemon.shutdown(Duration::from_secs(1)).await;
}
