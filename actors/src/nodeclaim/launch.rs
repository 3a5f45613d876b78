//! Launching a NodeClaim's instance: the launch-result cache, the launch group that lets a
//! restarted daemon find what its predecessor launched, and what a launch writes back.
//!
//! [`LaunchCache`] also bounds the launches in flight at [`MAX_CONCURRENT_LAUNCHES`] (Karpenter's
//! NodeClaim lifecycle controller reconciles at most 1,000 NodeClaims at once): a scale-up of
//! 5,000 NodeClaims launches them in waves, batched as before, instead of holding 5,000
//! `CloudProvider::create` calls and their instance-type lists at once.
//!
//! [`LaunchCache`] remembers, per NodeClaim UID, a launch in flight and its outcome for one
//! minute (Karpenter's launch cache). It is shared by every NodeClaimActor incarnation (it lives
//! in the family's deps), so an actor that crashes between `CloudProvider::create` and writing
//! `Launched` finds the instance it launched instead of launching another. The garbage
//! collector reads it too, so an instance whose NodeClaim status is not written yet is never
//! taken for a leak.
//!
//! # Launches across restarts
//!
//! The cache dies with the process. A daemon killed after CreateFleet reached EC2 but before
//! the provider id was written leaves an instance that no NodeClaim names. Karpenter relaunches
//! and lets its garbage collector terminate the first instance 30 s after launch; we want one
//! instance per NodeClaim, so the restarted daemon *adopts* it instead. The ways to know which
//! instance belongs to which NodeClaim, and why we chose the [`launch_group`]:
//!
//! - A client token per NodeClaim: EC2 answers a repeated token with the first result, but
//!   only for the same request (after a restart the offerings, the ICE cache and the batch
//!   differ, and EC2 answers `IdempotentParameterMismatch`), a merged fleet has one token for
//!   all its NodeClaims, and moto ignores tokens. We keep tokens (see
//!   [`crate::providers::instances`]) for retries within a process, not for restarts.
//! - A `karpenter.sh/nodeclaim` tag at launch (Karpenter's tagging controller adds it only
//!   after registration): exact, but CreateFleet tags a whole fleet, so no two NodeClaims could
//!   share a fleet again; the batcher's merging of identical requests (one call for a hundred
//!   NodeClaims, as Karpenter does) would be gone.
//! - The launch recorded on the NodeClaim (an annotation written before CreateFleet): one more
//!   write per launch, and the batch a NodeClaim ends up in is only known inside the batcher,
//!   after the write.
//! - **The launch group**, our choice: a digest of what decides what a NodeClaim launches,
//!   except its resource requests (NodePool, class reference, requirements, taints and startup
//!   taints), tagged on the fleet with the class's hash
//!   ([`launch_group_tag`]). NodeClaims with the same group are interchangeable: any instance
//!   launched for one suits another whose requests fit it. Equal fleet requests carry equal
//!   tags, so merging is unchanged; the group is computed again from the NodeClaim's
//!   immutable spec after a restart, so nothing is written before the launch; and it is a plain
//!   tag filter, which moto and every EC2 answer.
//!
//! The flow: before launching, the cloud provider asks the instances provider for an
//! *orphan* of the NodeClaim's group (a running or pending instance with the group's tag that
//! no NodeClaim names and this process did not hand out); it takes one instead of launching.
//! The garbage collector spares an orphan while a NodeClaim of its group waits for a launch
//! (it will adopt it) and terminates it 30 s after launch otherwise, as Karpenter does.
//!
//! After a launch, [`apply_launch_metadata`] and [`apply_launch_status`] copy the cloud's answer
//! onto the NodeClaim (Karpenter's `PopulateNodeClaimDetails`): labels from the instance, then
//! from single-valued requirements, then the NodeClaim's own (later ones win; but a well-known
//! label the instance reports replaces one a lost launch left, see [`launch_labels`]); annotations;
//! provider id, image id, capacity and allocatable.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use crate::ports::cloud_provider::CloudProviderError;
use karpenter_core::apis::requirements::NodeClaimRequirement;
use karpenter_core::apis::{ClaimParts, MetaFields, NodeClaim, NodeClaimStatus};
use karpenter_core::domain::requirements::Requirements;

