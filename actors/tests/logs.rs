//! The lines a NodeClaim's life writes, as `karpenter run` writes them: the daemon's actors over
//! fakes (`support`) on tokio's paused clock, with Karpenter's JSON layer writing to memory.
//! Each lifecycle step writes Karpenter's message with its key facts, inside controller-runtime's
//! reconcile context, and nothing is written per reconcile at INFO.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

mod support;

use std::time::Duration;

use karpenter_actors::logs::{KarpenterJson, LogLine, MemorySink, level_filter};
use karpenter_actors::ports::cloud_provider::CloudProviderError;
use karpenter_actors::testing::CloudOperation;
use karpenter_config::LogLevel;
use serde_json::json;
use support::{Harness, make_ready, nodeclaim, nodeclass, nodepool};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{Layer as _, Registry};

const NODEPOOL: &str = "default";

/// Installs Karpenter's layer at `level` for this thread (the test's actix system runs every
/// actor on it) and returns where its lines go.
fn capture(level: LogLevel) -> (MemorySink, tracing::subscriber::DefaultGuard) {
    let memory = MemorySink::new();
    let subscriber = Registry::default().with(
        KarpenterJson::new(vec![memory.sink()])
            .commit(Some("490ef94"))
            .with_filter(level_filter(level)),
    );
    let guard = tracing::subscriber::set_default(subscriber);
    (memory, guard)
}

fn with_message<'a>(lines: &'a [LogLine], message: &str) -> Vec<&'a LogLine> {
    lines
        .iter()
        .filter(|l| l.str("message") == Some(message))
        .collect()
}

fn one<'a>(lines: &'a [LogLine], message: &str) -> &'a LogLine {
    let found = with_message(lines, message);
    assert_eq!(found.len(), 1, "one {message:?} line in {lines:#?}");
    found[0]
}

/// The keys controller-runtime puts on a NodeClaim reconcile's lines, in its order.
const NODECLAIM_CONTEXT: [&str; 12] = [
    "level",
    "time",
    "logger",
    "message",
    "commit",
    "controller",
    "controllerGroup",
    "controllerKind",
    "NodeClaim",
    "namespace",
    "name",
    "reconcileID",
];

fn assert_nodeclaim_context(line: &LogLine, name: &str) {
    assert_eq!(line.keys()[..12], NODECLAIM_CONTEXT, "{line:?}");
    assert_eq!(line.str("logger"), Some("controller"));
    assert_eq!(line.str("commit"), Some("490ef94"));
    assert_eq!(line.str("controller"), Some("nodeclaim.lifecycle"));
    assert_eq!(line.str("controllerGroup"), Some("karpenter.sh"));
    assert_eq!(line.str("controllerKind"), Some("NodeClaim"));
    assert_eq!(line.get("NodeClaim"), Some(&json!({ "name": name })));
    assert_eq!(line.str("namespace"), Some(""));
    assert_eq!(line.str("name"), Some(name));
    let time = line.str("time").unwrap();
    assert!(
        time.len() == 24 && time.ends_with('Z') && time.as_bytes()[19] == b'.',
        "2006-01-02T15:04:05.000Z: {time}"
    );
}

#[actix::test]
async fn launch_registration_and_initialization_write_karpenters_lines() {
    tokio::time::pause();
    let (memory, _logs) = capture(LogLevel::Info);
    let h = Harness::start();
    h.add_nodeclass(nodeclass(Some(true)));
    // No consolidation: the pool offers the node's instance type, so its empty node would
    // otherwise be a candidate and go 15 s after initialization.
    h.add_nodepool(nodepool(
        NODEPOOL,
        json!({ "spec": { "disruption": { "consolidateAfter": "Never" } } }),
    ));
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.settle().await;
    let node = h.register_node("default-a", &[], &[]);
    h.settle().await;
    h.edit_node(&node, |n| make_ready(n, &[]));
    h.settle().await;
    // Time passes with nothing to do: nothing is written.
    h.advance(Duration::from_mins(10)).await;
    let provider_id = h.provider_id("default-a").unwrap();

    let lines = memory.lines();
    assert_eq!(
        memory.text().lines().count(),
        lines.len(),
        "every line is one JSON object"
    );
    let lifecycle: Vec<&str> = lines
        .iter()
        .filter(|l| l.str("controller") == Some("nodeclaim.lifecycle"))
        .map(|l| l.str("message").unwrap())
        .collect();
    assert_eq!(
        lifecycle,
        [
            "launched nodeclaim",
            "registered nodeclaim",
            "initialized nodeclaim"
        ],
        "one line per step, none per reconcile: {lines:#?}"
    );

    let launched = one(&lines, "launched nodeclaim");
    assert_nodeclaim_context(launched, "default-a");
    assert_eq!(launched.str("level"), Some("INFO"));
    assert_eq!(
        launched.keys()[12..],
        [
            "provider-id",
            "instance-type",
            "zone",
            "capacity-type",
            "allocatable"
        ]
    );
    assert_eq!(launched.str("provider-id"), Some(provider_id.as_str()));
    assert_eq!(launched.str("instance-type"), Some("m5.large"));
    assert_eq!(launched.str("capacity-type"), Some("on-demand"));
    assert!(
        launched
            .str("zone")
            .is_some_and(|z| z.starts_with("us-west-2"))
    );
    assert_eq!(
        launched.get("allocatable").and_then(|a| a.get("memory")),
        Some(&json!("7Gi"))
    );

    // Once launched, the reconcile's context carries the provider id.
    let registered = one(&lines, "registered nodeclaim");
    assert_nodeclaim_context(registered, "default-a");
    assert_eq!(registered.keys()[12..], ["provider-id", "Node"]);
    assert_eq!(registered.str("provider-id"), Some(provider_id.as_str()));
    assert_eq!(registered.get("Node"), Some(&json!({ "name": node })));

    // Once registered, the Node too; the line adds the node's allocatable.
    let initialized = one(&lines, "initialized nodeclaim");
    assert_nodeclaim_context(initialized, "default-a");
    assert_eq!(
        initialized.keys()[12..],
        ["provider-id", "Node", "allocatable"]
    );
    assert_eq!(initialized.get("Node"), Some(&json!({ "name": node })));
    assert!(
        initialized
            .get("allocatable")
            .is_some_and(serde_json::Value::is_object)
    );

    let ids: std::collections::HashSet<&str> = [launched, registered, initialized]
        .iter()
        .map(|l| l.str("reconcileID").unwrap())
        .collect();
    assert_eq!(ids.len(), 3, "a reconcile id per reconcile");
    assert!(
        lines.iter().all(|l| l.str("level") != Some("DEBUG")),
        "LOG_LEVEL=info"
    );
}

