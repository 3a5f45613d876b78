//! kwok's [`crate::ports::cloud_provider::CloudProvider`]: the AWS cloud provider
//! ([`AwsCloudProvider`]) and its providers, unchanged, over kwok's EC2 (and optionally kwok's
//! Pricing API). `karpenter simulate` and the suites build theirs with [`cloud_provider`]:
//!
//! ```text
//! let ec2 = Arc::new(KwokEc2::new(KwokEc2Config::new(region, cluster), deps)?);
//! let cloud = kwok::cloud_provider::cloud_provider(KwokCloudDeps {
//!     ec2, pricing: None, view, clock, settings: kwok::cloud_provider::settings(region, cluster),
//!     aws_group: root.group(GroupSpec::one_for_one("aws"))?,
//! }).await?;
//! // Deps { cloud: cloud.clone(), .. }
//! ```
//!
//! The providers' actors (batchers, ICE expiry, launch-template janitor) are started under
//! `aws_group`; the catalogue is loaded once, before the call returns.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use super::ec2::KwokEc2;
use super::pricing::KwokPricing;
use crate::aws::{AwsActorOptions, AwsActors};
use crate::ports::clock::Clock;
use crate::ports::cluster_view::ClusterView;
use crate::ports::ec2::Ec2Api;
use crate::ports::pricing::PricingApi;
use crate::providers::cloud_provider::{
    AwsCloudProvider, AwsProviderSettings, AwsProviders, RefreshError,
};
use crate::providers::pricing::PricingError;
use crate::runtime::{GroupRef, SpawnError};
use karpenter_core::domain::userdata::ClusterInfo;

pub use super::eks::{KWOK_CLUSTER_ENDPOINT, KWOK_SERVICE_CIDR};
/// The cluster DNS address inside [`KWOK_SERVICE_CIDR`] (`karpenter simulate` serves it as the
/// `kube-system/kube-dns` Service).
pub const KWOK_CLUSTER_DNS: Ipv4Addr = Ipv4Addr::new(10, 100, 0, 10);

/// What kwok's cloud provider is built from.
#[derive(Debug, Clone)]
pub struct KwokCloudDeps {
    pub ec2: Arc<KwokEc2>,
    /// kwok's Pricing API; `None` keeps the built-in on-demand table.
    pub pricing: Option<Arc<KwokPricing>>,
    pub view: Arc<dyn ClusterView>,
    pub clock: Arc<dyn Clock>,
    pub settings: AwsProviderSettings,
    /// Where the providers' actors run (a group of the caller's kit).
    pub aws_group: GroupRef,
}

/// kwok's cloud provider could not start.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KwokCloudError {
    #[error("building the AWS providers over kwok: {0}")]
    Pricing(#[from] PricingError),
    #[error("loading kwok's catalogue: {0}")]
    Refresh(#[from] RefreshError),
    #[error("starting the AWS actors over kwok: {0}")]
    Actors(#[from] SpawnError),
}

impl KwokCloudError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            KwokCloudError::Pricing(error) => error.category(),
            KwokCloudError::Refresh(error) => error.category(),
            KwokCloudError::Actors(error) => error.category(),
        }
    }
}

/// Provider settings for a kwok cluster: Karpenter's defaults and the cluster facts kwok's EKS
/// reports ([`super::eks::KwokEks::cluster`]), for tests that build a cloud provider without a
/// daemon. `karpenter simulate` does not use these facts: its daemon discovers them through
/// kwok's EKS and the `kube-dns` Service, as `karpenter run` does (`src/discovery.rs`).
#[must_use]
pub fn settings(region: &str, cluster_name: &str) -> AwsProviderSettings {
    AwsProviderSettings {
        cluster_name: cluster_name.to_owned(),
        region: region.to_owned(),
        vm_memory_overhead_percent: 0.075,
        reserved_enis: 0,
        isolated_vpc: false,
        reserved_capacity: false,
        cluster: ClusterInfo {
            name: cluster_name.to_owned(),
            endpoint: KWOK_CLUSTER_ENDPOINT.to_owned(),
            ca_bundle: None,
            dns_ips: vec![IpAddr::V4(KWOK_CLUSTER_DNS)],
            service_cidr: Some(KWOK_SERVICE_CIDR.to_owned()),
        },
    }
}

/// The AWS cloud provider over kwok, with its catalogue and prices loaded and its actors
/// started under `deps.aws_group` (inside the actix system of that group's kit).
pub async fn cloud_provider(deps: KwokCloudDeps) -> Result<Arc<AwsCloudProvider>, KwokCloudError> {
    let ec2: Arc<dyn Ec2Api> = deps.ec2;
    let pricing = deps.pricing.map(|p| p as Arc<dyn PricingApi>);
    let providers = AwsProviders::new(ec2, pricing, &deps.settings, Arc::clone(&deps.clock))?;
    AwsActors::start(&deps.aws_group, &providers, AwsActorOptions::default())?;
    providers.refresh().await?;
    Ok(Arc::new(AwsCloudProvider::new(
        deps.view,
        providers,
        deps.clock,
        &deps.settings,
    )))
}
