//! A simulated cluster without Karpenter's actors: the emulator on the simulated clock, its
//! watchers' store, kwok's AWS account, the fake kubelet and scheduler; and what the tests of
//! whole simulations share: scenarios, listings of the emulator's objects, readings of them.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node, NodeCondition, Pod};
use karpenter::emulator::{Emulator, EmulatorConfig};
use karpenter::kube::ingress::ClusterIngress;
use karpenter::sim::binder::FakeScheduler;
use karpenter::sim::clock::{SIMULATION_EPOCH_SECONDS, SimClock};
use karpenter::sim::kubelet::{FakeKubelet, KubeletConfig, KubeletDeps};
use karpenter::sim::report::Report;
use karpenter::sim::scenario::{LoadedScenario, Simulation};
use karpenter::sim::world::{KwokAws, KwokAwsConfig};
use karpenter_actors::ports::cloud_provider::parse_provider_id;
use karpenter_actors::ports::cluster_view::ClusterView;
use karpenter_actors::ports::ec2::InstanceState;
use karpenter_actors::testing::on_paused_clock;
use karpenter_core::apis::conditions::ConditionStatus;
use karpenter_core::apis::{NodeClaim, NodePool};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde::de::DeserializeOwned;

pub const REGION: &str = "us-west-2";

pub struct Cluster {
    /// Kept alive for the cluster's lifetime.
    pub _emulator: Emulator,
    pub client: kube::Client,
    pub world: KwokAws,
    pub kubelet: FakeKubelet,
    pub scheduler: FakeScheduler,
}

pub fn kubelet_config() -> KubeletConfig {
    KubeletConfig {
        registration_delay: Duration::from_secs(20),
        ready_delay: Duration::from_secs(5),
        startup_taint_delay: Duration::from_secs(10),
    }
}

impl Cluster {
    /// Call inside a paused tokio runtime.
    pub async fn start() -> Self {
        let clock = SimClock::at_epoch();
        let emulator = Emulator::with_config(EmulatorConfig {
            clock: clock.for_emulator(),
            seed: 7,
            ..EmulatorConfig::default()
        })
        .unwrap();
        let client = emulator.client();
        let ingress = ClusterIngress::new(client.clone());
        let state = ingress.state();
        tokio::spawn(ingress.run());
        state.wait_until_ready().await.unwrap();
        let world = KwokAws::new(
            &KwokAwsConfig {
                region: REGION.into(),
                cluster_name: "simulated".into(),
                launch_latency: Duration::from_secs(15),
            },
            Arc::new(clock),
        )
        .unwrap();
        let view: Arc<dyn ClusterView> = Arc::new(state.clone());
        let kubelet = FakeKubelet::new(
            KubeletDeps {
                client: client.clone(),
                ec2: Arc::clone(&world.ec2),
                view: Arc::clone(&view),
                clock: Arc::new(clock),
                region: REGION.into(),
            },
            kubelet_config(),
        );
        let scheduler = FakeScheduler::new(client.clone(), view, Arc::new(clock));
        Self {
            _emulator: emulator,
            client,
            world,
            kubelet,
            scheduler,
        }
    }

    /// Advances simulated time by `seconds`, ticking the kubelet and scheduler every second.
    pub async fn run_for(&mut self, seconds: u64) {
        for _ in 0..seconds {
            tokio::time::sleep(Duration::from_secs(1)).await;
            self.kubelet.tick().await;
            self.scheduler.tick().await;
        }
    }
}

/// Runs `body` as `karpenter simulate` runs: an actix System on paused tokio time.
pub fn in_simulation<F: Future>(body: impl FnOnce() -> F) -> F::Output {
    on_paused_clock(body).unwrap()
}

