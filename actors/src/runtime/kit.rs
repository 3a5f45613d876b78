//! [`ActorKit`]: what every actor of one daemon (or one test) shares: the registry, the
//! Prometheus families, the fault plan and the wall clock for start times. Built once at
//! startup and passed down; there is no global.

use std::sync::Arc;
use std::time::SystemTime;

use prometheus_client::registry::Registry;

use super::error::SpawnError;
use super::fault::FaultPlan;
use super::group::{GroupSpec, RootGroup};
use super::metrics::ActorMetrics;
use super::registry::{ActorRegistry, RegistrySnapshot};

/// Options of a kit; `Default` is production (no faults, system wall clock).
#[derive(Debug, Clone)]
pub struct KitOptions {
    /// Faults to inject (tests, `simulate --chaos`).
    pub faults: Option<Arc<FaultPlan>>,
    /// The wall clock for actors' start times in the registry.
    pub wall_clock: fn() -> SystemTime,
}

impl Default for KitOptions {
    fn default() -> Self {
        Self {
            faults: None,
            wall_clock: SystemTime::now,
        }
    }
}

pub(crate) struct KitInner {
    pub(crate) registry: Arc<ActorRegistry>,
    pub(crate) metrics: ActorMetrics,
    pub(crate) faults: Option<Arc<FaultPlan>>,
    pub(crate) wall_clock: fn() -> SystemTime,
}

/// The actor runtime of one daemon: start the root group here.
#[derive(Clone)]
pub struct ActorKit {
    inner: Arc<KitInner>,
}

impl std::fmt::Debug for ActorKit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorKit")
            .field("actors", &self.inner.registry.len())
            .field("faults", &self.inner.faults.is_some())
            .finish_non_exhaustive()
    }
}

impl ActorKit {
    /// A kit whose metric families are registered in `metrics`.
    pub fn new(metrics: &mut Registry, options: KitOptions) -> Self {
        let registry = Arc::new(ActorRegistry::default());
        Self {
            inner: Arc::new(KitInner {
                metrics: ActorMetrics::register(metrics, Arc::clone(&registry)),
                registry,
                faults: options.faults,
                wall_clock: options.wall_clock,
            }),
        }
    }

    /// Starts the root group on the current actix arbiter.
    pub fn root(&self, spec: GroupSpec) -> Result<RootGroup, SpawnError> {
        RootGroup::start(&self.inner, spec)
    }

    /// The live actors and groups.
    #[must_use]
    pub fn registry(&self) -> &ActorRegistry {
        &self.inner.registry
    }

    /// Every live actor and group now (for `/debug/actors` and `karpenter actors`).
    #[must_use]
    pub fn snapshot(&self) -> RegistrySnapshot {
        self.inner.registry.snapshot()
    }

    /// The fault plan, if any (to read its injection log).
    #[must_use]
    pub fn faults(&self) -> Option<&FaultPlan> {
        self.inner.faults.as_deref()
    }
}
