//! kwok's EC2: the [`Ec2Api`] in memory, realistic enough to run a cluster on.
//!
//! - The catalogue is the bundled real one ([`super::catalog`]); subnets (one per zone, tagged
//!   for discovery), a security group and a few AMIs are made up at construction.
//! - Capacity pools per (instance type, zone, capacity type) can be limited; an exhausted pool
//!   answers CreateFleet with an `InsufficientInstanceCapacity` fleet error, as EC2 does.
//! - CreateFleet launches the cheapest available override per unit (on-demand from the built-in
//!   price table, spot from a deterministic per-zone discount) and applies the request's tags.
//!   It keeps client tokens as EC2 does, for [`KwokEc2Config::client_token_ttl`] after their
//!   first use: the same token with the same request answers the first answer again (even after
//!   those instances ended), the same token with any other parameter fails with
//!   `IdempotentParameterMismatch` and launches nothing; an expired token is a new one.
//! - A CreateFleet takes effect as it arrives and answers after
//!   [`KwokEc2::set_create_fleet_latency`]: a caller that dies meanwhile (its future dropped, a
//!   daemon killed) leaves the instances behind without knowing them, as when a process is
//!   killed while EC2 works. [`Faults::lose_next_responses`] loses the answer of a call that
//!   took effect (the caller sees the error instead).
//! - Instances are `pending` for the launch latency, then `running`; terminated instances are
//!   `shutting-down` for the same latency, then `terminated`. Time is tokio's, so paused tests
//!   move through it.
//! - [`KwokEc2::ice_share`] (chaos runs) makes a seeded share of the (type, zone) pools of each
//!   CreateFleet call answer `InsufficientInstanceCapacity` for that call only.
//! - Token buckets (optional) throttle with `RequestLimitExceeded`; [`Faults`] fail chosen calls;
//!   every call is recorded.
//! - [`KwokEc2::interrupt_spot`] sends Spot Interruption Warnings through kwok's EventBridge.

use k8s_openapi::jiff::Timestamp;
use karpenter_core::domain::instance_type::CapacityType;
use karpenter_core::draw::unit_draw;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::catalog::{self, Catalogue};
use super::eventbridge::KwokEventBridge;
use super::faults::Faults;
use super::rate_limit::{RateLimiter, RateLimits};
use crate::ports::aws_error::{
    AwsError, AwsService, DRY_RUN_OPERATION_CODE, IDEMPOTENT_PARAMETER_MISMATCH_CODE,
};
use crate::ports::clock::Clock;
use crate::ports::ec2::{
    AvailabilityZone, CreateFleetRequest, CreateFleetResponse, CreateLaunchTemplateRequest,
    DescribeImagesRequest, DescribeInstancesRequest, DescribeLaunchTemplatesRequest, Ec2Api,
    Filter, FleetError, FleetInstance, FleetOverride, Image, Instance, InstanceState,
    InstanceStateChange, InstanceTypeInfo, InstanceTypeOffering, LaunchTemplate,
    LaunchTemplateData, LaunchTemplateRef, RunInstancesRequest, SecurityGroup, SpotPrice,
    SpotPriceHistoryRequest, Subnet, Tags,
};
use crate::ports::eventbridge::{EventBridgeApi, EventEntry};
use crate::providers::pricing::{BundledDataError, builtin_on_demand_prices};

/// How long a launched instance stays `pending` by default; EC2 usually takes tens of seconds.
const DEFAULT_LAUNCH_LATENCY: Duration = Duration::from_secs(15);
/// How long EC2 keeps a client token: at least 24 hours (after the instance ends, for
/// `RunInstances`; kwok counts from the first use).
const CLIENT_TOKEN_TTL: Duration = Duration::from_hours(24);
/// Free addresses of each made-up /20 subnet.
const SUBNET_FREE_ADDRESSES: u32 = 4091;
/// How many zones of the region get a subnet.
const SUBNET_ZONES: usize = 3;
/// The discovery tag key of the made-up subnets and security group.
const DISCOVERY_TAG: &str = "karpenter.sh/discovery";

/// How kwok's EC2 behaves.
#[derive(Debug, Clone)]
pub struct KwokEc2Config {
    pub region: String,
    pub cluster_name: String,
    pub launch_latency: Duration,
    /// `None`: no throttling.
    pub rate_limits: Option<RateLimits>,
    /// How long a CreateFleet client token is remembered after its first use (EC2 promises at
    /// least 24 hours).
    pub client_token_ttl: Duration,
}

impl KwokEc2Config {
    #[must_use]
    pub fn new(region: &str, cluster_name: &str) -> Self {
        KwokEc2Config {
            region: region.to_owned(),
            cluster_name: cluster_name.to_owned(),
            launch_latency: DEFAULT_LAUNCH_LATENCY,
            rate_limits: None,
            client_token_ttl: CLIENT_TOKEN_TTL,
        }
    }
}

/// What kwok's EC2 is built from.
#[derive(Debug, Clone)]
pub struct KwokEc2Deps {
    pub clock: Arc<dyn Clock>,
    /// Where spot interruption warnings go; `None` drops them.
    pub events: Option<Arc<KwokEventBridge>>,
}

#[derive(Debug, Clone)]
struct KwokInstance {
    instance: Instance,
    /// When the current state's transition (pending → running, shutting-down → terminated)
    /// completes.
    settles_at: Instant,
}

/// A client token's first request, as its fingerprint, and answer. EC2 compares a repeated
/// token's parameters with the first request's; a fingerprint does that without keeping every
/// request's overrides for a day (a fleet of 60 instance types in three zones is 180 of them).
#[derive(Debug, Clone)]
struct RememberedFleet {
    parameters: Fingerprint,
    response: CreateFleetResponse,
    expires: Instant,
}

