//! [`SlimNodeClaim`]: a `karpenter.sh/v1` NodeClaim as the daemon's view keeps it.
//!
//! A watched NodeClaim's labels (21 to 23 in the simulation: the pool's, the instance type's
//! and the zone's) and its annotations were `BTreeMap`s of their own, about 4 KB of every
//! NodeClaim, 20 MB of the daemon's heap at 5,000 nodes. Yet the NodeClaims of one pool,
//! instance type, zone and capacity type carry the same ones. A `SlimNodeClaim` keeps the spec
//! and the status as they are (their requirement and resource lists are already shared) and
//! its metadata as a [`SlimMeta`], whose label and annotation maps are interned
//! [`LabelMap`](super::LabelMap)s.
//!
//! ```text
//! watch (JSON NodeClaim) -> Lenient<NodeClaim> -> SlimNodeClaim (maps shared) -> the view
//!     -> NodeClaim actors, the Provisioner, disruption, NodePool counts, metrics, the simulation
//! SlimNodeClaim -> to_nodeclaim() -> NodeClaim: a write that starts from the kept object
//! NodeClaim (a write's answer, tests) -> From -> SlimNodeClaim
//! ```
//!
//! It reads as a NodeClaim does: the same field names, `metadata.labels.as_ref()?.get(key)`,
//! [`SlimNodeClaim::name_any`]; it serializes as the NodeClaim it stands for. [`ClaimParts`]
//! lets one body read either form, for code given both (a cloud provider's listing is of
//! `NodeClaim`s, the view's of `SlimNodeClaim`s).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
use super::slim_meta::{MetaFields, SlimMeta};

/// A NodeClaim with its label and annotation maps shared (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct SlimNodeClaim {
    pub metadata: SlimMeta,
    pub spec: NodeClaimSpec,
    pub status: Option<NodeClaimStatus>,
}

impl SlimNodeClaim {
    /// Its name (what `kube::ResourceExt::name_any` answers of a NodeClaim).
    #[must_use]
    pub fn name_any(&self) -> String {
        self.metadata.name.clone().unwrap_or_default()
    }

    /// The NodeClaim it stands for, its maps rebuilt: what a write starting from it sends.
    #[must_use]
    pub fn to_nodeclaim(&self) -> NodeClaim {
        self.clone().into()
    }
}

impl From<NodeClaim> for SlimNodeClaim {
    fn from(nodeclaim: NodeClaim) -> Self {
        Self {
            metadata: nodeclaim.metadata.into(),
            spec: nodeclaim.spec,
            status: nodeclaim.status,
        }
    }
}

impl From<&NodeClaim> for SlimNodeClaim {
    fn from(nodeclaim: &NodeClaim) -> Self {
        nodeclaim.clone().into()
    }
}

impl From<SlimNodeClaim> for NodeClaim {
    fn from(nodeclaim: SlimNodeClaim) -> Self {
        Self {
            metadata: nodeclaim.metadata.into(),
            spec: nodeclaim.spec,
            status: nodeclaim.status,
        }
    }
}

/// Read and written as the NodeClaim it stands for (`apiVersion` and `kind` included).
impl Serialize for SlimNodeClaim {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_nodeclaim().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SlimNodeClaim {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        NodeClaim::deserialize(deserializer).map(Self::from)
    }
}

/// The parts of a NodeClaim, read alike of a [`NodeClaim`] or a [`SlimNodeClaim`] (or an `Arc`
/// or a reference of either).
pub trait ClaimParts {
    type Meta: MetaFields;
    fn claim_meta(&self) -> &Self::Meta;
    fn claim_spec(&self) -> &NodeClaimSpec;
    fn claim_status(&self) -> Option<&NodeClaimStatus>;
}

/// The same field names on both forms, so one body reads either.
macro_rules! claim_parts {
    ($($claim:ty => $meta:ty),*) => {
        $(impl ClaimParts for $claim {
            type Meta = $meta;

            fn claim_meta(&self) -> &$meta {
                &self.metadata
            }

            fn claim_spec(&self) -> &NodeClaimSpec {
                &self.spec
            }

            fn claim_status(&self) -> Option<&NodeClaimStatus> {
                self.status.as_ref()
            }
        })*
    };
}

