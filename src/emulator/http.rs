//! HTTP in and out: routes a request's path to discovery, OpenAPI or a resource verb, parses the
//! query parameters the way the API server does (`+` is a space, kube-rs encodes selectors so),
//! applies injected faults, logs the request and renders the reply or the `Status` of a failure.
//!
//! [`EmulatorService`] is the `tower::Service` kube-rs talks to in-process; the loopback server
//! ([`super::server`]) calls the same [`EmulatorService::handle`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};

use super::api::{DeleteOptions, ListOptions, PatchType, Shared, Target, WriteOptions};
use super::body::EmulatorBody;
use super::faults::{RequestRecord, Verb};
use super::kinds::{Behavior, ResourceKind};
use super::openapi;
use super::schema::FieldValidation;
use super::selector::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::table;
use super::watch::{self, WatchRequest};

/// The Kubernetes version the emulator reports (Karpenter v1.5 supports up to 1.33).
pub(crate) const KUBERNETES_VERSION: (&str, &str) = ("1", "33");

/// The emulator as a `tower::Service` over HTTP requests.
#[derive(Clone)]
pub struct EmulatorService {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for EmulatorService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmulatorService").finish_non_exhaustive()
    }
}

impl<B> tower_service::Service<Request<B>> for EmulatorService
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: fmt::Display,
{
    type Response = Response<EmulatorBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let bytes = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(error) => {
                    let failure =
                        ApiError::bad_request(format!("reading the request body: {error}"));
                    return Ok(error_response(&failure));
                }
            };
            Ok(service.handle(Request::from_parts(parts, bytes)).await)
        })
    }
}

/// Where a path leads.
#[derive(Debug)]
enum Route {
    Version,
    CoreVersions,
    Groups,
    Group(String),
    Resources(String, String),
    OpenApiV2,
    OpenApiV3,
    OpenApiV3GroupVersion(String),
    Health,
    Resource(Target),
}

type Query = HashMap<String, String>;

impl EmulatorService {
    /// Serves one request with a collected body.
    pub async fn handle(&self, request: Request<Bytes>) -> Response<EmulatorBody> {
        let shared = &self.shared;
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let raw_query = request.uri().query().unwrap_or("").to_owned();
        let query: Query = form_urlencoded::parse(raw_query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let route = route(shared, &path);
        let mut record = RequestRecord {
            method: method.to_string(),
            path: path.clone(),
            query: raw_query,
            verb: Verb::Discovery,
            resource: None,
            namespace: None,
            name: None,
            subresource: None,
            code: 0,
        };
        if let Ok(Route::Resource(target)) = &route {
            let kind = shared.kinds.get(target.kind);
            record.verb = verb_of(&method, target, &query);
            record.resource = Some(kind.plural.clone());
            record.namespace.clone_from(&target.namespace);
            record.name.clone_from(&target.name);
            record.subresource.clone_from(&target.subresource);
        }
        let fault = shared.faults.check(&record);
        if let Some(delay) = fault.delay {
            tokio::time::sleep(delay).await;
        }
        let response = if let Some(injected) = fault.error {
            let error = ApiError {
                code: injected.code,
                reason: "Injected",
                message: injected.message,
                details: None,
            };
            let mut status = error.to_status();
            status["reason"] = json!(injected.reason);
            json_response(injected.code, Bytes::from(status.to_string()), &[])
        } else {
            let accept = header_text(&request, header::ACCEPT);
            let content_type = header_text(&request, header::CONTENT_TYPE);
            let body = request.into_body();
            match route {
                Err(error) => error_response(&error),
                Ok(route) => {
                    match self.dispatch(route, &method, &query, &accept, &content_type, &body) {
                        Ok(response) => response,
                        Err(error) => error_response(&error),
                    }
                }
            }
        };
        record.code = response.status().as_u16();
        shared.log.push(record);
        response
    }

    fn dispatch(
        &self,
        route: Route,
        method: &Method,
        query: &Query,
        accept: &str,
        content_type: &str,
        body: &Bytes,
    ) -> Result<Response<EmulatorBody>, ApiError> {
        let shared = &self.shared;
        let kinds = &shared.kinds;
        let document = |value: Value| Ok(json_response(200, Bytes::from(value.to_string()), &[]));
        match route {
            Route::Version => {
                let (major, minor) = shared
                    .kubernetes_version
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone();
                document(json!({
                    "major": major,
                    "minor": minor,
                    "gitVersion": format!("v{major}.{minor}.0-karpenter-emulator"),
                    "gitCommit": "0000000000000000000000000000000000000000",
                    "gitTreeState": "clean",
                    "buildDate": "2025-01-01T00:00:00Z",
                    "goVersion": "go1.24.0",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                }))
            }
            Route::CoreVersions => document(json!({
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1" }],
            })),
            Route::Groups => document(kinds.group_list()),
            Route::Group(group) => kinds
                .group(&group)
                .map_or_else(|| Err(ApiError::path_not_found(&group)), document),
            Route::Resources(group, version) => kinds.resource_list(&group, &version).map_or_else(
                || Err(ApiError::path_not_found(&format!("{group}/{version}"))),
                document,
            ),
            Route::OpenApiV2 => Err(ApiError::path_not_found("/openapi/v2")),
            Route::OpenApiV3 => document(openapi::v3_index(kinds)),
            Route::OpenApiV3GroupVersion(gv) => openapi::v3_group_version(kinds, &gv)
                .map_or_else(|| Err(ApiError::path_not_found(&gv)), document),
            Route::Health => Ok(Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "text/plain")
                .body(EmulatorBody::full("ok"))
                .unwrap_or_else(|_| Response::new(EmulatorBody::empty()))),
            Route::Resource(target) => {
                self.resource(&target, method, query, accept, content_type, body)
            }
        }
    }

