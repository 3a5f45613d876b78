//! Scenario files of `karpenter simulate`: what the simulated cluster holds and what happens to
//! it over simulated time (documented in `config/scenarios/README.md`).
//!
//! Data flow: [`Scenario::from_yaml`] parses the file form ([`ScenarioFile`], unknown fields
//! refused) and checks every rule that needs no Kubernetes types, returning a [`Scenario`] with
//! typed durations and events in time order, or a [`ScenarioError`] naming the field path and
//! the rule. The embedded Kubernetes manifests (NodePools, EC2NodeClasses, tolerations, spread
//! constraints, affinity) and the chaos plan stay untyped values here: [`LoadedScenario`](super::LoadedScenario) checks
//! them with the same validators as the API server and the actor kit, naming the field path the
//! same way. [`DEFAULT_SCENARIO`] is embedded in the binary.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use karpenter_config::{format_go_duration, parse_go_duration};
use karpenter_core::domain::instance_type::CapacityType;
use karpenter_core::yaml;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The scenario `karpenter simulate` runs without `--scenario`.
pub const DEFAULT_SCENARIO: &str = include_str!("../../../config/scenarios/default.yaml");
/// Where the default scenario lives in the repository (for messages).
pub const DEFAULT_SCENARIO_PATH: &str = "config/scenarios/default.yaml";

/// Longest simulated run: a day of simulated time is already thousands of instance lifecycles;
/// longer runs only grow the report's memory.
pub const MAX_DURATION: Duration = Duration::from_hours(24);
/// Most replicas of one workload: keeps a mistyped number from exhausting memory (the
/// emulator holds every pod).
pub const MAX_REPLICAS: u32 = 50_000;
/// Region of the simulated cluster when the file names none.
pub const DEFAULT_REGION: &str = "us-west-2";
/// Cluster name when the file names none.
pub const DEFAULT_CLUSTER_NAME: &str = "simulated";
/// How often a progress line is printed by default (simulated time).
pub const DEFAULT_PROGRESS_EVERY: Duration = Duration::from_secs(30);
/// EC2's pending → running time in kwok by default.
pub const DEFAULT_LAUNCH_LATENCY: Duration = Duration::from_secs(15);
/// A running instance's kubelet registers its Node this long after boot by default (user data,
/// nodeadm, kubelet start).
pub const DEFAULT_REGISTRATION_DELAY: Duration = Duration::from_secs(20);
/// A registered Node turns Ready this long after registration by default (CNI up).
pub const DEFAULT_READY_DELAY: Duration = Duration::from_secs(5);
/// Startup taints are removed this long after the Node is Ready by default (the DaemonSets
/// that own them start).
pub const DEFAULT_STARTUP_TAINT_DELAY: Duration = Duration::from_secs(10);

/// A scenario file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScenarioError {
    /// Not YAML, or not the file's shape (serde names the field and the line).
    #[error("{0}")]
    Parse(String),
    /// A value breaks a rule.
    #[error("{path}: {rule}")]
    Invalid { path: String, rule: String },
}

impl ScenarioError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Parse(_) => "scenario_parse",
            Self::Invalid { .. } => "scenario_invalid",
        }
    }

    /// An [`ScenarioError::Invalid`] at `path`.
    pub fn invalid(path: impl Into<String>, rule: impl Into<String>) -> Self {
        Self::Invalid {
            path: path.into(),
            rule: rule.into(),
        }
    }
}

// ---- file form ---------------------------------------------------------------------------------

/// The file as written (camelCase keys, Go durations as strings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScenarioFile {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub seed: u64,
    pub duration: String,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub cluster_name: Option<String>,
    #[serde(default)]
    pub progress_every: Option<String>,
    /// The daemon's `FEATURE_GATES` (Karpenter's syntax: `SpotToSpotConsolidation=true,...`).
    #[serde(default)]
    pub feature_gates: Option<String>,
    #[serde(default)]
    pub kwok: KwokFile,
    #[serde(default)]
    pub node_pools: Vec<Value>,
    #[serde(default)]
    pub ec2_node_classes: Vec<Value>,
    #[serde(default)]
    pub workloads: Vec<WorkloadFile>,
    #[serde(default)]
    pub interruptions: Vec<InterruptionFile>,
    #[serde(default)]
    pub node_failures: Vec<NodeFailureFile>,
    /// New EKS-optimized AMI releases behind the public aliases.
    #[serde(default)]
    pub ami_releases: Vec<AmiReleaseFile>,
    #[serde(default)]
    pub pod_disruption_budgets: Vec<PodDisruptionBudgetFile>,
    #[serde(default)]
    pub chaos: Option<ChaosFile>,
}

