//! Karpenter's status-condition and termination families per kind (operatorpkg's status
//! controller, which Karpenter runs for NodeClaims, NodePools and Nodes and the AWS provider for
//! `EC2NodeClasses`), read from the daemon's view of the cluster.
//!
//! ```text
//! a scrape of /metrics -> ConditionMetrics::refresh(&dyn ClusterView, now); and every
//! cluster_metrics::REFRESH_INTERVAL while the view changes -> ConditionMetrics::observe
//!        per kind: snapshot every object (conditions, deletion time, extra labels)
//!        -> (refresh only) the count and current-status gauges' series, replaced as a whole
//!           and taken by the scrape's encoding; each holds its object's snapshot
//!        -> against the last refresh's snapshot: a condition whose status changed counts a
//!           transition and observes how long it held its previous status; an object deleting
//!           has a termination gauge, and one gone since observes its termination duration
//! ```
//!
//! `<kind>` is `nodeclaim`, `nodepool`, `node` or `ec2nodeclass`:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `operator_<kind>_status_condition_count` | gauge (1) | namespace, name, type, status, reason, extra |
//! | `operator_<kind>_status_condition_current_status_seconds` | gauge | namespace, name, type, status, reason, extra |
//! | `operator_<kind>_status_condition_transitions_total` | counter | type, status (new), reason, extra |
//! | `operator_<kind>_status_condition_transition_seconds` | histogram (Prometheus' default buckets) | type, status (previous), extra |
//! | `operator_<kind>_termination_current_time_seconds` | gauge | namespace, name, extra |
//! | `operator_<kind>_termination_duration_seconds` | histogram (default buckets) | extra |
//!
//! Extra labels are object labels, their keys with `/` and `.` as `_`: a NodeClaim's
//! `karpenter_k8s_aws_ec2nodeclass` and `karpenter_sh_nodepool`, a Node's those and
//! `karpenter_sh_initialized`; none for NodePools and `EC2NodeClasses`. `namespace` is `""`
//! (every kind is cluster-scoped). Object names are labels, as Karpenter's.
//!
//! Differences from operatorpkg, which watches each object: changes are seen at the refresh
//! period, so a status that flips and flips back within one period counts no transition, and a
//! termination's duration is measured to the refresh that finds the object gone (up to one
//! period late). Conditions of objects present at the first refresh count no transition then.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::jiff::Timestamp;
use karpenter_core::apis::MetaFields;
use karpenter_core::apis::conditions::Condition;
use karpenter_core::domain::interner::Interner;
use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::cluster_metrics::{DynamicLabels, StoreGauge};
use crate::metrics::DEFAULT_BUCKETS_SECONDS;
use crate::ports::cluster_view::ClusterView;

/// Object labels that become extra metric labels, per kind (operatorpkg's `WithLabels`).
const NODECLAIM_EXTRA: &[&str] = &["karpenter.k8s.aws/ec2nodeclass", "karpenter.sh/nodepool"];
const NODE_EXTRA: &[&str] = &[
    "karpenter.k8s.aws/ec2nodeclass",
    "karpenter.sh/nodepool",
    "karpenter.sh/initialized",
];

/// The words of the snapshots (condition types, statuses and reasons, extra label values):
/// a few dozen distinct ones, shared by the tens of thousands of conditions a 5,000-node
/// cluster's NodeClaims and Nodes hold between two passes.
static WORDS: Interner<str> = Interner::new();

fn word(text: &str) -> Arc<str> {
    WORDS.share(text)
}

/// One condition as the metrics see it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionState {
    pub type_: Arc<str>,
    pub status: Arc<str>,
    pub reason: Arc<str>,
    pub since: Option<Timestamp>,
}

/// One object as the metrics see it.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectState {
    /// Also the key of the last pass's snapshot, which shares it.
    pub name: Arc<str>,
    pub extra: DynamicLabels,
    pub conditions: Vec<ConditionState>,
    pub deleting_since: Option<Timestamp>,
}

