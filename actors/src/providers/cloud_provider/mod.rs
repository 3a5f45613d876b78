//! The AWS [`CloudProvider`] (Karpenter's `pkg/cloudprovider`, reference 4.1): launches,
//! terminates, finds and lists instances for NodeClaims, lists instance types per NodePool, and
//! tells why a NodeClaim drifted, over the providers of [`crate::providers`] and the narrow ports.
//!
//! It reads the cluster through the [`ClusterView`] (NodePools and `EC2NodeClass`es as the
//! `NodeClass` work resolved them: subnets, security groups, AMIs, instance profile, the hash
//! annotations); it never resolves a class itself.
//!
//! Create flow ([`create`]): class and readiness → the class's instance types filtered by the
//! NodeClaim's requirements, an available compatible offering and its requests
//! ([`filter::launch_candidates`]: Karpenter's `FilterRejectInstanceTypes`, truncation to 60
//! respecting `minValues`) → capacity type → launch subnets per zone → launch templates per AMI
//! group → one instant fleet through the batcher (retried once when a template vanished) → the
//! NodeClaim hydrated with the instance's labels, provider id, image, capacity, allocatable and
//! the class's hash annotations. Production builds it with [`AwsProviders::new`] over the
//! `karpenter::aws` adapters; kwok's is the same code over kwok's ports
//! ([`crate::kwok::cloud_provider`]).

mod create;
mod drift;
pub mod filter;
mod hydrate;

pub use create::reason_message;
pub use drift::static_drift;

use std::borrow::Cow;
use std::sync::Arc;

use async_trait::async_trait;
use karpenter_config::Settings;

use super::ami_mapping;
use super::instance_type_provider::{InstanceTypeDeps, InstanceTypeProvider, amis_hash};
use super::instance_types::ResolveSettings;
use super::instances::{InstancesDeps, InstancesError, InstancesProvider};
use super::launch_subnets::LaunchSubnets;
use super::launch_templates::{LaunchTemplateDeps, LaunchTemplateProvider};
use super::pricing::{PricingDeps, PricingError, PricingProvider};
use super::unavailable::UnavailableOfferings;
use super::validation;
use crate::ports::aws_error::AwsError;
use crate::ports::clock::Clock;
use crate::ports::cloud_provider::{
    AWS_REPAIR_POLICIES, CloudProvider, CloudProviderError, DriftReason, InstanceTypes,
    RepairPolicy, parse_provider_id,
};
use crate::ports::cluster_view::ClusterView;
use crate::ports::ec2::{Ec2Api, Instance};
use crate::ports::pricing::PricingApi;
use karpenter_core::apis::conditions::ConditionStatus;
use karpenter_core::apis::nodeclaim::{NodeClaim, provider_id};
use karpenter_core::apis::nodepool::NodePool;
use karpenter_core::apis::{EC2NodeClass, SlimNode, SlimNodeClaim, labels};
use karpenter_core::domain::instance_type::InstanceType;
use karpenter_core::domain::requirements::{AllowUndefined, Requirements};
use karpenter_core::domain::resources;
use karpenter_core::domain::tags::{self, Tags};
use karpenter_core::domain::userdata::ClusterInfo;

/// The controller settings the AWS providers are built with.
#[derive(Debug, Clone, PartialEq)]
pub struct AwsProviderSettings {
    /// `CLUSTER_NAME`: the `eks:eks-cluster-name` and `kubernetes.io/cluster/<name>` tags.
    pub cluster_name: String,
    pub region: String,
    /// `VM_MEMORY_OVERHEAD_PERCENT`.
    pub vm_memory_overhead_percent: f64,
    /// `RESERVED_ENIS`.
    pub reserved_enis: u32,
    /// `ISOLATED_VPC`: no Pricing API; the built-in on-demand table stays.
    pub isolated_vpc: bool,
    /// The `ReservedCapacity` feature gate: instances in a capacity reservation count as
    /// reserved (and drift when the reservation is no longer selected).
    pub reserved_capacity: bool,
    /// Cluster facts for user data (endpoint, CA bundle, DNS addresses, service CIDR).
    pub cluster: ClusterInfo,
}

impl AwsProviderSettings {
    /// From the controller settings, the resolved region and the cluster facts found at
    /// startup; the cluster facts' name is the cluster name.
    #[must_use]
    pub fn from_settings(settings: &Settings, region: &str, mut cluster: ClusterInfo) -> Self {
        let cluster_name = settings.cluster_name.clone().unwrap_or_default();
        cluster.name.clone_from(&cluster_name);
        AwsProviderSettings {
            cluster_name,
            region: region.to_owned(),
            vm_memory_overhead_percent: settings.vm_memory_overhead_percent,
            reserved_enis: settings.reserved_enis,
            isolated_vpc: settings.isolated_vpc,
            reserved_capacity: settings.feature_gates.reserved_capacity,
            cluster,
        }
    }
}

