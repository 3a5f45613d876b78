//! Karpenter's store-backed gauges (`pkg/controllers/metrics/{node,nodepool,pod}`): what the
//! cluster holds now, per node, per NodePool and per pod, read from the daemon's view of the
//! cluster.
//!
//! ```text
//! a scrape of /metrics, leading or not (the view is the same on every replica; Karpenter's
//! metrics controllers run on the leader only)
//!   -> ClusterMetrics::refresh(&dyn ClusterView, now)
//!        node_figures (a pure function of the view) -> the node gauges' series
//!        nodepool usage and limits -> their gauges' series
//!        every pod -> karpenter_pods_state and the pod gauges' series; pods newly bound /
//!        Ready -> the duration histograms
//!   -> the registry's encoding, which takes the series (a StoreGauge holds none after it)
//! daemon assembly, every REFRESH_INTERVAL while the view changes
//!   -> ClusterMetrics::observe: the duration histograms only, no series
//! ```
//!
//! Each family is replaced as a whole at every scrape, as Karpenter's metric store does
//! (`ReplaceAll`): the series of a node, NodePool or pod that vanished are gone, the others
//! written. A series holds the node or pod it is about (shared with the view) and its labels
//! are read as it is encoded, so a scrape at 5,000 nodes and 50,000 pods (about 200,000 series,
//! 78 MB of text) holds a few MB while it runs and nothing once it is answered. Labels are
//! Karpenter's; the node, pod and NodePool names are labels because Karpenter labels by them
//! too.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `karpenter_nodes_allocatable` | gauge | node labels, `resource_type` |
//! | `karpenter_nodes_total_pod_requests` | gauge | node labels, `resource_type` |
//! | `karpenter_nodes_total_pod_limits` | gauge | node labels, `resource_type` |
//! | `karpenter_nodes_total_daemon_requests` | gauge | node labels, `resource_type` |
//! | `karpenter_nodes_total_daemon_limits` | gauge | node labels, `resource_type` |
//! | `karpenter_nodes_system_overhead` | gauge | node labels, `resource_type` (capacity - allocatable) |
//! | `karpenter_nodes_current_lifetime_seconds` | gauge | node labels |
//! | `karpenter_cluster_utilization_percent` | gauge | `resource_type` (100 x pod requests / allocatable, all nodes) |
//! | `karpenter_nodepools_usage` | gauge | `resource_type`, nodepool (`status.resources`) |
//! | `karpenter_nodepools_limit` | gauge | `resource_type`, nodepool (`spec.limits`) |
//! | `karpenter_pods_state` | gauge (1) | name, namespace, owner, node, scheduled, nodepool, zone, arch, `capacity_type`, `instance_type`, phase |
//! | `karpenter_pods_bound_duration_seconds` | histogram (Karpenter's duration buckets) | - (creation to `PodScheduled`, pods seen Pending) |
//! | `karpenter_pods_startup_duration_seconds` | summary ([`crate::summary`]) | - (creation to `Ready`, pods seen Pending) |
//! | `karpenter_pods_unbound_time_seconds` | gauge | name, namespace (a Pending pod not bound yet: since creation) |
//! | `karpenter_pods_unstarted_time_seconds` | gauge | name, namespace (a pod seen Pending not Ready yet: since creation) |
//! | `karpenter_pods_provisioning_bound_duration_seconds` | histogram (duration buckets) | - (from the Provisioner finding the pod a place to `PodScheduled`) |
//! | `karpenter_pods_provisioning_startup_duration_seconds` | histogram (duration buckets) | - (from that moment to `Ready`) |
//! | `karpenter_pods_provisioning_unbound_time_seconds` | gauge | name, namespace (placed, not bound yet: since placed) |
//! | `karpenter_pods_provisioning_unstarted_time_seconds` | gauge | name, namespace (placed, not Ready yet: since placed) |
//! | `karpenter_pods_provisioning_scheduling_undecided_time_seconds` | gauge | name, namespace (seen by the Provisioner, no decision yet: since seen) |
//!
//! The provisioning families read the Provisioner's times ([`crate::pod_times`], shared
//! through [`crate::metrics::Metrics::pod_times`]); the table forgets a pod once it is Ready
//! (as Karpenter's pod metrics controller clears its scheduling times) or gone.
//!
//! Node labels: `node_name`, `phase`, and one per well-known label (its name part lower-cased,
//! `-` to `_`: `nodepool`, `zone`, `instance_type`, `instance_cpu`, ...), `""` when the node
//! lacks it. CPU is in cores, every other resource in its unit (bytes, count); `resource_type`
//! is the resource's name lower-cased with `-` to `_`.
//!
//! Karpenter refreshes pods every 30 s and NodePools on change plus every 5 minutes; one refresh
//! every [`REFRESH_INTERVAL`] does all three here.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use karpenter_core::apis::labels;
use karpenter_core::apis::{SlimNode, SlimPod};
use karpenter_core::domain::resources::{CPU, Resources, pod_limits, pod_requests};
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::pod_cache::Uid;
use crate::pod_times::PodSchedulingTimes;
use crate::ports::cluster_view::ClusterView;
use crate::provisioner::DURATION_BUCKETS_SECONDS;
use crate::summary::{Summary, TextFamily};

/// How often the daemon refreshes these gauges: Karpenter's node metrics period.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(5);

/// A label set built at run time (the status-condition families' extra labels). Values are
/// shared strings, the same few words for every object.
pub type DynamicLabels = Vec<(&'static str, Arc<str>)>;

/// The well-known labels that become node metric labels: Karpenter's core list and the AWS
/// provider's instance labels (not `karpenter.k8s.aws/ec2nodeclass`, which Karpenter does not
/// register as well known).
fn node_metric_labels() -> &'static [(&'static str, &'static str)] {
    static LABELS: std::sync::LazyLock<Vec<(&'static str, &'static str)>> =
        std::sync::LazyLock::new(|| {
            labels::CORE_WELL_KNOWN_LABELS
                .iter()
                .chain(labels::AWS_WELL_KNOWN_LABELS)
                .filter(|key| **key != labels::EC2NODECLASS)
                .filter_map(|key| key.split_once('/').map(|(_, name)| (*key, name)))
                // Made once: each name (`instance-cpu` -> `instance_cpu`, as a resource type is
                // converted) leaked into a static, a few dozen in all.
                .map(|(key, name)| {
                    let name: &'static str = Box::leak(resource_type(name).into_boxed_str());
                    (key, name)
                })
                .collect()
        });
    &LABELS
}