/// A file of the repository, by its path from the repository's root.
pub fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The scenario file at `path` (from the repository's root).
pub fn load(path: &str) -> LoadedScenario {
    LoadedScenario::from_yaml(&std::fs::read_to_string(repo(path)).unwrap(), None).unwrap()
}

/// The small scenario the lifecycle tests run.
pub const SMALL: &str = "tests/fixtures/scenarios/small.yaml";

/// [`SMALL`] without consolidation: these tests follow NodeClaims through launches and
/// restarts, and a consolidation replacing one meanwhile is another test's subject.
pub fn small_without_consolidation() -> LoadedScenario {
    small_without_consolidation_and("")
}

/// [`small_without_consolidation`] with `template_spec` (YAML lines indented for the pool's
/// `spec.template.spec`) added to its NodePool's template.
pub fn small_without_consolidation_and(template_spec: &str) -> LoadedScenario {
    let text = std::fs::read_to_string(repo(SMALL)).unwrap();
    let limits = "      limits:\n        cpu: \"200\"\n";
    let requirements = "          requirements:\n";
    assert!(text.contains(limits), "small.yaml's NodePool limits moved");
    assert!(
        text.contains(requirements),
        "small.yaml's requirements moved"
    );
    let text = text
        .replace(
            limits,
            &format!("{limits}      disruption:\n        consolidateAfter: Never\n"),
        )
        .replace(requirements, &format!("{template_spec}{requirements}"));
    LoadedScenario::from_yaml(&text, None).unwrap()
}

/// Every object of a kind in the emulator.
async fn list<K>(sim: &Simulation<'_>) -> Vec<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    Api::<K>::all(sim.client())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

pub async fn nodeclaims(sim: &Simulation<'_>) -> Vec<NodeClaim> {
    list(sim).await
}

pub async fn nodes(sim: &Simulation<'_>) -> Vec<Node> {
    list(sim).await
}

pub async fn pods(sim: &Simulation<'_>) -> Vec<Pod> {
    list(sim).await
}

/// Whether the pod is bound to a node.
pub fn is_bound(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
}

/// Instance ids of the NodeClaims, one per launched NodeClaim.
pub fn claimed_instances(claims: &[NodeClaim]) -> Vec<String> {
    claims
        .iter()
        .filter_map(|c| c.status.as_ref().and_then(|s| s.provider_id.clone()))
        .map(|p| parse_provider_id(&p).unwrap().1.to_owned())
        .collect()
}

/// kwok instances that are pending or running.
pub fn live_instances(sim: &Simulation<'_>) -> BTreeSet<String> {
    sim.world()
        .ec2
        .instances()
        .into_iter()
        .filter(|i| matches!(i.state, InstanceState::Pending | InstanceState::Running))
        .map(|i| i.id)
        .collect()
}

/// A registered NodeClaim: its name, its node and its instance id.
pub async fn registered(sim: &Simulation<'_>) -> (String, String, String) {
    let claims = nodeclaims(sim).await;
    let victim = claims
        .iter()
        .find(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some()
        })
        .expect("a registered NodeClaim")
        .clone();
    let name = victim.metadata.name.clone().unwrap();
    let node = victim.status.as_ref().unwrap().node_name.clone().unwrap();
    let instance = claimed_instances(std::slice::from_ref(&victim)).remove(0);
    (name, node, instance)
}

/// Deletes the NodeClaim as a user would (`kubectl delete nodeclaim`).
pub async fn delete_nodeclaim(sim: &Simulation<'_>, name: &str) {
    Api::<NodeClaim>::all(sim.client())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

/// The node's `Ready` condition.
pub fn ready_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// The keys of the node's taints.
pub fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.key)
        .collect()
}

