//! The scenario's workloads as Deployments would run them: each keeps as many live pods as its
//! current step asks for, creating pods when it is short (scale-up, or pods evicted, deleted by
//! a drain or lost with their node) and deleting some when it has too many (scale-down: unbound
//! pods first, then the newest), as the `ReplicaSet` controller does.
//!
//! [`WorkloadTemplate::from_workload`] turns a scenario workload into a pod template, checking
//! the embedded Kubernetes fields (quantities, tolerations, spread constraints, affinity) with
//! errors that name the scenario field; [`Workloads::tick`] reconciles them against the cluster
//! store and returns the pods it created and deleted. Pod names are `<workload>-<n>` with a
//! counter, so runs replay.
//!
//! Each workload's `ReplicaSet` is stored too, its `spec.replicas` following the steps, so
//! PodDisruptionBudgets with `maxUnavailable` or a percentage count the replicas the
//! workload wants, as Kubernetes' disruption controller does.
//!
//! Each replica is followed as a lineage ([`Lineages`]): a pod that leaves the live set without
//! this controller deleting it (evicted by a drain, deleted at a spot interruption's termination
//! time, lost with its node) counts one eviction against its replica, and the pod created to
//! replace it inherits the count. A scale-down ends a lineage without counting.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crate::sim::scenario::file::{ScaleStep, ScenarioError, Workload};
use crate::sim::writes;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Container, Pod, PodSpec, PodTemplateSpec, ResourceRequirements, Toleration,
    TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use karpenter_actors::messages::WatchedKind;
use karpenter_actors::ports::cluster_view::{ChangeMark, ClusterView};
use karpenter_core::apis::SlimPod;
use karpenter_core::domain::resources::parse_resource;
use karpenter_core::domain::scheduling::SchedulingPod;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::binder::PodKey;

/// The label every pod of a workload carries, with the workload's name.
pub const APP_LABEL: &str = "app";
/// The image of the simulated containers (never pulled).
const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// Karpenter's default grace for pods without one (Kubernetes' default).
const TERMINATION_GRACE_SECONDS: i64 = 30;

/// The `ReplicaSet` that owns a workload's pods.
fn replica_set_name(workload: &str) -> String {
    format!("{workload}-simulated")
}

/// Reads an embedded Kubernetes field (a YAML value of the scenario) as its type.
fn from_yaml<T: DeserializeOwned>(path: &str, value: &Value) -> Result<T, ScenarioError> {
    serde_json::from_value(value.clone()).map_err(|e| ScenarioError::invalid(path, e.to_string()))
}

/// A workload's pod template and scaling steps.
#[derive(Debug, Clone)]
pub struct WorkloadTemplate {
    pub name: String,
    pub namespace: String,
    pub steps: Vec<ScaleStep>,
    /// The pod, without a name.
    pub pod: Pod,
}

