//! The AWS providers: plain async types over the narrow ports ([`crate::ports`]), used by the
//! cloud provider (`cloud_provider`) and the `NodeClassActor`. They hold the caches and the pure logic of Karpenter's providers
//! (reference 4.2-4.4): instance types and offerings, prices, the unavailable-offerings cache,
//! and launching through batched `CreateFleet` calls; and the `EC2NodeClass` resolution
//! providers the `NodeClassActor` uses: subnets, security groups, AMIs (with SSM parameters) and
//! instance profiles, each with Karpenter's cache TTLs; and the Kubernetes version read from EKS
//! (`version`, when `EKS_CONTROL_PLANE` is set).

pub mod ami_mapping;
pub mod amis;
pub mod batcher;
pub mod branch_interfaces;
pub mod cloud_provider;
pub mod instance_profiles;
pub mod instance_type_provider;
pub mod instance_types;
pub mod instances;
pub mod launch_subnets;
pub mod launch_templates;
pub mod pricing;
pub mod retry;
pub mod security_groups;
pub mod selector;
pub mod subnets;
pub mod ttl_cache;
pub mod unavailable;
pub mod validation;
pub mod version;
