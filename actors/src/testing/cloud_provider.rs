//! [`FakeCloudProvider`]: an in-memory [`CloudProvider`] for actor tests. It launches
//! instances with predictable ids, labels and capacities, lists and gets them, terminates them
//! in two steps as EC2 does (the first `delete` starts termination, a later one reports
//! `NodeClaimNotFound` once the termination delay has passed), records every call with the
//! NodeClaim it was given, and fails calls on demand. Launches can take time (tokio time, so
//! paused in tests). Tests can also plant a leaked instance or make one vanish, set the
//! instance types offered to every NodePool or to one, the drift reason a NodeClaim reports and
//! the repair policies (AWS's by default). `tag_instance` records the tags it was asked for and
//! adds them to the instance; leaving out the tags an instance already has is the AWS
//! provider's job, tested over kwok.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::failures::FailureRules;
use crate::ports::clock::Clock;
use crate::ports::cloud_provider::{
    AWS_REPAIR_POLICIES, CloudProvider, CloudProviderError, DriftReason, InstanceTypes,
    RepairPolicy,
};
use karpenter_core::apis::labels;
use karpenter_core::apis::nodeclaim::NodeClaimStatus;
use karpenter_core::apis::nodeclaim::{
    NodeClaim, NodeClaimSpec, NodeClassReference, SharedRequirements,
};
use karpenter_core::apis::nodepool::NodePool;
use karpenter_core::apis::requirements::Operator;
use karpenter_core::apis::{SlimNode, SlimNodeClaim};
use karpenter_core::domain::instance_type::InstanceType;
use karpenter_core::domain::tags::Tags;

/// The zone fake instances run in.
pub const FAKE_ZONE: &str = "us-west-2a";
/// The instance type when the NodeClaim does not pin one.
pub const FAKE_INSTANCE_TYPE: &str = "m5.large";
/// The image id of every fake instance.
pub const FAKE_IMAGE_ID: &str = "ami-0fake00000000000";

/// A call made to the fake.
#[derive(Debug, Clone)]
pub enum CloudCall {
    /// `create`, with the NodeClaim as it was passed.
    Create(Box<NodeClaim>),
    Delete {
        provider_id: String,
    },
    Get {
        provider_id: String,
    },
    List,
    InstanceTypes {
        nodepool: String,
    },
    IsDrifted {
        nodeclaim: String,
    },
    /// `tag_instance`, with the tags as they were passed.
    TagInstance {
        provider_id: String,
        tags: Tags,
    },
    /// `node_registered`: the NodeClaim and the node it was told about.
    NodeRegistered {
        nodeclaim: String,
        node: String,
    },
}

/// The operation of a call, to target failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloudOperation {
    Create,
    Delete,
    Get,
    List,
    InstanceTypes,
    IsDrifted,
    TagInstance,
    NodeRegistered,
}

impl CloudCall {
    #[must_use]
    pub fn operation(&self) -> CloudOperation {
        match self {
            Self::Create(_) => CloudOperation::Create,
            Self::Delete { .. } => CloudOperation::Delete,
            Self::Get { .. } => CloudOperation::Get,
            Self::List => CloudOperation::List,
            Self::InstanceTypes { .. } => CloudOperation::InstanceTypes,
            Self::IsDrifted { .. } => CloudOperation::IsDrifted,
            Self::TagInstance { .. } => CloudOperation::TagInstance,
            Self::NodeRegistered { .. } => CloudOperation::NodeRegistered,
        }
    }
}

/// Where a fake instance is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FakeInstanceState {
    Running,
    /// `delete` was called at this time; a `delete` after the termination delay reports it
    /// gone.
    ShuttingDown(k8s_openapi::jiff::Timestamp),
}

/// An instance the fake runs.
#[derive(Debug, Clone)]
pub struct FakeInstance {
    /// The NodeClaim as `list` and `get` return it (labels, provider id, capacity).
    pub nodeclaim: NodeClaim,
    pub state: FakeInstanceState,
    /// Tags added by `tag_instance`.
    pub tags: Tags,
}

#[derive(Default)]
struct State {
    instances: BTreeMap<String, FakeInstance>,
    calls: Vec<CloudCall>,
    failures: FailureRules<CloudCall, CloudProviderError>,
    next_id: u64,
    create_latency: std::time::Duration,
    termination_delay: std::time::Duration,
    default_types: Vec<Arc<InstanceType>>,
    types_by_pool: BTreeMap<String, Vec<Arc<InstanceType>>>,
    /// `None`: AWS's.
    repair_policies: Option<Vec<RepairPolicy>>,
    /// What `is_drifted` reports, by NodeClaim name (absent: not drifted).
    drift: BTreeMap<String, DriftReason>,
}

