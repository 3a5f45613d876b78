//! The scenario runner of `karpenter simulate`: the real daemon (every actor family of
//! `karpenter_actors::daemon`, the kube adapters over the in-process emulator, the AWS ports
//! over kwok) with the fake kubelet, the fake kube-scheduler and the workload controllers,
//! driven through a scenario on simulated time, ending with a [`Report`].
//!
//! ```text
//! LoadedScenario::from_yaml (scenario checks; NodePools and EC2NodeClasses through the API
//!   server's validator; workload templates; the chaos plan)
//! run: current-thread tokio runtime (paused: simulated time jumps from timer to timer) inside an
//!   actix System
//!   emulator (seeded, simulated clock) <- NodePools, EC2NodeClasses, namespaces
//!   kwok account (capacity limits, interruption queue and rules)
//!   ClusterIngress -> ChangeFeed -> pump -> Daemon (actors) -> ClusterApi / CloudProvider / AWS
//!   every simulated second: due events (interruptions, reclaims, node failures, AWS faults)
//!     -> workloads -> kubelet -> scheduler -> billing; a progress line every `progressEvery`
//!   end: report (pods, time to schedule, nodes, cost against the lower bound, interruptions,
//!     actor totals), actors stopped
//! ```
//!
//! With [`Pace::Fast`] the run is deterministic for a seed: one thread, simulated time, seeded
//! names (emulator) and ids (kwok), events chosen by the seed, harness steps in a fixed order.
//! [`Pace::RealTime`] (used when serving the emulator to kubectl) runs on the wall clock.

use karpenter_core::domain::instance_type::CapacityType;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use karpenter_actors::deps::Deps;
use karpenter_actors::kwok::catalog;
use karpenter_actors::ports::cloud_provider::{CloudProvider, parse_provider_id};
use karpenter_actors::ports::cluster_view::ClusterView;
use karpenter_actors::ports::ec2::InstanceState;
use karpenter_actors::runtime::{ActorKit, FaultPlan, FaultPlanFile, KitOptions};
use karpenter_config::scenario::{
    DEFAULT_CLUSTER_NAME, DEFAULT_REGION, FailureMode, KwokSettings, MAX_DURATION, Scenario,
    ScenarioError, Share,
};
use karpenter_config::{HttpUrl, Settings, format_go_duration};
use karpenter_core::apis::validation::{Outcome, Validator};
use karpenter_core::apis::{EC2NodeClass, NodePool};
use karpenter_core::domain::requirements::Requirements;
use karpenter_core::domain::resources::Resources;
use karpenter_core::domain::scheduling::{
    NewNodeClaim, NodePoolInput, Plan, SchedulingPod, Snapshot, cost_report,
};
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt as _};
use prometheus_client::registry::Registry;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::binder::FakeScheduler;
use super::clock::SimClock;
use super::cloud::cloud_provider;
use super::kubelet::{FakeKubelet, KubeletConfig, KubeletDeps};
use super::report::{self, Latency, NodesReport, PendingPod, PodsReport, Recorder, Report};
use super::workloads::{APP_LABEL, WorkloadTemplate, Workloads};
use super::world::{KwokAws, KwokAwsConfig, kwok_operation};
use super::{Emulator, EmulatorConfig, LoopbackServer};
use crate::daemon::{ChangeFeed, DaemonSlot, pump};
use crate::http::{self, HttpServer, MetricsRegistries, Routes};
use crate::kube::cluster_api::KubeClusterApi;
use crate::kube::ingress::ClusterIngress;
use karpenter_actors::daemon::StartOptions;
use karpenter_actors::deps::ClusterVersion;
use karpenter_actors::metrics::Metrics;

/// How often the harness acts (kubelet, scheduler, workloads, billing): kube-scheduler and
/// kubelets react within a second, and a second is the report's time resolution.
pub const HARNESS_TICK: Duration = Duration::from_secs(1);
/// EC2 reclaims a spot instance two minutes after its interruption warning.
pub const SPOT_RECLAIM_AFTER: Duration = Duration::from_mins(2);
/// The API endpoint the simulated cluster claims to have (user data needs one).
const SIMULATED_ENDPOINT: &str = "https://simulated.eks.amazonaws.com";

// ---- loading -----------------------------------------------------------------------------------

/// A scenario with its embedded manifests checked and converted.
#[derive(Debug, Clone)]
pub struct LoadedScenario {
    pub scenario: Scenario,
    pub node_pools: Vec<NodePool>,
    pub node_classes: Vec<EC2NodeClass>,
    pub workloads: Vec<WorkloadTemplate>,
    pub actor_faults: Option<Arc<FaultPlan>>,
    /// Runs until stopped instead of for the scenario's duration (serving without a scenario).
    pub open_ended: bool,
}

/// Checks one embedded manifest as the API server would and converts it.
fn manifest<T: DeserializeOwned>(
    validator: &Validator,
    path: &str,
    kind: &str,
    value: &serde_yaml::Value,
) -> Result<T, ScenarioError> {
    let json =
        serde_json::to_value(value).map_err(|e| ScenarioError::invalid(path, e.to_string()))?;
    match validator.validate(&json) {
        Outcome::Checked {
            kind: checked,
            violations,
            ..
        } => {
            if checked.as_str() != kind {
                return Err(ScenarioError::invalid(
                    format!("{path}.kind"),
                    format!("must be {kind}, not {}", checked.as_str()),
                ));
            }
            if let Some(first) = violations.first() {
                let more = match violations.len() {
                    1 => String::new(),
                    n => format!(" (and {} more problems)", n - 1),
                };
                return Err(ScenarioError::invalid(
                    format!("{path}.{}", first.path),
                    format!("{}{more}", first.message),
                ));
            }
        }
        Outcome::Skipped { reason } => {
            return Err(ScenarioError::invalid(
                path,
                format!("must be a {kind} manifest: {reason}"),
            ));
        }
    }
    serde_json::from_value(json).map_err(|e| ScenarioError::invalid(path, e.to_string()))
}

