//! A simulation in progress, the API `karpenter simulate` and the tests drive.
//!
//! ```text
//! start: emulator (seeded names, simulated clock) <- namespaces, EC2NodeClasses, NodePools,
//!   PodDisruptionBudgets
//!   -> kwok account (capacity limits, interruption queue and rules)
//!   -> first daemon (its watchers also feed the harness) -> harness
//! advance(by) / run_to_end(stop): one harness tick per simulated second
//! restart_daemon: stop the actors, start a fresh daemon over the same cluster
//! finish: the report (actor totals over every daemon), then everything stops
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_actors::ports::cluster_view::ClusterView;
use karpenter_actors::runtime::{ActorKit, FaultPlan};
use karpenter_core::apis::{EC2NodeClass, NodePool};
use karpenter_core::domain::version::KubernetesVersion;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt as _};
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::daemon::start_daemon;
use super::error::SimulationError;
use super::harness::{HARNESS_TICK, Harness, Sim};
use super::load::LoadedScenario;
use super::run::ProgressSink;
use crate::daemon::DaemonAssembly;
use crate::emulator::{Emulator, EmulatorConfig};
use crate::http::{MetricsRegistries, Routes};
use crate::sim::clock::SimClock;
use crate::sim::report::Report;
use crate::sim::world::{KwokAws, KwokAwsConfig};

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

/// Creates the scenario's namespaces, EC2NodeClasses, NodePools and PodDisruptionBudgets.
async fn seed(client: &Client, loaded: &LoadedScenario) -> Result<(), SimulationError> {
    let namespaces: BTreeSet<&str> = loaded
        .workloads
        .iter()
        .map(|w| w.namespace.as_str())
        .chain(
            loaded
                .scenario
                .pod_disruption_budgets
                .iter()
                .map(|b| b.namespace.as_str()),
        )
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
    for budget in &loaded.pod_disruption_budgets {
        let namespace = budget.namespace().unwrap_or_default();
        let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &namespace);
        let what = format!("PodDisruptionBudget {namespace}/{}", budget.name_any());
        create(&api, budget, what).await?;
    }
    // No kube-dns Service: the daemon's discovery finds none and leaves the DNS address to the
    // nodes' bootstrap (derived from the service CIDR), as in a cluster with custom DNS. Creating
    // one would draw from the emulator's seeded name generator and change every run's names.
    Ok(())
}

/// A simulation in progress: the cluster (emulator, kwok, harness) and the daemon on it.
/// [`simulate`](super::simulate) drives one through a scenario; tests drive one step by step, and can restart the
/// daemon over the same cluster.
pub struct Simulation<'a> {
    emulator: Emulator,
    clock: SimClock,
    daemons: Vec<DaemonAssembly>,
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
    /// daemon's actors and the harness (call inside the actix System of [`run`](super::run)).
    pub async fn start(
        loaded: LoadedScenario,
        progress: Option<ProgressSink<'a>>,
    ) -> Result<Self, SimulationError> {
        let clock = SimClock::at_epoch();
        let scenario = &loaded.scenario;
        // Retries and restarts back off with seeded jitter: a run with faults replays.
        karpenter_actors::jitter::seed_jitter(scenario.seed);
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
            .map_err(SimulationError::InterruptionQueue)?;
        // The first daemon shares its watchers with the harness.
        let daemon = start_daemon(&loaded, clock, &client, &world).await?;
        let view: Arc<dyn ClusterView> = Arc::new(daemon.state().clone());
        let sim = Sim::new(
            loaded,
            Harness {
                client,
                view,
                world,
                cloud: daemon.cloud(),
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

    /// The Kubernetes version the running daemon's actors use (its `VersionActor` follows the
    /// emulator's `/version`: [`Emulator::set_kubernetes_version`]).
    #[must_use]
    pub fn kubernetes_version(&self) -> Option<KubernetesVersion> {
        self.daemons.last().map(DaemonAssembly::kubernetes_version)
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
        self.daemons.last().map(DaemonAssembly::kit)
    }

    /// Whether the daemon running now escalated (its root supervisor gave up: the process would
    /// exit, and the kubelet start it again: [`Self::restart_daemon`]).
    #[must_use]
    pub fn daemon_escalated(&self) -> bool {
        self.daemons.last().is_some_and(DaemonAssembly::escalated)
    }

    /// `/metrics` and `/debug/actors` of the daemon running now.
    #[must_use]
    pub fn routes(&self) -> Routes {
        self.daemons
            .last()
            .map_or_else(Routes::new, DaemonAssembly::actor_routes)
    }

    pub(super) fn say(&mut self, line: &str) {
        self.sim.say(line);
    }

    /// The harness acts at `now`; false when the run is over (the root escalated).
    async fn tick(&mut self) -> bool {
        self.sim.tick(self.now).await;
        if self.now >= self.next_progress {
            self.sim.progress_line(self.now).await;
            self.next_progress += self.sim.loaded.scenario.progress_every;
        }
        if self.daemons.last().is_some_and(DaemonAssembly::escalated) {
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
            // The first daemon's watchers feed the harness: they stay until the end.
            old.stop_actors().await;
        }
        let daemon = start_daemon(
            &self.sim.loaded,
            self.clock,
            &self.sim.client,
            &self.sim.world,
        )
        .await?;
        self.sim.cloud = daemon.cloud();
        self.daemons.push(daemon);
        Ok(())
    }

    /// The report (actor totals over every daemon that ran), then everything stops.
    pub async fn finish(mut self) -> Report {
        let registries = MetricsRegistries::default();
        let mut injected = 0;
        let mut dropped = 0;
        let mut disruptions = Vec::new();
        // Daemons restarted from the same scenario share its fault plan: count each plan once.
        let mut plans: Vec<*const FaultPlan> = Vec::new();
        for daemon in &self.daemons {
            disruptions.extend(daemon.disruption_history().await);
            registries.extend(daemon.registries());
            if let Some(plan) = daemon.kit().faults()
                && !plans.contains(&std::ptr::from_ref(plan))
            {
                plans.push(std::ptr::from_ref(plan));
                injected += plan.injected().len();
            }
            dropped += daemon.dropped_changes();
        }
        let mut report = self
            .sim
            .report(self.now, &registries, injected, self.escalated, dropped)
            .await;
        report.disruptions = disruptions
            .into_iter()
            .map(|record| crate::sim::report::DisruptionLine::of(record, self.clock.start()))
            .collect();
        for daemon in self.daemons {
            // No launch is waited for: the simulated time is over.
            daemon.shutdown(Duration::ZERO).await;
        }
        self.emulator.close_watches();
        report
    }
}
