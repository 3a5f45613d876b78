//! [`MirroredClusterApi`]: the recording [`FakeClusterApi`] joined to a [`MemoryClusterView`],
//! for actor tests that need their own writes to come back through the store, as the watch
//! brings them back in production. Every write goes to the fake; afterwards the object it
//! touched is copied from the fake into the view (or removed from the view when the fake no
//! longer has it).

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;

use super::{Change, ClusterApi, ClusterError, ClusterEvent, Deletion, Eviction, FakeClusterApi};
use crate::apis::{
    EC2NodeClass, EC2NodeClassStatus, NodeClaim, NodeClaimStatus, NodePool, NodePoolStatus,
};
use crate::ports::cluster_view::MemoryClusterView;

/// A [`FakeClusterApi`] whose writes also land in a [`MemoryClusterView`].
#[derive(Debug, Clone)]
pub struct MirroredClusterApi {
    api: Arc<FakeClusterApi>,
    view: Arc<MemoryClusterView>,
}

impl MirroredClusterApi {
    #[must_use]
    pub fn new(api: Arc<FakeClusterApi>, view: Arc<MemoryClusterView>) -> Self {
        Self { api, view }
    }

    /// The fake behind it (seeding, call records, injected failures).
    #[must_use]
    pub fn api(&self) -> &Arc<FakeClusterApi> {
        &self.api
    }

    /// The store it mirrors into.
    #[must_use]
    pub fn view(&self) -> &Arc<MemoryClusterView> {
        &self.view
    }

    fn sync_nodeclaim(&self, name: &str) {
        match self.api.nodeclaim(name) {
            Some(object) => self.view.put_nodeclaim(object),
            None => self.view.remove_nodeclaim(name),
        }
    }

    fn sync_nodepool(&self, name: &str) {
        match self.api.nodepool(name) {
            Some(object) => self.view.put_nodepool(object),
            None => self.view.remove_nodepool(name),
        }
    }

    fn sync_ec2nodeclass(&self, name: &str) {
        match self.api.ec2nodeclass(name) {
            Some(object) => self.view.put_ec2nodeclass(object),
            None => self.view.remove_ec2nodeclass(name),
        }
    }

    fn sync_node(&self, name: &str) {
        match self.api.node(name) {
            Some(object) => self.view.put_node(object),
            None => self.view.remove_node(name),
        }
    }

    fn sync_pod(&self, namespace: &str, name: &str) {
        match self.api.pod(namespace, name) {
            Some(object) => self.view.put_pod(object),
            None => self.view.remove_pod(&format!("{namespace}/{name}")),
        }
    }
}

#[async_trait]
impl ClusterApi for MirroredClusterApi {
    async fn create_nodeclaim(&self, nodeclaim: &NodeClaim) -> Result<NodeClaim, ClusterError> {
        let created = self.api.create_nodeclaim(nodeclaim).await?;
        self.view.put_nodeclaim(created.clone());
        Ok(created)
    }

    async fn delete_nodeclaim(&self, name: &str) -> Result<Deletion, ClusterError> {
        let result = self.api.delete_nodeclaim(name).await;
        self.sync_nodeclaim(name);
        result
    }

    async fn update_nodeclaim(
        &self,
        name: &str,
        change: Change<'_, NodeClaim>,
    ) -> Result<NodeClaim, ClusterError> {
        let result = self.api.update_nodeclaim(name, change).await;
        self.sync_nodeclaim(name);
        result
    }

    async fn update_nodeclaim_status(
        &self,
        name: &str,
        change: Change<'_, NodeClaimStatus>,
    ) -> Result<NodeClaim, ClusterError> {
        let result = self.api.update_nodeclaim_status(name, change).await;
        self.sync_nodeclaim(name);
        result
    }

    async fn update_nodepool(
        &self,
        name: &str,
        change: Change<'_, NodePool>,
    ) -> Result<NodePool, ClusterError> {
        let result = self.api.update_nodepool(name, change).await;
        self.sync_nodepool(name);
        result
    }

    async fn update_nodepool_status(
        &self,
        name: &str,
        change: Change<'_, NodePoolStatus>,
    ) -> Result<NodePool, ClusterError> {
        let result = self.api.update_nodepool_status(name, change).await;
        self.sync_nodepool(name);
        result
    }

    async fn update_ec2nodeclass(
        &self,
        name: &str,
        change: Change<'_, EC2NodeClass>,
    ) -> Result<EC2NodeClass, ClusterError> {
        let result = self.api.update_ec2nodeclass(name, change).await;
        self.sync_ec2nodeclass(name);
        result
    }

    async fn update_ec2nodeclass_status(
        &self,
        name: &str,
        change: Change<'_, EC2NodeClassStatus>,
    ) -> Result<EC2NodeClass, ClusterError> {
        let result = self.api.update_ec2nodeclass_status(name, change).await;
        self.sync_ec2nodeclass(name);
        result
    }

    async fn update_node(
        &self,
        name: &str,
        change: Change<'_, Node>,
    ) -> Result<Node, ClusterError> {
        let result = self.api.update_node(name, change).await;
        self.sync_node(name);
        result
    }

    async fn delete_node(&self, name: &str) -> Result<Deletion, ClusterError> {
        let result = self.api.delete_node(name).await;
        self.sync_node(name);
        result
    }

    async fn evict_pod(&self, namespace: &str, name: &str) -> Result<Eviction, ClusterError> {
        let result = self.api.evict_pod(namespace, name).await;
        self.sync_pod(namespace, name);
        result
    }

    async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_period_seconds: Option<i64>,
    ) -> Result<Deletion, ClusterError> {
        let result = self
            .api
            .delete_pod(namespace, name, grace_period_seconds)
            .await;
        self.sync_pod(namespace, name);
        result
    }

    async fn publish_event(&self, event: &ClusterEvent) -> Result<(), ClusterError> {
        self.api.publish_event(event).await
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future as _;

    use super::*;
    use crate::ports::cluster_view::ClusterView;

    #[test]
    fn writes_land_in_the_view_and_removals_leave_it() {
        let api = Arc::new(FakeClusterApi::new());
        let view = Arc::new(MemoryClusterView::new());
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        api.seed_node(node);
        let mirrored = MirroredClusterApi::new(Arc::clone(&api), Arc::clone(&view));
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        let mut cordon = std::pin::pin!(mirrored.cordon_node("n1", true));
        assert!(cordon.as_mut().poll(&mut context).is_ready());
        let seen = view.node("n1").unwrap();
        assert_eq!(seen.spec.as_ref().unwrap().unschedulable, Some(true));
        let mut delete = std::pin::pin!(mirrored.delete_node("n1"));
        assert!(delete.as_mut().poll(&mut context).is_ready());
        assert!(view.node("n1").is_none());
    }
}
