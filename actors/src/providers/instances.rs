//! The instances provider: launches through batched instant `CreateFleet` calls, and gets,
//! lists, tags and terminates instances (reference 4.2, 4.3).
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
//! Idempotence (Karpenter lacks it): every NodeClaim has a deterministic client token
//! ([`client_token`]); a batch of one uses it, a larger batch a token derived from its members'.
//! The provider remembers each NodeClaim's outcome: a retried `create` returns the instance it
//! already launched, and after an ambiguous failure (server or transport error, the fleet may
//! have launched) it re-sends the very same request with the same token, which EC2 answers with
//! the first result instead of launching again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::batcher::{
    BatchDropped, BatchKind, Batcher, CREATE_FLEET_WINDOW, DESCRIBE_INSTANCES_WINDOW, Executor,
    TERMINATE_INSTANCES_WINDOW,
};
use super::unavailable::UnavailableOfferings;
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
/// How long a NodeClaim's launch outcome is remembered for idempotent retries; the NodeClaim
/// actor retries within minutes, and after registration the provider id is on the NodeClaim.
pub const LAUNCH_LEDGER_TTL: Duration = Duration::from_hours(1);
/// States of instances Karpenter still manages.
const LIVE_STATES: [&str; 5] = ["pending", "running", "stopping", "stopped", "shutting-down"];

/// A deterministic client token for a NodeClaim (EC2 allows 64 ASCII characters).
#[must_use]
pub fn client_token(nodeclaim_uid: &str) -> String {
    format!(
        "karpenter-{:016x}{:016x}",
        fnv1a(nodeclaim_uid.as_bytes(), 0xcbf2_9ce4_8422_2325),
        fnv1a(nodeclaim_uid.as_bytes(), 0x8422_2325_cbf2_9ce4)
    )
}

/// FNV-1a: stable across processes and Rust releases, unlike `DefaultHasher`.
fn fnv1a(bytes: &[u8], seed: u64) -> u64 {
    bytes.iter().fold(seed, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The token of a batch: its only member's, or one derived from all members'.
fn batch_token(tokens: &[String]) -> String {
    if let [only] = tokens {
        return only.clone();
    }
    let mut sorted = tokens.to_vec();
    sorted.sort();
    client_token(&sorted.join(","))
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
            InstancesError::Launch { source, .. } | InstancesError::Aws(source) => {
                source.category()
            }
            InstancesError::NotFound { .. } => "not_found",
            InstancesError::Dropped(_) => "batch_dropped",
        }
    }
}

/// A batch member's failure; on an ambiguous one, the request to re-send and its position.
#[derive(Debug)]
pub struct FleetFailure {
    error: AwsError,
    resend: Option<(CreateFleetRequest, usize)>,
}

/// One NodeClaim's share of a fleet answer.
pub type FleetOutcome = Result<LaunchedInstance, Box<FleetFailure>>;

fn failure(error: AwsError, resend: Option<(CreateFleetRequest, usize)>) -> Box<FleetFailure> {
    Box::new(FleetFailure { error, resend })
}

#[derive(Debug, Clone)]
enum Ledger {
    Launched(LaunchedInstance),
    Ambiguous(CreateFleetRequest, usize),
}

/// The CreateFleet batcher: fleet requests of equal shape, one item per NodeClaim token.
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