/// 128 bits of a request's hash: two 64-bit `DefaultHasher` digests of it, each salted with
/// its own first byte. Two different requests under one token share a fingerprint with a
/// chance of about 2^-128.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint(u64, u64);

impl Fingerprint {
    fn of(request: &CreateFleetRequest) -> Self {
        let half = |salt: u8| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            salt.hash(&mut hasher);
            request.hash(&mut hasher);
            hasher.finish()
        };
        Self(half(0), half(1))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    instance_type: String,
    zone: String,
    capacity_type: CapacityType,
}

#[derive(Debug, Default)]
struct State {
    /// Subnets, security groups and images a test added besides the made-up ones.
    extra_subnets: Vec<Subnet>,
    extra_security_groups: Vec<SecurityGroup>,
    extra_images: Vec<Image>,
    /// Deprecation times set after the fact (an image release retiring the one before), by id.
    deprecations: HashMap<String, String>,
    instances: BTreeMap<String, KwokInstance>,
    templates: BTreeMap<String, (LaunchTemplate, LaunchTemplateData)>,
    template_ids: HashMap<String, String>,
    /// Fleets by client token: the first request, its answer, and when the token expires.
    fleets: HashMap<String, RememberedFleet>,
    pools: HashMap<PoolKey, u32>,
    /// [`KwokEc2::answer_fleets_with`]: how many more CreateFleet calls launch nothing, and the
    /// fleet error (code, message) they answer for each override.
    forced_fleet_errors: Option<(usize, String, String)>,
    /// [`KwokEc2::ice_share`]: (seed, share) and the CreateFleet calls counted since.
    ice: Option<(u64, f64)>,
    fleet_calls: u64,
    ice_answers: usize,
    /// Fixed spot prices by instance type, then zone (looked up by `&str` for every spot
    /// instance each time the bill is read).
    spot_prices: HashMap<String, HashMap<String, f64>>,
    /// [`KwokEc2::withdraw_spot_price`]: offerings `DescribeSpotPriceHistory` no longer lists.
    withdrawn_spot_prices: HashSet<(String, String)>,
    /// The `StartTime` of every `DescribeSpotPriceHistory` call, in order.
    spot_history_starts: Vec<Option<Timestamp>>,
    next_id: u64,
    /// Bumped when an instance is launched or changes state, or a spot price is fixed
    /// ([`KwokEc2::generation`]).
    generation: u64,
    /// The earliest `settles_at` of an instance still pending or shutting down: `settle`
    /// walks the instances only once it has passed.
    settle_due: Option<Instant>,
    /// The bill at a generation ([`KwokEc2::billed_per_hour`]).
    bill: Option<(u64, f64)>,
}

impl State {
    fn id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}-{:017x}", self.next_id)
    }

    /// An instance was launched or started shutting down; it settles at `settles_at`.
    fn transition(&mut self, settles_at: Instant) {
        self.generation += 1;
        self.settle_due = Some(
            self.settle_due
                .map_or(settles_at, |due| due.min(settles_at)),
        );
    }
}

/// The in-memory EC2.
#[derive(Debug)]
pub struct KwokEc2 {
    config: KwokEc2Config,
    deps: KwokEc2Deps,
    catalogue: &'static Catalogue,
    on_demand: &'static HashMap<String, f64>,
    subnets: Vec<Subnet>,
    security_group: SecurityGroup,
    images: Vec<Image>,
    limiter: Option<RateLimiter>,
    faults: Faults,
    /// How long a CreateFleet takes to answer after it took effect.
    create_fleet_latency: Mutex<Duration>,
    state: Mutex<State>,
}

fn error(operation: &'static str, code: &str, message: impl Into<String>) -> AwsError {
    let status = if code == "RequestLimitExceeded" {
        503
    } else {
        400
    };
    AwsError::new(AwsService::Ec2, operation, Some(code), message)
        .with_status(status)
        .with_request_id(format!("kwok-{operation}"))
}

fn tag_matches(tags: &Tags, filter: &Filter) -> Option<bool> {
    if let Some(key) = filter.name.strip_prefix("tag:") {
        return Some(tags.get(key).is_some_and(|v| filter.values.contains(v)));
    }
    if filter.name == "tag-key" {
        return Some(filter.values.iter().any(|k| tags.contains_key(k)));
    }
    None
}

/// Whether `value` passes the filter named `name` (filters of other names pass).
fn field_matches(filters: &[Filter], name: &str, value: &str) -> bool {
    filters
        .iter()
        .filter(|f| f.name == name)
        .all(|f| f.values.iter().any(|v| v == value))
}

fn tags_match(filters: &[Filter], tags: &Tags) -> bool {
    filters.iter().all(|f| tag_matches(tags, f).unwrap_or(true))
}

/// Whether an image belongs to one of `owners` (any owner when empty). `amazon` matches
/// images owned by `amazon`; `self` matches images owned by kwok's account.
fn owner_matches(owners: &[String], image: &Image) -> bool {
    owners.is_empty()
        || owners.iter().any(|owner| match owner.as_str() {
            "self" => image.owner_id == KWOK_ACCOUNT,
            other => image.owner_id == other,
        })
}

/// EC2's filter wildcards: `*` any run of characters, `?` one character.
fn wildcard_matches(pattern: &str, value: &str) -> bool {
    fn go(pattern: &[char], value: &[char]) -> bool {
        match pattern.split_first() {
            None => value.is_empty(),
            Some(('*', rest)) => (0..=value.len()).any(|skip| go(rest, &value[skip..])),
            Some(('?', rest)) => !value.is_empty() && go(rest, &value[1..]),
            Some((c, rest)) => value.first() == Some(c) && go(rest, &value[1..]),
        }
    }
    let pattern: Vec<char> = pattern.chars().collect();
    let value: Vec<char> = value.chars().collect();
    go(&pattern, &value)
}