impl LoadedScenario {
    /// Parses and checks a scenario; `chaos` (a `--chaos FILE`) replaces its chaos plan.
    pub fn from_yaml(text: &str, chaos: Option<&str>) -> Result<Self, ScenarioError> {
        let mut scenario = Scenario::from_yaml(text)?;
        if let Some(chaos) = chaos {
            scenario = scenario.with_chaos_yaml(chaos)?;
        }
        Self::from_scenario(scenario)
    }

    /// Checks the parts of `scenario` that need Kubernetes types and kwok's catalogue.
    pub fn from_scenario(scenario: Scenario) -> Result<Self, ScenarioError> {
        let validator = Validator::new().map_err(|e| ScenarioError::Parse(e.to_string()))?;
        let node_classes: Vec<EC2NodeClass> = scenario
            .ec2_node_classes
            .iter()
            .enumerate()
            .map(|(i, v)| {
                manifest(
                    &validator,
                    &format!("ec2NodeClasses[{i}]"),
                    "EC2NodeClass",
                    v,
                )
            })
            .collect::<Result<_, _>>()?;
        let node_pools: Vec<NodePool> = scenario
            .node_pools
            .iter()
            .enumerate()
            .map(|(i, v)| manifest(&validator, &format!("nodePools[{i}]"), "NodePool", v))
            .collect::<Result<_, _>>()?;
        let class_names: BTreeSet<String> = node_classes
            .iter()
            .map(kube::ResourceExt::name_any)
            .collect();
        for (i, pool) in node_pools.iter().enumerate() {
            let wanted = &pool.spec.template.spec.node_class_ref.name;
            if !class_names.contains(wanted) {
                return Err(ScenarioError::invalid(
                    format!("nodePools[{i}].spec.template.spec.nodeClassRef.name"),
                    format!("{wanted:?} is not one of the scenario's ec2NodeClasses"),
                ));
            }
        }
        check_kwok(&scenario.region, &scenario.kwok)?;
        let workloads = scenario
            .workloads
            .iter()
            .enumerate()
            .map(|(i, w)| WorkloadTemplate::from_workload(i, w))
            .collect::<Result<Vec<_>, _>>()?;
        let actor_faults = match &scenario.chaos.actors {
            Some(value) => {
                let file: FaultPlanFile = serde_yaml::from_value(value.clone())
                    .map_err(|e| ScenarioError::invalid("chaos.actors", e.to_string()))?;
                let plan = file.into_plan().map_err(|e| match e {
                    karpenter_actors::runtime::FaultPlanError::Invalid { path, rule } => {
                        ScenarioError::invalid(format!("chaos.actors.{path}"), rule)
                    }
                    other @ karpenter_actors::runtime::FaultPlanError::Parse(_) => {
                        ScenarioError::invalid("chaos.actors", other.to_string())
                    }
                })?;
                Some(Arc::new(plan))
            }
            None => None,
        };
        for (i, fault) in scenario.chaos.aws.iter().enumerate() {
            kwok_operation(fault.service, &fault.operation).map_err(|rule| {
                ScenarioError::invalid(format!("chaos.aws[{i}].operation"), rule)
            })?;
        }
        Ok(Self {
            scenario,
            node_pools,
            node_classes,
            workloads,
            actor_faults,
            open_ended: false,
        })
    }

    /// An empty cluster that runs until stopped: the daemon, kwok and the harness, waiting for
    /// whatever kubectl applies (`simulate --serve` without `--scenario`).
    #[must_use]
    pub fn open_ended(seed: u64) -> Self {
        Self {
            scenario: Scenario {
                name: "interactive".to_owned(),
                description: None,
                seed,
                duration: MAX_DURATION,
                region: DEFAULT_REGION.to_owned(),
                cluster_name: DEFAULT_CLUSTER_NAME.to_owned(),
                progress_every: Duration::from_mins(1),
                kwok: KwokSettings {
                    launch_latency: karpenter_config::scenario::DEFAULT_LAUNCH_LATENCY,
                    registration_delay: karpenter_config::scenario::DEFAULT_REGISTRATION_DELAY,
                    ready_delay: karpenter_config::scenario::DEFAULT_READY_DELAY,
                    startup_taint_delay: karpenter_config::scenario::DEFAULT_STARTUP_TAINT_DELAY,
                    capacity: Vec::new(),
                },
                node_pools: Vec::new(),
                ec2_node_classes: Vec::new(),
                workloads: Vec::new(),
                interruptions: Vec::new(),
                node_failures: Vec::new(),
                chaos: karpenter_config::scenario::Chaos::default(),
            },
            node_pools: Vec::new(),
            node_classes: Vec::new(),
            workloads: Vec::new(),
            actor_faults: None,
            open_ended: true,
        }
    }
}

