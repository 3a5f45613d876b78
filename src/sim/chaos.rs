//! Seeded chaos over a scenario, and the proofs checked after it (`tests/simulate/chaos_proofs.rs`).
//!
//! ```text
//! ChaosOptions { seed, shares, restarts, settle }
//!   -> the plan: panics at a seeded share of the messages of every actor family (the kit's
//!      FaultPlan); a share of the calls to EC2, SQS, SSM and Pricing answered with throttling
//!      or 5xx, and a share of each CreateFleet's (type, zone) pools out of capacity (kwok); a
//!      share of the API server's requests answered 500, writes answered 409, watches answered
//!      410, and requests delayed (the emulator); daemon restarts at seeded instants
//!   -> run: the scenario with `settle` more time; chaos armed from the start to the scenario's
//!      end, then disarmed, so the settle period shows whether the cluster comes back; every
//!      simulated second the NodeClaims' provider ids, NodeClaim phases and live instances
//!      are recorded (the Observer); a daemon whose root supervisor gives up (more failures
//!      in a minute than it tolerates) is a crashed process: the driver starts it again, as the
//!      kubelet would, and counts the crash
//!   -> proofs at the end: every pod bound, no NodeClaim stuck, no instance left without a
//!      NodeClaim past the garbage collector's window, no NodeClaim with two instances and no
//!      instance with two NodeClaims, no interruption warning lost, no actor parked, the last
//!      daemon not escalated
//! ```
//!
//! A seed replays: time is paused, every draw is keyed by what it is drawn for (the AWS call and
//! its ids, the API request's verb and path, the actor's message) and how many such came before,
//! not by its place among all draws, and backoff jitter is seeded
//! ([`karpenter_actors::jitter`]). Blocking tasks run on threads outside the simulated clock's
//! runtime, so a rerun may still differ by a request or two.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use karpenter_actors::kwok::faults::FailShare;
use karpenter_actors::ports::cloud_provider::parse_provider_id;
use karpenter_actors::ports::cluster_view::ClusterView;
use karpenter_actors::ports::ec2::InstanceState;
use karpenter_actors::runtime::{ActorKit, FaultAction, FaultPlan, FaultRule};
use karpenter_core::apis::condition_set::is_true;
use karpenter_core::apis::conditions::nodeclaim::INITIALIZED;
use karpenter_core::draw::unit_draw;

use super::report::Report;
use super::scenario::{
    HARNESS_TICK, LoadedScenario, Pace, Simulation, SimulationError, on_runtime,
};
use crate::emulator::{FaultRule as ApiFault, Verb};
use crate::sim::binder::{existing_node, is_schedulable};
use crate::sim::scenario::file::AwsService as Service;
use crate::sim::world::port_service;

/// Every actor family of the daemon: each gets its own panic rule, so each is hit.
pub const ACTOR_FAMILIES: &[&str] = &[
    "CatalogueRefreshActor",
    "ClaimActor",
    "CreateFleetBatcherActor",
    "DescribeInstancesBatcherActor",
    "DisruptionActor",
    "GarbageCollectorActor",
    "InterruptionActor",
    "LaunchTemplateJanitorActor",
    "NodeClaimActor",
    "NodeClassActor",
    "NodePoolActor",
    "ProvisionerActor",
    "TerminateInstancesBatcherActor",
    "UnavailableOfferingsActor",
    "VersionActor",
];

/// A NodeClaim that has not launched and initialized, or not finished deleting, this long after
/// the phase began is stuck (the longest legitimate wait in the scenarios is a drain behind a
/// PodDisruptionBudget, which the settle period outlasts).
pub const STUCK_AFTER: Duration = Duration::from_mins(10);

/// An instance no NodeClaim names must be gone this long after it first ran (the garbage
/// collector terminates such instances 30 s after launch, sweeping every 2 minutes).
pub const LEAK_AFTER: Duration = Duration::from_mins(5);

/// What a chaos run injects.
#[derive(Debug, Clone, PartialEq)]
pub struct ChaosOptions {
    pub seed: u64,
    /// Share of each actor's messages that panic (at most [`Self::panics_per_actor`] each).
    pub panic_share: f64,
    pub panics_per_actor: u64,
    /// Share of AWS calls failing with throttling or 5xx, and of CreateFleet pools out of capacity.
    pub aws_share: f64,
    /// Share of API requests answered 500, of writes answered 409 and of watches answered 410.
    pub api_share: f64,
    /// Share of API requests delayed by [`Self::api_latency`].
    pub latency_share: f64,
    pub api_latency: Duration,
    /// Daemon restarts, at seeded instants of the chaos window.
    pub restarts: u32,
    /// Calm time after the scenario's end before the proofs are checked.
    pub settle: Duration,
}

