//! [`KubeClusterApi`]: the [`ClusterApi`] port over kube-rs.
//!
//! Updates (at most [`WRITES_IN_FLIGHT`] at once) apply the caller's change to its own copy
//! (the `*_from` methods) or to the object read, and send a JSON merge patch of the difference
//! carrying that copy's `metadata.resourceVersion`, so the API server refuses it (409) when the
//! object changed meanwhile; then they read and try again, up to [`CONFLICT_ATTEMPTS`] times
//! (Karpenter uses client-go's `RetryOnConflict` the same way). Patching only the difference
//! leaves fields our types do not know untouched; the difference is computed part by part
//! ([`PatchParts`]), so an unchanged spec is never serialized.
//! Status changes go to the `status` subresource. Events go through [`EventRecorder`], which
//! turns repeats into an event series.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_actors::ports::clock::{Clock, SystemClock};
use karpenter_actors::ports::cluster::{
    Change, ClusterApi, ClusterError, ClusterEvent, Deletion, EventType, Eviction, FieldProblem,
    ObjectKind, name_of,
};
use karpenter_actors::retry::RetryPolicy;
use karpenter_core::apis::{
    EC2NodeClass, EC2NodeClassStatus, NodeClaim, NodeClaimStatus, NodePool, NodePoolStatus,
    SlimNode, SlimNodeClaim,
};
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::sync::{Semaphore, SemaphorePermit};

use super::events::{EventRecorder, Occurrence};

/// Field manager named in the patches this adapter sends.
pub const FIELD_MANAGER: &str = "karpenter";

/// Tries of a write that lost a race: client-go's `retry.DefaultRetry`, 5 tries 10 ms apart.
const CONFLICT_DELAY: Duration = Duration::from_millis(10);
const CONFLICT_ATTEMPTS: usize = 5;
/// Updates (a read and a patch each) in flight at most. Each holds the object read and the
/// patch; when 5,000 NodeClaims turn `Consolidatable` in the same second, unbounded, they all
/// were in flight at once, 33 MB of the 5,000-node run's peak. 64 at a time still outpace the
/// client's rate limit (`KUBE_CLIENT_QPS`, 200 a second) at any API server latency under 300 ms.
pub const WRITES_IN_FLIGHT: usize = 64;

/// The [`ClusterApi`] adapter over a kube client.
#[derive(Clone)]
pub struct KubeClusterApi {
    client: Client,
    events: EventRecorder,
    retry: RetryPolicy,
    /// Slots for updates in flight ([`WRITES_IN_FLIGHT`]), shared by the adapter's clones.
    writes: Arc<Semaphore>,
}

impl fmt::Debug for KubeClusterApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeClusterApi")
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// Makes the caller's copy of the object an update starts from: only once the update has a
/// slot, so a burst of writes waiting for one holds none (a NodeClaim's or Node's kept copy
/// shares its maps; the one written from is whole).
type Known<'a, K> = &'a (dyn Fn() -> K + Send + Sync);

/// What [`KubeClusterApi::update`] hands on once it has a slot.
struct Slotted<'a, K> {
    api: &'a Api<K>,
    kind: ObjectKind,
    name: &'a str,
    part: Part,
    known: Option<Known<'a, K>>,
    change: &'a (dyn Fn(&mut K) + Send + Sync),
}

/// Which part of an object an update writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Main,
    Status,
}

/// One try of an update.
enum Attempt<T> {
    Done(T),
    Lost,
}

