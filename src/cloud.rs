//! The cloud provider a daemon runs with, and the AWS actors behind it.
//!
//! Data flow: `karpenter run` builds [`AwsProviders`] over the SDK adapters
//! ([`CloudSource::Aws`]), `karpenter simulate` names kwok's EC2 and Pricing
//! ([`CloudSource::Loaded`]), and tests may hand in any provider ([`CloudSource::Ready`]). The
//! AWS cloud provider reads NodePools and `EC2NodeClass`es from the daemon's store, which exists
//! only once the watchers start, so [`CloudSource::build`] runs then (`crate::daemon` calls it).
//!
//! For both AWS sources the build starts the AWS group ([`karpenter_actors::aws`]): a root of
//! its own in the daemon's kit, started at once whether or not this replica leads, with the
//! batchers, the ICE cache's expiry and the launch-template janitor. For the AWS source it also
//! runs the catalogue refresh actor: instance types, offerings and prices are fetched at once
//! (retried every [`CATALOGUE_RETRY`] until they load, reported by the `aws-catalogue`
//! readiness check), then every [`CATALOGUE_REFRESH`] as Karpenter does. The loaded source
//! fetches them once, before the build returns, and never again: a simulation is shorter than
//! the refresh period, and its first provisioning run must see every instance type.
//!
//! The ICE cache (`UnavailableOfferings`) is the providers' own; [`BuiltCloud::unavailable`]
//! hands the same instance to the daemon, so spot interruptions and launches mark the offerings
//! the instance types read.

use std::sync::Arc;

use karpenter_actors::aws::catalogue::CatalogueStatus;
use karpenter_actors::aws::{AWS_GROUP, AwsActorOptions, AwsActors};
use karpenter_actors::ports::clock::Clock;
use karpenter_actors::ports::cloud_provider::CloudProvider;
use karpenter_actors::ports::cluster_view::ClusterView;
use karpenter_actors::ports::ec2::Ec2Api;
use karpenter_actors::ports::pricing::PricingApi;
use karpenter_actors::providers::cloud_provider::{
    AwsCloudProvider, AwsProviderSettings, AwsProviders, RefreshError,
};
use karpenter_actors::providers::pricing::PricingError;
use karpenter_actors::providers::unavailable::UnavailableOfferings;
use karpenter_actors::runtime::{ActorKit, GroupSpec, RootGroup, SpawnError};

use crate::http::HealthChecks;

pub use karpenter_actors::aws::catalogue::{CATALOGUE_CHECK, CATALOGUE_REFRESH, CATALOGUE_RETRY};

/// Where the daemon's cloud provider comes from (see the module docs).
#[derive(Debug)]
pub enum CloudSource {
    /// A provider built elsewhere, with the ICE cache it writes.
    Ready {
        cloud: Arc<dyn CloudProvider>,
        unavailable: Arc<UnavailableOfferings>,
    },
    /// The AWS cloud provider over these providers, refreshed in the background.
    Aws {
        providers: AwsProviders,
        settings: AwsProviderSettings,
    },
    /// The AWS cloud provider over these APIs, its catalogue loaded once by the build and never
    /// refreshed (simulations).
    Loaded {
        ec2: Arc<dyn Ec2Api>,
        /// The Pricing API; `None` keeps the built-in on-demand table.
        pricing: Option<Arc<dyn PricingApi>>,
        settings: AwsProviderSettings,
    },
}

/// Why the cloud provider could not be built.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    #[error("building the AWS providers")]
    Providers(#[source] PricingError),
    #[error("loading the AWS catalogue")]
    Catalogue(#[source] RefreshError),
    #[error("starting the AWS actors")]
    Actors(#[source] SpawnError),
}

impl CloudError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Providers(error) => error.category(),
            Self::Catalogue(error) => error.category(),
            Self::Actors(error) => error.category(),
        }
    }
}

/// The cloud provider, its ICE cache and the AWS group its actors run in (AWS sources only).
#[derive(Debug)]
pub struct BuiltCloud {
    pub cloud: Arc<dyn CloudProvider>,
    pub unavailable: Arc<UnavailableOfferings>,
    /// The AWS group: its escalation ends the process as the actors' does; stop it last.
    pub aws: Option<RootGroup>,
}

/// Starts the AWS group as a root of `kit` and the actors of `providers` in it.
fn start_aws(
    kit: &ActorKit,
    providers: &AwsProviders,
    options: AwsActorOptions,
) -> Result<RootGroup, CloudError> {
    let root = kit
        .root(GroupSpec::one_for_one(AWS_GROUP))
        .map_err(CloudError::Actors)?;
    AwsActors::start(&root, providers, options).map_err(CloudError::Actors)?;
    Ok(root)
}

impl CloudSource {
    /// Builds the provider over the daemon's store and starts the AWS group in `kit` (inside
    /// its actix system); for AWS starts the refresh and adds its check to `readiness`, for a
    /// loaded source loads the catalogue first.
    pub async fn build(
        self,
        view: Arc<dyn ClusterView>,
        clock: Arc<dyn Clock>,
        readiness: &HealthChecks,
        kit: &ActorKit,
    ) -> Result<BuiltCloud, CloudError> {
        Ok(match self {
            CloudSource::Ready { cloud, unavailable } => BuiltCloud {
                cloud,
                unavailable,
                aws: None,
            },
            CloudSource::Loaded {
                ec2,
                pricing,
                settings,
            } => {
                let providers = AwsProviders::new(ec2, pricing, &settings, Arc::clone(&clock))
                    .map_err(CloudError::Providers)?;
                let aws = start_aws(kit, &providers, AwsActorOptions::default())?;
                providers.refresh().await.map_err(CloudError::Catalogue)?;
                let unavailable = Arc::clone(&providers.unavailable);
                BuiltCloud {
                    cloud: Arc::new(AwsCloudProvider::new(view, providers, clock, &settings)),
                    unavailable,
                    aws: Some(aws),
                }
            }
            CloudSource::Aws {
                providers,
                settings,
            } => {
                let unavailable = Arc::clone(&providers.unavailable);
                let status = CatalogueStatus::default();
                let reader = status.clone();
                readiness.add(CATALOGUE_CHECK, move || reader.get());
                let aws = start_aws(
                    kit,
                    &providers,
                    AwsActorOptions {
                        refresh: Some(status),
                    },
                )?;
                let cloud = AwsCloudProvider::new(view, providers, clock, &settings);
                BuiltCloud {
                    cloud: Arc::new(cloud),
                    unavailable,
                    aws: Some(aws),
                }
            }
        })
    }
}
