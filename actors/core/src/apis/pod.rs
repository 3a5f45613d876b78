//! [`SlimPod`]: a `v1` Pod as the daemon keeps it, with only the fields it reads.
//!
//! On a cluster of 50,000 pods the daemon's memory is mostly its copy of every Pod. A
//! k8s-openapi `Pod` carries every field of the API inline (about 2.5 KB before any of them is
//! set, and 2.3 KB more per container), so cutting fields out of it cannot shrink it. A
//! `SlimPod` has the same JSON names and the same Rust field names for what it keeps, and
//! nothing else: the watch decodes each Pod straight into it (serde skips what it does not
//! name), and code that reads `pod.spec.as_ref().and_then(|s| s.node_name.as_deref())` reads it
//! unchanged.
//!
//! ```text
//! watch (JSON Pod) -> serde -> WirePod -> SlimPod -> the view's store -> scheduling,
//!                                                    disruption, drain, metrics, the simulation
//! k8s-openapi Pod (tests, DaemonSet templates) -> From -> SlimPod
//! ```
//!
//! What it keeps: the metadata as a [`PodMeta`] (less `managedFields`; the labels,
//! annotations, owners and namespace shared with the workload's other pods); of the
//! spec, what scheduling (requests, selectors, affinity, tolerations, spread, host ports,
//! gates), drain (priority, grace period, tolerations), volume detachment (claims) and the
//! simulated scheduler (`schedulerName`) read; of each container its name, resources, ports
//! and restart policy (sidecars); of the status its phase, the conditions it reads
//! ([`KEPT_CONDITIONS`]: type, status, reason and transition time, as [`SlimPodCondition`]),
//! nominated node and start time. A write never starts from a
//! `SlimPod`: the daemon's writes re-read the Pod from the API server, so nothing it drops is
//! ever written back.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, PersistentVolumeClaimVolumeSource, Pod, PodCondition,
    PodSchedulingGate, PodSpec, PodStatus, ResourceRequirements, Toleration,
    TopologySpreadConstraint, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use super::conditions::ConditionStatus;
use super::pod_meta::PodMeta;
use crate::domain::interner::Interner;

/// A Pod with the fields the daemon reads (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SlimPod {
    pub metadata: PodMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<SlimPodSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<SlimPodStatus>,
}

/// The spec fields of [`SlimPod`]: the node it is bound to, and the rest, which the pods of one
/// workload have in common, shared among every pod with an equal one (fields read through
/// `Deref`, so `spec.containers` reads as on a k8s-openapi `PodSpec`; a write through
/// `DerefMut` copies the shared part first).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlimPodSpec {
    pub node_name: Option<Box<str>>,
    pub shared: Arc<SharedPodSpec>,
}

/// Every pod spec decoded, shared among the pods that have an equal one.
static SHARED_SPECS: Interner<SharedPodSpec> = Interner::new();

impl SlimPodSpec {
    /// The spec of `shared` bound to its `node_name`, its other fields shared with every
    /// equal spec.
    #[must_use]
    pub fn new(mut shared: SharedPodSpec) -> Self {
        Self {
            node_name: shared.node_name.take().map(Box::from),
            shared: SHARED_SPECS.intern(shared),
        }
    }
}

impl From<SharedPodSpec> for SlimPodSpec {
    fn from(shared: SharedPodSpec) -> Self {
        Self::new(shared)
    }
}

impl Deref for SlimPodSpec {
    type Target = SharedPodSpec;

    fn deref(&self) -> &SharedPodSpec {
        &self.shared
    }
}

impl DerefMut for SlimPodSpec {
    fn deref_mut(&mut self) -> &mut SharedPodSpec {
        Arc::make_mut(&mut self.shared)
    }
}

impl<'de> Deserialize<'de> for SlimPodSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        SharedPodSpec::deserialize(deserializer).map(Self::new)
    }
}

impl Serialize for SlimPodSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Flat<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            node_name: &'a Option<Box<str>>,
            #[serde(flatten)]
            shared: &'a SharedPodSpec,
        }
        Flat {
            node_name: &self.node_name,
            shared: &self.shared,
        }
        .serialize(serializer)
    }
}