impl WorkloadTemplate {
    /// Builds and checks the template of `workload` (the `index`th of the scenario).
    pub fn from_workload(index: usize, workload: &Workload) -> Result<Self, ScenarioError> {
        let path = format!("workloads[{index}]");
        let mut requests = BTreeMap::new();
        for (resource, value) in &workload.requests {
            parse_resource(resource, value).map_err(|e| {
                ScenarioError::invalid(format!("{path}.requests.{resource}"), e.to_string())
            })?;
            requests.insert(resource.clone(), Quantity(value.clone()));
        }
        let tolerations = workload
            .tolerations
            .iter()
            .enumerate()
            .map(|(i, t)| from_yaml::<Toleration>(&format!("{path}.tolerations[{i}]"), t))
            .collect::<Result<Vec<_>, _>>()?;
        let mut labels = workload.labels.clone();
        labels.insert(APP_LABEL.to_owned(), workload.name.clone());
        let spread = workload
            .topology_spread_constraints
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut constraint: TopologySpreadConstraint =
                    from_yaml(&format!("{path}.topologySpreadConstraints[{i}]"), c)?;
                constraint
                    .label_selector
                    .get_or_insert_with(|| LabelSelector {
                        match_labels: Some([(APP_LABEL.to_owned(), workload.name.clone())].into()),
                        ..LabelSelector::default()
                    });
                Ok(constraint)
            })
            .collect::<Result<Vec<_>, ScenarioError>>()?;
        let affinity = workload
            .affinity
            .as_ref()
            .map(|a| from_yaml::<Affinity>(&format!("{path}.affinity"), a))
            .transpose()?;
        let pod = Pod {
            metadata: ObjectMeta {
                namespace: Some(workload.namespace.clone()),
                labels: Some(labels),
                annotations: (!workload.annotations.is_empty())
                    .then(|| workload.annotations.clone()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".to_owned(),
                    kind: "ReplicaSet".to_owned(),
                    name: replica_set_name(&workload.name),
                    uid: format!("simulated-{}-{}", workload.namespace, workload.name),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".to_owned(),
                    image: Some(PAUSE_IMAGE.to_owned()),
                    resources: Some(ResourceRequirements {
                        requests: (!requests.is_empty()).then_some(requests),
                        ..ResourceRequirements::default()
                    }),
                    ..Container::default()
                }],
                node_selector: (!workload.node_selector.is_empty())
                    .then(|| workload.node_selector.clone()),
                tolerations: (!tolerations.is_empty()).then_some(tolerations),
                topology_spread_constraints: (!spread.is_empty()).then_some(spread),
                affinity,
                termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
                ..PodSpec::default()
            }),
            status: None,
        };
        let mut named = pod.clone();
        named.metadata.name = Some(format!("{}-0", workload.name));
        SchedulingPod::from_pod(&SlimPod::from(named))
            .map_err(|e| ScenarioError::invalid(path.clone(), e.to_string()))?;
        Ok(Self {
            name: workload.name.clone(),
            namespace: workload.namespace.clone(),
            steps: workload.steps.clone(),
            pod,
        })
    }

    /// Replicas wanted at simulated time `at` (0 before the first step).
    #[must_use]
    pub fn desired(&self, at: Duration) -> usize {
        self.steps
            .iter()
            .take_while(|s| s.at <= at)
            .last()
            .map_or(0, |s| usize::try_from(s.replicas).unwrap_or(usize::MAX))
    }

    /// Replicas of the largest step.
    #[must_use]
    pub fn peak(&self) -> usize {
        self.steps
            .iter()
            .map(|s| usize::try_from(s.replicas).unwrap_or(usize::MAX))
            .max()
            .unwrap_or(0)
    }
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkloadStep {
    pub created: Vec<PodKey>,
    pub deleted: Vec<PodKey>,
    /// Failed writes (retried next tick).
    pub errors: usize,
}

/// A pod the controller follows.
#[derive(Debug, Clone, Copy)]
struct Tracked {
    lineage: u32,
    /// Whether the view has shown it live (a pod just created may not be there yet).
    seen: bool,
}

/// A followed pod's name: the counter of a `<workload>-<n>` name (every pod this controller
/// creates), else the name itself. A 5,000-node scale run follows 50,000 pods: keyed by their
/// names as strings, the table was about 4 MB (sampled) at the run's peak, and each tick's
/// set of live names copied every name again while it lived.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum PodName {
    Counter(u64),
    Other(Box<str>),
}

/// The replicas of one workload as lineages: each pod belongs to one, and a replacement joins
/// the lineage of the pod it replaces (see the module docs).
#[derive(Debug, Default)]
pub struct Lineages {
    /// The workload's name, which its pods' names start with.
    workload: String,
    /// Evictions per lineage, by lineage id (in the order lineages started).
    evictions: Vec<u32>,
    /// Pods of the workload by name.
    pods: BTreeMap<PodName, Tracked>,
    /// Lineages whose pod went and that wait for a replacement, oldest first.
    waiting: VecDeque<u32>,
    /// Pods this controller deleted on a scale-down, until they leave the view.
    scaled_down: BTreeSet<PodName>,
}

