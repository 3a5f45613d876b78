//! A Kubernetes API server emulator faithful enough for kube-rs and kubectl: the cluster every
//! test of the kube adapters and the daemon runs against, and the one `karpenter simulate`
//! drives (the simulation harness around it, kubelet, scheduler and workloads, is `crate::sim`).
//!
//! [`Emulator`] is one HTTP service. In-process, [`Emulator::client`] hands kube-rs a
//! `kube::Client` over the [`EmulatorService`] (no sockets); on loopback, [`Emulator::serve`]
//! listens on a TCP port and [`LoopbackServer::write_kubeconfig`] lets kubectl or a separate
//! daemon connect. Both paths run the same request handling:
//!
//! ```text
//! request -> http (route, query, faults, log) -> api (verbs) -> store (objects, history)
//!                                              -> watch (history -> event stream)
//! ```
//!
//! Served: the core, apps, policy, storage, coordination and events kinds Karpenter touches,
//! our three CRDs (validated against their generated schema), discovery, `/version` and the
//! OpenAPI v3 documents kubectl reads. Semantics follow the real server where a client can tell:
//! uid, creationTimestamp, generation, a global monotonic resourceVersion, 409 on stale writes,
//! status subresource separation, finalizers and deletionTimestamp, label and field selectors,
//! pagination, watches with bookmarks and 410 Gone, PodDisruptionBudget-aware evictions, merge,
//! JSON, strategic merge patches and server-side apply (subsets documented in [`strategic`] and
//! [`apply`]).
//!
//! Bodies are JSON, or protobuf for the built-in kinds kubectl's `create` generators write
//! (`protobuf`, with the `emulator-protobuf` feature, turns them into JSON first); answers are
//! JSON (406 to a client that accepts only protobuf). A DELETE answers the deleted object for the
//! kinds whose kube-apiserver storage returns it (pods among them), else a `Status`.
//!
//! The modules, in the order a request meets them: `http` (routing, query parsing, faults, the
//! request log; `server` puts it on loopback, `body` is the response body), `api` (get,
//! list, create, update, patch) with `delete` and `pods` (binding, eviction), which shape
//! objects with `lifecycle` (system metadata, defaults, status split), `schema` (CRD
//! admission), `strategic` and `apply` (patch flavours) and store them in `store`
//! (objects, resourceVersions, watch history, indexed by `kinds` and matched by `selector`);
//! `watch` turns the history into event streams, `table` and `openapi` answer kubectl,
//! `events` converts between the two Event APIs, `disruption` plays the PodDisruptionBudget
//! status controller, `status` words failures, `faults` injects them.
//!
//! Not modelled: authentication and RBAC, admission webhooks, garbage collection by owner
//! references, controllers other than the disruption controller's PodDisruptionBudget status,
//! and the kubelet (pods are deleted at once unless [`EmulatorConfig::graceful_pod_deletion`]).

mod api;
mod apply;
mod body;
mod delete;
mod disruption;
mod events;
mod faults;
mod http;
mod kinds;
mod lifecycle;
mod openapi;
mod packed;
#[cfg(test)]
mod patch_props;
mod pods;
#[cfg(feature = "emulator-protobuf")]
mod protobuf;
mod schema;
mod selector;
mod server;
mod status;
mod store;
mod strategic;
mod table;
mod watch;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use karpenter_core::apis::crd;
use karpenter_core::apis::validation::Validator;
use karpenter_core::apis::validation::structural::BadPattern;
use serde_json::json;

pub use body::EmulatorBody;
pub use faults::{FaultRule, Faults, InjectedError, RequestCount, RequestRecord, Verb};
pub use http::EmulatorService;
pub use server::{KUBECONFIG_NAME, LoopbackServer, kubeconfig_for};

use api::Shared;
use faults::RequestLog;
use kinds::{Behavior, Kinds};
use store::{Retention, Store};