impl KubeClusterApi {
    /// An adapter publishing events as `reporter` (controller `karpenter`, instance the pod
    /// name), stamped with the wall clock.
    #[must_use]
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            events: EventRecorder::new(client.clone(), reporter, Arc::new(SystemClock)),
            client,
            retry: RetryPolicy::constant(CONFLICT_DELAY, CONFLICT_ATTEMPTS),
            writes: Arc::new(Semaphore::new(WRITES_IN_FLIGHT)),
        }
    }

    /// The same adapter stamping events with `clock` (the daemon's: simulated time in a
    /// simulation).
    #[must_use]
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Self {
            events: self.events.with_clock(clock),
            ..self
        }
    }

    /// Applies `change` to `name` and patches the difference with the resourceVersion it was
    /// computed from; retries on conflict. The first attempt starts from `known` (the caller's
    /// copy, from the watch, made in the slot) when given, without a read: a change that
    /// leaves it as it is writes nothing and answers it, and a stale copy costs one conflict,
    /// after which (as without a copy) each attempt reads the object first.
    ///
    /// A burst of writes mostly waits for a slot: each waits in this small future, and the
    /// request's own (a few KB: the client's request, the retries; 16 MB of the 5,000-node
    /// run's peak when 5,000 launches waited in it) is made once the first slot is taken.
    async fn update<K>(
        &self,
        api: &Api<K>,
        kind: ObjectKind,
        name: &str,
        part: Part,
        known: Option<Known<'_, K>>,
        change: &(dyn Fn(&mut K) + Send + Sync),
    ) -> Result<K, ClusterError>
    where
        K: Resource + Clone + PatchParts + Serialize + DeserializeOwned + fmt::Debug,
    {
        // Never closed: `None` would only mean running without a slot.
        let first_slot = self.writes.acquire().await.ok();
        let slotted = Slotted {
            api,
            kind,
            name,
            part,
            known,
            change,
        };
        Box::pin(self.update_in_slot(slotted, first_slot)).await
    }

    /// [`Self::update`] once `first_slot` is taken: the first attempt runs in it, retries
    /// each take a slot of their own.
    async fn update_in_slot<K>(
        &self,
        update: Slotted<'_, K>,
        first_slot: Option<SemaphorePermit<'_>>,
    ) -> Result<K, ClusterError>
    where
        K: Resource + Clone + PatchParts + Serialize + DeserializeOwned + fmt::Debug,
    {
        let Slotted {
            api,
            kind,
            name,
            part,
            known,
            change,
        } = update;
        let first_slot = Mutex::new(first_slot);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let send = |patch: Value| {
            let params = &params;
            async move {
                let result = match part {
                    Part::Main => api.patch(name, params, &Patch::Merge(&patch)).await,
                    Part::Status => api.patch_status(name, params, &Patch::Merge(&patch)).await,
                };
                match result {
                    Ok(updated) => Ok(Attempt::Done(updated)),
                    Err(kube::Error::Api(status)) if status.reason == "Conflict" => {
                        Ok(Attempt::Lost)
                    }
                    Err(error) => Err(classify(kind, name, error)),
                }
            }
        };
        let from_known = AtomicBool::new(known.is_some());
        let attempt = || async {
            let handed = first_slot.lock().ok().and_then(|mut slot| slot.take());
            let _slot = match handed {
                Some(slot) => Some(slot),
                None => self.writes.acquire().await.ok(),
            };
            if let Some(known) = known.filter(|_| from_known.swap(false, Ordering::Relaxed)) {
                let known = known();
                let Some(patch) = change_patch(&known, change) else {
                    return Ok(Attempt::Done(known));
                };
                drop(known);
                match send(patch).await? {
                    // The copy was stale: read the object, at once.
                    Attempt::Lost => {}
                    done @ Attempt::Done(_) => return Ok(done),
                }
            }
            let current = api.get(name).await.map_err(|e| classify(kind, name, e))?;
            // Only the patch lives across the write's await: a burst of writes (every
            // NodeClaim of a 5,000-node cluster turning Consolidatable in the same second)
            // has them all in flight at once, and the object, its changed copy and their two
            // JSON trees kept alive for each came to a quarter of the 5,000-node run's peak.
            let Some(patch) = change_patch(&current, change) else {
                return Ok(Attempt::Done(current));
            };
            drop(current);
            send(patch).await
        };
        let attempts = u32::try_from(self.retry.max_attempts.max(1)).unwrap_or(u32::MAX);
        self.retry
            .run_when(
                || async {
                    match attempt().await? {
                        Attempt::Done(object) => Ok(object),
                        Attempt::Lost => Err(ClusterError::Conflict {
                            kind,
                            name: name.to_owned(),
                            attempts,
                        }),
                    }
                },
                |error: &ClusterError| matches!(error, ClusterError::Conflict { .. }),
            )
            .await
    }

    /// [`Self::update`] of the cluster-scoped object `name`, starting from the copy `known`
    /// makes.
    async fn update_from<K>(
        &self,
        kind: ObjectKind,
        part: Part,
        name: &str,
        known: Known<'_, K>,
        change: &(dyn Fn(&mut K) + Send + Sync),
    ) -> Result<K, ClusterError>
    where
        K: Resource<DynamicType = ()>
            + Clone
            + PatchParts
            + Serialize
            + DeserializeOwned
            + fmt::Debug,
    {
        let api = Api::all(self.client.clone());
        self.update(&api, kind, name, part, Some(known), change)
            .await
    }

    async fn delete<K>(
        &self,
        api: &Api<K>,
        kind: ObjectKind,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Deletion, ClusterError>
    where
        K: Resource + Clone + DeserializeOwned + fmt::Debug,
    {
        match api.delete(name, params).await {
            // kube-apiserver answers the object itself both while finalizers or a grace period
            // hold it and, for kinds such as pods, once it is gone; only the former is pending.
            Ok(either) => Ok(match either {
                either::Either::Left(object) if still_held(object.meta()) => Deletion::Terminating,
                _ => Deletion::Deleted,
            }),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(Deletion::NotFound),
            Err(error) => Err(classify(kind, name, error)),
        }
    }
}