    fn resource(
        &self,
        target: &Target,
        method: &Method,
        query: &Query,
        accept: &str,
        content_type: &str,
        body: &Bytes,
    ) -> Result<Response<EmulatorBody>, ApiError> {
        let shared = &self.shared;
        let kind = shared.kinds.get(target.kind);
        let write = || -> Result<WriteOptions, ApiError> {
            Ok(WriteOptions {
                dry_run: query.get("dryRun").is_some_and(|d| d == "All"),
                field_validation: FieldValidation::parse(
                    query.get("fieldValidation").map(String::as_str),
                )?,
                field_manager: query.get("fieldManager").cloned(),
                force: query.get("force").is_some_and(|f| f == "true"),
            })
        };
        let sub = target.subresource.as_deref();
        if let Some(sub) = sub {
            let allowed = (sub == "status" && kind.status_subresource)
                || kind.action_subresources().contains(&sub);
            if !allowed {
                return Err(ApiError::path_not_found(&format!("{}/{sub}", kind.plural)));
            }
        }
        let body = &request_body(kind, method, sub, accept, content_type, body)?;
        let reply = match (method.clone(), &target.name, sub) {
            (Method::GET, None, _) => {
                let list = list_options(kind.behavior, query)?;
                if flag(query, "watch") {
                    let request = WatchRequest {
                        target: target.clone(),
                        start: watch::parse_start(list.resource_version.as_deref())?,
                        list,
                        bookmarks: flag(query, "allowWatchBookmarks"),
                        send_initial_events: flag(query, "sendInitialEvents"),
                        timeout: query
                            .get("timeoutSeconds")
                            .and_then(|t| t.parse::<u64>().ok())
                            .map(Duration::from_secs),
                    };
                    let table = wants_table(accept);
                    let body = watch::start(Arc::clone(shared), request)?;
                    let body = if table {
                        table::watch_rows(Arc::clone(shared), target.kind, body)
                    } else {
                        body
                    };
                    return Ok(Response::builder()
                        .status(StatusCode::OK)
                        .header(header::CONTENT_TYPE, "application/json")
                        .header(header::TRANSFER_ENCODING, "chunked")
                        .body(body)
                        .unwrap_or_else(|_| Response::new(EmulatorBody::empty())));
                }
                if wants_table(accept) {
                    let (items, rv, next) = shared.list_items(target, &list)?;
                    let table = table::list(shared, target.kind, &items, rv, next);
                    return Ok(json_response(200, Bytes::from(table.to_string()), &[]));
                }
                shared.list(target, &list)?
            }
            (Method::GET, Some(_), None | Some("status")) => {
                if wants_table(accept) {
                    let reply = shared.get(target)?;
                    let value: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
                    let table = table::single(shared, target.kind, &value);
                    return Ok(json_response(200, Bytes::from(table.to_string()), &[]));
                }
                shared.get(target)?
            }
            (Method::POST, None, None) => shared.create(target, body, &write()?)?,
            (Method::POST, Some(_), Some("eviction")) => shared.evict(target, body)?,
            (Method::POST, Some(_), Some("binding")) => shared.bind(target, body)?,
            (Method::PUT, Some(_), None | Some("status")) => {
                shared.replace(target, body, &write()?)?
            }
            (Method::PATCH, Some(_), None | Some("status")) => {
                let patch_type = PatchType::from_content_type(content_type)
                    .ok_or_else(|| ApiError::unsupported_media_type(content_type))?;
                shared.patch(target, patch_type, body, &write()?)?
            }
            (Method::DELETE, Some(_), None) => {
                shared.delete(target, &delete_options(query, body)?)?
            }
            (Method::DELETE, None, None) => {
                let list = list_options(kind.behavior, query)?;
                shared.delete_collection(target, &list, &delete_options(query, body)?)?
            }
            (method, _, _) => {
                return Err(ApiError::method_not_allowed(format!(
                    "the server does not allow this method on the requested resource ({method} {})",
                    kind.plural
                )));
            }
        };
        Ok(json_response(reply.code, reply.body, &reply.warnings))
    }
}

