//! The brain of karpenter.
pub mod apis;
pub mod aws;
pub mod daemon;
pub mod domain;
pub mod garbage_collection;
pub mod interruption;
pub mod kwok;
pub mod metrics;
pub mod nodeclaim;
pub mod nodeclass;
pub mod nodepool;
pub mod ports;
pub mod provisioner;
pub mod runtime;