/// `resource_type` of a resource name: lower-cased, `-` to `_` (Karpenter's).
#[must_use]
pub fn resource_type(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// A resource amount as Karpenter reports it: CPU in cores, the rest in their unit.
#[expect(
    clippy::cast_precision_loss,
    reason = "metric values; exact below 2^53 units"
)]
fn value_of(name: &str, amount: i64) -> f64 {
    if name == CPU {
        amount as f64 / 1000.0
    } else {
        amount as f64
    }
}

/// One series of a node family: the node, whose labels are read when the series is encoded,
/// and the `resource_type` of the per-resource families. (A copy of the node's forty-odd
/// labels per series was about 1.2 KB, and a 5,000-node scrape writes some 150,000 of them.)
#[derive(Debug, Clone)]
struct NodeSeries {
    node: Arc<SlimNode>,
    resource_type: Option<Arc<str>>,
}

impl EncodeLabelSet for NodeSeries {
    /// `node_name`, `phase`, one label per well-known label (`""` when the node lacks it), then
    /// `resource_type`.
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let (meta, status) = (&self.node.metadata, self.node.status.as_ref());
        [
            ("node_name", meta.name.as_deref().unwrap_or_default()),
            (
                "phase",
                status.and_then(|s| s.phase.as_deref()).unwrap_or_default(),
            ),
        ]
        .encode(encoder)?;
        let own = meta.labels.as_ref();
        for (key, name) in node_metric_labels() {
            let value = own.and_then(|l| l.get(key)).map_or("", String::as_str);
            [(*name, value)].encode(encoder)?;
        }
        if let Some(resource_type) = &self.resource_type {
            [("resource_type", resource_type.as_ref())].encode(encoder)?;
        }
        Ok(())
    }
}

fn is_terminal(pod: &SlimPod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn is_daemon(pod: &SlimPod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.kind == "DaemonSet")
}

fn requests_of(pod: &SlimPod) -> Resources {
    pod.spec
        .as_ref()
        .and_then(|spec| pod_requests(spec).ok())
        .unwrap_or_default()
}

fn limits_of(pod: &SlimPod) -> Resources {
    pod.spec
        .as_ref()
        .and_then(|spec| pod_limits(spec).ok())
        .unwrap_or_default()
}

/// One node's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeFigures {
    pub node: Arc<SlimNode>,
    pub allocatable: Resources,
    pub overhead: Resources,
    pub pod_requests: Resources,
    pub pod_limits: Resources,
    pub daemon_requests: Resources,
    pub daemon_limits: Resources,
    pub lifetime_seconds: f64,
}

/// Every node's figures from the view (all nodes, Karpenter's or not, as Karpenter's state).
#[must_use]
pub fn node_figures(view: &dyn ClusterView, now: Timestamp) -> Vec<NodeFigures> {
    view.nodes()
        .iter()
        .map(|node| {
            let status = node.status.as_ref();
            let allocatable =
                Resources::from_list_or_zero(status.and_then(|s| s.allocatable.as_deref()));
            let capacity = Resources::from_list_or_zero(status.and_then(|s| s.capacity.as_deref()));
            let mut overhead = capacity.minus(&allocatable);
            overhead.clamp_negative_to_zero();
            let mut figures = NodeFigures {
                node: Arc::clone(node),
                allocatable,
                overhead,
                ..NodeFigures::default()
            };
            let name = node.metadata.name.as_deref().unwrap_or_default();
            for pod in view.pods_on_node(name).iter().filter(|p| !is_terminal(p)) {
                let (requests, limits) = (requests_of(pod), limits_of(pod));
                figures.pod_requests.add(&requests);
                figures.pod_limits.add(&limits);
                if is_daemon(pod) {
                    figures.daemon_requests.add(&requests);
                    figures.daemon_limits.add(&limits);
                }
            }
            figures.lifetime_seconds = node
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0.0, |created| {
                    now.duration_since(created.0).as_secs_f64().max(0.0)
                });
            figures
        })
        .collect()
}

/// `karpenter_cluster_utilization_percent` per resource: 100 x the pods' requests over the
/// allocatable of every node, for resources some node has.
#[must_use]
#[expect(clippy::cast_precision_loss, reason = "a percentage of integer units")]
pub fn cluster_utilization(nodes: &[NodeFigures]) -> BTreeMap<String, f64> {
    let mut allocatable = Resources::default();
    let mut requested = Resources::default();
    for node in nodes {
        allocatable.add(&node.allocatable);
        requested.add(&node.pod_requests);
    }
    allocatable
        .iter()
        .filter(|(_, amount)| *amount != 0)
        .map(|(name, amount)| {
            let used = requested.get(name);
            (resource_type(name), 100.0 * used as f64 / amount as f64)
        })
        .collect()
}

/// A pod's `karpenter_pods_state` series: the pod and its node, read when the series is
/// encoded (rather than eleven strings of its own per pod), and its owner's path, shared by the
/// pods of one owner.
#[derive(Debug, Clone)]
struct PodStateSeries {
    pod: Arc<SlimPod>,
    node: Option<Arc<SlimNode>>,
    owner: Arc<str>,
}

impl PodStateSeries {
    /// `pod` and its node; `owners` holds the owner paths met so far.
    fn of(
        pod: Arc<SlimPod>,
        node: Option<Arc<SlimNode>>,
        owners: &mut BTreeMap<String, Arc<str>>,
    ) -> Self {
        let owner = pod
            .metadata
            .owner_references
            .as_ref()
            .and_then(|owners| owners.first())
            .map(|owner| {
                format!(
                    "/apis/{}/namespaces/{}/{}s/{}",
                    owner.api_version,
                    pod.metadata.namespace.as_deref().unwrap_or_default(),
                    owner.kind.to_lowercase(),
                    owner.name
                )
            })
            .unwrap_or_default();
        let owner = if let Some(held) = owners.get(&owner) {
            Arc::clone(held)
        } else {
            let held: Arc<str> = owner.as_str().into();
            owners.insert(owner, Arc::clone(&held));
            held
        };
        Self { pod, node, owner }
    }
}

