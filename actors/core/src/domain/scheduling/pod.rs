//! Pods in the compact form the scheduler works on, converted once from the view's `SlimPod`s.
//!
//! A [`SchedulingPod`] is an identity (namespace, name, UID, creation time) plus a shared
//! [`PodShape`]: everything that decides where the pod may go (requests, node selector and
//! affinity as [`Requirements`], tolerations, topology spread, pod (anti-)affinity, host ports,
//! volume zone requirements). Pods with equal shapes are interchangeable to the scheduler, which
//! groups them and computes each shape's constraints once; they share one allocation too (the
//! process-wide [`Interner`] of shapes). A [`BoundPod`] is a pod already on a
//! node: what topology counting, inverse anti-affinity and host ports need of it.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    PodAffinityTerm, Taint as ApiTaint, Toleration as ApiToleration, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::apis::taints::Taint;
use crate::apis::{SlimPod, SlimPodSpec};
use crate::domain::requirements::{RequirementError, Requirements, from_node_selector_requirement};
use crate::domain::resources::{ResourceError, Resources, pod_requests};

use super::selector::LabelSelector;
use crate::domain::interner::Interner;

/// Every pod's shape, shared among the pods that have an equal one.
static SHAPES: Interner<PodShape> = Interner::new();
/// Every pod's labels, shared likewise (a bound pod keeps its labels without the shape).
static LABELS: Interner<BTreeMap<String, String>> = Interner::new();
/// Every pod's namespace, shared likewise.
static NAMESPACES: Interner<str> = Interner::new();

/// The pod's namespace (`default` when unset) as the shared string.
fn shared_namespace(pod: &SlimPod) -> Arc<str> {
    NAMESPACES.share(pod.metadata.namespace.as_deref().unwrap_or("default"))
}

/// The pod's labels as the shared map.
fn intern_labels(labels: Option<&BTreeMap<String, String>>) -> Arc<BTreeMap<String, String>> {
    LABELS.intern(labels.cloned().unwrap_or_default())
}

/// A pod that could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    #[error("pod {pod} has no spec")]
    MissingSpec { pod: String },
    #[error("pod {pod}: {source}")]
    Resources {
        pod: String,
        #[source]
        source: ResourceError,
    },
    #[error("pod {pod}: {field}: {source}")]
    Requirement {
        pod: String,
        field: String,
        #[source]
        source: RequirementError,
    },
    #[error(
        "pod {pod}: {field}: whenUnsatisfiable must be DoNotSchedule or ScheduleAnyway, got {value:?}"
    )]
    WhenUnsatisfiable {
        pod: String,
        field: String,
        value: String,
    },
    #[error("pod {pod}: {field}: maxSkew must be at least 1, got {value}")]
    MaxSkew {
        pod: String,
        field: String,
        value: i32,
    },
}

impl PodError {
    /// A short label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::MissingSpec { .. } => "missing_spec",
            Self::Resources { source, .. } => source.category(),
            Self::Requirement { source, .. } => source.category(),
            Self::WhenUnsatisfiable { .. } => "invalid_when_unsatisfiable",
            Self::MaxSkew { .. } => "invalid_max_skew",
        }
    }
}

/// How a toleration compares a taint's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TolerationOperator {
    Equal,
    Exists,
    /// An operator this scheduler does not know: tolerates nothing.
    Unknown,
}

/// A pod's toleration of taints.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// `None` (empty key) matches every key.
    pub key: Option<String>,
    pub operator: TolerationOperator,
    pub value: String,
    /// `None` matches every effect.
    pub effect: Option<String>,
}

impl Toleration {
    /// Reads a `corev1.Toleration`.
    #[must_use]
    pub fn from_api(toleration: &ApiToleration) -> Self {
        Self {
            key: toleration.key.clone().filter(|k| !k.is_empty()),
            operator: match toleration.operator.as_deref() {
                None | Some("" | "Equal") => TolerationOperator::Equal,
                Some("Exists") => TolerationOperator::Exists,
                Some(_) => TolerationOperator::Unknown,
            },
            value: toleration.value.clone().unwrap_or_default(),
            effect: toleration.effect.clone().filter(|e| !e.is_empty()),
        }
    }