/// A pod's spec less its node: what the pods of a workload have in common. The affinity,
/// rare and large, is boxed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SharedPodSpec {
    /// Read while decoding (and settable in a literal), then moved to
    /// [`SlimPodSpec::node_name`] by [`SlimPodSpec::new`]: always `None` in a shared spec, so
    /// pods on different nodes share one.
    #[serde(skip_serializing)]
    pub node_name: Option<String>,
    pub containers: Vec<SlimContainer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<SlimContainer>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead: Option<BTreeMap<String, Quantity>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Box<Affinity>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduling_gates: Option<Vec<PodSchedulingGate>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<SlimVolume>>,
}

/// The k8s-openapi types only derive `PartialEq`, but none of the fields holds a float, so
/// equality is an equivalence, as the interner needs.
impl Eq for SharedPodSpec {}

/// Hashes what tells most workloads apart (containers and their requests, node selector,
/// priority, volumes); the interner's equality compares the rest. Equal specs hash equally, as
/// `Hash` must.
impl Hash for SharedPodSpec {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for container in self
            .containers
            .iter()
            .chain(self.init_containers.iter().flatten())
        {
            container.name.hash(state);
            let requests = container
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref());
            for (resource, quantity) in requests.into_iter().flatten() {
                resource.hash(state);
                quantity.0.hash(state);
            }
        }
        self.node_selector.hash(state);
        self.priority.hash(state);
        self.priority_class_name.hash(state);
        let claims = self.volumes.iter().flatten().map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str())
        });
        for claim in claims {
            claim.hash(state);
        }
    }
}

/// A container's name, resources, ports (host ports) and restart policy (`Always` makes an
/// init container a sidecar).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SlimContainer {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ContainerPort>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

/// A volume's name and, when it is one, the claim it mounts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SlimVolume {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
}

/// The pod conditions the daemon reads: `PodScheduled` (kube-scheduler's verdict, the
/// scheduling latency metrics) and `Ready` (startup metrics, PDBs' unhealthy pods). A running
/// pod's other conditions (`Initialized`, `ContainersReady`, `PodReadyToStartContainers`...)
/// are not kept.
pub const KEPT_CONDITIONS: [&str; 2] = ["PodScheduled", "Ready"];

/// The status fields of [`SlimPod`]; its conditions are those of [`KEPT_CONDITIONS`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SlimPodStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<Box<str>>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "kept_conditions"
    )]
    pub conditions: Option<Vec<SlimPodCondition>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nominated_node_name: Option<Box<str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
}

/// A pod condition with what its readers look at: type, status, reason and when it turned.
/// The type and the status are one byte each and the common reasons the program's own
/// strings, so a pod's two kept conditions allocate nothing beyond their list of 56-byte
/// entries (a k8s-openapi `PodCondition` is 160 bytes with four or five strings of its own;
/// 50,000 pods held 9.6 MB of 96-byte entries with the type and status as strings); the
/// message is dropped. The type and the status compare equal to their text
/// (`c.type_ == "Ready"`), and serialize as it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodCondition {
    #[serde(rename = "type")]
    pub type_: PodConditionType,
    pub status: ConditionStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Cow<'static, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// The types of [`KEPT_CONDITIONS`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
pub enum PodConditionType {
    #[default]
    PodScheduled,
    Ready,
}

impl PodConditionType {
    /// The kept type `text` names, if it names one.
    #[must_use]
    pub fn of(text: &str) -> Option<Self> {
        match text {
            "PodScheduled" => Some(Self::PodScheduled),
            "Ready" => Some(Self::Ready),
            _ => None,
        }
    }

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PodScheduled => "PodScheduled",
            Self::Ready => "Ready",
        }
    }
}

