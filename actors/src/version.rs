//! `VersionActor`: keeps the cluster's Kubernetes version current (Karpenter's
//! `providers.version` controller, reference 2.2; `pkg/controllers/providers/version`).
//!
//! ```text
//! own timer (at start, then every VERSION_REFRESH) --RefreshVersion--> VersionActor
//!     --reads--> KubernetesVersionSource (`/version`, or EKS DescribeCluster with
//!                EKS_CONTROL_PLANE)
//!     --asks--> karpenter_core::domain::version::update (changed? supported?)
//!     changed and supported: ClusterVersion::set, "discovered kubernetes version",
//!                            OnVersionChange (the daemon nudges every NodeClassActor, whose
//!                            AMI aliases resolve per version)
//!     changed and unsupported: an error line, the version in use stays
//!     read failed: an error line, the version in use stays; the next tick reads again
//! ```
//!
//! The binary reads the version once at startup (and refuses to start on an unsupported one);
//! this actor follows control-plane upgrades afterwards. It runs under the daemon's root like
//! the other singletons, so only on the leading replica once the store synced: a standby keeps
//! the version it read at startup, and reads again when it leads. Karpenter retries a failed
//! read with controller-runtime's backoff; here the next tick is the retry, which is soon enough
//! for a value that changes with a control-plane upgrade. A rejected version is logged once per
//! distinct value, as Karpenter validates only a version that changed.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use karpenter_core::domain::version::{self, KubernetesVersion, VersionError, VersionUpdate};

use crate::deps::ClusterVersion;
use crate::ports::version::{KubernetesVersionSource, VersionSourceError};
use crate::runtime::{
    ActorCtx, ActorError, ControllerId, Handles, Mail, RestartPolicy, Supervised,
};

/// How often the version is read again (Karpenter's `RequeueAfter: 5 * time.Minute`).
pub const VERSION_REFRESH: Duration = Duration::from_mins(5);
/// The actor's key under the daemon's root.
pub const VERSION_KEY: &str = "version";

/// Called with the new version after the version in use changed (the daemon nudges its
/// `NodeClassActor`s).
pub type OnVersionChange = Arc<dyn Fn(KubernetesVersion) + Send + Sync>;

/// What the `VersionActor` works with.
#[derive(Clone)]
pub struct VersionDeps {
    pub source: Arc<dyn KubernetesVersionSource>,
    /// The version in use, shared with every actor that reads it.
    pub version: ClusterVersion,
    /// `KUBERNETES_MIN_VERSION`, when it parses: a floor above Karpenter's own.
    pub minimum: Option<KubernetesVersion>,
    pub on_change: OnVersionChange,
}

impl fmt::Debug for VersionDeps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VersionDeps")
            .field("source", &self.source)
            .field("version", &self.version)
            .field("minimum", &self.minimum)
            .finish_non_exhaustive()
    }
}

/// Read the version now (the actor's own timer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshVersion;

impl Mail for RefreshVersion {
    /// The version in use afterwards.
    type Reply = KubernetesVersion;
    const NAME: &'static str = "RefreshVersion";
}

/// A refresh that left the version in use as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionRefreshError {
    #[error("updating version")]
    Read(#[source] VersionSourceError),
    #[error("validating kubernetes version")]
    Unsupported(#[source] VersionError),
}

impl VersionRefreshError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Read(error) => error.category(),
            Self::Unsupported(error) => error.category(),
        }
    }
}

/// The singleton keeping [`ClusterVersion`] current (see the module docs).
#[derive(Debug)]
pub struct VersionActor {
    deps: VersionDeps,
    /// The last version refused, logged once.
    rejected: Option<KubernetesVersion>,
}

impl Supervised for VersionActor {
    const KIND: &'static str = "VersionActor";
    const CONTROLLER: ControllerId = ControllerId::singleton("providers.version");
    // Only its own timer writes to it.
    const MAILBOX_CAPACITY: usize = 4;
    const RESTART: RestartPolicy = RestartPolicy::Permanent;
    type Deps = VersionDeps;

    fn build(_key: &str, deps: &VersionDeps) -> Result<Self, ActorError> {
        Ok(Self {
            deps: deps.clone(),
            rejected: None,
        })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.set_state("reading");
        // At once: a replica may lead long after its startup read (Karpenter's singleton
        // reconciles when it starts too).
        ctx.send_after(Duration::ZERO, RefreshVersion);
        Ok(())
    }
}

impl Handles<RefreshVersion> for VersionActor {
    async fn handle(
        &mut self,
        _: RefreshVersion,
        ctx: &mut ActorCtx<Self>,
    ) -> Result<KubernetesVersion, ActorError> {
        ctx.send_after(VERSION_REFRESH, RefreshVersion);
        let outcome = self.refresh(ctx).await;
        let current = self.deps.version.get();
        match outcome {
            Ok(()) => Ok(current),
            Err(error) => {
                tracing::error!(error = crate::logs::err(&error), "Reconciler error");
                Err(ActorError::from_error(error.category(), &error))
            }
        }
    }
}

impl VersionActor {
    async fn refresh(&mut self, ctx: &ActorCtx<Self>) -> Result<(), VersionRefreshError> {
        let found = match self.deps.source.version().await {
            Ok(found) => found,
            Err(error) => {
                ctx.set_state("read-failed");
                return Err(VersionRefreshError::Read(error));
            }
        };
        match version::update(self.deps.version.get(), found, self.deps.minimum) {
            VersionUpdate::Unchanged => {
                self.rejected = None;
                ctx.set_state("current");
                Ok(())
            }
            VersionUpdate::Changed(verdict) => {
                self.rejected = None;
                ctx.set_state("current");
                let version = verdict.version();
                self.deps.version.set(version);
                tracing::info!(version = %version, "discovered kubernetes version");
                if let Some(warning) = verdict.warning() {
                    tracing::info!(version = %version, "{warning}");
                }
                (self.deps.on_change)(version);
                Ok(())
            }
            VersionUpdate::Rejected(error) => {
                ctx.set_state("unsupported");
                if self.rejected.replace(found) == Some(found) {
                    // Logged when first seen; the version in use stays as it is.
                    return Ok(());
                }
                Err(VersionRefreshError::Unsupported(error))
            }
        }
    }
}