/// The account that owns kwok's resources (images owned by `self`).
pub const KWOK_ACCOUNT: &str = "000000000000";

/// A deterministic spot discount between 55 % and 80 % off on-demand, per type and zone.
fn spot_discount(instance_type: &str, zone: &str) -> f64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (instance_type, zone).hash(&mut hasher);
    #[expect(clippy::cast_precision_loss, reason = "a value below 1000 is exact")]
    let fraction = (hasher.finish() % 1000) as f64 / 1000.0;
    0.2 + 0.25 * fraction
}

/// kwok's EC2 cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KwokEc2Error {
    #[error(transparent)]
    Bundled(#[from] BundledDataError),
    #[error("region {region} is not in kwok's catalogue")]
    UnknownRegion { region: String },
}

impl KwokEc2 {
    pub fn new(config: KwokEc2Config, deps: KwokEc2Deps) -> Result<Self, KwokEc2Error> {
        let catalogue = catalog::bundled()?;
        let on_demand = builtin_on_demand_prices()?;
        let zones =
            catalogue
                .regions
                .get(&config.region)
                .ok_or_else(|| KwokEc2Error::UnknownRegion {
                    region: config.region.clone(),
                })?;
        let discovery: Tags = [(DISCOVERY_TAG.to_owned(), config.cluster_name.clone())].into();
        let subnets = zones
            .iter()
            .take(SUBNET_ZONES)
            .enumerate()
            .map(|(i, zone)| Subnet {
                id: format!("subnet-{:017x}", i + 1),
                zone: zone.name.clone(),
                zone_id: zone.id.clone(),
                vpc_id: "vpc-00000000000000001".into(),
                available_ip_address_count: SUBNET_FREE_ADDRESSES,
                map_public_ip_on_launch: false,
                tags: discovery.clone(),
            })
            .collect();
        let security_group = SecurityGroup {
            id: "sg-00000000000000001".into(),
            name: format!("{}-node", config.cluster_name),
            vpc_id: "vpc-00000000000000001".into(),
            tags: discovery,
        };
        let images = [("x86_64", 1), ("arm64", 2)]
            .into_iter()
            .map(|(arch, n)| Image {
                id: format!("ami-{n:017x}"),
                name: format!("amazon-eks-node-al2023-{arch}-standard-1.32-v20250101"),
                architecture: arch.into(),
                creation_date: "2025-01-01T00:00:00.000Z".into(),
                deprecation_time: None,
                owner_id: "amazon".into(),
                state: "available".into(),
                tags: Tags::new(),
            })
            .collect();
        Ok(KwokEc2 {
            limiter: config.rate_limits.clone().map(RateLimiter::new),
            config,
            deps,
            catalogue,
            on_demand,
            subnets,
            security_group,
            images,
            faults: Faults::default(),
            create_fleet_latency: Mutex::new(Duration::ZERO),
            state: Mutex::new(State::default()),
        })
    }

    /// Fault hooks and the call log.
    #[must_use]
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the call, then applies injected faults and the token buckets.
    fn enter(&self, operation: &'static str, detail: impl Into<String>) -> Result<(), AwsError> {
        self.faults.check(operation, detail)?;
        if let Some(limiter) = &self.limiter
            && !limiter.try_acquire(operation)
        {
            return Err(error(
                operation,
                "RequestLimitExceeded",
                "Request limit exceeded.",
            ));
        }
        Ok(())
    }

    /// CreateFleet answers `latency` after it took effect (zero by default).
    pub fn set_create_fleet_latency(&self, latency: Duration) {
        *self
            .create_fleet_latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = latency;
    }

    /// From now on each (instance type, zone) pool of a CreateFleet call is out of capacity for
    /// that call with probability `share` (a seeded draw per call and pool); `None` stops it.
    pub fn ice_share(&self, plan: Option<(u64, f64)>) {
        self.lock().ice = plan;
    }

    /// The next `count` CreateFleet calls launch nothing and answer a fleet error `code` for each
    /// override, as EC2 does when, e.g., the image is invalid (`InvalidAMIID.Malformed`) or a
    /// KMS key is unusable: a 200 without instances.
    pub fn answer_fleets_with(&self, count: usize, code: &str, message: &str) {
        self.lock().forced_fleet_errors = Some((count, code.to_owned(), message.to_owned()));
    }

    /// Pools answered `InsufficientInstanceCapacity` by [`Self::ice_share`] so far.
    #[must_use]
    pub fn ice_answers(&self) -> usize {
        self.lock().ice_answers
    }

    /// Instances in any state that carry tag `key` with `value`.
    #[must_use]
    pub fn instances_tagged(&self, key: &str, value: &str) -> Vec<Instance> {
        self.instances()
            .into_iter()
            .filter(|i| i.tags.get(key).is_some_and(|v| v == value))
            .collect()
    }

    /// Limits a capacity pool to `count` more launches.
    pub fn set_capacity(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        count: u32,
    ) {
        self.lock().pools.insert(
            PoolKey {
                instance_type: instance_type.to_owned(),
                zone: zone.to_owned(),
                capacity_type,
            },
            count,
        );
    }

    /// Fixes a spot price.
    pub fn set_spot_price(&self, instance_type: &str, zone: &str, price: f64) {
        let mut state = self.lock();
        let key = (instance_type.to_owned(), zone.to_owned());
        state.withdrawn_spot_prices.remove(&key);
        let (instance_type, zone) = key;
        state.generation += 1;
        state
            .spot_prices
            .entry(instance_type)
            .or_default()
            .insert(zone, price);
    }