impl State {
    fn call(&mut self, call: CloudCall) -> Result<(), CloudProviderError> {
        let result = self.failures.check(&call);
        self.calls.push(call);
        result
    }
}

/// An in-memory, recording [`CloudProvider`].
pub struct FakeCloudProvider {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

impl fmt::Debug for FakeCloudProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("FakeCloudProvider")
            .field("instances", &state.instances.len())
            .field("calls", &state.calls.len())
            .finish_non_exhaustive()
    }
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// The value a NodeClaim's `In` requirement pins for `key`, if it names exactly one.
fn pinned(nodeclaim: &NodeClaim, key: &str) -> Option<String> {
    nodeclaim
        .spec
        .requirements
        .iter()
        .map(karpenter_core::apis::requirements::NodeClaimRequirement::as_requirement)
        .find(|r| r.key == key && r.operator == Operator::In && r.values.len() == 1)
        .and_then(|r| r.values.first().cloned())
}

impl FakeCloudProvider {
    /// A fake whose instances are stamped with launch times from `clock`.
    #[must_use]
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            state: Mutex::default(),
        }
    }

    /// A fake on the system clock offering `types` to every NodePool (Provisioner tests,
    /// which do not look at launch times).
    #[must_use]
    pub fn with_instance_types(types: Vec<Arc<InstanceType>>) -> Self {
        let fake = Self::new(Arc::new(crate::ports::clock::SystemClock));
        fake.set_instance_types(types);
        fake
    }

    /// The instance types of every NodePool without its own list.
    pub fn set_instance_types(&self, types: Vec<Arc<InstanceType>>) {
        self.lock().default_types = types;
    }

    /// The instance types of one NodePool, instead of the default list.
    pub fn set_instance_types_for(&self, nodepool: &str, types: Vec<Arc<InstanceType>>) {
        self.lock().types_by_pool.insert(nodepool.to_owned(), types);
    }

    /// What `is_drifted` reports for the NodeClaim named `nodeclaim` from now on (`None`: not
    /// drifted).
    pub fn set_drift(&self, nodeclaim: &str, reason: Option<DriftReason>) {
        let mut state = self.lock();
        match reason {
            Some(reason) => state.drift.insert(nodeclaim.to_owned(), reason),
            None => state.drift.remove(nodeclaim),
        };
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The repair policies `repair_policies` returns from now on.
    pub fn set_repair_policies(&self, policies: Vec<RepairPolicy>) {
        self.lock().repair_policies = Some(policies);
    }

    /// The tags `tag_instance` was called with, in order.
    #[must_use]
    pub fn tagged(&self) -> Vec<Tags> {
        self.lock()
            .calls
            .iter()
            .filter_map(|c| match c {
                CloudCall::TagInstance { tags, .. } => Some(tags.clone()),
                _ => None,
            })
            .collect()
    }

    /// `create` takes this long (tokio time) before it answers.
    pub fn set_create_latency(&self, latency: std::time::Duration) {
        self.lock().create_latency = latency;
    }

    /// A terminating instance is gone this long after its first `delete` (zero: at the next
    /// `delete`).
    pub fn set_termination_delay(&self, delay: std::time::Duration) {
        self.lock().termination_delay = delay;
    }

    /// Every call so far, failed ones included, oldest first.
    #[must_use]
    pub fn calls(&self) -> Vec<CloudCall> {
        self.lock().calls.clone()
    }

    /// Calls of one operation.
    #[must_use]
    pub fn calls_of(&self, operation: CloudOperation) -> Vec<CloudCall> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.operation() == operation)
            .cloned()
            .collect()
    }

    /// The NodeClaims `create` was called with, in order.
    #[must_use]
    pub fn creates(&self) -> Vec<NodeClaim> {
        self.lock()
            .calls
            .iter()
            .filter_map(|c| match c {
                CloudCall::Create(nodeclaim) => Some((**nodeclaim).clone()),
                _ => None,
            })
            .collect()
    }

    /// Instances that exist (running or shutting down), by provider id.
    #[must_use]
    pub fn instances(&self) -> BTreeMap<String, FakeInstance> {
        self.lock().instances.clone()
    }

    /// Fails the next call of `operation` with `error`.
    pub fn fail_next(&self, operation: CloudOperation, error: CloudProviderError) {
        self.fail_times(operation, 1, error);
    }

    /// Fails the next `times` calls of `operation` with `error`.
    pub fn fail_times(&self, operation: CloudOperation, times: usize, error: CloudProviderError) {
        self.lock().failures.add(
            move |call: &CloudCall| call.operation() == operation,
            error,
            Some(times),
        );
    }

    /// Fails every call `predicate` accepts, until [`Self::clear_failures`].
    pub fn fail_when(
        &self,
        predicate: impl Fn(&CloudCall) -> bool + Send + Sync + 'static,
        error: CloudProviderError,
    ) {
        self.lock().failures.add(predicate, error, None);
    }

    pub fn clear_failures(&self) {
        self.lock().failures.clear();
    }

    /// Plants a running instance no NodeClaim knows about (a leak), launched at `launched`;
    /// returns its provider id.
    pub fn plant_instance(&self, nodepool: &str, launched: k8s_openapi::jiff::Timestamp) -> String {
        let mut state = self.lock();
        state.next_id += 1;
        let id = state.next_id;
        let template = NodeClaim::new(
            "",
            NodeClaimSpec {
                taints: Vec::new(),
                startup_taints: Vec::new(),
                requirements: SharedRequirements::default(),
                resources: karpenter_core::apis::nodeclaim::ResourceRequirements::default(),
                node_class_ref: NodeClassReference::ec2("default"),
                termination_grace_period: None,
                expire_after: karpenter_core::apis::nodeclaim::default_expire_after(),
            },
        );
        let mut instance = Self::instance(&template, id, launched);
        instance
            .metadata
            .labels
            .get_or_insert_default()
            .insert(labels::NODEPOOL.to_owned(), nodepool.to_owned());
        let provider_id = provider_id(id);
        state.instances.insert(
            provider_id.clone(),
            FakeInstance {
                nodeclaim: instance,
                state: FakeInstanceState::Running,
                tags: Tags::new(),
            },
        );
        provider_id
    }

    /// Makes an instance disappear at once (terminated outside Karpenter).
    pub fn vanish(&self, provider_id: &str) -> bool {
        self.lock().instances.remove(provider_id).is_some()
    }

    fn instance(
        nodeclaim: &NodeClaim,
        id: u64,
        launched: k8s_openapi::jiff::Timestamp,
    ) -> NodeClaim {
        let instance_type = pinned(nodeclaim, labels::INSTANCE_TYPE)
            .unwrap_or_else(|| FAKE_INSTANCE_TYPE.to_owned());
        let capacity_type = pinned(nodeclaim, labels::CAPACITY_TYPE)
            .unwrap_or_else(|| labels::CAPACITY_TYPE_ON_DEMAND.to_owned());
        let zone = pinned(nodeclaim, labels::ZONE).unwrap_or_else(|| FAKE_ZONE.to_owned());
        let mut node_labels: BTreeMap<String, String> = [
            (labels::INSTANCE_TYPE, instance_type),
            (labels::CAPACITY_TYPE, capacity_type),
            (labels::ZONE, zone.clone()),
            (labels::ARCH, labels::ARCH_AMD64.to_owned()),
            (labels::OS, labels::OS_LINUX.to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        if let Some(pool) = nodeclaim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL))
        {
            node_labels.insert(labels::NODEPOOL.to_owned(), pool.clone());
        }
        NodeClaim {
            metadata: ObjectMeta {
                name: nodeclaim.metadata.name.clone(),
                labels: Some(node_labels),
                creation_timestamp: Some(Time(launched)),
                ..ObjectMeta::default()
            },
            spec: nodeclaim.spec.clone(),
            status: Some(NodeClaimStatus {
                provider_id: Some(format!("aws:///{zone}/{}", instance_id(id))),
                image_id: Some(FAKE_IMAGE_ID.to_owned()),
                capacity: quantities(&[
                    ("cpu", "2"),
                    ("memory", "8Gi"),
                    ("pods", "29"),
                    ("ephemeral-storage", "20Gi"),
                ])
                .into(),
                allocatable: quantities(&[
                    ("cpu", "1930m"),
                    ("memory", "7Gi"),
                    ("pods", "29"),
                    ("ephemeral-storage", "18Gi"),
                ])
                .into(),
                ..NodeClaimStatus::default()
            }),
        }
    }
}