/// kwok's settings as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KwokFile {
    #[serde(default)]
    pub launch_latency: Option<String>,
    #[serde(default)]
    pub registration_delay: Option<String>,
    #[serde(default)]
    pub ready_delay: Option<String>,
    #[serde(default)]
    pub startup_taint_delay: Option<String>,
    /// Limited capacity pools (ICE once used up).
    #[serde(default)]
    pub capacity: Vec<CapacityPoolFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CapacityPoolFile {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// Launches left in the pool; 0 makes it insufficient from the start.
    pub available: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkloadFile {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    /// Resource name to quantity (`cpu: 500m`), per pod.
    #[serde(default)]
    pub requests: BTreeMap<String, String>,
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Kubernetes tolerations, as in a pod spec.
    #[serde(default)]
    pub tolerations: Vec<Value>,
    /// Kubernetes topology spread constraints; `labelSelector` defaults to the workload's pods.
    #[serde(default)]
    pub topology_spread_constraints: Vec<Value>,
    /// A Kubernetes `affinity`, as in a pod spec.
    #[serde(default)]
    pub affinity: Option<Value>,
    /// Extra pod labels (`app: <name>` is always set).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Pod annotations (`karpenter.sh/do-not-disrupt: "true"`).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    pub steps: Vec<StepFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StepFile {
    pub at: String,
    pub replicas: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InterruptionFile {
    pub at: String,
    #[serde(default)]
    pub fraction: Option<f64>,
    #[serde(default)]
    pub count: Option<u32>,
    #[serde(default)]
    pub node_pool: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeFailureFile {
    pub at: String,
    pub count: u32,
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub node_pool: Option<String>,
}

/// An AMI release: at `at`, kwok publishes new images behind every public alias and deprecates
/// the previous ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AmiReleaseFile {
    pub at: String,
}

/// A PodDisruptionBudget created at the start, deleted at `until` if given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PodDisruptionBudgetFile {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    /// A Kubernetes `PodDisruptionBudgetSpec` (`selector`, `minAvailable` or `maxUnavailable`).
    pub spec: Value,
    #[serde(default)]
    pub until: Option<String>,
}

/// The chaos plan: the actor kit's fault plan and AWS faults at given times. Also the form of
/// a `--chaos FILE`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChaosFile {
    /// A fault plan of the actor kit (`seed`, `rules`), checked by the binary.
    #[serde(default)]
    pub actors: Option<Value>,
    #[serde(default)]
    pub aws: Vec<AwsFaultFile>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AwsFaultFile {
    pub at: String,
    pub service: String,
    pub operation: String,
    pub count: u32,
    pub code: String,
}

// ---- checked form ------------------------------------------------------------------------------

/// A checked scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub description: Option<String>,
    pub seed: u64,
    pub duration: Duration,
    pub region: String,
    pub cluster_name: String,
    pub progress_every: Duration,
    /// The daemon's feature gates.
    pub feature_gates: karpenter_config::FeatureGates,
    pub kwok: KwokSettings,
    /// NodePool manifests (checked by the binary).
    pub node_pools: Vec<Value>,
    /// EC2NodeClass manifests (checked by the binary).
    pub ec2_node_classes: Vec<Value>,
    pub workloads: Vec<Workload>,
    /// In time order.
    pub interruptions: Vec<Interruption>,
    /// In time order.
    pub node_failures: Vec<NodeFailure>,
    /// When kwok publishes a new AMI release, in time order.
    pub ami_releases: Vec<Duration>,
    pub pod_disruption_budgets: Vec<PodDisruptionBudget>,
    pub chaos: Chaos,
}

#[derive(Debug, Clone, PartialEq)]
pub struct KwokSettings {
    pub launch_latency: Duration,
    pub registration_delay: Duration,
    pub ready_delay: Duration,
    pub startup_taint_delay: Duration,
    pub capacity: Vec<CapacityPool>,
}

