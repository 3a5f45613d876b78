//! One provisioning run, in a task beside the actor: the NodePools to use and their instance
//! types (from the cloud provider), the snapshot and the solve on a blocking thread
//! ([`Tasks::blocking`]) with a one-minute cap, the limits check against current usage, the
//! NodeClaims created in parallel, the events queued for publishing in another task, and a
//! [`RunReport`] for the actor (Karpenter's `Provisioner.Schedule` + `CreateNodeClaims`).
//!
//! After the solve the work is per NodeClaim where it can be: the pods of one NodeClaim (or
//! existing node) share one [`Decision`] and one nomination note, the events are built only
//! for those the gate lets through, and the snapshot (once the decision is logged, before the
//! launches) and the plan (after them) are freed on the blocking pool rather than before the
//! report (as Go's collector frees Karpenter's in the background).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant as WallInstant;

use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::logs;
use crate::ports::cluster::{ClusterApi, ClusterError, ClusterEvent};
use crate::runtime::Tasks;
use karpenter_core::apis::conditions::{ConditionStatus, READY};
use karpenter_core::apis::labels;
use karpenter_core::apis::nodepool::NodePool;
use karpenter_core::domain::instance_type::{InstanceType, MAX_INSTANCE_TYPES};
use karpenter_core::domain::limits;
use karpenter_core::domain::requirements::Requirements;
use karpenter_core::domain::resources::{ResourceLimits, Resources};
use karpenter_core::domain::scheduling::{NewNodeClaim, Options, Plan, ReservedOfferingMode};

use super::build::{self, Built, PodRef, UsablePool};
use super::events::{MAX_EVENTS_PER_RUN, Planned, nomination_note};
use super::explain::{Decision, PoolVerdict, failure_message};
use super::launch::{self, Admission};
use super::{ProvisionerDeps, SOLVE_TIMEOUT, lock};

/// Names tried for one NodeClaim before giving up on `AlreadyExists` (a clash of five random
/// characters is rare; three in a row means something else is wrong).
const NAME_ATTEMPTS: usize = 3;
/// Instance types a `Provisioned` decision lists (the NodeClaim itself has up to 60).
const LISTED_INSTANCE_TYPES: usize = 5;

/// The counts of one run, for the actor's status and logs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub run: u64,
    /// Pods scheduled (pending and from deleting nodes), ignored ones excluded.
    pub pods: usize,
    pub nominated: usize,
    /// Pods given a new NodeClaim.
    pub provisioned: usize,
    pub node_claims_created: usize,
    /// Planned NodeClaims not created (limits reached since the solve, or a failed create).
    pub node_claims_not_created: usize,
    pub unschedulable: usize,
    pub deferred: usize,
    pub ignored: usize,
    /// Why the run decided nothing (timed out, solver failed).
    pub error: Option<String>,
    /// Wall time reading the snapshot from the cluster view (pod conversion included), µs.
    pub build_micros: u64,
    /// Wall time of the solve, µs.
    pub solve_micros: u64,
    /// Wall time from the solve to the report: the limits check, creating NodeClaims,
    /// nominations, decisions and queueing events, µs.
    pub decide_micros: u64,
}

fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// What a run tells the actor.
#[derive(Debug)]
pub(super) struct RunReport {
    pub summary: RunSummary,
    /// RFC 3339.
    pub decided_at: String,
    /// One per pod the run looked at, by `namespace/name`; empty when the run failed. The pods
    /// of one NodeClaim or node share their decision.
    pub decisions: Vec<(Arc<str>, Arc<Decision>)>,
    /// NodePools left out before scheduling.
    pub skipped_pools: Vec<PoolVerdict>,
}

impl RunReport {
    fn failed(run: u64, decided_at: String, error: String, skipped: Vec<PoolVerdict>) -> Self {
        Self {
            summary: RunSummary {
                run,
                error: Some(error),
                ..RunSummary::default()
            },
            decided_at,
            decisions: Vec::new(),
            skipped_pools: skipped,
        }
    }
}