impl ChaosOptions {
    /// The plan of issue 18: AWS faults on 20% of calls, a few percent of API faults, panics in
    /// every family, two restarts, 15 calm minutes.
    #[must_use]
    pub fn seeded(seed: u64) -> Self {
        Self {
            seed,
            panic_share: 0.02,
            panics_per_actor: 2,
            aws_share: 0.2,
            api_share: 0.05,
            latency_share: 0.1,
            api_latency: Duration::from_millis(250),
            restarts: 2,
            settle: Duration::from_mins(15),
        }
    }

    fn actor_plan(&self) -> Result<FaultPlan, SimulationError> {
        let mut plan = FaultPlan::new(self.seed);
        for family in ACTOR_FAMILIES {
            plan = plan
                .with_rule(
                    FaultRule::new(FaultAction::Panic)
                        .kind(*family)
                        .probability(self.panic_share)
                        .times(self.panics_per_actor),
                )
                .map_err(SimulationError::Chaos)?;
        }
        Ok(plan)
    }

    /// The instants of the daemon restarts, in order, within (1 minute, `window` - 1 minute).
    fn restart_times(&self, window: Duration) -> Vec<Duration> {
        let span = window.saturating_sub(Duration::from_mins(2)).as_secs();
        let mut times: Vec<Duration> = (0..self.restarts)
            .map(|n| {
                let draw = unit_draw(self.seed, &[b"restart", &n.to_le_bytes()]);
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    clippy::cast_precision_loss,
                    reason = "a fraction of a span of seconds"
                )]
                let at = (draw * span as f64) as u64;
                Duration::from_secs(60 + at)
            })
            .collect();
        times.sort();
        times
    }
}

/// Faults injected by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InjectedCounts {
    pub actor_panics: usize,
    pub aws_errors: usize,
    pub ice: usize,
    pub api: usize,
}

impl InjectedCounts {
    #[must_use]
    pub fn total(&self) -> usize {
        self.actor_panics + self.aws_errors + self.ice + self.api
    }
}

/// What a chaos run did and what its proofs found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChaosOutcome {
    pub scenario: String,
    pub seed: u64,
    pub injected: InjectedCounts,
    /// Daemon restarts done (and start attempts that failed and were retried).
    pub daemon_restarts: u32,
    pub failed_starts: u32,
    /// Times the daemon's root supervisor gave up (too many failures in a minute): the process
    /// exits, and the driver starts it again as the kubelet would.
    pub crashes: u32,
    /// Supervisor restarts of actors, over every daemon.
    pub actor_restarts: u64,
    /// NodeClaims that were given two instances, and instances two NodeClaims named.
    pub duplicates: Vec<String>,
    /// Instances launched that no NodeClaim ever named (terminated by the collector unless leaked).
    pub unnamed_launches: usize,
    /// Live instances no NodeClaim names, past [`LEAK_AFTER`].
    pub leaks: Vec<String>,
    /// Interruption warnings whose instance EC2 reclaimed from under a NodeClaim, plus messages
    /// left in the queue.
    pub lost: usize,
    pub interruption_warnings: usize,
    pub pending_pods: usize,
    /// The first pending pods with the last word on each (Karpenter's event or the scheduler's).
    pub pending: Vec<String>,
    /// Every node at the end as the simulated scheduler sees it, read only when pods are left
    /// pending (to tell a node Karpenter nominates to from one the scheduler can bind to).
    pub nodes_at_end: Vec<String>,
    /// NodeClaims stuck in a phase past [`STUCK_AFTER`] (name and phase).
    pub stuck: Vec<String>,
    pub parked: usize,
    pub escalated: bool,
    /// The supervisors that escalated, with the last child stop of each (every daemon).
    pub escalations: Vec<String>,
    pub nodeclaims: usize,
}

