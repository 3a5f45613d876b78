//! What a simulation measured, and how it is shown: a [`Recorder`] the scenario runner feeds
//! tick by tick (pods created and bound, cost per hour, interruptions, harness errors), and the
//! [`Report`] built from it and from the final state (kwok's instances, the kit's metrics, the
//! events on pods still pending), rendered as a table or as JSON.
//!
//! Every number in the report comes from simulated time and seeded inputs, so the JSON of two
//! runs with the same scenario and seed is byte-identical; the wall time a run took is printed
//! beside the table, never inside the report.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use karpenter_actors::ports::ec2::{Instance, InstanceState};
use karpenter_config::format_go_duration;
use karpenter_core::domain::scheduling::CostLowerBound;
use serde::Serialize;

use super::binder::PodKey;

/// Pending pods listed one by one in the report; the rest are only counted by reason.
pub const MAX_LISTED_PENDING: usize = 25;

/// Rounds money and ratios for the report (a tenth of a cent is below anything a reader acts
/// on, and it keeps the JSON short).
fn round(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (value * scale).round() / scale
}

fn seconds(duration: Duration) -> f64 {
    round(duration.as_secs_f64(), 1)
}

/// Percentiles of time to schedule, in simulated seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Latency {
    pub samples: usize,
    pub p50_seconds: f64,
    pub p90_seconds: f64,
    pub p99_seconds: f64,
    pub max_seconds: f64,
}

impl Latency {
    /// Nearest-rank percentiles of `samples`.
    #[must_use]
    pub fn of(samples: &[Duration]) -> Self {
        let mut sorted = samples.to_vec();
        sorted.sort();
        let rank = |p: f64| -> f64 {
            if sorted.is_empty() {
                return 0.0;
            }
            #[expect(
                clippy::cast_precision_loss,
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "sample counts are far below 2^52; the rank is within 1..=len"
            )]
            let index = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
            seconds(sorted[index])
        };
        Self {
            samples: sorted.len(),
            p50_seconds: rank(0.50),
            p90_seconds: rank(0.90),
            p99_seconds: rank(0.99),
            max_seconds: sorted.last().copied().map_or(0.0, seconds),
        }
    }
}

/// A pod still pending at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingPod {
    /// `namespace/name`.
    pub pod: String,
    /// The last word on it: Karpenter's `FailedScheduling` or `Nominated` event, else the
    /// scheduler's condition.
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodsReport {
    /// Pods the workloads created (replacements of evicted or lost pods included).
    pub requested: u64,
    /// Bindings made (a pod rescheduled after its node went counts again).
    pub scheduled: u64,
    /// Pods deleted when workloads scaled down.
    pub scaled_down: u64,
    pub running_at_end: usize,
    pub pending_at_end: usize,
    /// Pending pods by reason.
    pub pending_reasons: BTreeMap<String, usize>,
    /// Up to [`MAX_LISTED_PENDING`] pending pods.
    pub pending: Vec<PendingPod>,
    pub evictions: EvictionsReport,
}

/// How often each replica's pod was evicted (see `sim::workloads`: a pod removed by anything
/// but a scale-down, its replacement inheriting the count).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvictionsReport {
    /// The most evictions any one replica saw.
    pub max_per_replica: u32,
    /// Replicas (over the whole run, scaled-down ones included) by their evictions.
    pub replicas_by_evictions: BTreeMap<u32, usize>,
}

impl EvictionsReport {
    #[must_use]
    pub fn of(replicas_by_evictions: BTreeMap<u32, usize>) -> Self {
        Self {
            max_per_replica: replicas_by_evictions
                .keys()
                .next_back()
                .copied()
                .unwrap_or(0),
            replicas_by_evictions,
        }
    }
}

