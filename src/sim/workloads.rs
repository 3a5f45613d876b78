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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::sim::scenario::file::{ScaleStep, ScenarioError, Workload};
use k8s_openapi::api::core::v1::{
    Affinity, Container, Pod, PodSpec, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use karpenter_actors::ports::cluster_view::ClusterView;
use karpenter_core::domain::resources::parse_resource;
use karpenter_core::domain::scheduling::SchedulingPod;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, ResourceExt as _};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::binder::PodKey;

/// The label every pod of a workload carries, with the workload's name.
pub const APP_LABEL: &str = "app";
/// The image of the simulated containers (never pulled).
const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// Karpenter's default grace for pods without one (Kubernetes' default).
const TERMINATION_GRACE_SECONDS: i64 = 30;

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
                owner_references: Some(vec![OwnerReference {
                    api_version: "apps/v1".to_owned(),
                    kind: "ReplicaSet".to_owned(),
                    name: format!("{}-simulated", workload.name),
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
        SchedulingPod::from_pod(&named)
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

/// Every workload's controller.
pub struct Workloads {
    client: Client,
    view: Arc<dyn ClusterView>,
    templates: Vec<WorkloadTemplate>,
    next_index: Vec<u64>,
}

impl std::fmt::Debug for Workloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workloads")
            .field("templates", &self.templates.len())
            .finish_non_exhaustive()
    }
}

fn is_live(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

fn is_bound(pod: &Pod) -> bool {
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
        Self {
            client,
            view,
            templates,
            next_index,
        }
    }

    /// The templates.
    #[must_use]
    pub fn templates(&self) -> &[WorkloadTemplate] {
        &self.templates
    }

    /// Brings every workload to its replicas at simulated time `at`.
    pub async fn tick(&mut self, at: Duration) -> WorkloadStep {
        let mut step = WorkloadStep::default();
        let pods = self.view.pods();
        for index in 0..self.templates.len() {
            let template = &self.templates[index];
            let mut live: Vec<Arc<Pod>> = pods
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
                .filter_map(|p| index_of(&template.name, &p.name_any()))
                .max();
            if let Some(highest) = highest {
                self.next_index[index] = self.next_index[index].max(highest + 1);
            }
            let desired = template.desired(at);
            if live.len() < desired {
                for _ in live.len()..desired {
                    self.create(index, &mut step).await;
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
                    self.delete(pod, &mut step).await;
                }
            }
        }
        step
    }

    async fn create(&mut self, index: usize, step: &mut WorkloadStep) {
        let template = &self.templates[index];
        let name = format!("{}-{}", template.name, self.next_index[index]);
        self.next_index[index] += 1;
        let mut pod = template.pod.clone();
        pod.metadata.name = Some(name.clone());
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &template.namespace);
        match api.create(&PostParams::default(), &pod).await {
            Ok(_) => step.created.push((template.namespace.clone(), name)),
            Err(error) => {
                tracing::debug!(%error, %name, "creating a workload pod failed");
                step.errors += 1;
            }
        }
    }

    async fn delete(&self, pod: &Pod, step: &mut WorkloadStep) {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => step.deleted.push((namespace, name)),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => {
                tracing::debug!(%error, %name, "deleting a workload pod failed");
                step.errors += 1;
            }
        }
    }
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
    fn pod_names_carry_a_counter() {
        assert_eq!(index_of("web", "web-12"), Some(12));
        assert_eq!(index_of("web", "webby-1"), None);
        assert_eq!(index_of("web", "web-x"), None);
    }
}