/// [`FAKE_INSTANCE_TYPE`] as an instance type offered on-demand and spot in [`FAKE_ZONE`]: the
/// type every unpinned fake instance runs, so a NodePool offering it does not see its
/// NodeClaims drift with `InstanceTypeNotFound`. Its capacity is the fake instances'.
#[must_use]
pub fn fake_instance_type() -> Arc<InstanceType> {
    use karpenter_core::domain::instance_type::{Offering, Overhead};
    use karpenter_core::domain::requirements::{Requirement, Requirements};
    use karpenter_core::domain::resources::Resources;
    const GI: i64 = 1 << 30;
    Arc::new(InstanceType::new(
        FAKE_INSTANCE_TYPE,
        Requirements::from_requirements([
            Requirement::in_values(labels::INSTANCE_TYPE, &[FAKE_INSTANCE_TYPE]),
            Requirement::in_values(labels::ARCH, &[labels::ARCH_AMD64]),
            Requirement::in_values(labels::OS, &[labels::OS_LINUX]),
            Requirement::in_values(labels::ZONE, &[FAKE_ZONE]),
            Requirement::in_values(
                labels::CAPACITY_TYPE,
                &[labels::CAPACITY_TYPE_ON_DEMAND, labels::CAPACITY_TYPE_SPOT],
            ),
        ]),
        vec![
            Offering::new(FAKE_ZONE, labels::CAPACITY_TYPE_ON_DEMAND, 0.096),
            Offering::new(FAKE_ZONE, labels::CAPACITY_TYPE_SPOT, 0.035),
        ],
        Resources::core(2000, 8 * GI, 29),
        Overhead {
            kube_reserved: Resources::core(70, GI, 0),
            ..Overhead::default()
        },
    ))
}

