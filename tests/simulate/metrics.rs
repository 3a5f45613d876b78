//! The daemon's `/metrics` after the small scenario (a scale-up, a spot interruption, a lost
//! instance, consolidation) against the list of Karpenter v1.5's families in
//! `tests/fixtures/karpenter-metrics.txt`: every family listed is exported with Karpenter's type
//! and every series of it carries Karpenter's label names.
//!
//! prometheus-client (as Go's client) writes nothing for a family without series, so a family
//! is seen only once it has one: the few that the scenario cannot give a series are listed in
//! [`NO_SERIES_IN_THE_SCENARIO`] with the reason, and their own tests check them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use http::Method;
use karpenter::sim::scenario::Simulation;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;

use super::support::{SMALL, in_simulation, load, nodes, pods, repo};

const FAMILIES: &str = "tests/fixtures/karpenter-metrics.txt";

/// Listed families this daemon does not export yet (issue 19); the test fails once one of them
/// is exported, so the list only shrinks.
const NOT_YET_EXPORTED: &[&str] = &[
    "karpenter_scheduler_unfinished_work_seconds",
    "client_go_request_total",
    "client_go_request_duration_seconds",
];

/// Exported families the small scenario gives no series, and why.
const NO_SERIES_IN_THE_SCENARIO: &[(&str, &str)] = &[
    (
        "karpenter_nodeclaims_unhealthy_disrupted_total",
        "Node Repair is off (its feature gate); the nodeclaim health tests count it",
    ),
    (
        "karpenter_voluntary_disruption_queue_failures_total",
        "no disruption command fails; the disruption queue tests count it",
    ),
    (
        "karpenter_voluntary_disruption_failed_validations_total",
        "no candidate fails validation; the disruption tests count it",
    ),
    (
        "operator_nodeclaim_termination_current_time_seconds",
        "nothing is terminating at the scrape; actors/src/condition_metrics.rs tests the families' shared code",
    ),
    (
        "operator_node_termination_current_time_seconds",
        "nothing is terminating at the scrape; actors/src/condition_metrics.rs tests the families' shared code",
    ),
    (
        "operator_nodepool_termination_current_time_seconds",
        "no NodePool is deleted; actors/src/condition_metrics.rs tests the families' shared code",
    ),
    (
        "operator_nodepool_termination_duration_seconds",
        "no NodePool is deleted; actors/src/condition_metrics.rs tests the families' shared code",
    ),
    (
        "operator_ec2nodeclass_termination_current_time_seconds",
        "no EC2NodeClass is deleted; actors/src/condition_metrics.rs tests the families' shared code",
    ),
    (
        "operator_ec2nodeclass_termination_duration_seconds",
        "no EC2NodeClass is deleted; actors/src/condition_metrics.rs tests the families' shared code",
    ),
    (
        "operator_ec2nodeclass_status_condition_transition_seconds",
        "the class is Ready before the first refresh and stays so; actors/src/condition_metrics.rs tests the families' shared code",
    ),
    (
        "karpenter_pods_unbound_time_seconds",
        "every pod is bound and Ready at the scrape; actors/src/cluster_metrics.rs tests it",
    ),
    (
        "karpenter_pods_unstarted_time_seconds",
        "every pod is bound and Ready at the scrape; actors/src/cluster_metrics.rs tests it",
    ),
    (
        "karpenter_pods_provisioning_unbound_time_seconds",
        "every pod is bound and Ready at the scrape; actors/src/cluster_metrics.rs tests it",
    ),
    (
        "karpenter_pods_provisioning_unstarted_time_seconds",
        "every pod is bound and Ready at the scrape; actors/src/cluster_metrics.rs tests it",
    ),
    (
        "karpenter_pods_provisioning_scheduling_undecided_time_seconds",
        "every pod is decided at the scrape; actors/src/cluster_metrics.rs tests it",
    ),
    (
        "karpenter_scheduler_queue_depth",
        "set only while a solve runs and removed after it, as Karpenter",
    ),
];

/// Families whose type differs from Karpenter's, and why.
const TYPE_DIFFERS: &[(&str, &str, &str)] = &[];

/// A family of the list: Karpenter's name, type and label names.
#[derive(Debug)]
struct Listed {
    name: String,
    kind: String,
    labels: BTreeSet<String>,
}

