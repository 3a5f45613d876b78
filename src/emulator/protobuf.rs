//! Protobuf request bodies, as kubectl sends them for built-in kinds (`kubectl create namespace`,
//! `create configmap`, `create deployment`): `k8s\0`, then a `runtime.Unknown` whose `raw` is the
//! object's message. [`to_json`] turns one into the JSON document the store holds, so the write
//! continues as if the client had sent JSON; the answer is JSON, which kubectl accepts alongside
//! protobuf.
//!
//! The kinds decoded are those kubectl's `create` generators make that the emulator serves:
//! Namespace, ConfigMap, Deployment (its pod template with the container fields a workload
//! needs here), Service and PodDisruptionBudget. Nothing is dropped silently: every field the
//! conversion does not know must still be empty or zero after it took the ones it knows (Go's
//! encoder writes every non-pointer field, zero or not), else the request is refused with 415 and
//! the path of what it could not read, so the client can send JSON instead.

use std::collections::BTreeMap;

use base64::Engine as _;
use bytes::Bytes;
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::policy::v1 as policy;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::{Map, Value, json};

use super::kinds::ResourceKind;
use super::status::ApiError;

/// What every protobuf body starts with.
const MAGIC: &[u8] = b"k8s\0";

/// The JSON document of a protobuf body for `kind`.
pub(crate) fn to_json(kind: &ResourceKind, body: &[u8]) -> Result<Bytes, ApiError> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| ApiError::bad_request("protobuf body does not start with \"k8s\\0\""))?;
    let unknown = Unknown::decode(envelope)
        .map_err(|e| ApiError::bad_request(format!("protobuf envelope: {e}")))?;
    if unknown
        .content_encoding
        .as_deref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(ApiError::bad_request(
            "protobuf content encodings are not supported",
        ));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let (api_version, kind_name) = (
        type_meta.api_version.unwrap_or_default(),
        type_meta.kind.unwrap_or_default(),
    );
    if api_version != kind.api_version() || kind_name != kind.kind {
        return Err(ApiError::bad_request(format!(
            "protobuf body holds {api_version}/{kind_name}, not {}/{}",
            kind.api_version(),
            kind.kind
        )));
    }
    let raw = unknown.raw.unwrap_or_default();
    let invalid =
        |e: prost::DecodeError| ApiError::bad_request(format!("protobuf {kind_name}: {e}"));
    let object = match (kind.group.as_str(), kind.kind.as_str()) {
        ("", "Namespace") => namespace(core::Namespace::decode(raw.as_slice()).map_err(invalid)?),
        ("", "ConfigMap") => config_map(core::ConfigMap::decode(raw.as_slice()).map_err(invalid)?),
        ("", "Service") => service(core::Service::decode(raw.as_slice()).map_err(invalid)?),
        ("apps", "Deployment") => {
            deployment(apps::Deployment::decode(raw.as_slice()).map_err(invalid)?)
        }
        ("policy", "PodDisruptionBudget") => pod_disruption_budget(
            policy::PodDisruptionBudget::decode(raw.as_slice()).map_err(invalid)?,
        ),
        _ => Err(Unread(String::new())),
    };
    let mut object = object.map_err(|Unread(path)| {
        let place = if path.is_empty() {
            String::new()
        } else {
            format!(" (fields under {path})")
        };
        ApiError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!(
                "the emulator cannot read this protobuf {}{place}; send it as application/json",
                kind.kind
            ),
            details: None,
        }
    })?;
    object.insert("apiVersion".into(), json!(api_version));
    object.insert("kind".into(), json!(kind_name));
    Ok(Bytes::from(Value::Object(object).to_string()))
}

/// A part of the message the conversion does not read, by field path.
struct Unread(String);

type Converted = Result<Map<String, Value>, Unread>;

/// Fails when `rest` (a message after the known fields were taken out) still holds a value.
fn all_read<M: Message>(rest: &M, path: &str) -> Result<(), Unread> {
    if is_zero(&rest.encode_to_vec()) {
        Ok(())
    } else {
        Err(Unread(path.to_owned()))
    }
}