fn instance_id(id: u64) -> String {
    format!("i-{id:017x}")
}

fn provider_id(id: u64) -> String {
    format!("aws:///{FAKE_ZONE}/{}", instance_id(id))
}

fn not_found(provider_id: &str) -> CloudProviderError {
    CloudProviderError::NodeClaimNotFound {
        instance_id: provider_id
            .rsplit('/')
            .next()
            .unwrap_or(provider_id)
            .to_owned(),
    }
}

#[async_trait]
impl CloudProvider for FakeCloudProvider {
    async fn create(&self, nodeclaim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let latency = self.lock().create_latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let now = self.clock.now();
        let mut state = self.lock();
        state.call(CloudCall::Create(Box::new(nodeclaim.clone())))?;
        state.next_id += 1;
        let id = state.next_id;
        let created = Self::instance(nodeclaim, id, now);
        let key = created
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        state.instances.insert(
            key,
            FakeInstance {
                nodeclaim: created.clone(),
                state: FakeInstanceState::Running,
                tags: Tags::new(),
            },
        );
        Ok(created)
    }

    async fn delete(&self, nodeclaim: &NodeClaim) -> Result<(), CloudProviderError> {
        let provider_id = nodeclaim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        let now = self.clock.now();
        let mut state = self.lock();
        state.call(CloudCall::Delete {
            provider_id: provider_id.clone(),
        })?;
        let delay = k8s_openapi::jiff::SignedDuration::try_from(state.termination_delay)
            .unwrap_or(k8s_openapi::jiff::SignedDuration::MAX);
        match state.instances.get_mut(&provider_id).map(|i| &mut i.state) {
            Some(state @ FakeInstanceState::Running) => {
                *state = FakeInstanceState::ShuttingDown(now);
                Ok(())
            }
            Some(FakeInstanceState::ShuttingDown(since)) if now.duration_since(*since) < delay => {
                Ok(())
            }
            Some(FakeInstanceState::ShuttingDown(_)) => {
                state.instances.remove(&provider_id);
                Err(not_found(&provider_id))
            }
            None => Err(not_found(&provider_id)),
        }
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        let mut state = self.lock();
        state.call(CloudCall::Get {
            provider_id: provider_id.to_owned(),
        })?;
        state
            .instances
            .get(provider_id)
            .map(|i| i.nodeclaim.clone())
            .ok_or_else(|| not_found(provider_id))
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        let now = self.clock.now();
        let mut state = self.lock();
        state.call(CloudCall::List)?;
        Ok(state
            .instances
            .values()
            .map(|instance| {
                let mut listed = instance.nodeclaim.clone();
                if matches!(instance.state, FakeInstanceState::ShuttingDown(_)) {
                    // Karpenter marks shutting-down instances as deleting.
                    listed.metadata.deletion_timestamp = Some(Time(now));
                }
                listed
            })
            .collect())
    }