/// Watch events kept per kind by default at most: enough for a watcher to fall a few seconds
/// behind a busy simulation without a re-list.
pub const DEFAULT_HISTORY_LIMIT: usize = 10_000;
/// Watch events kept per kind by default once every open watch has read them: what a watch that
/// reconnects (after its timeout, or a dropped connection) resumes from.
pub const DEFAULT_HISTORY_READ_LIMIT: usize = 1_000;
/// Idle time before a watch with bookmarks gets one (the real server sends them about once a
/// minute; sooner keeps resume points fresh in short tests).
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(10);
/// Requests kept in the log by default.
pub const DEFAULT_REQUEST_LOG: usize = 10_000;
/// Namespaces every new cluster has.
pub const INITIAL_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The wall clock the emulator stamps objects with.
pub type Clock = Arc<dyn Fn() -> jiff::Timestamp + Send + Sync>;

/// How an emulator behaves.
#[derive(Clone)]
pub struct EmulatorConfig {
    /// Watch events kept per kind at most; a watch resuming from before them gets 410 Gone.
    pub history_limit: usize,
    /// Watch events kept per kind once every open watch has read them (at most `history_limit`).
    pub history_read_limit: usize,
    /// Idle time before a bookmark on watches that allow them.
    pub bookmark_interval: Duration,
    /// When true, deleting a pod bound to a node only marks it (deletionTimestamp and grace
    /// period), as the real server does while the kubelet stops it; something must then delete it
    /// with grace period 0. When false, pods go at once.
    pub graceful_pod_deletion: bool,
    /// Requests kept in the log (0 disables it).
    pub request_log_capacity: usize,
    /// Seed of generated names and uids, so a simulation replays.
    pub seed: u64,
    /// Timestamps for creationTimestamp, deletionTimestamp and ages.
    pub clock: Clock,
    /// The `major` and `minor` `/version` reports at first (tests of the daemon's version
    /// check); [`Emulator::set_kubernetes_version`] changes them.
    pub kubernetes_version: (String, String),
}

impl fmt::Debug for EmulatorConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmulatorConfig")
            .field("history_limit", &self.history_limit)
            .field("history_read_limit", &self.history_read_limit)
            .field("bookmark_interval", &self.bookmark_interval)
            .field("graceful_pod_deletion", &self.graceful_pod_deletion)
            .field("request_log_capacity", &self.request_log_capacity)
            .field("seed", &self.seed)
            .field("kubernetes_version", &self.kubernetes_version)
            .finish_non_exhaustive()
    }
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        Self {
            history_limit: DEFAULT_HISTORY_LIMIT,
            history_read_limit: DEFAULT_HISTORY_READ_LIMIT,
            bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
            graceful_pod_deletion: false,
            request_log_capacity: DEFAULT_REQUEST_LOG,
            seed: 0x5eed_cafe,
            clock: Arc::new(jiff::Timestamp::now),
            kubernetes_version: (
                http::KUBERNETES_VERSION.0.to_owned(),
                http::KUBERNETES_VERSION.1.to_owned(),
            ),
        }
    }
}

/// Failures setting the emulator up (requests fail with Kubernetes `Status` bodies instead).
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    #[error("compiling the CRD schemas")]
    Schema(#[from] BadPattern),
    #[error("seeding the initial objects: {0}")]
    Seed(String),
    #[error("listening on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("writing the kubeconfig {}", path.display())]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl EmulatorError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Schema(_) => "schema",
            Self::Seed(_) => "seed",
            Self::Bind { .. } => "bind",
            Self::Kubeconfig { .. } => "kubeconfig",
        }
    }
}

/// Objects and bytes held for one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindStats {
    /// `v1/Pod`, `karpenter.sh/v1/NodePool`.
    pub kind: String,
    pub objects: usize,
    /// Heap held by the stored objects: their JSON, keys and selector indexes.
    pub object_bytes: usize,
    /// The same for history entries not shared with a stored object.
    pub history_bytes: usize,
}

/// A Kubernetes API emulator; clones share one cluster.
#[derive(Clone, Debug)]
pub struct Emulator {
    shared: Arc<Shared>,
}

impl Emulator {
    /// An emulator with the default configuration.
    pub fn new() -> Result<Self, EmulatorError> {
        Self::with_config(EmulatorConfig::default())
    }