/// Whether encoded protobuf fields are all zero: zero varints and fixed values, empty strings,
/// and nested messages whose own fields are all zero (how Go writes its unset non-pointer fields).
fn is_zero(mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        let Ok(tag) = prost::encoding::decode_varint(&mut bytes) else {
            return false;
        };
        let zero = match tag & 0b111 {
            0 => prost::encoding::decode_varint(&mut bytes).is_ok_and(|v| v == 0),
            1 | 5 => {
                let width = if tag & 0b111 == 1 { 8 } else { 4 };
                let Some((value, rest)) = bytes.split_at_checked(width) else {
                    return false;
                };
                bytes = rest;
                value.iter().all(|b| *b == 0)
            }
            2 => {
                let Some((payload, rest)) = prost::encoding::decode_varint(&mut bytes)
                    .ok()
                    .and_then(|len| usize::try_from(len).ok())
                    .and_then(|len| bytes.split_at_checked(len))
                else {
                    return false;
                };
                bytes = rest;
                payload.is_empty() || is_zero(payload)
            }
            _ => false,
        };
        if !zero {
            return false;
        }
    }
    true
}

/// Builds a JSON object the way Go's encoder writes it: `omitempty` fields only when set.
#[derive(Default)]
struct Fields(Map<String, Value>);

impl Fields {
    /// A field Go holds by value: its zero value is absent from the JSON.
    fn text(&mut self, name: &str, value: Option<String>) -> &mut Self {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            self.0.insert(name.into(), json!(value));
        }
        self
    }

    fn number(&mut self, name: &str, value: Option<i64>) -> &mut Self {
        if let Some(value) = value.filter(|v| *v != 0) {
            self.0.insert(name.into(), json!(value));
        }
        self
    }

    fn flag(&mut self, name: &str, value: Option<bool>) -> &mut Self {
        if value == Some(true) {
            self.0.insert(name.into(), json!(true));
        }
        self
    }

    /// A field Go holds by pointer: present whenever it was sent, zero or not.
    fn set(&mut self, name: &str, value: Option<impl Into<Value>>) -> &mut Self {
        if let Some(value) = value {
            self.0.insert(name.into(), value.into());
        }
        self
    }

    fn strings(&mut self, name: &str, values: Vec<String>) -> &mut Self {
        if !values.is_empty() {
            let items = values.into_iter().map(Value::String).collect();
            self.0.insert(name.into(), Value::Array(items));
        }
        self
    }

    fn map(&mut self, name: &str, values: BTreeMap<String, String>) -> &mut Self {
        if !values.is_empty() {
            let entries = values
                .into_iter()
                .map(|(key, value)| (key, Value::String(value)))
                .collect();
            self.0.insert(name.into(), Value::Object(entries));
        }
        self
    }

    fn list(&mut self, name: &str, values: Vec<Map<String, Value>>) -> &mut Self {
        if !values.is_empty() {
            self.0.insert(
                name.into(),
                Value::Array(values.into_iter().map(Value::Object).collect()),
            );
        }
        self
    }

    /// A nested object; an empty one is left out, as Go leaves out an empty struct's fields.
    fn object(&mut self, name: &str, value: Option<Map<String, Value>>) -> &mut Self {
        if let Some(value) = value {
            self.0.insert(name.into(), Value::Object(value));
        }
        self
    }

    fn done(&mut self) -> Map<String, Value> {
        std::mem::take(&mut self.0)
    }
}

fn each<T>(
    items: Vec<T>,
    convert: impl Fn(T) -> Converted,
) -> Result<Vec<Map<String, Value>>, Unread> {
    items.into_iter().map(convert).collect()
}

fn time(value: Option<meta::Time>) -> Option<Value> {
    let value = value?;
    let seconds = value.seconds.unwrap_or(0);
    let nanos = value.nanos.unwrap_or(0);
    if seconds == 0 && nanos == 0 {
        return None; // Go's zero time, written as null and dropped here
    }
    let nanos = i64::from(nanos).clamp(0, 999_999_999);
    jiff::Timestamp::new(seconds, i32::try_from(nanos).unwrap_or(0))
        .ok()
        .map(|t| json!(t.to_string()))
}