/// Why a NodePool is not scheduled with: deleting, or not `Ready` (Karpenter skips both).
fn unusable(nodepool: &NodePool) -> Option<String> {
    if nodepool.metadata.deletion_timestamp.is_some() {
        return Some("being deleted".to_owned());
    }
    let ready = nodepool
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == READY));
    match ready {
        Some(c) if c.status == ConditionStatus::True => None,
        Some(c) if c.message.is_empty() => Some(format!("not ready ({})", c.reason)),
        Some(c) => Some(format!("not ready ({}: {})", c.reason, c.message)),
        None => Some("not ready (no Ready condition yet)".to_owned()),
    }
}

fn skipped(nodepool: &NodePool, reason: String) -> PoolVerdict {
    PoolVerdict {
        node_pool: nodepool.metadata.name.clone().unwrap_or_default(),
        reason,
        detail: serde_json::Value::Null,
    }
}

/// The NodePools to schedule with, and why the others are left out.
async fn usable_pools(deps: &ProvisionerDeps) -> (Vec<UsablePool>, Vec<PoolVerdict>) {
    let mut nodepools = deps.view.nodepools();
    nodepools.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut usable = Vec::new();
    let mut left_out = Vec::new();
    for nodepool in nodepools {
        if let Some(reason) = unusable(&nodepool) {
            left_out.push(skipped(&nodepool, reason));
            continue;
        }
        match deps.cloud.instance_types(&nodepool).await {
            Ok(types) if types.is_empty() => {
                left_out.push(skipped(&nodepool, "no instance types resolved".to_owned()));
            }
            Ok(instance_types) => usable.push(UsablePool {
                nodepool,
                instance_types,
            }),
            Err(error) => {
                tracing::error!(
                    NodePool = nodepool.metadata.name.as_deref().unwrap_or_default(),
                    error = logs::err(&error),
                    "skipping, unable to resolve instance types"
                );
                left_out.push(skipped(
                    &nodepool,
                    format!("resolving instance types failed: {error}"),
                ));
            }
        }
    }
    (usable, left_out)
}

/// Karpenter's lines for a scheduling decision: the pods looked at (debug); when new NodeClaims
/// are planned, the pods found (at most five named) with the time the run took and the
/// NodeClaims computed; the pods going to nodes not initialized yet.
fn log_decision(built: &Built, plan: &Plan, elapsed: std::time::Duration) {
    tracing::debug!(
        "pending-pods" = built.pending,
        "deleting-pods" = built.pods.len().saturating_sub(built.pending),
        "computing scheduling decision for provisionable pod(s)"
    );
    if !plan.new_node_claims.is_empty() {
        let keys: Vec<&str> = built.pods.iter().map(|p| &*p.key).collect();
        tracing::info!(
            Pods = %logs::Truncated { items: &keys, max: 5 },
            duration = %logs::GoDuration(elapsed),
            "found provisionable pod(s)"
        );
        tracing::info!(
            nodeclaims = plan.new_node_claims.len(),
            pods = plan
                .new_node_claims
                .iter()
                .map(|c| c.pods.len())
                .sum::<usize>(),
            "computed new nodeclaim(s) to fit pod(s)"
        );
    }
    let unready: Vec<_> = plan
        .existing
        .iter()
        .filter(|p| {
            !p.pods.is_empty()
                && built
                    .snapshot
                    .existing_nodes
                    .get(p.node)
                    .is_some_and(|n| !n.initialized)
        })
        .collect();
    if !unready.is_empty() {
        tracing::info!(
            nodes = unready.len(),
            pods = unready.iter().map(|p| p.pods.len()).sum::<usize>(),
            "computed unready node(s) will fit pod(s)"
        );
    }
}

