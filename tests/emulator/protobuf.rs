//! Protobuf request bodies, as kubectl's `create` generators send them for built-in kinds, posted
//! to the emulator on loopback: decoded and stored as JSON, answered in JSON; a field the
//! decoder cannot read is refused with 415 rather than dropped; a client that accepts only
//! protobuf gets 406.

use k8s_openapi::api::core::v1::Namespace;
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use kube::{Api, ResourceExt as _};
use prost::Message as _;
use serde_json::Value;

use crate::support::served;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// `k8s\0` + a `runtime.Unknown` around `object`, as client-go's protobuf serializer writes it.
fn envelope(api_version: &str, kind: &str, object: &impl prost::Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.to_owned()),
            kind: Some(kind.to_owned()),
        }),
        raw: Some(object.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = b"k8s\0".to_vec();
    body.extend(unknown.encode_to_vec());
    body
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        // Go writes its zero-valued fields; the decoder must read them as absent.
        generate_name: Some(String::new()),
        namespace: Some(String::new()),
        creation_timestamp: Some(Time::default()),
        labels: [("team".to_owned(), "a".to_owned())].into(),
        ..ObjectMeta::default()
    }
}

fn post(path: &str, accept: &str, body: Vec<u8>) -> http::Request<Vec<u8>> {
    http::Request::post(path)
        .header(http::header::CONTENT_TYPE, PROTOBUF)
        .header(http::header::ACCEPT, accept)
        .body(body)
        .unwrap()
}

fn status_code(result: Result<String, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_protobuf_namespace_is_created_and_answered_in_json() {
    let (emulator, server, client) = served().await;
    let namespace = core::Namespace {
        metadata: Some(meta("team")),
        spec: Some(core::NamespaceSpec::default()),
        status: Some(core::NamespaceStatus::default()),
    };
    let body = envelope("v1", "Namespace", &namespace);
    let answer = client
        .request_text(post(
            "/api/v1/namespaces",
            &format!("{PROTOBUF}, application/json"),
            body,
        ))
        .await
        .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["kind"], "Namespace");
    assert_eq!(answer["metadata"]["labels"]["team"], "a");
    assert!(answer["metadata"].get("generateName").is_none());
    let stored: Namespace = Api::all(emulator.client()).get("team").await.unwrap();
    assert_eq!(stored.labels()["team"], "a");
    server.shutdown().await;
}

#[tokio::test]
async fn a_protobuf_field_the_decoder_cannot_read_is_refused_not_dropped() {
    let (_emulator, server, client) = served().await;
    let deployment = apps::Deployment {
        metadata: Some(meta("web")),
        spec: Some(apps::DeploymentSpec {
            template: Some(core::PodTemplateSpec {
                metadata: Some(meta("web")),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: Some("web".into()),
                        image: Some("nginx".into()),
                        ..core::Container::default()
                    }],
                    // Read by no conversion here: must not vanish on the way to the store.
                    hostname: Some("web-0".into()),
                    ..core::PodSpec::default()
                }),
            }),
            ..apps::DeploymentSpec::default()
        }),
        status: None,
    };
    let body = envelope("apps/v1", "Deployment", &deployment);
    let (code, message) = status_code(
        client
            .request_text(post(
                "/apis/apps/v1/namespaces/default/deployments",
                "application/json",
                body,
            ))
            .await,
    );
    assert_eq!(code, 415);
    assert!(message.contains("spec.template.spec"), "{message}");
    let body = envelope("v1", "Namespace", &core::Namespace::default());
    let (code, _) = status_code(
        client
            .request_text(post("/api/v1/namespaces", PROTOBUF, body))
            .await,
    );
    assert_eq!(code, 406, "a client accepting only protobuf");
    server.shutdown().await;
}