/// Whether a deleted object's answer says it is still stored: finalizers remain, or a grace
/// period runs (a pod deleted at once comes back with a zero grace period or none).
fn still_held(meta: &ObjectMeta) -> bool {
    meta.finalizers.as_ref().is_some_and(|f| !f.is_empty())
        || meta.deletion_grace_period_seconds.is_some_and(|g| g > 0)
}

/// The merge patch that makes `current` what `change` makes of it, carrying `current`'s
/// `resourceVersion` (so a write that raced another fails with a conflict and is tried again
/// on a fresh read); `None` when the change leaves it as it is.
fn change_patch<K>(current: &K, change: &(dyn Fn(&mut K) + Send + Sync)) -> Option<Value>
where
    K: Resource + Clone + PatchParts,
{
    let mut next = current.clone();
    change(&mut next);
    let mut patch = current.changed_parts(&next);
    if patch.is_empty() {
        return None;
    }
    let metadata = patch.entry("metadata").or_insert_with(|| json!({}));
    metadata["resourceVersion"] = json!(current.meta().resource_version);
    Some(Value::Object(patch))
}

/// The objects this adapter updates, patched part by part: the top-level parts (`metadata`,
/// `spec`, `status`) are compared as typed values first, and only a changed part is turned
/// into JSON and diffed. A status write thus never serializes a NodeClaim's spec (its
/// instance-type list is most of it), twice per write as a whole-object diff would.
trait PatchParts {
    /// The merge patch of each part that differs from `next`'s.
    fn changed_parts(&self, next: &Self) -> Map<String, Value>;
}

macro_rules! patch_parts {
    ($($type:ty),* $(,)?) => {$(
        impl PatchParts for $type {
            fn changed_parts(&self, next: &Self) -> Map<String, Value> {
                let mut patch = Map::new();
                part_patch(&mut patch, "metadata", &self.metadata, &next.metadata);
                part_patch(&mut patch, "spec", &self.spec, &next.spec);
                part_patch(&mut patch, "status", &self.status, &next.status);
                patch
            }
        }
    )*};
}