/// Runs once; never fails (failures are in the report).
pub(super) async fn run(deps: &ProvisionerDeps, run: u64, tasks: Tasks) -> RunReport {
    let decided_at = deps.clock.now().to_string();
    if !build::has_work(deps.view.as_ref()) {
        // Karpenter returns before building a scheduler (and asking for instance types).
        return RunReport {
            summary: RunSummary {
                run,
                ..RunSummary::default()
            },
            decided_at,
            decisions: Vec::new(),
            skipped_pools: Vec::new(),
        };
    }
    let run_started = WallInstant::now();
    let (pools, mut left_out) = usable_pools(deps).await;
    let types_by_pool: HashMap<String, Vec<Arc<InstanceType>>> = pools
        .iter()
        .map(|p| {
            (
                p.nodepool.metadata.name.clone().unwrap_or_default(),
                p.instance_types.to_vec(),
            )
        })
        .collect();
    let options = Options {
        preference_policy: deps.settings.preference_policy,
        max_instance_types: MAX_INSTANCE_TYPES,
        reserved_capacity: deps.settings.feature_gates.reserved_capacity,
        reserved_offering_mode: ReservedOfferingMode::Strict,
    };
    let view = Arc::clone(&deps.view);
    let solver = Arc::clone(&deps.solver);
    let metrics = deps.metrics.clone();
    let conversions = deps.conversions();
    let work = move || {
        let started = WallInstant::now();
        let mut built = build::build(view.as_ref(), &pools, &mut lock(&conversions));
        // The state nodes hold the view's objects (every bound pod): the run no longer needs
        // them, and kept through the launches they would keep each pod's old version alive
        // while the cluster replaces it.
        built.states = Vec::new();
        let built_at = WallInstant::now();
        metrics.set_queue_depth(run, built.snapshot.pods.len());
        let plan = if built.snapshot.pods.is_empty() {
            Plan::default()
        } else {
            solver(&built.snapshot, &options)
        };
        metrics.clear_queue_depth(run);
        metrics.observe_scheduling(started.elapsed());
        let timings = (
            micros(built_at.duration_since(started)),
            micros(built_at.elapsed()),
        );
        (built, plan, timings)
    };
    let outcome_of_solve = if deps.inline {
        Ok(Ok(work()))
    } else {
        tokio::time::timeout(SOLVE_TIMEOUT, tasks.blocking(work)).await
    };
    let (mut built, plan, (build_micros, solve_micros)) = match outcome_of_solve {
        Ok(Ok(done)) => done,
        Ok(Err(error)) => {
            tracing::error!(error = logs::err(&error), "the scheduling solve failed");
            return RunReport::failed(
                run,
                decided_at,
                format!("the scheduling solve failed: {error}"),
                left_out,
            );
        }
        Err(_) => {
            deps.metrics.clear_queue_depth(run);
            tracing::error!(timeout = %logs::GoDuration(SOLVE_TIMEOUT), "scheduling timed out");
            return RunReport::failed(
                run,
                decided_at,
                format!("the scheduling solve took longer than {SOLVE_TIMEOUT:?}"),
                left_out,
            );
        }
    };
    left_out.extend(built.skipped_pools.iter().cloned());
    log_decision(&built, &plan, run_started.elapsed());
    // Nothing after this reads the snapshot (each pod's conversion, every existing node with
    // its pods): freed now rather than after the launches, which take many turns of the
    // runtime while the cluster goes on.
    free_beside(tasks, std::mem::take(&mut built.snapshot));
    let deciding = WallInstant::now();
    let (mut summary, decisions) = decide(deps, run, tasks, &built, &plan, &types_by_pool).await;
    summary.build_micros = build_micros;
    summary.solve_micros = solve_micros;
    summary.decide_micros = micros(deciding.elapsed());
    // The plan and the pods' references hold an object per pod.
    free_beside(tasks, (built, plan));
    RunReport {
        summary,
        decided_at,
        decisions,
        skipped_pools: left_out,
    }
}

