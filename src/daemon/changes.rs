//! From watch events to the actors: each watched object becomes a [`ClusterChange`], queued in
//! arrival order on one channel, and the pump hands it to the actors once they run.
//!
//! ```text
//! ClusterIngress (watchers -> ClusterState) --Observed<K>--> ChangeForwarder (one queue, arrival
//!     order kept across kinds) --ClusterChange--> pump --> DaemonSlot --> Daemon::observe
//! ```
//!
//! [`ChangeFeed::subscribe`] must be called before the ingress runs; [`pump`] runs on the actix
//! arbiter of the actors (it calls `Daemon::observe`, which may start actors) and forwards
//! changes once [`DaemonSlot::start`] has started the actors. Changes it reads before that (a
//! standby replica watches to keep its cache warm) are dropped: starting the actors sends every
//! owner a `Relisted` for each kind, so they read the whole store anyway.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use karpenter_actors::daemon::{Daemon, StartOptions};
use karpenter_actors::deps::Deps;
use karpenter_actors::messages::{ClusterChange, WatchedKind, WatchedType};
use karpenter_actors::runtime::{ActorKit, GroupRef, GroupSpec, RootGroup, SpawnError};
use karpenter_core::apis::{EC2NodeClass, NodePool, SlimNodeClaim};
use karpenter_core::apis::{SlimNode, SlimPod};
use karpenter_core::domain::pods::{PodChange, is_pod_event, provisionable};
use kube::ResourceExt as _;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;

use crate::kube::ingress::{ChangeSink, ClusterIngress, Delivery, Observed, Watched};

/// Changes queued between the watchers and the pump. A re-list of a 10,000-pod cluster queues
/// one change per object before the pump runs; 64 Ki changes (about 3 MiB) absorb that, and an
/// overflow is counted and recovered by the `Relisted` that ends every re-list.
pub const CHANGE_QUEUE_CAPACITY: usize = 65_536;

/// Every kind the daemon watches, in the order owners are told about re-lists (the table's
/// order, `karpenter_actors::for_each_watched_kind!`).
pub const WATCHED_KINDS: [WatchedKind; WatchedKind::ALL.len()] = WatchedKind::ALL;

/// What a watch event did to the object a [`Routed::change`] is called on.
#[derive(Debug, Clone, Copy)]
pub enum Seen<'a, K> {
    /// Created or changed; `previous` is the version the store held before, if any.
    Applied { previous: Option<&'a K> },
    /// Deleted (the object is its last known state).
    Deleted,
}

impl<K> Seen<'_, K> {
    #[must_use]
    pub fn is_deleted(&self) -> bool {
        matches!(self, Self::Deleted)
    }
}

/// A watched kind the daemon routes: how a watch event becomes a [`ClusterChange`].
pub trait Routed: Watched + WatchedType {
    /// The change of an applied or deleted object.
    fn change(&self, seen: Seen<'_, Self>) -> ClusterChange;
}

impl Routed for SlimPod {
    /// `pending` (a provisioning trigger) is the Provisioner's own rule, [`provisionable`]: a
    /// pod the run would not place (bound, finished, being deleted, a DaemonSet's or a static
    /// pod, preempting, gated) triggers nothing. `pod_event` is Karpenter's `nodeclaim.podevents`
    /// filter, [`is_pod_event`], over the previous and the new version.
    fn change(&self, seen: Seen<'_, Self>) -> ClusterChange {
        let deleted = seen.is_deleted();
        let pod_change = match seen {
            Seen::Applied { previous: None } => PodChange::Created(self),
            Seen::Applied {
                previous: Some(old),
            } => PodChange::Updated { old, new: self },
            Seen::Deleted => PodChange::Deleted(self),
        };
        ClusterChange::Pod {
            namespace: self.namespace().unwrap_or_default(),
            name: self.name_any(),
            node_name: self
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref().map(str::to_owned)),
            pending: !deleted && provisionable(self).is_ok(),
            pod_event: is_pod_event(pod_change),
            deleted,
        }
    }
}