macro_rules! compares_as_text {
    ($($type:ty),*) => {
        $(impl PartialEq<str> for $type {
            fn eq(&self, text: &str) -> bool {
                self.as_str() == text
            }
        }

        impl PartialEq<&str> for $type {
            fn eq(&self, text: &&str) -> bool {
                self.as_str() == *text
            }
        })*
    };
}

compares_as_text!(PodConditionType, ConditionStatus);

/// A pod condition as the watch reads it, before [`keep_conditions`] keeps the kept types.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireCondition {
    #[serde(rename = "type", deserialize_with = "known_type")]
    type_: Cow<'static, str>,
    #[serde(deserialize_with = "known_status")]
    status: Cow<'static, str>,
    #[serde(deserialize_with = "known_reason")]
    reason: Option<Cow<'static, str>>,
    last_transition_time: Option<Time>,
}

/// The statuses a condition takes.
const STATUSES: [&str; 3] = ["True", "False", "Unknown"];
/// The reasons kube-scheduler and the kubelet give the kept conditions most often.
const REASONS: [&str; 5] = [
    "Unschedulable",
    "SchedulerError",
    "ContainersNotReady",
    "PodCompleted",
    "PodFailed",
];

/// `text` as the entry of `known` it equals, else as it is.
fn known(text: String, known: &[&'static str]) -> Cow<'static, str> {
    known
        .iter()
        .find(|k| **k == text)
        .map_or(Cow::Owned(text), |k| Cow::Borrowed(*k))
}

/// Reads a string as the entry of its table it equals (no allocation), else as it is.
struct Known(&'static [&'static str]);

impl serde::de::Visitor<'_> for Known {
    type Value = Cow<'static, str>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(self
            .0
            .iter()
            .find(|k| **k == text)
            .map_or_else(|| Cow::Owned(text.to_owned()), |k| Cow::Borrowed(*k)))
    }

    fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Self::Value, E> {
        Ok(known(text, self.0))
    }
}

/// An optional string read as [`Known`] reads one.
struct MaybeKnown(&'static [&'static str]);

impl<'de> serde::de::Visitor<'de> for MaybeKnown {
    type Value = Option<Cow<'static, str>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string or null")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(Known(self.0)).map(Some)
    }
}

fn known_type<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Cow<'static, str>, D::Error> {
    d.deserialize_str(Known(&KEPT_CONDITIONS))
}

fn known_status<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Cow<'static, str>, D::Error> {
    d.deserialize_str(Known(&STATUSES))
}

fn known_reason<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Cow<'static, str>>, D::Error> {
    d.deserialize_option(MaybeKnown(&REASONS))
}

impl SlimPodCondition {
    /// The condition if its type is one of [`KEPT_CONDITIONS`].
    fn kept(
        type_: &str,
        status: &str,
        reason: Option<Cow<'static, str>>,
        at: Option<Time>,
    ) -> Option<Self> {
        Some(Self {
            type_: PodConditionType::of(type_)?,
            status: ConditionStatus::of(status),
            reason,
            last_transition_time: at,
        })
    }
}

/// A pod condition as read, kept if its type is kept.
trait Keep {
    fn keep(self) -> Option<SlimPodCondition>;
}

impl Keep for WireCondition {
    fn keep(self) -> Option<SlimPodCondition> {
        SlimPodCondition::kept(
            &self.type_,
            &self.status,
            self.reason,
            self.last_transition_time,
        )
    }
}

impl Keep for PodCondition {
    fn keep(self) -> Option<SlimPodCondition> {
        let reason = self.reason.map(|r| known(r, &REASONS));
        SlimPodCondition::kept(&self.type_, &self.status, reason, self.last_transition_time)
    }
}

/// The conditions of [`KEPT_CONDITIONS`], in the order they came, in a list of their size.
fn keep_conditions<C: Keep>(conditions: Option<Vec<C>>) -> Option<Vec<SlimPodCondition>> {
    conditions.map(|conditions| {
        let mut kept: Vec<SlimPodCondition> =
            conditions.into_iter().filter_map(Keep::keep).collect();
        kept.shrink_to_fit();
        kept
    })
}

