//! An instance as a NodeClaim (Karpenter's `instanceToNodeClaim`): the labels its instance type
//! fixes (every single-valued requirement but the reservation id), its zone and zone id, capacity
//! type and NodePool; its provider id `aws:///<zone>/<id>`, image, capacity and allocatable
//! (zero resources left out, EFA only when the launch asked for it).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::AwsCloudProvider;
use crate::nodeclaim::launch::LAUNCH_GROUP;
use crate::ports::cloud_provider::{CloudProviderError, InstanceTypes};
use crate::ports::ec2::{Instance, InstanceState};
use karpenter_core::apis::nodeclaim::{
    NodeClaim, NodeClaimSpec, NodeClaimStatus, NodeClassReference, SharedRequirements,
};
use karpenter_core::apis::{EC2NodeClass, labels};
use karpenter_core::domain::instance_type::CapacityType;
use karpenter_core::domain::instance_type::InstanceType;
use karpenter_core::domain::resources::Resources;

/// What hydration needs to know about an instance.
#[derive(Debug, Clone)]
pub(super) struct InstanceFacts<'a> {
    pub id: &'a str,
    pub zone: &'a str,
    pub image_id: Option<&'a str>,
    pub capacity_type: CapacityType,
    /// `karpenter.sh/nodepool` tag.
    pub nodepool: Option<&'a str>,
    /// Whether the instance has EFA interfaces (the launch requested EFA).
    pub efa: bool,
    /// The capacity reservation of a reserved instance.
    pub reservation_id: Option<&'a str>,
}

pub(super) use crate::ports::cloud_provider::provider_id;

/// The labels an instance gives its NodeClaim.
pub(super) fn labels_of(
    facts: &InstanceFacts<'_>,
    instance_type: Option<&InstanceType>,
    nodeclass: Option<&EC2NodeClass>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(it) = instance_type {
        for requirement in it.requirements.iter() {
            if requirement.key() == labels::CAPACITY_RESERVATION_ID {
                continue;
            }
            if let Some(value) = requirement.single_value() {
                out.insert(requirement.key().to_owned(), value.to_owned());
            }
        }
    }
    out.insert(labels::ZONE.to_owned(), facts.zone.to_owned());
    let zone_id = nodeclass
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.subnets.iter().find(|s| s.zone == facts.zone))
        .and_then(|s| s.zone_id.clone())
        .filter(|id| !id.is_empty());
    if let Some(zone_id) = zone_id {
        out.insert(labels::ZONE_ID.to_owned(), zone_id);
    }
    out.insert(
        labels::CAPACITY_TYPE.to_owned(),
        facts.capacity_type.as_str().to_owned(),
    );
    if let Some(reservation) = facts
        .reservation_id
        .filter(|_| facts.capacity_type == CapacityType::Reserved)
    {
        out.insert(
            labels::CAPACITY_RESERVATION_ID.to_owned(),
            reservation.to_owned(),
        );
    }
    if let Some(nodepool) = facts.nodepool {
        out.insert(labels::NODEPOOL.to_owned(), nodepool.to_owned());
    }
    out
}

/// Capacity and allocatable for the NodeClaim's status.
fn resource_lists(
    instance_type: &InstanceType,
    efa: bool,
) -> (
    BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) {
    let keep = |resources: &Resources| {
        let mut list = resources.to_list();
        if !efa {
            list.remove(labels::RESOURCE_EFA);
        }
        list
    };
    (
        keep(&instance_type.capacity),
        keep(instance_type.allocatable()),
    )
}

/// Writes the instance's labels (merged over the NodeClaim's), provider id, image, capacity
/// and allocatable into `nodeclaim`.
pub(super) fn hydrate(
    nodeclaim: &mut NodeClaim,
    facts: &InstanceFacts<'_>,
    instance_type: Option<&InstanceType>,
    nodeclass: Option<&EC2NodeClass>,
) {
    let labels = labels_of(facts, instance_type, nodeclass);
    nodeclaim
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .extend(labels);
    let status = nodeclaim
        .status
        .get_or_insert_with(NodeClaimStatus::default);
    status.provider_id = Some(provider_id(facts.zone, facts.id));
    if let Some(image) = facts.image_id.filter(|i| !i.is_empty()) {
        status.image_id = Some(image.to_owned());
    }
    if let Some(it) = instance_type {
        let (capacity, allocatable) = resource_lists(it, facts.efa);
        status.capacity = capacity.into();
        status.allocatable = allocatable.into();
    }
}