/// Drops `value` (a run's snapshot or plan: an object per pod) on the blocking pool: freeing
/// them is not the report's business, so it happens beside the actor.
fn free_beside<T: Send + 'static>(tasks: Tasks, value: T) {
    tasks.spawn(async move {
        let freed = tasks.blocking(move || drop(value)).await;
        if let Err(error) = freed {
            tracing::debug!(error = logs::err(&error), "freeing a run's snapshot failed");
        }
    });
}

/// What the run does with the plan: nominations, NodeClaims, events, and each pod's decision.
async fn decide(
    deps: &ProvisionerDeps,
    run: u64,
    tasks: Tasks,
    built: &Built,
    plan: &Plan,
    types_by_pool: &HashMap<String, Vec<Arc<InstanceType>>>,
) -> (RunSummary, Vec<(Arc<str>, Arc<Decision>)>) {
    let mut outcome = Outcome::new(run);
    outcome.ignored(built);
    outcome.existing(deps, built, plan);
    outcome.failures(built, plan);
    outcome.pools_without_types(deps, plan);
    outcome.launch(deps, built, plan, types_by_pool).await;
    deps.metrics
        .set_unschedulable(outcome.summary.unschedulable + outcome.summary.node_claims_not_created);
    deps.metrics.set_ignored(outcome.summary.ignored);
    outcome.publish(deps, tasks);
    tracing::debug!(summary = ?outcome.summary, "provisioning run");
    (outcome.summary, outcome.decisions)
}

/// What a run decided, built up step by step; its events refer to the run's pods.
struct Outcome<'a> {
    summary: RunSummary,
    decisions: Vec<(Arc<str>, Arc<Decision>)>,
    events: Vec<Planned<'a>>,
}

impl<'a> Outcome<'a> {
    fn new(run: u64) -> Self {
        Self {
            summary: RunSummary {
                run,
                ..RunSummary::default()
            },
            decisions: Vec::new(),
            events: Vec::new(),
        }
    }

    fn decide(&mut self, pod: &PodRef, decision: &Arc<Decision>) {
        self.decisions
            .push((Arc::clone(&pod.key), Arc::clone(decision)));
    }

    fn ignored(&mut self, built: &Built) {
        self.summary.pods = built.pods.len();
        self.summary.ignored = built.ignored.len();
        for (pod, reason) in &built.ignored {
            tracing::debug!(Pod = %pod.key, "ignoring pod, {reason}");
            self.decide(
                pod,
                &Arc::new(Decision::Ignored {
                    reason: reason.clone(),
                }),
            );
        }
    }

    fn existing(&mut self, deps: &ProvisionerDeps, built: &'a Built, plan: &Plan) {
        let now = deps.clock.now();
        let window = crate::nominations::nomination_window(deps.settings.batch_max_duration);
        for placement in &plan.existing {
            let Some(node) = built.nodes.get(placement.node) else {
                continue;
            };
            if placement.pods.is_empty() {
                continue;
            }
            if let Some(name) = node.node.as_deref().or(node.node_claim.as_deref()) {
                deps.nominations.nominate(name, now, window);
            }
            let shared_note = nomination_note(node.node_claim.as_deref(), node.node.as_deref());
            let decision = Arc::new(Decision::Nominated {
                node: node.node.clone(),
                node_claim: node.node_claim.clone(),
            });
            for pod in placement.pods.iter().filter_map(|i| built.pods.get(*i)) {
                self.summary.nominated += 1;
                self.events
                    .push(Planned::nominated(pod, Arc::clone(&shared_note)));
                self.decide(pod, &decision);
            }
        }
    }

    fn failures(&mut self, built: &'a Built, plan: &Plan) {
        for failure in &plan.failures {
            let Some(pod) = built.pods.get(failure.pod) else {
                continue;
            };
            let pools: Vec<PoolVerdict> = failure
                .reasons
                .iter()
                .map(|r| PoolVerdict {
                    node_pool: r.node_pool.clone(),
                    reason: r.reason.to_string(),
                    detail: serde_json::to_value(&r.reason).unwrap_or_default(),
                })
                .collect();
            if failure.deferred {
                self.summary.deferred += 1;
                self.decide(pod, &Arc::new(Decision::Deferred { pools }));
            } else {
                self.summary.unschedulable += 1;
                self.events
                    .push(Planned::failed_scheduling(pod, &failure_message(&pools)));
                self.decide(pod, &Arc::new(Decision::Unschedulable { pools }));
            }
        }
    }