    /// Tolerates every taint with the given effect (`operator: Exists`, no key).
    #[must_use]
    pub fn exists_for_effect(effect: &str) -> Self {
        Self {
            key: None,
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: Some(effect.to_owned()),
        }
    }

    /// Kubernetes' `ToleratesTaint`.
    #[must_use]
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self
            .effect
            .as_deref()
            .is_some_and(|e| e != taint.effect.as_str())
        {
            return false;
        }
        if self.key.as_deref().is_some_and(|k| k != taint.key) {
            return false;
        }
        match self.operator {
            TolerationOperator::Equal => self.value == taint.value.as_deref().unwrap_or(""),
            TolerationOperator::Exists => true,
            TolerationOperator::Unknown => false,
        }
    }
}

/// The first taint none of the tolerations tolerate.
#[must_use]
pub fn first_untolerated<'a>(tolerations: &[Toleration], taints: &'a [Taint]) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|taint| !tolerations.iter().any(|t| t.tolerates(taint)))
}

/// Reads node taints (`corev1.Taint`), dropping ones with an effect Kubernetes does not know.
#[must_use]
pub fn taints_from_api(taints: &[ApiTaint]) -> Vec<Taint> {
    taints
        .iter()
        .filter_map(|t| Taint::try_from(t).ok())
        .collect()
}

/// A host port a container binds on its node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// `None` when the host IP does not parse (it then only conflicts with the same).
    pub ip: Option<IpAddr>,
    pub port: i32,
    pub protocol: String,
}

impl HostPort {
    /// Karpenter's `HostPort.Matches`: same protocol and port, and the same IP unless either is
    /// the unspecified address.
    #[must_use]
    pub fn conflicts(&self, other: &Self) -> bool {
        self.protocol == other.protocol
            && self.port == other.port
            && (self.ip == other.ip
                || self.ip.is_some_and(|ip| ip.is_unspecified())
                || other.ip.is_some_and(|ip| ip.is_unspecified()))
    }
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ip {
            Some(ip) => write!(f, "{ip}:{}/{}", self.port, self.protocol),
            None => write!(f, "?:{}/{}", self.port, self.protocol),
        }
    }
}

fn host_ports(pod: &SlimPod) -> Vec<HostPort> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|port| *port != 0)?;
            let ip = match p.host_ip.as_deref() {
                None | Some("") => Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
                Some(text) => text.parse().ok(),
            };
            Some(HostPort {
                ip,
                port,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
            })
        })
        .collect()
}

/// A topology spread constraint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpreadConstraint {
    pub topology_key: String,
    pub max_skew: u32,
    pub min_domains: Option<u32>,
    /// `whenUnsatisfiable: ScheduleAnyway`: a preference Karpenter may relax.
    pub schedule_anyway: bool,
    /// The selector with `matchLabelKeys` already applied.
    pub selector: LabelSelector,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes matching the pod's node selector
    /// and required affinity count.
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (default `Ignore`): only nodes whose taints the pod tolerates
    /// count.
    pub honor_node_taints: bool,
}

/// A pod (anti-)affinity term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    pub topology_key: String,
    pub selector: LabelSelector,
    /// Namespaces listed in the term.
    pub namespaces: Vec<String>,
    /// `namespaceSelector`, when set (an empty one selects every namespace).
    pub namespace_selector: Option<LabelSelector>,
    /// 0 for required terms, the preference weight otherwise.
    pub weight: i32,
}

