//! The snapshot the scheduler solves over: pending pods, the nodes that exist or are being
//! launched, and the NodePools with their instance types, DaemonSet overhead and limits.
//! The Provisioner builds it from cluster state; tests and benches build it directly.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::apis::labels;
use crate::apis::nodepool::NodePool;
use crate::apis::taints::{Taint, TaintEffect};
use crate::domain::instance_type::InstanceType;
use crate::domain::requirements::{AllowUndefined, Requirement, RequirementError, Requirements};
use crate::domain::resources::{ResourceError, ResourceLimits, Resources};

use super::node_labels::NodeLabels;
use super::pod::{BoundPod, HostPort, SchedulingPod, Toleration, first_untolerated};

/// A NodePool that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodePoolError {
    #[error("nodepool {name}: spec.template.spec.requirements: {source}")]
    Requirements {
        name: String,
        #[source]
        source: RequirementError,
    },
    #[error("nodepool {name}: spec.limits: {source}")]
    Limits {
        name: String,
        #[source]
        source: ResourceError,
    },
}

impl NodePoolError {
    /// A short label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Requirements { source, .. } => source.category(),
            Self::Limits { source, .. } => source.category(),
        }
    }
}

/// A NodePool as the scheduler sees it.
#[derive(Debug, Clone)]
pub struct NodePoolInput {
    pub name: String,
    /// Higher weights are tried first.
    pub weight: i32,
    /// The template's requirements and labels, including `karpenter.sh/nodepool` and the node
    /// class label, which every NodeClaim of the pool carries.
    pub requirements: Requirements,
    /// Taints pods must tolerate (startup taints are not among them).
    pub taints: Vec<Taint>,
    pub instance_types: Vec<Arc<InstanceType>>,
    /// What the DaemonSets that would run on a new node of this pool request.
    pub daemon_overhead: Resources,
    /// Host ports those DaemonSets bind.
    pub daemon_host_ports: Vec<HostPort>,
    /// `spec.limits`; the capacity of the pool's existing nodes is subtracted by the scheduler.
    pub limits: ResourceLimits,
    /// `instance_types` already holds only the types the requirements allow, cheapest
    /// first ([`NodePoolInput::prepared`]): the scheduler takes them as they are instead of
    /// filtering and ordering them again (callers that solve one pool many times).
    pub types_prepared: bool,
}

impl NodePoolInput {
    /// Reads a NodePool's template, weight and limits.
    pub fn from_node_pool(
        node_pool: &NodePool,
        instance_types: Vec<Arc<InstanceType>>,
    ) -> Result<Self, NodePoolError> {
        let name = node_pool.metadata.name.clone().unwrap_or_default();
        let template = &node_pool.spec.template;
        let api: Vec<_> = template
            .spec
            .requirements
            .iter()
            .map(crate::apis::requirements::NodePoolRequirement::as_requirement)
            .collect();
        let mut requirements =
            Requirements::from_api(&api).map_err(|source| NodePoolError::Requirements {
                name: name.clone(),
                source,
            })?;
        requirements.add_all(&Requirements::from_labels(&template.metadata.labels));
        requirements.add(Requirement::in_values(labels::NODEPOOL, &[name.as_str()]));
        let class = &template.spec.node_class_ref;
        requirements.add(Requirement::in_values(
            &format!("{}/{}", class.group, class.kind.to_lowercase()),
            &[class.name.as_str()],
        ));
        let limits = ResourceLimits::from_list(&node_pool.spec.limits).map_err(|source| {
            NodePoolError::Limits {
                name: name.clone(),
                source,
            }
        })?;
        Ok(Self {
            name,
            weight: node_pool.spec.weight.unwrap_or(0),
            requirements,
            taints: template.spec.taints.clone(),
            instance_types,
            daemon_overhead: Resources::default(),
            daemon_host_ports: Vec::new(),
            limits,
            types_prepared: false,
        })
    }

