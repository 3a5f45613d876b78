//! Pod writes of the harness whose replies it does not read: the workloads' creates, the
//! scheduler's status patches and the kubelet's. Each is the request kube-rs's `Api<Pod>` sends;
//! an error reply is the same `kube::Error`, but a success is not decoded into a `Pod` (at
//! 50,000 pods, 150,000 replies of about 1.3 KB each, decoded only to be dropped).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::core::Request;
use serde::Serialize;

fn pods(namespace: &str) -> Request {
    Request::new(<Pod as kube::Resource>::url_path(&(), Some(namespace)))
}

/// Creates `pod` in `namespace`.
pub(crate) async fn create_pod(
    client: &kube::Client,
    namespace: &str,
    pod: &Pod,
) -> kube::Result<()> {
    let body = serde_json::to_vec(pod).map_err(kube::Error::SerdeError)?;
    let request = pods(namespace)
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    client.request_text(request).await.map(drop)
}

/// Patches the status of pod `name` in `namespace`.
pub(crate) async fn patch_pod_status<P: Serialize + std::fmt::Debug>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    params: &PatchParams,
    patch: &Patch<P>,
) -> kube::Result<()> {
    let request = pods(namespace)
        .patch_subresource("status", name, params, patch)
        .map_err(kube::Error::BuildRequest)?;
    client.request_text(request).await.map(drop)
}