impl AffinityTerm {
    /// The namespaces whose pods the term selects, sorted: the pod's own when the term names
    /// none, else those listed plus those its namespace selector selects among `namespaces`
    /// (namespace labels by name).
    #[must_use]
    pub fn selected_namespaces(
        &self,
        pod_namespace: &str,
        namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> Vec<String> {
        let mut out = match &self.namespace_selector {
            None if self.namespaces.is_empty() => vec![pod_namespace.to_owned()],
            None => self.namespaces.clone(),
            Some(selector) => {
                let mut selected: Vec<String> = namespaces
                    .iter()
                    .filter(|(_, labels)| selector.matches(labels))
                    .map(|(name, _)| name.clone())
                    .collect();
                selected.extend(self.namespaces.iter().cloned());
                selected
            }
        };
        out.sort_unstable();
        out.dedup();
        out
    }

    fn from_api(term: &PodAffinityTerm, weight: i32) -> Self {
        let mut namespaces = term.namespaces.clone().unwrap_or_default();
        namespaces.sort_unstable();
        namespaces.dedup();
        Self {
            topology_key: term.topology_key.clone(),
            selector: LabelSelector::from_api(term.label_selector.as_ref()),
            namespaces,
            namespace_selector: term
                .namespace_selector
                .as_ref()
                .map(|s| LabelSelector::from_api(Some(s))),
            weight,
        }
    }
}

/// A preferred node affinity term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PreferredTerm {
    pub weight: i32,
    pub requirements: Requirements,
}

/// Everything about a pod that decides where it may go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodShape {
    pub namespace: String,
    /// Shared with every pod and bound pod of equal labels.
    pub labels: Arc<BTreeMap<String, String>>,
    pub requests: Resources,
    /// `nodeSelector` as `In` requirements.
    pub node_selector: Requirements,
    /// Required node affinity terms (ORed).
    pub required_terms: Vec<Requirements>,
    /// Preferred node affinity terms, heaviest first (ties in spec order).
    pub preferred_terms: Vec<PreferredTerm>,
    /// Zone requirements from the pod's persistent volumes, added to every required term.
    pub volume_requirements: Requirements,
    pub tolerations: Vec<Toleration>,
    pub spread: Vec<SpreadConstraint>,
    pub affinity: Vec<AffinityTerm>,
    /// Heaviest first (ties in spec order).
    pub preferred_affinity: Vec<AffinityTerm>,
    pub anti_affinity: Vec<AffinityTerm>,
    /// Heaviest first (ties in spec order).
    pub preferred_anti_affinity: Vec<AffinityTerm>,
    pub host_ports: Vec<HostPort>,
}

impl PodShape {
    /// Whether the pod has any preference the scheduler may relax.
    #[must_use]
    pub fn has_preferences(&self) -> bool {
        !self.preferred_terms.is_empty()
            || !self.preferred_affinity.is_empty()
            || !self.preferred_anti_affinity.is_empty()
            || self.spread.iter().any(|s| s.schedule_anyway)
    }
}

/// Required node affinity terms and preferred ones (heaviest first).
fn node_affinity(
    pod: &str,
    spec: &SlimPodSpec,
) -> Result<(Vec<Requirements>, Vec<PreferredTerm>), PodError> {
    let error = |field: String| {
        move |source| PodError::Requirement {
            pod: pod.to_owned(),
            field,
            source,
        }
    };
    let node_affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref());
    let mut required = Vec::new();
    let terms = node_affinity
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|s| s.node_selector_terms.as_slice())
        .unwrap_or_default();
    for (i, term) in terms.iter().enumerate() {
        required.push(Requirements::from_node_selector_term(term).map_err(error(format!(
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
        )))?);
    }
    let mut preferred = Vec::new();
    let terms = node_affinity
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .into_iter()
        .flatten();
    for (i, term) in terms.enumerate() {
        preferred.push(PreferredTerm {
            weight: term.weight,
            requirements: Requirements::from_node_selector_term(&term.preference).map_err(error(
                format!("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]"),
            ))?,
        });
    }
    preferred.sort_by_key(|t| std::cmp::Reverse(t.weight));
    Ok((required, preferred))
}