    /// `DescribeSpotPriceHistory` stops listing the offering (its price still applies to
    /// instances); [`Self::set_spot_price`] lists it again.
    pub fn withdraw_spot_price(&self, instance_type: &str, zone: &str) {
        self.lock()
            .withdrawn_spot_prices
            .insert((instance_type.to_owned(), zone.to_owned()));
    }

    /// The `StartTime` each `DescribeSpotPriceHistory` call asked from, in order.
    #[must_use]
    pub fn spot_price_history_starts(&self) -> Vec<Option<Timestamp>> {
        self.lock().spot_history_starts.clone()
    }

    /// The made-up subnets, one per zone.
    #[must_use]
    pub fn subnets(&self) -> &[Subnet] {
        &self.subnets
    }

    /// The data a launch template was created with, by name.
    #[must_use]
    pub fn launch_template_data(&self, name: &str) -> Option<LaunchTemplateData> {
        let state = self.lock();
        let id = state.template_ids.get(name)?;
        state.templates.get(id).map(|(_, data)| data.clone())
    }

    /// Adds a subnet besides the made-up ones.
    pub fn add_subnet(&self, subnet: Subnet) {
        self.lock().extra_subnets.push(subnet);
    }

    /// Adds a security group besides the made-up one.
    pub fn add_security_group(&self, group: SecurityGroup) {
        self.lock().extra_security_groups.push(group);
    }

    /// Adds an image besides the made-up ones (replacing one with the same id).
    pub fn add_image(&self, image: Image) {
        let mut state = self.lock();
        state.extra_images.retain(|i| i.id != image.id);
        state.extra_images.push(image);
    }

    /// Publishes a new release of the EKS-optimized images, one per architecture of `previous`
    /// (`architecture -> image id`), created now, and deprecates the previous images from now
    /// on, as a release that retires its predecessor. Returns the new images by architecture.
    pub fn release_images(&self, previous: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let now = self.deps.clock.now();
        let created = now.to_string();
        let date = now.strftime("%Y%m%d%H%M%S").to_string();
        let mut state = self.lock();
        let mut released = BTreeMap::new();
        for (arch, old) in previous {
            let id = state.id("ami");
            state.extra_images.push(Image {
                id: id.clone(),
                name: format!("amazon-eks-node-al2023-{arch}-standard-1.32-v{date}"),
                architecture: arch.clone(),
                creation_date: created.clone(),
                deprecation_time: None,
                owner_id: "amazon".into(),
                state: "available".into(),
                tags: Tags::new(),
            });
            state.deprecations.insert(old.clone(), created.clone());
            released.insert(arch.clone(), id);
        }
        released
    }

    /// Instances in any state.
    #[must_use]
    pub fn instances(&self) -> Vec<Instance> {
        self.instances_where(|_| true)
    }

    /// The instances `keep` selects, in id order; only those are copied (a simulation's
    /// kubelet looks at thousands every simulated second and acts on a few).
    pub fn instances_where(&self, mut keep: impl FnMut(&Instance) -> bool) -> Vec<Instance> {
        self.settle();
        self.lock()
            .instances
            .values()
            .filter(|i| keep(&i.instance))
            .map(|i| i.instance.clone())
            .collect()
    }

    /// What the pending and running instances cost per hour (an instance kwok cannot price
    /// counts nothing).
    #[must_use]
    pub fn billed_per_hour(&self) -> f64 {
        self.settle();
        let mut state = self.lock();
        if let Some((generation, bill)) = state.bill
            && generation == state.generation
        {
            return bill;
        }
        let bill = state
            .instances
            .values()
            .map(|i| &i.instance)
            .filter(|i| matches!(i.state, InstanceState::Pending | InstanceState::Running))
            .filter_map(|i| self.price(&state, &i.instance_type, &i.zone, i.capacity_type))
            // From +0.0: `sum` of no f64 is -0.0, which a report prints as `$-0.00/h`.
            .fold(0.0, |total, price| total + price);
        state.bill = Some((state.generation, bill));
        bill
    }

    fn price(
        &self,
        state: &State,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
    ) -> Option<f64> {
        let on_demand = *self.on_demand.get(instance_type)?;
        Some(match capacity_type {
            CapacityType::OnDemand | CapacityType::Reserved => on_demand,
            CapacityType::Spot => state
                .spot_prices
                .get(instance_type)
                .and_then(|zones| zones.get(zone))
                .copied()
                .unwrap_or(on_demand * spot_discount(instance_type, zone)),
        })
    }

    fn offered(&self, instance_type: &str, zone: &str) -> bool {
        self.catalogue
            .zones_of(instance_type, &self.config.region)
            .is_some_and(|zones| zones.contains(zone))
    }

    /// Moves instances whose transition completed to their next state.
    fn settle(&self) {
        let now = Instant::now();
        let mut state = self.lock();
        if state.settle_due.is_none_or(|due| due > now) {
            return;
        }
        let mut due: Option<Instant> = None;
        let mut changed = false;
        for entry in state.instances.values_mut() {
            let moving = matches!(
                entry.instance.state,
                InstanceState::Pending | InstanceState::ShuttingDown
            );
            if !moving {
                continue;
            }
            if entry.settles_at <= now {
                entry.instance.state = match entry.instance.state {
                    InstanceState::Pending => InstanceState::Running,
                    _ => InstanceState::Terminated,
                };
                changed = true;
            } else {
                due = Some(due.map_or(entry.settles_at, |d| d.min(entry.settles_at)));
            }
        }
        state.settle_due = due;
        if changed {
            state.generation += 1;
        }
    }