impl Lineages {
    #[must_use]
    pub fn new(workload: &str) -> Self {
        Self {
            workload: workload.to_owned(),
            ..Self::default()
        }
    }

    fn name(&self, pod: &str) -> PodName {
        index_of(&self.workload, pod).map_or_else(|| PodName::Other(pod.into()), PodName::Counter)
    }

    /// Compares the live pods with the followed ones: a followed pod seen before and now gone
    /// was evicted unless this controller scaled it down; a live pod not followed yet (one
    /// from before a restart) starts a lineage.
    fn observe<'a>(&mut self, live: impl IntoIterator<Item = &'a str>) {
        let live: BTreeSet<PodName> = live.into_iter().map(|pod| self.name(pod)).collect();
        let gone: Vec<PodName> = self
            .pods
            .iter()
            .filter(|(name, tracked)| tracked.seen && !live.contains(*name))
            .map(|(name, _)| name.clone())
            .collect();
        for name in gone {
            let Some(tracked) = self.pods.remove(&name) else {
                continue;
            };
            if !self.scaled_down.remove(&name) {
                if let Some(count) = self.evictions.get_mut(tracked.lineage as usize) {
                    *count += 1;
                }
                self.waiting.push_back(tracked.lineage);
            }
        }
        for name in live {
            if let Some(tracked) = self.pods.get_mut(&name) {
                tracked.seen = true;
            } else {
                let lineage = self.start();
                self.pods.insert(
                    name,
                    Tracked {
                        lineage,
                        seen: true,
                    },
                );
            }
        }
    }

    fn start(&mut self) -> u32 {
        self.evictions.push(0);
        u32::try_from(self.evictions.len() - 1).unwrap_or(u32::MAX)
    }

    /// A pod created: the replacement of the oldest waiting lineage, else a new replica.
    fn created(&mut self, pod: &str) {
        let lineage = match self.waiting.pop_front() {
            Some(lineage) => lineage,
            None => self.start(),
        };
        self.pods.insert(
            self.name(pod),
            Tracked {
                lineage,
                seen: false,
            },
        );
    }

    /// This controller deleted `pod` on a scale-down: its leaving is no eviction.
    fn note_scale_down(&mut self, pod: &str) {
        self.scaled_down.insert(self.name(pod));
    }

    /// Lineages still waiting beyond `shortfall` replicas are scaled away: they end.
    fn keep_waiting(&mut self, shortfall: usize) {
        self.waiting.truncate(shortfall);
    }

    /// Evictions of every lineage so far.
    #[must_use]
    pub fn evictions(&self) -> &[u32] {
        &self.evictions
    }
}

/// Every workload's controller.
pub struct Workloads {
    client: Client,
    view: Arc<dyn ClusterView>,
    templates: Vec<WorkloadTemplate>,
    next_index: Vec<u64>,
    lineages: Vec<Lineages>,
    /// The `spec.replicas` last written to each workload's `ReplicaSet`.
    scales: Vec<Option<usize>>,
    /// Pods as of the last tick that found every workload at its replicas, with the replicas
    /// it wanted: the next tick with both the same has nothing to do.
    settled: (ChangeMark<1>, Vec<usize>),
}

impl std::fmt::Debug for Workloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workloads")
            .field("templates", &self.templates.len())
            .finish_non_exhaustive()
    }
}