/// A limited capacity pool of kwok's EC2: EC2 knows spot and on-demand capacity only (reserved
/// capacity is on-demand capacity in a reservation), so [`CapacityType::Reserved`] is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityPool {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub available: u32,
}

/// A deployment whose replica count follows its steps.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub name: String,
    pub namespace: String,
    pub requests: BTreeMap<String, String>,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Value>,
    pub topology_spread_constraints: Vec<Value>,
    pub affinity: Option<Value>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// In time order, strictly increasing.
    pub steps: Vec<ScaleStep>,
}

/// A PodDisruptionBudget of the scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct PodDisruptionBudget {
    pub name: String,
    pub namespace: String,
    /// The spec (checked as a Kubernetes type by the loader).
    pub spec: Value,
    /// When the harness deletes it (`None`: never).
    pub until: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScaleStep {
    pub at: Duration,
    pub replicas: u32,
}

/// How many of the matching instances an event hits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Share {
    Count(u32),
    /// Of the matching instances at that time, rounded up (at least one when any match).
    Fraction(f64),
}

impl Share {
    /// How many of `of` candidates are hit.
    #[must_use]
    pub fn of(self, of: usize) -> usize {
        match self {
            Self::Count(count) => usize::try_from(count).unwrap_or(usize::MAX).min(of),
            Self::Fraction(fraction) => {
                #[expect(
                    clippy::cast_precision_loss,
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "instance counts are far below 2^52 and the fraction is in (0, 1]"
                )]
                let hit = (of as f64 * fraction).ceil() as usize;
                hit.min(of)
            }
        }
    }
}

/// Spot interruption warnings sent at `at`.
#[derive(Debug, Clone, PartialEq)]
pub struct Interruption {
    pub at: Duration,
    pub share: Share,
    pub node_pool: Option<String>,
}

/// What happens to a failed node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    /// The instance is terminated outside Karpenter (the garbage collector and the NodeClaim's
    /// liveness notice).
    Terminate,
    /// The kubelet stops reporting: the Node turns `Ready=Unknown` (Node Repair's case).
    NotReady,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeFailure {
    pub at: Duration,
    pub count: u32,
    pub mode: FailureMode,
    pub node_pool: Option<String>,
}

/// The chaos plan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chaos {
    /// The kit's fault plan (YAML value of a `FaultPlanFile`), checked by the binary.
    pub actors: Option<Value>,
    /// In time order.
    pub aws: Vec<AwsFault>,
}

/// The AWS services kwok can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AwsService {
    Ec2,
    Sqs,
    Iam,
    Ssm,
    Pricing,
    EventBridge,
}

impl AwsService {
    /// Every service, in the order of the file format's names.
    pub const ALL: [Self; 6] = [
        Self::Ec2,
        Self::Sqs,
        Self::Iam,
        Self::Ssm,
        Self::Pricing,
        Self::EventBridge,
    ];

    const NAMES: [(&'static str, Self); 6] = [
        ("ec2", Self::Ec2),
        ("sqs", Self::Sqs),
        ("iam", Self::Iam),
        ("ssm", Self::Ssm),
        ("pricing", Self::Pricing),
        ("eventbridge", Self::EventBridge),
    ];

    fn parse(text: &str) -> Option<Self> {
        Self::NAMES
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(_, s)| *s)
    }

    #[must_use]
    pub fn as_str(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, s)| *s == self)
            .map_or("", |(name, _)| name)
    }
}

/// The next `count` calls of `operation` fail with `code`, from `at` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsFault {
    pub at: Duration,
    pub service: AwsService,
    pub operation: String,
    pub count: u32,
    pub code: String,
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (seed {}, {} simulated)",
            self.name,
            self.seed,
            format_go_duration(self.duration)
        )
    }
}

// ---- checks ------------------------------------------------------------------------------------

fn duration_at(path: &str, text: &str) -> Result<Duration, ScenarioError> {
    parse_go_duration(text).map_err(|e| ScenarioError::invalid(path, e.to_string()))
}

fn optional_duration(
    path: &str,
    text: Option<&str>,
    default: Duration,
) -> Result<Duration, ScenarioError> {
    text.map_or(Ok(default), |t| duration_at(path, t))
}