claim_parts!(
    NodeClaim => k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    SlimNodeClaim => SlimMeta
);

/// Read through.
macro_rules! claim_parts_through {
    ($($wrapper:ty),*) => {
        $(impl<T: ClaimParts + ?Sized> ClaimParts for $wrapper {
            type Meta = T::Meta;

            fn claim_meta(&self) -> &T::Meta {
                (**self).claim_meta()
            }

            fn claim_spec(&self) -> &NodeClaimSpec {
                (**self).claim_spec()
            }

            fn claim_status(&self) -> Option<&NodeClaimStatus> {
                (**self).claim_status()
            }
        })*
    };
}

claim_parts_through!(&T, Arc<T>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::labels;

    fn nodeclaim(name: &str, zone: &str) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": name,
                "uid": format!("uid-{name}"),
                "labels": {
                    labels::NODEPOOL: "default",
                    labels::INSTANCE_TYPE: "m5.large",
                    labels::ZONE: zone,
                },
                "annotations": {labels::NODEPOOL_HASH: "123"},
                "finalizers": ["karpenter.sh/termination"],
            },
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": labels::ZONE, "operator": "In", "values": [zone]}],
            },
            "status": {"providerID": "aws:///us-west-2a/i-0a", "nodeName": "ip-1"},
        }))
        .unwrap()
    }

    #[test]
    fn stands_for_the_nodeclaim_it_was_made_from() {
        let whole = nodeclaim("default-a", "us-west-2a");
        let slim = SlimNodeClaim::from(&whole);
        assert_eq!(slim.name_any(), "default-a");
        assert_eq!(slim.metadata.label(labels::ZONE), Some("us-west-2a"));
        assert_eq!(slim.metadata.annotation(labels::NODEPOOL_HASH), Some("123"));
        let json = |claim: &NodeClaim| serde_json::to_value(claim).unwrap();
        assert_eq!(json(&slim.to_nodeclaim()), json(&whole));
        assert_eq!(json(&NodeClaim::from(slim.clone())), json(&whole));
        assert_eq!(SlimNodeClaim::from(whole.clone()), slim);
    }

    #[test]
    fn nodeclaims_with_the_same_labels_share_them() {
        let (a, b, elsewhere) = (
            SlimNodeClaim::from(nodeclaim("default-a", "us-west-2a")),
            SlimNodeClaim::from(nodeclaim("default-b", "us-west-2a")),
            SlimNodeClaim::from(nodeclaim("default-c", "us-west-2b")),
        );
        let labels_of = |claim: &SlimNodeClaim| claim.metadata.labels.clone().unwrap();
        let annotations_of = |claim: &SlimNodeClaim| claim.metadata.annotations.clone().unwrap();
        assert!(labels_of(&a).shares_with(&labels_of(&b)));
        assert!(annotations_of(&a).shares_with(&annotations_of(&elsewhere)));
        assert!(!labels_of(&a).shares_with(&labels_of(&elsewhere)));
    }

    #[test]
    fn serializes_and_reads_as_a_nodeclaim() {
        let whole = nodeclaim("default-a", "us-west-2a");
        let json = serde_json::to_value(SlimNodeClaim::from(&whole)).unwrap();
        assert_eq!(json, serde_json::to_value(&whole).unwrap());
        assert_eq!(json["apiVersion"], "karpenter.sh/v1");
        assert_eq!(json["kind"], "NodeClaim");
        let back: SlimNodeClaim = serde_json::from_value(json).unwrap();
        assert_eq!(back, SlimNodeClaim::from(whole));
    }

    #[test]
    fn claim_parts_read_either_form_alike() {
        fn parts(claim: &impl ClaimParts) -> (Option<&str>, &str, Option<&str>) {
            (
                claim.claim_meta().label(labels::ZONE),
                claim.claim_spec().node_class_ref.name.as_str(),
                claim.claim_status().and_then(|s| s.node_name.as_deref()),
            )
        }
        let whole = nodeclaim("default-a", "us-west-2a");
        let slim = Arc::new(SlimNodeClaim::from(&whole));
        let expected = (Some("us-west-2a"), "default", Some("ip-1"));
        assert_eq!(parts(&whole), expected);
        assert_eq!(parts(&slim), expected);
        assert_eq!(parts(&&*slim), expected);
    }
}