/// The topology spread constraints, with `matchLabelKeys` applied.
fn spread_constraints(
    pod: &str,
    spec: &SlimPodSpec,
    labels: &BTreeMap<String, String>,
) -> Result<Vec<SpreadConstraint>, PodError> {
    let mut spread = Vec::new();
    for (i, tsc) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let field = format!("spec.topologySpreadConstraints[{i}]");
        let schedule_anyway = match tsc.when_unsatisfiable.as_str() {
            "DoNotSchedule" => false,
            "ScheduleAnyway" => true,
            other => {
                return Err(PodError::WhenUnsatisfiable {
                    pod: pod.to_owned(),
                    field,
                    value: other.to_owned(),
                });
            }
        };
        let max_skew = u32::try_from(tsc.max_skew)
            .ok()
            .filter(|s| *s >= 1)
            .ok_or_else(|| PodError::MaxSkew {
                pod: pod.to_owned(),
                field: field.clone(),
                value: tsc.max_skew,
            })?;
        spread.push(SpreadConstraint {
            topology_key: tsc.topology_key.clone(),
            max_skew,
            min_domains: tsc.min_domains.and_then(|m| u32::try_from(m).ok()),
            schedule_anyway,
            selector: LabelSelector::from_api(tsc.label_selector.as_ref())
                .with_label_keys(tsc.match_label_keys.as_deref().unwrap_or(&[]), labels),
            honor_node_affinity: tsc.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_node_taints: tsc.node_taints_policy.as_deref() == Some("Honor"),
        });
    }
    Ok(spread)
}

fn required_terms_of(terms: Option<&Vec<PodAffinityTerm>>) -> Vec<AffinityTerm> {
    terms
        .into_iter()
        .flatten()
        .map(|t| AffinityTerm::from_api(t, 0))
        .collect()
}

/// Preferred (anti-)affinity terms, heaviest first.
fn preferred_terms_of(terms: Option<&Vec<WeightedPodAffinityTerm>>) -> Vec<AffinityTerm> {
    let mut out: Vec<AffinityTerm> = terms
        .into_iter()
        .flatten()
        .map(|t| AffinityTerm::from_api(&t.pod_affinity_term, t.weight))
        .collect();
    out.sort_by_key(|t| std::cmp::Reverse(t.weight));
    out
}

/// A pending pod the scheduler places.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulingPod {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub uid: Arc<str>,
    pub created: Option<Time>,
    pub shape: Arc<PodShape>,
}