/// The report's disruption commands, one line each (for failure messages).
pub fn commands(report: &Report) -> String {
    report
        .disruptions
        .iter()
        .map(|d| {
            format!(
                "  {}s {} {} {} {:?} {:?}->{:?} ({})",
                d.at_seconds,
                d.method,
                d.reason,
                d.decision,
                d.nodes,
                d.price_before,
                d.price_after,
                d.outcome
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A one-pool cluster as upstream's e2e suites build it (`env.DefaultNodePool`, a
/// `coretest.Deployment`), written as a scenario: kwok's quick timings, the pool `default` over
/// the class `default`, the `requirements` (YAML flow maps), the pool's `disruption` (YAML lines
/// at 8 spaces), the `workloads` (YAML list items at 2 spaces) and `top`-level fields
/// (`featureGates`, `interruptions`, ...).
#[derive(Debug, Clone)]
pub struct PoolScenario<'a> {
    pub duration: &'a str,
    /// The pool's `spec.template.metadata` (YAML lines at 8 spaces).
    pub template_metadata: &'a str,
    /// The class's `amiSelectorTerms` alias.
    pub alias: &'a str,
    pub requirements: &'a [&'a str],
    pub disruption: &'a str,
    pub workloads: &'a str,
    pub top: &'a str,
}

impl Default for PoolScenario<'_> {
    fn default() -> Self {
        Self {
            duration: "30m",
            template_metadata: "",
            alias: "al2023@latest",
            requirements: &[],
            disruption: "        consolidateAfter: Never\n",
            workloads: "",
            top: "",
        }
    }
}

/// The name of [`PoolScenario`]'s NodePool and EC2NodeClass.
pub const POOL: &str = "default";

impl PoolScenario<'_> {
    pub fn yaml(&self) -> String {
        let requirements = self
            .requirements
            .iter()
            .fold(String::new(), |all, r| all + "            - " + r + "\n");
        format!(
            r"name: upstream-suite
seed: 18
duration: {duration}
progressEvery: 1h
kwok:
  launchLatency: 10s
  registrationDelay: 10s
  readyDelay: 5s
  startupTaintDelay: 5s
nodePools:
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata:
      name: {POOL}
    spec:
      template:
{template_metadata}        spec:
          nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {POOL}}}
          requirements:
{requirements}      disruption:
{disruption}ec2NodeClasses:
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata:
      name: {POOL}
    spec:
      role: KarpenterNodeRole-simulated
      amiSelectorTerms:
        - alias: {alias}
      subnetSelectorTerms:
        - tags:
            karpenter.sh/discovery: simulated
      securityGroupSelectorTerms:
        - tags:
            karpenter.sh/discovery: simulated
workloads:
{workloads}{top}",
            duration = self.duration,
            template_metadata = self.template_metadata,
            alias = self.alias,
            disruption = self.disruption,
            workloads = self.workloads,
            top = self.top,
        )
    }

    pub fn load(&self) -> LoadedScenario {
        let yaml = self.yaml();
        LoadedScenario::from_yaml(&yaml, None).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
    }
}

/// The node, if it exists: `Some(deleting)`.
pub async fn node_state(sim: &Simulation<'_>, node: &str) -> Option<bool> {
    Api::<Node>::all(sim.client())
        .get_opt(node)
        .await
        .unwrap()
        .map(|n| n.metadata.deletion_timestamp.is_some())
}

/// Steps the simulation second by second until the node is deleting or gone; how long that
/// took, or `None` after `limit`.
pub async fn until_node_deleting(
    sim: &mut Simulation<'_>,
    node: &str,
    limit: Duration,
) -> Option<Duration> {
    let from = sim.now();
    loop {
        if node_state(sim, node).await != Some(false) {
            return Some(sim.now().saturating_sub(from));
        }
        if sim.now().saturating_sub(from) >= limit {
            return None;
        }
        assert!(
            sim.advance(Duration::from_secs(1)).await,
            "the scenario ended"
        );
    }
}

/// The reasons and messages of the Kubernetes events about the object named `name` (a Node or
/// NodeClaim).
pub async fn events_about(sim: &Simulation<'_>, name: &str) -> Vec<(String, String)> {
    Api::<Event>::all(sim.client())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// The reasons of [`events_about`] the object.
pub async fn event_reasons(sim: &Simulation<'_>, name: &str) -> BTreeSet<String> {
    events_about(sim, name)
        .await
        .into_iter()
        .map(|(r, _)| r)
        .collect()
}

pub fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

pub fn label_of<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

pub fn condition_is_true(claim: &NodeClaim, kind: &str) -> bool {
    claim.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == kind && c.status == ConditionStatus::True)
    })
}

/// Whether the node is of the NodePool [`POOL`].
pub fn of_pool(node: &Node) -> bool {
    label_of(node, "karpenter.sh/nodepool") == Some(POOL)
}