fn is_live(pod: &SlimPod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

fn is_bound(pod: &SlimPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// The counter in a `<workload>-<n>` name.
fn index_of(workload: &str, pod: &str) -> Option<u64> {
    pod.strip_prefix(workload)?.strip_prefix('-')?.parse().ok()
}

impl Workloads {
    #[must_use]
    pub fn new(
        client: Client,
        view: Arc<dyn ClusterView>,
        templates: Vec<WorkloadTemplate>,
    ) -> Self {
        let next_index = vec![0; templates.len()];
        let lineages = templates.iter().map(|t| Lineages::new(&t.name)).collect();
        let scales = vec![None; templates.len()];
        Self {
            client,
            view,
            templates,
            next_index,
            lineages,
            scales,
            settled: (ChangeMark::new([WatchedKind::Pod]), Vec::new()),
        }
    }

    /// Replicas (lineages, over every workload and the whole run) by how many times their pod
    /// was evicted.
    #[must_use]
    pub fn replicas_by_evictions(&self) -> BTreeMap<u32, usize> {
        let mut histogram = BTreeMap::new();
        for count in self.lineages.iter().flat_map(|l| l.evictions().iter()) {
            *histogram.entry(*count).or_default() += 1;
        }
        histogram
    }

    /// The templates.
    #[must_use]
    pub fn templates(&self) -> &[WorkloadTemplate] {
        &self.templates
    }

    /// Brings every workload to its replicas at simulated time `at`.
    pub async fn tick(&mut self, at: Duration) -> WorkloadStep {
        let mut step = WorkloadStep::default();
        let wanted: Vec<usize> = self.templates.iter().map(|t| t.desired(at)).collect();
        let counts = self.settled.0.read(self.view.as_ref());
        if self.settled.0.unchanged(counts) && self.settled.1 == wanted {
            return step;
        }
        let mut at_replicas = true;
        let pods = self.view.pods();
        for index in 0..self.templates.len() {
            let template = &self.templates[index];
            let mut live: Vec<Arc<SlimPod>> = pods
                .iter()
                .filter(|p| {
                    p.namespace().as_deref() == Some(template.namespace.as_str())
                        && p.labels().get(APP_LABEL) == Some(&template.name)
                        && is_live(p)
                })
                .cloned()
                .collect();
            // Continue the counter after any pod already there (a restarted simulation).
            let highest = pods
                .iter()
                .filter(|p| p.namespace().as_deref() == Some(template.namespace.as_str()))
                .filter_map(|p| index_of(&template.name, p.metadata.name.as_deref()?))
                .max();
            if let Some(highest) = highest {
                self.next_index[index] = self.next_index[index].max(highest + 1);
            }
            self.lineages[index].observe(live.iter().filter_map(|p| p.metadata.name.as_deref()));
            let desired = template.desired(at);
            if self.scales[index] != Some(desired) {
                self.scale(index, desired, &mut step).await;
            }
            let template = &self.templates[index];
            let mut shortfall = desired.saturating_sub(live.len());
            if live.len() < desired {
                for _ in live.len()..desired {
                    if self.create(index, &mut step).await {
                        shortfall -= 1;
                    }
                }
            } else if live.len() > desired {
                // Unbound pods go first, then the newest (highest counter).
                live.sort_by_key(|p| {
                    (
                        is_bound(p),
                        std::cmp::Reverse(index_of(&template.name, &p.name_any())),
                    )
                });
                let surplus = live.len() - desired;
                for pod in live.iter().take(surplus) {
                    if self.delete(pod, &mut step).await {
                        self.lineages[index].note_scale_down(&pod.name_any());
                    }
                }
            }
            self.lineages[index].keep_waiting(shortfall);
            at_replicas &= live.len() == desired;
        }
        let settled =
            at_replicas && step.created.is_empty() && step.deleted.is_empty() && step.errors == 0;
        self.settled.0.mark(counts.filter(|_| settled));
        self.settled.1 = wanted;
        step
    }

    /// Writes `replicas` to the `index`th workload's `ReplicaSet`, creating it the first time.
    async fn scale(&mut self, index: usize, replicas: usize, step: &mut WorkloadStep) {
        let template = &self.templates[index];
        let name = replica_set_name(&template.name);
        let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), &template.namespace);
        let count = i32::try_from(replicas).unwrap_or(i32::MAX);
        let written = if self.scales[index].is_none() {
            let labels = template.pod.metadata.labels.clone();
            let selector = [(APP_LABEL.to_owned(), template.name.clone())].into();
            let replica_set = ReplicaSet {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(template.namespace.clone()),
                    labels: labels.clone(),
                    ..ObjectMeta::default()
                },
                spec: ReplicaSetSpec {
                    replicas: Some(count),
                    selector: LabelSelector {
                        match_labels: Some(selector),
                        ..LabelSelector::default()
                    },
                    template: Some(PodTemplateSpec {
                        metadata: Some(ObjectMeta {
                            labels,
                            annotations: template.pod.metadata.annotations.clone(),
                            ..ObjectMeta::default()
                        }),
                        spec: template.pod.spec.clone(),
                    }),
                    min_ready_seconds: None,
                },
                status: None,
            };
            match api.create(&PostParams::default(), &replica_set).await {
                Ok(_) => Ok(()),
                // A restarted simulation: the ReplicaSet is there; set its scale.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    patch_replicas(&api, &name, count).await
                }
                Err(error) => Err(error),
            }
        } else {
            patch_replicas(&api, &name, count).await
        };
        match written {
            Ok(()) => self.scales[index] = Some(replicas),
            Err(error) => {
                // Retried next tick.
                tracing::debug!(%error, %name, "writing a workload's ReplicaSet failed");
                step.errors += 1;
            }
        }
    }

    /// Creates the next pod of the `index`th workload; true when it was created.
    async fn create(&mut self, index: usize, step: &mut WorkloadStep) -> bool {
        let template = &self.templates[index];
        let name = format!("{}-{}", template.name, self.next_index[index]);
        self.next_index[index] += 1;
        let mut pod = template.pod.clone();
        pod.metadata.name = Some(name.clone());
        match writes::create_pod(&self.client, &template.namespace, &pod).await {
            Ok(()) => {
                step.created.push(PodKey::new(&template.namespace, &name));
                self.lineages[index].created(&name);
                true
            }
            Err(error) => {
                tracing::debug!(%error, %name, "creating a workload pod failed");
                step.errors += 1;
                false
            }
        }
    }

    /// Deletes a surplus pod; true when this call deleted it.
    async fn delete(&self, pod: &SlimPod, step: &mut WorkloadStep) -> bool {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                step.deleted.push(PodKey::new(&namespace, &name));
                true
            }
            Err(kube::Error::Api(status)) if status.code == 404 => false,
            Err(error) => {
                tracing::debug!(%error, %name, "deleting a workload pod failed");
                step.errors += 1;
                false
            }
        }
    }
}