    /// A number that changes whenever an instance is launched or changes state (settled to
    /// now) or a spot price is fixed: a reader that acts on instance states skips its pass
    /// while it stays the same.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.settle();
        self.lock().generation
    }

    fn launch(
        &self,
        state: &mut State,
        template: &str,
        over: &FleetOverride,
        capacity_type: CapacityType,
        tags: &Tags,
    ) -> Instance {
        let id = state.id("i");
        let data = state
            .template_ids
            .get(template)
            .and_then(|id| state.templates.get(id))
            .map(|(_, data)| data.clone())
            .unwrap_or_default();
        let mut instance_tags = data.instance_tags.clone();
        instance_tags.extend(tags.clone());
        let instance = Instance {
            id: id.clone(),
            instance_type: over.instance_type.clone(),
            zone: over.zone.clone(),
            subnet_id: over.subnet_id.clone(),
            image_id: over.image_id.clone().or(data.image_id).unwrap_or_default(),
            state: InstanceState::Pending,
            capacity_type,
            launch_time: Some(self.deps.clock.now()),
            private_dns_name: format!(
                "ip-10-0-{}.{}.compute.internal",
                state.next_id, self.config.region
            ),
            security_group_ids: {
                let mut groups = data.security_group_ids;
                for interface in data
                    .network_interfaces
                    .iter()
                    .filter(|i| i.device_index == 0)
                {
                    groups.extend(interface.security_group_ids.iter().cloned());
                }
                if groups.is_empty() {
                    groups.push(self.security_group.id.clone());
                }
                groups
            },
            capacity_reservation_id: None,
            tags: instance_tags,
        };
        let settles_at = Instant::now() + self.config.launch_latency;
        state.instances.insert(
            id,
            KwokInstance {
                instance: instance.clone(),
                settles_at,
            },
        );
        state.transition(settles_at);
        instance
    }

    /// CreateFleet as it takes effect, under one lock: a remembered token answers again (or
    /// refuses other parameters), else the fleet launches.
    #[expect(
        clippy::too_many_lines,
        reason = "EC2's instant fleet semantics in one place: token, templates, pools, choice"
    )]
    fn fleet(&self, request: &CreateFleetRequest) -> Result<CreateFleetResponse, AwsError> {
        const OP: &str = "CreateFleet";
        let now = Instant::now();
        let mut state = self.lock();
        state.fleets.retain(|_, fleet| fleet.expires > now);
        let replay = request
            .client_token
            .as_ref()
            .and_then(|token| state.fleets.get(token))
            .map(|first| {
                (first.parameters == Fingerprint::of(request)).then(|| first.response.clone())
            });
        match replay {
            Some(Some(response)) => return Ok(response),
            Some(None) => {
                return Err(error(
                    OP,
                    IDEMPOTENT_PARAMETER_MISMATCH_CODE,
                    "The client token you have provided is associated with a resource that is already deleted or has different parameters. Please use a different client token.",
                ));
            }
            None => {}
        }
        for config in &request.launch_template_configs {
            if !state
                .template_ids
                .contains_key(&config.launch_template_name)
            {
                return Err(error(
                    OP,
                    "InvalidLaunchTemplateName.NotFoundException",
                    format!(
                        "The specified launch template, with template name {}, does not exist.",
                        config.launch_template_name
                    ),
                ));
            }
        }
        let capacity_type = request.capacity_type;
        state.fleet_calls += 1;
        let call = state.fleet_calls.to_le_bytes();
        let ice = state.ice;
        let mut response = CreateFleetResponse {
            fleet_id: Some(state.id("fleet")),
            request_id: Some(format!("kwok-{OP}")),
            ..CreateFleetResponse::default()
        };
        let mut reported: BTreeSet<(String, String)> = BTreeSet::new();
        let forced = match state.forced_fleet_errors.as_mut() {
            Some((left, code, message)) if *left > 0 => {
                *left -= 1;
                Some((code.clone(), message.clone()))
            }
            _ => None,
        };
        if let Some((code, message)) = forced {
            for config in &request.launch_template_configs {
                for over in &config.overrides {
                    response.errors.push(FleetError {
                        code: code.clone(),
                        message: message.clone(),
                        instance_type: Some(over.instance_type.clone()),
                        zone: Some(over.zone.clone()),
                        subnet_id: Some(over.subnet_id.clone()),
                    });
                }
            }
        }
        let target = if response.errors.is_empty() {
            request.total_target_capacity
        } else {
            0
        };
        for _ in 0..target {
            // Cheapest override with capacity left; exhausted pools become fleet errors.
            let mut candidates: Vec<(f64, &str, &FleetOverride)> = Vec::new();
            for config in &request.launch_template_configs {
                for over in &config.overrides {
                    let key = PoolKey {
                        instance_type: over.instance_type.clone(),
                        zone: over.zone.clone(),
                        capacity_type,
                    };
                    let drawn_ice = ice.is_some_and(|(seed, share)| {
                        let parts: [&[u8]; 3] =
                            [&call, over.instance_type.as_bytes(), over.zone.as_bytes()];
                        unit_draw(seed, &parts) < share
                    });
                    let exhausted = drawn_ice || state.pools.get(&key) == Some(&0);
                    if exhausted || !self.offered(&over.instance_type, &over.zone) {
                        if reported.insert((over.instance_type.clone(), over.zone.clone())) {
                            state.ice_answers += usize::from(drawn_ice);
                            response.errors.push(FleetError {
                                code: if exhausted { "InsufficientInstanceCapacity" } else { "Unsupported" }.into(),
                                message: format!(
                                    "We currently do not have sufficient {} capacity in the Availability Zone you requested ({}).",
                                    over.instance_type, over.zone
                                ),
                                instance_type: Some(over.instance_type.clone()),
                                zone: Some(over.zone.clone()),
                                subnet_id: Some(over.subnet_id.clone()),
                            });
                        }
                        continue;
                    }
                    if let Some(price) =
                        self.price(&state, &over.instance_type, &over.zone, capacity_type)
                    {
                        candidates.push((price, &config.launch_template_name, over));
                    }
                }
            }
            let Some((_, template, over)) = candidates
                .into_iter()
                .min_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.2.cmp(b.2)))
            else {
                break;
            };
            let key = PoolKey {
                instance_type: over.instance_type.clone(),
                zone: over.zone.clone(),
                capacity_type,
            };
            if let Some(left) = state.pools.get_mut(&key) {
                *left -= 1;
            }
            let instance = self.launch(&mut state, template, over, capacity_type, &request.tags);
            response.instances.push(FleetInstance {
                instance_ids: vec![instance.id],
                instance_type: instance.instance_type,
                zone: instance.zone,
                subnet_id: instance.subnet_id,
                image_id: over.image_id.clone(),
                capacity_type,
            });
        }
        if let Some(token) = &request.client_token {
            state.fleets.insert(
                token.clone(),
                RememberedFleet {
                    parameters: Fingerprint::of(request),
                    response: response.clone(),
                    expires: now + self.config.client_token_ttl,
                },
            );
        }
        Ok(response)
    }

    /// $/h of an instance as kwok bills it: the on-demand list price, or the zone's spot price.
    /// For simulators and reports; not an EC2 call (nothing is recorded or throttled).
    #[must_use]
    pub fn hourly_price(&self, instance: &Instance) -> Option<f64> {
        let state = self.lock();
        self.price(
            &state,
            &instance.instance_type,
            &instance.zone,
            instance.capacity_type,
        )
    }

    /// EC2 itself takes an instance away (a spot reclaim two minutes after the warning, a host
    /// failure): it goes `shutting-down`, then `terminated`, without any API call being recorded
    /// or throttled, and its capacity does not come back to the pool. False when the instance is
    /// unknown or already terminating.
    pub fn reclaim(&self, instance_id: &str) -> bool {
        self.settle();
        let settles_at = Instant::now() + self.config.launch_latency;
        let mut state = self.lock();
        match state.instances.get_mut(instance_id) {
            Some(entry)
                if !matches!(
                    entry.instance.state,
                    InstanceState::ShuttingDown | InstanceState::Terminated
                ) =>
            {
                entry.instance.state = InstanceState::ShuttingDown;
                entry.settles_at = settles_at;
                state.transition(settles_at);
                true
            }
            _ => false,
        }
    }

    /// Sends a Spot Instance Interruption Warning for a spot instance through EventBridge, as
    /// EC2 does two minutes before reclaiming it.
    pub async fn interrupt_spot(&self, instance_id: &str) -> Result<(), AwsError> {
        let zone = self
            .lock()
            .instances
            .get(instance_id)
            .filter(|i| i.instance.capacity_type == CapacityType::Spot)
            .map(|i| i.instance.zone.clone())
            .ok_or_else(|| {
                error(
                    "InterruptSpot",
                    "InvalidInstanceID.NotFound",
                    format!("The spot instance ID '{instance_id}' does not exist"),
                )
            })?;
        let Some(events) = &self.deps.events else {
            return Ok(());
        };
        events
            .put_events(&[EventEntry {
                source: "aws.ec2".into(),
                detail_type: "EC2 Spot Instance Interruption Warning".into(),
                detail:
                    serde_json::json!({"instance-id": instance_id, "instance-action": "terminate"})
                        .to_string(),
                resources: vec![format!("arn:aws:ec2:{zone}:instance/{instance_id}")],
            }])
            .await
            .map(|_| ())
    }
}

