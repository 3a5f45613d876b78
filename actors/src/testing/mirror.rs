//! [`MirroredClusterApi`]: the recording [`FakeClusterApi`] joined to a [`MemoryClusterView`],
//! for actor tests that need their own writes to come back through the store, as the watch
//! brings them back in production. Every write goes to the fake; afterwards the object it
//! touched is put into the view (or removed from the view when the fake no longer has it), the
//! fake's own `Arc` rather than a copy, so each object is held once. Optionally each write
//! first sets the fake's clock from a [`Clock`], and every object that changed in the view is
//! reported as a [`ClusterChange`] to a hook, as the watchers report changes to
//! `Daemon::observe` in production (the lifecycle tests wire the hook to the daemon).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;

use super::{FakeClusterApi, MemoryClusterView};
use crate::messages::ClusterChange;
use crate::ports::clock::Clock;
use crate::ports::cluster::{Change, ClusterApi, ClusterError, ClusterEvent, Deletion, Eviction};
use crate::ports::cluster_view::ClusterView as _;
use karpenter_core::apis::{
    EC2NodeClass, EC2NodeClassStatus, NodeClaim, NodeClaimStatus, NodePool, NodePoolStatus,
    SlimNode, SlimPod,
};
use karpenter_core::domain::pods::{PodChange, is_pod_event};

type ChangeHook = Arc<dyn Fn(ClusterChange) + Send + Sync>;

/// A [`FakeClusterApi`] whose writes also land in a [`MemoryClusterView`].
#[derive(Clone)]
pub struct MirroredClusterApi {
    api: Arc<FakeClusterApi>,
    view: Arc<MemoryClusterView>,
    clock: Option<Arc<dyn Clock>>,
    on_change: Option<ChangeHook>,
}

impl fmt::Debug for MirroredClusterApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MirroredClusterApi")
            .field("api", &self.api)
            .field("view", &self.view)
            .field("clock", &self.clock.is_some())
            .field("on_change", &self.on_change.is_some())
            .finish()
    }
}

fn resource_version<K: kube::Resource>(object: Option<&K>) -> Option<String> {
    object.and_then(|o| o.meta().resource_version.clone())
}

impl MirroredClusterApi {
    #[must_use]
    pub fn new(api: Arc<FakeClusterApi>, view: Arc<MemoryClusterView>) -> Self {
        Self {
            api,
            view,
            clock: None,
            on_change: None,
        }
    }

    /// Sets the fake's clock from `clock` before every write (timestamps such as
    /// `deletionTimestamp` then follow a paused test clock).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Reports every object whose mirrored copy changed.
    #[must_use]
    pub fn on_change(mut self, hook: impl Fn(ClusterChange) + Send + Sync + 'static) -> Self {
        self.on_change = Some(Arc::new(hook));
        self
    }

    fn before(&self) {
        if let Some(clock) = &self.clock {
            self.api.set_now(clock.now());
        }
    }

    fn notify(&self, change: ClusterChange) {
        if let Some(hook) = &self.on_change {
            hook(change);
        }
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

    /// Puts the NodeClaim of the fake into the view (or removes it), reporting a change.
    pub fn sync_nodeclaim(&self, name: &str) {
        let new = self.api.shared_nodeclaim(name);
        let seen = self.view.nodeclaim(name);
        if resource_version(new.as_deref())
            == seen.and_then(|claim| claim.metadata.resource_version.clone())
        {
            return;
        }
        let deleted = new.is_none();
        match new {
            Some(object) => self.view.put_nodeclaim(&object),
            None => self.view.remove_nodeclaim(name),
        }
        self.notify(ClusterChange::NodeClaim {
            name: name.to_owned(),
            deleted,
        });
    }

    /// Puts the NodePool of the fake into the view (or removes it), reporting a change.
    pub fn sync_nodepool(&self, name: &str) {
        let new = self.api.shared_nodepool(name);
        if resource_version(new.as_deref()) == resource_version(self.view.nodepool(name).as_deref())
        {
            return;
        }
        let deleted = new.is_none();
        match new {
            Some(object) => self.view.put_shared_nodepool(object),
            None => self.view.remove_nodepool(name),
        }
        self.notify(ClusterChange::NodePool {
            name: name.to_owned(),
            deleted,
        });
    }

    /// Puts the `EC2NodeClass` of the fake into the view (or removes it), reporting a change.
    pub fn sync_ec2nodeclass(&self, name: &str) {
        let new = self.api.shared_ec2nodeclass(name);
        if resource_version(new.as_deref())
            == resource_version(self.view.ec2nodeclass(name).as_deref())
        {
            return;
        }
        let deleted = new.is_none();
        match new {
            Some(object) => self.view.put_shared_ec2nodeclass(object),
            None => self.view.remove_ec2nodeclass(name),
        }
        self.notify(ClusterChange::EC2NodeClass {
            name: name.to_owned(),
            deleted,
        });
    }

    /// Puts the Node of the fake into the view (or removes it), reporting a change with its
    /// provider id (the old one when it went).
    pub fn sync_node(&self, name: &str) {
        let previous = self.view.node(name);
        let fake = self.api.shared_node(name);
        let versions = (
            fake.as_ref()
                .and_then(|n| n.metadata.resource_version.as_deref()),
            previous
                .as_ref()
                .and_then(|n| n.metadata.resource_version.as_deref()),
        );
        if versions.0 == versions.1 {
            return;
        }
        // Only a changed node is converted to the view's slim form.
        let new = fake.map(|node| Arc::new(SlimNode::from(&*node)));
        let provider_id = new
            .as_deref()
            .or(previous.as_deref())
            .and_then(|n| n.spec.as_ref())
            .and_then(|s| s.provider_id.clone());
        let deleted = new.is_none();
        match new {
            Some(object) => self.view.put_shared_node(object),
            None => self.view.remove_node(name),
        }
        self.notify(ClusterChange::Node {
            name: name.to_owned(),
            provider_id,
            deleted,
        });
    }

    /// Puts the pod of the fake into the view (or removes it), reporting a change with its
    /// node (the old one when it went).
    pub fn sync_pod(&self, namespace: &str, name: &str) {
        let previous = self.view.pod(namespace, name);
        let fake = self.api.shared_pod(namespace, name);
        let fake_version = fake
            .as_deref()
            .and_then(|p| p.metadata.resource_version.as_deref());
        let previous_version = previous
            .as_deref()
            .and_then(|p| p.metadata.resource_version.as_deref());
        if fake_version == previous_version && fake.is_some() == previous.is_some() {
            return;
        }
        // Only a changed pod is converted to the view's slim form.
        let new = fake.map(|pod| Arc::new(SlimPod::from(&*pod)));
        let node_name = new
            .as_deref()
            .or(previous.as_deref())
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.node_name.as_deref().map(str::to_owned));
        let deleted = new.is_none();
        let pod_event = match (previous.as_deref(), new.as_ref()) {
            (None, Some(new)) => is_pod_event(PodChange::Created(new)),
            (Some(old), Some(new)) => is_pod_event(PodChange::Updated { old, new }),
            (Some(old), None) => is_pod_event(PodChange::Deleted(old)),
            (None, None) => false,
        };
        match new {
            Some(object) => self.view.put_shared_pod(object),
            None => self.view.remove_pod(&format!("{namespace}/{name}")),
        }
        self.notify(ClusterChange::Pod {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            node_name,
            pending: false,
            pod_event,
            deleted,
        });
    }
}

