//! The instances provider: launches through batched instant `CreateFleet` calls, adopts
//! instances launched before a restart, and gets, lists, tags and terminates instances
//! (reference 4.2, 4.3).
//!
//! Launch flow: the cloud provider ([`super::cloud_provider`]) decides the capacity type
//! ([`capacity_type_for`]), the instance types (at most 60, cheapest first) and their launch
//! templates, and builds the fleet overrides per launch template ([`overrides`]: the cross
//! product of available compatible offerings and the zonal subnets). [`InstancesProvider::create`]
//! sends them as one instant fleet; equal requests from concurrent NodeClaims are merged by the
//! CreateFleet batcher (35 ms idle, 1 s max) into one fleet whose target capacity is their
//! number; fleet errors for lack of capacity mark those offerings unavailable for 3 minutes.
//! The three batchers (CreateFleet, `DescribeInstances`, `TerminateInstances`) are supervised
//! actors of the AWS group, started by [`InstancesProvider::start`] (`crate::aws`).
//!
//! # Restarts and retries
//!
//! Every fleet carries its NodeClaims' launch group tag
//! ([`crate::nodeclaim::launch::LAUNCH_GROUP`]; why a group and not a NodeClaim, see that
//! module). Before the cloud provider launches for a NodeClaim it asks [`InstancesProvider::adopt`]
//! for an *orphan* of its group: a pending or running instance with the group's tag that no
//! NodeClaim names and that this process has not handed out. Looking costs a `DescribeInstances`,
//! so it is done only where an orphan may be: the first adoption after start takes a *census*
//! (one `DescribeInstances` of the cluster's tagged instances) and marks the groups with orphans
//! *suspect*; a fleet whose outcome is unknown (a server or transport error, a call dropped
//! mid-flight, a refused token) marks its group suspect too. Other launches cost nothing extra.
//!
//! Two launches in this process must never get the same instance:
//!
//! - every instance a fleet returns or an adoption takes is *held* for its NodeClaim (in the
//!   book, for an hour, by which time its provider id is written or it is gone);
//! - the executor holds a fleet's instances before it counts the fleet as finished, and an
//!   adoption trusts its `DescribeInstances` only if no fleet of its group started or was in
//!   flight while it ran (an instance of a fleet still waiting for its answer looks orphaned);
//! - a fleet answer naming an instance another NodeClaim holds (a replayed token) is refused
//!   and the launch goes again with a new token.
//!
//! Client tokens make retries of one call idempotent (the retry layer re-sends a request whose
//! answer was lost with the same token, and EC2 answers with the first result). A batch's
//! token is a digest of its members (each NodeClaim's uid and its token *salt*) and of the
//! request itself, so the same NodeClaims sending the same request again reuse it, and any other
//! grouping or request gets a new token instead of EC2's `IdempotentParameterMismatch`. Should
//! EC2 still refuse one (a token from an earlier version of this digest), the NodeClaims' salts
//! go up, their group becomes suspect (what the first use launched is adopted or collected) and
//! the launch is sent again, at most [`TOKEN_ATTEMPTS`] times. moto ignores tokens: against it,
//! a retried call can launch twice, and the adoption and the garbage collector make up for it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio::time::Instant;

use super::batcher::{
    BatchDropped, BatchKind, Batcher, CREATE_FLEET_WINDOW, DESCRIBE_INSTANCES_WINDOW, Executor,
    TERMINATE_INSTANCES_WINDOW,
};
use super::unavailable::UnavailableOfferings;
use crate::nodeclaim::launch::LAUNCH_GROUP;
use crate::ports::aws_error::{AwsError, AwsErrorClass, AwsService};
use crate::ports::ec2::{
    CreateFleetRequest, CreateFleetResponse, DescribeInstancesRequest, Ec2Api, Filter,
    FleetLaunchTemplateConfig, FleetOverride, Instance, InstanceState, Tags,
};
use crate::runtime::{GroupRef, SpawnError};
use karpenter_core::apis::labels;
use karpenter_core::domain::instance_type::CapacityType;
use karpenter_core::domain::instance_type::InstanceType;
use karpenter_core::domain::requirements::{Requirement, Requirements};

/// Spot launches favour pools with spare capacity among the cheap ones.
pub const SPOT_ALLOCATION_STRATEGY: &str = "price-capacity-optimized";
pub const ON_DEMAND_ALLOCATION_STRATEGY: &str = "lowest-price";
/// How long a NodeClaim's launch, and the instance it holds, are remembered: the NodeClaim
/// actor retries within minutes, and by then the provider id is on the NodeClaim.
pub const LAUNCH_LEDGER_TTL: Duration = Duration::from_hours(1);
/// How often the book drops what is past [`LAUNCH_LEDGER_TTL`]: a sweep reads every entry, so
/// one per launch made a scale-up of `n` launches cost `n²` (an entry may outlive the TTL by
/// this much).
const LEDGER_SWEEP_EVERY: Duration = Duration::from_mins(1);
/// How many client tokens one launch tries when EC2 refuses them (see the module docs).
pub const TOKEN_ATTEMPTS: u32 = 3;
/// States of instances Karpenter still manages.
const LIVE_STATES: [&str; 5] = ["pending", "running", "stopping", "stopped", "shutting-down"];
/// States in which an orphan may be adopted: one stopping or shutting down will not register.
const ADOPTABLE_STATES: [&str; 2] = ["pending", "running"];