patch_parts!(NodeClaim, NodePool, EC2NodeClass, Node);

/// Adds to `patch` the merge patch of part `name` from `before` to `after`, if they differ as
/// JSON (a part that goes away is `null`).
fn part_patch<T: Serialize + PartialEq>(
    patch: &mut Map<String, Value>,
    name: &str,
    before: &T,
    after: &T,
) {
    if before == after {
        return;
    }
    let before = serde_json::to_value(before).unwrap_or(Value::Null);
    let after = serde_json::to_value(after).unwrap_or(Value::Null);
    if before != after {
        patch.insert(name.to_owned(), merge_diff(&before, &after));
    }
}

/// A JSON merge patch turning `old` into `new`: changed and added fields, removed ones as null.
#[must_use]
pub fn merge_diff(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(before), Value::Object(after)) => {
            let mut patch = Map::new();
            for (key, value) in after {
                match before.get(key) {
                    Some(previous) if previous == value => {}
                    Some(previous @ Value::Object(_)) if value.is_object() => {
                        patch.insert(key.clone(), merge_diff(previous, value));
                    }
                    _ => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in before.keys().filter(|k| !after.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

/// A kube error as the port's error.
fn classify(kind: ObjectKind, name: &str, error: kube::Error) -> ClusterError {
    let name = name.to_owned();
    match error {
        kube::Error::Api(status) => match (status.code, status.reason.as_str()) {
            (404, _) => ClusterError::NotFound { kind, name },
            (409, "AlreadyExists") => ClusterError::AlreadyExists { kind, name },
            (409, _) => ClusterError::Conflict {
                kind,
                name,
                attempts: 1,
            },
            (422, _) => ClusterError::Invalid {
                kind,
                name,
                fields: status
                    .details
                    .iter()
                    .flat_map(|d| d.causes.iter())
                    .map(|c| FieldProblem {
                        field: c.field.clone(),
                        message: c.message.clone(),
                    })
                    .collect(),
                message: status.message,
            },
            (429, _) => ClusterError::Throttled {
                kind,
                name,
                message: status.message,
            },
            (401 | 403, _) => ClusterError::Forbidden {
                kind,
                name,
                message: status.message,
            },
            (code, _) => ClusterError::Server {
                kind,
                name,
                code,
                message: status.message,
            },
        },
        other => ClusterError::Transport {
            kind,
            name,
            message: other.to_string(),
        },
    }
}

fn status_of<S: Default>(status: &mut Option<S>, change: &(dyn Fn(&mut S) + Send + Sync)) {
    change(status.get_or_insert_with(S::default));
}

#[async_trait]
impl ClusterApi for KubeClusterApi {
    async fn create_nodeclaim(&self, nodeclaim: &NodeClaim) -> Result<NodeClaim, ClusterError> {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        let name = nodeclaim
            .metadata
            .name
            .clone()
            .or_else(|| nodeclaim.metadata.generate_name.clone())
            .unwrap_or_default();
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        api.create(&params, nodeclaim)
            .await
            .map_err(|e| classify(ObjectKind::NodeClaim, &name, e))
    }

    async fn delete_nodeclaim(&self, name: &str) -> Result<Deletion, ClusterError> {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        self.delete(&api, ObjectKind::NodeClaim, name, &DeleteParams::default())
            .await
    }

    async fn update_nodeclaim(
        &self,
        name: &str,
        change: Change<'_, NodeClaim>,
    ) -> Result<NodeClaim, ClusterError> {
        let api = Api::all(self.client.clone());
        self.update(&api, ObjectKind::NodeClaim, name, Part::Main, None, change)
            .await
    }

    async fn update_nodeclaim_status(
        &self,
        name: &str,
        change: Change<'_, NodeClaimStatus>,
    ) -> Result<NodeClaim, ClusterError> {
        let api = Api::all(self.client.clone());
        let whole = |claim: &mut NodeClaim| status_of(&mut claim.status, change);
        self.update(
            &api,
            ObjectKind::NodeClaim,
            name,
            Part::Status,
            None,
            &whole,
        )
        .await
    }

    async fn update_nodeclaim_from(
        &self,
        known: &SlimNodeClaim,
        change: Change<'_, NodeClaim>,
    ) -> Result<NodeClaim, ClusterError> {
        let name = name_of(&known.metadata);
        let copy = || known.to_nodeclaim();
        self.update_from(ObjectKind::NodeClaim, Part::Main, name, &copy, change)
            .await
    }

    async fn update_nodeclaim_status_from(
        &self,
        known: &SlimNodeClaim,
        change: Change<'_, NodeClaimStatus>,
    ) -> Result<NodeClaim, ClusterError> {
        let name = name_of(&known.metadata);
        let copy = || known.to_nodeclaim();
        let whole = |claim: &mut NodeClaim| status_of(&mut claim.status, change);
        self.update_from(ObjectKind::NodeClaim, Part::Status, name, &copy, &whole)
            .await
    }

    async fn update_nodepool(
        &self,
        name: &str,
        change: Change<'_, NodePool>,
    ) -> Result<NodePool, ClusterError> {
        let api = Api::all(self.client.clone());
        self.update(&api, ObjectKind::NodePool, name, Part::Main, None, change)
            .await
    }

    async fn update_nodepool_status(
        &self,
        name: &str,
        change: Change<'_, NodePoolStatus>,
    ) -> Result<NodePool, ClusterError> {
        let api = Api::all(self.client.clone());
        let whole = |pool: &mut NodePool| status_of(&mut pool.status, change);
        self.update(&api, ObjectKind::NodePool, name, Part::Status, None, &whole)
            .await
    }

    async fn update_ec2nodeclass(
        &self,
        name: &str,
        change: Change<'_, EC2NodeClass>,
    ) -> Result<EC2NodeClass, ClusterError> {
        let api = Api::all(self.client.clone());
        self.update(
            &api,
            ObjectKind::EC2NodeClass,
            name,
            Part::Main,
            None,
            change,
        )
        .await
    }

    async fn update_ec2nodeclass_status(
        &self,
        name: &str,
        change: Change<'_, EC2NodeClassStatus>,
    ) -> Result<EC2NodeClass, ClusterError> {
        let api = Api::all(self.client.clone());
        let whole = |class: &mut EC2NodeClass| status_of(&mut class.status, change);
        self.update(
            &api,
            ObjectKind::EC2NodeClass,
            name,
            Part::Status,
            None,
            &whole,
        )
        .await
    }

    async fn update_node(
        &self,
        name: &str,
        change: Change<'_, Node>,
    ) -> Result<Node, ClusterError> {
        let api = Api::all(self.client.clone());
        self.update(&api, ObjectKind::Node, name, Part::Main, None, change)
            .await
    }

    async fn update_node_from(
        &self,
        known: &SlimNode,
        change: Change<'_, Node>,
    ) -> Result<Node, ClusterError> {
        // The patch is the change's difference, so what the slim copy lacks is never sent.
        let name = name_of(&known.metadata);
        let copy = || Node::from(known.clone());
        self.update_from(ObjectKind::Node, Part::Main, name, &copy, change)
            .await
    }

    async fn delete_node(&self, name: &str) -> Result<Deletion, ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        self.delete(&api, ObjectKind::Node, name, &DeleteParams::default())
            .await
    }

    async fn evict_pod(&self, namespace: &str, name: &str) -> Result<Eviction, ClusterError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match api.evict(name, &EvictParams::default()).await {
            Ok(_) => Ok(Eviction::Evicted),
            Err(kube::Error::Api(status)) if status.code == 429 => Ok(Eviction::Blocked {
                message: status
                    .details
                    .iter()
                    .flat_map(|d| d.causes.iter())
                    .map(|c| c.message.clone())
                    .next()
                    .unwrap_or(status.message),
            }),
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => Ok(Eviction::Gone),
            Err(error) => Err(classify(ObjectKind::Pod, name, error)),
        }
    }

    async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_period_seconds: Option<i64>,
    ) -> Result<Deletion, ClusterError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = DeleteParams {
            grace_period_seconds: grace_period_seconds.and_then(|g| u32::try_from(g).ok()),
            ..DeleteParams::default()
        };
        self.delete(&api, ObjectKind::Pod, name, &params).await
    }

    async fn publish_event(&self, event: &ClusterEvent) -> Result<(), ClusterError> {
        let occurrence = Occurrence {
            type_: match event.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            },
            reason: &event.reason,
            action: &event.action,
            note: event.note.as_deref(),
            regarding: &event.regarding,
            related: event.related.as_ref(),
        };
        let name = event.regarding.name.clone().unwrap_or_default();
        self.events
            .publish(&occurrence)
            .await
            .map_err(|e| classify(ObjectKind::Event, &name, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_merge_diff_holds_only_changes_and_nulls_for_removals() {
        let old = json!({ "metadata": { "name": "n", "labels": { "a": "1", "b": "2" } }, "spec": { "x": 1 } });
        let new = json!({ "metadata": { "name": "n", "labels": { "a": "1", "c": "3" } }, "spec": { "x": 1 } });
        assert_eq!(
            merge_diff(&old, &new),
            json!({ "metadata": { "labels": { "b": null, "c": "3" } } })
        );
    }

    #[test]
    fn a_change_patches_its_difference_under_the_read_version_and_no_change_patches_nothing() {
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
            "metadata": { "name": "n", "resourceVersion": "41", "labels": { "a": "1" } },
        }))
        .unwrap();
        let relabel = |n: &mut k8s_openapi::api::core::v1::Node| {
            n.metadata
                .labels
                .get_or_insert_default()
                .insert("b".into(), "2".into());
        };
        assert_eq!(
            change_patch(&node, &relabel),
            Some(json!({ "metadata": { "labels": { "b": "2" }, "resourceVersion": "41" } }))
        );
        let same = |n: &mut k8s_openapi::api::core::v1::Node| {
            n.metadata
                .labels
                .get_or_insert_default()
                .insert("a".into(), "1".into());
        };
        assert_eq!(change_patch(&node, &same), None);
    }

    #[test]
    fn a_status_change_patches_only_the_status_and_a_removed_part_is_null() {
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": { "name": "c", "resourceVersion": "7", "labels": { "a": "1" } },
            "spec": {
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d" },
                "requirements": [{ "key": "k", "operator": "In", "values": ["x", "y"] }],
            },
            "status": { "nodeName": "n1", "imageID": "ami-1" },
        }))
        .unwrap();
        let rename = |c: &mut NodeClaim| {
            c.status.get_or_insert_default().node_name = Some("n2".into());
        };
        assert_eq!(
            change_patch(&claim, &rename),
            Some(json!({ "metadata": { "resourceVersion": "7" }, "status": { "nodeName": "n2" } }))
        );
        let clear = |c: &mut NodeClaim| c.status = None;
        assert_eq!(
            change_patch(&claim, &clear),
            Some(json!({ "metadata": { "resourceVersion": "7" }, "status": null }))
        );
    }

    #[test]
    fn lists_are_replaced_whole() {
        let old = json!({ "spec": { "taints": [{ "key": "a" }] } });
        let new = json!({ "spec": { "taints": [{ "key": "a" }, { "key": "b" }] } });
        assert_eq!(
            merge_diff(&old, &new),
            json!({ "spec": { "taints": [{ "key": "a" }, { "key": "b" }] } })
        );
    }
}