impl ObjectState {
    fn of(
        meta: &impl MetaFields,
        extra_keys: &[&'static str],
        conditions: Vec<ConditionState>,
    ) -> Self {
        Self {
            name: Arc::from(meta.name().unwrap_or_default()),
            extra: extra_keys
                .iter()
                .map(|key| (extra_label_name(key), word(meta.label(key).unwrap_or(""))))
                .collect(),
            conditions,
            deleting_since: meta.deletion_timestamp().map(|t| t.0),
        }
    }
}

/// `karpenter.sh/nodepool` -> `karpenter_sh_nodepool`.
fn extra_label_name(key: &'static str) -> &'static str {
    match key {
        "karpenter.k8s.aws/ec2nodeclass" => "karpenter_k8s_aws_ec2nodeclass",
        "karpenter.sh/nodepool" => "karpenter_sh_nodepool",
        "karpenter.sh/initialized" => "karpenter_sh_initialized",
        _ => "unknown",
    }
}

fn karpenter_conditions(conditions: &[Condition]) -> Vec<ConditionState> {
    conditions
        .iter()
        .map(|c| ConditionState {
            type_: word(&c.type_),
            status: word(c.status.as_str()),
            reason: word(&c.reason),
            since: Some(c.last_transition_time.0),
        })
        .collect()
}

/// Karpenter's own kinds (NodeClaims, NodePools, `EC2NodeClasses`): their status conditions.
fn karpenter_objects<T, M: MetaFields>(
    objects: &[Arc<T>],
    extra_keys: &[&'static str],
    parts: impl Fn(&T) -> (&M, Option<&[Condition]>),
) -> Vec<ObjectState> {
    objects
        .iter()
        .map(|object| {
            let (meta, conditions) = parts(object);
            let conditions = conditions.map(karpenter_conditions).unwrap_or_default();
            ObjectState::of(meta, extra_keys, conditions)
        })
        .collect()
}

fn seconds_between(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64().max(0.0)
}

fn with<const N: usize>(
    base: [(&'static str, &Arc<str>); N],
    extra: &DynamicLabels,
) -> DynamicLabels {
    base.into_iter()
        .map(|(key, value)| (key, Arc::clone(value)))
        .chain(extra.iter().cloned())
        .collect()
}

/// One series of the count, current-status and termination gauges: the object, whose labels
/// are read when the series is encoded (a copy of its labels per series was 0.2 KB, twice per
/// condition), and which of its conditions (`None`: its termination).
#[derive(Debug, Clone)]
struct ObjectSeries {
    object: Arc<ObjectState>,
    condition: Option<usize>,
}

impl EncodeLabelSet for ObjectSeries {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let object = &self.object;
        [("namespace", ""), ("name", object.name.as_ref())].encode(encoder)?;
        if let Some(condition) = self.condition.and_then(|at| object.conditions.get(at)) {
            [
                ("type", condition.type_.as_ref()),
                ("status", condition.status.as_ref()),
                ("reason", condition.reason.as_ref()),
            ]
            .encode(encoder)?;
        }
        object.extra.as_slice().encode(encoder)
    }
}

fn histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS_SECONDS)
}

/// One kind's six families and its last snapshot.
#[derive(Debug)]
struct KindFamilies {
    count: StoreGauge<ObjectSeries>,
    current: StoreGauge<ObjectSeries>,
    transitions: Family<DynamicLabels, Counter>,
    transition_seconds: Family<DynamicLabels, Histogram, fn() -> Histogram>,
    termination_current: StoreGauge<ObjectSeries>,
    termination_duration: Family<DynamicLabels, Histogram, fn() -> Histogram>,
    /// The last refresh's objects by name; `None` before the first refresh.
    last: Mutex<Option<BTreeMap<Arc<str>, Arc<ObjectState>>>>,
}

impl KindFamilies {
    fn new() -> Self {
        Self {
            count: StoreGauge::new(),
            current: StoreGauge::new(),
            transitions: Family::default(),
            transition_seconds: Family::new_with_constructor(histogram),
            termination_current: StoreGauge::new(),
            termination_duration: Family::new_with_constructor(histogram),
            last: Mutex::default(),
        }
    }

    fn register(&self, registry: &mut Registry, kind: &str) {
        registry.register(
            format!("operator_{kind}_status_condition_count"),
            "The number of a condition for a given object, type and status. e.g. Alarm := Available=False > 0",
            self.count.clone(),
        );
        registry.register(
            format!("operator_{kind}_status_condition_current_status_seconds"),
            "The current amount of time in seconds that a status condition has been in a specific state. Alarm := P99(Updated=Unknown) > 5 minutes",
            self.current.clone(),
        );
        registry.register(
            format!("operator_{kind}_status_condition_transitions"),
            "The count of transitions of a given object, type and status.",
            self.transitions.clone(),
        );
        registry.register(
            format!("operator_{kind}_status_condition_transition_seconds"),
            "The amount of time a condition was in a given state before transitioning. e.g. Alarm := P99(Updated=False) > 5 minutes",
            self.transition_seconds.clone(),
        );
        registry.register(
            format!("operator_{kind}_termination_current_time_seconds"),
            "The current amount of time in seconds that an object has been in terminating state.",
            self.termination_current.clone(),
        );
        registry.register(
            format!("operator_{kind}_termination_duration_seconds"),
            "The amount of time taken by an object to terminate completely.",
            self.termination_duration.clone(),
        );
    }

    /// Counts transitions since the last pass and, with `series`, replaces the gauges.
    fn refresh(&self, objects: Vec<ObjectState>, now: Timestamp, series: bool) {
        let mut count = Vec::new();
        let mut current = Vec::new();
        let mut terminating = Vec::new();
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let first = last.is_none();
        let previous = last.take().unwrap_or_default();
        let objects: Vec<Arc<ObjectState>> = objects.into_iter().map(Arc::new).collect();
        for object in &objects {
            let seen_before = previous.get(&object.name);
            for (at, condition) in object.conditions.iter().enumerate() {
                if series {
                    let labels = ObjectSeries {
                        object: Arc::clone(object),
                        condition: Some(at),
                    };
                    count.push((labels.clone(), 1.0));
                    let held = condition
                        .since
                        .map_or(0.0, |since| seconds_between(since, now));
                    current.push((labels, held));
                }
                let before = seen_before
                    .and_then(|o| o.conditions.iter().find(|c| c.type_ == condition.type_));
                let changed = match before {
                    Some(before) => before.status != condition.status,
                    None => !first,
                };
                if !changed {
                    continue;
                }
                self.transitions
                    .get_or_create(&with(
                        [
                            ("type", &condition.type_),
                            ("status", &condition.status),
                            ("reason", &condition.reason),
                        ],
                        &object.extra,
                    ))
                    .inc();
                if let Some(before) = before
                    && let (Some(from), Some(to)) = (before.since, condition.since)
                {
                    self.transition_seconds
                        .get_or_create(&with(
                            [("type", &condition.type_), ("status", &before.status)],
                            &object.extra,
                        ))
                        .observe(seconds_between(from, to));
                }
            }
            if let Some(since) = object.deleting_since
                && series
            {
                let labels = ObjectSeries {
                    object: Arc::clone(object),
                    condition: None,
                };
                terminating.push((labels, seconds_between(since, now)));
            }
        }
        let present: BTreeMap<Arc<str>, Arc<ObjectState>> = objects
            .into_iter()
            .map(|object| (Arc::clone(&object.name), object))
            .collect();
        for (name, gone) in &previous {
            if let Some(since) = gone.deleting_since
                && !present.contains_key(name)
            {
                self.termination_duration
                    .get_or_create(&gone.extra)
                    .observe(seconds_between(since, now));
            }
        }
        *last = Some(present);
        drop(last);
        if !series {
            return;
        }
        self.count.replace_all(count);
        self.current.replace_all(current);
        self.termination_current.replace_all(terminating);
    }
}

/// The families of the four kinds (see the module docs).
#[derive(Debug)]
pub struct ConditionMetrics {
    nodeclaim: KindFamilies,
    nodepool: KindFamilies,
    node: KindFamilies,
    ec2nodeclass: KindFamilies,
}

impl Default for ConditionMetrics {
    /// Unregistered families (tests).
    fn default() -> Self {
        Self {
            nodeclaim: KindFamilies::new(),
            nodepool: KindFamilies::new(),
            node: KindFamilies::new(),
            ec2nodeclass: KindFamilies::new(),
        }
    }
}

impl ConditionMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        metrics.nodeclaim.register(registry, "nodeclaim");
        metrics.nodepool.register(registry, "nodepool");
        metrics.node.register(registry, "node");
        metrics.ec2nodeclass.register(registry, "ec2nodeclass");
        metrics
    }