/// The media type of Kubernetes' protobuf encoding.
pub(super) const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// The JSON body of a request: as sent, or decoded from protobuf. A client that accepts only
/// protobuf answers is refused first (406), as the emulator writes JSON.
fn request_body(
    kind: &ResourceKind,
    method: &Method,
    sub: Option<&str>,
    accept: &str,
    content_type: &str,
    body: &Bytes,
) -> Result<Bytes, ApiError> {
    if accepts_only_protobuf(accept) {
        return Err(ApiError::not_acceptable());
    }
    if content_type.starts_with(PROTOBUF) {
        protobuf_body(kind, method, sub, content_type, body)
    } else {
        // A cheap clone: `Bytes` shares the buffer.
        Ok(body.clone())
    }
}

/// Whether an `Accept` header admits only protobuf, which the emulator does not write
/// (kubectl always lists JSON too).
fn accepts_only_protobuf(accept: &str) -> bool {
    let mut types = accept
        .split(',')
        .map(|t| t.split(';').next().unwrap_or("").trim())
        .filter(|t| !t.is_empty())
        .peekable();
    types.peek().is_some() && types.all(|t| t.starts_with(PROTOBUF))
}

/// The JSON of a protobuf create or replace body; other protobuf requests (patches have no
/// protobuf form) are refused as the server refuses a media type it does not take.
#[cfg(feature = "emulator-protobuf")]
fn protobuf_body(
    kind: &ResourceKind,
    method: &Method,
    sub: Option<&str>,
    content_type: &str,
    body: &Bytes,
) -> Result<Bytes, ApiError> {
    if sub.is_none() && (*method == Method::POST || *method == Method::PUT) {
        super::protobuf::to_json(kind, body)
    } else {
        Err(ApiError::unsupported_media_type(content_type))
    }
}

#[cfg(not(feature = "emulator-protobuf"))]
fn protobuf_body(
    _kind: &ResourceKind,
    _method: &Method,
    _sub: Option<&str>,
    content_type: &str,
    _body: &Bytes,
) -> Result<Bytes, ApiError> {
    Err(ApiError::unsupported_media_type(content_type))
}

fn header_text<B>(request: &Request<B>, name: header::HeaderName) -> String {
    request
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

fn wants_table(accept: &str) -> bool {
    accept.contains("as=Table")
}

fn flag(query: &Query, name: &str) -> bool {
    query.get(name).is_some_and(|v| v == "true" || v == "1")
}

fn list_options(behavior: Behavior, query: &Query) -> Result<ListOptions, ApiError> {
    let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(
        query.get("fieldSelector").map_or("", String::as_str),
        behavior,
    )
    .map_err(|e| ApiError::bad_request(e.0))?;
    let limit = match query.get("limit").filter(|l| !l.is_empty()) {
        Some(text) => Some(
            text.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("limit {text:?} is not a number")))?,
        ),
        None => None,
    };
    Ok(ListOptions {
        labels,
        fields,
        limit,
        continue_token: query.get("continue").filter(|c| !c.is_empty()).cloned(),
        resource_version: query.get("resourceVersion").cloned(),
        resource_version_match: query.get("resourceVersionMatch").cloned(),
    })
}