#[async_trait]
impl ClusterApi for MirroredClusterApi {
    async fn create_nodeclaim(&self, nodeclaim: &NodeClaim) -> Result<NodeClaim, ClusterError> {
        self.before();
        let created = self.api.create_nodeclaim(nodeclaim).await?;
        self.sync_nodeclaim(created.metadata.name.as_deref().unwrap_or_default());
        Ok(created)
    }

    async fn delete_nodeclaim(&self, name: &str) -> Result<Deletion, ClusterError> {
        self.before();
        let result = self.api.delete_nodeclaim(name).await;
        self.sync_nodeclaim(name);
        result
    }

    async fn update_nodeclaim(
        &self,
        name: &str,
        change: Change<'_, NodeClaim>,
    ) -> Result<NodeClaim, ClusterError> {
        self.before();
        let result = self.api.update_nodeclaim(name, change).await;
        self.sync_nodeclaim(name);
        result
    }

    async fn update_nodeclaim_status(
        &self,
        name: &str,
        change: Change<'_, NodeClaimStatus>,
    ) -> Result<NodeClaim, ClusterError> {
        self.before();
        let result = self.api.update_nodeclaim_status(name, change).await;
        self.sync_nodeclaim(name);
        result
    }

    async fn update_nodepool(
        &self,
        name: &str,
        change: Change<'_, NodePool>,
    ) -> Result<NodePool, ClusterError> {
        self.before();
        let result = self.api.update_nodepool(name, change).await;
        self.sync_nodepool(name);
        result
    }

    async fn update_nodepool_status(
        &self,
        name: &str,
        change: Change<'_, NodePoolStatus>,
    ) -> Result<NodePool, ClusterError> {
        self.before();
        let result = self.api.update_nodepool_status(name, change).await;
        self.sync_nodepool(name);
        result
    }

    async fn update_ec2nodeclass(
        &self,
        name: &str,
        change: Change<'_, EC2NodeClass>,
    ) -> Result<EC2NodeClass, ClusterError> {
        self.before();
        let result = self.api.update_ec2nodeclass(name, change).await;
        self.sync_ec2nodeclass(name);
        result
    }

    async fn update_ec2nodeclass_status(
        &self,
        name: &str,
        change: Change<'_, EC2NodeClassStatus>,
    ) -> Result<EC2NodeClass, ClusterError> {
        self.before();
        let result = self.api.update_ec2nodeclass_status(name, change).await;
        self.sync_ec2nodeclass(name);
        result
    }

    async fn update_node(
        &self,
        name: &str,
        change: Change<'_, Node>,
    ) -> Result<Node, ClusterError> {
        self.before();
        let result = self.api.update_node(name, change).await;
        self.sync_node(name);
        result
    }

    async fn delete_node(&self, name: &str) -> Result<Deletion, ClusterError> {
        self.before();
        let result = self.api.delete_node(name).await;
        self.sync_node(name);
        result
    }

    async fn evict_pod(&self, namespace: &str, name: &str) -> Result<Eviction, ClusterError> {
        self.before();
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
        self.before();
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