/// A deterministic client token for a key (EC2 allows 64 ASCII characters).
#[must_use]
pub fn client_token(key: &str) -> String {
    format!(
        "karpenter-{:016x}{:016x}",
        fnv1a(key.as_bytes(), 0xcbf2_9ce4_8422_2325),
        fnv1a(key.as_bytes(), 0x8422_2325_cbf2_9ce4)
    )
}

/// FNV-1a: stable across processes and Rust releases, unlike `DefaultHasher`.
fn fnv1a(bytes: &[u8], seed: u64) -> u64 {
    bytes.iter().fold(seed, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A batch member: the NodeClaim's uid, and its salt when EC2 refused an earlier token.
fn member_key(uid: &str, salt: u32) -> String {
    if salt == 0 {
        uid.to_owned()
    } else {
        format!("{uid}#{salt}")
    }
}

/// The NodeClaim uid of a batch member (uids and names never contain `#`).
fn uid_of(member: &str) -> &str {
    member.rsplit_once('#').map_or(member, |(uid, _)| uid)
}

/// The token of a batch: a digest of its members and of the request as sent (see the module
/// docs).
fn batch_token(members: &[String], request: &CreateFleetRequest) -> String {
    let mut sorted = members.to_vec();
    sorted.sort();
    let mut unsent = request.clone();
    unsent.client_token = None;
    client_token(&format!("{}|{unsent:?}", sorted.join(",")))
}

/// What to launch for one NodeClaim.
#[derive(Debug, Clone)]
pub struct LaunchRequest {
    pub nodeclaim: String,
    /// The NodeClaim's uid (its name when the uid is unknown): the idempotency key.
    pub nodeclaim_uid: String,
    /// Spot or on-demand ([`capacity_type_for`]); reserved launches go out as on-demand.
    pub capacity_type: CapacityType,
    /// One config per launch template, with its overrides ([`overrides`]).
    pub launch_templates: Vec<FleetLaunchTemplateConfig>,
    pub tags: Tags,
    pub context: Option<String>,
    /// The [`LAUNCH_GROUP`] tag of the NodeClaim (`None`: launched untagged, never adopted).
    pub launch_group: Option<String>,
}

/// A launched instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchedInstance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: String,
    pub capacity_type: CapacityType,
    pub image_id: Option<String>,
}

impl LaunchedInstance {
    /// An instance found by `DescribeInstances`.
    fn of(instance: &Instance) -> Self {
        LaunchedInstance {
            id: instance.id.clone(),
            instance_type: instance.instance_type.clone(),
            zone: instance.zone.clone(),
            subnet_id: instance.subnet_id.clone(),
            capacity_type: instance.capacity_type,
            image_id: Some(instance.image_id.clone()).filter(|i| !i.is_empty()),
        }
    }
}

/// Failures of the instances provider.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InstancesError {
    /// No offering could be launched; the NodeClaim is deleted and its pods re-provisioned.
    #[error("launching nodeclaim {nodeclaim}: insufficient capacity: {source}")]
    InsufficientCapacity { nodeclaim: String, source: AwsError },
    /// Nothing to launch: no launch template has an override.
    #[error(
        "launching nodeclaim {nodeclaim}: no capacity offerings are currently available given the constraints"
    )]
    NoOfferings { nodeclaim: String },
    #[error("launching nodeclaim {nodeclaim}: {source}")]
    Launch { nodeclaim: String, source: AwsError },
    /// Looking for an instance launched before a restart failed; the launch is retried.
    #[error("looking for an instance to adopt for nodeclaim {nodeclaim}: {source}")]
    Adopt { nodeclaim: String, source: AwsError },
    #[error("instance {instance_id} not found")]
    NotFound { instance_id: String },
    #[error(transparent)]
    Aws(#[from] AwsError),
    #[error(transparent)]
    Dropped(#[from] BatchDropped),
}

impl InstancesError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            InstancesError::InsufficientCapacity { .. } | InstancesError::NoOfferings { .. } => {
                "insufficient_capacity"
            }
            InstancesError::Launch { source, .. }
            | InstancesError::Adopt { source, .. }
            | InstancesError::Aws(source) => source.category(),
            InstancesError::NotFound { .. } => "not_found",
            InstancesError::Dropped(_) => "batch_dropped",
        }
    }
}

/// One batch member's share of a fleet: its instance, or why it got none.
pub type FleetOutcome = Result<LaunchedInstance, Box<AwsError>>;

/// What an adopting NodeClaim asks of an orphan (see [`InstancesProvider::adopt`]).
pub struct Adoption<'a> {
    pub nodeclaim: &'a str,
    pub nodeclaim_uid: &'a str,
    /// The NodeClaim's [`LAUNCH_GROUP`] tag.
    pub launch_group: &'a str,
    /// Whether the instance can serve the NodeClaim (its type, zone and capacity type are
    /// allowed, its requests fit).
    pub accepts: &'a (dyn Fn(&Instance) -> bool + Sync),
    /// Whether the instance is the one the NodeClaim's labels already describe (a launch whose
    /// labels were written before the process died): taken first.
    pub prefers: &'a (dyn Fn(&Instance) -> bool + Sync),
    /// Whether a NodeClaim names the instance as its provider id.
    pub owned: &'a (dyn Fn(&Instance) -> bool + Sync),
}

impl std::fmt::Debug for Adoption<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adoption")
            .field("nodeclaim", &self.nodeclaim)
            .field("launch_group", &self.launch_group)
            .finish_non_exhaustive()
    }
}

/// One NodeClaim's launch as this process knows it.
#[derive(Debug, Clone)]
struct NodeClaimLaunch {
    instance: Option<LaunchedInstance>,
    /// Bumped each time EC2 refuses the NodeClaim's token.
    salt: u32,
    at: Instant,
}