/// Instances of one type and capacity type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceCount {
    pub instance_type: String,
    pub capacity_type: String,
    pub launched: usize,
    pub terminated: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodesReport {
    pub launched: usize,
    pub terminated: usize,
    pub running_at_end: usize,
    /// NodeClaims that existed at some point.
    pub nodeclaims_created: usize,
    /// Peak number of Nodes.
    pub peak_nodes: usize,
    pub by_type: Vec<InstanceCount>,
    /// NodeClaims Karpenter deleted, by `karpenter_nodeclaims_disrupted_total`'s reason
    /// (`drifted`, `expired`, `unhealthy`, `underutilized`, ...).
    pub disrupted: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CostReport {
    /// $/h of the instances running at the end.
    pub per_hour_at_end: f64,
    pub peak_per_hour: f64,
    /// $ spent over the run (instances billed from launch to termination).
    pub total: f64,
    /// The cheapest $/h any placement of the pods requested at the end could cost, over the
    /// instance types and offerings each pod may run on: whole nodes for each group of
    /// identical pods with its zone spread, or each pod at its cheapest unit price, whichever
    /// is higher (`domain::scheduling::cost_lower_bound`); `None` when instance types were
    /// unavailable.
    pub lower_bound_per_hour_at_end: Option<f64>,
    /// `perHourAtEnd / lowerBoundPerHourAtEnd` (1.0 is perfect).
    pub ratio_at_end: Option<f64>,
    /// Pods at the end that no NodePool offers a compatible instance type for, left out of
    /// the bound.
    pub lower_bound_unpriced_pods: usize,
    /// The bound integrated over the run (sampled every progress interval).
    pub lower_bound_total: Option<f64>,
    /// `total / lowerBoundTotal` (1.0 is perfect).
    pub ratio: Option<f64>,
    /// Instance types launched in the run whose price is an estimate (missing from Karpenter's
    /// price table; `providers::pricing::is_estimated_price`), in name order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub estimated_price_types: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InterruptionsReport {
    /// Spot interruption warnings sent.
    pub warnings: usize,
    /// Warned instances Karpenter had already drained away (NodeClaim gone or deleting, or the
    /// instance terminating) when EC2 reclaimed them two minutes later.
    pub handled: usize,
    /// Warned instances EC2 had to reclaim from under a NodeClaim.
    pub reclaimed_unhandled: usize,
    /// Messages left in the interruption queue at the end.
    pub left_in_queue: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultsReport {
    pub node_failures: usize,
    pub aws_faults_scheduled: usize,
    pub actor_faults_injected: usize,
}

/// One actor kind's totals over the run (from the kit's metrics, so actors that have stopped
/// count too).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActorTotals {
    pub handled: u64,
    pub errors: u64,
    pub panics: u64,
    pub restarts: u64,
    pub overflows: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HarnessReport {
    pub kubelet_errors: usize,
    pub scheduler_errors: usize,
    pub workload_errors: usize,
    /// Watch changes dropped between the watchers and the actors (queue full).
    pub dropped_changes: u64,
}

/// The report of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub simulated_seconds: u64,
    pub pods: PodsReport,
    pub time_to_schedule: Latency,
    pub nodes: NodesReport,
    pub cost: CostReport,
    pub interruptions: InterruptionsReport,
    pub faults: FaultsReport,
    /// Totals per actor kind.
    pub actors: BTreeMap<String, ActorTotals>,
    /// Whether the root supervisor gave up during the run.
    pub escalated: bool,
    pub harness: HarnessReport,
    /// Every disruption command the daemons decided, in order.
    pub disruptions: Vec<DisruptionLine>,
}

/// One disruption command as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionLine {
    /// Simulated seconds since the start when it was decided.
    pub at_seconds: u64,
    pub method: String,
    pub reason: String,
    pub decision: String,
    /// Nodes removed (the Node's name once registered, else the NodeClaim's).
    pub nodes: Vec<String>,
    /// Instance types removed (`type/capacity`).
    pub removed: Vec<String>,
    /// Cheapest instance type of each replacement.
    pub added: Vec<String>,
    pub price_before: Option<f64>,
    pub price_after: Option<f64>,
    /// `validating`, `abandoned: ...`, `executing`, `succeeded`, `failed: ...`.
    pub outcome: String,
}