    fn pools_without_types(&mut self, deps: &ProvisionerDeps, plan: &Plan) {
        for name in &plan.pools_without_instance_types {
            let uid = deps
                .view
                .nodepool(name)
                .and_then(|np| np.metadata.uid.clone());
            self.events
                .push(Planned::no_compatible_instance_types(name, uid));
        }
    }

    /// Checks the planned NodeClaims against the NodePools' limits as they are now, creates
    /// the admitted ones in parallel and records the outcome for their pods.
    async fn launch(
        &mut self,
        deps: &ProvisionerDeps,
        built: &'a Built,
        plan: &Plan,
        types_by_pool: &HashMap<String, Vec<Arc<InstanceType>>>,
    ) {
        let claims_now = deps.view.nodeclaims();
        let mut remaining: HashMap<&str, Result<ResourceLimits, limits::LimitsError>> =
            HashMap::new();
        let mut creates: JoinSet<(usize, Result<String, ClusterError>)> = JoinSet::new();
        let mut admitted: HashMap<usize, Vec<Arc<InstanceType>>> = HashMap::new();
        // Read once per NodePool, not per NodeClaim.
        let mut nodepools: HashMap<&str, Option<Arc<NodePool>>> = HashMap::new();
        for (index, claim) in plan.new_node_claims.iter().enumerate() {
            let nodepool = nodepools
                .entry(claim.node_pool.as_str())
                .or_insert_with(|| {
                    deps.view
                        .nodepool(&claim.node_pool)
                        .filter(|np| np.metadata.deletion_timestamp.is_none())
                })
                .clone();
            let Some(nodepool) = nodepool else {
                self.not_launched(built, claim, "the nodepool was deleted");
                continue;
            };
            let types = types_by_pool
                .get(&claim.node_pool)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let left = remaining
                .entry(claim.node_pool.as_str())
                .or_insert_with(|| {
                    limits::remaining_with_in_flight(
                        &nodepool,
                        claims_now.iter().map(AsRef::as_ref),
                        types,
                    )
                });
            let admission = match left {
                Ok(left) => launch::admit(claim, left),
                Err(error) => Admission::Refuse {
                    reason: error.to_string(),
                },
            };
            match admission {
                Admission::Refuse { reason } => self.not_launched(built, claim, &reason),
                Admission::Admit {
                    requirements,
                    instance_types,
                } => {
                    admitted.insert(index, instance_types);
                    let (deps, requests) = (deps.clone(), claim.requests.clone());
                    creates.spawn(async move {
                        (index, create(deps, nodepool, requirements, requests).await)
                    });
                }
            }
        }
        while let Some(joined) = creates.join_next().await {
            let (index, result) = match joined {
                Ok(done) => done,
                Err(error) => {
                    tracing::error!(error = logs::err(&error), "a nodeclaim create task failed");
                    continue;
                }
            };
            let Some(claim) = plan.new_node_claims.get(index) else {
                continue;
            };
            match result {
                Ok(name) => {
                    let types = admitted.remove(&index).unwrap_or_default();
                    let nodepool = nodepools
                        .get(claim.node_pool.as_str())
                        .and_then(Option::as_deref);
                    self.provisioned(deps, built, claim, nodepool, &name, &types);
                }
                Err(error) => {
                    tracing::error!(
                        NodePool = %claim.node_pool,
                        error = logs::err(&error),
                        "failed creating nodeclaim"
                    );
                    self.not_launched(
                        built,
                        claim,
                        &format!("creating the nodeclaim failed: {error}"),
                    );
                }
            }
        }
    }