    /// An emulator with `config`, holding the initial namespaces and our CRDs.
    pub fn with_config(config: EmulatorConfig) -> Result<Self, EmulatorError> {
        let kinds = Kinds::new();
        let retention = Retention {
            limit: config.history_limit,
            read: config.history_read_limit,
        };
        let store = Store::new(&kinds, retention, config.seed);
        let shared = Arc::new(Shared {
            store,
            validator: Validator::new()?,
            faults: Faults::default(),
            log: RequestLog::new(config.request_log_capacity),
            kubernetes_version: std::sync::RwLock::new(config.kubernetes_version.clone()),
            schema_admission: std::sync::atomic::AtomicBool::new(true),
            config,
            watch_epoch: tokio::sync::watch::channel(0).0,
            kinds,
        });
        let namespaces = shared
            .kinds
            .by_behavior(Behavior::Namespace)
            .ok_or_else(|| EmulatorError::Seed("no namespace kind".into()))?;
        for name in INITIAL_NAMESPACES {
            let namespace = json!({ "metadata": { "name": name } });
            shared
                .seed(namespaces, "", namespace)
                .map_err(|e| EmulatorError::Seed(e.message))?;
        }
        if let Some(definitions) = shared.kinds.by_behavior(Behavior::CustomResourceDefinition) {
            for definition in crd::all() {
                shared
                    .seed(definitions, "", definition)
                    .map_err(|e| EmulatorError::Seed(e.message))?;
            }
        }
        Ok(Self { shared })
    }

    /// The HTTP service (for `kube::Client::new` or a server).
    #[must_use]
    pub fn service(&self) -> EmulatorService {
        EmulatorService {
            shared: Arc::clone(&self.shared),
        }
    }

    /// A kube-rs client talking to this emulator in-process, with `default` as namespace.
    /// Call it inside a tokio runtime: the client spawns its request buffer there.
    #[must_use]
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.service(), "default")
    }

    /// Serves the emulator on `addr` (port 0 picks a free port).
    pub async fn serve(&self, addr: SocketAddr) -> Result<LoopbackServer, EmulatorError> {
        LoopbackServer::start(self.service(), addr).await
    }

    /// Changes the `major` and `minor` `/version` reports from now on, as a control-plane
    /// upgrade does (the daemon's `VersionActor` follows it).
    pub fn set_kubernetes_version(&self, major: &str, minor: &str) {
        *self
            .shared
            .kubernetes_version
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            (major.to_owned(), minor.to_owned());
    }

    /// Turns the schema admission of custom objects (CRD schemas and CEL rules) off or on:
    /// off, a write stores what it is given, as a server carrying a newer version of the CRDs
    /// would, so a test can hand the daemon an object its types cannot decode.
    pub fn set_schema_admission(&self, enabled: bool) {
        self.shared
            .schema_admission
            .store(enabled, std::sync::atomic::Ordering::Relaxed);
    }

    /// The fault injection hooks.
    #[must_use]
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// Every request served so far (up to the log's capacity), oldest first.
    #[must_use]
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.log.snapshot()
    }

    /// How many requests of each verb, resource and subresource were served since the start
    /// (not emptied by [`Self::clear_requests`]), most requested first.
    #[must_use]
    pub fn request_counts(&self) -> Vec<RequestCount> {
        self.shared.log.counts()
    }

    /// Empties the request log.
    pub fn clear_requests(&self) {
        self.shared.log.clear();
    }

    /// Ends every open watch, as an API server restart does; clients re-watch.
    pub fn close_watches(&self) {
        self.shared.watch_epoch.send_modify(|epoch| *epoch += 1);
    }

    /// Forgets the watch history: resuming from any earlier resourceVersion gets 410 Gone.
    pub fn compact(&self) {
        self.shared.store.compact();
    }

    /// The latest resourceVersion.
    #[must_use]
    pub fn resource_version(&self) -> u64 {
        self.shared.store.rv()
    }

    /// Objects and bytes held per kind (kinds holding nothing are left out).
    #[must_use]
    pub fn stats(&self) -> Vec<KindStats> {
        let footprint = self.shared.store.footprint();
        self.shared
            .kinds
            .iter()
            .zip(footprint)
            .filter(|(_, (objects, _, history))| *objects > 0 || *history > 0)
            .map(
                |((_, kind), (objects, object_bytes, history_bytes))| KindStats {
                    kind: format!("{}/{}", kind.api_version(), kind.kind),
                    objects,
                    object_bytes,
                    history_bytes,
                },
            )
            .collect()
    }
}