fn check_kwok(region: &str, kwok: &KwokSettings) -> Result<(), ScenarioError> {
    let catalogue = catalog::bundled().map_err(ScenarioError::Parse)?;
    let Some(zones) = catalogue.regions.get(region) else {
        return Err(ScenarioError::invalid(
            "region",
            format!(
                "{region:?} is not in kwok's catalogue ({})",
                catalogue
                    .regions
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    };
    for (i, pool) in kwok.capacity.iter().enumerate() {
        let path = format!("kwok.capacity[{i}]");
        if !zones.iter().any(|z| z.name == pool.zone) {
            return Err(ScenarioError::invalid(
                format!("{path}.zone"),
                format!("{:?} is not a zone of {region}", pool.zone),
            ));
        }
        if !catalogue
            .instance_types
            .iter()
            .any(|t| t.name == pool.instance_type)
        {
            return Err(ScenarioError::invalid(
                format!("{path}.instanceType"),
                format!("{:?} is not in kwok's catalogue", pool.instance_type),
            ));
        }
    }
    Ok(())
}

// ---- running -----------------------------------------------------------------------------------

/// How simulated time runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Paused tokio time: as fast as the CPU allows, deterministic for a seed.
    Fast,
    /// The wall clock (serving the cluster to kubectl as it runs).
    RealTime,
}

/// Where a served simulation listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// The Kubernetes API emulator (for kubectl).
    pub api: String,
    /// The kubeconfig written for it.
    pub kubeconfig: PathBuf,
    /// The daemon's `/metrics`, `/healthz`, `/readyz` and `/debug/actors`.
    pub daemon: String,
}

/// Serving the emulator and the daemon's endpoints while the simulation runs.
#[derive(Debug)]
pub struct ServeOptions {
    pub api: SocketAddr,
    /// Where the daemon's endpoints listen (port 0 picks one).
    pub daemon: SocketAddr,
    pub kubeconfig: PathBuf,
    /// Told where everything listens once it does.
    pub announce: Option<oneshot::Sender<Served>>,
}

/// Where progress lines go.
pub type ProgressSink<'a> = Box<dyn FnMut(&str) + 'a>;

/// How to run.
pub struct RunOptions<'a> {
    pub pace: Pace,
    /// Where progress lines go (`None`: quiet).
    pub progress: Option<ProgressSink<'a>>,
    pub serve: Option<ServeOptions>,
    /// Ends the run early (Ctrl-C); the report covers what happened so far.
    pub stop: Option<oneshot::Receiver<()>>,
}

impl std::fmt::Debug for RunOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("pace", &self.pace)
            .field("progress", &self.progress.is_some())
            .field("serve", &self.serve)
            .finish_non_exhaustive()
    }
}

impl RunOptions<'_> {
    /// Fast and quiet (tests).
    #[must_use]
    pub fn quiet() -> Self {
        Self {
            pace: Pace::Fast,
            progress: None,
            serve: None,
            stop: None,
        }
    }
}

/// Failures setting the simulation up (what happens inside it is in the report).
#[derive(Debug, thiserror::Error)]
pub enum SimulationError {
    #[error("starting the runtime")]
    Runtime(#[source] std::io::Error),
    #[error("starting the Kubernetes API emulator")]
    Emulator(#[source] super::EmulatorError),
    #[error("setting up kwok: {0}")]
    Kwok(String),
    #[error("creating {what} in the emulator")]
    Seed {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("the cluster store never synced")]
    Sync,
    #[error("starting the actors")]
    Actors(#[source] karpenter_actors::runtime::SpawnError),
    #[error("serving")]
    Serve(#[source] crate::http::HttpError),
}

impl SimulationError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Runtime(_) => "runtime",
            Self::Emulator(error) => error.category(),
            Self::Kwok(_) => "kwok",
            Self::Seed { .. } => "seed",
            Self::Sync => "sync",
            Self::Actors(_) => "actors",
            Self::Serve(error) => error.category(),
        }
    }
}

/// Runs the scenario to its end (or until stopped) on this thread; builds its own runtime, so
/// call it outside any.
pub fn run(loaded: LoadedScenario, options: RunOptions<'_>) -> Result<Report, SimulationError> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    if options.pace == Pace::Fast {
        builder.start_paused(true);
    }
    let runtime = builder.build().map_err(SimulationError::Runtime)?;
    let system = actix::System::with_tokio_rt(move || runtime);
    system.block_on(simulate(loaded, options))
}

/// The daemon's settings in a simulation.
#[must_use]
pub fn simulated_settings(scenario: &Scenario) -> Settings {
    Settings {
        cluster_name: Some(scenario.cluster_name.clone()),
        aws_region: Some(scenario.region.clone()),
        interruption_queue: Some(scenario.cluster_name.clone()),
        cluster_endpoint: HttpUrl::parse(SIMULATED_ENDPOINT).ok(),
        disable_leader_election: true,
        ..Settings::default()
    }
}

/// A deterministic order of `ids` for the seed (which instances an event hits).
fn seeded_order(seed: u64, salt: &str, mut ids: Vec<String>) -> Vec<String> {
    ids.sort_by_cached_key(|id| {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (seed, salt, id).hash(&mut hasher);
        (hasher.finish(), id.clone())
    });
    ids
}

async fn create<K>(api: &Api<K>, object: &K, what: String) -> Result<(), SimulationError>
where
    K: kube::Resource + Clone + serde::Serialize + DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(SimulationError::Seed { what, source }),
    }
}