impl DisruptionLine {
    /// The line of a command decided on a clock that started at `start`.
    #[must_use]
    pub fn of(
        record: karpenter_actors::disruption::DisruptionRecord,
        start: k8s_openapi::jiff::Timestamp,
    ) -> Self {
        use karpenter_actors::disruption::CommandState;
        let at_seconds = record
            .decided_at
            .parse::<k8s_openapi::jiff::Timestamp>()
            .ok()
            .and_then(|at| u64::try_from(at.as_second() - start.as_second()).ok())
            .unwrap_or_default();
        Self {
            at_seconds,
            method: record.method.to_owned(),
            reason: record.reason.to_owned(),
            decision: record.decision.to_owned(),
            nodes: record.candidates.iter().map(|c| c.name.clone()).collect(),
            removed: record
                .candidates
                .iter()
                .map(|c| {
                    format!(
                        "{}/{}",
                        c.instance_type.as_deref().unwrap_or("?"),
                        c.capacity_type.as_deref().unwrap_or("?")
                    )
                })
                .collect(),
            added: record.replacement_types,
            price_before: record.price_before,
            price_after: record.price_after,
            outcome: match record.state {
                CommandState::Validating => "validating".to_owned(),
                CommandState::Executing => "executing".to_owned(),
                CommandState::Succeeded => "succeeded".to_owned(),
                CommandState::Abandoned(why) => format!("abandoned: {why}"),
                CommandState::Failed(why) => format!("failed: {why}"),
            },
        }
    }
}

/// What the runner records while the scenario runs.
#[derive(Debug, Default)]
pub struct Recorder {
    created_at: BTreeMap<PodKey, Duration>,
    latencies: Vec<Duration>,
    pub requested: u64,
    pub scheduled: u64,
    pub scaled_down: u64,
    cost_total: f64,
    peak_per_hour: f64,
    lower_bound_total: Option<f64>,
    last_lower_bound: Option<(Duration, f64)>,
    last_unpriced_pods: usize,
    pub nodeclaims_seen: BTreeSet<String>,
    pub peak_nodes: usize,
    pub interruptions: InterruptionsReport,
    pub faults: FaultsReport,
    pub harness: HarnessReport,
}

impl Recorder {
    /// Pods created at simulated time `at`.
    pub fn created(&mut self, pods: &[PodKey], at: Duration) {
        for pod in pods {
            self.created_at.insert(pod.clone(), at);
            self.requested += 1;
        }
    }

    /// Pods deleted by a scale-down.
    pub fn scaled_down(&mut self, pods: &[PodKey]) {
        for pod in pods {
            self.created_at.remove(pod);
            self.scaled_down += 1;
        }
    }

    /// Pods bound at simulated time `at`.
    pub fn bound(&mut self, pods: &[PodKey], at: Duration) {
        for pod in pods {
            self.scheduled += 1;
            if let Some(created) = self.created_at.remove(pod) {
                self.latencies.push(at.saturating_sub(created));
            }
        }
    }

    /// Bills `per_hour` for `elapsed` of simulated time.
    pub fn bill(&mut self, per_hour: f64, elapsed: Duration) {
        self.cost_total += per_hour * elapsed.as_secs_f64() / 3600.0;
        self.peak_per_hour = self.peak_per_hour.max(per_hour);
    }

    /// The lower bound at simulated time `at`; its $/h is integrated piecewise constant.
    pub fn lower_bound(&mut self, bound: Option<&CostLowerBound>, at: Duration) {
        let Some(bound) = bound else {
            return;
        };
        let per_hour = bound.per_hour;
        self.last_unpriced_pods = bound.unpriced_pods;
        if let Some((since, previous)) = self.last_lower_bound {
            let spent = previous * at.saturating_sub(since).as_secs_f64() / 3600.0;
            *self.lower_bound_total.get_or_insert(0.0) += spent;
        } else {
            self.lower_bound_total.get_or_insert(0.0);
        }
        self.last_lower_bound = Some((at, per_hour));
    }

    /// The time-to-schedule samples so far.
    #[must_use]
    pub fn latencies(&self) -> &[Duration] {
        &self.latencies
    }

    /// $ spent so far.
    #[must_use]
    pub fn spent(&self) -> f64 {
        self.cost_total
    }