    /// Records a created NodeClaim: its metric and log line, and for each of its pods the
    /// nomination event and the decision (one of each shared by all of them).
    fn provisioned(
        &mut self,
        deps: &ProvisionerDeps,
        built: &'a Built,
        claim: &NewNodeClaim,
        nodepool: Option<&NodePool>,
        name: &str,
        types: &[Arc<InstanceType>],
    ) {
        self.summary.node_claims_created += 1;
        deps.remember_created(name);
        let capacity_type = nodepool
            .and_then(|np| np.spec.template.metadata.labels.get(labels::CAPACITY_TYPE))
            .map_or("", String::as_str);
        deps.metrics.count_created(&claim.node_pool, capacity_type);
        let listed: Vec<String> = types
            .iter()
            .take(LISTED_INSTANCE_TYPES)
            .map(|t| t.name.clone())
            .collect();
        let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
        tracing::info!(
            NodePool = %claim.node_pool,
            NodeClaim = name,
            requests = %claim.requests,
            "instance-types" = %logs::Truncated { items: &names, max: LISTED_INSTANCE_TYPES },
            "created nodeclaim"
        );
        let note = nomination_note(Some(name), None);
        let decision = Arc::new(Decision::Provisioned {
            node_claim: name.to_owned(),
            node_pool: claim.node_pool.clone(),
            instance_types: listed,
            instance_type_count: types.len(),
        });
        for pod in claim.pods.iter().filter_map(|i| built.pods.get(*i)) {
            self.summary.provisioned += 1;
            self.events.push(Planned::nominated(pod, Arc::clone(&note)));
            self.decide(pod, &decision);
        }
    }

    fn not_launched(&mut self, built: &'a Built, claim: &NewNodeClaim, reason: &str) {
        self.summary.node_claims_not_created += 1;
        let why = failure_message(&[PoolVerdict {
            node_pool: claim.node_pool.clone(),
            reason: reason.to_owned(),
            detail: serde_json::Value::Null,
        }]);
        let decision = Arc::new(Decision::NotLaunched {
            node_pool: claim.node_pool.clone(),
            reason: reason.to_owned(),
        });
        for pod in claim.pods.iter().filter_map(|i| built.pods.get(*i)) {
            self.events.push(Planned::failed_scheduling(pod, &why));
            self.decide(pod, &decision);
        }
    }

    /// Queues the events the gate lets through and publishes them in the background: a slow
    /// API server must not hold up the next batch.
    fn publish(&mut self, deps: &ProvisionerDeps, tasks: Tasks) {
        let now = Instant::now();
        let admitted: Vec<ClusterEvent> = {
            let mut gate = deps.event_gate();
            std::mem::take(&mut self.events)
                .into_iter()
                .filter(|event| gate.admit(event, now))
                .take(MAX_EVENTS_PER_RUN)
                .map(Planned::into_event)
                .collect()
        };
        if admitted.is_empty() {
            return;
        }
        let cluster: Arc<dyn ClusterApi> = Arc::clone(&deps.cluster);
        tasks.spawn(async move {
            for event in admitted {
                if let Err(error) = cluster.publish_event(&event).await {
                    tracing::debug!(
                        reason = %event.reason,
                        error = logs::err(&error),
                        "failed publishing event"
                    );
                }
            }
        });
    }
}

/// Why NodeClaims decided elsewhere could not all be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("nodepool {nodepool} is gone or being deleted")]
    NodePoolGone { nodepool: String },
    #[error("nodepool {nodepool}: {reason}")]
    Refused { nodepool: String, reason: String },
    #[error("creating a nodeclaim of nodepool {nodepool}")]
    Create {
        nodepool: String,
        #[source]
        source: ClusterError,
    },
}

impl CreateError {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::NodePoolGone { .. } => "nodepool_gone",
            Self::Refused { .. } => "limits_exceeded",
            Self::Create { source, .. } => source.category(),
        }
    }
}

