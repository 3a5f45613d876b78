//! The brain of karpenter.
pub mod aws;
pub mod cloud_metrics;
pub mod cluster_index;
pub mod cluster_metrics;
pub mod daemon;
pub mod deps;
pub mod disruption;
pub mod garbage_collection;
pub mod interruption;
pub mod jitter;
pub mod kwok;
pub mod logs;
pub mod messages;
pub mod metrics;
pub mod nodeclaim;
pub mod nodeclass;
pub mod nodepool;
pub mod nominations;
pub mod ports;
pub mod providers;
pub mod provisioner;
pub mod retry;
pub mod runtime;
pub mod summary;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod version;