/// CreateFleet calls of one launch group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FleetCount {
    in_flight: u32,
    started: u64,
}

/// What this process knows about its launches (see the module docs).
#[derive(Debug, Default)]
struct Book {
    nodeclaims: HashMap<String, NodeClaimLaunch>,
    /// Instances launched or adopted, by id: the uid of the NodeClaim holding each.
    held: HashMap<String, (String, Instant)>,
    /// Fleets per launch group tag, and when the group last launched.
    fleets: HashMap<String, (FleetCount, Instant)>,
    /// Launch group tags that may have orphans.
    suspect: HashSet<String>,
    /// When [`Book::prune`] last swept.
    swept: Option<Instant>,
}

impl Book {
    /// Drops what is older than [`LAUNCH_LEDGER_TTL`] (groups with a fleet in flight stay),
    /// at most once per [`LEDGER_SWEEP_EVERY`].
    fn prune(&mut self, now: Instant) {
        if self
            .swept
            .is_some_and(|at| now.duration_since(at) < LEDGER_SWEEP_EVERY)
        {
            return;
        }
        self.swept = Some(now);
        let fresh = |at: &Instant| now.duration_since(*at) < LAUNCH_LEDGER_TTL;
        self.nodeclaims.retain(|_, launch| fresh(&launch.at));
        self.held.retain(|_, (_, at)| fresh(at));
        self.fleets
            .retain(|_, (count, at)| count.in_flight > 0 || fresh(at));
    }

    fn launch_of(&mut self, uid: &str, now: Instant) -> &mut NodeClaimLaunch {
        self.nodeclaims
            .entry(uid.to_owned())
            .or_insert(NodeClaimLaunch {
                instance: None,
                salt: 0,
                at: now,
            })
    }

    fn salt(&self, uid: &str) -> u32 {
        self.nodeclaims.get(uid).map_or(0, |launch| launch.salt)
    }

    /// A new token for the NodeClaim's next launch, after EC2 refused or misused this one.
    fn bump_salt(&mut self, uid: &str) {
        let now = Instant::now();
        let launch = self.launch_of(uid, now);
        launch.salt = launch.salt.saturating_add(1);
        launch.at = now;
    }

    /// The NodeClaim's instance, held for it.
    fn record(&mut self, uid: &str, instance: &LaunchedInstance) {
        let now = Instant::now();
        self.prune(now);
        self.held.insert(instance.id.clone(), (uid.to_owned(), now));
        let launch = self.launch_of(uid, now);
        launch.instance = Some(instance.clone());
        launch.at = now;
    }

    /// Records an instance a fleet returned for `uid`, unless another NodeClaim holds it (a
    /// replayed answer): a caller that gave up before the answer finds it on its next try.
    fn record_if_free(&mut self, uid: &str, instance: &LaunchedInstance) {
        if self.holder(&instance.id).is_none_or(|holder| holder == uid) {
            self.record(uid, instance);
        }
    }

    fn holder(&self, id: &str) -> Option<&str> {
        self.held.get(id).map(|(uid, _)| uid.as_str())
    }

    fn count(&self, group: &str) -> FleetCount {
        self.fleets.get(group).map_or(
            FleetCount {
                in_flight: 0,
                started: 0,
            },
            |(count, _)| *count,
        )
    }

    fn fleet_started(&mut self, group: &str) {
        let now = Instant::now();
        let (count, at) = self.fleets.entry(group.to_owned()).or_insert((
            FleetCount {
                in_flight: 0,
                started: 0,
            },
            now,
        ));
        count.in_flight = count.in_flight.saturating_add(1);
        count.started = count.started.saturating_add(1);
        *at = now;
    }

    fn fleet_finished(&mut self, group: &str) {
        if let Some((count, at)) = self.fleets.get_mut(group) {
            count.in_flight = count.in_flight.saturating_sub(1);
            *at = Instant::now();
        }
    }
}

/// Counts a fleet in flight for its group until dropped; a fleet dropped before its answer
/// (its task cancelled) leaves its group suspect, since it may have launched.
struct FleetInFlight {
    book: Arc<Mutex<Book>>,
    group: Option<String>,
    answered: bool,
}

impl FleetInFlight {
    fn start(book: &Arc<Mutex<Book>>, group: Option<String>) -> Self {
        if let Some(group) = &group {
            lock(book).fleet_started(group);
        }
        FleetInFlight {
            book: Arc::clone(book),
            group,
            answered: false,
        }
    }

    /// Holds the fleet's instances for their members, then counts the fleet as finished (in
    /// this order: see the module docs); `uncertain` marks the group suspect.
    fn finish(mut self, members: &[String], outcomes: &[FleetOutcome], uncertain: bool) {
        let mut book = lock(&self.book);
        for (member, outcome) in members.iter().zip(outcomes) {
            if let Ok(instance) = outcome {
                book.record_if_free(uid_of(member), instance);
            }
        }
        if let Some(group) = &self.group {
            if uncertain {
                book.suspect.insert(group.clone());
            }
            book.fleet_finished(group);
        }
        self.answered = true;
    }
}

impl Drop for FleetInFlight {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        if let Some(group) = &self.group {
            let mut book = lock(&self.book);
            book.suspect.insert(group.clone());
            book.fleet_finished(group);
        }
    }
}

fn lock(book: &Mutex<Book>) -> MutexGuard<'_, Book> {
    book.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The CreateFleet batcher: fleet requests of equal shape, one item per NodeClaim uid.