/// Creates the scenario's namespaces, EC2NodeClasses and NodePools.
async fn seed(client: &Client, loaded: &LoadedScenario) -> Result<(), SimulationError> {
    let namespaces: BTreeSet<&str> = loaded
        .workloads
        .iter()
        .map(|w| w.namespace.as_str())
        .collect();
    let api: Api<Namespace> = Api::all(client.clone());
    for name in namespaces {
        let namespace = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Namespace::default()
        };
        create(&api, &namespace, format!("namespace {name}")).await?;
    }
    let api: Api<EC2NodeClass> = Api::all(client.clone());
    for class in &loaded.node_classes {
        create(&api, class, format!("EC2NodeClass {}", class.name_any())).await?;
    }
    let api: Api<NodePool> = Api::all(client.clone());
    for pool in &loaded.node_pools {
        create(&api, pool, format!("NodePool {}", pool.name_any())).await?;
    }
    Ok(())
}

/// The cheapest $/h any placement of the live workload pods could cost (see
/// [`cost_report`]); `None` when the NodePools' instance types cannot be read.
async fn lower_bound(view: &dyn ClusterView, cloud: &dyn CloudProvider) -> Option<f64> {
    let mut pods: Vec<SchedulingPod> = view
        .pods()
        .iter()
        .filter(|p| p.labels().contains_key(APP_LABEL) && p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| SchedulingPod::from_pod(p).ok())
        .collect();
    if pods.is_empty() {
        return Some(0.0);
    }
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut pools = view.nodepools();
    pools.sort_by_key(|p| p.name_any());
    let mut inputs = Vec::new();
    for pool in pools {
        let types = cloud.instance_types(&pool).await.ok()?;
        inputs.push(NodePoolInput::from_node_pool(&pool, types).ok()?);
    }
    let count = pods.len();
    let snapshot = Snapshot {
        pods,
        node_pools: inputs,
        ..Snapshot::default()
    };
    // One claim holding every pod: the bound prices their total requests.
    let plan = Plan {
        new_node_claims: vec![NewNodeClaim {
            node_pool: String::new(),
            node_pool_index: 0,
            requirements: Requirements::default(),
            requests: Resources::default(),
            instance_types: Vec::new(),
            pods: (0..count).collect(),
            price: 0.0,
        }],
        ..Plan::default()
    };
    Some(cost_report(&snapshot, &plan).lower_bound)
}

/// $/h of the instances EC2 bills now (pending and running).
fn billed_per_hour(world: &KwokAws) -> f64 {
    world
        .ec2
        .instances()
        .iter()
        .filter(|i| matches!(i.state, InstanceState::Pending | InstanceState::Running))
        .filter_map(|i| world.ec2.hourly_price(i))
        .fold(0.0, |sum, price| sum + price)
}

/// Everything a running simulation holds.
struct Sim<'a> {
    loaded: LoadedScenario,
    client: Client,
    view: Arc<dyn ClusterView>,
    world: KwokAws,
    cloud: Arc<dyn CloudProvider>,
    queue_url: String,
    kubelet: FakeKubelet,
    scheduler: FakeScheduler,
    workloads: Workloads,
    recorder: Recorder,
    /// Instances warned, and when EC2 reclaims them.
    reclaims: Vec<(Duration, String)>,
    next_interruption: usize,
    next_failure: usize,
    next_fault: usize,
    progress: Option<ProgressSink<'a>>,
}

/// The parts of the cluster the harness acts on.
struct Harness {
    client: Client,
    view: Arc<dyn ClusterView>,
    world: KwokAws,
    cloud: Arc<dyn CloudProvider>,
    queue_url: String,
}

impl<'a> Sim<'a> {
    fn new(
        loaded: LoadedScenario,
        harness: Harness,
        clock: SimClock,
        progress: Option<ProgressSink<'a>>,
    ) -> Self {
        let scenario = &loaded.scenario;
        let kubelet = FakeKubelet::new(
            KubeletDeps {
                client: harness.client.clone(),
                ec2: Arc::clone(&harness.world.ec2),
                view: Arc::clone(&harness.view),
                clock: Arc::new(clock),
                region: scenario.region.clone(),
            },
            KubeletConfig::from(&scenario.kwok),
        );
        let scheduler = FakeScheduler::new(
            harness.client.clone(),
            Arc::clone(&harness.view),
            Arc::new(clock),
        );
        let workloads = Workloads::new(
            harness.client.clone(),
            Arc::clone(&harness.view),
            loaded.workloads.clone(),
        );
        Self {
            loaded,
            client: harness.client,
            view: harness.view,
            world: harness.world,
            cloud: harness.cloud,
            queue_url: harness.queue_url,
            kubelet,
            scheduler,
            workloads,
            recorder: Recorder::default(),
            reclaims: Vec::new(),
            next_interruption: 0,
            next_failure: 0,
            next_fault: 0,
            progress,
        }
    }

    fn say(&mut self, line: &str) {
        if let Some(progress) = self.progress.as_mut() {
            progress(line);
        }
    }

    /// Running instances matching an optional NodePool (and capacity type), in the seed's order.
    fn candidates(
        &self,
        salt: &str,
        node_pool: Option<&str>,
        spot_only: bool,
        registered: bool,
    ) -> Vec<String> {
        let ids: Vec<String> = self
            .world
            .ec2
            .instances()
            .into_iter()
            .filter(|i| i.state == InstanceState::Running)
            .filter(|i| !spot_only || i.capacity_type == CapacityType::Spot)
            .filter(|i| node_pool.is_none_or(|p| nodepool_of(i) == Some(p)))
            .filter(|i| !registered || self.kubelet.node_of(&i.id).is_some())
            .map(|i| i.id)
            .collect();
        seeded_order(self.loaded.scenario.seed, salt, ids)
    }

