//! The daemon's HTTP endpoints as Prometheus and the kubelet's probes read them: `/metrics`
//! parses strictly as `OpenMetrics` text (with Karpenter's metric names in it after a scale-up),
//! plain and gzipped (as Prometheus asks for it), and `/readyz?verbose` / `/healthz?verbose`
//! name their checks.

use crate::exposition::check;
use crate::support::World;

/// The readiness checks `karpenter run` has with an interruption queue (src/daemon/probes.rs,
/// src/cloud.rs).
const READINESS_CHECKS: [&str; 6] = [
    "cache-synced",
    "crds",
    "aws",
    "aws-catalogue",
    "interruption-queue",
    "leader-election",
];

/// Metric families a scale-up leaves in `/metrics` (families without samples are left out).
const FAMILIES: [&str; 7] = [
    "karpenter_nodeclaims_created",
    "karpenter_nodes_created",
    // Refreshed from the cluster store on every scrape, with the node's labels on each series.
    "karpenter_nodes_allocatable",
    "karpenter_pods_state",
    "karpenter_scheduler_scheduling_duration_seconds",
    "karpenter_actor_messages_handled",
    "karpenter_actor_handler_duration_seconds",
];

/// `text` checked as exposition text holding every one of [`FAMILIES`]; `what` names it.
fn with_the_families(text: &str, what: &str) -> crate::exposition::Exposition {
    let exposition = match check(text) {
        Ok(exposition) => exposition,
        Err(problem) => panic!("{what} is not valid exposition text: {problem}\n{text}"),
    };
    for family in FAMILIES {
        assert!(
            exposition.families.contains_key(family),
            "{family} missing from {what}:\n{text}"
        );
    }
    exposition
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_as_prometheus_text_and_the_probes_name_their_checks() {
    let Some(world) = World::start("endpoints").await else {
        return;
    };
    world.apply_nodepool().await;
    let daemon = world.daemon(&[]);
    world.until_leading_and_ready(&daemon).await;
    world.create_pods("web", 1).await;
    world.until_pods_run("web", 1, &[&daemon]).await;

    let text = daemon.metrics_text().await.unwrap();
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF:\n{text}"
    );
    let exposition = with_the_families(&text, "/metrics");
    assert!(exposition.samples > 50, "{text}");
    // The node's series carry its labels (shared between its series, written once per scrape).
    assert!(
        text.lines().any(
            |l| l.starts_with("karpenter_nodes_allocatable{node_name=\"i-")
                && l.contains("resource_type=\"cpu\"")
                && l.contains("capacity_type=\"")
        ),
        "no allocatable cpu series with the node's labels:\n{text}"
    );

    // As Prometheus scrapes by default: gzip, the same families in valid exposition text.
    let (encoding, gunzipped) = daemon.metrics_gzip().await.unwrap();
    assert_eq!(encoding.as_deref(), Some("gzip"), "{gunzipped}");
    with_the_families(&gunzipped, "the gzipped /metrics");

    let (code, body) = daemon.readyz().await.unwrap();
    assert_eq!(code, 200, "{body}");
    for name in READINESS_CHECKS {
        assert!(
            body.lines().any(|l| l == format!("[+]{name} ok")),
            "/readyz?verbose does not name {name}:\n{body}"
        );
    }
    assert_eq!(body.lines().last(), Some("ok"), "{body}");
    let (code, body) = crate::support::Daemon::get(&daemon.health, "/healthz?verbose")
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(
        body.lines().any(|l| l.starts_with("[+]")),
        "/healthz?verbose names its checks:\n{body}"
    );
}