impl ChaosOutcome {
    /// The proofs that failed, one line each (empty: the run proved everything).
    #[must_use]
    pub fn violations(&self) -> Vec<String> {
        let mut found = Vec::new();
        if self.pending_pods > 0 {
            found.push(format!(
                "{} pods still pending: {}",
                self.pending_pods,
                self.pending.join("; ")
            ));
            let nodes = if self.nodes_at_end.is_empty() {
                "none".to_owned()
            } else {
                self.nodes_at_end.join("; ")
            };
            found.push(format!("nodes at the end: {nodes}"));
        }
        if !self.stuck.is_empty() {
            found.push(format!("NodeClaims stuck: {}", self.stuck.join(", ")));
        }
        if !self.leaks.is_empty() {
            found.push(format!("instances leaked: {}", self.leaks.join(", ")));
        }
        if !self.duplicates.is_empty() {
            found.push(format!("duplicates: {}", self.duplicates.join(", ")));
        }
        if self.lost > 0 {
            found.push(format!("{} interruption warnings lost", self.lost));
        }
        if self.parked > 0 {
            found.push(format!("{} actors parked at the end", self.parked));
        }
        if self.escalated {
            found.push(format!(
                "the last daemon's root supervisor escalated: {}",
                self.escalations.join("; ")
            ));
        }
        found
    }
}

/// The table of chaos runs (seed, faults injected, restarts, duplicates, leaks, lost messages).
#[must_use]
pub fn table(outcomes: &[ChaosOutcome]) -> String {
    let mut out = String::from(
        "scenario       seed  panics  aws  ice  api  restarts(daemon/crash/actor)  nodeclaims  unnamed  duplicates  leaks  lost/warned  stuck  parked  pending\n",
    );
    for o in outcomes {
        let _ = writeln!(
            out,
            "{:<13} {:>5}  {:>6} {:>4} {:>4} {:>4}  {:>10}/{}/{:<15}  {:>10}  {:>7}  {:>10}  {:>5}  {:>5}/{:<5}  {:>5}  {:>6}  {:>7}",
            o.scenario,
            o.seed,
            o.injected.actor_panics,
            o.injected.aws_errors,
            o.injected.ice,
            o.injected.api,
            o.daemon_restarts,
            o.crashes,
            o.actor_restarts,
            o.nodeclaims,
            o.unnamed_launches,
            o.duplicates.len(),
            o.leaks.len(),
            o.lost,
            o.interruption_warnings,
            o.stuck.len(),
            o.parked,
            o.pending_pods,
        );
    }
    out
}

/// Where a NodeClaim is, for the stuck proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Starting,
    Deleting,
}

/// What the chaos driver records every simulated second.
#[derive(Debug, Default)]
struct Observer {
    /// Provider ids each NodeClaim carried, and NodeClaims that named each instance.
    instances_of: BTreeMap<String, BTreeSet<String>>,
    claims_of: BTreeMap<String, BTreeSet<String>>,
    /// NodeClaims not yet initialized or deleting: the phase and when it was first seen.
    phases: BTreeMap<String, (Phase, Duration)>,
    /// Instances by when they were first seen pending or running.
    first_live: BTreeMap<String, Duration>,
}

impl Observer {
    fn observe(&mut self, sim: &Simulation<'_>, now: Duration) {
        let mut current = BTreeSet::new();
        for claim in sim.view().nodeclaims() {
            let name = claim.name_any();
            // A NodeClaim recreated with the same name is another NodeClaim.
            let id = format!(
                "{name}/{}",
                claim.metadata.uid.as_deref().unwrap_or_default()
            );
            let status = claim.status.as_ref();
            if let Some(instance) = status
                .and_then(|s| s.provider_id.as_deref())
                .and_then(|p| parse_provider_id(p).ok())
                .map(|(_, instance)| instance.to_owned())
            {
                self.instances_of
                    .entry(id.clone())
                    .or_default()
                    .insert(instance.clone());
                self.claims_of
                    .entry(instance)
                    .or_default()
                    .insert(id.clone());
            }
            let phase = if claim.metadata.deletion_timestamp.is_some() {
                Some(Phase::Deleting)
            } else if status.is_some_and(|s| is_true(&s.conditions, INITIALIZED)) {
                None
            } else {
                Some(Phase::Starting)
            };
            match phase {
                Some(phase) => {
                    let entry = self.phases.entry(id.clone()).or_insert((phase, now));
                    if entry.0 != phase {
                        *entry = (phase, now);
                    }
                    current.insert(id);
                }
                None => {
                    self.phases.remove(&id);
                }
            }
        }
        self.phases.retain(|id, _| current.contains(id));
        for instance in sim.world().ec2.instances() {
            if matches!(
                instance.state,
                InstanceState::Pending | InstanceState::Running
            ) {
                self.first_live.entry(instance.id).or_insert(now);
            }
        }
    }