/// An event time: a duration within the run.
fn event_time(path: &str, text: &str, run: Duration) -> Result<Duration, ScenarioError> {
    let at = duration_at(path, text)?;
    if at >= run {
        return Err(ScenarioError::invalid(
            path,
            format!(
                "{text} is not before the end of the scenario (duration {})",
                format_go_duration(run)
            ),
        ));
    }
    Ok(at)
}

/// A DNS-1123 label, as pod and namespace names need.
fn check_dns_label(path: &str, value: &str) -> Result<(), ScenarioError> {
    let valid = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if valid {
        Ok(())
    } else {
        Err(ScenarioError::invalid(
            path,
            format!(
                "{value:?} must be a DNS label: 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"
            ),
        ))
    }
}

impl Scenario {
    /// Parses and checks a scenario file.
    pub fn from_yaml(text: &str) -> Result<Self, ScenarioError> {
        let file: ScenarioFile =
            yaml::from_str(text).map_err(|e| ScenarioError::Parse(e.to_string()))?;
        file.check()
    }

    /// The embedded default scenario.
    pub fn default_scenario() -> Result<Self, ScenarioError> {
        Self::from_yaml(DEFAULT_SCENARIO)
    }

    /// Replaces the chaos plan with one read from a `--chaos FILE` (the `chaos:` section's form).
    pub fn with_chaos_yaml(mut self, text: &str) -> Result<Self, ScenarioError> {
        let file: ChaosFile =
            yaml::from_str(text).map_err(|e| ScenarioError::Parse(e.to_string()))?;
        self.chaos = check_chaos("chaos", file, self.duration)?;
        Ok(self)
    }
}

impl ScenarioFile {
    /// Checks every rule and builds the [`Scenario`].
    pub fn check(self) -> Result<Scenario, ScenarioError> {
        if self.name.trim().is_empty() {
            return Err(ScenarioError::invalid("name", "must not be empty"));
        }
        let duration = duration_at("duration", &self.duration)?;
        if duration.is_zero() || duration > MAX_DURATION {
            return Err(ScenarioError::invalid(
                "duration",
                "must be more than 0s and at most 24h",
            ));
        }
        let progress_every = optional_duration(
            "progressEvery",
            self.progress_every.as_deref(),
            DEFAULT_PROGRESS_EVERY,
        )?;
        if progress_every.is_zero() {
            return Err(ScenarioError::invalid(
                "progressEvery",
                "must be more than 0s",
            ));
        }
        let region = self.region.unwrap_or_else(|| DEFAULT_REGION.to_owned());
        if region.trim().is_empty() {
            return Err(ScenarioError::invalid("region", "must not be empty"));
        }
        let cluster_name = self
            .cluster_name
            .unwrap_or_else(|| DEFAULT_CLUSTER_NAME.to_owned());
        if cluster_name.trim().is_empty() {
            return Err(ScenarioError::invalid("clusterName", "must not be empty"));
        }
        let feature_gates = match self.feature_gates.as_deref() {
            None => karpenter_config::FeatureGates::default(),
            Some(text) => text
                .parse()
                .map_err(|e: karpenter_config::FeatureGatesError| {
                    ScenarioError::invalid("featureGates", e.to_string())
                })?,
        };
        let kwok = check_kwok(self.kwok)?;
        for (i, pool) in self.node_pools.iter().enumerate() {
            if !pool.is_object() {
                return Err(ScenarioError::invalid(
                    format!("nodePools[{i}]"),
                    "must be a NodePool manifest (a mapping)",
                ));
            }
        }
        for (i, class) in self.ec2_node_classes.iter().enumerate() {
            if !class.is_object() {
                return Err(ScenarioError::invalid(
                    format!("ec2NodeClasses[{i}]"),
                    "must be an EC2NodeClass manifest (a mapping)",
                ));
            }
        }
        let workloads = check_workloads(self.workloads, duration)?;
        let mut interruptions = self
            .interruptions
            .into_iter()
            .enumerate()
            .map(|(i, event)| check_interruption(i, event, duration))
            .collect::<Result<Vec<_>, _>>()?;
        interruptions.sort_by_key(|e| e.at);
        let mut node_failures = self
            .node_failures
            .into_iter()
            .enumerate()
            .map(|(i, event)| check_node_failure(i, event, duration))
            .collect::<Result<Vec<_>, _>>()?;
        node_failures.sort_by_key(|e| e.at);
        let ami_releases = check_ami_releases(&self.ami_releases, duration)?;
        let pod_disruption_budgets =
            check_pod_disruption_budgets(self.pod_disruption_budgets, duration)?;
        let chaos = match self.chaos {
            Some(chaos) => check_chaos("chaos", chaos, duration)?,
            None => Chaos::default(),
        };
        Ok(Scenario {
            name: self.name,
            description: self.description,
            seed: self.seed,
            duration,
            region,
            cluster_name,
            progress_every,
            feature_gates,
            kwok,
            node_pools: self.node_pools,
            ec2_node_classes: self.ec2_node_classes,
            workloads,
            interruptions,
            node_failures,
            ami_releases,
            pod_disruption_budgets,
            chaos,
        })
    }
}