fn listed() -> Vec<Listed> {
    let text = std::fs::read_to_string(repo(FAMILIES)).unwrap();
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            assert_eq!(fields.len(), 3, "{FAMILIES}: {line:?}");
            Listed {
                name: fields[0].to_owned(),
                kind: fields[1].to_owned(),
                labels: fields[2]
                    .split(',')
                    .filter(|l| *l != "-")
                    .map(str::to_owned)
                    .collect(),
            }
        })
        .collect()
}

/// What a scrape exports: each family's type (by its `# TYPE` name) and the label names of its
/// series (without `le` and `quantile`), by the sample's family.
#[derive(Debug, Default)]
struct Scrape {
    types: BTreeMap<String, String>,
    series: BTreeMap<String, Vec<BTreeSet<String>>>,
}

impl Scrape {
    fn parse(text: &str) -> Self {
        let mut scrape = Self::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                scrape.types.insert(name.to_owned(), kind.to_owned());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let end = line.find(['{', ' ']).unwrap();
            let name = &line[..end];
            let labels: BTreeSet<String> = line[end..]
                .strip_prefix('{')
                .and_then(|rest| rest.rsplit_once('}'))
                .map(|(labels, _)| labels_of(labels))
                .unwrap_or_default();
            let family = ["_total", "_bucket", "_count", "_sum", "_created"]
                .iter()
                .find_map(|suffix| {
                    name.strip_suffix(suffix)
                        .filter(|base| scrape.types.contains_key(*base))
                })
                .unwrap_or(name);
            scrape
                .series
                .entry(family.to_owned())
                .or_default()
                .push(labels);
        }
        scrape
    }

    /// The exposition name of Karpenter's `name` (prometheus-client names a counter's family
    /// without `_total`), its type and its series' label names, if exported.
    fn family(&self, name: &str, kind: &str) -> Option<(&str, &[BTreeSet<String>])> {
        let exposed = if kind == "counter" {
            name.strip_suffix("_total").unwrap_or(name)
        } else {
            name
        };
        let exported = self.types.get(exposed)?;
        Some((
            exported.as_str(),
            self.series.get(exposed).map_or(&[][..], Vec::as_slice),
        ))
    }
}

/// The label names of `a="x",b="y"` (values may hold commas and escaped quotes).
fn labels_of(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut escaped = false;
        let end = after
            .char_indices()
            .find(|&(_, c)| {
                let closes = c == '"' && !escaped;
                escaped = c == '\\' && !escaped;
                closes
            })
            .map_or(after.len(), |(i, _)| i);
        if !matches!(name, "le" | "quantile") {
            names.insert(name.to_owned());
        }
        rest = after[end..].trim_start_matches('"').trim_start_matches(',');
    }
    names
}

/// A DaemonSet's pod on `node`, with requests and limits (the scenario runs no DaemonSet).
fn daemon_pod(namespace: &str, node: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "node-agent",
            "namespace": namespace,
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "node-agent", "uid": "ds-1"
            }]
        },
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "agent",
                "image": "agent",
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"cpu": "200m", "memory": "128Mi"}
                }
            }]
        }
    }))
    .unwrap()
}

/// `/metrics` of a simulation's daemon at the end of the small scenario, with a DaemonSet's pod
/// bound to a node from the third minute.
fn scrape_after_the_small_scenario() -> String {
    in_simulation(|| async {
        let mut sim = Simulation::start(load(SMALL), None).await.unwrap();
        assert!(sim.advance(Duration::from_mins(3)).await);
        let node = nodes(&sim).await[0].metadata.name.clone().unwrap();
        let namespace = pods(&sim).await[0].metadata.namespace.clone().unwrap();
        Api::<Pod>::namespaced(sim.client(), &namespace)
            .create(&PostParams::default(), &daemon_pod(&namespace, &node))
            .await
            .unwrap();
        while sim.advance(Duration::from_mins(1)).await {}
        let reply = sim.routes().answer(&Method::GET, "/metrics", None).await;
        assert!(reply.status.is_success(), "{:?}", reply.status);
        let text = String::from_utf8(reply.body.to_vec()).unwrap();
        sim.finish().await;
        text
    })
}

