//! The metadata the `NodeClassActor` keeps on a class and its NodeClaims (pure change
//! functions; the actor writes them through `ClusterApi`):
//!
//! - the `karpenter.k8s.aws/termination` finalizer, so deletion waits for the cleanup;
//! - the hash annotations (`karpenter.k8s.aws/ec2nodeclass-hash` and `-hash-version`) that drift
//!   detection compares (Karpenter's `nodeclass.hash` controller);
//! - on a hash-version change (an upgrade, or a switch from Karpenter, whose version is `v4`),
//!   the class's NodeClaims are re-stamped with the new version, and those not yet drifted with
//!   the new hash, so a new hash encoding never drifts a node by itself.

use karpenter_core::apis::conditions::nodeclaim::DRIFTED;
use karpenter_core::apis::labels::{
    AWS_GROUP, EC2NODECLASS_HASH, EC2NODECLASS_HASH_VERSION, EC2NODECLASS_TERMINATION_FINALIZER,
};
use karpenter_core::apis::{ClaimParts, EC2NodeClass, MetaFields, NodeClaim};
use karpenter_core::domain::nodeclass_hash::{HASH_VERSION, nodeclass_hash};

/// The kind NodeClaims name in `spec.nodeClassRef`.
pub const EC2NODECLASS_KIND: &str = "EC2NodeClass";

/// Whether the NodeClaim was launched from the named class.
#[must_use]
pub fn uses_class(nodeclaim: &impl ClaimParts, class_name: &str) -> bool {
    let reference = &nodeclaim.claim_spec().node_class_ref;
    reference.name == class_name
        && reference.group == AWS_GROUP
        && reference.kind == EC2NODECLASS_KIND
}

/// Whether the class carries the termination finalizer.
#[must_use]
pub fn has_finalizer(class: &EC2NodeClass) -> bool {
    class
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == EC2NODECLASS_TERMINATION_FINALIZER))
}

/// The class's hash-version annotation.
#[must_use]
pub fn hash_version(class: &EC2NodeClass) -> Option<&str> {
    class
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(EC2NODECLASS_HASH_VERSION))
        .map(String::as_str)
}

/// Whether the class's finalizer or hash annotations need writing.
#[must_use]
pub fn metadata_stale(class: &EC2NodeClass) -> bool {
    let hash = class
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(EC2NODECLASS_HASH));
    !has_finalizer(class)
        || hash_version(class) != Some(HASH_VERSION)
        || hash.map(String::as_str) != Some(nodeclass_hash(&class.spec).as_str())
}

/// Adds the finalizer and stamps the hash of the class's current spec (a change closure body).
pub fn stamp_class(class: &mut EC2NodeClass) {
    if !has_finalizer(class) {
        class
            .metadata
            .finalizers
            .get_or_insert_default()
            .push(EC2NODECLASS_TERMINATION_FINALIZER.to_owned());
    }
    let hash = nodeclass_hash(&class.spec);
    let annotations = class.metadata.annotations.get_or_insert_default();
    annotations.insert(EC2NODECLASS_HASH.to_owned(), hash);
    annotations.insert(
        EC2NODECLASS_HASH_VERSION.to_owned(),
        HASH_VERSION.to_owned(),
    );
}

/// Removes the finalizer (a change closure body).
pub fn remove_finalizer(class: &mut EC2NodeClass) {
    if let Some(finalizers) = &mut class.metadata.finalizers {
        finalizers.retain(|f| f != EC2NODECLASS_TERMINATION_FINALIZER);
    }
}

/// Whether the NodeClaim carries another hash version than ours.
#[must_use]
pub fn needs_restamp(nodeclaim: &impl ClaimParts) -> bool {
    nodeclaim.claim_meta().annotation(EC2NODECLASS_HASH_VERSION) != Some(HASH_VERSION)
}

/// Re-stamps a NodeClaim after a hash-version change (a change closure body): our version; our
/// `hash` too unless the NodeClaim already has a `Drifted` condition, which stays as it was
/// because the old hash cannot tell whether it still holds.
pub fn restamp(nodeclaim: &mut NodeClaim, hash: &str) {
    if !needs_restamp(nodeclaim) {
        return;
    }
    let drifted = nodeclaim
        .status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == DRIFTED));
    let annotations = nodeclaim.metadata.annotations.get_or_insert_default();
    annotations.insert(
        EC2NODECLASS_HASH_VERSION.to_owned(),
        HASH_VERSION.to_owned(),
    );
    if !drifted {
        annotations.insert(EC2NODECLASS_HASH.to_owned(), hash.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use karpenter_core::apis::conditions::{Condition, ConditionStatus};

    fn class() -> EC2NodeClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default", "annotations": {
                EC2NODECLASS_HASH: "123", EC2NODECLASS_HASH_VERSION: "v4"}},
            "spec": {
                "subnetSelectorTerms": [{"id": "subnet-1"}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "role": "r",
            },
        }))
        .unwrap()
    }

    fn nodeclaim(version: &str, drifted: bool) -> NodeClaim {
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "c", "annotations": {
                EC2NODECLASS_HASH: "123", EC2NODECLASS_HASH_VERSION: version}},
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": AWS_GROUP, "kind": EC2NODECLASS_KIND, "name": "default"},
            },
        }))
        .unwrap();
        if drifted {
            claim
                .status
                .get_or_insert_default()
                .conditions
                .push(Condition {
                    type_: DRIFTED.into(),
                    status: ConditionStatus::True,
                    observed_generation: None,
                    last_transition_time: Time(Timestamp::UNIX_EPOCH),
                    reason: "NodeClassDrift".into(),
                    message: String::new(),
                });
        }
        claim
    }

    #[test]
    fn stamping_adds_the_finalizer_and_our_hash_once() {
        let mut class = class();
        assert!(metadata_stale(&class));
        stamp_class(&mut class);
        assert!(!metadata_stale(&class));
        assert!(has_finalizer(&class));
        assert_eq!(hash_version(&class), Some(HASH_VERSION));
        stamp_class(&mut class);
        assert_eq!(class.metadata.finalizers.as_ref().unwrap().len(), 1);
        remove_finalizer(&mut class);
        assert!(!has_finalizer(&class));
    }

    #[test]
    fn a_karpenter_stamped_nodeclaim_takes_our_hash_unless_already_drifted() {
        let hash = nodeclass_hash(&class().spec);
        let mut fresh = nodeclaim("v4", false);
        assert!(uses_class(&fresh, "default"));
        restamp(&mut fresh, &hash);
        let annotations = fresh.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[EC2NODECLASS_HASH], hash);
        assert_eq!(annotations[EC2NODECLASS_HASH_VERSION], HASH_VERSION);

        let mut drifted = nodeclaim("v4", true);
        restamp(&mut drifted, &hash);
        let annotations = drifted.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[EC2NODECLASS_HASH], "123");
        assert_eq!(annotations[EC2NODECLASS_HASH_VERSION], HASH_VERSION);

        let mut current = nodeclaim(HASH_VERSION, false);
        restamp(&mut current, &hash);
        assert_eq!(
            current.metadata.annotations.unwrap()[EC2NODECLASS_HASH],
            "123"
        );
    }
}