impl Routed for SlimNode {
    fn change(&self, seen: Seen<'_, Self>) -> ClusterChange {
        let deleted = seen.is_deleted();
        ClusterChange::Node {
            name: self.name_any(),
            provider_id: self.spec.as_ref().and_then(|s| s.provider_id.clone()),
            deleted,
        }
    }
}

impl Routed for SlimNodeClaim {
    fn change(&self, seen: Seen<'_, Self>) -> ClusterChange {
        let deleted = seen.is_deleted();
        ClusterChange::NodeClaim {
            name: self.name_any(),
            deleted,
        }
    }
}

impl Routed for NodePool {
    fn change(&self, seen: Seen<'_, Self>) -> ClusterChange {
        let deleted = seen.is_deleted();
        ClusterChange::NodePool {
            name: self.name_any(),
            deleted,
        }
    }
}

impl Routed for EC2NodeClass {
    fn change(&self, seen: Seen<'_, Self>) -> ClusterChange {
        let deleted = seen.is_deleted();
        ClusterChange::EC2NodeClass {
            name: self.name_any(),
            deleted,
        }
    }
}

impl Routed for DaemonSet {
    fn change(&self, _seen: Seen<'_, Self>) -> ClusterChange {
        ClusterChange::DaemonSet {
            namespace: self.namespace().unwrap_or_default(),
            name: self.name_any(),
        }
    }
}

impl Routed for PodDisruptionBudget {
    fn change(&self, _seen: Seen<'_, Self>) -> ClusterChange {
        ClusterChange::PodDisruptionBudget {
            namespace: self.namespace().unwrap_or_default(),
            name: self.name_any(),
        }
    }
}

impl Routed for VolumeAttachment {
    fn change(&self, seen: Seen<'_, Self>) -> ClusterChange {
        ClusterChange::VolumeAttachment {
            name: self.name_any(),
            node_name: Some(self.spec.node_name.clone()).filter(|n| !n.is_empty()),
            deleted: seen.is_deleted(),
        }
    }
}

impl Routed for PersistentVolumeClaim {
    fn change(&self, _seen: Seen<'_, Self>) -> ClusterChange {
        ClusterChange::PersistentVolumeClaim {
            namespace: self.namespace().unwrap_or_default(),
            name: self.name_any(),
        }
    }
}

impl Routed for Namespace {
    fn change(&self, _seen: Seen<'_, Self>) -> ClusterChange {
        ClusterChange::Namespace {
            name: self.name_any(),
        }
    }
}

/// The routing form of one watch event.
#[must_use]
pub fn change_of<K: Routed>(observed: &Observed<K>) -> ClusterChange {
    match observed {
        Observed::Applied { object, previous } => object.change(Seen::Applied {
            previous: previous.as_deref(),
        }),
        Observed::Deleted(object) => object.change(Seen::Deleted),
        Observed::Relisted => ClusterChange::Relisted(K::KIND),
    }
}

/// A [`ChangeSink`] for every kind: converts each event and queues it on one channel.
#[derive(Debug, Clone)]
pub struct ChangeForwarder {
    queue: mpsc::Sender<ClusterChange>,
    dropped: Arc<AtomicU64>,
}

impl<K: Routed> ChangeSink<K> for ChangeForwarder {
    fn deliver(&self, change: Observed<K>) -> Delivery {
        match self.queue.try_send(change_of(&change)) {
            Ok(()) => Delivery::Delivered,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                Delivery::Full
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Delivery::Closed,
        }
    }
}

/// The receiving end of the watchers' changes.
#[derive(Debug)]
pub struct ChangeFeed {
    queue: mpsc::Receiver<ClusterChange>,
    dropped: Arc<AtomicU64>,
}

impl ChangeFeed {
    /// Subscribes to every kind of `ingress` (call before [`ClusterIngress::run`]).
    pub fn subscribe(ingress: &mut ClusterIngress) -> Self {
        Self::with_capacity(ingress, CHANGE_QUEUE_CAPACITY)
    }

