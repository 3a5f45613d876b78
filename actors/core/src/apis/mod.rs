//! The three CRDs karpenter serves and reads, with Karpenter's JSON names, defaults and schema:
//! `karpenter.sh/v1` [`NodePool`] and [`NodeClaim`], `karpenter.k8s.aws/v1` [`EC2NodeClass`].
//!
//! Types deserialize leniently where Karpenter's schema uses patterns (durations, budgets), so a
//! bad value reaches [`validation`], which reports every problem of a document with its field
//! path. [`crd`] generates the CustomResourceDefinitions from these types; the OpenAPI schema it
//! emits carries the same patterns, enums, bounds and CEL rules so a real API server enforces
//! what [`validation`] checks.
//!
//! [`pod`] and [`node`] are not CRDs: [`SlimPod`] and [`SlimNode`] are the built-in `v1` Pod and
//! Node as the daemon watches and keeps them, with only the fields it reads.

/// Implements `k8s_openapi::Resource` and `Metadata` for a slim form of a built-in kind: it is
/// served, listed and watched as `$kind` (its `metadata` is an `ObjectMeta`).
macro_rules! served_as {
    ($slim:ty, $kind:ty) => {
        impl k8s_openapi::Resource for $slim {
            const API_VERSION: &'static str = <$kind as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$kind as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$kind as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$kind as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str =
                <$kind as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <$kind as k8s_openapi::Resource>::Scope;
        }

        impl k8s_openapi::Metadata for $slim {
            type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }
    };
}

pub mod condition_set;
pub mod conditions;
pub mod crd;
pub mod duration;
pub mod ec2nodeclass;
pub mod label_map;
pub mod labels;
pub mod node;
pub mod nodeclaim;
pub mod nodepool;
pub mod pod;
pub mod pod_meta;
pub mod requirements;
pub mod schema;
pub mod shared;
pub mod slim_meta;
pub mod slim_nodeclaim;
pub mod taints;
pub mod validation;

pub use ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus};
pub use label_map::LabelMap;
pub use node::{SlimNode, SlimNodeStatus, WireNode};
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus, NodeClassReference};
pub use nodepool::{NodePool, NodePoolSpec, NodePoolStatus};
pub use pod::{
    PodConditionType, SharedPodSpec, SlimContainer, SlimPod, SlimPodCondition, SlimPodSpec,
    SlimPodStatus, SlimVolume,
};
pub use pod_meta::{PodMeta, SharedPodMeta, WirePod};
pub use slim_meta::{MetaFields, SlimMeta};
pub use slim_nodeclaim::{ClaimParts, SlimNodeClaim};