    /// Whether Karpenter has let go of an instance: it is terminating, or its NodeClaim is gone
    /// or being deleted.
    fn released(&self, instance_id: &str) -> bool {
        let terminating = self.world.ec2.instances().iter().any(|i| {
            i.id == instance_id
                && matches!(
                    i.state,
                    InstanceState::ShuttingDown | InstanceState::Terminated
                )
        });
        if terminating {
            return true;
        }
        !self.view.nodeclaims().iter().any(|claim| {
            claim.metadata.deletion_timestamp.is_none()
                && claim
                    .status
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .and_then(|id| parse_provider_id(id).ok())
                    .is_some_and(|(_, id)| id == instance_id)
        })
    }

    async fn fire_events(&mut self, now: Duration) {
        // Reclaims of warned spot instances.
        let due: Vec<String> = self
            .reclaims
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, id)| id.clone())
            .collect();
        self.reclaims.retain(|(at, _)| *at > now);
        for id in due {
            if self.released(&id) {
                self.recorder.interruptions.handled += 1;
            } else {
                self.recorder.interruptions.reclaimed_unhandled += 1;
            }
            self.world.ec2.reclaim(&id);
        }
        let scenario = self.loaded.scenario.clone();
        while let Some(event) = scenario.interruptions.get(self.next_interruption) {
            if event.at > now {
                break;
            }
            self.next_interruption += 1;
            let salt = format!("interruption-{}", self.next_interruption);
            let candidates = self.candidates(&salt, event.node_pool.as_deref(), true, false);
            let hit = share_of(event.share, candidates.len());
            for id in candidates.into_iter().take(hit) {
                if self.world.ec2.interrupt_spot(&id).await.is_ok() {
                    self.recorder.interruptions.warnings += 1;
                    self.reclaims.push((now + SPOT_RECLAIM_AFTER, id));
                }
            }
            self.say(&format!(
                "[{:>6}] {hit} spot interruption warning(s) sent",
                format_go_duration(now)
            ));
        }
        while let Some(event) = scenario.node_failures.get(self.next_failure) {
            if event.at > now {
                break;
            }
            self.next_failure += 1;
            let salt = format!("failure-{}", self.next_failure);
            let candidates = self.candidates(&salt, event.node_pool.as_deref(), false, true);
            let count = usize::try_from(event.count).unwrap_or(usize::MAX);
            let mut failed = 0;
            for id in candidates.into_iter().take(count) {
                let done = match event.mode {
                    FailureMode::Terminate => self.world.ec2.reclaim(&id),
                    FailureMode::NotReady => self.kubelet.fail(&id),
                };
                if done {
                    failed += 1;
                }
            }
            self.recorder.faults.node_failures += failed;
            self.say(&format!(
                "[{:>6}] {failed} node failure(s) injected",
                format_go_duration(now)
            ));
        }
        while let Some(fault) = scenario.chaos.aws.get(self.next_fault) {
            if fault.at > now {
                break;
            }
            self.next_fault += 1;
            if self
                .world
                .fail_next(fault.service, &fault.operation, fault.count, &fault.code)
                .is_ok()
            {
                self.recorder.faults.aws_faults_scheduled += 1;
            }
        }
    }

    async fn tick(&mut self, now: Duration) {
        self.fire_events(now).await;
        let step = self.workloads.tick(now).await;
        self.recorder.created(&step.created, now);
        self.recorder.scaled_down(&step.deleted);
        self.recorder.harness.workload_errors += step.errors;
        let kubelet = self.kubelet.tick().await;
        self.recorder.harness.kubelet_errors += kubelet.errors;
        let bound = self.scheduler.tick().await;
        self.recorder.bound(&bound.bound, now);
        self.recorder.harness.scheduler_errors += bound.errors;
        self.recorder
            .bill(billed_per_hour(&self.world), HARNESS_TICK);
        for claim in self.view.nodeclaims() {
            if !self.recorder.nodeclaims_seen.contains(&claim.name_any()) {
                self.recorder.nodeclaims_seen.insert(claim.name_any());
            }
        }
        self.recorder.peak_nodes = self.recorder.peak_nodes.max(self.view.nodes().len());
    }

    async fn progress_line(&mut self, now: Duration) {
        let bound = lower_bound(self.view.as_ref(), self.cloud.as_ref()).await;
        self.recorder.lower_bound(bound, now);
        if self.progress.is_none() {
            return;
        }
        let pods: Vec<Arc<Pod>> = self
            .view
            .pods()
            .into_iter()
            .filter(|p| p.labels().contains_key(APP_LABEL))
            .collect();
        let bound_pods = pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count();
        let nodes = self.view.nodes();
        let ready = nodes
            .iter()
            .filter(|n| super::binder::is_schedulable(n))
            .count();
        let line = format!(
            "[{:>6}] pods {bound_pods} bound, {} pending | nodes {ready} ready of {} | nodeclaims {} | ${:.2}/h, ${:.2} spent",
            format_go_duration(now),
            pods.len() - bound_pods,
            nodes.len(),
            self.view.nodeclaims().len(),
            billed_per_hour(&self.world),
            self.recorder.spent(),
        );
        self.say(&line);
    }

    /// The last word on each pending pod: Karpenter's latest event about it, else the
    /// scheduler's condition.
    async fn pending_pods(&self) -> Vec<PendingPod> {
        let events: Api<Event> = Api::all(self.client.clone());
        let mut latest: BTreeMap<(String, String), (String, String)> = BTreeMap::new();
        if let Ok(list) = events.list(&kube::api::ListParams::default()).await {
            for event in list.items {
                let involved = &event.involved_object;
                if involved.kind.as_deref() != Some("Pod") {
                    continue;
                }
                let key = (
                    involved.namespace.clone().unwrap_or_default(),
                    involved.name.clone().unwrap_or_default(),
                );
                let stamp = event
                    .last_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
                    .or_else(|| event.event_time.as_ref().map(|t| t.0.to_string()))
                    .unwrap_or_default();
                let text = format!(
                    "{}: {}",
                    event.reason.unwrap_or_default(),
                    event.message.unwrap_or_default()
                );
                match latest.get(&key) {
                    Some((previous, _)) if *previous > stamp => {}
                    _ => {
                        latest.insert(key, (stamp, text));
                    }
                }
            }
        }
        let mut pending: Vec<PendingPod> = self
            .view
            .pods()
            .iter()
            .filter(|p| p.labels().contains_key(APP_LABEL) && super::binder::is_pending(p))
            .map(|p| {
                let key = (p.namespace().unwrap_or_default(), p.name_any());
                let reason = latest.get(&key).map_or_else(
                    || {
                        if super::binder::is_marked_unschedulable(p) {
                            "Unschedulable: no Karpenter event yet".to_owned()
                        } else {
                            "not seen by the scheduler yet".to_owned()
                        }
                    },
                    |(_, text)| text.clone(),
                );
                PendingPod {
                    pod: format!("{}/{}", key.0, key.1),
                    reason,
                }
            })
            .collect();
        pending.sort_by(|a, b| a.pod.cmp(&b.pod));
        pending
    }

    async fn report(
        &mut self,
        now: Duration,
        registries: &MetricsRegistries,
        actor_faults_injected: usize,
        escalated: bool,
        dropped: u64,
    ) -> Report {
        let bound = lower_bound(self.view.as_ref(), self.cloud.as_ref()).await;
        self.recorder.lower_bound(bound, now);
        let pending = self.pending_pods().await;
        let mut pending_reasons: BTreeMap<String, usize> = BTreeMap::new();
        for pod in &pending {
            *pending_reasons.entry(pod.reason.clone()).or_default() += 1;
        }
        let running = self
            .view
            .pods()
            .iter()
            .filter(|p| {
                p.labels().contains_key(APP_LABEL)
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .count();
        let instances = self.world.ec2.instances();
        let (by_type, launched, terminated, running_instances) =
            report::instance_counts(&instances);
        let metrics = registries.encode().unwrap_or_default();
        self.recorder.interruptions.left_in_queue = self.world.sqs.depth(&self.queue_url);
        self.recorder.faults.actor_faults_injected = actor_faults_injected;
        self.recorder.harness.dropped_changes = dropped;
        let scenario = &self.loaded.scenario;
        Report {
            scenario: scenario.name.clone(),
            seed: scenario.seed,
            simulated_seconds: now.as_secs(),
            pods: PodsReport {
                requested: self.recorder.requested,
                scheduled: self.recorder.scheduled,
                scaled_down: self.recorder.scaled_down,
                running_at_end: running,
                pending_at_end: pending.len(),
                pending_reasons,
                pending: pending
                    .into_iter()
                    .take(report::MAX_LISTED_PENDING)
                    .collect(),
            },
            time_to_schedule: Latency::of(self.recorder.latencies()),
            nodes: NodesReport {
                launched,
                terminated,
                running_at_end: running_instances,
                nodeclaims_created: self.recorder.nodeclaims_seen.len(),
                peak_nodes: self.recorder.peak_nodes,
                by_type,
            },
            cost: self.recorder.cost(billed_per_hour(&self.world)),
            interruptions: self.recorder.interruptions.clone(),
            faults: self.recorder.faults.clone(),
            actors: report::actor_totals(&metrics),
            escalated,
            harness: self.recorder.harness.clone(),
        }
    }
}

/// The NodePool an instance was launched for (its tag).
fn nodepool_of(instance: &karpenter_actors::ports::ec2::Instance) -> Option<&str> {
    instance
        .tags
        .get(karpenter_core::apis::labels::TAG_NODEPOOL)
        .map(String::as_str)
}

fn share_of(share: Share, candidates: usize) -> usize {
    share.of(candidates)
}

/// Serves the emulator and the daemon's endpoints; announces where.
async fn serve(
    options: &mut ServeOptions,
    emulator: &Emulator,
    routes: Routes,
) -> Result<(LoopbackServer, HttpServer), SimulationError> {
    let api = emulator
        .serve(options.api)
        .await
        .map_err(SimulationError::Emulator)?;
    // Written whole, then renamed: whoever waits for the file never reads half of it.
    let partial = options.kubeconfig.with_extension("partial");
    std::fs::write(&partial, api.kubeconfig())
        .and_then(|()| std::fs::rename(&partial, &options.kubeconfig))
        .map_err(|source| {
            SimulationError::Emulator(super::EmulatorError::Kubeconfig {
                path: options.kubeconfig.clone(),
                source,
            })
        })?;
    let daemon = http::serve(options.daemon, routes)
        .await
        .map_err(SimulationError::Serve)?;
    if let Some(announce) = options.announce.take() {
        let _ = announce.send(Served {
            api: api.url(),
            kubeconfig: options.kubeconfig.clone(),
            daemon: daemon.url(),
        });
    }
    Ok((api, daemon))
}

/// The daemon as one process runs it: its own watchers (unless it shares the first ones),
/// actor kit, actors and metrics.
struct DaemonProcess {
    kit: ActorKit,
    slot: DaemonSlot,
    registries: MetricsRegistries,
    dropped: Arc<std::sync::atomic::AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl DaemonProcess {
    /// Starts the watchers of `ingress` and the actors over them; returns the store too.
    async fn start(
        loaded: &LoadedScenario,
        clock: SimClock,
        client: &Client,
        world: &KwokAws,
        mut ingress: ClusterIngress,
    ) -> Result<(Self, Arc<dyn ClusterView>, Arc<dyn CloudProvider>), SimulationError> {
        let feed = ChangeFeed::subscribe(&mut ingress);
        let dropped = feed.dropped_counter();
        let state = ingress.state();
        let mut tasks = vec![tokio::task::spawn_local(ingress.run())];
        state
            .wait_until_ready()
            .await
            .map_err(|_| SimulationError::Sync)?;
        let view: Arc<dyn ClusterView> = Arc::new(state);
        let simulated =
            cloud_provider(world, Arc::clone(&view), Arc::new(clock), &loaded.scenario).await?;
        let cloud = Arc::clone(&simulated.cloud);
        let mut registry = Registry::default();
        let kit = ActorKit::new(
            &mut registry,
            KitOptions {
                faults: loaded.actor_faults.clone(),
                ..KitOptions::default()
            },
        );
        let reporter = kube::runtime::events::Reporter {
            controller: "karpenter".to_owned(),
            instance: Some("karpenter-simulated".to_owned()),
        };
        let deps = Deps {
            settings: Arc::new(simulated_settings(&loaded.scenario)),
            clock: Arc::new(clock),
            cluster: Arc::new(KubeClusterApi::new(client.clone(), reporter)),
            view: Arc::clone(&view),
            cloud: Arc::clone(&cloud),
            aws: world.ports(),
            unavailable: simulated.unavailable,
            cluster_info: simulated.cluster_info,
            region: loaded.scenario.region.clone(),
            kubernetes_version: ClusterVersion::default(),
            metrics: Arc::new(Metrics::register(&mut registry)),
        };
        let slot = DaemonSlot::new();
        let mut daemon_registry = Registry::default();
        // Inline solves: a run ends at the same simulated instant however fast this machine is.
        let options = StartOptions {
            inline_solve: true,
            ..StartOptions::default()
        };
        slot.start_with(&kit, deps, &mut daemon_registry, options)
            .map_err(SimulationError::Actors)?;
        let registries = MetricsRegistries::new(registry);
        registries.add(daemon_registry);
        tasks.push(tokio::task::spawn_local(pump(feed, slot.clone())));
        Ok((
            Self {
                kit,
                slot,
                registries,
                dropped,
                tasks,
            },
            view,
            cloud,
        ))
    }

    fn escalated(&self) -> bool {
        self.slot
            .get()
            .is_some_and(|s| s.root.escalation().is_some())
    }
}

/// A simulation in progress: the cluster (emulator, kwok, harness) and the daemon on it.
/// [`simulate`] drives one through a scenario; tests drive one step by step, and can restart the
/// daemon over the same cluster.
pub struct Simulation<'a> {
    emulator: Emulator,
    clock: SimClock,
    daemons: Vec<DaemonProcess>,
    sim: Sim<'a>,
    start: Instant,
    now: Duration,
    next_progress: Duration,
    escalated: bool,
}

impl std::fmt::Debug for Simulation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation")
            .field("now", &self.now)
            .field("daemons", &self.daemons.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Simulation<'a> {
    /// Builds the emulator with the scenario's objects, kwok's account, the watchers, the
    /// daemon's actors and the harness (call inside the actix System of [`run`]).
    pub async fn start(
        loaded: LoadedScenario,
        progress: Option<ProgressSink<'a>>,
    ) -> Result<Self, SimulationError> {
        let clock = SimClock::at_epoch();
        let scenario = &loaded.scenario;
        let emulator = Emulator::with_config(EmulatorConfig {
            seed: scenario.seed,
            clock: clock.for_emulator(),
            ..EmulatorConfig::default()
        })
        .map_err(SimulationError::Emulator)?;
        let client = emulator.client();
        seed(&client, &loaded).await?;
        let world = KwokAws::new(
            &KwokAwsConfig {
                region: scenario.region.clone(),
                cluster_name: scenario.cluster_name.clone(),
                launch_latency: scenario.kwok.launch_latency,
            },
            Arc::new(clock),
        )
        .map_err(SimulationError::Kwok)?;
        world.limit_capacity(&scenario.kwok.capacity);
        let queue_url = world
            .create_interruption_queue(&scenario.cluster_name, &scenario.cluster_name)
            .await
            .map_err(|e| SimulationError::Kwok(e.to_string()))?;
        // The first daemon shares its watchers with the harness.
        let (daemon, view, cloud) = DaemonProcess::start(
            &loaded,
            clock,
            &client,
            &world,
            ClusterIngress::new(client.clone()),
        )
        .await?;
        let sim = Sim::new(
            loaded,
            Harness {
                client,
                view,
                world,
                cloud,
                queue_url,
            },
            clock,
            progress,
        );
        Ok(Self {
            emulator,
            clock,
            daemons: vec![daemon],
            sim,
            start: Instant::now(),
            now: Duration::ZERO,
            next_progress: Duration::ZERO,
            escalated: false,
        })
    }

    /// Simulated time of the last tick.
    #[must_use]
    pub fn now(&self) -> Duration {
        self.now
    }

    /// A client of the emulator.
    #[must_use]
    pub fn client(&self) -> Client {
        self.sim.client.clone()
    }

    /// The emulator.
    #[must_use]
    pub fn emulator(&self) -> &Emulator {
        &self.emulator
    }

    /// kwok's account.
    #[must_use]
    pub fn world(&self) -> &KwokAws {
        &self.sim.world
    }

    /// The harness's view of the cluster.
    #[must_use]
    pub fn view(&self) -> Arc<dyn ClusterView> {
        Arc::clone(&self.sim.view)
    }

    /// The kit of the daemon running now.
    #[must_use]
    pub fn kit(&self) -> Option<&ActorKit> {
        self.daemons.last().map(|d| &d.kit)
    }

    /// `/metrics` and `/debug/actors` of the daemon running now.
    #[must_use]
    pub fn routes(&self) -> Routes {
        let Some(daemon) = self.daemons.last() else {
            return Routes::new();
        };
        Routes::new()
            .route(
                http::METRICS_PATH,
                http::metrics_handler(daemon.registries.clone()),
            )
            .route(http::ACTORS_PATH, http::actors_handler(daemon.kit.clone()))
    }

    fn say(&mut self, line: &str) {
        self.sim.say(line);
    }

    /// The harness acts at `now`; false when the run is over (the root escalated).
    async fn tick(&mut self) -> bool {
        self.sim.tick(self.now).await;
        if self.now >= self.next_progress {
            self.sim.progress_line(self.now).await;
            self.next_progress += self.sim.loaded.scenario.progress_every;
        }
        if self.daemons.last().is_some_and(DaemonProcess::escalated) {
            self.escalated = true;
            return false;
        }
        true
    }

    /// The next tick's time, unless the scenario ends first.
    fn next(&self) -> Option<Duration> {
        let next = self.now + HARNESS_TICK;
        (next <= self.sim.loaded.scenario.duration).then_some(next)
    }

    /// Runs `by` more simulated time; false when the scenario ended or the root escalated.
    pub async fn advance(&mut self, by: Duration) -> bool {
        let until = self.now + by;
        while self.now < until {
            if !self.tick().await {
                return false;
            }
            let Some(next) = self.next() else {
                return false;
            };
            tokio::time::sleep_until(self.start + next).await;
            self.now = next;
        }
        true
    }

    /// Runs to the end of the scenario, or until `stop` resolves.
    pub async fn run_to_end(&mut self, mut stop: Option<oneshot::Receiver<()>>) {
        loop {
            if !self.tick().await {
                return;
            }
            let Some(next) = self.next() else {
                return;
            };
            let wake = tokio::time::sleep_until(self.start + next);
            match stop.as_mut() {
                Some(stopping) => {
                    tokio::select! {
                        biased;
                        _ = stopping => return,
                        () = wake => {}
                    }
                }
                None => wake.await,
            }
            self.now = next;
        }
    }

    /// Stops the daemon (every actor, its watchers) and starts a fresh one over the same
    /// emulator and kwok state, as a process restart would.
    pub async fn restart_daemon(&mut self) -> Result<(), SimulationError> {
        if let Some(old) = self.daemons.last() {
            old.slot.stop().await;
            // The first daemon's watchers feed the harness: only its pump goes.
            if let Some(pump) = old.tasks.get(1) {
                pump.abort();
            }
        }
        let client = self.sim.client.clone();
        let (daemon, _, cloud) = DaemonProcess::start(
            &self.sim.loaded,
            self.clock,
            &client,
            &self.sim.world,
            ClusterIngress::new(client.clone()),
        )
        .await?;
        self.sim.cloud = cloud;
        self.daemons.push(daemon);
        Ok(())
    }

    /// The report (actor totals over every daemon that ran), then everything stops.
    pub async fn finish(mut self) -> Report {
        let registries = MetricsRegistries::default();
        let mut injected = 0;
        let mut dropped = 0;
        for daemon in &self.daemons {
            registries.extend(&daemon.registries);
            injected += daemon.kit.faults().map_or(0, |f| f.injected().len());
            dropped += daemon.dropped.load(std::sync::atomic::Ordering::Relaxed);
        }
        let report = self
            .sim
            .report(self.now, &registries, injected, self.escalated, dropped)
            .await;
        for daemon in &self.daemons {
            daemon.slot.stop().await;
            for task in &daemon.tasks {
                task.abort();
            }
        }
        self.emulator.close_watches();
        report
    }
}

/// The run itself (inside the actix System of [`run`]).
pub async fn simulate(
    loaded: LoadedScenario,
    mut options: RunOptions<'_>,
) -> Result<Report, SimulationError> {
    let open_ended = loaded.open_ended;
    let title = loaded.scenario.to_string();
    let mut simulation = Simulation::start(loaded, options.progress.take()).await?;
    let servers = match options.serve.as_mut() {
        Some(serve_options) => {
            Some(serve(serve_options, simulation.emulator(), simulation.routes()).await?)
        }
        None => None,
    };
    simulation.say(&format!(
        "simulating {title}{}",
        if open_ended { " until stopped" } else { "" }
    ));
    simulation.run_to_end(options.stop.take()).await;
    let report = simulation.finish().await;
    if let Some((api, daemon)) = servers {
        api.shutdown().await;
        daemon.shutdown().await;
    }
    Ok(report)
}