impl EncodeLabelSet for PodStateSeries {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let (pod, node) = (&self.pod, self.node.as_deref());
        let node_label = |key: &str| {
            node.and_then(|n| n.metadata.labels.as_ref())
                .and_then(|l| l.get(key))
                .map_or("", String::as_str)
        };
        let node_name = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default();
        [
            ("name", pod.metadata.name.as_deref().unwrap_or_default()),
            (
                "namespace",
                pod.metadata.namespace.as_deref().unwrap_or_default(),
            ),
            ("owner", &self.owner),
            (
                "scheduled",
                if node_name.is_empty() {
                    "false"
                } else {
                    "true"
                },
            ),
            ("node", node_name),
            (
                "phase",
                pod.status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    .unwrap_or_default(),
            ),
            ("zone", node_label(labels::ZONE)),
            ("arch", node_label(labels::ARCH)),
            ("capacity_type", node_label(labels::CAPACITY_TYPE)),
            ("instance_type", node_label(labels::INSTANCE_TYPE)),
            ("nodepool", node_label(labels::NODEPOOL)),
        ]
        .encode(encoder)
    }
}

/// The seconds from the pod's creation to its condition `type_` turning true, once it has.
fn seconds_to_condition(pod: &SlimPod, type_: &str) -> Option<f64> {
    let created = pod.metadata.creation_timestamp.as_ref()?.0;
    let condition = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")?;
    let at = condition.last_transition_time.as_ref()?.0;
    Some(at.duration_since(created).as_secs_f64().max(0.0))
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResourceLabels {
    resource_type: String,
}

/// A pod's name and namespace, read when its series is encoded.
#[derive(Debug, Clone)]
struct PodLabels {
    pod: Arc<SlimPod>,
}

impl EncodeLabelSet for PodLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let meta = &self.pod.metadata;
        [
            ("name", meta.name.as_deref().unwrap_or_default()),
            ("namespace", meta.namespace.as_deref().unwrap_or_default()),
        ]
        .encode(encoder)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PoolResourceLabels {
    resource_type: String,
    nodepool: String,
}

/// A gauge family replaced as a whole at each scrape (Karpenter's metric store, whose
/// `ReplaceAll` drops the series of objects gone): the refresh the scrape runs sets its series
/// and the encoding that follows takes them, so between scrapes it holds nothing. Kept as
/// prometheus-client families, every node's and pod's series stayed between scrapes twice
/// over (the family's and the set of keys written last): after one scrape of the 5,000-node,
/// 50,000-pod scale run the heap stayed at 465 MB instead of 186. Clones share the series.
#[derive(Debug)]
pub(crate) struct StoreGauge<L> {
    series: Arc<Mutex<Vec<(L, f64)>>>,
}

impl<L> Clone for StoreGauge<L> {
    fn clone(&self) -> Self {
        Self {
            series: Arc::clone(&self.series),
        }
    }
}

impl<L> StoreGauge<L> {
    pub(crate) fn new() -> Self {
        Self {
            series: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The series the next encoding writes, instead of those set before.
    pub(crate) fn replace_all(&self, series: Vec<(L, f64)>) {
        *self.series.lock().unwrap_or_else(PoisonError::into_inner) = series;
    }
}

impl<L> EncodeMetric for StoreGauge<L>
where
    L: EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let series =
            std::mem::take(&mut *self.series.lock().unwrap_or_else(PoisonError::into_inner));
        for (labels, value) in &series {
            encoder.encode_family(labels)?.encode_gauge(value)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }

    fn is_empty(&self) -> bool {
        self.series
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }
}

/// The store-backed families (see the module docs).
#[derive(Debug)]
pub struct ClusterMetrics {
    allocatable: StoreGauge<NodeSeries>,
    pod_requests: StoreGauge<NodeSeries>,
    pod_limits: StoreGauge<NodeSeries>,
    daemon_requests: StoreGauge<NodeSeries>,
    daemon_limits: StoreGauge<NodeSeries>,
    overhead: StoreGauge<NodeSeries>,
    lifetime: StoreGauge<NodeSeries>,
    utilization: StoreGauge<ResourceLabels>,
    nodepool_usage: StoreGauge<PoolResourceLabels>,
    nodepool_limit: StoreGauge<PoolResourceLabels>,
    pods_state: StoreGauge<PodStateSeries>,
    pods_unbound: StoreGauge<PodLabels>,
    pods_unstarted: StoreGauge<PodLabels>,
    pods_bound: Histogram,
    pods_startup: Summary,
    provisioning_unbound: StoreGauge<PodLabels>,
    provisioning_unstarted: StoreGauge<PodLabels>,
    provisioning_undecided: StoreGauge<PodLabels>,
    provisioning_bound: Histogram,
    provisioning_startup: Histogram,
    /// When the Provisioner first saw and first placed each pod.
    pod_times: PodSchedulingTimes,
    /// Pods (by uid) seen Pending and not yet bound, and not yet Ready: their durations are
    /// observed once they are; pods gone from the view are forgotten. A uid is kept as its
    /// 128 bits: during a 50,000-pod scale-up both sets hold every pod (as strings, 8 MB).
    bound_seen: Mutex<HashSet<Uid>>,
    started_seen: Mutex<HashSet<Uid>>,
}

impl Default for ClusterMetrics {
    /// Unregistered families (tests).
    fn default() -> Self {
        Self {
            allocatable: StoreGauge::new(),
            pod_requests: StoreGauge::new(),
            pod_limits: StoreGauge::new(),
            daemon_requests: StoreGauge::new(),
            daemon_limits: StoreGauge::new(),
            overhead: StoreGauge::new(),
            lifetime: StoreGauge::new(),
            utilization: StoreGauge::new(),
            nodepool_usage: StoreGauge::new(),
            nodepool_limit: StoreGauge::new(),
            pods_state: StoreGauge::new(),
            pods_unbound: StoreGauge::new(),
            pods_unstarted: StoreGauge::new(),
            pods_bound: Histogram::new(DURATION_BUCKETS_SECONDS),
            pods_startup: Summary::new(
                "karpenter_pods_startup_duration_seconds",
                "The time from pod creation until the pod is running.",
            ),
            provisioning_unbound: StoreGauge::new(),
            provisioning_unstarted: StoreGauge::new(),
            provisioning_undecided: StoreGauge::new(),
            provisioning_bound: Histogram::new(DURATION_BUCKETS_SECONDS),
            provisioning_startup: Histogram::new(DURATION_BUCKETS_SECONDS),
            pod_times: PodSchedulingTimes::default(),
            bound_seen: Mutex::default(),
            started_seen: Mutex::default(),
        }
    }
}

impl ClusterMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        for (name, help, family) in [
            (
                "karpenter_nodes_allocatable",
                "Node allocatable are the resources allocatable by nodes.",
                &metrics.allocatable,
            ),
            (
                "karpenter_nodes_total_pod_requests",
                "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods.",
                &metrics.pod_requests,
            ),
            (
                "karpenter_nodes_total_pod_limits",
                "Node total pod limits are the resources specified by pod limits, including the DaemonSet pods.",
                &metrics.pod_limits,
            ),
            (
                "karpenter_nodes_total_daemon_requests",
                "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes.",
                &metrics.daemon_requests,
            ),
            (
                "karpenter_nodes_total_daemon_limits",
                "Node total daemon limits are the resources specified by DaemonSet pod limits.",
                &metrics.daemon_limits,
            ),
            (
                "karpenter_nodes_system_overhead",
                "Node system daemon overhead are the resources reserved for system overhead, the difference between the node's capacity and allocatable values are reported by the status.",
                &metrics.overhead,
            ),
            (
                "karpenter_nodes_current_lifetime_seconds",
                "Node age in seconds",
                &metrics.lifetime,
            ),
        ] {
            registry.register(name, help, family.clone());
        }
        registry.register(
            "karpenter_pods_state",
            "Pod state is the current state of pods. This metric can be used several ways as it is labeled by the pod name, namespace, owner, node, nodepool name, zone, architecture, capacity type, instance type and pod phase.",
            metrics.pods_state.clone(),
        );
        registry.register(
            "karpenter_cluster_utilization_percent",
            "Utilization of allocatable resources by pod requests",
            metrics.utilization.clone(),
        );
        for (name, help, family) in [
            (
                "karpenter_nodepools_usage",
                "The amount of resources that have been provisioned for a nodepool. Labeled by nodepool name and resource type.",
                &metrics.nodepool_usage,
            ),
            (
                "karpenter_nodepools_limit",
                "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by nodepool name and resource type.",
                &metrics.nodepool_limit,
            ),
        ] {
            registry.register(name, help, family.clone());
        }
        metrics.register_pod_families(registry);
        metrics
    }

    /// Registers the per-pod families (Karpenter's `pkg/controllers/metrics/pod`).
    fn register_pod_families(&self, registry: &mut Registry) {
        let metrics = self;
        for (name, help, family) in [
            (
                "karpenter_pods_unbound_time_seconds",
                "The time from pod creation until the pod is bound.",
                &metrics.pods_unbound,
            ),
            (
                "karpenter_pods_unstarted_time_seconds",
                "The time from pod creation until the pod is running.",
                &metrics.pods_unstarted,
            ),
            (
                "karpenter_pods_provisioning_unbound_time_seconds",
                "The time from when Karpenter first thinks the pod can schedule until it binds. Note: this calculated from a point in memory, not by the pod creation timestamp.",
                &metrics.provisioning_unbound,
            ),
            (
                "karpenter_pods_provisioning_unstarted_time_seconds",
                "The time from when Karpenter first thinks the pod can schedule until the pod is running. Note: this calculated from a point in memory, not by the pod creation timestamp.",
                &metrics.provisioning_unstarted,
            ),
            (
                "karpenter_pods_provisioning_scheduling_undecided_time_seconds",
                "The time from when Karpenter has seen a pod without making a scheduling decision for the pod. Note: this calculated from a point in memory, not by the pod creation timestamp.",
                &metrics.provisioning_undecided,
            ),
        ] {
            registry.register(name, help, family.clone());
        }
        registry.register(
            "karpenter_pods_bound_duration_seconds",
            "The time from pod creation until the pod is bound.",
            metrics.pods_bound.clone(),
        );
        registry.register(
            "karpenter_pods_provisioning_bound_duration_seconds",
            "The time from when Karpenter first thinks the pod can schedule until it binds. Note: this calculated from a point in memory, not by the pod creation timestamp.",
            metrics.provisioning_bound.clone(),
        );
        registry.register(
            "karpenter_pods_provisioning_startup_duration_seconds",
            "The time from when Karpenter first thinks the pod can schedule until the pod is running. Note: this calculated from a point in memory, not by the pod creation timestamp.",
            metrics.provisioning_startup.clone(),
        );
    }

    /// Reads the Provisioner's pod times (the daemon's shared table) for the
    /// `karpenter_pods_provisioning_*` families.
    #[must_use]
    pub fn with_pod_times(mut self, pod_times: PodSchedulingTimes) -> Self {
        self.pod_times = pod_times;
        self
    }

    /// The families `/metrics` writes itself (summaries), to add beside the Registry.
    #[must_use]
    pub fn text_families(&self) -> Vec<Arc<dyn TextFamily>> {
        vec![Arc::new(self.pods_startup.clone())]
    }

    /// Reads the view at `now` and replaces every family (the daemon does this at each
    /// scrape of `/metrics`).
    pub fn refresh(&self, view: &dyn ClusterView, now: Timestamp) {
        self.refresh_nodes(view, now);
        self.refresh_nodepools(view);
        self.refresh_pods(view, now, true);
    }

    /// Only what cannot wait for a scrape: pods that got bound or Ready since the last pass
    /// are observed in the duration histograms (the daemon does this every
    /// [`REFRESH_INTERVAL`] while pods change). No series are written.
    pub fn observe(&self, view: &dyn ClusterView, now: Timestamp) {
        self.refresh_pods(view, now, false);
    }

    fn refresh_nodes(&self, view: &dyn ClusterView, now: Timestamp) {
        let nodes = node_figures(view, now);
        // A node has a handful of resources and every node the same few names.
        let mut resource_types: BTreeMap<&str, Arc<str>> = BTreeMap::new();
        let mut per_resource = |pick: fn(&NodeFigures) -> &Resources| {
            let mut series = Vec::new();
            for node in &nodes {
                for (name, amount) in pick(node).iter().filter(|(_, amount)| *amount != 0) {
                    let resource_type = resource_types
                        .entry(name)
                        .or_insert_with(|| resource_type(name).into());
                    let labels = NodeSeries {
                        node: Arc::clone(&node.node),
                        resource_type: Some(Arc::clone(resource_type)),
                    };
                    series.push((labels, value_of(name, amount)));
                }
            }
            series
        };
        self.allocatable
            .replace_all(per_resource(|n| &n.allocatable));
        self.overhead.replace_all(per_resource(|n| &n.overhead));
        self.pod_requests
            .replace_all(per_resource(|n| &n.pod_requests));
        self.pod_limits.replace_all(per_resource(|n| &n.pod_limits));
        self.daemon_requests
            .replace_all(per_resource(|n| &n.daemon_requests));
        self.daemon_limits
            .replace_all(per_resource(|n| &n.daemon_limits));
        self.lifetime.replace_all(
            nodes
                .iter()
                .map(|n| {
                    let labels = NodeSeries {
                        node: Arc::clone(&n.node),
                        resource_type: None,
                    };
                    (labels, n.lifetime_seconds)
                })
                .collect(),
        );
        self.utilization.replace_all(
            cluster_utilization(&nodes)
                .into_iter()
                .map(|(resource_type, percent)| (ResourceLabels { resource_type }, percent))
                .collect(),
        );
    }

    fn refresh_nodepools(&self, view: &dyn ClusterView) {
        let mut usage = Vec::new();
        let mut limit = Vec::new();
        for pool in view.nodepools() {
            let nodepool = pool.metadata.name.clone().unwrap_or_default();
            let series = |list: &BTreeMap<String, Quantity>| {
                list.iter()
                    .filter_map(|(name, quantity)| {
                        let single = BTreeMap::from([(name.clone(), quantity.clone())]);
                        let amount = Resources::from_list(&single).ok()?.get(name);
                        Some((
                            PoolResourceLabels {
                                resource_type: resource_type(name),
                                nodepool: nodepool.clone(),
                            },
                            value_of(name, amount),
                        ))
                    })
                    .collect::<Vec<_>>()
            };
            if let Some(status) = &pool.status {
                usage.extend(series(&status.resources));
            }
            limit.extend(series(&pool.spec.limits));
        }
        self.nodepool_usage.replace_all(usage);
        self.nodepool_limit.replace_all(limit);
    }

    /// The pod histograms, and with `series` the pod gauges.
    #[expect(
        clippy::too_many_lines,
        reason = "Karpenter's pod metrics controller in one pass: follow, observe, prune"
    )]
    fn refresh_pods(&self, view: &dyn ClusterView, now: Timestamp, series: bool) {
        let pods = view.pods();
        let mut states = Vec::with_capacity(if series { pods.len() } else { 0 });
        let mut owners = BTreeMap::new();
        let mut unbound = Vec::new();
        let mut unstarted = Vec::new();
        let mut seen = self
            .bound_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut started = self
            .started_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Uids as their 128 bits and names borrowed from `pods`: at 50,000 pods this pass runs
        // every few seconds while anything changes, and neither set copies a string.
        let mut live: HashSet<Uid> = HashSet::with_capacity(pods.len());
        // The pods whose Provisioner times are kept: those not Ready yet (Karpenter's pod
        // metrics controller clears a pod's scheduling times once it is Ready).
        let mut unready_names: HashSet<(&str, &str)> = HashSet::new();
        let mut undecided = Vec::new();
        let mut provisioning_unbound = Vec::new();
        let mut provisioning_unstarted = Vec::new();
        // The Provisioner's key of each followed pod (`namespace/name`), written in one buffer.
        let mut key = String::new();
        for pod in &pods {
            if series {
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .and_then(|name| view.node(name));
                states.push((PodStateSeries::of(Arc::clone(pod), node, &mut owners), 1.0));
            }
            let uid = Uid::of(pod.metadata.uid.as_deref().unwrap_or_default());
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            // Karpenter's pod metrics controller: a pod seen Pending is followed until it is
            // bound and Ready; how long it has waited so far is a gauge, and the durations are
            // observed once when it gets there (pods never seen Pending are not measured).
            let pending = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending");
            let followed = pending || seen.contains(&uid) || started.contains(&uid);
            live.insert(uid.clone());
            let ready = seconds_to_condition(pod, "Ready");
            if ready.is_none() {
                unready_names.insert((namespace, name));
            }
            if !followed {
                continue;
            }
            // The gauges' series are only made for a scrape, and share the pod.
            let labels = series.then(|| PodLabels {
                pod: Arc::clone(pod),
            });
            let waited = pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0.0, |created| {
                    now.duration_since(created.0).as_secs_f64().max(0.0)
                });
            // The Provisioner's times (Karpenter's acks and schedulable times), by key.
            key.clear();
            key.extend([namespace, "/", name]);
            let times = self.pod_times.get(&key);
            let schedulable = times.and_then(|t| t.schedulable);
            let since = |at: Timestamp| now.duration_since(at).as_secs_f64().max(0.0);
            // `seconds` after creation, measured from the schedulable time instead.
            let after_schedulable = |seconds: f64| {
                let created = pod.metadata.creation_timestamp.as_ref()?.0;
                let offset = created.duration_since(schedulable?).as_secs_f64();
                Some((seconds + offset).max(0.0))
            };
            let bound = seconds_to_condition(pod, "PodScheduled");
            if pending {
                if let (None, Some(labels)) = (bound, &labels) {
                    unbound.push((labels.clone(), waited));
                    match (times, schedulable) {
                        (_, Some(at)) => provisioning_unbound.push((labels.clone(), since(at))),
                        (Some(t), None) => undecided.push((labels.clone(), since(t.acked))),
                        (None, None) => {}
                    }
                }
                if !seen.contains(&uid) {
                    seen.insert(uid.clone());
                }
            } else if let Some(seconds) = bound
                && seen.remove(&uid)
            {
                self.pods_bound.observe(seconds);
                if let Some(after) = after_schedulable(seconds) {
                    self.provisioning_bound.observe(after);
                }
            }
            let waiting_to_start = pending || (started.contains(&uid) && ready.is_none());
            if waiting_to_start {
                if let Some(labels) = labels {
                    if let Some(at) = schedulable {
                        provisioning_unstarted.push((labels.clone(), since(at)));
                    }
                    unstarted.push((labels, waited));
                }
                if !started.contains(&uid) {
                    started.insert(uid);
                }
            } else if started.remove(&uid)
                && let Some(seconds) = ready
            {
                self.pods_startup.observe(Vec::new(), seconds);
                if let Some(after) = after_schedulable(seconds) {
                    self.provisioning_startup.observe(after);
                }
            }
        }
        seen.retain(|uid| live.contains(uid));
        started.retain(|uid| live.contains(uid));
        // Once a scale-up's pods are bound and Ready the sets are nearly empty: give back the
        // room they grew to (a hash set keeps it).
        for set in [&mut *seen, &mut *started] {
            if crate::table_room::mostly_empty(set.capacity(), set.len()) {
                set.shrink_to_fit();
            }
        }
        drop((seen, started));
        self.pod_times.retain(|key| {
            key.split_once('/')
                .is_some_and(|names| unready_names.contains(&names))
        });
        if !series {
            return;
        }
        self.pods_state.replace_all(states);
        self.pods_unbound.replace_all(unbound);
        self.pods_unstarted.replace_all(unstarted);
        self.provisioning_unbound.replace_all(provisioning_unbound);
        self.provisioning_unstarted
            .replace_all(provisioning_unstarted);
        self.provisioning_undecided.replace_all(undecided);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, NodeStatus, ResourceRequirements};
    // The view's slim types, under the names the literals below use.
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
    use karpenter_core::apis::NodePool;
    use karpenter_core::apis::{
        SharedPodSpec as PodSpec, SlimContainer as Container, SlimPod as Pod,
        SlimPodCondition as PodCondition, SlimPodStatus as PodStatus,
    };

    use super::*;
    use crate::testing::MemoryClusterView;

    fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn node(name: &str) -> SlimNode {
        SlimNode::from(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(at(0))),
                labels: Some(BTreeMap::from([
                    (labels::NODEPOOL.to_owned(), "default".to_owned()),
                    (labels::ZONE.to_owned(), "us-west-2a".to_owned()),
                    (labels::INSTANCE_CPU.to_owned(), "4".to_owned()),
                ])),
                ..ObjectMeta::default()
            },
            status: Some(NodeStatus {
                capacity: Some(quantities(&[
                    ("cpu", "4"),
                    ("memory", "16Gi"),
                    ("pods", "110"),
                ])),
                allocatable: Some(quantities(&[
                    ("cpu", "3920m"),
                    ("memory", "15Gi"),
                    ("pods", "110"),
                ])),
                ..NodeStatus::default()
            }),
            ..Node::default()
        })
    }

    fn pod(name: &str, node: &str, daemon: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("web".into()),
                uid: Some(format!("uid-{name}")),
                creation_timestamp: Some(Time(at(10))),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: if daemon { "DaemonSet" } else { "ReplicaSet" }.into(),
                    name: "owner".into(),
                    uid: "owner-uid".into(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            }
            .into(),
            spec: Some(
                PodSpec {
                    node_name: Some(node.into()),
                    containers: vec![Container {
                        name: "c".into(),
                        resources: Some(ResourceRequirements {
                            requests: Some(quantities(&[("cpu", "500m"), ("memory", "1Gi")])),
                            limits: Some(quantities(&[("cpu", "1"), ("memory", "2Gi")])),
                            ..ResourceRequirements::default()
                        }),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }
                .into(),
            ),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![
                    PodCondition {
                        type_: karpenter_core::apis::PodConditionType::PodScheduled,
                        status: karpenter_core::apis::conditions::ConditionStatus::True,
                        last_transition_time: Some(Time(at(13))),
                        ..PodCondition::default()
                    },
                    PodCondition {
                        type_: karpenter_core::apis::PodConditionType::Ready,
                        status: karpenter_core::apis::conditions::ConditionStatus::True,
                        last_transition_time: Some(Time(at(40))),
                        ..PodCondition::default()
                    },
                ]),
                ..PodStatus::default()
            }),
        }
    }

    fn text_of(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    /// The value of the first sample of `family` whose line holds every `part`.
    fn value(text: &str, family: &str, parts: &[&str]) -> Option<f64> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .find(|l| parts.iter().all(|p| l.contains(p)))
            .and_then(|l| l.rsplit(' ').next())
            .map(|v| v.parse().unwrap())
    }

    #[test]
    fn node_gauges_follow_the_view_and_drop_a_vanished_node() {
        let mut registry = Registry::default();
        let metrics = ClusterMetrics::register(&mut registry);
        let view = MemoryClusterView::new();
        view.put_node(node("n1"));
        view.put_node(node("n2"));
        view.put_slim_pod(pod("app", "n1", false));
        view.put_slim_pod(pod("agent", "n1", true));
        metrics.refresh(&view, at(3600));

        let text = text_of(&registry);
        let n1 = "node_name=\"n1\"";
        let cpu = "resource_type=\"cpu\"";
        let memory = "resource_type=\"memory\"";
        assert_eq!(
            value(&text, "karpenter_nodes_allocatable", &[n1, cpu]),
            Some(3.92)
        );
        assert_eq!(
            value(&text, "karpenter_nodes_system_overhead", &[n1, memory]),
            Some(f64::from(1u32 << 30))
        );
        assert_eq!(
            value(&text, "karpenter_nodes_total_pod_requests", &[n1, cpu]),
            Some(1.0)
        );
        assert_eq!(
            value(
                &text,
                "karpenter_nodes_total_pod_requests",
                &[n1, "resource_type=\"pods\""]
            ),
            Some(2.0)
        );
        assert_eq!(
            value(&text, "karpenter_nodes_total_pod_limits", &[n1, cpu]),
            Some(2.0)
        );
        assert_eq!(
            value(&text, "karpenter_nodes_total_daemon_requests", &[n1, cpu]),
            Some(0.5)
        );
        assert_eq!(
            value(&text, "karpenter_nodes_total_daemon_limits", &[n1, cpu]),
            Some(1.0)
        );
        assert_eq!(
            value(&text, "karpenter_nodes_current_lifetime_seconds", &[n1]),
            Some(3600.0)
        );
        // Karpenter's node labels: the well-known label's name part, "" when absent.
        let line = text
            .lines()
            .find(|l| l.starts_with("karpenter_nodes_allocatable{") && l.contains(n1))
            .unwrap();
        for label in [
            "phase=\"\"",
            "nodepool=\"default\"",
            "zone=\"us-west-2a\"",
            "instance_cpu=\"4\"",
            "capacity_type=\"\"",
            "zone_id=\"\"",
        ] {
            assert!(line.contains(label), "{label} in {line}");
        }
        assert!(!line.contains("ec2nodeclass"), "{line}");
        // 1 core of pod requests over 7.84 allocatable.
        let percent = value(&text, "karpenter_cluster_utilization_percent", &[cpu]).unwrap();
        assert!((percent - 100.0 / 7.84).abs() < 1e-9, "{percent}");

        view.remove_node("n2");
        metrics.refresh(&view, at(3605));
        let text = text_of(&registry);
        assert!(
            !text.contains("node_name=\"n2\""),
            "n2's series are dropped:\n{text}"
        );
        assert!(text.contains("node_name=\"n1\""));
    }

    /// Karpenter's `karpenter_pods_provisioning_*`: measured from the Provisioner's first sight
    /// of the pod (undecided) and from the moment it found the pod a place.
    #[test]
    fn provisioning_families_count_from_the_provisioners_times() {
        let mut registry = Registry::default();
        let times = PodSchedulingTimes::default();
        let metrics = ClusterMetrics::register(&mut registry).with_pod_times(times.clone());
        let view = MemoryClusterView::new();
        view.put_node(node("n1"));
        let mut queued = pod("app", "", false);
        if let Some(spec) = queued.spec.as_mut() {
            spec.node_name = None;
        }
        queued.status = Some(PodStatus {
            phase: Some("Pending".into()),
            ..PodStatus::default()
        });
        view.put_slim_pod(queued);
        times.ack(&"web/app".into(), at(11));
        metrics.refresh(&view, at(15));
        let text = text_of(&registry);
        assert!(
            text.contains("karpenter_pods_provisioning_scheduling_undecided_time_seconds{name=\"app\",namespace=\"web\"} 4.0"),
            "{text}"
        );
        assert!(
            !text.contains("karpenter_pods_provisioning_unbound_time_seconds{"),
            "{text}"
        );

        times.schedulable("web/app", at(12));
        metrics.refresh(&view, at(15));
        let text = text_of(&registry);
        for family in [
            "karpenter_pods_provisioning_unbound_time_seconds",
            "karpenter_pods_provisioning_unstarted_time_seconds",
        ] {
            assert!(
                text.contains(&format!("{family}{{name=\"app\",namespace=\"web\"}} 3.0")),
                "{family} in\n{text}"
            );
        }
        assert!(
            !text.contains("karpenter_pods_provisioning_scheduling_undecided_time_seconds{"),
            "decided"
        );

        // Bound at 13 and Ready at 40: 1 s and 28 s after it was found a place at 12.
        view.put_slim_pod(pod("app", "n1", false));
        metrics.refresh(&view, at(45));
        let text = text_of(&registry);
        for expected in [
            "karpenter_pods_provisioning_bound_duration_seconds_sum 1.0",
            "karpenter_pods_provisioning_startup_duration_seconds_sum 28.0",
        ] {
            assert!(text.contains(expected), "{expected} in\n{text}");
        }
        assert!(!text.contains("karpenter_pods_provisioning_unbound_time_seconds{"));
        // Observed once Ready, its times are cleared as Karpenter clears them.
        assert!(times.get("web/app").is_none(), "forgotten once Ready");

        // A pod not Ready yet keeps its times until it is gone.
        times.ack(&"web/other".into(), at(46));
        let mut waiting = pod("other", "", false);
        waiting.status = Some(PodStatus {
            phase: Some("Pending".into()),
            ..PodStatus::default()
        });
        view.put_slim_pod(waiting);
        metrics.refresh(&view, at(47));
        assert!(times.get("web/other").is_some(), "kept while pending");
        view.remove_pod("web/other");
        metrics.refresh(&view, at(50));
        assert!(times.get("web/other").is_none(), "forgotten with the pod");
    }

    #[test]
    fn pods_state_and_bound_duration_follow_the_pods() {
        let mut registry = Registry::default();
        let metrics = ClusterMetrics::register(&mut registry);
        let view = MemoryClusterView::new();
        view.put_node(node("n1"));
        // Seen Pending first (as Karpenter, durations are measured for pods seen waiting).
        let mut queued = pod("app", "n1", false);
        queued.status = Some(PodStatus {
            phase: Some("Pending".into()),
            ..PodStatus::default()
        });
        view.put_slim_pod(queued);
        metrics.refresh(&view, at(12));
        let before = text_of(&registry);
        assert!(
            before.contains(
                "karpenter_pods_unbound_time_seconds{name=\"app\",namespace=\"web\"} 2.0"
            ),
            "{before}"
        );
        view.put_slim_pod(pod("app", "n1", false));
        metrics.refresh(&view, at(20));
        metrics.refresh(&view, at(25));

        let text = text_of(&registry);
        let line = text
            .lines()
            .find(|l| l.starts_with("karpenter_pods_state{"))
            .unwrap();
        for label in [
            "name=\"app\"",
            "namespace=\"web\"",
            "owner=\"/apis/apps/v1/namespaces/web/replicasets/owner\"",
            "node=\"n1\"",
            "scheduled=\"true\"",
            "nodepool=\"default\"",
            "zone=\"us-west-2a\"",
            "phase=\"Running\"",
        ] {
            assert!(line.contains(label), "{label} in {line}");
        }
        assert!(line.ends_with(" 1.0"), "{line}");
        // Observed once (3 s from creation to PodScheduled), however many refreshes see it.
        assert!(
            text.contains("karpenter_pods_bound_duration_seconds_count 1"),
            "{text}"
        );
        assert!(
            text.contains("karpenter_pods_bound_duration_seconds_sum 3.0"),
            "{text}"
        );
        // 30 s from creation to Ready, in the summary the performance dashboard reads.
        let mut summary = String::new();
        for family in metrics.text_families() {
            family.encode_text(&mut summary).unwrap();
        }
        assert!(
            summary.contains("karpenter_pods_startup_duration_seconds{quantile=\"0.5\"} 30.0"),
            "{summary}"
        );
        assert!(
            summary.contains("karpenter_pods_startup_duration_seconds_count 1"),
            "{summary}"
        );

        assert!(
            !text.contains("karpenter_pods_unbound_time_seconds{"),
            "bound"
        );
        assert!(
            !text.contains("karpenter_pods_unstarted_time_seconds{"),
            "Ready"
        );

        // A pod that waits: unbound and unstarted since its creation, 10 s before `now`.
        let mut waiting = pod("queued", "", false);
        if let Some(spec) = waiting.spec.as_mut() {
            spec.node_name = None;
        }
        waiting.status = Some(PodStatus {
            phase: Some("Pending".into()),
            ..PodStatus::default()
        });
        view.put_slim_pod(waiting);
        metrics.refresh(&view, at(20));
        let text = text_of(&registry);
        for family in [
            "karpenter_pods_unbound_time_seconds",
            "karpenter_pods_unstarted_time_seconds",
        ] {
            assert!(
                text.contains(&format!(
                    "{family}{{name=\"queued\",namespace=\"web\"}} 10.0"
                )),
                "{family} in\n{text}"
            );
        }
        view.remove_pod("web/queued");
        view.remove_pod("web/app");
        metrics.refresh(&view, at(30));
        let text = text_of(&registry);
        assert!(!text.contains("karpenter_pods_state{"));
        assert!(
            !text.contains("karpenter_pods_unbound_time_seconds{"),
            "dropped with the pod"
        );
    }

    #[test]
    fn nodepool_usage_and_limits_are_in_cores_and_units() {
        let mut registry = Registry::default();
        let metrics = ClusterMetrics::register(&mut registry);
        let view = MemoryClusterView::new();
        let mut pool: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "limits": {"cpu": "100", "memory": "0"},
                "template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": []
                }}
            }
        }))
        .unwrap();
        pool.status = Some(
            serde_json::from_value(
                serde_json::json!({"resources": {"cpu": "2500m", "nodes": "1"}}),
            )
            .unwrap(),
        );
        view.put_nodepool(pool);
        metrics.refresh(&view, at(0));
        let text = text_of(&registry);
        let pool = "nodepool=\"default\"";
        assert_eq!(
            value(
                &text,
                "karpenter_nodepools_limit",
                &[pool, "resource_type=\"cpu\""]
            ),
            Some(100.0)
        );
        assert_eq!(
            value(
                &text,
                "karpenter_nodepools_limit",
                &[pool, "resource_type=\"memory\""]
            ),
            Some(0.0)
        );
        assert_eq!(
            value(
                &text,
                "karpenter_nodepools_usage",
                &[pool, "resource_type=\"cpu\""]
            ),
            Some(2.5)
        );
        assert_eq!(
            value(
                &text,
                "karpenter_nodepools_usage",
                &[pool, "resource_type=\"nodes\""]
            ),
            Some(1.0)
        );
        view.remove_nodepool("default");
        metrics.refresh(&view, at(5));
        assert!(!text_of(&registry).contains("karpenter_nodepools_"));
    }

    /// The labels of every sample line of `family`, as (name, value) pairs; panics on a line
    /// whose label set is not `name="value"` pairs separated by commas.
    fn label_sets(text: &str, family: &str) -> Vec<Vec<(String, String)>> {
        text.lines()
            .filter_map(|l| l.strip_prefix(&format!("{family}{{")))
            .map(|rest| {
                let (labels, _) = rest.rsplit_once("} ").expect("a sample line");
                labels
                    .split("\",")
                    .map(|pair| {
                        let (name, value) = pair.split_once("=\"").expect("name=\"value\"");
                        (name.to_owned(), value.trim_end_matches('"').to_owned())
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_scrapes_series_are_well_formed_and_gone_once_encoded() {
        let mut registry = Registry::default();
        let metrics = ClusterMetrics::register(&mut registry);
        let view = MemoryClusterView::new();
        view.put_node(node("n1"));
        view.put_slim_pod(pod("app", "n1", false));
        metrics.refresh(&view, at(3600));
        let text = text_of(&registry);

        let state = "karpenter_pods_state{name=\"app\",namespace=\"web\",\
            owner=\"/apis/apps/v1/namespaces/web/replicasets/owner\",scheduled=\"true\",\
            node=\"n1\",phase=\"Running\",zone=\"us-west-2a\",arch=\"\",capacity_type=\"\",\
            instance_type=\"\",nodepool=\"default\"} 1.0";
        assert!(text.lines().any(|l| l == state), "{text}");

        // A node's series: its name and phase, every well-known label in order, then the
        // resource; the node's labels where it has them, "" where not.
        let sets = label_sets(&text, "karpenter_nodes_allocatable");
        assert_eq!(sets.len(), 3, "cpu, memory and pods: {text}");
        let well_known: Vec<&str> = node_metric_labels().iter().map(|(_, n)| *n).collect();
        for set in &sets {
            let names: Vec<&str> = set.iter().map(|(n, _)| n.as_str()).collect();
            let expected: Vec<&str> = ["node_name", "phase"]
                .into_iter()
                .chain(well_known.iter().copied())
                .chain(["resource_type"])
                .collect();
            assert_eq!(names, expected);
            let value_of = |name: &str| set.iter().find(|(n, _)| n == name).unwrap().1.as_str();
            assert_eq!(value_of("node_name"), "n1");
            assert_eq!(value_of("zone"), "us-west-2a");
            assert_eq!(value_of("instance_cpu"), "4");
            assert_eq!(value_of("instance_type"), "");
        }
        let lifetime = label_sets(&text, "karpenter_nodes_current_lifetime_seconds");
        assert_eq!(lifetime.len(), 1);
        assert_eq!(lifetime[0].len(), 2 + well_known.len(), "no resource_type");

        // Encoded once: the next encoding without a refresh has none of them, and holds
        // nothing between scrapes; the next refresh writes them again.
        let again = text_of(&registry);
        for family in [
            "karpenter_pods_state",
            "karpenter_nodes_allocatable",
            "karpenter_nodes_current_lifetime_seconds",
            "karpenter_cluster_utilization_percent",
        ] {
            assert!(!again.contains(&format!("{family}{{")), "{again}");
        }
        metrics.refresh(&view, at(3605));
        let text = text_of(&registry);
        assert!(text.lines().any(|l| l == state), "{text}");
        assert_eq!(label_sets(&text, "karpenter_nodes_allocatable").len(), 3);
    }
}