fn kept_conditions<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<SlimPodCondition>>, D::Error> {
    Option::<Vec<WireCondition>>::deserialize(deserializer).map(keep_conditions)
}

impl From<Pod> for SlimPod {
    fn from(pod: Pod) -> Self {
        Self {
            metadata: pod.metadata.into(),
            spec: pod.spec.map(SlimPodSpec::from),
            status: pod.status.map(SlimPodStatus::from),
        }
    }
}

impl From<&Pod> for SlimPod {
    fn from(pod: &Pod) -> Self {
        Self::from(pod.clone())
    }
}

impl From<PodSpec> for SlimPodSpec {
    fn from(spec: PodSpec) -> Self {
        Self::new(SharedPodSpec {
            node_name: spec.node_name,
            containers: spec
                .containers
                .into_iter()
                .map(SlimContainer::from)
                .collect(),
            init_containers: spec
                .init_containers
                .map(|init| init.into_iter().map(SlimContainer::from).collect()),
            overhead: spec.overhead,
            node_selector: spec.node_selector,
            affinity: spec.affinity.map(Box::new),
            tolerations: spec.tolerations,
            topology_spread_constraints: spec.topology_spread_constraints,
            scheduling_gates: spec.scheduling_gates,
            scheduler_name: spec.scheduler_name,
            priority: spec.priority,
            priority_class_name: spec.priority_class_name,
            termination_grace_period_seconds: spec.termination_grace_period_seconds,
            volumes: spec
                .volumes
                .map(|volumes| volumes.into_iter().map(SlimVolume::from).collect()),
        })
    }
}

impl From<Container> for SlimContainer {
    fn from(container: Container) -> Self {
        Self {
            name: container.name,
            resources: container.resources,
            ports: container.ports,
            restart_policy: container.restart_policy,
        }
    }
}

impl From<Volume> for SlimVolume {
    fn from(volume: Volume) -> Self {
        Self {
            name: volume.name,
            persistent_volume_claim: volume.persistent_volume_claim,
        }
    }
}