/// Launches, finds and terminates instances.
#[derive(Debug)]
pub struct InstancesProvider {
    deps: InstancesDeps,
    fleets: Batcher<CreateFleetBatch>,
    describes: Batcher<DescribeInstancesBatch>,
    terminations: Batcher<TerminateInstancesBatch>,
    ledger: Mutex<HashMap<String, (Ledger, Instant)>>,
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
        // Karpenter v1.5 reports a 200 without instances as this structured error.
        let mut error = AwsError::new(
            AwsService::Ec2,
            "CreateFleet",
            Some("UnfulfillableCapacity"),
            message,
        )
        .with_status(200);
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
                .ok_or_else(|| failure(shortfall(), None))
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
        let fleet_executor: Executor<CreateFleetRequest, String, FleetOutcome> =
            Arc::new(move |key: CreateFleetRequest, tokens: Vec<String>| {
                let ec2 = Arc::clone(&ec2);
                let unavailable = Arc::clone(&unavailable);
                Box::pin(async move {
                    let mut request = key;
                    request.total_target_capacity = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
                    request.client_token = Some(batch_token(&tokens));
                    let capacity_type = request.capacity_type;
                    match ec2.create_fleet(&request).await {
                        Ok(response) => {
                            record_fleet_errors(&unavailable, &response, capacity_type);
                            distribute(&request, &response, tokens.len())
                        }
                        Err(error) => {
                            // A server error or no answer (a timeout included): the fleet may
                            // have launched, so a retry re-sends it with the same token.
                            let ambiguous = error.is_ambiguous();
                            (0..tokens.len())
                                .map(|i| {
                                    Err(failure(
                                        error.clone(),
                                        ambiguous.then(|| (request.clone(), i)),
                                    ))
                                })
                                .collect()
                        }
                    }
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
            ledger: Mutex::new(HashMap::new()),
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

    fn ledger(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Ledger, Instant)>> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records an outcome, dropping outcomes older than [`LAUNCH_LEDGER_TTL`].
    fn remember(&self, token: String, entry: Ledger) {
        let now = Instant::now();
        let mut ledger = self.ledger();
        ledger.retain(|_, (_, at)| now.duration_since(*at) < LAUNCH_LEDGER_TTL);
        ledger.insert(token, (entry, now));
    }

    /// The fleet request for a launch, with the cluster's ownership tags.
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

    /// The instance a NodeClaim already launched, when this provider remembers it.
    #[must_use]
    pub fn launched(&self, nodeclaim_uid: &str) -> Option<LaunchedInstance> {
        match self.ledger().get(&client_token(nodeclaim_uid)) {
            Some((Ledger::Launched(instance), _)) => Some(instance.clone()),
            _ => None,
        }
    }

    /// Launches one instance for a NodeClaim; a repeated call for the same NodeClaim returns the
    /// same instance.
    pub async fn create(&self, launch: &LaunchRequest) -> Result<LaunchedInstance, InstancesError> {
        let token = client_token(&launch.nodeclaim_uid);
        let previous = self.ledger().get(&token).map(|(entry, _)| entry.clone());
        let outcome = match previous {
            Some(Ledger::Launched(instance)) => return Ok(instance),
            Some(Ledger::Ambiguous(request, index)) => {
                // Same request, same token: EC2 returns the first fleet if it was launched.
                match self.deps.ec2.create_fleet(&request).await {
                    Ok(response) => {
                        record_fleet_errors(
                            &self.deps.unavailable,
                            &response,
                            request.capacity_type,
                        );
                        let members = usize::try_from(request.total_target_capacity).unwrap_or(1);
                        distribute(&request, &response, members)
                            .into_iter()
                            .nth(index)
                            .unwrap_or_else(|| {
                                Err(failure(
                                    AwsError::new(
                                        AwsService::Ec2,
                                        "CreateFleet",
                                        None,
                                        "fleet member missing",
                                    ),
                                    None,
                                ))
                            })
                    }
                    Err(error) => Err(failure(error, Some((request, index)))),
                }
            }
            None => {
                let request = self.fleet_request(launch)?;
                self.fleets.add(request, token.clone()).await?
            }
        };
        match outcome {
            Ok(instance) => {
                self.remember(token, Ledger::Launched(instance.clone()));
                Ok(instance)
            }
            Err(failed) => {
                let FleetFailure { error, resend } = *failed;
                match resend {
                    Some((request, index)) => {
                        self.remember(token, Ledger::Ambiguous(request, index));
                    }
                    None => {
                        self.ledger().remove(&token);
                    }
                }
                error.log();
                Err(if error.is_insufficient_capacity() {
                    InstancesError::InsufficientCapacity {
                        nodeclaim: launch.nodeclaim.clone(),
                        source: error,
                    }
                } else {
                    InstancesError::Launch {
                        nodeclaim: launch.nodeclaim.clone(),
                        source: error,
                    }
                })
            }
        }
    }

    /// Forgets a NodeClaim's launch (after its instance is gone).
    pub fn forget(&self, nodeclaim_uid: &str) {
        self.ledger().remove(&client_token(nodeclaim_uid));
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

    #[test]
    fn client_tokens_are_stable_distinct_and_short_enough() {
        let a = client_token("5f1c0e4e-0000-4000-8000-000000000001");
        assert_eq!(a, client_token("5f1c0e4e-0000-4000-8000-000000000001"));
        assert_ne!(a, client_token("5f1c0e4e-0000-4000-8000-000000000002"));
        assert!(a.len() <= 64 && a.is_ascii());
        assert_eq!(batch_token(std::slice::from_ref(&a)), a);
        let (x, y) = ("x".to_owned(), "y".to_owned());
        assert_eq!(batch_token(&[x.clone(), y.clone()]), batch_token(&[y, x]));
    }
}