/// A refresh of the AWS catalogue or prices failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RefreshError {
    #[error("refreshing instance types: {0}")]
    InstanceTypes(AwsError),
    #[error(transparent)]
    Pricing(#[from] PricingError),
}

impl RefreshError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            RefreshError::InstanceTypes(source) => source.category(),
            RefreshError::Pricing(source) => source.category(),
        }
    }
}

/// The AWS providers, shared by the cloud provider and the AWS subsystem actors.
#[derive(Debug, Clone)]
pub struct AwsProviders {
    pub ec2: Arc<dyn Ec2Api>,
    pub pricing: Arc<PricingProvider>,
    pub unavailable: Arc<UnavailableOfferings>,
    pub instance_types: Arc<InstanceTypeProvider>,
    pub instances: Arc<InstancesProvider>,
    pub launch_templates: Arc<LaunchTemplateProvider>,
    pub subnets: Arc<LaunchSubnets>,
}

impl AwsProviders {
    /// Builds every provider over the EC2 port (and the Pricing API when reachable). Their
    /// actors (batchers, ICE expiry, launch-template janitor, catalogue refresh) start with
    /// [`crate::aws::AwsActors::start`].
    pub fn new(
        ec2: Arc<dyn Ec2Api>,
        pricing_api: Option<Arc<dyn PricingApi>>,
        settings: &AwsProviderSettings,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, PricingError> {
        let pricing = Arc::new(PricingProvider::new(PricingDeps {
            ec2: Arc::clone(&ec2),
            pricing: pricing_api,
            region: settings.region.clone(),
            isolated_vpc: settings.isolated_vpc,
            clock,
        })?);
        let unavailable = Arc::new(UnavailableOfferings::default());
        let instance_types = Arc::new(InstanceTypeProvider::new(InstanceTypeDeps {
            ec2: Arc::clone(&ec2),
            pricing: Arc::clone(&pricing),
            unavailable: Arc::clone(&unavailable),
            settings: ResolveSettings {
                region: settings.region.clone(),
                vm_memory_overhead_percent: settings.vm_memory_overhead_percent,
                reserved_enis: settings.reserved_enis,
            },
        }));
        let instances = Arc::new(InstancesProvider::new(InstancesDeps {
            ec2: Arc::clone(&ec2),
            unavailable: Arc::clone(&unavailable),
            cluster_name: settings.cluster_name.clone(),
        }));
        let mut cluster = settings.cluster.clone();
        cluster.name.clone_from(&settings.cluster_name);
        let launch_templates = Arc::new(LaunchTemplateProvider::new(LaunchTemplateDeps {
            ec2: Arc::clone(&ec2),
            cluster,
        }));
        let subnets = Arc::new(LaunchSubnets::new(Arc::clone(&ec2)));
        Ok(AwsProviders {
            ec2,
            pricing,
            unavailable,
            instance_types,
            instances,
            launch_templates,
            subnets,
        })
    }

    /// Fetches the instance-type catalogue and spot prices, and on-demand prices when the
    /// Pricing API is used (a failure there keeps the previous prices and is logged). The AWS
    /// subsystem actors call this every 12 hours (`crate::aws::catalogue`); call it once before
    /// the first launch when they do not run.
    pub async fn refresh(&self) -> Result<(), RefreshError> {
        self.instance_types
            .refresh()
            .await
            .map_err(RefreshError::InstanceTypes)?;
        if let Err(error) = self.pricing.update_on_demand_prices().await {
            tracing::error!(
                error = crate::logs::err(&error),
                "failed updating on-demand pricing; keeping the previous prices"
            );
        }
        self.pricing.update_spot_prices().await?;
        Ok(())
    }
}

/// The AWS cloud provider.
#[derive(Debug)]
pub struct AwsCloudProvider {
    view: Arc<dyn ClusterView>,
    providers: AwsProviders,
    clock: Arc<dyn Clock>,
    cluster_name: String,
    reserved_capacity: bool,
    /// The launch candidates of recent NodeClaims' requirements (see [`filter`]).
    candidates: filter::CandidatesMemo,
}

impl AwsCloudProvider {
    /// The cloud provider over these providers, reading NodePools and classes from `view`.
    #[must_use]
    pub fn new(
        view: Arc<dyn ClusterView>,
        providers: AwsProviders,
        clock: Arc<dyn Clock>,
        settings: &AwsProviderSettings,
    ) -> Self {
        AwsCloudProvider {
            view,
            providers,
            clock,
            cluster_name: settings.cluster_name.clone(),
            reserved_capacity: settings.reserved_capacity,
            candidates: filter::CandidatesMemo::default(),
        }
    }