#[test]
fn every_listed_karpenter_family_is_exported_with_its_type_and_labels() {
    let text = scrape_after_the_small_scenario();
    // Valid OpenMetrics text as a scraper reads it, the summaries appended after the registries
    // included.
    if let Err(problem) = super::exposition::check(&text) {
        panic!("{problem}\n\n{text}");
    }
    let scrape = Scrape::parse(&text);
    let mut problems = Vec::new();
    for family in listed() {
        let pending = NOT_YET_EXPORTED.contains(&family.name.as_str());
        let Some((kind, series)) = scrape.family(&family.name, &family.kind) else {
            let excused = NO_SERIES_IN_THE_SCENARIO
                .iter()
                .any(|(name, _)| *name == family.name);
            if !pending && !excused {
                problems.push(format!("{} ({}) has no series", family.name, family.kind));
            }
            continue;
        };
        if pending {
            problems.push(format!(
                "{} is exported now: take it out of NOT_YET_EXPORTED",
                family.name
            ));
        }
        let differs = TYPE_DIFFERS
            .iter()
            .any(|(name, ours, _)| *name == family.name && *ours == kind);
        if kind != family.kind && !differs {
            problems.push(format!(
                "{} is a {kind}, Karpenter's a {}",
                family.name, family.kind
            ));
        }
        for labels in series {
            if *labels != family.labels {
                problems.push(format!(
                    "{} has a series labeled {labels:?}, Karpenter's {:?}",
                    family.name, family.labels
                ));
                break;
            }
        }
    }
    assert!(problems.is_empty(), "{}\n\n{text}", problems.join("\n"));
}

#[test]
fn the_scrape_reader_finds_families_and_label_names() {
    let scrape = Scrape::parse(
        "# TYPE a counter\na_total{x=\"1,y=\\\"2\\\"\",z=\"\"} 1\n# TYPE h histogram\n\
         h_bucket{le=\"1.0\",c=\"p\"} 1\nh_count{c=\"p\"} 1\n# TYPE g gauge\ng 2\n# EOF\n",
    );
    let (kind, series) = scrape.family("a_total", "counter").unwrap();
    assert_eq!(kind, "counter");
    assert_eq!(series[0], BTreeSet::from(["x".to_owned(), "z".to_owned()]));
    let (_, series) = scrape.family("h", "histogram").unwrap();
    assert!(
        series
            .iter()
            .all(|l| *l == BTreeSet::from(["c".to_owned()]))
    );
    let (_, series) = scrape.family("g", "gauge").unwrap();
    assert_eq!(series, [BTreeSet::new()]);
    assert!(scrape.family("missing", "gauge").is_none());
}

const DASHBOARD_QUERIES: &str = "tests/fixtures/karpenter-dashboard-queries.txt";

/// A label a dashboard query needs, with the value it selects if any.
type Wanted = (String, Option<String>);

/// A dashboard query's sample name and the labels (`name` or `name=value`) it needs.
fn dashboard_queries() -> Vec<(String, Vec<Wanted>)> {
    let text = std::fs::read_to_string(repo(DASHBOARD_QUERIES)).unwrap();
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (name, labels) = line
                .split_once(' ')
                .unwrap_or_else(|| panic!("{DASHBOARD_QUERIES}: {line:?}"));
            let labels = labels
                .split(',')
                .filter(|l| *l != "-")
                .map(|l| match l.split_once('=') {
                    Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
                    None => (l.to_owned(), None),
                })
                .collect();
            (name.to_owned(), labels)
        })
        .collect()
}

/// The label pairs of every sample line of `name` in `text`.
fn samples_of(text: &str, name: &str) -> Vec<Vec<(String, String)>> {
    text.lines()
        .filter_map(|line| line.strip_prefix(name))
        .filter(|rest| rest.starts_with('{') || rest.starts_with(' '))
        .map(|rest| {
            let inner = rest
                .strip_prefix('{')
                .and_then(|r| r.rsplit_once('}'))
                .map_or("", |(inner, _)| inner);
            let mut pairs = Vec::new();
            let mut remaining = inner;
            while let Some((label, after)) = remaining.split_once("=\"") {
                let end = after.find('"').unwrap_or(after.len());
                pairs.push((label.to_owned(), after[..end].to_owned()));
                remaining = after[end..].trim_start_matches('"').trim_start_matches(',');
            }
            pairs
        })
        .collect()
}

#[test]
fn every_metric_of_karpenters_capacity_and_performance_dashboards_is_exported_with_its_labels() {
    let text = scrape_after_the_small_scenario();
    let mut missing = Vec::new();
    for (name, wanted) in dashboard_queries() {
        let samples = samples_of(&text, &name);
        let found = samples.iter().any(|pairs| {
            wanted.iter().all(|(label, value)| {
                pairs
                    .iter()
                    .any(|(l, v)| l == label && value.as_ref().is_none_or(|value| v == value))
            })
        });
        if !found {
            missing.push(format!("{name} {wanted:?} ({} series)", samples.len()));
        }
    }
    assert!(missing.is_empty(), "{}\n\n{text}", missing.join("\n"));
}