impl SchedulingPod {
    /// Converts a pod; bad quantities, requirements or spread constraints are errors naming
    /// the field.
    pub fn from_pod(pod: &SlimPod) -> Result<Self, PodError> {
        let metadata = &pod.metadata;
        // The namespace, name and uid are the view's pod's own strings, shared (a pod's
        // conversion is kept by the Provisioner while it is pending and by the disruption
        // actor while it is bound: at 50,000 pods, copies were 5 to 8 MB in each, sampled).
        let namespace = shared_namespace(pod);
        let name = metadata.name.clone().unwrap_or_default();
        let id = format!("{namespace}/{name}");
        let Some(spec) = &pod.spec else {
            return Err(PodError::MissingSpec { pod: id });
        };
        let requests = pod_requests(spec).map_err(|source| PodError::Resources {
            pod: id.clone(),
            source,
        })?;
        let labels = intern_labels(metadata.labels.as_ref());
        let (required_terms, preferred_terms) = node_affinity(&id, spec)?;
        let affinity = spec.affinity.as_ref();
        let pod_affinity = affinity.and_then(|a| a.pod_affinity.as_ref());
        let pod_anti = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        let shape = PodShape {
            namespace: namespace.to_string(),
            requests,
            node_selector: Requirements::from_labels(spec.node_selector.iter().flatten()),
            required_terms,
            preferred_terms,
            volume_requirements: Requirements::new(),
            tolerations: spec
                .tolerations
                .iter()
                .flatten()
                .map(Toleration::from_api)
                .collect(),
            spread: spread_constraints(&id, spec, &labels)?,
            affinity: required_terms_of(pod_affinity.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_affinity: preferred_terms_of(pod_affinity.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            anti_affinity: required_terms_of(pod_anti.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_anti_affinity: preferred_terms_of(pod_anti.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            host_ports: host_ports(pod),
            labels,
        };
        Ok(Self {
            namespace,
            name,
            uid: metadata.uid.clone().unwrap_or_default(),
            created: metadata.creation_timestamp.clone(),
            shape: SHAPES.intern(shape),
        })
    }

    /// Adds zone (or any) requirements of the pod's persistent volumes, as Karpenter's volume
    /// topology injects them into every required node affinity term.
    pub fn with_volume_requirements(
        mut self,
        requirements: &[k8s_openapi::api::core::v1::NodeSelectorRequirement],
    ) -> Result<Self, PodError> {
        let mut shape = (*self.shape).clone();
        for (i, requirement) in requirements.iter().enumerate() {
            shape
                .volume_requirements
                .add(
                    from_node_selector_requirement(requirement).map_err(|source| {
                        PodError::Requirement {
                            pod: self.key(),
                            field: format!("volume requirement [{i}]"),
                            source,
                        }
                    })?,
                );
        }
        self.shape = SHAPES.intern(shape);
        Ok(self)
    }

    /// `namespace/name`.
    #[must_use]
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A pod already bound to a node, as topology counting and host ports see it. It names no
/// pod: the pods of a workload in one state are equal, so a holder can keep one for them all
/// (the Provisioner's bound-pod facts do; at 50,000 bound pods a copy each was 8 MB of each
/// actor that keeps them).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BoundPod {
    pub namespace: Arc<str>,
    /// Shared with every pod of equal labels.
    pub labels: Arc<BTreeMap<String, String>>,
    /// Required anti-affinity terms: pods they select must stay out of this pod's domains.
    pub anti_affinity: Vec<AffinityTerm>,
    pub host_ports: Vec<HostPort>,
    /// Scheduled, not finished and not terminating (Karpenter's `IgnoredForTopology` is false).
    pub counts_for_topology: bool,
}

impl BoundPod {
    /// Reads a bound pod.
    #[must_use]
    pub fn from_pod(pod: &SlimPod) -> Self {
        let spec = pod.spec.as_ref();
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let terminal = matches!(phase, Some("Succeeded" | "Failed"));
        let scheduled = spec
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        Self {
            namespace: shared_namespace(pod),
            labels: intern_labels(pod.metadata.labels.as_ref()),
            anti_affinity: spec
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.pod_anti_affinity.as_ref())
                .and_then(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .into_iter()
                .flatten()
                .map(|t| AffinityTerm::from_api(t, 0))
                .collect(),
            host_ports: host_ports(pod),
            counts_for_topology: scheduled
                && !terminal
                && pod.metadata.deletion_timestamp.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::taints::TaintEffect;
    use k8s_openapi::api::core::v1::{
        Affinity, Container, ContainerPort, NodeAffinity, NodeSelector, NodeSelectorRequirement,
        NodeSelectorTerm, Pod, PodSpec, TopologySpreadConstraint,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(spec: PodSpec) -> SlimPod {
        SlimPod::from(Pod {
            metadata: ObjectMeta {
                name: Some("p".to_owned()),
                namespace: Some("ns".to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
            status: None,
        })
    }

    #[test]
    fn pods_of_one_shape_share_it_and_a_different_pod_does_not() {
        let spec = |cpu: &str| PodSpec {
            containers: vec![Container {
                name: "c".to_owned(),
                resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "cpu".to_owned(),
                        k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.to_owned()),
                    )])),
                    ..Default::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        };
        let mut other = pod(spec("250m"));
        other.metadata.name = Some("q".into());
        let first = SchedulingPod::from_pod(&pod(spec("250m"))).unwrap();
        let second = SchedulingPod::from_pod(&other).unwrap();
        let bigger = SchedulingPod::from_pod(&pod(spec("500m"))).unwrap();
        assert!(Arc::ptr_eq(&first.shape, &second.shape));
        assert_eq!(&*second.name, "q");
        assert!(!Arc::ptr_eq(&first.shape, &bigger.shape));
        assert_ne!(first.shape.requests, bigger.shape.requests);
    }

    #[test]
    fn tolerations_follow_kubernetes_matching() {
        let taint = Taint::new("gpu", Some("true"), TaintEffect::NoSchedule);
        let tol = |key: Option<&str>, op: &str, value: Option<&str>, effect: Option<&str>| {
            Toleration::from_api(&ApiToleration {
                key: key.map(str::to_owned),
                operator: Some(op.to_owned()),
                value: value.map(str::to_owned),
                effect: effect.map(str::to_owned),
                toleration_seconds: None,
            })
        };
        assert!(tol(Some("gpu"), "Equal", Some("true"), None).tolerates(&taint));
        assert!(!tol(Some("gpu"), "Equal", Some("false"), None).tolerates(&taint));
        assert!(tol(Some("gpu"), "Exists", None, Some("NoSchedule")).tolerates(&taint));
        assert!(!tol(Some("gpu"), "Exists", None, Some("NoExecute")).tolerates(&taint));
        assert!(tol(None, "Exists", None, None).tolerates(&taint));
        assert!(!tol(Some("gpu"), "Lt", Some("1"), None).tolerates(&taint));
    }

    #[test]
    fn host_ports_conflict_on_unspecified_addresses() {
        let spec = PodSpec {
            containers: vec![Container {
                name: "c".to_owned(),
                ports: Some(vec![
                    ContainerPort {
                        container_port: 80,
                        host_port: Some(8080),
                        ..ContainerPort::default()
                    },
                    ContainerPort {
                        container_port: 81,
                        ..ContainerPort::default()
                    },
                ]),
                ..Container::default()
            }],
            ..PodSpec::default()
        };
        let ports = SchedulingPod::from_pod(&pod(spec))
            .expect("valid")
            .shape
            .host_ports
            .clone();
        assert_eq!(ports.len(), 1);
        let specific = HostPort {
            ip: "10.0.0.1".parse().ok(),
            port: 8080,
            protocol: "TCP".to_owned(),
        };
        assert!(ports[0].conflicts(&specific));
        let other_ip = HostPort {
            ip: "10.0.0.2".parse().ok(),
            ..specific.clone()
        };
        assert!(!specific.conflicts(&other_ip));
        let udp = HostPort {
            protocol: "UDP".to_owned(),
            ..specific.clone()
        };
        assert!(!ports[0].conflicts(&udp));
    }

    #[test]
    fn bad_affinity_values_name_the_field() {
        let spec = PodSpec {
            affinity: Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: "cpus".to_owned(),
                                operator: "Gt".to_owned(),
                                values: Some(vec!["many".to_owned()]),
                            }]),
                            match_fields: None,
                        }],
                    }),
                    preferred_during_scheduling_ignored_during_execution: None,
                }),
                ..Affinity::default()
            }),
            ..PodSpec::default()
        };
        let error = SchedulingPod::from_pod(&pod(spec))
            .err()
            .map(|e| e.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains("nodeSelectorTerms[0]")),
            "{error:?}"
        );
    }

    #[test]
    fn spread_constraints_keep_policies_and_refuse_unknown_modes() {
        let tsc = |when: &str| TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "topology.kubernetes.io/zone".to_owned(),
            when_unsatisfiable: when.to_owned(),
            node_taints_policy: Some("Honor".to_owned()),
            ..TopologySpreadConstraint::default()
        };
        let ok = SchedulingPod::from_pod(&pod(PodSpec {
            topology_spread_constraints: Some(vec![tsc("ScheduleAnyway")]),
            ..PodSpec::default()
        }))
        .expect("valid");
        let spread = &ok.shape.spread[0];
        assert!(spread.schedule_anyway && spread.honor_node_taints && spread.honor_node_affinity);
        assert!(ok.shape.has_preferences());
        let bad = SchedulingPod::from_pod(&pod(PodSpec {
            topology_spread_constraints: Some(vec![tsc("Sometimes")]),
            ..PodSpec::default()
        }));
        assert!(matches!(bad, Err(PodError::WhenUnsatisfiable { .. })));
    }
}
