//! Test hooks: injected errors and delays per verb and resource, and the request log.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter::emulator::{FaultRule, Verb};
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use crate::support::{cluster, create_pod, status_of};

#[tokio::test]
async fn an_injected_error_fails_only_the_matching_requests_the_given_number_of_times() {
    let (emulator, client) = cluster();
    emulator.faults().inject(
        FaultRule::fail(503)
            .on(Verb::List)
            .resource("pods")
            .times(1),
    );
    let pods: Api<Pod> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client);
    assert!(nodes.list(&ListParams::default()).await.is_ok());
    let status = status_of(pods.list(&ListParams::default()).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (503, "ServiceUnavailable")
    );
    assert!(pods.list(&ListParams::default()).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn an_injected_delay_holds_the_request_on_tokio_time() {
    let (emulator, client) = cluster();
    emulator.faults().inject(
        FaultRule::delay(Duration::from_secs(30))
            .on(Verb::Create)
            .resource("pods"),
    );
    let started = tokio::time::Instant::now();
    create_pod(&client, "slow", json!({})).await;
    assert!(started.elapsed() >= Duration::from_secs(30));
}

#[tokio::test]
async fn the_request_log_names_verb_resource_namespace_and_code() {
    let (emulator, client) = cluster();
    emulator.clear_requests();
    create_pod(&client, "web", json!({})).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let _ = pods.get("missing").await;
    let log = emulator.requests();
    assert_eq!(log.len(), 2);
    assert_eq!(
        (
            log[0].verb,
            log[0].resource.as_deref(),
            log[0].namespace.as_deref(),
            log[0].code
        ),
        (Verb::Create, Some("pods"), Some("default"), 201)
    );
    assert_eq!(
        (log[1].verb, log[1].name.as_deref(), log[1].code),
        (Verb::Get, Some("missing"), 404)
    );
}