    /// The cost part of the report.
    #[must_use]
    pub fn cost(&self, per_hour_at_end: f64) -> CostReport {
        let lower_bound_total = self.lower_bound_total.map(|t| round(t, 4));
        CostReport {
            per_hour_at_end: round(per_hour_at_end, 4),
            peak_per_hour: round(self.peak_per_hour, 4),
            total: round(self.cost_total, 4),
            lower_bound_per_hour_at_end: self.last_lower_bound.map(|(_, b)| round(b, 4)),
            ratio_at_end: self
                .last_lower_bound
                .filter(|(_, b)| *b > 0.0)
                .map(|(_, b)| round(per_hour_at_end / b, 3)),
            lower_bound_unpriced_pods: self.last_unpriced_pods,
            lower_bound_total,
            ratio: lower_bound_total
                .filter(|b| *b > 0.0)
                .map(|b| round(self.cost_total / b, 3)),
            estimated_price_types: Vec::new(),
        }
    }
}

/// Instances launched and terminated, by type and capacity type.
#[must_use]
pub fn instance_counts(instances: &[Instance]) -> (Vec<InstanceCount>, usize, usize, usize) {
    let mut by: BTreeMap<(String, &'static str), InstanceCount> = BTreeMap::new();
    let (mut terminated, mut running) = (0, 0);
    for instance in instances {
        let capacity_type = instance.capacity_type.as_str();
        let entry = by
            .entry((instance.instance_type.clone(), capacity_type))
            .or_insert_with(|| InstanceCount {
                instance_type: instance.instance_type.clone(),
                capacity_type: capacity_type.to_owned(),
                ..InstanceCount::default()
            });
        entry.launched += 1;
        if matches!(
            instance.state,
            InstanceState::ShuttingDown | InstanceState::Terminated
        ) {
            entry.terminated += 1;
            terminated += 1;
        } else {
            running += 1;
        }
    }
    (
        by.into_values().collect(),
        instances.len(),
        terminated,
        running,
    )
}

/// Per-kind totals read from the kit's metrics in the `OpenMetrics` text format
/// (`karpenter_actor_*_total{kind="..."}` lines; other metrics are ignored).
#[must_use]
pub fn actor_totals(metrics_text: &str) -> BTreeMap<String, ActorTotals> {
    let mut totals: BTreeMap<String, ActorTotals> = BTreeMap::new();
    for (name, labels, value) in samples(metrics_text) {
        let Some(kind) = label(labels, "kind") else {
            continue;
        };
        let entry = totals.entry(kind.to_owned()).or_default();
        match name {
            "karpenter_actor_messages_handled_total" => entry.handled += value,
            "karpenter_actor_handler_errors_total" => entry.errors += value,
            "karpenter_actor_panics_total" => entry.panics += value,
            "karpenter_actor_restarts_total" => entry.restarts += value,
            "karpenter_actor_mailbox_overflows_total" => entry.overflows += value,
            _ => {}
        }
    }
    totals.retain(|_, t| *t != ActorTotals::default());
    totals
}

/// `karpenter_nodeclaims_disrupted_total` summed by `reason` (pools and capacity types
/// together), from the daemons' metrics text; reasons never counted are left out.
#[must_use]
pub fn disrupted_by_reason(metrics_text: &str) -> BTreeMap<String, u64> {
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for (name, labels, value) in samples(metrics_text) {
        if name == "karpenter_nodeclaims_disrupted_total"
            && value > 0
            && let Some(reason) = label(labels, "reason")
        {
            *totals.entry(reason.to_owned()).or_default() += value;
        }
    }
    totals
}

/// The labelled samples of a Prometheus text exposition whose values are non-negative
/// integers (counters): `(name, labels, value)`.
fn samples(metrics_text: &str) -> impl Iterator<Item = (&str, &str, u64)> {
    metrics_text.lines().filter_map(|line| {
        let (name, rest) = line.split_once('{')?;
        let (labels, value) = rest.rsplit_once("} ")?;
        let value = value.trim().parse::<f64>().ok()?;
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "counters are non-negative integers written as floats"
        )]
        let value = value as u64;
        Some((name, labels, value))
    })
}

/// One label's value in a sample's label text (`a="x",b="y"`).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|l| {
        l.strip_prefix(key)
            .and_then(|l| l.strip_prefix("=\""))
            .and_then(|v| v.strip_suffix('"'))
    })
}

fn money(value: f64) -> String {
    format!("${value:.2}")
}

fn money4(value: f64) -> String {
    format!("${value:.4}")
}

