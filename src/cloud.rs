//! The cloud provider a daemon runs with, and the periodic refresh of its AWS catalogue.
//!
//! Data flow: `karpenter run` builds [`AwsProviders`] over the SDK adapters
//! ([`CloudSource::Aws`]), `karpenter simulate` names kwok's EC2 and Pricing
//! ([`CloudSource::Loaded`]), and tests may hand in any provider ([`CloudSource::Ready`]). The
//! AWS cloud provider reads NodePools and `EC2NodeClass`es from the daemon's store, which exists
//! only once the watchers start, so [`CloudSource::build`] runs then (`crate::daemon` calls it).
//! For the AWS source it also starts the catalogue refresh: instance types, offerings and prices
//! are fetched at once (retried every [`CATALOGUE_RETRY`] until they load, reported by the
//! `aws-catalogue` readiness check), then every [`CATALOGUE_REFRESH`] as Karpenter does. The
//! loaded source fetches them once, before the build returns, and never again: a simulation is
//! shorter than the refresh period, and its first provisioning run must see every instance type.
//!
//! The ICE cache (`UnavailableOfferings`) is the providers' own; [`BuiltCloud::unavailable`]
//! hands the same instance to the daemon, so spot interruptions and launches mark the offerings
//! the instance types read.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

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
use tokio::task::JoinHandle;

use crate::http::HealthChecks;

/// How often the catalogue and prices are fetched again (Karpenter: 12 hours).
pub const CATALOGUE_REFRESH: Duration = Duration::from_hours(12);
/// How soon a failed refresh is tried again.
pub const CATALOGUE_RETRY: Duration = Duration::from_mins(1);
/// The readiness check that stays failing until the first refresh succeeds.
pub const CATALOGUE_CHECK: &str = "aws-catalogue";

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

/// Why the cloud provider could not be built (only a loaded source can fail).
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    #[error("building the AWS providers")]
    Providers(#[source] PricingError),
    #[error("loading the AWS catalogue")]
    Catalogue(#[source] RefreshError),
}

impl CloudError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Providers(error) => error.category(),
            Self::Catalogue(error) => error.category(),
        }
    }
}

/// The cloud provider, its ICE cache and the refresh task (AWS only).
#[derive(Debug)]
pub struct BuiltCloud {
    pub cloud: Arc<dyn CloudProvider>,
    pub unavailable: Arc<UnavailableOfferings>,
    pub refresh: Option<JoinHandle<()>>,
}

impl CloudSource {
    /// Builds the provider over the daemon's store; for AWS starts the refresh and adds its
    /// check to `readiness`, for a loaded source loads the catalogue first. Must run on a tokio
    /// runtime.
    pub async fn build(
        self,
        view: Arc<dyn ClusterView>,
        clock: Arc<dyn Clock>,
        readiness: &HealthChecks,
    ) -> Result<BuiltCloud, CloudError> {
        Ok(match self {
            CloudSource::Ready { cloud, unavailable } => BuiltCloud {
                cloud,
                unavailable,
                refresh: None,
            },
            CloudSource::Loaded {
                ec2,
                pricing,
                settings,
            } => {
                let providers =
                    AwsProviders::new(ec2, pricing, &settings).map_err(CloudError::Providers)?;
                providers.refresh().await.map_err(CloudError::Catalogue)?;
                let unavailable = Arc::clone(&providers.unavailable);
                BuiltCloud {
                    cloud: Arc::new(AwsCloudProvider::new(view, providers, clock, &settings)),
                    unavailable,
                    refresh: None,
                }
            }
            CloudSource::Aws {
                providers,
                settings,
            } => {
                let unavailable = Arc::clone(&providers.unavailable);
                let status: Arc<Mutex<Result<(), String>>> =
                    Arc::new(Mutex::new(Err("not loaded yet".to_owned())));
                let reader = Arc::clone(&status);
                readiness.add(CATALOGUE_CHECK, move || {
                    reader
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone()
                });
                let refresh = tokio::spawn(refresh_forever(providers.clone(), status));
                let cloud = AwsCloudProvider::new(view, providers, clock, &settings);
                BuiltCloud {
                    cloud: Arc::new(cloud),
                    unavailable,
                    refresh: Some(refresh),
                }
            }
        })
    }
}

/// Refreshes the catalogue now and then every [`CATALOGUE_REFRESH`]; a failure is retried
/// after [`CATALOGUE_RETRY`]. Only the first load gates readiness: a later failure keeps the
/// previous catalogue, as Karpenter does.
async fn refresh_forever(providers: AwsProviders, status: Arc<Mutex<Result<(), String>>>) {
    let mut loaded = false;
    loop {
        let wait = match providers.refresh().await {
            Ok(()) => {
                loaded = true;
                *status.lock().unwrap_or_else(PoisonError::into_inner) = Ok(());
                CATALOGUE_REFRESH
            }
            Err(error) => {
                tracing::error!(
                    error = karpenter_actors::logs::err(&error),
                    "failed refreshing the AWS catalogue"
                );
                if !loaded {
                    *status.lock().unwrap_or_else(PoisonError::into_inner) =
                        Err(format!("refreshing the AWS catalogue: {error}"));
                }
                CATALOGUE_RETRY
            }
        };
        tokio::time::sleep(wait).await;
    }
}