    /// The providers underneath (for the AWS subsystem actors and the `NodeClass` work).
    #[must_use]
    pub fn providers(&self) -> &AwsProviders {
        &self.providers
    }

    /// The instance behind a provider id, read through the `DescribeInstances` batcher.
    async fn instance(&self, provider_id: &str) -> Result<Instance, CloudProviderError> {
        let (_, instance_id) = parse_provider_id(provider_id)?;
        self.providers
            .instances
            .get(instance_id)
            .await
            .map_err(not_found)
    }

    /// A class that exists and is not being deleted (Karpenter treats a deleting class as
    /// absent).
    fn nodeclass(&self, name: &str) -> Option<Arc<EC2NodeClass>> {
        self.view
            .ec2nodeclass(name)
            .filter(|c| c.metadata.deletion_timestamp.is_none())
    }

    /// Records the memory capacity a registered node reports for its type, when the NodeClaim
    /// runs the AMI its class maps that type to now (Karpenter's
    /// `UpdateInstanceTypeCapacityFromNode`).
    fn discover_capacity(&self, nodeclaim: &SlimNodeClaim, node: &SlimNode) {
        let node_labels = node.metadata.labels.clone().unwrap_or_default();
        let Some(instance_type) = node_labels.get(labels::INSTANCE_TYPE) else {
            return;
        };
        let Some(memory) = node
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("memory"))
            .and_then(|q| resources::parse_resource("memory", &q.0).ok())
        else {
            return;
        };
        let Some(nodeclass) = self.nodeclass(&nodeclaim.spec.node_class_ref.name) else {
            return;
        };
        let amis = nodeclass
            .status
            .as_ref()
            .map_or(&[][..], |s| s.amis.as_slice());
        let Ok(parsed) = ami_mapping::parsed_amis(amis) else {
            return;
        };
        let requirements = Requirements::from_labels(&node_labels);
        let current = parsed
            .iter()
            .find(|(_, serves)| requirements.is_compatible(serves, AllowUndefined::None))
            .map(|(ami, _)| ami.id.as_str());
        let image = nodeclaim
            .status
            .as_ref()
            .and_then(|s| s.image_id.as_deref());
        if current.is_some() && current == image {
            self.providers.instance_types.record_discovered_memory(
                instance_type,
                amis_hash(&nodeclass),
                memory,
            );
        }
    }

    fn nodeclass_of_pool(&self, nodepool: &NodePool) -> Option<Arc<EC2NodeClass>> {
        self.nodeclass(&nodepool.spec.template.spec.node_class_ref.name)
    }

    /// Every instance type of the NodePool's class; `None` when the pool or class is gone.
    fn pool_instance_types(
        &self,
        nodepool: &NodePool,
    ) -> Result<Option<InstanceTypes>, CloudProviderError> {
        let Some(nodeclass) = self.nodeclass_of_pool(nodepool) else {
            return Ok(None);
        };
        let list = self
            .providers
            .instance_types
            .list_for(&nodeclass)
            .map_err(|error| CloudProviderError::NodeClassIncomplete {
                nodeclass: nodeclass.metadata.name.clone().unwrap_or_default(),
                message: error.to_string(),
            })?;
        Ok(Some(list))
    }

    /// The instance types the `NodeClass` validation dry-runs with (reference 5.1): the first
    /// is the one `RunInstances` uses. Reads the NodePools that use the class from the view.
    pub fn validation_instance_types(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<Vec<String>, CloudProviderError> {
        self.validation_choice(nodeclass, validation::validation_instance_types)
    }

    /// Runs a validation choice over the class's instance types and the NodePools using it.
    fn validation_choice<T>(
        &self,
        nodeclass: &EC2NodeClass,
        choose: impl FnOnce(
            &EC2NodeClass,
            &[Arc<InstanceType>],
            &[Arc<NodePool>],
        ) -> Result<T, super::ami_mapping::AmiRequirementsError>,
    ) -> Result<T, CloudProviderError> {
        let name = nodeclass.metadata.name.clone().unwrap_or_default();
        let nodepools: Vec<Arc<NodePool>> = self
            .view
            .nodepools()
            .into_iter()
            .filter(|p| {
                let reference = &p.spec.template.spec.node_class_ref;
                reference.name == name && reference.group == labels::AWS_GROUP
            })
            .collect();
        let instance_types = match self.providers.instance_types.list_for(nodeclass) {
            Ok(list) => list,
            // No subnets yet: nothing to choose from; the fallback types apply.
            Err(super::instance_type_provider::InstanceTypesError::NoSubnets { .. }) => {
                InstanceTypes::default()
            }
            Err(error) => {
                return Err(CloudProviderError::NodeClassIncomplete {
                    nodeclass: name,
                    message: error.to_string(),
                });
            }
        };
        choose(nodeclass, &instance_types, &nodepools).map_err(|error| {
            CloudProviderError::NodeClassIncomplete {
                nodeclass: name,
                message: error.to_string(),
            }
        })
    }
}

/// The `Ready` condition's status of a class (`Unknown` when it has none yet).
fn readiness(nodeclass: &EC2NodeClass) -> (ConditionStatus, String) {
    nodeclass
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == karpenter_core::apis::conditions::READY)
        .map_or((ConditionStatus::Unknown, String::new()), |c| {
            (c.status, c.message.clone())
        })
}