    /// A pool named `name` with no requirements beyond its own label (tests and benches).
    #[must_use]
    pub fn new(name: &str, instance_types: Vec<Arc<InstanceType>>) -> Self {
        Self {
            name: name.to_owned(),
            weight: 0,
            requirements: Requirements::from_requirements([Requirement::in_values(
                labels::NODEPOOL,
                &[name],
            )]),
            taints: Vec::new(),
            instance_types,
            daemon_overhead: Resources::default(),
            daemon_host_ports: Vec::new(),
            limits: ResourceLimits::unlimited(),
            types_prepared: false,
        }
    }

    /// The instance types a NodeClaim of this pool may be: those compatible with the
    /// requirements (the hostname aside), ordered by their cheapest compatible offering.
    #[must_use]
    pub fn launchable_types(&self) -> Vec<Arc<InstanceType>> {
        if self.types_prepared {
            return self.instance_types.clone();
        }
        let base = super::topology::without_hostname(&self.requirements);
        let mut types: Vec<Arc<InstanceType>> = self
            .instance_types
            .iter()
            .filter(|t| t.is_compatible(&base))
            .cloned()
            .collect();
        crate::domain::instance_type::order_by_price(&mut types, &base);
        types
    }

    /// This pool with its instance types filtered and ordered once
    /// ([`NodePoolInput::launchable_types`]), for solving it many times.
    #[must_use]
    pub fn prepared(&self) -> Self {
        Self {
            instance_types: self.launchable_types(),
            types_prepared: true,
            ..self.clone()
        }
    }
}

impl NodePoolInput {
    /// Sets the DaemonSet overhead from the pods the DaemonSets would run (their pod
    /// templates): those that would land on a new node of this pool, as Karpenter's
    /// `isDaemonPodCompatible` decides (`PreferNoSchedule` taints tolerated, the pool's
    /// requirements compatible with a required node affinity term, trying each term).
    #[must_use]
    pub fn with_daemonsets(mut self, daemons: &[SchedulingPod]) -> Self {
        let mut overhead = Resources::default();
        let mut ports = Vec::new();
        for daemon in daemons.iter().filter(|d| self.runs_daemon(d)) {
            overhead.add(&daemon.shape.requests);
            ports.extend(daemon.shape.host_ports.iter().cloned());
        }
        self.daemon_overhead = overhead;
        self.daemon_host_ports = ports;
        self
    }

    /// Whether a DaemonSet pod would run on a new node of this pool.
    #[must_use]
    pub fn runs_daemon(&self, daemon: &SchedulingPod) -> bool {
        let shape = &daemon.shape;
        let mut tolerations = shape.tolerations.clone();
        tolerations.push(Toleration::exists_for_effect(
            TaintEffect::PreferNoSchedule.as_str(),
        ));
        if first_untolerated(&tolerations, &self.taints).is_some() {
            return false;
        }
        let compatible = |term: Option<&Requirements>| {
            let mut required = shape.node_selector.clone();
            if let Some(term) = term {
                required.add_all(term);
            }
            self.requirements
                .is_compatible(&required, AllowUndefined::WellKnown)
        };
        if shape.required_terms.is_empty() {
            compatible(None)
        } else {
            shape.required_terms.iter().any(|t| compatible(Some(t)))
        }
    }
}

/// Taints a node keeps only while it starts: Kubernetes' not-ready and unreachable, the cloud
/// provider's uninitialized, and Karpenter's unregistered taint (Karpenter's
/// `KnownEphemeralTaints`).
const EPHEMERAL_TAINTS: &[(&str, TaintEffect)] = &[
    (labels::NOT_READY_TAINT, TaintEffect::NoSchedule),
    (labels::UNREACHABLE_TAINT, TaintEffect::NoSchedule),
    (labels::UNINITIALIZED_TAINT, TaintEffect::NoSchedule),
    (labels::UNREGISTERED_TAINT, TaintEffect::NoExecute),
];