    fn duplicates(&self) -> Vec<String> {
        let doubled = self
            .instances_of
            .iter()
            .filter(|(_, ids)| ids.len() > 1)
            .map(|(claim, ids)| format!("NodeClaim {claim} had {ids:?}"));
        let shared = self
            .claims_of
            .iter()
            .filter(|(_, claims)| claims.len() > 1)
            .map(|(instance, claims)| format!("instance {instance} named by {claims:?}"));
        doubled.chain(shared).collect()
    }

    fn stuck(&self, now: Duration) -> Vec<String> {
        self.phases
            .iter()
            .filter(|(_, (_, since))| now.saturating_sub(*since) > STUCK_AFTER)
            .map(|(id, (phase, since))| format!("{id} {phase:?} since {}s", since.as_secs()))
            .collect()
    }

    /// Live instances no live NodeClaim names, first seen before `now - LEAK_AFTER`.
    fn leaks(&self, sim: &Simulation<'_>, now: Duration) -> Vec<String> {
        let named: BTreeSet<String> = sim
            .view()
            .nodeclaims()
            .iter()
            .filter_map(|c| c.status.as_ref()?.provider_id.clone())
            .filter_map(|p| parse_provider_id(&p).ok().map(|(_, i)| i.to_owned()))
            .collect();
        sim.world()
            .ec2
            .instances()
            .into_iter()
            .filter(|i| matches!(i.state, InstanceState::Pending | InstanceState::Running))
            .filter(|i| !named.contains(&i.id))
            .filter(|i| {
                self.first_live
                    .get(&i.id)
                    .is_some_and(|first| now.saturating_sub(*first) > LEAK_AFTER)
            })
            .map(|i| i.id)
            .collect()
    }

    fn unnamed_launches(&self) -> usize {
        self.first_live
            .keys()
            .filter(|id| !self.claims_of.contains_key(*id))
            .count()
    }
}

/// Arms the AWS and API server faults of the plan.
fn arm(sim: &Simulation<'_>, options: &ChaosOptions) {
    let world = sim.world();
    let throttling_and_5xx = vec![
        ("RequestLimitExceeded", 503),
        ("InternalError", 500),
        ("ServiceUnavailable", 503),
    ];
    for service in [Service::Ec2, Service::Sqs, Service::Ssm, Service::Pricing] {
        world.faults(service).fail_share(FailShare {
            seed: options.seed,
            share: options.aws_share,
            service: port_service(service),
            errors: throttling_and_5xx.clone(),
            spare: Vec::new(),
        });
    }
    world.ec2.ice_share(Some((options.seed, options.aws_share)));
    let api = sim.emulator().faults();
    let seed = options.seed;
    api.inject(
        ApiFault::fail(410)
            .on(Verb::Watch)
            .share(options.api_share, seed),
    );
    for verb in [Verb::Update, Verb::Patch] {
        api.inject(ApiFault::fail(409).on(verb).share(options.api_share, seed));
    }
    api.inject(ApiFault::fail(500).share(options.api_share, seed));
    api.inject(ApiFault::delay(options.api_latency).share(options.latency_share, seed));
}

/// Stops every injected fault.
fn disarm(sim: &Simulation<'_>, plan: &FaultPlan) {
    plan.disarm();
    let world = sim.world();
    for service in Service::ALL {
        world.faults(service).clear();
    }
    world.ec2.ice_share(None);
    sim.emulator().faults().clear();
}

fn aws_injected(sim: &Simulation<'_>) -> usize {
    Service::ALL
        .into_iter()
        .map(|service| sim.world().faults(service).injected())
        .sum()
}

/// The supervisors of the running daemon that escalated, with the last child stop of each.
fn escalations_of(sim: &Simulation<'_>) -> Vec<String> {
    sim.kit()
        .map(ActorKit::snapshot)
        .into_iter()
        .flat_map(|s| s.supervisors)
        .filter(|s| s.escalations > 0)
        .map(|s| format!("{} ({})", s.name, s.last_child_stop.unwrap_or_default()))
        .collect()
}