#[derive(Debug)]
pub struct CreateFleetBatch;

impl BatchKind for CreateFleetBatch {
    const KIND: &'static str = "CreateFleetBatcherActor";
    const NAME: &'static str = "create-fleet";
    // Two full windows (1000 launches each).
    const MAILBOX_CAPACITY: usize = 2 * CREATE_FLEET_WINDOW.max_items;
    type Key = CreateFleetRequest;
    type Item = String;
    type Output = FleetOutcome;
}

/// The `DescribeInstances` batcher: instance ids, one call per window.
#[derive(Debug)]
pub struct DescribeInstancesBatch;

impl BatchKind for DescribeInstancesBatch {
    const KIND: &'static str = "DescribeInstancesBatcherActor";
    const NAME: &'static str = "describe-instances";
    // Two full windows (500 ids each).
    const MAILBOX_CAPACITY: usize = 2 * DESCRIBE_INSTANCES_WINDOW.max_items;
    type Key = ();
    type Item = String;
    type Output = Result<Instance, InstancesError>;
}

/// The `TerminateInstances` batcher: instance ids, one call per window.
#[derive(Debug)]
pub struct TerminateInstancesBatch;

impl BatchKind for TerminateInstancesBatch {
    const KIND: &'static str = "TerminateInstancesBatcherActor";
    const NAME: &'static str = "terminate-instances";
    // Two full windows (500 ids each).
    const MAILBOX_CAPACITY: usize = 2 * TERMINATE_INSTANCES_WINDOW.max_items;
    type Key = ();
    type Item = String;
    type Output = Result<(), InstancesError>;
}

/// What the provider is built from.
#[derive(Debug, Clone)]
pub struct InstancesDeps {
    pub ec2: Arc<dyn Ec2Api>,
    pub unavailable: Arc<UnavailableOfferings>,
    pub cluster_name: String,
}

/// Launches, adopts, finds and terminates instances.
#[derive(Debug)]
pub struct InstancesProvider {
    deps: InstancesDeps,
    fleets: Batcher<CreateFleetBatch>,
    describes: Batcher<DescribeInstancesBatch>,
    terminations: Batcher<TerminateInstancesBatch>,
    book: Arc<Mutex<Book>>,
    /// Taken once, by the first adoption after start (see the module docs).
    census: OnceCell<()>,
}

/// The capacity type a fleet asks EC2 for: reserved capacity launches as on-demand capacity (in
/// the reservation its launch template names).
fn fleet_capacity_type(capacity_type: CapacityType) -> CapacityType {
    match capacity_type {
        CapacityType::Spot => CapacityType::Spot,
        CapacityType::OnDemand | CapacityType::Reserved => CapacityType::OnDemand,
    }
}

/// Marks offerings of capacity fleet errors unavailable (and all spot on a missing spot role).
fn record_fleet_errors(
    unavailable: &UnavailableOfferings,
    response: &CreateFleetResponse,
    capacity_type: CapacityType,
) {
    for error in &response.errors {
        match AwsErrorClass::classify(Some(&error.code), None) {
            AwsErrorClass::InsufficientCapacity => {
                if let (Some(instance_type), Some(zone)) = (&error.instance_type, &error.zone) {
                    unavailable.mark_unavailable(instance_type, zone, capacity_type, &error.code);
                }
            }
            AwsErrorClass::SpotServiceLinkedRoleMissing => {
                unavailable.mark_capacity_type_unavailable(CapacityType::Spot);
            }
            _ => {}
        }
    }
}

/// Splits one fleet answer among the batch members, in order.
fn distribute(
    request: &CreateFleetRequest,
    response: &CreateFleetResponse,
    members: usize,
) -> Vec<FleetOutcome> {
    let launched: Vec<LaunchedInstance> = response
        .instances
        .iter()
        .flat_map(|fleet_instance| {
            fleet_instance
                .instance_ids
                .iter()
                .map(|id| LaunchedInstance {
                    id: id.clone(),
                    instance_type: fleet_instance.instance_type.clone(),
                    zone: fleet_instance.zone.clone(),
                    subnet_id: fleet_instance.subnet_id.clone(),
                    capacity_type: fleet_instance.capacity_type,
                    image_id: fleet_instance.image_id.clone(),
                })
        })
        .collect();
    let shortfall = || {
        let message = if response.errors.is_empty() {
            format!(
                "fleet returned {} of {} instances",
                launched.len(),
                request.total_target_capacity
            )
        } else {
            response
                .errors
                .iter()
                .map(|e| format!("{}: {}", e.code, e.message))
                .collect::<Vec<_>>()
                .join("; ")
        };
        // Karpenter v1.5's `combineFleetErrors`: a 200 without instances is insufficient
        // capacity (`UnfulfillableCapacity`) only when every fleet error is a capacity error
        // (or none came); otherwise the launch fails with the first other error's code, so the
        // NodeClaim reports it instead of being deleted and recreated.
        let code = response
            .errors
            .iter()
            .find(|e| {
                !matches!(
                    AwsErrorClass::classify(Some(&e.code), None),
                    AwsErrorClass::InsufficientCapacity
                        | AwsErrorClass::SpotServiceLinkedRoleMissing
                )
            })
            .map_or("UnfulfillableCapacity", |e| e.code.as_str());
        let mut error =
            AwsError::new(AwsService::Ec2, "CreateFleet", Some(code), message).with_status(200);
        if let Some(id) = &response.request_id {
            error = error.with_request_id(id.clone());
        }
        error
    };
    (0..members)
        .map(|i| {
            launched
                .get(i)
                .cloned()
                .ok_or_else(|| Box::new(shortfall()))
        })
        .collect()
}