    /// Reads every object of the four kinds from `view` at `now`: counts the transitions
    /// since the last pass and replaces every gauge (the daemon does this at each scrape).
    pub fn refresh(&self, view: &dyn ClusterView, now: Timestamp) {
        self.pass(view, now, true);
    }

    /// Counts the transitions since the last pass only (the daemon does this every
    /// [`crate::cluster_metrics::REFRESH_INTERVAL`] while the objects change, so a condition
    /// that flips between two scrapes is still counted).
    pub fn observe(&self, view: &dyn ClusterView, now: Timestamp) {
        self.pass(view, now, false);
    }

    fn pass(&self, view: &dyn ClusterView, now: Timestamp, series: bool) {
        self.nodeclaim.refresh(
            karpenter_objects(&view.nodeclaims(), NODECLAIM_EXTRA, |c| {
                (
                    &c.metadata,
                    c.status.as_ref().map(|s| s.conditions.as_slice()),
                )
            }),
            now,
            series,
        );
        self.nodepool.refresh(
            karpenter_objects(&view.nodepools(), &[], |p| {
                (
                    &p.metadata,
                    p.status.as_ref().map(|s| s.conditions.as_slice()),
                )
            }),
            now,
            series,
        );
        self.ec2nodeclass.refresh(
            karpenter_objects(&view.ec2nodeclasses(), &[], |c| {
                (
                    &c.metadata,
                    c.status.as_ref().map(|s| s.conditions.as_slice()),
                )
            }),
            now,
            series,
        );
        self.node.refresh(
            view.nodes()
                .iter()
                .map(|n| {
                    let conditions = n
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .map(|conditions| {
                            conditions
                                .iter()
                                .map(|c| ConditionState {
                                    type_: word(&c.type_),
                                    status: word(&c.status),
                                    reason: word(c.reason.as_deref().unwrap_or_default()),
                                    since: c.last_transition_time.as_ref().map(|t| t.0),
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    ObjectState::of(&n.metadata, NODE_EXTRA, conditions)
                })
                .collect(),
            now,
            series,
        );
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;
    use crate::testing::MemoryClusterView;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn node(ready: &str, since: i64, deleting: Option<i64>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                labels: Some(BTreeMap::from([(
                    "karpenter.sh/nodepool".to_owned(),
                    "default".to_owned(),
                )])),
                deletion_timestamp: deleting.map(|s| Time(at(s))),
                ..ObjectMeta::default()
            },
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    reason: Some("KubeletReady".into()),
                    last_transition_time: Some(Time(at(since))),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    fn text(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn conditions_transitions_and_termination_follow_the_objects() {
        let mut registry = Registry::default();
        let metrics = ConditionMetrics::register(&mut registry);
        let view = MemoryClusterView::new();
        view.put_node(node("False", 0, None));
        metrics.refresh(&view, at(10));
        let first = text(&registry);
        let extra = "karpenter_k8s_aws_ec2nodeclass=\"\",karpenter_sh_nodepool=\"default\",karpenter_sh_initialized=\"\"";
        assert!(
            first.contains(&format!(
                "operator_node_status_condition_count{{namespace=\"\",name=\"n1\",type=\"Ready\",status=\"False\",reason=\"KubeletReady\",{extra}}} 1.0"
            )),
            "{first}"
        );
        assert!(first.contains(&format!(
            "operator_node_status_condition_current_status_seconds{{namespace=\"\",name=\"n1\",type=\"Ready\",status=\"False\",reason=\"KubeletReady\",{extra}}} 10.0"
        )));
        assert!(
            !first.contains("operator_node_status_condition_transitions_total"),
            "none at the first refresh"
        );

        // Ready at 30 s: one transition to True, 30 s spent False.
        view.put_node(node("True", 30, None));
        metrics.refresh(&view, at(35));
        let second = text(&registry);
        assert!(second.contains(&format!(
            "operator_node_status_condition_transitions_total{{type=\"Ready\",status=\"True\",reason=\"KubeletReady\",{extra}}} 1"
        )), "{second}");
        assert!(second.contains(&format!(
            "operator_node_status_condition_transition_seconds_sum{{type=\"Ready\",status=\"False\",{extra}}} 30.0"
        )), "{second}");
        assert!(
            !second.contains("status=\"False\",reason"),
            "the False series is dropped"
        );

        // Deleting at 40 s, gone by the refresh at 50 s.
        view.put_node(node("True", 30, Some(40)));
        metrics.refresh(&view, at(45));
        assert!(text(&registry).contains(&format!(
            "operator_node_termination_current_time_seconds{{namespace=\"\",name=\"n1\",{extra}}} 5.0"
        )));
        view.remove_node("n1");
        metrics.refresh(&view, at(50));
        let last = text(&registry);
        assert!(
            last.contains(&format!(
                "operator_node_termination_duration_seconds_sum{{{extra}}} 10.0"
            )),
            "{last}"
        );
        assert!(
            !last.contains("name=\"n1\""),
            "every series of the gone node dropped:\n{last}"
        );
    }
}