fn delete_options(query: &Query, body: &Bytes) -> Result<DeleteOptions, ApiError> {
    let base = DeleteOptions {
        grace_period_seconds: query.get("gracePeriodSeconds").and_then(|g| g.parse().ok()),
        uid: None,
        resource_version: None,
        dry_run: query.get("dryRun").is_some_and(|d| d == "All"),
    };
    if body.is_empty() {
        return Ok(base);
    }
    let parsed: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
    Ok(base.with_body(&parsed))
}

fn verb_of(method: &Method, target: &Target, query: &Query) -> Verb {
    match (
        method.clone(),
        target.name.is_some(),
        target.subresource.as_deref(),
    ) {
        (Method::GET, false, _) if flag(query, "watch") => Verb::Watch,
        (Method::GET, false, _) => Verb::List,
        (Method::GET, true, _) => Verb::Get,
        (Method::POST, _, _) => Verb::Create,
        (Method::PUT, _, _) => Verb::Update,
        (Method::PATCH, _, _) => Verb::Patch,
        (Method::DELETE, false, _) => Verb::DeleteCollection,
        (Method::DELETE, true, _) => Verb::Delete,
        _ => Verb::Discovery,
    }
}

fn route(shared: &Shared, path: &str) -> Result<Route, ApiError> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let not_found = || ApiError::path_not_found(path);
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Ok(Route::Version),
        ["healthz" | "readyz" | "livez", ..] => return Ok(Route::Health),
        ["openapi", "v2"] => return Ok(Route::OpenApiV2),
        ["openapi", "v3"] => return Ok(Route::OpenApiV3),
        ["openapi", "v3", rest @ ..] => return Ok(Route::OpenApiV3GroupVersion(rest.join("/"))),
        ["api"] => return Ok(Route::CoreVersions),
        ["api", version] => return Ok(Route::Resources(String::new(), (*version).to_owned())),
        ["apis"] => return Ok(Route::Groups),
        ["apis", group] => return Ok(Route::Group((*group).to_owned())),
        ["apis", group, version] => {
            return Ok(Route::Resources((*group).to_owned(), (*version).to_owned()));
        }
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(not_found()),
    };
    let kinds = &shared.kinds;
    let namespaced_plural = match rest {
        ["namespaces", _, plural, ..] => kinds
            .find(group, version, plural)
            .filter(|id| kinds.get(*id).namespaced),
        _ => None,
    };
    let (namespace, rest) = match (namespaced_plural, rest) {
        (Some(_), ["namespaces", ns, rest @ ..]) => (Some((*ns).to_owned()), rest),
        _ => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(*name), None),
        [plural, name, sub] => (*plural, Some(*name), Some(*sub)),
        _ => return Err(not_found()),
    };
    let kind = kinds.find(group, version, plural).ok_or_else(not_found)?;
    if kinds.get(kind).namespaced && namespace.is_none() && name.is_some() {
        return Err(not_found());
    }
    Ok(Route::Resource(Target {
        kind,
        namespace,
        name: name.map(str::to_owned),
        subresource: subresource.map(str::to_owned),
    }))
}

fn json_response(code: u16, body: Bytes, warnings: &[String]) -> Response<EmulatorBody> {
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json");
    for warning in warnings {
        let text = format!("299 - \"{}\"", warning.replace('"', "'"));
        if let Ok(value) = HeaderValue::from_str(&text) {
            builder = builder.header(header::WARNING, value);
        }
    }
    builder
        .body(EmulatorBody::full(body))
        .unwrap_or_else(|_| Response::new(EmulatorBody::empty()))
}

pub(crate) fn error_response(error: &ApiError) -> Response<EmulatorBody> {
    json_response(error.code, Bytes::from(error.to_status().to_string()), &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_protobuf_only_accept_header_is_refused() {
        assert!(accepts_only_protobuf(PROTOBUF));
        assert!(accepts_only_protobuf(
            "application/vnd.kubernetes.protobuf;stream=watch"
        ));
        assert!(!accepts_only_protobuf(
            "application/vnd.kubernetes.protobuf, application/json"
        ));
        assert!(!accepts_only_protobuf("*/*"));
        assert!(!accepts_only_protobuf(""));
    }
}