/// How long a launch outcome is remembered (Karpenter's launch cache TTL).
pub const LAUNCH_CACHE_TTL: Duration = Duration::from_mins(1);
/// Launches in flight at most (Karpenter's NodeClaim lifecycle controller's
/// `MaxConcurrentReconciles`).
pub const MAX_CONCURRENT_LAUNCHES: usize = 1_000;
/// Longest launch error message written to the `Launched` condition (Karpenter truncates at
/// 300 characters).
pub const MAX_LAUNCH_MESSAGE: usize = 300;

/// Where a NodeClaim's launch is.
#[derive(Debug, Clone)]
pub enum LaunchState {
    /// `CloudProvider::create` is running.
    InFlight,
    /// The instance, as the cloud described it.
    Launched(Arc<NodeClaim>),
    /// The instance was written to the NodeClaim's status (`Launched=True`); only its
    /// provider id is kept, for views that have not seen the write yet. A 5,000-NodeClaim
    /// scale-up kept 46 MB of launched NodeClaims for the TTL before.
    Recorded(String),
    /// The launch failed; the actor handles the error once.
    Failed(CloudProviderError),
}

#[derive(Debug)]
struct Entry {
    state: LaunchState,
    /// `None` while in flight: a running launch never expires.
    expires: Option<Instant>,
}

/// Launch outcomes by NodeClaim UID, kept for [`LAUNCH_CACHE_TTL`], and the launches' slots.
#[derive(Debug)]
pub struct LaunchCache {
    entries: Mutex<Entries>,
    slots: Semaphore,
}

impl Default for LaunchCache {
    fn default() -> Self {
        Self::with_limit(MAX_CONCURRENT_LAUNCHES)
    }
}

/// The entries, and the finished ones in the order they expire (the TTL is fixed, so that is
/// the order they finished): expiry pops from the front instead of scanning every entry on
/// every access.
#[derive(Debug, Default)]
struct Entries {
    by_uid: HashMap<String, Entry>,
    expiring: VecDeque<(Instant, String)>,
}

impl LaunchCache {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A cache that lets at most `limit` launches run at once (at least one).
    #[must_use]
    pub fn with_limit(limit: usize) -> Self {
        Self {
            entries: Mutex::default(),
            slots: Semaphore::new(limit.max(1)),
        }
    }

