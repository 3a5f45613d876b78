//! [`FakeCloudProvider`]: a small in-memory [`CloudProvider`] for actor tests. Instance types
//! are set per NodePool (or for all), launches hand out sequential provider ids, every call is
//! recorded, and the next calls of an operation can be made to fail.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use super::{AWS_REPAIR_POLICIES, CloudProvider, CloudProviderError, DriftReason, RepairPolicy};
use crate::apis::nodeclaim::{NodeClaim, NodeClaimStatus};
use crate::apis::nodepool::NodePool;
use crate::domain::instance_type::InstanceType;

/// The operations of the port, to record calls and target failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloudOperation {
    Create,
    Delete,
    Get,
    List,
    InstanceTypes,
    IsDrifted,
}

/// A call with the object it named (NodeClaim or NodePool name, or provider id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudCall {
    pub operation: CloudOperation,
    pub name: String,
}

#[derive(Debug, Default)]
struct State {
    default_types: Vec<Arc<InstanceType>>,
    types_by_pool: BTreeMap<String, Vec<Arc<InstanceType>>>,
    instances: BTreeMap<String, NodeClaim>,
    calls: Vec<CloudCall>,
    failures: HashMap<CloudOperation, Vec<CloudProviderError>>,
    launched: u64,
}

/// An in-memory, recording [`CloudProvider`].
#[derive(Debug, Default)]
pub struct FakeCloudProvider {
    state: Mutex<State>,
}

impl FakeCloudProvider {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A provider offering these instance types to every NodePool.
    #[must_use]
    pub fn with_instance_types(types: Vec<Arc<InstanceType>>) -> Self {
        let fake = Self::default();
        fake.set_instance_types(types);
        fake
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The instance types of every NodePool without its own list.
    pub fn set_instance_types(&self, types: Vec<Arc<InstanceType>>) {
        self.lock().default_types = types;
    }

    /// The instance types of one NodePool.
    pub fn set_instance_types_for(&self, nodepool: &str, types: Vec<Arc<InstanceType>>) {
        self.lock().types_by_pool.insert(nodepool.to_owned(), types);
    }

    /// Makes the next call of `operation` fail with `error` (queued after earlier ones).
    pub fn fail_next(&self, operation: CloudOperation, error: CloudProviderError) {
        self.lock()
            .failures
            .entry(operation)
            .or_default()
            .push(error);
    }

    /// Every call so far, in order.
    #[must_use]
    pub fn calls(&self) -> Vec<CloudCall> {
        self.lock().calls.clone()
    }

    /// The calls of one operation.
    #[must_use]
    pub fn calls_of(&self, operation: CloudOperation) -> Vec<CloudCall> {
        self.lock()
            .calls
            .iter()
            .filter(|c| c.operation == operation)
            .cloned()
            .collect()
    }

    fn call(&self, operation: CloudOperation, name: &str) -> Result<(), CloudProviderError> {
        let mut state = self.lock();
        state.calls.push(CloudCall {
            operation,
            name: name.to_owned(),
        });
        match state.failures.get_mut(&operation) {
            Some(queue) if !queue.is_empty() => Err(queue.remove(0)),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl CloudProvider for FakeCloudProvider {
    async fn create(&self, nodeclaim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let name = nodeclaim.metadata.name.clone().unwrap_or_default();
        self.call(CloudOperation::Create, &name)?;
        let mut state = self.lock();
        state.launched += 1;
        let provider_id = format!("fake:///fake-zone/i-{:08}", state.launched);
        let mut launched = nodeclaim.clone();
        let status = launched.status.get_or_insert_with(NodeClaimStatus::default);
        status.provider_id = Some(provider_id.clone());
        state.instances.insert(provider_id, launched.clone());
        Ok(launched)
    }

    async fn delete(&self, nodeclaim: &NodeClaim) -> Result<(), CloudProviderError> {
        let provider_id = nodeclaim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        self.call(CloudOperation::Delete, &provider_id)?;
        match self.lock().instances.remove(&provider_id) {
            Some(_) => Ok(()),
            None => Err(CloudProviderError::NodeClaimNotFound {
                instance_id: provider_id,
            }),
        }
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        self.call(CloudOperation::Get, provider_id)?;
        self.lock()
            .instances
            .get(provider_id)
            .cloned()
            .ok_or_else(|| CloudProviderError::NodeClaimNotFound {
                instance_id: provider_id.to_owned(),
            })
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        self.call(CloudOperation::List, "")?;
        Ok(self.lock().instances.values().cloned().collect())
    }

    async fn instance_types(
        &self,
        nodepool: &NodePool,
    ) -> Result<Vec<Arc<InstanceType>>, CloudProviderError> {
        let name = nodepool.metadata.name.clone().unwrap_or_default();
        self.call(CloudOperation::InstanceTypes, &name)?;
        let state = self.lock();
        Ok(state
            .types_by_pool
            .get(&name)
            .unwrap_or(&state.default_types)
            .clone())
    }

    async fn is_drifted(
        &self,
        nodeclaim: &NodeClaim,
    ) -> Result<Option<DriftReason>, CloudProviderError> {
        let name = nodeclaim.metadata.name.clone().unwrap_or_default();
        self.call(CloudOperation::IsDrifted, &name)?;
        Ok(None)
    }

    fn repair_policies(&self) -> &'static [RepairPolicy] {
        AWS_REPAIR_POLICIES
    }

    fn name(&self) -> &'static str {
        "fake"
    }
}