async fn patch_replicas(api: &Api<ReplicaSet>, name: &str, replicas: i32) -> kube::Result<()> {
    let patch = serde_json::json!({ "spec": { "replicas": replicas } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::scenario::file::Scenario;

    fn workload(extra: &str) -> Workload {
        let text = format!(
            "name: t\nduration: 10m\nworkloads:\n  - name: web\n    requests: {{cpu: 500m, memory: 1Gi}}\n    steps:\n      - {{at: 0s, replicas: 2}}\n      - {{at: 5m, replicas: 7}}\n{extra}"
        );
        Scenario::from_yaml(&text)
            .expect("scenario")
            .workloads
            .remove(0)
    }

    #[test]
    fn replicas_follow_the_steps() {
        let template = WorkloadTemplate::from_workload(0, &workload("")).unwrap();
        assert_eq!(template.desired(Duration::ZERO), 2);
        assert_eq!(template.desired(Duration::from_secs(299)), 2);
        assert_eq!(template.desired(Duration::from_mins(5)), 7);
        assert_eq!(template.peak(), 7);
    }

    #[test]
    fn spread_constraints_select_the_workloads_pods_by_default() {
        let template = WorkloadTemplate::from_workload(
            0,
            &workload("    topologySpreadConstraints:\n      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}\n"),
        )
        .unwrap();
        let spec = template.pod.spec.unwrap();
        let selector = spec.topology_spread_constraints.unwrap()[0]
            .label_selector
            .clone()
            .unwrap();
        assert_eq!(
            selector
                .match_labels
                .unwrap()
                .get(APP_LABEL)
                .map(String::as_str),
            Some("web")
        );
    }

    #[test]
    fn bad_embedded_fields_name_the_scenario_field() {
        let error = WorkloadTemplate::from_workload(
            0,
            &workload("    tolerations:\n      - {key: a, operator: Exists, effect: NoSchedule, tolerationSeconds: soon}\n"),
        )
        .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("workloads[0].tolerations[0]: "),
            "{error}"
        );
        let mut bad = workload("");
        bad.requests.insert("cpu".into(), "lots".into());
        let error = WorkloadTemplate::from_workload(0, &bad).unwrap_err();
        assert!(
            error.to_string().starts_with("workloads[0].requests.cpu: "),
            "{error}"
        );
        let error = WorkloadTemplate::from_workload(
            0,
            &workload("    topologySpreadConstraints:\n      - {maxSkew: 0, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}\n"),
        )
        .unwrap_err();
        assert!(error.to_string().contains("maxSkew"), "{error}");
    }

    #[test]
    fn a_replacement_inherits_the_evictions_of_the_pod_it_replaces() {
        let mut lineages = Lineages::new("web");
        lineages.created("web-0");
        lineages.created("web-1");
        // Not in the view yet: not evicted.
        lineages.observe([]);
        assert_eq!(lineages.evictions(), [0, 0]);
        lineages.observe(["web-0", "web-1"]);
        // web-1 evicted, replaced by web-2, which is evicted in turn.
        lineages.observe(["web-0"]);
        lineages.created("web-2");
        lineages.observe(["web-0", "web-2"]);
        lineages.observe(["web-0"]);
        lineages.created("web-3");
        lineages.observe(["web-0", "web-3"]);
        assert_eq!(lineages.evictions(), [0, 2]);
    }

    #[test]
    fn a_scale_down_is_no_eviction_and_ends_waiting_lineages() {
        let mut lineages = Lineages::new("web");
        for name in ["web-0", "web-1", "web-2"] {
            lineages.created(name);
        }
        lineages.observe(["web-0", "web-1", "web-2"]);
        lineages.note_scale_down("web-2");
        // web-2 scaled down, web-1 evicted, and the workload wants one pod: nothing replaces it.
        lineages.observe(["web-0"]);
        lineages.keep_waiting(0);
        lineages.created("web-3");
        assert_eq!(lineages.evictions(), [0, 1, 0, 0]);
    }

    #[test]
    fn a_pod_named_without_the_counter_is_followed_by_its_name() {
        let mut lineages = Lineages::new("web");
        lineages.created("web-0");
        // A pod of the workload from elsewhere (its label, another name), and one whose
        // counter is not a number: each starts a lineage when seen.
        lineages.observe(["web-0", "stray", "web-x"]);
        assert_eq!(lineages.evictions(), [0, 0, 0]);
        lineages.observe(["web-0", "web-x"]);
        assert_eq!(lineages.evictions(), [0, 1, 0]);
        // The replacement joins the stray pod's lineage.
        lineages.created("web-1");
        lineages.observe(["web-0", "web-1", "web-x"]);
        lineages.observe(["web-0", "web-x"]);
        assert_eq!(lineages.evictions(), [0, 2, 0]);
    }

    #[test]
    fn pod_names_carry_a_counter() {
        assert_eq!(index_of("web", "web-12"), Some(12));
        assert_eq!(index_of("web", "webby-1"), None);
        assert_eq!(index_of("web", "web-x"), None);
    }
}