/// Karpenter's `getCapacityType`: spot when the requirements allow it and some type has an
/// available compatible spot offering, else on-demand (reserved launches are not made here).
#[must_use]
pub fn capacity_type_for(
    requirements: &Requirements,
    instance_types: &[Arc<InstanceType>],
) -> CapacityType {
    let allows_spot = requirements
        .get(labels::CAPACITY_TYPE)
        .is_none_or(|r| r.has(labels::CAPACITY_TYPE_SPOT));
    if allows_spot {
        let spot = with_capacity_type(requirements, CapacityType::Spot);
        if instance_types
            .iter()
            .any(|it| it.available_offerings().any(|o| o.is_compatible(&spot)))
        {
            return CapacityType::Spot;
        }
    }
    CapacityType::OnDemand
}

/// The requirements with the capacity type pinned to one value.
#[must_use]
pub fn with_capacity_type(
    requirements: &Requirements,
    capacity_type: CapacityType,
) -> Requirements {
    let mut pinned = requirements.clone();
    pinned.set(Requirement::in_values(
        labels::CAPACITY_TYPE,
        &[capacity_type.as_str()],
    ));
    pinned
}

/// Karpenter's `getOverrides`: one override per available offering compatible with the
/// requirements (capacity type pinned) whose zone has a launch subnet, in instance-type order.
#[must_use]
pub fn overrides(
    instance_types: &[Arc<InstanceType>],
    zonal_subnets: &BTreeMap<String, String>,
    requirements: &Requirements,
    image_id: Option<&str>,
) -> Vec<FleetOverride> {
    let mut out = Vec::new();
    for it in instance_types {
        for offering in it
            .available_offerings()
            .filter(|o| o.is_compatible(requirements))
        {
            let Some(zone) = offering.zone() else {
                continue;
            };
            let Some(subnet) = zonal_subnets.get(zone) else {
                continue;
            };
            out.push(FleetOverride {
                instance_type: it.name.clone(),
                subnet_id: subnet.clone(),
                zone: zone.to_owned(),
                image_id: image_id.map(str::to_owned),
            });
        }
    }
    out
}

impl InstancesProvider {
    /// Builds the provider; its batchers run once [`Self::start`] put them in a group.
    #[must_use]
    pub fn new(deps: InstancesDeps) -> Self {
        let ec2 = Arc::clone(&deps.ec2);
        let unavailable = Arc::clone(&deps.unavailable);
        let book = Arc::new(Mutex::new(Book::default()));
        let fleet_book = Arc::clone(&book);
        let fleet_executor: Executor<CreateFleetRequest, String, FleetOutcome> =
            Arc::new(move |key: CreateFleetRequest, members: Vec<String>| {
                let ec2 = Arc::clone(&ec2);
                let unavailable = Arc::clone(&unavailable);
                let book = Arc::clone(&fleet_book);
                Box::pin(async move {
                    let mut request = key;
                    request.total_target_capacity =
                        u32::try_from(members.len()).unwrap_or(u32::MAX);
                    request.client_token = Some(batch_token(&members, &request));
                    let in_flight =
                        FleetInFlight::start(&book, request.tags.get(LAUNCH_GROUP).cloned());
                    let capacity_type = request.capacity_type;
                    let (outcomes, uncertain) = match ec2.create_fleet(&request).await {
                        Ok(response) => {
                            record_fleet_errors(&unavailable, &response, capacity_type);
                            (distribute(&request, &response, members.len()), false)
                        }
                        Err(error) => {
                            // The fleet may have launched (no answer in time, a server error)
                            // or an earlier use of the token did (a refused token).
                            let uncertain = error.is_ambiguous()
                                || error.class == AwsErrorClass::IdempotentParameterMismatch;
                            let outcomes = members
                                .iter()
                                .map(|_| Err(Box::new(error.clone())))
                                .collect();
                            (outcomes, uncertain)
                        }
                    };
                    in_flight.finish(&members, &outcomes, uncertain);
                    outcomes
                })
            });
        let ec2 = Arc::clone(&deps.ec2);
        let describe_executor: Executor<(), String, Result<Instance, InstancesError>> =
            Arc::new(move |(), ids: Vec<String>| {
                let ec2 = Arc::clone(&ec2);
                Box::pin(async move { describe_batch(ec2.as_ref(), &ids).await })
            });
        let ec2 = Arc::clone(&deps.ec2);
        let terminate_executor: Executor<(), String, Result<(), InstancesError>> =
            Arc::new(move |(), ids: Vec<String>| {
                let ec2 = Arc::clone(&ec2);
                Box::pin(async move { terminate_batch(ec2.as_ref(), &ids).await })
            });
        InstancesProvider {
            deps,
            fleets: Batcher::new(CREATE_FLEET_WINDOW, fleet_executor),
            describes: Batcher::new(DESCRIBE_INSTANCES_WINDOW, describe_executor),
            terminations: Batcher::new(TERMINATE_INSTANCES_WINDOW, terminate_executor),
            book,
            census: OnceCell::new(),
        }
    }

    /// Starts the three batcher actors under `group` (the AWS group); until then launches,
    /// gets and deletes fail with `batch_dropped`. Batchers still running are kept.
    pub fn start(&self, group: &GroupRef) -> Result<(), SpawnError> {
        self.fleets.start(group)?;
        self.describes.start(group)?;
        self.terminations.start(group)?;
        Ok(())
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        lock(&self.book)
    }