/// One line per node: name, type, age, Ready, deleting, taints.
pub fn describe(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|n| {
            format!(
                "  {} {:?} created {}s ready {:?} deleting {} {:?}",
                n.metadata.name.as_deref().unwrap_or_default(),
                label_of(n, "node.kubernetes.io/instance-type"),
                n.metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(0, |t| t.0.as_second() - SIMULATION_EPOCH_SECONDS),
                ready_condition(n).map(|c| c.status.clone()),
                n.metadata.deletion_timestamp.is_some(),
                taint_keys(n),
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Steps the simulation second by second for `span` (or to its end), checking each second
/// that the pool's disrupting nodes stay within `budget(nodes counted)`; the most disrupting
/// at once, or what broke the budget.
pub async fn disrupting_within_budget(
    sim: &mut Simulation<'_>,
    budget: impl Fn(usize) -> usize,
    span: Duration,
) -> Result<usize, String> {
    // Karpenter's count (`BuildDisruptionBudgetMapping`): the pool's initialized nodes,
    // leaving out those whose NodeClaim is `InstanceTerminating` (drained, the instance
    // deleted: the Node only waits for EC2's shutdown and no longer consumes the budget);
    // of them, those disrupting: tainted `karpenter.sh/disrupted`, deleting or not Ready.
    let mut most_disrupting = 0;
    let until = sim.now().saturating_add(span);
    while sim.now() < until {
        let pool: Vec<Node> = nodes(sim).await.into_iter().filter(of_pool).collect();
        let terminating: BTreeSet<String> = nodeclaims(sim)
            .await
            .iter()
            .filter(|c| condition_is_true(c, "InstanceTerminating"))
            .filter_map(|c| c.status.as_ref().and_then(|s| s.node_name.clone()))
            .collect();
        let counted: Vec<&Node> = pool
            .iter()
            .filter(|n| label_of(n, "karpenter.sh/initialized") == Some("true"))
            .filter(|n| !terminating.contains(n.metadata.name.as_deref().unwrap_or_default()))
            .collect();
        let disrupting = counted
            .iter()
            .filter(|n| {
                has_taint(n, "karpenter.sh/disrupted")
                    || n.metadata.deletion_timestamp.is_some()
                    || ready_condition(n).map(|c| c.status.as_str()) != Some("True")
            })
            .count();
        let budget = budget(counted.len());
        if disrupting > budget {
            return Err(format!(
                "at {:?}: {disrupting} of {} nodes disrupting, budget {budget}; the pool \
                 (instance terminating: {terminating:?}):\n{}",
                sim.now(),
                counted.len(),
                describe(&pool),
            ));
        }
        most_disrupting = most_disrupting.max(disrupting);
        if !sim.advance(Duration::from_secs(1)).await {
            break;
        }
    }
    Ok(most_disrupting)
}

/// Merge-patches the NodePool [`POOL`], as `kubectl patch --type merge` does.
pub async fn patch_pool(sim: &Simulation<'_>, patch: serde_json::Value) {
    Api::<NodePool>::all(sim.client())
        .patch(POOL, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Steps the simulation to `at` (simulated time since the start).
pub async fn advance_to(sim: &mut Simulation<'_>, at: Duration) {
    let by = at.checked_sub(sim.now()).expect("not in the past");
    assert!(sim.advance(by).await, "the scenario ended before {at:?}");
}

/// The nodes of the NodePool [`POOL`] that are not being deleted.
pub async fn pool_nodes(sim: &Simulation<'_>) -> Vec<Node> {
    nodes(sim)
        .await
        .into_iter()
        .filter(|n| of_pool(n) && n.metadata.deletion_timestamp.is_none())
        .collect()
}

/// A workload (a [`PoolScenario`] YAML list item) of `cpu` per pod with `steps`, and `extra`
/// fields (YAML lines at 4 spaces).
pub fn workload(name: &str, cpu: &str, steps: &str, extra: &str) -> String {
    format!(
        "  - name: {name}\n    requests: {{cpu: \"{cpu}\", memory: 256Mi}}\n{extra}    steps: {steps}\n"
    )
}

/// Required pod affinity (`kind` `podAffinity`) or anti-affinity (`podAntiAffinity`) over
/// hostnames between the pods labelled `app: <app>`, as workload fields.
pub fn hostname_affinity(kind: &str, app: &str) -> String {
    let term = serde_json::json!({
        "labelSelector": {"matchLabels": {"app": app}},
        "topologyKey": "kubernetes.io/hostname",
    });
    let affinity =
        serde_json::json!({kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}});
    format!("    affinity: {affinity}\n")
}

/// Upstream's `ConsistentlyExpectDisruptionsUntilNoneLeft(nodes, max, span)` from now: never
/// more than `max` of the pool's nodes disrupting at once; the most seen at once.
pub async fn at_most_disrupting(sim: &mut Simulation<'_>, max: usize, span: Duration) -> usize {
    match disrupting_within_budget(sim, |_| max, span).await {
        Ok(most) => most,
        Err(why) => panic!("{why}"),
    }
}

/// The report's commands of `decision` (`delete`, `replace`) for `reason` (`Empty`,
/// `Underutilized`, `Drifted`) that succeeded.
pub fn succeeded(report: &Report, decision: &str, reason: &str) -> usize {
    report
        .disruptions
        .iter()
        .filter(|d| d.decision == decision && d.reason == reason && d.outcome == "succeeded")
        .count()
}