    /// Waits for one of the launch slots; the launch runs while the permit lives. `None` only
    /// if the slots were closed, which nothing does.
    pub async fn slot(&self) -> Option<SemaphorePermit<'_>> {
        self.slots.acquire().await.ok()
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        while let Some((at, _)) = entries.expiring.front()
            && *at <= now
        {
            let Some((at, uid)) = entries.expiring.pop_front() else {
                break;
            };
            // A later outcome for the same UID has its own, later place in the queue.
            if entries
                .by_uid
                .get(&uid)
                .is_some_and(|e| e.expires == Some(at))
            {
                entries.by_uid.remove(&uid);
            }
        }
        entries
    }

    /// The launch of this NodeClaim, if one is running or finished within the TTL.
    #[must_use]
    pub fn get(&self, uid: &str) -> Option<LaunchState> {
        self.lock().by_uid.get(uid).map(|entry| entry.state.clone())
    }

    /// Marks a launch as started; `false` if one is running or remembered already.
    pub fn begin(&self, uid: &str) -> bool {
        let mut entries = self.lock();
        if entries.by_uid.contains_key(uid) {
            return false;
        }
        entries.by_uid.insert(
            uid.to_owned(),
            Entry {
                state: LaunchState::InFlight,
                expires: None,
            },
        );
        true
    }

    /// Records a launch's outcome.
    pub fn finish(&self, uid: &str, outcome: Result<NodeClaim, CloudProviderError>) {
        let state = match outcome {
            Ok(created) => LaunchState::Launched(Arc::new(created)),
            Err(error) => LaunchState::Failed(error),
        };
        let expires = Instant::now() + LAUNCH_CACHE_TTL;
        let mut entries = self.lock();
        entries.expiring.push_back((expires, uid.to_owned()));
        entries.by_uid.insert(
            uid.to_owned(),
            Entry {
                state,
                expires: Some(expires),
            },
        );
    }

    /// The launch's outcome is written to the NodeClaim: drop the instance, keep its provider
    /// id until the entry expires.
    pub fn recorded(&self, uid: &str) {
        let mut entries = self.lock();
        if let Some(entry) = entries.by_uid.get_mut(uid)
            && let LaunchState::Launched(created) = &entry.state
        {
            let provider_id = created
                .status
                .as_ref()
                .and_then(|s| s.provider_id.clone())
                .unwrap_or_default();
            entry.state = LaunchState::Recorded(provider_id);
        }
    }

    /// Forgets a launch that ended without an outcome (its task died).
    pub fn abandon(&self, uid: &str) {
        let mut entries = self.lock();
        if matches!(
            entries.by_uid.get(uid).map(|e| &e.state),
            Some(LaunchState::InFlight)
        ) {
            entries.by_uid.remove(uid);
        }
    }

    /// Takes a failure out, so each is handled once.
    pub fn take_failure(&self, uid: &str) -> Option<CloudProviderError> {
        let mut entries = self.lock();
        match entries.by_uid.get(uid).map(|e| &e.state) {
            Some(LaunchState::Failed(_)) => match entries.by_uid.remove(uid) {
                Some(Entry {
                    state: LaunchState::Failed(error),
                    ..
                }) => Some(error),
                _ => None,
            },
            _ => None,
        }
    }

    /// Provider ids of instances launched within the TTL (their NodeClaims may not show them
    /// yet).
    #[must_use]
    pub fn launched_provider_ids(&self) -> HashSet<String> {
        self.lock()
            .by_uid
            .values()
            .filter_map(|entry| match &entry.state {
                LaunchState::Launched(created) => {
                    created.status.as_ref().and_then(|s| s.provider_id.clone())
                }
                LaunchState::Recorded(provider_id) if !provider_id.is_empty() => {
                    Some(provider_id.clone())
                }
                _ => None,
            })
            .collect()
    }
}

/// The EC2 tag that names an instance's launch group (see the module docs), and the annotation
/// carrying it on the NodeClaims `CloudProvider::list` reports.
pub const LAUNCH_GROUP: &str = "karpenter.k8s.aws/launch-group";