fn metadata(value: Option<meta::ObjectMeta>) -> Result<Option<Map<String, Value>>, Unread> {
    let Some(mut m) = value else { return Ok(None) };
    let mut out = Fields::default();
    out.text("name", m.name.take())
        .text("generateName", m.generate_name.take())
        .text("namespace", m.namespace.take())
        .text("uid", m.uid.take())
        .text("resourceVersion", m.resource_version.take())
        .number("generation", m.generation.take())
        .set("creationTimestamp", time(m.creation_timestamp.take()))
        .set("deletionTimestamp", time(m.deletion_timestamp.take()))
        .set(
            "deletionGracePeriodSeconds",
            m.deletion_grace_period_seconds.take(),
        )
        .map("labels", std::mem::take(&mut m.labels))
        .map("annotations", std::mem::take(&mut m.annotations))
        .list(
            "ownerReferences",
            each(std::mem::take(&mut m.owner_references), owner)?,
        )
        .strings("finalizers", std::mem::take(&mut m.finalizers));
    // The server keeps its own selfLink and managed fields.
    m.self_link = None;
    m.managed_fields.clear();
    all_read(&m, "metadata")?;
    Ok(Some(out.done()))
}

fn owner(mut o: meta::OwnerReference) -> Converted {
    let mut out = Fields::default();
    out.text("apiVersion", o.api_version.take())
        .text("kind", o.kind.take())
        .text("name", o.name.take())
        .text("uid", o.uid.take())
        .set("controller", o.controller.take())
        .set("blockOwnerDeletion", o.block_owner_deletion.take());
    all_read(&o, "metadata.ownerReferences")?;
    Ok(out.done())
}

fn selector(
    value: Option<meta::LabelSelector>,
    path: &str,
) -> Result<Option<Map<String, Value>>, Unread> {
    let Some(mut s) = value else { return Ok(None) };
    let expressions = each(std::mem::take(&mut s.match_expressions), |mut e| {
        let mut out = Fields::default();
        out.text("key", e.key.take())
            .text("operator", e.operator.take())
            .strings("values", std::mem::take(&mut e.values));
        all_read(&e, path)?;
        Ok(out.done())
    })?;
    let mut out = Fields::default();
    out.map("matchLabels", std::mem::take(&mut s.match_labels))
        .list("matchExpressions", expressions);
    all_read(&s, path)?;
    Ok(Some(out.done()))
}

fn int_or_string(value: Option<IntOrString>) -> Option<Value> {
    let value = value?;
    Some(if value.r#type == Some(1) {
        json!(value.str_val.unwrap_or_default())
    } else {
        json!(value.int_val.unwrap_or(0))
    })
}

fn namespace(mut ns: core::Namespace) -> Converted {
    let mut out = Fields::default();
    out.object("metadata", metadata(ns.metadata.take())?);
    if let Some(mut spec) = ns.spec.take() {
        let finalizers = std::mem::take(&mut spec.finalizers);
        all_read(&spec, "spec")?;
        out.object(
            "spec",
            Some(Fields::default().strings("finalizers", finalizers).done()),
        );
    }
    // Status is the server's to write on create.
    ns.status = None;
    all_read(&ns, "")?;
    Ok(out.done())
}

fn config_map(mut cm: core::ConfigMap) -> Converted {
    let binary: BTreeMap<String, String> = std::mem::take(&mut cm.binary_data)
        .into_iter()
        .map(|(key, bytes)| (key, base64::engine::general_purpose::STANDARD.encode(bytes)))
        .collect();
    let mut out = Fields::default();
    out.object("metadata", metadata(cm.metadata.take())?)
        .set("immutable", cm.immutable.take())
        .map("data", std::mem::take(&mut cm.data))
        .map("binaryData", binary);
    all_read(&cm, "")?;
    Ok(out.done())
}