/// The taints that matter for placing pods on an existing node (Karpenter's
/// `StateNode.Taints`): for a node Karpenter manages that is not initialized yet, without its
/// NodeClaim's startup taints and the known ephemeral taints, which are about to go.
#[must_use]
pub fn scheduling_taints(
    taints: &[Taint],
    startup_taints: &[Taint],
    managed_and_initializing: bool,
) -> Vec<Taint> {
    if !managed_and_initializing {
        return taints.to_vec();
    }
    let same = |a: &Taint, key: &str, effect: TaintEffect| a.key == key && a.effect == effect;
    taints
        .iter()
        .filter(|t| !startup_taints.iter().any(|s| same(t, &s.key, s.effect)))
        .filter(|t| !EPHEMERAL_TAINTS.iter().any(|(k, e)| same(t, k, *e)))
        .cloned()
        .collect()
}

/// What the DaemonSet pods that would run on an existing node request (Karpenter counts those
/// whose tolerations and strict requirements fit the node); subtract what the node's running
/// DaemonSet pods already request to get [`ExistingNode::pending_daemon_overhead`].
#[must_use]
pub fn daemon_requests_for_node<'a>(
    labels: impl IntoIterator<Item = (&'a String, &'a String)> + Copy,
    taints: &[Taint],
    daemons: &[SchedulingPod],
) -> Resources {
    // Built at the first DaemonSet that tolerates the node: most clusters' builds meet nodes
    // no DaemonSet needs them for (none at all, or tainted nodes).
    let mut node: Option<Requirements> = None;
    let mut total = Resources::default();
    for daemon in daemons {
        let shape = &daemon.shape;
        if first_untolerated(&shape.tolerations, taints).is_some() {
            continue;
        }
        let mut strict = shape.node_selector.clone();
        if let Some(first) = shape.required_terms.first() {
            strict.add_all(first);
        }
        let node = node.get_or_insert_with(|| Requirements::from_labels(labels));
        if node.is_compatible(&strict, AllowUndefined::None) {
            total.add(&shape.requests);
        }
    }
    total
}

/// A node that exists, or a NodeClaim being launched, that pods may be placed on.
#[derive(Debug, Clone, Default)]
pub struct ExistingNode {
    pub name: String,
    pub labels: NodeLabels,
    /// The taints that matter for scheduling: for a node Karpenter is still initializing,
    /// without its startup taints and the known ephemeral taints.
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    /// What the pods bound or nominated to it request, DaemonSets included.
    pub requested: Resources,
    /// DaemonSets expected on the node that are not running there yet.
    pub pending_daemon_overhead: Resources,
    /// Counted against its NodePool's limits.
    pub capacity: Resources,
    /// Shared: the snapshot builders keep them between runs and simulations copy nodes.
    pub pods: Vec<Arc<BoundPod>>,
    /// Initialized nodes are tried before nodes still starting.
    pub initialized: bool,
    /// `false` for a NodeClaim whose Node has not registered yet: its labels are still only
    /// requirements, so it does not add topology domains.
    pub registered: bool,
}

impl ExistingNode {
    /// The hostname label, or the name when the kubelet has not set one yet.
    #[must_use]
    pub fn hostname(&self) -> &str {
        self.labels
            .get(labels::HOSTNAME)
            .map_or(self.name.as_str(), String::as_str)
    }

    /// The NodePool that launched it, if Karpenter did.
    #[must_use]
    pub fn node_pool(&self) -> Option<&str> {
        self.labels.get(labels::NODEPOOL).map(String::as_str)
    }
}

