//! The snapshot the scheduler solves over: pending pods, the nodes that exist or are being
//! launched, and the NodePools with their instance types, DaemonSet overhead and limits.
//! The Provisioner builds it from cluster state; tests and benches build it directly.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::apis::labels;
use crate::apis::nodepool::NodePool;
use crate::apis::taints::Taint;
use crate::domain::instance_type::InstanceType;
use crate::domain::requirements::{Requirement, RequirementError, Requirements};
use crate::domain::resources::{ResourceError, ResourceLimits, Resources};

use super::pod::{BoundPod, HostPort, SchedulingPod};

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
        }
    }
}

/// A node that exists, or a NodeClaim being launched, that pods may be placed on.
#[derive(Debug, Clone, Default)]
pub struct ExistingNode {
    pub name: String,
    pub labels: BTreeMap<String, String>,
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
    pub pods: Vec<BoundPod>,
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