fn check_kwok(file: KwokFile) -> Result<KwokSettings, ScenarioError> {
    let capacity = file
        .capacity
        .into_iter()
        .enumerate()
        .map(|(i, pool)| {
            let path = format!("kwok.capacity[{i}]");
            let capacity_type = match CapacityType::parse(&pool.capacity_type) {
                Some(limited @ (CapacityType::Spot | CapacityType::OnDemand)) => limited,
                Some(CapacityType::Reserved) => {
                    return Err(ScenarioError::invalid(
                        format!("{path}.capacityType"),
                        "\"reserved\" cannot be limited: kwok's EC2 has spot and on-demand \
                         pools only (reserved capacity is on-demand capacity in a reservation); \
                         use \"spot\" or \"on-demand\"",
                    ));
                }
                None => {
                    return Err(ScenarioError::invalid(
                        format!("{path}.capacityType"),
                        format!("{:?} must be \"spot\" or \"on-demand\"", pool.capacity_type),
                    ));
                }
            };
            if pool.instance_type.is_empty() {
                return Err(ScenarioError::invalid(
                    format!("{path}.instanceType"),
                    "must not be empty",
                ));
            }
            if pool.zone.is_empty() {
                return Err(ScenarioError::invalid(
                    format!("{path}.zone"),
                    "must not be empty",
                ));
            }
            Ok(CapacityPool {
                instance_type: pool.instance_type,
                zone: pool.zone,
                capacity_type,
                available: pool.available,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(KwokSettings {
        launch_latency: optional_duration(
            "kwok.launchLatency",
            file.launch_latency.as_deref(),
            DEFAULT_LAUNCH_LATENCY,
        )?,
        registration_delay: optional_duration(
            "kwok.registrationDelay",
            file.registration_delay.as_deref(),
            DEFAULT_REGISTRATION_DELAY,
        )?,
        ready_delay: optional_duration(
            "kwok.readyDelay",
            file.ready_delay.as_deref(),
            DEFAULT_READY_DELAY,
        )?,
        startup_taint_delay: optional_duration(
            "kwok.startupTaintDelay",
            file.startup_taint_delay.as_deref(),
            DEFAULT_STARTUP_TAINT_DELAY,
        )?,
        capacity,
    })
}

/// Checks `<path>.name` and `<path>.namespace` (default `default`) as DNS labels and the pair
/// as unused by an earlier `what` of the file; returns the namespace.
fn check_namespaced_name(
    path: &str,
    name: &str,
    namespace: Option<String>,
    seen: &mut BTreeSet<(String, String)>,
    what: &str,
) -> Result<String, ScenarioError> {
    check_dns_label(&format!("{path}.name"), name)?;
    let namespace = namespace.unwrap_or_else(|| "default".to_owned());
    check_dns_label(&format!("{path}.namespace"), &namespace)?;
    if !seen.insert((namespace.clone(), name.to_owned())) {
        return Err(ScenarioError::invalid(
            format!("{path}.name"),
            format!("{name:?} is used by an earlier {what} in namespace {namespace:?}"),
        ));
    }
    Ok(namespace)
}

fn check_workloads(
    files: Vec<WorkloadFile>,
    run: Duration,
) -> Result<Vec<Workload>, ScenarioError> {
    let mut seen = BTreeSet::new();
    let mut workloads = Vec::with_capacity(files.len());
    for (i, file) in files.into_iter().enumerate() {
        let path = format!("workloads[{i}]");
        let namespace =
            check_namespaced_name(&path, &file.name, file.namespace, &mut seen, "workload")?;
        if file.steps.is_empty() {
            return Err(ScenarioError::invalid(
                format!("{path}.steps"),
                "needs at least one step (at, replicas)",
            ));
        }
        let mut steps: Vec<ScaleStep> = Vec::with_capacity(file.steps.len());
        for (j, step) in file.steps.iter().enumerate() {
            let step_path = format!("{path}.steps[{j}]");
            let at = event_time(&format!("{step_path}.at"), &step.at, run)?;
            if let Some(previous) = steps.last()
                && at <= previous.at
            {
                return Err(ScenarioError::invalid(
                    format!("{step_path}.at"),
                    format!(
                        "{} must be later than the previous step's {}",
                        step.at,
                        file.steps[j - 1].at
                    ),
                ));
            }
            if step.replicas > MAX_REPLICAS {
                return Err(ScenarioError::invalid(
                    format!("{step_path}.replicas"),
                    format!("{} is more than the limit of {MAX_REPLICAS}", step.replicas),
                ));
            }
            steps.push(ScaleStep {
                at,
                replicas: step.replicas,
            });
        }
        if file.labels.contains_key("app") {
            return Err(ScenarioError::invalid(
                format!("{path}.labels.app"),
                "is set to the workload's name by the simulator; remove it",
            ));
        }
        if file.annotations.keys().any(String::is_empty) {
            return Err(ScenarioError::invalid(
                format!("{path}.annotations"),
                "a key must not be empty",
            ));
        }
        workloads.push(Workload {
            name: file.name,
            namespace,
            requests: file.requests,
            node_selector: file.node_selector,
            tolerations: file.tolerations,
            topology_spread_constraints: file.topology_spread_constraints,
            affinity: file.affinity,
            labels: file.labels,
            annotations: file.annotations,
            steps,
        });
    }
    Ok(workloads)
}

fn check_pod_disruption_budgets(
    files: Vec<PodDisruptionBudgetFile>,
    run: Duration,
) -> Result<Vec<PodDisruptionBudget>, ScenarioError> {
    let mut seen = BTreeSet::new();
    let mut budgets = Vec::with_capacity(files.len());
    for (i, file) in files.into_iter().enumerate() {
        let path = format!("podDisruptionBudgets[{i}]");
        let namespace =
            check_namespaced_name(&path, &file.name, file.namespace, &mut seen, "budget")?;
        if !file.spec.is_object() {
            return Err(ScenarioError::invalid(
                format!("{path}.spec"),
                "must be a PodDisruptionBudgetSpec (a mapping)",
            ));
        }
        let until = file
            .until
            .as_deref()
            .map(|text| event_time(&format!("{path}.until"), text, run))
            .transpose()?;
        budgets.push(PodDisruptionBudget {
            name: file.name,
            namespace,
            spec: file.spec,
            until,
        });
    }
    Ok(budgets)
}

fn check_interruption(
    i: usize,
    file: InterruptionFile,
    run: Duration,
) -> Result<Interruption, ScenarioError> {
    let path = format!("interruptions[{i}]");
    let at = event_time(&format!("{path}.at"), &file.at, run)?;
    let share = match (file.fraction, file.count) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(ScenarioError::invalid(
                path,
                "set exactly one of fraction and count",
            ));
        }
        (Some(fraction), None) => {
            if !(fraction > 0.0 && fraction <= 1.0) {
                return Err(ScenarioError::invalid(
                    format!("{path}.fraction"),
                    format!("{fraction} must be more than 0 and at most 1"),
                ));
            }
            Share::Fraction(fraction)
        }
        (None, Some(count)) => {
            if count == 0 {
                return Err(ScenarioError::invalid(
                    format!("{path}.count"),
                    "must be at least 1",
                ));
            }
            Share::Count(count)
        }
    };
    Ok(Interruption {
        at,
        share,
        node_pool: file.node_pool,
    })
}

fn check_node_failure(
    i: usize,
    file: NodeFailureFile,
    run: Duration,
) -> Result<NodeFailure, ScenarioError> {
    let path = format!("nodeFailures[{i}]");
    let at = event_time(&format!("{path}.at"), &file.at, run)?;
    if file.count == 0 {
        return Err(ScenarioError::invalid(
            format!("{path}.count"),
            "must be at least 1",
        ));
    }
    let mode = match file.mode.as_deref() {
        None | Some("terminate") => FailureMode::Terminate,
        Some("notReady") => FailureMode::NotReady,
        Some(other) => {
            return Err(ScenarioError::invalid(
                format!("{path}.mode"),
                format!("{other:?} must be \"terminate\" or \"notReady\""),
            ));
        }
    };
    Ok(NodeFailure {
        at,
        count: file.count,
        mode,
        node_pool: file.node_pool,
    })
}

/// The release times, in order.
fn check_ami_releases(
    releases: &[AmiReleaseFile],
    run: Duration,
) -> Result<Vec<Duration>, ScenarioError> {
    let mut at = releases
        .iter()
        .enumerate()
        .map(|(i, release)| event_time(&format!("amiReleases[{i}].at"), &release.at, run))
        .collect::<Result<Vec<_>, _>>()?;
    at.sort();
    Ok(at)
}

fn check_chaos(path: &str, file: ChaosFile, run: Duration) -> Result<Chaos, ScenarioError> {
    if let Some(actors) = &file.actors
        && !actors.is_object()
    {
        return Err(ScenarioError::invalid(
            format!("{path}.actors"),
            "must be a fault plan (a mapping with seed and rules)",
        ));
    }
    let mut aws = Vec::with_capacity(file.aws.len());
    for (i, fault) in file.aws.into_iter().enumerate() {
        let fault_path = format!("{path}.aws[{i}]");
        let at = event_time(&format!("{fault_path}.at"), &fault.at, run)?;
        let service = AwsService::parse(&fault.service).ok_or_else(|| {
            ScenarioError::invalid(
                format!("{fault_path}.service"),
                format!(
                    "{:?} must be one of {}",
                    fault.service,
                    AwsService::NAMES
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        if fault.operation.is_empty() {
            return Err(ScenarioError::invalid(
                format!("{fault_path}.operation"),
                "must name an API operation (CreateFleet, ReceiveMessage, ...)",
            ));
        }
        if fault.count == 0 {
            return Err(ScenarioError::invalid(
                format!("{fault_path}.count"),
                "must be at least 1",
            ));
        }
        if fault.code.is_empty() {
            return Err(ScenarioError::invalid(
                format!("{fault_path}.code"),
                "must be an AWS error code (RequestLimitExceeded, InsufficientInstanceCapacity, InternalError, ...)",
            ));
        }
        aws.push(AwsFault {
            at,
            service,
            operation: fault.operation,
            count: fault.count,
            code: fault.code,
        });
    }
    aws.sort_by_key(|f| f.at);
    Ok(Chaos {
        actors: file.actors,
        aws,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "
name: tiny
duration: 5m
workloads:
  - name: web
    requests: {cpu: 500m}
    steps:
      - {at: 0s, replicas: 3}
      - {at: 2m, replicas: 10}
";

    fn error_of(text: &str) -> ScenarioError {
        Scenario::from_yaml(text).expect_err("the scenario is invalid")
    }

    #[test]
    fn the_default_scenario_is_valid() {
        let scenario = Scenario::default_scenario().expect("default scenario");
        assert!(!scenario.workloads.is_empty());
        assert!(!scenario.node_pools.is_empty());
    }

    #[test]
    fn a_minimal_scenario_gets_the_defaults() {
        let scenario = Scenario::from_yaml(MINIMAL).expect("valid");
        assert_eq!(scenario.region, DEFAULT_REGION);
        assert_eq!(scenario.workloads[0].namespace, "default");
        assert_eq!(
            scenario.workloads[0].steps[1],
            ScaleStep {
                at: Duration::from_mins(2),
                replicas: 10
            }
        );
        assert_eq!(scenario.kwok.launch_latency, DEFAULT_LAUNCH_LATENCY);
    }

    #[test]
    fn an_unknown_field_is_named() {
        let text = MINIMAL.replace("requests:", "requestz:");
        let message = error_of(&text).to_string();
        assert!(message.contains("requestz"), "{message}");
    }

    #[test]
    fn steps_out_of_order_name_the_step() {
        let text = MINIMAL.replace("at: 2m", "at: 0s");
        assert_eq!(
            error_of(&text),
            ScenarioError::invalid(
                "workloads[0].steps[1].at",
                "0s must be later than the previous step's 0s"
            )
        );
    }

    #[test]
    fn a_step_after_the_end_names_the_duration() {
        let text = MINIMAL.replace("at: 2m", "at: 6m");
        let message = error_of(&text).to_string();
        assert!(
            message.starts_with("workloads[0].steps[1].at: 6m is not before the end"),
            "{message}"
        );
    }

    #[test]
    fn a_bad_duration_names_the_field() {
        let message = error_of(&MINIMAL.replace("duration: 5m", "duration: five")).to_string();
        assert!(message.starts_with("duration: "), "{message}");
    }

    #[test]
    fn an_interruption_needs_exactly_one_share() {
        let text = format!("{MINIMAL}interruptions:\n  - {{at: 1m, fraction: 0.5, count: 2}}\n");
        assert_eq!(
            error_of(&text),
            ScenarioError::invalid("interruptions[0]", "set exactly one of fraction and count")
        );
        let text = format!("{MINIMAL}interruptions:\n  - {{at: 1m, fraction: 1.5}}\n");
        assert_eq!(
            error_of(&text),
            ScenarioError::invalid(
                "interruptions[0].fraction",
                "1.5 must be more than 0 and at most 1"
            )
        );
    }

    #[test]
    fn chaos_names_the_aws_service() {
        let text = format!(
            "{MINIMAL}chaos:\n  aws:\n    - {{at: 1m, service: s3, operation: GetObject, count: 1, code: InternalError}}\n"
        );
        let message = error_of(&text).to_string();
        assert!(
            message.starts_with("chaos.aws[0].service: \"s3\" must be one of ec2"),
            "{message}"
        );
    }

    #[test]
    fn a_reserved_capacity_pool_is_refused_with_the_field_named() {
        let pool = |capacity_type: &str| {
            format!(
                "{MINIMAL}kwok:\n  capacity:\n    - {{instanceType: m5.large, zone: us-west-2a, capacityType: {capacity_type}, available: 1}}\n"
            )
        };
        let scenario = Scenario::from_yaml(&pool("on-demand")).expect("valid");
        assert_eq!(
            scenario.kwok.capacity[0].capacity_type,
            CapacityType::OnDemand
        );
        let message = error_of(&pool("reserved")).to_string();
        assert!(
            message.starts_with("kwok.capacity[0].capacityType: \"reserved\" cannot be limited"),
            "{message}"
        );
        let message = error_of(&pool("spotty")).to_string();
        assert_eq!(
            message,
            "kwok.capacity[0].capacityType: \"spotty\" must be \"spot\" or \"on-demand\""
        );
    }

    #[test]
    fn a_pod_disruption_budget_names_its_field() {
        let budget = |extra: &str| {
            format!(
                "{MINIMAL}podDisruptionBudgets:\n  - {{name: web, spec: {{maxUnavailable: 0}}{extra}}}\n"
            )
        };
        let scenario = Scenario::from_yaml(&budget(", until: 4m")).expect("valid");
        assert_eq!(
            scenario.pod_disruption_budgets[0].until,
            Some(Duration::from_mins(4))
        );
        assert_eq!(scenario.pod_disruption_budgets[0].namespace, "default");
        let message = error_of(&budget(", until: 9m")).to_string();
        assert!(
            message.starts_with("podDisruptionBudgets[0].until: 9m is not before the end"),
            "{message}"
        );
        let text = format!("{MINIMAL}podDisruptionBudgets:\n  - {{name: Web, spec: {{}}}}\n");
        let message = error_of(&text).to_string();
        assert!(
            message.starts_with("podDisruptionBudgets[0].name: "),
            "{message}"
        );
    }

    #[test]
    fn workload_annotations_are_kept() {
        let text = MINIMAL.replace(
            "    requests: {cpu: 500m}\n",
            "    requests: {cpu: 500m}\n    annotations: {karpenter.sh/do-not-disrupt: \"true\"}\n",
        );
        let scenario = Scenario::from_yaml(&text).expect("valid");
        assert_eq!(
            scenario.workloads[0]
                .annotations
                .get("karpenter.sh/do-not-disrupt")
                .map(String::as_str),
            Some("true")
        );
    }

    #[test]
    fn fractions_round_up_and_never_exceed_the_candidates() {
        assert_eq!(Share::Fraction(0.25).of(10), 3);
        assert_eq!(Share::Fraction(1.0).of(4), 4);
        assert_eq!(Share::Count(5).of(2), 2);
        assert_eq!(Share::Fraction(0.1).of(0), 0);
    }
}