/// Creates NodeClaims planned by someone else (disruption replacements; Karpenter's
/// `Provisioner.CreateNodeClaims` with a reason): each is checked against its NodePool's
/// limits as they are now, named by the Provisioner's generator and remembered, so the next
/// provisioning run waits until the view shows them instead of launching for the same pods.
/// Stops at the first failure and returns it; NodeClaims created before it stay (the caller
/// decides whether to delete them).
pub(crate) async fn create_planned(
    deps: &ProvisionerDeps,
    claims: &[NewNodeClaim],
    reason: &str,
    types_by_pool: &HashMap<String, Vec<Arc<InstanceType>>>,
) -> Result<Vec<String>, (Vec<String>, CreateError)> {
    let claims_now = deps.view.nodeclaims();
    let mut created = Vec::with_capacity(claims.len());
    for claim in claims {
        let nodepool = deps
            .view
            .nodepool(&claim.node_pool)
            .filter(|np| np.metadata.deletion_timestamp.is_none());
        let Some(nodepool) = nodepool else {
            let error = CreateError::NodePoolGone {
                nodepool: claim.node_pool.clone(),
            };
            return Err((created, error));
        };
        let types = types_by_pool
            .get(&claim.node_pool)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let admission = match limits::remaining_with_in_flight(
            &nodepool,
            claims_now.iter().map(AsRef::as_ref),
            types,
        ) {
            Ok(mut left) => launch::admit(claim, &mut left),
            Err(error) => Admission::Refuse {
                reason: error.to_string(),
            },
        };
        let (requirements, instance_types) = match admission {
            Admission::Admit {
                requirements,
                instance_types,
            } => (requirements, instance_types),
            Admission::Refuse { reason } => {
                let error = CreateError::Refused {
                    nodepool: claim.node_pool.clone(),
                    reason,
                };
                return Err((created, error));
            }
        };
        match create(
            deps.clone(),
            Arc::clone(&nodepool),
            requirements,
            claim.requests.clone(),
        )
        .await
        {
            Ok(name) => {
                deps.remember_created(&name);
                let capacity_type = nodepool
                    .spec
                    .template
                    .metadata
                    .labels
                    .get(labels::CAPACITY_TYPE)
                    .cloned()
                    .unwrap_or_default();
                deps.metrics
                    .count_created_for(reason, &claim.node_pool, &capacity_type);
                let names: Vec<&str> = instance_types.iter().map(|t| t.name.as_str()).collect();
                tracing::info!(
                    NodePool = %claim.node_pool,
                    NodeClaim = %name,
                    requests = %claim.requests,
                    "instance-types" = %logs::Truncated { items: &names, max: LISTED_INSTANCE_TYPES },
                    "created nodeclaim"
                );
                created.push(name);
            }
            Err(source) => {
                let error = CreateError::Create {
                    nodepool: claim.node_pool.clone(),
                    source,
                };
                return Err((created, error));
            }
        }
    }
    Ok(created)
}

/// Creates one NodeClaim under a fresh name, trying another on a name clash.
async fn create(
    deps: ProvisionerDeps,
    nodepool: Arc<NodePool>,
    requirements: Requirements,
    requests: Resources,
) -> Result<String, ClusterError> {
    let pool = nodepool.metadata.name.clone().unwrap_or_default();
    let mut last = None;
    for _ in 0..NAME_ATTEMPTS {
        let name = deps.next_name(&pool);
        let object = launch::nodeclaim_object(&nodepool, name.clone(), &requirements, &requests);
        match deps.cluster.create_nodeclaim(&object).await {
            Ok(created) => return Ok(created.metadata.name.unwrap_or(name)),
            Err(error @ ClusterError::AlreadyExists { .. }) => last = Some(error),
            Err(error) => return Err(error),
        }
    }
    Err(last.unwrap_or(ClusterError::AlreadyExists {
        kind: crate::ports::cluster::ObjectKind::NodeClaim,
        name: pool,
    }))
}