fn not_found(error: InstancesError) -> CloudProviderError {
    match error {
        InstancesError::NotFound { instance_id } => {
            CloudProviderError::NodeClaimNotFound { instance_id }
        }
        InstancesError::Aws(source)
        | InstancesError::Launch { source, .. }
        | InstancesError::InsufficientCapacity { source, .. } => CloudProviderError::Aws(source),
        other => CloudProviderError::Create {
            reason: "LaunchFailed".to_owned(),
            message: other.to_string(),
        },
    }
}

#[async_trait]
impl CloudProvider for AwsCloudProvider {
    async fn create(&self, nodeclaim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        self.create_nodeclaim(nodeclaim).await
    }

    async fn delete(&self, nodeclaim: &NodeClaim) -> Result<(), CloudProviderError> {
        let provider_id = nodeclaim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .unwrap_or_default();
        let (_, instance_id) = parse_provider_id(provider_id)?;
        match self.providers.instances.delete(instance_id).await {
            Ok(()) => Ok(()),
            Err(error) => {
                let error = not_found(error);
                if matches!(error, CloudProviderError::NodeClaimNotFound { .. }) {
                    let uid = nodeclaim
                        .metadata
                        .uid
                        .clone()
                        .or_else(|| nodeclaim.metadata.name.clone())
                        .unwrap_or_default();
                    self.providers.instances.forget(&uid);
                }
                Err(error)
            }
        }
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        let instance = self.instance(provider_id).await?;
        self.instance_to_nodeclaim(&instance)
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        let instances = self.providers.instances.list().await.map_err(not_found)?;
        let mut pools = hydrate::PoolTypes::default();
        instances
            .iter()
            .map(|instance| self.instance_to_nodeclaim_with(instance, &mut pools))
            .collect()
    }

    async fn list_brief(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        let instances = self.providers.instances.list().await.map_err(not_found)?;
        Ok(instances
            .iter()
            .map(|instance| self.instance_brief(instance))
            .collect())
    }

    async fn instance_types(
        &self,
        nodepool: &NodePool,
    ) -> Result<InstanceTypes, CloudProviderError> {
        Ok(self.pool_instance_types(nodepool)?.unwrap_or_default())
    }

    async fn is_drifted(
        &self,
        nodeclaim: &SlimNodeClaim,
    ) -> Result<Option<DriftReason>, CloudProviderError> {
        self.drift(nodeclaim).await
    }

    fn validation_launches(
        &self,
        nodeclass: &EC2NodeClass,
    ) -> Result<Vec<(String, String)>, CloudProviderError> {
        self.validation_choice(nodeclass, validation::validation_launches)
    }

    fn node_registered(&self, nodeclaim: &SlimNodeClaim, node: &SlimNode) {
        self.discover_capacity(nodeclaim, node);
    }

    async fn tag_instance(
        &self,
        nodeclaim: &SlimNodeClaim,
        tags: &Tags,
    ) -> Result<(), CloudProviderError> {
        // Through the DescribeInstances batcher: a burst of registrations reads in few calls.
        let instance = self
            .instance(provider_id(nodeclaim).unwrap_or_default())
            .await?;
        let missing = tags::missing(tags, &instance.tags);
        if missing.is_empty() {
            return Ok(());
        }
        self.providers
            .instances
            .create_tags(&instance.id, &missing)
            .await
            .map_err(not_found)
    }

    fn repair_policies(&self) -> Cow<'static, [RepairPolicy]> {
        Cow::Borrowed(AWS_REPAIR_POLICIES)
    }

    fn name(&self) -> &'static str {
        "aws"
    }
}