    /// The fleet request for a launch, with the cluster's ownership tags and its launch group.
    pub fn fleet_request(
        &self,
        launch: &LaunchRequest,
    ) -> Result<CreateFleetRequest, InstancesError> {
        let launch_template_configs: Vec<FleetLaunchTemplateConfig> = launch
            .launch_templates
            .iter()
            .filter(|config| !config.overrides.is_empty())
            .cloned()
            .collect();
        if launch_template_configs.is_empty() {
            return Err(InstancesError::NoOfferings {
                nodeclaim: launch.nodeclaim.clone(),
            });
        }
        let mut tags = launch.tags.clone();
        tags.entry(labels::TAG_EKS_CLUSTER_NAME.to_owned())
            .or_insert_with(|| self.deps.cluster_name.clone());
        tags.entry(format!(
            "{}{}",
            labels::TAG_CLUSTER_PREFIX,
            self.deps.cluster_name
        ))
        .or_insert_with(|| "owned".to_owned());
        if let Some(group) = &launch.launch_group {
            tags.insert(LAUNCH_GROUP.to_owned(), group.clone());
        }
        Ok(CreateFleetRequest {
            client_token: None,
            capacity_type: fleet_capacity_type(launch.capacity_type),
            total_target_capacity: 1,
            allocation_strategy: if launch.capacity_type == CapacityType::Spot {
                SPOT_ALLOCATION_STRATEGY
            } else {
                ON_DEMAND_ALLOCATION_STRATEGY
            }
            .to_owned(),
            launch_template_configs,
            tags,
            context: launch.context.clone(),
            dry_run: false,
        })
    }

    /// The instance a NodeClaim already launched or adopted, when this provider remembers it.
    #[must_use]
    pub fn launched(&self, nodeclaim_uid: &str) -> Option<LaunchedInstance> {
        self.book()
            .nodeclaims
            .get(nodeclaim_uid)
            .and_then(|launch| launch.instance.clone())
    }

    /// Whether the census found, or a fleet left, possible orphans of this launch group.
    #[must_use]
    pub fn is_suspect(&self, launch_group: &str) -> bool {
        self.book().suspect.contains(launch_group)
    }

    /// The cluster's live instances with a launch group tag.
    async fn tagged_instances(&self, group: Option<&str>) -> Result<Vec<Instance>, AwsError> {
        let mut filters = vec![
            Filter::tag(labels::TAG_EKS_CLUSTER_NAME, &[&self.deps.cluster_name]),
            Filter::new("instance-state-name", &ADOPTABLE_STATES),
        ];
        filters.push(match group {
            Some(group) => Filter::tag(LAUNCH_GROUP, &[group]),
            None => Filter::tag_key(LAUNCH_GROUP),
        });
        self.deps
            .ec2
            .describe_instances(&DescribeInstancesRequest {
                instance_ids: Vec::new(),
                filters,
            })
            .await
    }

    /// The census: marks the launch groups that have orphans (see the module docs).
    async fn take_census(
        &self,
        owned: &(dyn Fn(&Instance) -> bool + Sync),
    ) -> Result<(), AwsError> {
        let instances = self.tagged_instances(None).await?;
        let orphans: Vec<&Instance> = instances.iter().filter(|i| !owned(i)).collect();
        let mut book = self.book();
        let groups: HashSet<String> = orphans
            .iter()
            .filter(|i| book.holder(&i.id).is_none())
            .filter_map(|i| i.tags.get(LAUNCH_GROUP).cloned())
            .collect();
        if !groups.is_empty() {
            tracing::info!(
                instances = orphans.len(),
                launch_groups = groups.len(),
                "found instances no nodeclaim names; nodeclaims of their launch groups adopt them"
            );
        }
        book.suspect.extend(groups);
        Ok(())
    }

    /// An orphan of the NodeClaim's launch group that it can use, held for it from now on;
    /// `None` when there is none (or none can be trusted: launch instead). Costs a
    /// `DescribeInstances` only for the census and for suspect groups.
    pub async fn adopt(
        &self,
        adoption: &Adoption<'_>,
    ) -> Result<Option<LaunchedInstance>, InstancesError> {
        let failed = |source: AwsError| InstancesError::Adopt {
            nodeclaim: adoption.nodeclaim.to_owned(),
            source,
        };
        self.census
            .get_or_try_init(|| self.take_census(adoption.owned))
            .await
            .map_err(failed)?;
        let group = adoption.launch_group;
        let before = {
            let book = self.book();
            if !book.suspect.contains(group) {
                return Ok(None);
            }
            book.count(group)
        };
        // A fleet of this group waiting for its answer has instances nobody holds yet.
        if before.in_flight > 0 {
            return Ok(None);
        }
        let found = self.tagged_instances(Some(group)).await.map_err(failed)?;
        let orphans: Vec<&Instance> = found.iter().filter(|i| !(adoption.owned)(i)).collect();
        let mut book = self.book();
        if book.count(group) != before {
            return Ok(None);
        }
        let free: Vec<&Instance> = orphans
            .into_iter()
            .filter(|i| book.holder(&i.id).is_none())
            .collect();
        let mut usable: Vec<&Instance> = free
            .iter()
            .copied()
            .filter(|i| (adoption.accepts)(i))
            .collect();
        usable.sort_by_key(|i| (!(adoption.prefers)(i), i.id.clone()));
        let Some(chosen) = usable.first() else {
            if free.is_empty() {
                book.suspect.remove(group);
            }
            return Ok(None);
        };
        let instance = LaunchedInstance::of(chosen);
        book.record(adoption.nodeclaim_uid, &instance);
        if free.len() == 1 {
            book.suspect.remove(group);
        }
        drop(book);
        tracing::info!(
            nodeclaim = adoption.nodeclaim,
            instance_id = %instance.id,
            instance_type = %instance.instance_type,
            zone = %instance.zone,
            "adopted an instance launched for the nodeclaim's launch group"
        );
        Ok(Some(instance))
    }