/// Spot, reserved (with the `ReservedCapacity` gate, in a reservation) or on-demand. Without
/// the gate an instance in an open reservation counts as on-demand, as in Karpenter.
fn capacity_type_of(instance: &Instance, reserved_capacity: bool) -> CapacityType {
    match instance.capacity_type {
        CapacityType::Spot => CapacityType::Spot,
        CapacityType::OnDemand | CapacityType::Reserved
            if reserved_capacity && instance.capacity_reservation_id.is_some() =>
        {
            CapacityType::Reserved
        }
        CapacityType::OnDemand | CapacityType::Reserved => CapacityType::OnDemand,
    }
}

/// The instance types of NodePools by name (`None`: the pool or its class is gone), as one
/// `list` looked them up.
pub(super) type PoolTypes = HashMap<String, Option<InstanceTypes>>;

impl AwsCloudProvider {
    /// A NodeClaim for an instance found in EC2 (`get`, `list`): named after its
    /// `karpenter.sh/nodeclaim` tag when tagged, annotated with its launch group, created at
    /// launch, marked deleted when the instance is shutting down or gone.
    pub(super) fn instance_to_nodeclaim(
        &self,
        instance: &Instance,
    ) -> Result<NodeClaim, CloudProviderError> {
        self.instance_to_nodeclaim_with(instance, &mut PoolTypes::default())
    }

    /// [`Self::instance_to_nodeclaim`] for many instances (`list`): each NodePool's instance
    /// types are looked up once, in `pools`.
    pub(super) fn instance_to_nodeclaim_with(
        &self,
        instance: &Instance,
        pools: &mut PoolTypes,
    ) -> Result<NodeClaim, CloudProviderError> {
        let nodepool_name = instance.tags.get(labels::TAG_NODEPOOL);
        let instance_types = match nodepool_name {
            Some(name) => {
                if let Some(types) = pools.get(name) {
                    types.clone()
                } else {
                    let types = match self.view.nodepool(name) {
                        Some(pool) => self.pool_instance_types(&pool)?,
                        None => None,
                    };
                    pools.insert(name.clone(), types.clone());
                    types
                }
            }
            None => None,
        };
        let instance_type = instance_types
            .iter()
            .flat_map(|types| types.iter())
            .find(|it| it.name == instance.instance_type)
            .cloned();
        let nodeclass = instance
            .tags
            .get(labels::TAG_EC2NODECLASS)
            .and_then(|n| self.nodeclass(n));
        let mut nodeclaim = self.instance_brief(instance);
        let facts = InstanceFacts {
            id: &instance.id,
            zone: &instance.zone,
            image_id: Some(&instance.image_id),
            capacity_type: capacity_type_of(instance, self.reserved_capacity),
            nodepool: nodepool_name.map(String::as_str),
            efa: false,
            reservation_id: instance.capacity_reservation_id.as_deref(),
        };
        hydrate(
            &mut nodeclaim,
            &facts,
            instance_type.as_deref(),
            nodeclass.as_deref(),
        );
        Ok(nodeclaim)
    }

    /// An instance as the garbage collector reads it (`CloudProvider::list_brief`): its
    /// NodeClaim's name, launch group, launch and deletion times, class and provider id,
    /// without the labels, image and resources its instance type gives (hydration).
    pub(super) fn instance_brief(&self, instance: &Instance) -> NodeClaim {
        let class_name = instance
            .tags
            .get(labels::TAG_EC2NODECLASS)
            .map_or("", String::as_str);
        NodeClaim {
            metadata: ObjectMeta {
                name: instance.tags.get(labels::TAG_NODECLAIM).cloned(),
                // The launch group the instance was launched for, so the garbage collector
                // can spare an orphan a NodeClaim of its group is about to adopt.
                annotations: instance
                    .tags
                    .get(LAUNCH_GROUP)
                    .map(|group| BTreeMap::from([(LAUNCH_GROUP.to_owned(), group.clone())])),
                creation_timestamp: instance.launch_time.map(Time),
                deletion_timestamp: matches!(
                    instance.state,
                    InstanceState::ShuttingDown | InstanceState::Terminated
                )
                .then(|| Time(self.clock.now())),
                ..ObjectMeta::default()
            },
            spec: NodeClaimSpec {
                taints: Vec::new(),
                startup_taints: Vec::new(),
                requirements: SharedRequirements::default(),
                resources: karpenter_core::apis::nodeclaim::ResourceRequirements::default(),
                node_class_ref: NodeClassReference::ec2(class_name),
                termination_grace_period: None,
                expire_after: karpenter_core::apis::nodeclaim::default_expire_after(),
            },
            status: Some(NodeClaimStatus {
                provider_id: Some(provider_id(&instance.zone, &instance.id)),
                ..NodeClaimStatus::default()
            }),
        }
    }
}