fn service(mut svc: core::Service) -> Converted {
    let mut out = Fields::default();
    out.object("metadata", metadata(svc.metadata.take())?);
    if let Some(mut spec) = svc.spec.take() {
        let ports = each(std::mem::take(&mut spec.ports), |mut p| {
            let mut port = Fields::default();
            port.text("name", p.name.take())
                .text("protocol", p.protocol.take())
                .set("appProtocol", p.app_protocol.take())
                .number("port", p.port.take().map(i64::from))
                .set("targetPort", int_or_string(p.target_port.take()))
                .number("nodePort", p.node_port.take().map(i64::from));
            all_read(&p, "spec.ports")?;
            Ok(port.done())
        })?;
        let mut fields = Fields::default();
        fields
            .list("ports", ports)
            .map("selector", std::mem::take(&mut spec.selector))
            .text("clusterIP", spec.cluster_ip.take())
            .strings("clusterIPs", std::mem::take(&mut spec.cluster_ips))
            .text("type", spec.r#type.take())
            .text("externalName", spec.external_name.take())
            .text("sessionAffinity", spec.session_affinity.take());
        all_read(&spec, "spec")?;
        out.object("spec", Some(fields.done()));
    }
    svc.status = None;
    all_read(&svc, "")?;
    Ok(out.done())
}

fn pod_disruption_budget(mut pdb: policy::PodDisruptionBudget) -> Converted {
    let mut out = Fields::default();
    out.object("metadata", metadata(pdb.metadata.take())?);
    if let Some(mut spec) = pdb.spec.take() {
        let mut fields = Fields::default();
        fields
            .set("minAvailable", int_or_string(spec.min_available.take()))
            .set("maxUnavailable", int_or_string(spec.max_unavailable.take()))
            .object("selector", selector(spec.selector.take(), "spec.selector")?)
            .set(
                "unhealthyPodEvictionPolicy",
                spec.unhealthy_pod_eviction_policy.take(),
            );
        all_read(&spec, "spec")?;
        out.object("spec", Some(fields.done()));
    }
    pdb.status = None;
    all_read(&pdb, "")?;
    Ok(out.done())
}

fn deployment(mut deploy: apps::Deployment) -> Converted {
    let mut out = Fields::default();
    out.object("metadata", metadata(deploy.metadata.take())?);
    if let Some(mut spec) = deploy.spec.take() {
        let strategy = spec
            .strategy
            .take()
            .map(|mut s| {
                let rolling = s.rolling_update.take().map(|mut r| {
                    Fields::default()
                        .set("maxUnavailable", int_or_string(r.max_unavailable.take()))
                        .set("maxSurge", int_or_string(r.max_surge.take()))
                        .done()
                });
                let mut fields = Fields::default();
                fields
                    .text("type", s.r#type.take())
                    .object("rollingUpdate", rolling);
                all_read(&s, "spec.strategy").map(|()| fields.done())
            })
            .transpose()?;
        let mut fields = Fields::default();
        fields
            .set("replicas", spec.replicas.take())
            .object("selector", selector(spec.selector.take(), "spec.selector")?)
            .object(
                "template",
                pod_template(spec.template.take(), "spec.template")?,
            )
            .object("strategy", strategy)
            .number(
                "minReadySeconds",
                spec.min_ready_seconds.take().map(i64::from),
            )
            .set("revisionHistoryLimit", spec.revision_history_limit.take())
            .flag("paused", spec.paused.take())
            .set(
                "progressDeadlineSeconds",
                spec.progress_deadline_seconds.take(),
            );
        all_read(&spec, "spec")?;
        out.object("spec", Some(fields.done()));
    }
    deploy.status = None;
    all_read(&deploy, "")?;
    Ok(out.done())
}

fn pod_template(
    value: Option<core::PodTemplateSpec>,
    path: &str,
) -> Result<Option<Map<String, Value>>, Unread> {
    let Some(mut template) = value else {
        return Ok(None);
    };
    let spec_path = format!("{path}.spec");
    let mut out = Fields::default();
    out.object("metadata", metadata(template.metadata.take())?)
        .object(
            "spec",
            template
                .spec
                .take()
                .map(|s| pod_spec(s, &spec_path))
                .transpose()?,
        );
    all_read(&template, path)?;
    Ok(Some(out.done()))
}

/// The pod fields a workload in the emulator needs: containers and what places the pod.
fn pod_spec(mut spec: core::PodSpec, path: &str) -> Converted {
    let containers_path = format!("{path}.containers");
    let tolerations = each(std::mem::take(&mut spec.tolerations), |mut t| {
        let mut out = Fields::default();
        out.text("key", t.key.take())
            .text("operator", t.operator.take())
            .text("value", t.value.take())
            .text("effect", t.effect.take())
            .set("tolerationSeconds", t.toleration_seconds.take());
        all_read(&t, &format!("{path}.tolerations"))?;
        Ok(out.done())
    })?;
    let mut out = Fields::default();
    out.list(
        "containers",
        each(std::mem::take(&mut spec.containers), |c| {
            container(c, &containers_path)
        })?,
    )
    .list(
        "initContainers",
        each(std::mem::take(&mut spec.init_containers), |c| {
            container(c, &containers_path)
        })?,
    )
    .text("restartPolicy", spec.restart_policy.take())
    .set(
        "terminationGracePeriodSeconds",
        spec.termination_grace_period_seconds.take(),
    )
    .set("activeDeadlineSeconds", spec.active_deadline_seconds.take())
    .text("dnsPolicy", spec.dns_policy.take())
    .map("nodeSelector", std::mem::take(&mut spec.node_selector))
    .text("serviceAccountName", spec.service_account_name.take())
    .text("serviceAccount", spec.service_account.take())
    .text("nodeName", spec.node_name.take())
    .flag("hostNetwork", spec.host_network.take())
    .text("schedulerName", spec.scheduler_name.take())
    .list("tolerations", tolerations)
    .text("priorityClassName", spec.priority_class_name.take())
    .set("priority", spec.priority.take());
    all_read(&spec, path)?;
    Ok(out.done())
}

fn container(mut c: core::Container, path: &str) -> Converted {
    let ports = each(std::mem::take(&mut c.ports), |mut p| {
        let mut out = Fields::default();
        out.text("name", p.name.take())
            .number("hostPort", p.host_port.take().map(i64::from))
            .number("containerPort", p.container_port.take().map(i64::from))
            .text("protocol", p.protocol.take())
            .text("hostIP", p.host_ip.take());
        all_read(&p, &format!("{path}.ports"))?;
        Ok(out.done())
    })?;
    let env = each(std::mem::take(&mut c.env), |mut e| {
        let mut out = Fields::default();
        out.text("name", e.name.take())
            .text("value", e.value.take());
        all_read(&e, &format!("{path}.env"))?;
        Ok(out.done())
    })?;
    let resources = c
        .resources
        .take()
        .map(|mut r| {
            let quantities =
                |map: BTreeMap<String, k8s_pb::apimachinery::pkg::api::resource::Quantity>| {
                    map.into_iter()
                        .map(|(name, q)| (name, q.string.unwrap_or_default()))
                        .collect::<BTreeMap<String, String>>()
                };
            let mut out = Fields::default();
            out.map("limits", quantities(std::mem::take(&mut r.limits)))
                .map("requests", quantities(std::mem::take(&mut r.requests)));
            all_read(&r, &format!("{path}.resources")).map(|()| out.done())
        })
        .transpose()?;
    let mut out = Fields::default();
    out.text("name", c.name.take())
        .text("image", c.image.take())
        .strings("command", std::mem::take(&mut c.command))
        .strings("args", std::mem::take(&mut c.args))
        .text("workingDir", c.working_dir.take())
        .list("ports", ports)
        .list("env", env)
        .object("resources", resources)
        .text("terminationMessagePath", c.termination_message_path.take())
        .text(
            "terminationMessagePolicy",
            c.termination_message_policy.take(),
        )
        .text("imagePullPolicy", c.image_pull_policy.take())
        .flag("stdin", c.stdin.take())
        .flag("stdinOnce", c.stdin_once.take())
        .flag("tty", c.tty.take());
    all_read(&c, path)?;
    Ok(out.done())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_fields_read_as_empty_and_set_ones_do_not() {
        let empty = core::Container {
            name: Some(String::new()),
            stdin: Some(false),
            resources: Some(core::ResourceRequirements::default()),
            ..core::Container::default()
        };
        assert!(is_zero(&empty.encode_to_vec()));
        let set = core::Container {
            working_dir: Some("/srv".into()),
            ..core::Container::default()
        };
        assert!(!is_zero(&set.encode_to_vec()));
    }
}