#[actix::test]
async fn a_deleted_nodeclaim_writes_the_termination_lines() {
    tokio::time::pause();
    let (memory, _logs) = capture(LogLevel::Info);
    let h = Harness::start();
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.settle().await;
    let node = h.register_node("default-a", &[], &[]);
    h.settle().await;
    h.edit_node(&node, |n| make_ready(n, &[]));
    h.settle().await;
    h.delete_nodeclaim("default-a").await;
    h.advance(Duration::from_secs(20)).await;
    assert!(h.nodeclaim("default-a").is_none(), "terminated");

    let lines = memory.lines();
    let tainted = one(&lines, "tainted node");
    assert_nodeclaim_context(tainted, "default-a");
    assert_eq!(tainted.get("Node"), Some(&json!({ "name": node })));
    assert_eq!(tainted.str("taint.Key"), Some("karpenter.sh/disrupted"));
    assert_eq!(tainted.str("taint.Value"), Some(""));
    assert_eq!(tainted.str("taint.Effect"), Some("NoSchedule"));
    assert_eq!(
        one(&lines, "deleted node").get("Node"),
        Some(&json!({ "name": node }))
    );
    assert_nodeclaim_context(one(&lines, "deleted nodeclaim"), "default-a");
    let order: Vec<&str> = lines.iter().filter_map(|l| l.str("message")).collect();
    let position = |m: &str| order.iter().position(|o| *o == m).unwrap();
    assert!(position("tainted node") < position("deleted node"));
    assert!(position("deleted node") < position("deleted nodeclaim"));
}

#[actix::test]
async fn a_launch_without_capacity_writes_an_error_line_with_the_error_last() {
    tokio::time::pause();
    let (memory, _logs) = capture(LogLevel::Error);
    let h = Harness::start();
    h.cloud.fail_next(
        CloudOperation::Create,
        CloudProviderError::InsufficientCapacity {
            nodeclaim: "default-a".into(),
            message: "all requested instance types were unavailable".into(),
        },
    );
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.advance(Duration::from_secs(1)).await;
    assert!(h.nodeclaim("default-a").is_none());

    let lines = memory.lines();
    let failed = one(&lines, "failed launching nodeclaim");
    assert_nodeclaim_context(failed, "default-a");
    assert_eq!(failed.str("level"), Some("ERROR"));
    assert_eq!(failed.keys().last(), Some(&"error"));
    assert!(
        failed
            .str("error")
            .is_some_and(|e| e.contains("all requested instance types were unavailable")),
        "{failed:?}"
    );
    assert!(
        lines.iter().all(|l| l.str("level") == Some("ERROR")),
        "LOG_LEVEL=error writes errors only: {lines:#?}"
    );
}

#[actix::test]
async fn debug_adds_the_caller_and_the_debug_lines() {
    tokio::time::pause();
    let memory = MemorySink::new();
    let subscriber = Registry::default().with(
        KarpenterJson::new(vec![memory.sink()])
            .caller(true)
            .with_filter(level_filter(LogLevel::Debug)),
    );
    let _logs = tracing::subscriber::set_default(subscriber);
    let h = Harness::start();
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.settle().await;
    let lines = memory.lines();
    assert!(lines.iter().any(|l| l.str("level") == Some("DEBUG")));
    let launched = one(&lines, "launched nodeclaim");
    assert_eq!(
        launched.keys()[..5],
        ["level", "time", "logger", "caller", "message"]
    );
    assert!(
        launched
            .str("caller")
            .is_some_and(|c| c.starts_with("nodeclaim/lifecycle.rs:")),
        "{launched:?}"
    );
}