impl Report {
    /// The report as pretty JSON (stable field order).
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The report as a table for people.
    #[must_use]
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let duration = format_go_duration(Duration::from_secs(self.simulated_seconds));
        let _ = writeln!(
            out,
            "scenario {} (seed {}), {duration} simulated\n",
            self.scenario, self.seed
        );
        self.pods_section(&mut out);
        self.nodes_section(&mut out);
        self.cost_section(&mut out);
        self.disruptions_section(&mut out);
        self.faults_section(&mut out);
        self.actors_section(&mut out);
        out
    }

    fn pods_section(&self, out: &mut String) {
        let pods = &self.pods;
        let latency = &self.time_to_schedule;
        let _ = writeln!(out, "PODS");
        let _ = writeln!(
            out,
            "  requested {}  scheduled {}  scaled down {}  running at end {}  pending at end {}",
            pods.requested,
            pods.scheduled,
            pods.scaled_down,
            pods.running_at_end,
            pods.pending_at_end
        );
        let _ = writeln!(
            out,
            "  time to schedule (simulated): p50 {}s  p90 {}s  p99 {}s  max {}s  ({} pods)",
            latency.p50_seconds,
            latency.p90_seconds,
            latency.p99_seconds,
            latency.max_seconds,
            latency.samples
        );
        let histogram: Vec<String> = pods
            .evictions
            .replicas_by_evictions
            .iter()
            .map(|(evictions, replicas)| format!("{evictions}x {replicas}"))
            .collect();
        let _ = writeln!(
            out,
            "  evictions: max per replica {}, replicas evicted {}",
            pods.evictions.max_per_replica,
            if histogram.is_empty() {
                "-".to_owned()
            } else {
                histogram.join(" ")
            }
        );
        for (reason, count) in &pods.pending_reasons {
            let _ = writeln!(out, "  pending x{count}: {reason}");
        }
        let _ = writeln!(out);
    }

    fn nodes_section(&self, out: &mut String) {
        let nodes = &self.nodes;
        let _ = writeln!(out, "NODES");
        let _ = writeln!(
            out,
            "  launched {}  terminated {}  running at end {}  peak nodes {}  nodeclaims {}",
            nodes.launched,
            nodes.terminated,
            nodes.running_at_end,
            nodes.peak_nodes,
            nodes.nodeclaims_created
        );
        if !nodes.disrupted.is_empty() {
            let reasons: Vec<String> = nodes
                .disrupted
                .iter()
                .map(|(reason, count)| format!("{reason} {count}"))
                .collect();
            let _ = writeln!(out, "  nodeclaims disrupted: {}", reasons.join(", "));
        }
        if !nodes.by_type.is_empty() {
            let _ = writeln!(
                out,
                "  {:<18} {:<10} {:>8} {:>10}",
                "INSTANCE TYPE", "CAPACITY", "LAUNCHED", "TERMINATED"
            );
            for row in &nodes.by_type {
                let _ = writeln!(
                    out,
                    "  {:<18} {:<10} {:>8} {:>10}",
                    row.instance_type, row.capacity_type, row.launched, row.terminated
                );
            }
        }
        let _ = writeln!(out);
    }

    fn cost_section(&self, out: &mut String) {
        let cost = &self.cost;
        let bound = |v: Option<f64>| v.map_or_else(|| "n/a".to_owned(), money);
        let _ = writeln!(out, "COST");
        let _ = writeln!(
            out,
            "  per hour at end {} (lower bound {}{})  peak {}/h",
            money(cost.per_hour_at_end),
            bound(cost.lower_bound_per_hour_at_end),
            cost.ratio_at_end
                .map_or_else(String::new, |ratio| format!(", {ratio:.2}x")),
            money(cost.peak_per_hour)
        );
        let _ = writeln!(
            out,
            "  total {} (lower bound {}{})",
            money(cost.total),
            bound(cost.lower_bound_total),
            cost.ratio
                .map_or_else(String::new, |ratio| format!(", {ratio:.2}x"))
        );
        let left_out = match cost.lower_bound_unpriced_pods {
            0 => String::new(),
            n => format!(" ({n} pods with no such offering left out)"),
        };
        let _ = writeln!(
            out,
            "  lower bound: the cheapest whole nodes for each group of identical pods (its zone \
             spread kept), or each pod at its cheapest unit price if higher, over the instance \
             types and offerings the pods may run on{left_out}"
        );
        if !cost.estimated_price_types.is_empty() {
            let _ = writeln!(
                out,
                "  estimated prices (types missing from Karpenter's v1.5 price table, priced from \
                 their family): {}",
                cost.estimated_price_types.join(", ")
            );
        }
        let _ = writeln!(out);
    }

    fn disruptions_section(&self, out: &mut String) {
        let _ = writeln!(out, "DISRUPTIONS");
        if self.disruptions.is_empty() {
            let _ = writeln!(out, "  none\n");
            return;
        }
        for line in &self.disruptions {
            let price = match (line.price_before, line.price_after) {
                // The replacements' price is a bound: their most expensive kept instance
                // type at its worst launch price.
                (Some(before), Some(after)) if after > 0.0 => {
                    format!("  {} -> at most {}/h", money4(before), money4(after))
                }
                (Some(before), Some(_)) => format!("  {} -> $0/h", money4(before)),
                _ => String::new(),
            };
            let added = if line.added.is_empty() {
                String::new()
            } else {
                format!(" -> {}", line.added.join(", "))
            };
            let _ = writeln!(
                out,
                "  [{:>6}] {} {} {}: {}{}{}  ({})",
                format_go_duration(Duration::from_secs(line.at_seconds)),
                line.method,
                line.reason,
                line.decision,
                line.removed.join(", "),
                added,
                price,
                line.outcome
            );
        }
        let _ = writeln!(out);
    }

    fn faults_section(&self, out: &mut String) {
        let interruptions = &self.interruptions;
        let faults = &self.faults;
        let _ = writeln!(out, "INTERRUPTIONS AND FAULTS");
        let _ = writeln!(
            out,
            "  spot warnings {}  handled before reclaim {}  reclaimed unhandled {}  left in queue {}",
            interruptions.warnings,
            interruptions.handled,
            interruptions.reclaimed_unhandled,
            interruptions.left_in_queue
        );
        let _ = writeln!(
            out,
            "  node failures {}  aws faults {}  actor faults injected {}\n",
            faults.node_failures, faults.aws_faults_scheduled, faults.actor_faults_injected
        );
    }

    fn actors_section(&self, out: &mut String) {
        let escalated = if self.escalated {
            " (root escalated!)"
        } else {
            ""
        };
        let _ = writeln!(out, "ACTORS{escalated}");
        if self.actors.is_empty() {
            let _ = writeln!(out, "  none ran");
        } else {
            let _ = writeln!(
                out,
                "  {:<28} {:>9} {:>7} {:>7} {:>9} {:>10}",
                "KIND", "HANDLED", "ERRORS", "PANICS", "RESTARTS", "OVERFLOWS"
            );
            for (kind, totals) in &self.actors {
                let _ = writeln!(
                    out,
                    "  {:<28} {:>9} {:>7} {:>7} {:>9} {:>10}",
                    kind,
                    totals.handled,
                    totals.errors,
                    totals.panics,
                    totals.restarts,
                    totals.overflows
                );
            }
        }
        let harness = &self.harness;
        if *harness != HarnessReport::default() {
            let _ = writeln!(
                out,
                "\nHARNESS  kubelet errors {}  scheduler errors {}  workload errors {}  dropped changes {}",
                harness.kubelet_errors,
                harness.scheduler_errors,
                harness.workload_errors,
                harness.dropped_changes
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_secs).collect();
        let latency = Latency::of(&samples);
        assert_eq!(
            (
                latency.p50_seconds,
                latency.p99_seconds,
                latency.max_seconds
            ),
            (50.0, 99.0, 100.0)
        );
        assert_eq!(Latency::of(&[]).samples, 0);
    }

    #[test]
    fn actor_totals_sum_messages_per_kind_and_skip_other_metrics() {
        let text = "\
# TYPE karpenter_actor_messages_handled counter
karpenter_actor_messages_handled_total{kind=\"NodeClaimActor\",message=\"Reconcile\"} 10
karpenter_actor_messages_handled_total{kind=\"NodeClaimActor\",message=\"Launch\"} 5
karpenter_actor_restarts_total{kind=\"NodeClaimActor\"} 2
karpenter_actor_live_actors{kind=\"NodePoolActor\"} 1
karpenter_nodes_created_total{nodepool=\"default\"} 3
";
        let totals = actor_totals(text);
        assert_eq!(totals.len(), 1);
        let claims = &totals["NodeClaimActor"];
        assert_eq!((claims.handled, claims.restarts), (15, 2));
    }

    #[test]
    fn disruptions_are_summed_by_reason_over_pools_and_capacity_types() {
        let text = "\
karpenter_nodeclaims_disrupted_total{reason=\"drifted\",nodepool=\"a\",capacity_type=\"spot\"} 2
karpenter_nodeclaims_disrupted_total{reason=\"drifted\",nodepool=\"b\",capacity_type=\"on-demand\"} 3
karpenter_nodeclaims_disrupted_total{reason=\"expired\",nodepool=\"a\",capacity_type=\"spot\"} 0
karpenter_nodeclaims_unhealthy_disrupted_total{condition=\"ready\",nodepool=\"a\",capacity_type=\"spot\",image_id=\"ami-1\"} 1
";
        let by_reason = disrupted_by_reason(text);
        assert_eq!(
            by_reason.into_iter().collect::<Vec<_>>(),
            vec![("drifted".to_owned(), 5)]
        );
    }

    #[test]
    fn cost_is_billed_per_second_and_compared_with_the_bound() {
        let mut recorder = Recorder::default();
        for _ in 0..3600 {
            recorder.bill(2.0, Duration::from_secs(1));
        }
        let bound = CostLowerBound {
            per_hour: 1.0,
            ..CostLowerBound::default()
        };
        recorder.lower_bound(Some(&bound), Duration::ZERO);
        recorder.lower_bound(Some(&bound), Duration::from_hours(1));
        let cost = recorder.cost(2.0);
        assert!((cost.total - 2.0).abs() < 1e-9, "{cost:?}");
        assert_eq!(cost.lower_bound_total, Some(1.0));
        assert_eq!(cost.ratio, Some(2.0));
    }

    #[test]
    fn the_cost_section_says_what_the_bound_means_and_what_it_leaves_out() {
        let mut recorder = Recorder::default();
        let bound = CostLowerBound {
            per_hour: 0.32,
            unpriced_pods: 3,
            ..CostLowerBound::default()
        };
        recorder.lower_bound(Some(&bound), Duration::ZERO);
        let report = Report {
            cost: recorder.cost(1.71),
            ..Report::default()
        };
        let table = report.to_table();
        assert!(
            table.contains("per hour at end $1.71 (lower bound $0.32, 5.34x)"),
            "{table}"
        );
        assert!(
            table.contains(
                "lower bound: the cheapest whole nodes for each group of identical pods (its \
                 zone spread kept), or each pod at its cheapest unit price if higher, over the \
                 instance types and offerings the pods may run on (3 pods with no such offering \
                 left out)"
            ),
            "{table}"
        );
        assert!(!table.contains("estimated prices"), "{table}");
    }

    #[test]
    fn the_cost_section_names_the_types_priced_by_an_estimate() {
        let mut cost = Recorder::default().cost(0.5);
        cost.estimated_price_types = vec!["c8a.large".to_owned(), "m8a.xlarge".to_owned()];
        let table = Report {
            cost,
            ..Report::default()
        }
        .to_table();
        assert!(
            table.contains(
                "estimated prices (types missing from Karpenter's v1.5 price table, priced from \
                 their family): c8a.large, m8a.xlarge"
            ),
            "{table}"
        );
    }

    #[test]
    fn time_to_schedule_runs_from_creation_to_binding() {
        let mut recorder = Recorder::default();
        let pod = PodKey::new("default", "web-0");
        recorder.created(std::slice::from_ref(&pod), Duration::from_secs(10));
        recorder.bound(std::slice::from_ref(&pod), Duration::from_secs(55));
        assert_eq!(recorder.latencies(), [Duration::from_secs(45)]);
        assert_eq!((recorder.requested, recorder.scheduled), (1, 1));
    }
}