    /// As [`Self::subscribe`], with a queue of `capacity` changes.
    pub fn with_capacity(ingress: &mut ClusterIngress, capacity: usize) -> Self {
        let (queue, receiver) = mpsc::channel(capacity.max(1));
        let forwarder = ChangeForwarder {
            queue,
            dropped: Arc::default(),
        };
        let dropped = Arc::clone(&forwarder.dropped);
        macro_rules! subscribe_every_kind {
            ($(($type:ty, $field:ident, $kind:ident)),* $(,)?) => {
                $(ingress.subscribe::<$type>(forwarder.clone());)*
            };
        }
        karpenter_actors::for_each_watched_kind!(subscribe_every_kind);
        Self {
            queue: receiver,
            dropped,
        }
    }

    /// The next change; `None` when the ingress is gone.
    pub async fn next(&mut self) -> Option<ClusterChange> {
        self.queue.recv().await
    }

    /// Changes dropped because the queue was full.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The drop counter, to read after the feed moved into [`pump`].
    #[must_use]
    pub fn dropped_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.dropped)
    }
}

/// The daemon's actors once started: the root group and the [`Daemon`] routing table.
#[derive(Debug, Clone)]
pub struct StartedActors {
    pub root: RootGroup,
    pub daemon: Rc<Daemon>,
}

/// Where the pump finds the daemon; empty until the actors are started (after leader election).
/// Lives on the actix arbiter's thread (`Daemon` need not be `Send`).
#[derive(Debug, Clone, Default)]
pub struct DaemonSlot {
    started: Rc<RefCell<Option<StartedActors>>>,
}

/// The name of the root group of the daemon's actors.
pub const ROOT_GROUP: &str = "karpenter";