/// Restarts the daemon as a process restart would; a start that fails (an AWS or API fault
/// while it loads) is tried again, as the kubelet restarts a crashed container.
async fn restart(sim: &mut Simulation<'_>, failed_starts: &mut u32) -> Result<(), SimulationError> {
    const ATTEMPTS: u32 = 10;
    let mut attempt = 0;
    loop {
        match sim.restart_daemon().await {
            Ok(()) => return Ok(()),
            Err(error) if attempt + 1 < ATTEMPTS => {
                tracing::info!(
                    error = %karpenter_core::errors::chain(&error),
                    "daemon start failed, restarting"
                );
                *failed_starts += 1;
                attempt += 1;
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Each node as the simulated scheduler weighs it (its own [`existing_node`]): schedulable
/// (Ready, not cordoned, not deleting), the taints it filters on, and CPU and pods requested
/// of allocatable.
fn describe_nodes(view: &dyn ClusterView) -> Vec<String> {
    view.nodes()
        .iter()
        .map(|node| {
            let weighed = existing_node(node, &view.pods_on_node(&node.name_any()));
            let taints: Vec<String> = weighed
                .taints
                .iter()
                .map(|t| format!("{}:{}", t.key, t.effect.as_str()))
                .collect();
            format!(
                "{} schedulable={} taints=[{}] cpu {}m/{}m pods {}",
                weighed.name,
                is_schedulable(node),
                taints.join(","),
                weighed.requested.cpu,
                weighed.allocatable.cpu,
                weighed.pods.len()
            )
        })
        .collect()
}

/// Runs the scenario under the seeded chaos and checks the proofs (builds its own runtime).
pub fn run_chaos(
    mut loaded: LoadedScenario,
    options: &ChaosOptions,
) -> Result<(ChaosOutcome, Report), SimulationError> {
    let plan = Arc::new(options.actor_plan()?);
    let window = loaded.scenario.duration;
    loaded.scenario.duration = window + options.settle;
    loaded.scenario.seed = options.seed;
    loaded.actor_faults = Some(Arc::clone(&plan));
    let options = options.clone();
    on_runtime(Pace::Fast, async move {
        let mut sim = Simulation::start(loaded, None).await?;
        arm(&sim, &options);
        let mut restarts = options.restart_times(window).into_iter().peekable();
        let mut observer = Observer::default();
        let mut outcome_restarts = 0;
        let mut failed_starts = 0;
        let mut crashes = 0;
        let mut escalations = Vec::new();
        let end = window + options.settle;
        let mut armed = true;
        loop {
            let now = sim.now();
            observer.observe(&sim, now);
            if armed && now >= window {
                disarm(&sim, &plan);
                armed = false;
            }
            if restarts.next_if(|at| *at <= now).is_some() {
                restart(&mut sim, &mut failed_starts).await?;
                outcome_restarts += 1;
            }
            if !sim.advance(HARNESS_TICK).await {
                if sim.daemon_escalated() && sim.now() < end {
                    escalations.extend(escalations_of(&sim));
                    crashes += 1;
                    restart(&mut sim, &mut failed_starts).await?;
                    continue;
                }
                break;
            }
        }
        let now = sim.now();
        observer.observe(&sim, now);
        let parked = sim.kit().map_or(0, |kit| kit.snapshot().parked());
        let escalated = sim.daemon_escalated();
        escalations.extend(escalations_of(&sim));
        let leaks = observer.leaks(&sim, now);
        let view = sim.view();
        let injected = InjectedCounts {
            actor_panics: plan.injected().len(),
            aws_errors: aws_injected(&sim),
            ice: sim.world().ec2.ice_answers(),
            api: sim.emulator().faults().injected(),
        };
        let report = sim.finish().await;
        let outcome = ChaosOutcome {
            scenario: report.scenario.clone(),
            seed: options.seed,
            injected,
            daemon_restarts: outcome_restarts,
            failed_starts,
            crashes,
            actor_restarts: report.actors.values().map(|a| a.restarts).sum(),
            duplicates: observer.duplicates(),
            unnamed_launches: observer.unnamed_launches(),
            leaks,
            lost: report.interruptions.reclaimed_unhandled + report.interruptions.left_in_queue,
            interruption_warnings: report.interruptions.warnings,
            pending_pods: report.pods.pending_at_end,
            pending: report
                .pods
                .pending
                .iter()
                .map(|p| format!("{} ({})", p.pod, p.reason))
                .collect(),
            stuck: observer.stuck(now),
            nodes_at_end: if report.pods.pending_at_end > 0 {
                describe_nodes(view.as_ref())
            } else {
                Vec::new()
            },
            parked,
            escalated,
            escalations,
            nodeclaims: report.nodes.nodeclaims_created,
        };
        Ok((outcome, report))
    })?
}