impl From<PodStatus> for SlimPodStatus {
    fn from(status: PodStatus) -> Self {
        Self {
            phase: status.phase.map(Box::from),
            conditions: keep_conditions(status.conditions),
            nominated_node_name: status.nominated_node_name.map(Box::from),
            start_time: status.start_time,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    };

    /// A Pod shaped like a real one: env, probes, statuses, a projected volume beside a claim.
    fn real_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u-1", "resourceVersion": "7",
                "labels": {"app": "web"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-abc", "uid": "rs-1", "controller": true}],
                "deletionTimestamp": "2026-01-01T00:00:00Z"
            },
            "spec": {
                "nodeName": "node-a",
                "schedulerName": "default-scheduler",
                "priority": 100, "priorityClassName": "high",
                "terminationGracePeriodSeconds": 45,
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
                    ]}]}}},
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}}}],
                "schedulingGates": [{"name": "wait"}],
                "overhead": {"cpu": "10m"},
                "containers": [{
                    "name": "app", "image": "web:1", "env": [{"name": "A", "value": "b"}],
                    "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
                    "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "1Gi"}},
                    "ports": [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]
                }],
                "initContainers": [{"name": "proxy", "image": "p:1", "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "50m"}}}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}},
                    {"name": "token", "projected": {"sources": [{"serviceAccountToken":
                        {"path": "token"}}]}}
                ]
            },
            "status": {
                "phase": "Running",
                "nominatedNodeName": "node-b",
                "startTime": "2026-01-01T00:00:00Z",
                "podIP": "10.0.0.1",
                "conditions": [
                    {"type": "Initialized", "status": "True"},
                    {"type": "PodScheduled", "status": "True",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}
                ],
                "containerStatuses": [{"name": "app", "image": "web:1", "imageID": "",
                    "ready": true, "restartCount": 0}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn decoding_the_json_keeps_what_the_conversion_keeps() {
        let pod = real_pod();
        let json = serde_json::to_vec(&pod).unwrap();
        let decoded: SlimPod = serde_json::from_slice(&json).unwrap();
        assert_eq!(decoded, SlimPod::from(&pod));
        assert_eq!(decoded, SlimPod::from(pod));
    }

    #[test]
    fn every_field_the_daemon_reads_survives() {
        let pod = SlimPod::from(real_pod());
        assert_eq!(pod.metadata.uid.as_deref(), Some("u-1"));
        assert!(pod.metadata.deletion_timestamp.is_some());
        assert_eq!(
            pod.metadata.owner_references.as_ref().unwrap()[0].kind,
            "ReplicaSet"
        );
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("node-a"));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(spec.priority, Some(100));
        assert_eq!(spec.priority_class_name.as_deref(), Some("high"));
        assert_eq!(spec.termination_grace_period_seconds, Some(45));
        assert_eq!(spec.tolerations.as_ref().unwrap().len(), 1);
        assert_eq!(spec.topology_spread_constraints.as_ref().unwrap().len(), 1);
        assert_eq!(spec.scheduling_gates.as_ref().unwrap()[0].name, "wait");
        assert_eq!(spec.overhead.as_ref().unwrap()["cpu"].0, "10m");
        let expected = Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "topology.kubernetes.io/zone".into(),
                            operator: "In".into(),
                            values: Some(vec!["a".into()]),
                        }]),
                        match_fields: None,
                    }],
                }),
                preferred_during_scheduling_ignored_during_execution: None,
            }),
            ..Affinity::default()
        };
        assert_eq!(spec.affinity.as_deref(), Some(&expected));
        let app = &spec.containers[0];
        assert_eq!(
            app.resources.as_ref().unwrap().requests.as_ref().unwrap()["cpu"].0,
            "250m"
        );
        assert_eq!(app.ports.as_ref().unwrap()[0].host_port, Some(8080));
        let proxy = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(proxy.restart_policy.as_deref(), Some("Always"));
        let volumes = spec.volumes.as_ref().unwrap();
        assert_eq!(
            volumes[0]
                .persistent_volume_claim
                .as_ref()
                .unwrap()
                .claim_name,
            "data-web-1"
        );
        assert_eq!(volumes[1].name, "token");
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.nominated_node_name.as_deref(), Some("node-b"));
        assert!(status.start_time.is_some());
        let conditions: Vec<_> = status.conditions.iter().flatten().collect();
        assert_eq!(conditions.len(), 2, "{conditions:?}");
        assert_eq!(conditions[0].type_, "PodScheduled");
        assert!(conditions[0].last_transition_time.is_some());
        assert_eq!(conditions[1].reason.as_deref(), Some("ContainersNotReady"));
    }

    #[test]
    fn what_no_reader_looks_at_is_not_kept() {
        let pod = real_pod();
        let json = serde_json::to_value(SlimPod::from(pod)).unwrap();
        let app = &json["spec"]["containers"][0];
        assert!(app.get("env").is_none() && app.get("livenessProbe").is_none());
        assert!(app.get("image").is_none());
        assert!(json["spec"]["volumes"][1].get("projected").is_none());
        assert!(json["status"].get("containerStatuses").is_none());
        assert!(json["status"].get("podIP").is_none());
    }

    #[test]
    fn kept_conditions_use_the_programs_strings_and_drop_the_message() {
        let status: SlimPodStatus = serde_json::from_value(serde_json::json!({"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/3 nodes are available: 3 Insufficient cpu."},
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "SomethingNew"},
        ]}))
        .unwrap();
        let conditions = status.conditions.unwrap();
        assert_eq!(conditions.len(), 2, "{conditions:?}");
        let scheduled = &conditions[0];
        assert_eq!(scheduled.type_, PodConditionType::PodScheduled);
        assert_eq!(scheduled.status, ConditionStatus::False);
        assert!(scheduled.status == "False" && scheduled.type_ == "PodScheduled");
        assert!(matches!(
            scheduled.reason,
            Some(Cow::Borrowed("Unschedulable"))
        ));
        assert_eq!(conditions[1].type_, "Ready");
        assert_eq!(conditions[1].reason.as_deref(), Some("SomethingNew"));
        let json = serde_json::to_value(scheduled).unwrap();
        assert_eq!(json["type"], "PodScheduled");
        assert_eq!(json["status"], "False");
        assert!(json.get("message").is_none(), "{json}");
        // From JSON text (strings read in place) too, a null reason read as none, an unknown
        // status as Unknown.
        let from_text: SlimPodStatus = serde_json::from_str(
            r#"{"conditions": [{"type": "Ready", "status": "True", "reason": null, "message": "x"},
                {"type": "PodScheduled", "status": "Maybe", "reason": "PodFailed"}]}"#,
        )
        .unwrap();
        let from_text = from_text.conditions.unwrap();
        assert_eq!(from_text[0].type_, PodConditionType::Ready);
        assert_eq!(from_text[0].status, ConditionStatus::True);
        assert_eq!(from_text[0].reason, None);
        assert_eq!(from_text[1].status, ConditionStatus::Unknown);
        assert!(matches!(
            from_text[1].reason,
            Some(Cow::Borrowed("PodFailed"))
        ));
        assert_eq!(from_text.capacity(), 2, "a list of its size");
        // From a k8s-openapi condition too, at a third of its size; other types are dropped.
        let converted = SlimPodStatus::from(k8s_openapi::api::core::v1::PodStatus {
            conditions: Some(vec![
                PodCondition {
                    type_: "Initialized".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                },
                PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                },
            ]),
            ..Default::default()
        });
        let converted = converted.conditions.unwrap();
        assert_eq!(converted.len(), 1);
        assert_eq!(converted[0].type_, PodConditionType::Ready);
        assert_eq!(converted[0].status, ConditionStatus::True);
        assert!(
            std::mem::size_of::<SlimPodCondition>() * 2 < std::mem::size_of::<PodCondition>(),
            "{} B against {} B",
            std::mem::size_of::<SlimPodCondition>(),
            std::mem::size_of::<PodCondition>()
        );
    }

    #[test]
    fn a_slim_pod_is_a_fraction_of_a_full_one() {
        let full = std::mem::size_of::<Pod>() + std::mem::size_of::<Container>();
        let slim = std::mem::size_of::<SlimPod>() + std::mem::size_of::<SlimContainer>();
        assert!(slim * 3 < full, "slim {slim} B, full {full} B");
    }

    #[test]
    fn a_watched_pod_fits_the_allocators_256_byte_class() {
        // The view keeps each pod in an `Arc` (two counts before the pod); one more byte puts
        // every one of 50,000 pods in the 320-byte class.
        let in_arc = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<SlimPod>();
        assert!(in_arc <= 256, "{in_arc} B");
    }

    #[test]
    fn pods_of_one_workload_share_their_spec_and_a_write_copies_it() {
        let on = |node: &str| {
            let mut pod = real_pod();
            pod.spec.as_mut().unwrap().node_name = Some(node.to_owned());
            let json = serde_json::to_vec(&pod).unwrap();
            serde_json::from_slice::<SlimPod>(&json).unwrap()
        };
        let (a, b) = (on("node-a"), on("node-b"));
        let (spec_a, spec_b) = (a.spec.as_ref().unwrap(), b.spec.as_ref().unwrap());
        assert_eq!(spec_a.node_name.as_deref(), Some("node-a"));
        assert_eq!(spec_b.node_name.as_deref(), Some("node-b"));
        assert!(Arc::ptr_eq(&spec_a.shared, &spec_b.shared));
        assert!(spec_a.shared.node_name.is_none());

        let mut changed = b.clone();
        changed.spec.as_mut().unwrap().priority = Some(7);
        assert_eq!(changed.spec.as_ref().unwrap().priority, Some(7));
        assert_eq!(
            spec_a.priority,
            Some(100),
            "the shared spec is not written through"
        );
        assert_eq!(
            serde_json::to_value(&a).unwrap()["spec"]["nodeName"],
            "node-a",
            "the node is written back in its place"
        );
    }
}