impl DaemonSlot {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts the root group and the actor families of [`Daemon::start_with`] (call on the actix
    /// arbiter; `options` leave some out or solve inline), their metrics registered in
    /// `registry`, then tells every owner to read the whole store. Starting twice returns the
    /// actors already running.
    pub fn start(
        &self,
        kit: &ActorKit,
        deps: Deps,
        registry: &mut Registry,
        options: StartOptions,
    ) -> Result<StartedActors, SpawnError> {
        if let Some(started) = self.get() {
            return Ok(started);
        }
        let root = kit.root(GroupSpec::one_for_one(ROOT_GROUP))?;
        let daemon = Rc::new(Daemon::start_with(
            GroupRef::clone(&root),
            deps,
            registry,
            options,
        )?);
        for kind in WATCHED_KINDS {
            daemon.observe(&ClusterChange::Relisted(kind));
        }
        let started = StartedActors { root, daemon };
        *self.started.borrow_mut() = Some(started.clone());
        Ok(started)
    }

    /// The started actors, if any.
    #[must_use]
    pub fn get(&self) -> Option<StartedActors> {
        self.started.borrow().clone()
    }

    /// Routes one change if the actors are running; false when it was dropped.
    #[must_use = "false means the change was dropped"]
    pub fn observe(&self, change: &ClusterChange) -> bool {
        let daemon = self.started.borrow().as_ref().map(|s| Rc::clone(&s.daemon));
        match daemon {
            Some(daemon) => {
                daemon.observe(change);
                true
            }
            None => false,
        }
    }

    /// Stops every actor (children in reverse start order) and empties the slot.
    pub async fn stop(&self) {
        let started = self.started.borrow_mut().take();
        if let Some(started) = started {
            started.root.stop().await;
        }
    }
}

/// Forwards the feed into the daemon until the ingress ends. Run it on the actix arbiter.
pub async fn pump(mut feed: ChangeFeed, slot: DaemonSlot) {
    while let Some(change) = feed.next().await {
        // Dropped before the actors start: they read the whole store when they do.
        let _ = slot.observe(&change);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // The view's slim types, under the names the literals below use.
    use karpenter_core::apis::{
        SharedPodSpec as PodSpec, SlimPod as Pod, SlimPodStatus as PodStatus,
    };

    fn pod(node: Option<&str>, phase: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web-1".into());
        pod.metadata.namespace = Some("default".into());
        pod.spec = Some(
            PodSpec {
                node_name: node.map(str::to_owned),
                ..PodSpec::default()
            }
            .into(),
        );
        pod.status = Some(PodStatus {
            phase: Some(phase.into()),
            ..PodStatus::default()
        });
        pod
    }

    /// A watch event of `object` replacing `previous`.
    fn applied<K>(object: K, previous: Option<K>) -> Observed<K> {
        Observed::Applied {
            object: Arc::new(object),
            previous: previous.map(Arc::new),
        }
    }

    fn is_pod_event(change: &ClusterChange) -> bool {
        matches!(
            change,
            ClusterChange::Pod {
                pod_event: true,
                ..
            }
        )
    }

    #[test]
    fn an_unbound_pod_is_pending_and_a_bound_or_finished_one_is_not() {
        let pending = change_of(&applied(pod(None, "Pending"), None));
        assert_eq!(
            pending,
            ClusterChange::Pod {
                namespace: "default".into(),
                name: "web-1".into(),
                node_name: None,
                pending: true,
                pod_event: false,
                deleted: false,
            }
        );
        let bound = change_of(&applied(pod(Some("n1"), "Running"), None));
        assert!(
            matches!(bound, ClusterChange::Pod { pending: false, node_name: Some(ref n), .. } if n == "n1")
        );
        let finished = change_of(&applied(pod(None, "Succeeded"), None));
        assert!(matches!(
            finished,
            ClusterChange::Pod { pending: false, .. }
        ));
        let mut nominated = pod(None, "Pending");
        if let Some(status) = nominated.status.as_mut() {
            status.nominated_node_name = Some("n2".into());
        }
        assert!(
            matches!(
                change_of(&applied(nominated, None)),
                ClusterChange::Pod { pending: false, .. }
            ),
            "kube-scheduler is preempting for it: the Provisioner would not place it"
        );
        let deleted = change_of(&Observed::Deleted(Arc::new(pod(None, "Pending"))));
        assert!(matches!(
            deleted,
            ClusterChange::Pod {
                pending: false,
                deleted: true,
                ..
            }
        ));
    }

    #[test]
    fn a_bind_is_a_pod_event_and_a_label_change_is_not() {
        let bind = change_of(&applied(
            pod(Some("n1"), "Running"),
            Some(pod(None, "Pending")),
        ));
        assert!(is_pod_event(&bind), "{bind:?}");
        let mut labelled = pod(Some("n1"), "Running");
        labelled.metadata.labels = Some([("tier".to_owned(), "web".to_owned())].into());
        let relabel = change_of(&applied(labelled, Some(pod(Some("n1"), "Running"))));
        assert!(
            matches!(relabel, ClusterChange::Pod { pod_event: false, node_name: Some(ref n), .. } if n == "n1"),
            "{relabel:?}"
        );
        let finished = change_of(&applied(
            pod(Some("n1"), "Succeeded"),
            Some(pod(Some("n1"), "Running")),
        ));
        assert!(is_pod_event(&finished), "{finished:?}");
    }

    #[test]
    fn a_bound_pod_first_seen_or_deleted_is_a_pod_event_and_a_pending_one_is_not() {
        assert!(
            is_pod_event(&change_of(&applied(pod(Some("n1"), "Running"), None))),
            "created bound, or listed at startup with nothing stored"
        );
        assert!(is_pod_event(&change_of(&Observed::Deleted(Arc::new(pod(
            Some("n1"),
            "Running"
        ))))));
        assert!(!is_pod_event(&change_of(&applied(
            pod(None, "Pending"),
            None
        ))));
        assert!(!is_pod_event(&change_of(&Observed::Deleted(Arc::new(
            pod(None, "Pending")
        )))));
    }

    #[test]
    fn a_relist_names_its_kind() {
        assert_eq!(
            change_of::<SlimNode>(&Observed::Relisted),
            ClusterChange::Relisted(WatchedKind::Node)
        );
        let mut node = SlimNode::default();
        node.metadata.name = Some("n1".into());
        node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            provider_id: Some("aws:///us-west-2a/i-1".into()),
            ..Default::default()
        });
        assert_eq!(
            change_of(&Observed::Deleted(Arc::new(node))),
            ClusterChange::Node {
                name: "n1".into(),
                provider_id: Some("aws:///us-west-2a/i-1".into()),
                deleted: true
            }
        );
    }
}