    /// Launches one instance for a NodeClaim; a repeated call for the same NodeClaim returns the
    /// same instance.
    pub async fn create(&self, launch: &LaunchRequest) -> Result<LaunchedInstance, InstancesError> {
        let uid = launch.nodeclaim_uid.as_str();
        let refused = |source: AwsError| InstancesError::Launch {
            nodeclaim: launch.nodeclaim.clone(),
            source,
        };
        let mut last = None;
        for _ in 0..TOKEN_ATTEMPTS {
            if let Some(instance) = self.launched(uid) {
                return Ok(instance);
            }
            let salt = self.book().salt(uid);
            let request = self.fleet_request(launch)?;
            match self.fleets.add(request, member_key(uid, salt)).await? {
                Ok(instance) => {
                    let mut book = self.book();
                    if book
                        .holder(&instance.id)
                        .is_some_and(|holder| holder != uid)
                    {
                        // A token replayed an answer whose instance another NodeClaim adopted.
                        book.bump_salt(uid);
                        if let Some(group) = &launch.launch_group {
                            book.suspect.insert(group.clone());
                        }
                        drop(book);
                        let error = AwsError::new(
                            AwsService::Ec2,
                            "CreateFleet",
                            None,
                            format!(
                                "fleet answered with instance {} which another nodeclaim holds",
                                instance.id
                            ),
                        );
                        tracing::warn!(nodeclaim = %launch.nodeclaim, instance_id = %instance.id, "a replayed client token answered with an instance another nodeclaim holds; launching with a new token");
                        last = Some(error);
                        continue;
                    }
                    book.record(uid, &instance);
                    return Ok(instance);
                }
                Err(error) if error.is_idempotent_parameter_mismatch() => {
                    error.log();
                    let mut book = self.book();
                    book.bump_salt(uid);
                    if let Some(group) = &launch.launch_group {
                        book.suspect.insert(group.clone());
                    }
                    last = Some(*error);
                }
                Err(error) => {
                    error.log();
                    return Err(if error.is_insufficient_capacity() {
                        InstancesError::InsufficientCapacity {
                            nodeclaim: launch.nodeclaim.clone(),
                            source: *error,
                        }
                    } else {
                        refused(*error)
                    });
                }
            }
        }
        Err(refused(last.unwrap_or_else(|| {
            AwsError::new(
                AwsService::Ec2,
                "CreateFleet",
                None,
                "no client token was accepted",
            )
        })))
    }

    /// Forgets a NodeClaim's launch (after its instance is gone).
    pub fn forget(&self, nodeclaim_uid: &str) {
        let mut book = self.book();
        if let Some(instance) = book
            .nodeclaims
            .remove(nodeclaim_uid)
            .and_then(|launch| launch.instance)
        {
            book.held.remove(&instance.id);
        }
    }

    /// One instance, through the `DescribeInstances` batcher.
    pub async fn get(&self, instance_id: &str) -> Result<Instance, InstancesError> {
        self.describes.add((), instance_id.to_owned()).await?
    }

    /// Every instance of this cluster that Karpenter launched and that is not terminated.
    pub async fn list(&self) -> Result<Vec<Instance>, InstancesError> {
        let filters = vec![
            Filter::tag_key(labels::TAG_NODEPOOL),
            Filter::tag_key(labels::TAG_EC2NODECLASS),
            Filter::tag(labels::TAG_EKS_CLUSTER_NAME, &[&self.deps.cluster_name]),
            Filter::new("instance-state-name", &LIVE_STATES),
        ];
        Ok(self
            .deps
            .ec2
            .describe_instances(&DescribeInstancesRequest {
                instance_ids: Vec::new(),
                filters,
            })
            .await?)
    }

    /// Starts termination unless already shutting down; `NotFound` once the instance is gone.
    pub async fn delete(&self, instance_id: &str) -> Result<(), InstancesError> {
        let instance = self.get(instance_id).await?;
        if instance.state != InstanceState::ShuttingDown {
            self.terminations.add((), instance_id.to_owned()).await??;
        }
        Ok(())
    }

    pub async fn create_tags(&self, instance_id: &str, tags: &Tags) -> Result<(), InstancesError> {
        self.deps
            .ec2
            .create_tags(&[instance_id.to_owned()], tags)
            .await
            .map_err(|error| {
                if error.is_not_found() {
                    InstancesError::NotFound {
                        instance_id: instance_id.to_owned(),
                    }
                } else {
                    InstancesError::Aws(error)
                }
            })
    }
}