/// Everything one scheduling run looks at.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Pending pods and the reschedulable pods of deleting nodes.
    pub pods: Vec<SchedulingPod>,
    /// Nodes and in-flight NodeClaims, except those marked for deletion.
    pub existing_nodes: Vec<ExistingNode>,
    pub node_pools: Vec<NodePoolInput>,
    /// Namespace labels, for pod affinity `namespaceSelector`s.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration as ApiToleration};
    // The view's slim types, under the names the literals below use.
    use crate::apis::{SharedPodSpec as PodSpec, SlimContainer as Container, SlimPod as Pod};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn daemon(cpu: &str, node_selector: &[(&str, &str)], tolerate: Option<&str>) -> SchedulingPod {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(format!("ds-{cpu}")),
                ..ObjectMeta::default()
            }
            .into(),
            spec: Some(
                PodSpec {
                    containers: vec![Container {
                        name: "d".to_owned(),
                        resources: Some(ResourceRequirements {
                            requests: Some(BTreeMap::from([(
                                "cpu".to_owned(),
                                Quantity(cpu.to_owned()),
                            )])),
                            ..ResourceRequirements::default()
                        }),
                        ..Container::default()
                    }],
                    node_selector: (!node_selector.is_empty()).then(|| {
                        node_selector
                            .iter()
                            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                            .collect()
                    }),
                    tolerations: tolerate.map(|key| {
                        vec![ApiToleration {
                            key: Some(key.to_owned()),
                            operator: Some("Exists".to_owned()),
                            ..ApiToleration::default()
                        }]
                    }),
                    ..PodSpec::default()
                }
                .into(),
            ),
            status: None,
        };
        SchedulingPod::from_pod(&pod).expect("valid daemon")
    }

    #[test]
    fn daemonset_overhead_counts_the_daemons_a_new_node_would_run() {
        let mut pool = NodePoolInput::new("gpu", Vec::new());
        pool.taints = vec![
            Taint::new("gpu", None, TaintEffect::NoSchedule),
            Taint::new("soft", None, TaintEffect::PreferNoSchedule),
        ];
        let daemons = [
            daemon("100m", &[], Some("gpu")),
            daemon("200m", &[], None),
            daemon("300m", &[(labels::NODEPOOL, "gpu")], Some("gpu")),
            daemon("400m", &[(labels::NODEPOOL, "other")], Some("gpu")),
            daemon("500m", &[("example.com/team", "a")], Some("gpu")),
        ];
        let pool = pool.with_daemonsets(&daemons);
        // 100m and 300m: tolerated and compatible; PreferNoSchedule is tolerated for daemons.
        assert_eq!(
            (pool.daemon_overhead.cpu, pool.daemon_overhead.pods),
            (400, 2)
        );
    }

    #[test]
    fn initializing_nodes_ignore_startup_and_ephemeral_taints() {
        let taints = [
            Taint::new("cilium/agent-not-ready", None, TaintEffect::NoSchedule),
            Taint::new(labels::NOT_READY_TAINT, None, TaintEffect::NoSchedule),
            Taint::new(labels::UNREGISTERED_TAINT, None, TaintEffect::NoExecute),
            Taint::new("dedicated", Some("db"), TaintEffect::NoSchedule),
        ];
        let startup = [Taint::new(
            "cilium/agent-not-ready",
            None,
            TaintEffect::NoSchedule,
        )];
        let kept = scheduling_taints(&taints, &startup, true);
        assert_eq!(
            kept,
            [Taint::new("dedicated", Some("db"), TaintEffect::NoSchedule)]
        );
        assert_eq!(scheduling_taints(&taints, &startup, false).len(), 4);
    }

    #[test]
    fn existing_nodes_count_the_daemons_they_would_run() {
        let node_labels = BTreeMap::from([(labels::ZONE.to_owned(), "z1".to_owned())]);
        let taints = [Taint::new("gpu", None, TaintEffect::NoSchedule)];
        let daemons = [
            daemon("100m", &[], Some("gpu")),
            daemon("200m", &[], None),
            daemon("300m", &[(labels::ZONE, "z2")], Some("gpu")),
        ];
        assert_eq!(
            daemon_requests_for_node(&node_labels, &taints, &daemons).cpu,
            100
        );
    }
}