    async fn instance_types(
        &self,
        nodepool: &NodePool,
    ) -> Result<InstanceTypes, CloudProviderError> {
        let name = nodepool.metadata.name.clone().unwrap_or_default();
        let mut state = self.lock();
        state.call(CloudCall::InstanceTypes {
            nodepool: name.clone(),
        })?;
        Ok(Arc::new(
            state
                .types_by_pool
                .get(&name)
                .unwrap_or(&state.default_types)
                .clone(),
        ))
    }

    async fn is_drifted(
        &self,
        nodeclaim: &SlimNodeClaim,
    ) -> Result<Option<DriftReason>, CloudProviderError> {
        let name = nodeclaim.metadata.name.clone().unwrap_or_default();
        let mut state = self.lock();
        state.call(CloudCall::IsDrifted {
            nodeclaim: name.clone(),
        })?;
        Ok(state.drift.get(&name).copied())
    }

    async fn tag_instance(
        &self,
        nodeclaim: &SlimNodeClaim,
        tags: &Tags,
    ) -> Result<(), CloudProviderError> {
        let provider_id = karpenter_core::apis::nodeclaim::provider_id(nodeclaim)
            .unwrap_or_default()
            .to_owned();
        let mut state = self.lock();
        state.call(CloudCall::TagInstance {
            provider_id: provider_id.clone(),
            tags: tags.clone(),
        })?;
        let instance = state
            .instances
            .get_mut(&provider_id)
            .ok_or_else(|| not_found(&provider_id))?;
        instance.tags.extend(tags.clone());
        Ok(())
    }

    fn node_registered(&self, nodeclaim: &SlimNodeClaim, node: &SlimNode) {
        // A notification: recorded, never failed.
        self.lock().calls.push(CloudCall::NodeRegistered {
            nodeclaim: nodeclaim.metadata.name.clone().unwrap_or_default(),
            node: node.metadata.name.clone().unwrap_or_default(),
        });
    }

    fn repair_policies(&self) -> Cow<'static, [RepairPolicy]> {
        self.lock()
            .repair_policies
            .clone()
            .map_or(Cow::Borrowed(AWS_REPAIR_POLICIES), Cow::Owned)
    }

    fn name(&self) -> &'static str {
        "fake"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::clock::ManualClock;
    use k8s_openapi::jiff::Timestamp;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        let mut future = std::pin::pin!(future);
        match future.as_mut().poll(&mut context) {
            std::task::Poll::Ready(output) => output,
            std::task::Poll::Pending => panic!("the fake awaited"),
        }
    }

    fn nodeclaim() -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": { "name": "default-abc", "labels": { "karpenter.sh/nodepool": "default" } },
            "spec": {
                "requirements": [{ "key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.xlarge"] }],
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_launched_instance_is_listed_and_terminates_in_two_steps() {
        let fake = FakeCloudProvider::new(Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH)));
        let created = block_on(fake.create(&nodeclaim())).unwrap();
        let labels = created.metadata.labels.clone().unwrap();
        assert_eq!(labels[labels::INSTANCE_TYPE], "c5.xlarge");
        assert_eq!(labels[labels::NODEPOOL], "default");
        let provider_id = created.status.clone().unwrap().provider_id.unwrap();
        assert_eq!(block_on(fake.list()).unwrap().len(), 1);
        assert!(
            block_on(fake.delete(&created)).is_ok(),
            "termination starts"
        );
        assert!(matches!(
            block_on(fake.delete(&created)),
            Err(CloudProviderError::NodeClaimNotFound { .. })
        ));
        assert!(block_on(fake.get(&provider_id)).is_err());
        assert_eq!(fake.creates().len(), 1);
    }

    #[test]
    fn injected_failures_hit_the_chosen_operation_only() {
        let fake = FakeCloudProvider::new(Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH)));
        fake.fail_next(
            CloudOperation::Create,
            CloudProviderError::InsufficientCapacity {
                nodeclaim: "default-abc".into(),
                message: "no capacity".into(),
            },
        );
        assert!(block_on(fake.list()).unwrap().is_empty());
        assert!(block_on(fake.create(&nodeclaim())).is_err());
        assert!(block_on(fake.create(&nodeclaim())).is_ok());
        assert_eq!(fake.calls_of(CloudOperation::Create).len(), 2);
    }
}