async fn describe_batch(ec2: &dyn Ec2Api, ids: &[String]) -> Vec<Result<Instance, InstancesError>> {
    let request = |ids: Vec<String>| DescribeInstancesRequest {
        instance_ids: ids,
        filters: vec![Filter::new("instance-state-name", &LIVE_STATES)],
    };
    match ec2.describe_instances(&request(ids.to_vec())).await {
        Ok(instances) => {
            let by_id: HashMap<&str, &Instance> =
                instances.iter().map(|i| (i.id.as_str(), i)).collect();
            ids.iter()
                .map(|id| {
                    by_id.get(id.as_str()).map(|i| (*i).clone()).ok_or_else(|| {
                        InstancesError::NotFound {
                            instance_id: id.clone(),
                        }
                    })
                })
                .collect()
        }
        // One unknown id fails the whole call: ask for each on its own, as Karpenter does.
        Err(error) if error.is_not_found() && ids.len() > 1 => {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                out.push(
                    match ec2.describe_instances(&request(vec![id.clone()])).await {
                        Ok(found) => {
                            found
                                .into_iter()
                                .next()
                                .ok_or_else(|| InstancesError::NotFound {
                                    instance_id: id.clone(),
                                })
                        }
                        Err(e) if e.is_not_found() => Err(InstancesError::NotFound {
                            instance_id: id.clone(),
                        }),
                        Err(e) => Err(InstancesError::Aws(e)),
                    },
                );
            }
            out
        }
        Err(error) if error.is_not_found() => ids
            .iter()
            .map(|id| {
                Err(InstancesError::NotFound {
                    instance_id: id.clone(),
                })
            })
            .collect(),
        Err(error) => ids
            .iter()
            .map(|_| Err(InstancesError::Aws(error.clone())))
            .collect(),
    }
}

async fn terminate_batch(ec2: &dyn Ec2Api, ids: &[String]) -> Vec<Result<(), InstancesError>> {
    let not_found = |id: &String| InstancesError::NotFound {
        instance_id: id.clone(),
    };
    match ec2.terminate_instances(ids).await {
        Ok(_) => ids.iter().map(|_| Ok(())).collect(),
        Err(error) if error.is_not_found() && ids.len() > 1 => {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                out.push(
                    match ec2.terminate_instances(std::slice::from_ref(id)).await {
                        Ok(_) => Ok(()),
                        Err(e) if e.is_not_found() => Err(not_found(id)),
                        Err(e) => Err(InstancesError::Aws(e)),
                    },
                );
            }
            out
        }
        Err(error) if error.is_not_found() => ids.iter().map(|id| Err(not_found(id))).collect(),
        Err(error) => ids
            .iter()
            .map(|_| Err(InstancesError::Aws(error.clone())))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(capacity: u32) -> CreateFleetRequest {
        CreateFleetRequest {
            client_token: None,
            capacity_type: CapacityType::OnDemand,
            total_target_capacity: capacity,
            allocation_strategy: ON_DEMAND_ALLOCATION_STRATEGY.into(),
            launch_template_configs: Vec::new(),
            tags: Tags::new(),
            context: None,
            dry_run: false,
        }
    }

    fn launched(id: &str) -> LaunchedInstance {
        LaunchedInstance {
            id: id.into(),
            instance_type: "m5.large".into(),
            zone: "us-west-2a".into(),
            subnet_id: "subnet-a".into(),
            capacity_type: CapacityType::OnDemand,
            image_id: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_book_forgets_holds_past_the_ttl_sweeping_at_most_once_a_minute() {
        let half_a_minute = LEDGER_SWEEP_EVERY / 2;
        let mut book = Book::default();
        book.record("uid-a", &launched("i-a"));
        tokio::time::advance(LAUNCH_LEDGER_TTL.saturating_sub(half_a_minute)).await;
        book.record("uid-x", &launched("i-x"));
        assert_eq!(book.holder("i-a"), Some("uid-a"), "within the TTL: kept");
        tokio::time::advance(half_a_minute).await;
        // Past the TTL, but the last sweep was half a minute ago: none yet.
        book.record("uid-b", &launched("i-b"));
        assert_eq!(book.holder("i-a"), Some("uid-a"));
        tokio::time::advance(LEDGER_SWEEP_EVERY).await;
        book.record("uid-c", &launched("i-c"));
        assert_eq!(book.holder("i-a"), None, "past the TTL: swept");
        for (id, uid) in [("i-x", "uid-x"), ("i-b", "uid-b"), ("i-c", "uid-c")] {
            assert_eq!(book.holder(id), Some(uid), "{id} is within the TTL");
        }
    }

    #[test]
    fn client_tokens_are_stable_distinct_and_short_enough() {
        let a = client_token("5f1c0e4e-0000-4000-8000-000000000001");
        assert_eq!(a, client_token("5f1c0e4e-0000-4000-8000-000000000001"));
        assert_ne!(a, client_token("5f1c0e4e-0000-4000-8000-000000000002"));
        assert!(a.len() <= 64 && a.is_ascii());
    }

    #[test]
    fn a_batch_token_follows_its_members_and_its_request_but_not_their_order() {
        let (x, y) = ("x".to_owned(), "y".to_owned());
        let two = request(2);
        let token = batch_token(&[x.clone(), y.clone()], &two);
        assert_eq!(token, batch_token(&[y.clone(), x.clone()], &two));
        assert!(token.len() <= 64 && token.is_ascii());
        assert_ne!(token, batch_token(std::slice::from_ref(&x), &request(1)));
        let mut spot = request(2);
        spot.capacity_type = CapacityType::Spot;
        assert_ne!(
            token,
            batch_token(&[x.clone(), y.clone()], &spot),
            "another request"
        );
        assert_ne!(
            token,
            batch_token(&[member_key("x", 1), y], &two),
            "a salted member"
        );
        let mut sent = request(2);
        sent.client_token = Some(token.clone());
        assert_eq!(
            token,
            batch_token(&[x, "y".into()], &sent),
            "the token itself is left out"
        );
        assert_eq!(uid_of(&member_key("uid-1", 2)), "uid-1");
        assert_eq!(uid_of(&member_key("uid-1", 0)), "uid-1");
    }
}