/// FNV-1a over `bytes`: stable across processes and Rust releases, unlike `DefaultHasher`.
fn fnv1a(bytes: &[u8], basis: u64) -> u64 {
    bytes.iter().fold(basis, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// 128 bits of digest as 32 hex characters (two FNV-1a passes with different bases).
fn digest(text: &str) -> String {
    format!(
        "{:016x}{:016x}",
        fnv1a(text.as_bytes(), 0xcbf2_9ce4_8422_2325),
        fnv1a(text.as_bytes(), 0x8422_2325_cbf2_9ce4)
    )
}

/// The NodeClaim's launch group: a digest of its NodePool, class reference, requirements,
/// taints and startup taints, in a canonical order: the spec (immutable) and the NodePool
/// label, so the group of a NodeClaim never changes. Left out: its resource requests (the
/// adopter checks that they fit); everything a launch writes; and its other labels and
/// annotations, which the NodePool actor may re-stamp (the template hash) and registration
/// writes onto the Node anyway.
#[must_use]
pub fn launch_group(nodeclaim: &impl ClaimParts) -> String {
    let nodepool = nodeclaim
        .claim_meta()
        .label(karpenter_core::apis::labels::NODEPOOL)
        .unwrap_or_default();
    let spec = nodeclaim.claim_spec();
    let class = &spec.node_class_ref;
    let mut requirements: Vec<String> = spec
        .requirements
        .iter()
        .map(|r| {
            let mut values = r.values.clone();
            values.sort();
            values.dedup();
            format!(
                "{}\u{1f}{}\u{1f}{}\u{1f}{:?}",
                r.key,
                r.operator.as_str(),
                values.join("\u{1e}"),
                r.min_values
            )
        })
        .collect();
    requirements.sort();
    let taints = |list: &[karpenter_core::apis::taints::Taint]| {
        let mut out: Vec<String> = list
            .iter()
            .map(|t| {
                format!(
                    "{}\u{1f}{}\u{1f}{}",
                    t.key,
                    t.value.as_deref().unwrap_or_default(),
                    t.effect.as_str()
                )
            })
            .collect();
        out.sort();
        out.join("\u{1d}")
    };
    let canonical = [
        nodepool.to_owned(),
        format!("{}/{}/{}", class.group, class.kind, class.name),
        requirements.join("\u{1d}"),
        taints(&spec.taints),
        taints(&spec.startup_taints),
    ]
    .join("\u{1c}");
    digest(&canonical)
}

/// The tag value of a launch of `group` from a class whose hash annotation is
/// `nodeclass_hash`: an instance launched before the class changed is not adopted (it would
/// carry the old class's settings under the new hash).
#[must_use]
pub fn launch_group_tag(group: &str, nodeclass_hash: Option<&str>) -> String {
    let class = digest(nodeclass_hash.unwrap_or_default());
    format!("{group}-{}", &class[..16])
}

/// The launch group of a tag value written by [`launch_group_tag`].
#[must_use]
pub fn group_of_tag(tag: &str) -> &str {
    tag.split_once('-').map_or(tag, |(group, _)| group)
}

/// A stable seed from a NodeClaim's name, for the labels of open requirements.
fn seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The labels a launch puts on the NodeClaim (see the module docs), with one exception to
/// Karpenter's order: a well-known label the instance reports wins over a NodeClaim label that
/// contradicts it. Template labels are requirements the instance satisfies, so such a label can
/// only be left by a launch whose process died between writing the labels and the provider id,
/// and it would describe an instance the NodeClaim does not have.
#[must_use]
pub fn launch_labels(nodeclaim: &NodeClaim, created: &NodeClaim) -> BTreeMap<String, String> {
    let instance_labels = created.metadata.labels.clone().unwrap_or_default();
    let mut labels = instance_labels.clone();
    let requirements: Vec<_> = nodeclaim
        .spec
        .requirements
        .iter()
        .map(NodeClaimRequirement::as_requirement)
        .collect();
    // Requirements were validated when the NodeClaim was admitted; one that does not parse
    // contributes no labels rather than blocking the launch.
    if let Ok(requirements) = Requirements::from_api(&requirements) {
        labels.extend(
            requirements.labels(seed(nodeclaim.metadata.name.as_deref().unwrap_or_default())),
        );
    }
    labels.extend(nodeclaim.metadata.labels.clone().unwrap_or_default());
    for (key, value) in instance_labels
        .into_iter()
        .filter(|(key, _)| karpenter_core::apis::labels::is_well_known(key))
    {
        labels.insert(key, value);
    }
    labels
}

/// Copies the launch's labels and annotations onto a NodeClaim (a metadata change).
pub fn apply_launch_metadata(nodeclaim: &mut NodeClaim, created: &NodeClaim) {
    let labels = launch_labels(nodeclaim, created);
    nodeclaim.metadata.labels = Some(labels);
    if let Some(annotations) = &created.metadata.annotations
        && !annotations.is_empty()
    {
        let current = nodeclaim.metadata.annotations.get_or_insert_default();
        for (key, value) in annotations {
            current.insert(key.clone(), value.clone());
        }
    }
}

/// Copies the instance's identity and resources into a NodeClaim's status.
pub fn apply_launch_status(status: &mut NodeClaimStatus, created: &NodeClaim) {
    if let Some(launched) = &created.status {
        status.provider_id.clone_from(&launched.provider_id);
        status.image_id.clone_from(&launched.image_id);
        status.capacity.clone_from(&launched.capacity);
        status.allocatable.clone_from(&launched.allocatable);
    }
}

/// The `Launched=Unknown` reason and message for a launch error (Karpenter: the create error's
/// condition reason, else `LaunchFailed` with the error truncated).
#[must_use]
pub fn launch_failure_condition(error: &CloudProviderError) -> (String, String) {
    match error {
        CloudProviderError::Create { reason, message } => (reason.clone(), truncate(message)),
        other => (
            karpenter_core::apis::conditions::nodeclaim::REASON_LAUNCH_FAILED.to_owned(),
            truncate(&other.to_string()),
        ),
    }
}

/// Karpenter's `truncateMessage`: the first 300 characters and `...`.
#[must_use]
pub fn truncate(message: &str) -> String {
    match message.char_indices().nth(MAX_LAUNCH_MESSAGE) {
        Some((cut, _)) => format!("{}...", &message[..cut]),
        None => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[expect(clippy::needless_pass_by_value, reason = "tests pass json! literals")]
    fn claim(labels: serde_json::Value, requirements: serde_json::Value) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": { "name": "default-abc", "labels": labels },
            "spec": {
                "requirements": requirements,
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            },
        }))
        .unwrap()
    }

    #[test]
    fn the_nodeclaims_labels_win_over_requirements_and_the_instances() {
        let nodeclaim = claim(
            serde_json::json!({ "team": "mine" }),
            serde_json::json!([
                { "key": "team", "operator": "In", "values": ["required"] },
                { "key": "example.com/tier", "operator": "In", "values": ["gold"] },
            ]),
        );
        let created = claim(
            serde_json::json!({ "team": "instance", "node.kubernetes.io/instance-type": "m5.large" }),
            serde_json::json!([]),
        );
        let labels = launch_labels(&nodeclaim, &created);
        assert_eq!(labels["team"], "mine");
        assert_eq!(labels["example.com/tier"], "gold");
        assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.large");
    }

    #[test]
    fn a_lost_launchs_instance_labels_give_way_to_the_instance_launched_instead() {
        let nodeclaim = claim(
            serde_json::json!({
                "team": "mine",
                "node.kubernetes.io/instance-type": "c5.large",
                "topology.kubernetes.io/zone": "us-west-2a",
            }),
            serde_json::json!([]),
        );
        let created = claim(
            serde_json::json!({
                "team": "mine",
                "node.kubernetes.io/instance-type": "m5.large",
                "topology.kubernetes.io/zone": "us-west-2b",
            }),
            serde_json::json!([]),
        );
        let labels = launch_labels(&nodeclaim, &created);
        assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.large");
        assert_eq!(labels["topology.kubernetes.io/zone"], "us-west-2b");
        assert_eq!(labels["team"], "mine");
    }

    #[tokio::test(start_paused = true)]
    async fn outcomes_expire_after_a_minute_but_running_launches_do_not() {
        let cache = LaunchCache::new();
        assert!(cache.begin("uid-1"));
        assert!(!cache.begin("uid-1"), "one launch at a time");
        tokio::time::advance(Duration::from_mins(5)).await;
        assert!(matches!(cache.get("uid-1"), Some(LaunchState::InFlight)));
        cache.finish(
            "uid-1",
            Ok(claim(serde_json::json!({}), serde_json::json!([]))),
        );
        assert!(matches!(cache.get("uid-1"), Some(LaunchState::Launched(_))));
        tokio::time::advance(LAUNCH_CACHE_TTL + Duration::from_secs(1)).await;
        assert!(cache.get("uid-1").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_recorded_launch_keeps_only_its_provider_id_until_it_expires() {
        let cache = LaunchCache::new();
        assert!(cache.begin("uid-1"));
        let mut created = claim(serde_json::json!({ "team": "mine" }), serde_json::json!([]));
        created.status = Some(NodeClaimStatus {
            provider_id: Some("aws:///us-west-2a/i-1".into()),
            ..NodeClaimStatus::default()
        });
        cache.finish("uid-1", Ok(created));
        cache.recorded("uid-1");
        assert!(
            matches!(cache.get("uid-1"), Some(LaunchState::Recorded(id)) if id == "aws:///us-west-2a/i-1")
        );
        assert!(!cache.begin("uid-1"), "still remembered: no second launch");
        assert_eq!(
            cache.launched_provider_ids(),
            HashSet::from(["aws:///us-west-2a/i-1".to_owned()])
        );
        tokio::time::advance(LAUNCH_CACHE_TTL + Duration::from_secs(1)).await;
        assert!(cache.get("uid-1").is_none());
        assert!(cache.launched_provider_ids().is_empty());
    }

    #[test]
    fn the_launch_group_ignores_order_requests_and_what_a_launch_writes() {
        let base = claim(
            serde_json::json!({ "karpenter.sh/nodepool": "default" }),
            serde_json::json!([
                { "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"] },
                { "key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"] },
            ]),
        );
        let mut reordered = claim(
            serde_json::json!({
                "karpenter.sh/nodepool": "default",
                "node.kubernetes.io/instance-type": "m5.large",
            }),
            serde_json::json!([
                { "key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"] },
                { "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"] },
            ]),
        );
        reordered
            .spec
            .resources
            .requests
            .insert("cpu".into(), Quantity("3".into()));
        assert_eq!(launch_group(&base), launch_group(&reordered));

        let other_pool = claim(
            serde_json::json!({ "karpenter.sh/nodepool": "batch" }),
            serde_json::json!([
                { "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"] },
                { "key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"] },
            ]),
        );
        assert_ne!(launch_group(&base), launch_group(&other_pool));
        let mut tainted = base.clone();
        tainted
            .spec
            .taints
            .push(karpenter_core::apis::taints::Taint {
                key: "dedicated".into(),
                value: Some("gpu".into()),
                effect: karpenter_core::apis::taints::TaintEffect::NoSchedule,
                time_added: None,
            });
        assert_ne!(launch_group(&base), launch_group(&tainted));

        let group = launch_group(&base);
        let tag = launch_group_tag(&group, Some("1111"));
        assert!(tag.len() <= 256 && tag.is_ascii(), "an EC2 tag value");
        assert_eq!(group_of_tag(&tag), group);
        assert_ne!(tag, launch_group_tag(&group, Some("2222")));
    }

    #[test]
    fn failures_are_taken_once() {
        let cache = LaunchCache::new();
        cache.finish(
            "uid-1",
            Err(CloudProviderError::NodeClassNotReady {
                nodeclass: "default".into(),
            }),
        );
        assert!(cache.take_failure("uid-1").is_some());
        assert!(cache.take_failure("uid-1").is_none());
        assert!(cache.begin("uid-1"), "a new launch may start");
    }

    #[test]
    fn long_launch_errors_are_truncated_like_karpenter() {
        let long = "x".repeat(400);
        let (reason, message) = launch_failure_condition(&CloudProviderError::Create {
            reason: "SubnetResolutionFailed".into(),
            message: long,
        });
        assert_eq!(reason, "SubnetResolutionFailed");
        assert_eq!(message.len(), 303);
    }
}
