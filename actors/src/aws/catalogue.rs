//! The AWS catalogue's refresh as an actor ([`CatalogueRefreshActor`]): instance types,
//! offerings and prices are fetched when it starts, then every [`CATALOGUE_REFRESH`] as Karpenter
//! does; a failed refresh is tried again after [`CATALOGUE_RETRY`]. Only the first load gates
//! readiness ([`CatalogueStatus`], the `aws-catalogue` check): a later failure keeps the previous
//! catalogue, as Karpenter does.
//!
//! It runs in the AWS group, which starts with the process (a standby replica keeps its
//! catalogue current and its readiness honest too). A panic during a refresh restarts it like any
//! actor; the fresh instance refreshes at once.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::providers::cloud_provider::AwsProviders;
use crate::runtime::{ActorCtx, ActorError, Handles, Mail, Supervised};

/// How often the catalogue and prices are fetched again (Karpenter: 12 hours).
pub const CATALOGUE_REFRESH: Duration = Duration::from_hours(12);
/// How soon a failed refresh is tried again.
pub const CATALOGUE_RETRY: Duration = Duration::from_mins(1);
/// The readiness check that stays failing until the first refresh succeeds.
pub const CATALOGUE_CHECK: &str = "aws-catalogue";

/// Whether the catalogue has loaded, shared with the readiness check.
#[derive(Debug, Clone)]
pub struct CatalogueStatus(Arc<Mutex<Result<(), String>>>);

impl Default for CatalogueStatus {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Err("not loaded yet".to_owned()))))
    }
}

impl CatalogueStatus {
    /// `Ok` once a refresh succeeded; before that, why not.
    pub fn get(&self) -> Result<(), String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, status: Result<(), String>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = status;
    }

    fn loaded(&self) -> bool {
        self.get().is_ok()
    }
}

/// What the refresh actor works on.
#[derive(Debug, Clone)]
pub struct CatalogueDeps {
    pub providers: AwsProviders,
    pub status: CatalogueStatus,
}

/// Refresh the catalogue now (the actor's own timer, or a request).
#[derive(Debug)]
pub struct Refresh;

impl Mail for Refresh {
    type Reply = ();
    const NAME: &'static str = "Refresh";
}

/// Keeps the AWS catalogue and prices current (see the module docs).
#[derive(Debug)]
pub struct CatalogueRefreshActor {
    deps: CatalogueDeps,
}

impl CatalogueRefreshActor {
    /// Its key in the AWS group.
    pub const KEY: &'static str = "aws-catalogue";
}

impl Supervised for CatalogueRefreshActor {
    const KIND: &'static str = "CatalogueRefreshActor";
    // Its own timer, and a refresh asked for now and then.
    const MAILBOX_CAPACITY: usize = 4;
    type Deps = CatalogueDeps;

    fn build(_key: &str, deps: &CatalogueDeps) -> Result<Self, ActorError> {
        Ok(Self { deps: deps.clone() })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.set_state("loading");
        // At once: the first refresh (and a restarted actor's) does not wait for a period.
        ctx.send_after(Duration::ZERO, Refresh);
        Ok(())
    }
}

impl Handles<Refresh> for CatalogueRefreshActor {
    async fn handle(&mut self, _: Refresh, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        match self.deps.providers.refresh().await {
            Ok(()) => {
                self.deps.status.set(Ok(()));
                ctx.set_state("loaded");
                ctx.send_after(CATALOGUE_REFRESH, Refresh);
                Ok(())
            }
            Err(error) => {
                tracing::warn!(%error, category = error.category(), "refreshing the AWS catalogue");
                if !self.deps.status.loaded() {
                    self.deps.status.set(Err(format!(
                        "refreshing the AWS catalogue: {}",
                        error.category()
                    )));
                }
                ctx.set_state("retrying");
                ctx.send_after(CATALOGUE_RETRY, Refresh);
                // Counted and shown as the actor's last error; the actor keeps running.
                Err(ActorError::from_error(error.category(), &error))
            }
        }
    }
}