#[async_trait]
impl Ec2Api for KwokEc2 {
    async fn describe_instance_types(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InstanceTypeInfo>, AwsError> {
        self.enter("DescribeInstanceTypes", "")?;
        let any = |name: &str, values: &[String]| {
            filters
                .iter()
                .filter(|f| f.name == name)
                .all(|f| f.values.iter().any(|v| values.contains(v)))
        };
        Ok(self
            .catalogue
            .instance_types
            .iter()
            .filter(|t| {
                self.catalogue
                    .offerings
                    .get(&t.name)
                    .is_some_and(|r| r.contains_key(&self.config.region))
                    && any("supported-virtualization-type", &t.virtualization_types)
                    && any("processor-info.supported-architecture", &t.architectures)
                    && field_matches(filters, "instance-type", &t.name)
            })
            .cloned()
            .collect())
    }

    async fn describe_instance_type_offerings(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InstanceTypeOffering>, AwsError> {
        self.enter("DescribeInstanceTypeOfferings", "")?;
        let mut out = Vec::new();
        for (name, regions) in &self.catalogue.offerings {
            if !field_matches(filters, "instance-type", name) {
                continue;
            }
            for zone in regions.get(&self.config.region).into_iter().flatten() {
                if field_matches(filters, "location", zone) {
                    out.push(InstanceTypeOffering {
                        instance_type: name.clone(),
                        location: zone.clone(),
                    });
                }
            }
        }
        Ok(out)
    }

    async fn describe_spot_price_history(
        &self,
        request: &SpotPriceHistoryRequest,
    ) -> Result<Vec<SpotPrice>, AwsError> {
        self.enter("DescribeSpotPriceHistory", "")?;
        let mut state = self.lock();
        state.spot_history_starts.push(request.start_time);
        let timestamp = self.deps.clock.now();
        let mut out = Vec::new();
        for (name, regions) in &self.catalogue.offerings {
            if !request.instance_types.is_empty() && !request.instance_types.contains(name) {
                continue;
            }
            for zone in regions.get(&self.config.region).into_iter().flatten() {
                if state
                    .withdrawn_spot_prices
                    .contains(&(name.clone(), zone.clone()))
                {
                    continue;
                }
                if let Some(price) = self.price(&state, name, zone, CapacityType::Spot) {
                    out.push(SpotPrice {
                        instance_type: name.clone(),
                        zone: zone.clone(),
                        price,
                        timestamp,
                    });
                }
            }
        }
        Ok(out)
    }

    async fn describe_subnets(&self, filters: &[Filter]) -> Result<Vec<Subnet>, AwsError> {
        self.enter("DescribeSubnets", "")?;
        let extra = self.lock().extra_subnets.clone();
        Ok(self
            .subnets
            .iter()
            .chain(&extra)
            .filter(|s| {
                tags_match(filters, &s.tags)
                    && field_matches(filters, "subnet-id", &s.id)
                    && field_matches(filters, "availability-zone", &s.zone)
            })
            .cloned()
            .collect())
    }

    async fn describe_security_groups(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<SecurityGroup>, AwsError> {
        self.enter("DescribeSecurityGroups", "")?;
        let extra = self.lock().extra_security_groups.clone();
        Ok(std::iter::once(&self.security_group)
            .chain(&extra)
            .filter(|group| {
                tags_match(filters, &group.tags)
                    && field_matches(filters, "group-id", &group.id)
                    && field_matches(filters, "group-name", &group.name)
            })
            .cloned()
            .collect())
    }

    async fn describe_images(
        &self,
        request: &DescribeImagesRequest,
    ) -> Result<Vec<Image>, AwsError> {
        self.enter("DescribeImages", request.image_ids.join(","))?;
        let (extra, deprecations) = {
            let state = self.lock();
            (state.extra_images.clone(), state.deprecations.clone())
        };
        let deprecated = |image: &Image| -> Image {
            let mut image = image.clone();
            if let Some(at) = deprecations.get(&image.id) {
                image.deprecation_time = Some(at.clone());
            }
            image
        };
        let now = self.deps.clock.now();
        // EC2 hides deprecated images unless asked for them or named by id.
        let hide_deprecated = !request.include_deprecated && request.image_ids.is_empty();
        Ok(self
            .images
            .iter()
            .chain(&extra)
            .map(deprecated)
            .filter(|i| request.image_ids.is_empty() || request.image_ids.contains(&i.id))
            .filter(|i| owner_matches(&request.owners, i))
            .filter(|i| {
                tags_match(&request.filters, &i.tags)
                    && field_matches(&request.filters, "image-id", &i.id)
                    && field_matches(&request.filters, "state", &i.state)
                    && request
                        .filters
                        .iter()
                        .filter(|f| f.name == "name")
                        .all(|f| f.values.iter().any(|p| wildcard_matches(p, &i.name)))
            })
            .filter(|i| {
                !hide_deprecated
                    || i.deprecation_time
                        .as_deref()
                        .and_then(|t| t.parse::<Timestamp>().ok())
                        .is_none_or(|at| at > now)
            })
            .collect())
    }

    async fn describe_availability_zones(&self) -> Result<Vec<AvailabilityZone>, AwsError> {
        self.enter("DescribeAvailabilityZones", "")?;
        Ok(self
            .catalogue
            .regions
            .get(&self.config.region)
            .into_iter()
            .flatten()
            .map(|z| AvailabilityZone {
                name: z.name.clone(),
                zone_id: z.id.clone(),
                zone_type: "availability-zone".into(),
            })
            .collect())
    }

    async fn create_launch_template(
        &self,
        request: &CreateLaunchTemplateRequest,
    ) -> Result<LaunchTemplate, AwsError> {
        const OP: &str = "CreateLaunchTemplate";
        self.enter(OP, request.name.clone())?;
        if request.dry_run {
            return Err(error(
                OP,
                DRY_RUN_OPERATION_CODE,
                "Request would have succeeded, but DryRun flag is set.",
            ));
        }
        let mut state = self.lock();
        if state.template_ids.contains_key(&request.name) {
            return Err(error(
                OP,
                "InvalidLaunchTemplateName.AlreadyExistsException",
                format!("Launch template name already in use: {}", request.name),
            ));
        }
        let id = state.id("lt");
        let template = LaunchTemplate {
            id: id.clone(),
            name: request.name.clone(),
            latest_version: 1,
            tags: request.tags.clone(),
        };
        state.template_ids.insert(request.name.clone(), id.clone());
        state
            .templates
            .insert(id, (template.clone(), request.data.clone()));
        Ok(template)
    }

    async fn describe_launch_templates(
        &self,
        request: &DescribeLaunchTemplatesRequest,
    ) -> Result<Vec<LaunchTemplate>, AwsError> {
        const OP: &str = "DescribeLaunchTemplates";
        self.enter(OP, request.names.join(","))?;
        let state = self.lock();
        if let Some(missing) = request
            .names
            .iter()
            .find(|n| !state.template_ids.contains_key(*n))
        {
            return Err(error(
                OP,
                "InvalidLaunchTemplateName.NotFoundException",
                format!(
                    "At least one of the launch templates specified in the request does not exist: {missing}"
                ),
            ));
        }
        Ok(state
            .templates
            .values()
            .map(|(t, _)| t)
            .filter(|t| request.names.is_empty() || request.names.contains(&t.name))
            .filter(|t| tags_match(&request.filters, &t.tags))
            .cloned()
            .collect())
    }

    async fn delete_launch_template(&self, template: &LaunchTemplateRef) -> Result<(), AwsError> {
        const OP: &str = "DeleteLaunchTemplate";
        self.enter(OP, format!("{template:?}"))?;
        let mut state = self.lock();
        let id = match template {
            LaunchTemplateRef::Id(id) => Some(id.clone()),
            LaunchTemplateRef::Name(name) => state.template_ids.get(name).cloned(),
        };
        let removed = id.and_then(|id| state.templates.remove(&id));
        match removed {
            Some((t, _)) => {
                state.template_ids.remove(&t.name);
                Ok(())
            }
            None => Err(error(
                OP,
                "InvalidLaunchTemplateName.NotFoundException",
                "The specified launch template does not exist.",
            )),
        }
    }

    async fn create_fleet(
        &self,
        request: &CreateFleetRequest,
    ) -> Result<CreateFleetResponse, AwsError> {
        const OP: &str = "CreateFleet";
        self.enter(OP, request.client_token.clone().unwrap_or_default())?;
        if request.dry_run {
            return Err(error(
                OP,
                DRY_RUN_OPERATION_CODE,
                "Request would have succeeded, but DryRun flag is set.",
            ));
        }
        let response = self.fleet(request)?;
        let latency = *self
            .create_fleet_latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // The instances exist from here on, whether or not the caller lives to see the answer
        // (no await without a latency: a simulation's event order stays as it was).
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        self.faults.check_response(OP)?;
        Ok(response)
    }

    async fn run_instances(
        &self,
        request: &RunInstancesRequest,
    ) -> Result<Vec<Instance>, AwsError> {
        const OP: &str = "RunInstances";
        self.enter(OP, request.instance_type.clone())?;
        if request.dry_run {
            return Err(error(
                OP,
                DRY_RUN_OPERATION_CODE,
                "Request would have succeeded, but DryRun flag is set.",
            ));
        }
        let subnet = request
            .subnet_id
            .as_ref()
            .and_then(|id| self.subnets.iter().find(|s| &s.id == id))
            .or_else(|| self.subnets.first())
            .cloned()
            .unwrap_or_default();
        let over = FleetOverride {
            instance_type: request.instance_type.clone(),
            subnet_id: subnet.id,
            zone: subnet.zone,
            image_id: request.image_id.clone(),
        };
        let mut state = self.lock();
        Ok(vec![self.launch(
            &mut state,
            &request.launch_template_name,
            &over,
            CapacityType::OnDemand,
            &request.tags,
        )])
    }

    async fn describe_instances(
        &self,
        request: &DescribeInstancesRequest,
    ) -> Result<Vec<Instance>, AwsError> {
        const OP: &str = "DescribeInstances";
        self.enter(OP, request.instance_ids.join(","))?;
        self.settle();
        let state = self.lock();
        if let Some(missing) = request
            .instance_ids
            .iter()
            .find(|id| !state.instances.contains_key(*id))
        {
            return Err(error(
                OP,
                "InvalidInstanceID.NotFound",
                format!("The instance ID '{missing}' does not exist"),
            ));
        }
        let matches = |i: &&Instance| {
            tags_match(&request.filters, &i.tags)
                && field_matches(&request.filters, "instance-state-name", i.state.as_str())
                && field_matches(&request.filters, "instance-id", &i.id)
        };
        // Named instances are looked up, not searched for: the batched describes of a
        // 5,000-node cluster name thousands, and a scan per name was quadratic. Each once, in
        // id order, as a scan of the whole set answers.
        let found: Vec<&Instance> = if request.instance_ids.is_empty() {
            state.instances.values().map(|i| &i.instance).collect()
        } else {
            let named: BTreeSet<&str> = request.instance_ids.iter().map(String::as_str).collect();
            named
                .into_iter()
                .filter_map(|id| state.instances.get(id))
                .map(|i| &i.instance)
                .collect()
        };
        Ok(found.into_iter().filter(matches).cloned().collect())
    }

    async fn terminate_instances(
        &self,
        instance_ids: &[String],
    ) -> Result<Vec<InstanceStateChange>, AwsError> {
        const OP: &str = "TerminateInstances";
        self.enter(OP, instance_ids.join(","))?;
        self.settle();
        let mut state = self.lock();
        if let Some(missing) = instance_ids
            .iter()
            .find(|id| !state.instances.contains_key(*id))
        {
            return Err(error(
                OP,
                "InvalidInstanceID.NotFound",
                format!("The instance ID '{missing}' does not exist"),
            ));
        }
        let settles_at = Instant::now() + self.config.launch_latency;
        let mut changes = Vec::new();
        let mut freed = Vec::new();
        for id in instance_ids {
            if let Some(entry) = state.instances.get_mut(id) {
                let previous = entry.instance.state;
                if !matches!(
                    previous,
                    InstanceState::ShuttingDown | InstanceState::Terminated
                ) {
                    entry.instance.state = InstanceState::ShuttingDown;
                    entry.settles_at = settles_at;
                    freed.push(PoolKey {
                        instance_type: entry.instance.instance_type.clone(),
                        zone: entry.instance.zone.clone(),
                        capacity_type: entry.instance.capacity_type,
                    });
                }
                changes.push(InstanceStateChange {
                    instance_id: id.clone(),
                    previous_state: previous,
                    current_state: entry.instance.state,
                });
            }
        }
        if !freed.is_empty() {
            state.transition(settles_at);
        }
        for key in freed {
            if let Some(left) = state.pools.get_mut(&key) {
                *left += 1;
            }
        }
        Ok(changes)
    }

    async fn create_tags(&self, resource_ids: &[String], tags: &Tags) -> Result<(), AwsError> {
        const OP: &str = "CreateTags";
        self.enter(OP, resource_ids.join(","))?;
        let mut state = self.lock();
        for id in resource_ids {
            let Some(entry) = state.instances.get_mut(id) else {
                return Err(error(
                    OP,
                    "InvalidInstanceID.NotFound",
                    format!("The instance ID '{id}' does not exist"),
                ));
            };
            entry.instance.tags.extend(tags.clone());
        }
        Ok(())
    }
}
