//! The AWS providers over kwok with tokio's paused clock: price ordering, the ICE cache's
//! expiry, CreateFleet batching, client-token idempotence, throttling recovery, the instance
//! lifecycle, and spot interruptions reaching the interruption queue.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use karpenter_actors::kwok::ec2::{KwokEc2, KwokEc2Config, KwokEc2Deps};
use karpenter_actors::kwok::eventbridge::KwokEventBridge;
use karpenter_actors::kwok::pricing::KwokPricing;
use karpenter_actors::kwok::rate_limit::RateLimits;
use karpenter_actors::kwok::sqs::KwokSqs;
use karpenter_actors::nodeclaim::launch::LAUNCH_GROUP;
use karpenter_actors::ports::aws_error::{AwsError, AwsErrorClass, AwsService};
use karpenter_actors::ports::clock::{Clock, ManualClock};
use karpenter_actors::ports::ec2::{DescribeInstancesRequest, Filter, Instance};
use karpenter_actors::ports::ec2::{Ec2Api, FleetLaunchTemplateConfig, InstanceState, Tags};
use karpenter_actors::ports::eventbridge::EventBridgeApi;
use karpenter_actors::ports::sqs::{ReceiveRequest, SqsApi};
use karpenter_actors::providers::instance_type_provider::{InstanceTypeDeps, InstanceTypeProvider};
use karpenter_actors::providers::instance_types::{NodeClassSettings, ResolveSettings};
use karpenter_actors::providers::instances::{
    Adoption, InstancesDeps, InstancesError, InstancesProvider, LaunchRequest, TOKEN_ATTEMPTS,
    capacity_type_for, overrides, with_capacity_type,
};
use karpenter_actors::providers::pricing::{PricingDeps, PricingProvider};
use karpenter_actors::providers::retry::RetryingEc2;
use karpenter_actors::providers::unavailable::{
    UNAVAILABLE_OFFERINGS_TTL, UnavailableOfferings, UnavailableOfferingsActor,
};
use karpenter_actors::retry::RetryPolicy;
use karpenter_actors::runtime::KitOptions;
use karpenter_actors::testing::AwsTestKit;
use karpenter_core::apis::labels::CAPACITY_TYPE;
use karpenter_core::domain::instance_type::CapacityType;
use karpenter_core::domain::instance_type::{InstanceType, order_by_price};
use karpenter_core::domain::requirements::{Requirement, Requirements};

const REGION: &str = "us-west-2";
const CLUSTER: &str = "test-cluster";

/// kwok, the providers over it (their actors in the AWS group of a test kit), and the zones of
/// its subnets.
struct Env {
    aws: AwsTestKit,
    kwok: Arc<KwokEc2>,
    sqs: Arc<KwokSqs>,
    events: Arc<KwokEventBridge>,
    pricing: Arc<PricingProvider>,
    unavailable: Arc<UnavailableOfferings>,
    instance_types: InstanceTypeProvider,
    instances: InstancesProvider,
    subnets: BTreeMap<String, String>,
    zone_ids: BTreeMap<String, String>,
}

struct EnvBuilder {
    rate_limits: Option<RateLimits>,
    retry: Option<RetryPolicy>,
    pricing_api: bool,
}

impl EnvBuilder {
    fn new() -> Self {
        EnvBuilder {
            rate_limits: None,
            retry: None,
            pricing_api: false,
        }
    }

    fn throttled(mut self, retry: RetryPolicy) -> Self {
        self.rate_limits = Some(RateLimits::default());
        self.retry = Some(retry);
        self
    }

    fn with_pricing_api(mut self) -> Self {
        self.pricing_api = true;
        self
    }

    async fn build(self) -> Env {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
        let sqs = Arc::new(KwokSqs::new(REGION));
        let events = Arc::new(KwokEventBridge::new(
            REGION,
            Arc::clone(&sqs),
            Arc::clone(&clock),
        ));
        let mut config = KwokEc2Config::new(REGION, CLUSTER);
        config.rate_limits = self.rate_limits;
        let kwok = Arc::new(
            KwokEc2::new(
                config,
                KwokEc2Deps {
                    clock: Arc::clone(&clock),
                    events: Some(Arc::clone(&events)),
                },
            )
            .unwrap(),
        );
        let ec2: Arc<dyn Ec2Api> = match self.retry {
            Some(policy) => Arc::new(RetryingEc2::new(
                Arc::clone(&kwok) as Arc<dyn Ec2Api>,
                policy,
            )),
            None => Arc::clone(&kwok) as Arc<dyn Ec2Api>,
        };
        let pricing = Arc::new(
            PricingProvider::new(PricingDeps {
                ec2: Arc::clone(&ec2),
                pricing: self.pricing_api.then(|| {
                    Arc::new(KwokPricing::new(2.0))
                        as Arc<dyn karpenter_actors::ports::pricing::PricingApi>
                }),
                region: REGION.into(),
                isolated_vpc: false,
                clock,
            })
            .unwrap(),
        );
        let unavailable = Arc::new(UnavailableOfferings::default());
        let instance_types = InstanceTypeProvider::new(InstanceTypeDeps {
            ec2: Arc::clone(&ec2),
            pricing: Arc::clone(&pricing),
            unavailable: Arc::clone(&unavailable),
            settings: ResolveSettings {
                region: REGION.into(),
                vm_memory_overhead_percent: 0.075,
                reserved_enis: 0,
            },
        });
        instance_types.refresh().await.unwrap();
        let instances = InstancesProvider::new(InstancesDeps {
            ec2,
            unavailable: Arc::clone(&unavailable),
            cluster_name: CLUSTER.into(),
        });
        let aws = AwsTestKit::new(KitOptions::default());
        instances.start(&aws.root).unwrap();
        UnavailableOfferingsActor::start(&aws.root, &unavailable).unwrap();
        let subnets = kwok
            .subnets()
            .iter()
            .map(|s| (s.zone.clone(), s.id.clone()))
            .collect();
        let zone_ids = kwok
            .subnets()
            .iter()
            .map(|s| (s.zone.clone(), s.zone_id.clone()))
            .collect();
        kwok.create_launch_template(&karpenter_actors::ports::ec2::CreateLaunchTemplateRequest {
            name: "karpenter.k8s.aws/test".into(),
            ..Default::default()
        })
        .await
        .unwrap();
        Env {
            aws,
            kwok,
            sqs,
            events,
            pricing,
            unavailable,
            instance_types,
            instances,
            subnets,
            zone_ids,
        }
    }
}

impl Env {
    fn types(&self, names: &[&str]) -> Vec<Arc<InstanceType>> {
        let all = self
            .instance_types
            .list(&NodeClassSettings::default(), &self.zone_ids)
            .unwrap();
        names
            .iter()
            .map(|n| Arc::clone(all.iter().find(|t| t.name == *n).unwrap()))
            .collect()
    }

    fn launch(
        &self,
        nodeclaim: &str,
        capacity_types: &[CapacityType],
        names: &[&str],
    ) -> LaunchRequest {
        self.launch_in(nodeclaim, capacity_types, names, &self.subnets)
    }

    /// A launch as the cloud provider builds it: capacity type, types cheapest first, one
    /// launch template with an override per available offering in the given subnets' zones.
    fn launch_in(
        &self,
        nodeclaim: &str,
        capacity_types: &[CapacityType],
        names: &[&str],
        subnets: &BTreeMap<String, String>,
    ) -> LaunchRequest {
        let allowed: Vec<&str> = capacity_types.iter().map(|c| c.as_str()).collect();
        let requirements =
            Requirements::from_requirements([Requirement::in_values(CAPACITY_TYPE, &allowed)]);
        let mut types = self.types(names);
        let capacity_type = capacity_type_for(&requirements, &types);
        let pinned = with_capacity_type(&requirements, capacity_type);
        order_by_price(&mut types, &pinned);
        LaunchRequest {
            nodeclaim: nodeclaim.into(),
            nodeclaim_uid: format!("uid-{nodeclaim}"),
            capacity_type,
            launch_templates: vec![FleetLaunchTemplateConfig {
                launch_template_name: "karpenter.k8s.aws/test".into(),
                version: "$Latest".into(),
                overrides: overrides(&types, subnets, &pinned, None),
            }],
            tags: [
                ("karpenter.sh/nodepool".to_owned(), "default".to_owned()),
                (
                    "karpenter.k8s.aws/ec2nodeclass".to_owned(),
                    "default".to_owned(),
                ),
            ]
            .into(),
            context: None,
            launch_group: None,
        }
    }

    /// Tags an instance with its node's name, as the NodeClaim's registration does.
    async fn name_instance(&self, id: &str) {
        self.instances
            .create_tags(id, &Tags::from([("Name".to_owned(), "node-1".to_owned())]))
            .await
            .unwrap();
    }

    fn zone(&self, index: usize) -> String {
        self.subnets.keys().nth(index).unwrap().clone()
    }
}

const GENERAL: &[&str] = &["m5.large", "m5.xlarge", "c5.large", "m6i.large", "r5.large"];
/// A launch group tag, as the cloud provider computes one per NodeClaim.
const GROUP: &str = "0123456789abcdef0123456789abcdef-0123456789abcdef";

impl Env {
    /// The instances provider of a daemon started again over the same account: nothing in
    /// memory survives, only what EC2 holds.
    fn restarted(&self) -> InstancesProvider {
        let instances = InstancesProvider::new(InstancesDeps {
            ec2: Arc::clone(&self.kwok) as Arc<dyn Ec2Api>,
            unavailable: Arc::new(UnavailableOfferings::default()),
            cluster_name: CLUSTER.into(),
        });
        // New batchers beside the old ones, which get no more requests.
        instances.start(&self.aws.root).unwrap();
        instances
    }

    /// An on-demand launch of the general types in [`GROUP`].
    fn grouped(&self, nodeclaim: &str) -> LaunchRequest {
        let mut launch = self.launch(nodeclaim, &[CapacityType::OnDemand], GENERAL);
        launch.launch_group = Some(GROUP.to_owned());
        launch
    }
}

fn any_instance(_: &Instance) -> bool {
    true
}

fn no_instance(_: &Instance) -> bool {
    false
}

/// An adoption for a NodeClaim of [`GROUP`] that takes any instance no NodeClaim names.
fn adoption<'a>(nodeclaim: &'a str, uid: &'a str) -> Adoption<'a> {
    Adoption {
        nodeclaim,
        nodeclaim_uid: uid,
        launch_group: GROUP,
        accepts: &any_instance,
        prefers: &no_instance,
        owned: &no_instance,
    }
}

fn server_error() -> AwsError {
    AwsError::new(
        AwsService::Ec2,
        "CreateFleet",
        Some("InternalError"),
        "connection reset",
    )
    .with_status(500)
}

#[actix::test]
async fn launches_take_the_cheapest_offering_and_rank_types_by_price() {
    tokio::time::pause();
    let env = EnvBuilder::new().build().await;
    let (a, b) = (env.zone(0), env.zone(1));
    for name in GENERAL {
        for zone in env.subnets.keys() {
            env.kwok.set_spot_price(name, zone, 0.5);
        }
    }
    env.kwok.set_spot_price("m6i.large", &b, 0.021);
    env.kwok.set_spot_price("c5.large", &a, 0.034);
    env.pricing.update_spot_prices().await.unwrap();

    let spot = env.launch(
        "spot-a",
        &[CapacityType::Spot, CapacityType::OnDemand],
        GENERAL,
    );
    let request = env.instances.fleet_request(&spot).unwrap();
    assert_eq!(request.capacity_type, CapacityType::Spot);
    assert_eq!(request.allocation_strategy, "price-capacity-optimized");
    let order: Vec<&str> = request.launch_template_configs[0]
        .overrides
        .iter()
        .map(|o| o.instance_type.as_str())
        .collect();
    assert_eq!(order[0], "m6i.large", "cheapest type first: {order:?}");
    assert_eq!(order[3], "c5.large");
    assert_eq!(request.tags["eks:eks-cluster-name"], CLUSTER);
    assert_eq!(request.tags["kubernetes.io/cluster/test-cluster"], "owned");

    let launched = env.instances.create(&spot).await.unwrap();
    assert_eq!(
        (launched.instance_type.as_str(), launched.zone.as_str()),
        ("m6i.large", b.as_str())
    );
    assert_eq!(launched.capacity_type, CapacityType::Spot);

    // On-demand only: the lowest on-demand price wins (c5.large, 0.085 USD/h).
    let on_demand = env.launch("od-a", &[CapacityType::OnDemand], GENERAL);
    let launched = env.instances.create(&on_demand).await.unwrap();
    assert_eq!(launched.instance_type, "c5.large");
    assert_eq!(launched.capacity_type, CapacityType::OnDemand);
    let request = env.instances.fleet_request(&on_demand).unwrap();
    assert_eq!(request.allocation_strategy, "lowest-price");
}

/// Karpenter asks spot prices from now (`StartTime`) rather than paging 90 days of history,
/// and keeps the prices of offerings an answer leaves out.
#[actix::test]
async fn spot_prices_are_asked_from_now_and_merged_into_the_known_ones() {
    tokio::time::pause();
    let env = EnvBuilder::new().build().await;
    let (a, b) = (env.zone(0), env.zone(1));
    env.kwok.set_spot_price("m5.large", &a, 0.031);
    env.kwok.set_spot_price("m5.large", &b, 0.032);
    env.pricing.update_spot_prices().await.unwrap();
    let starts = env.kwok.spot_price_history_starts();
    assert!(!starts.is_empty());
    assert!(
        starts.iter().all(|s| *s == Some(Timestamp::UNIX_EPOCH)),
        "every call asks from the clock's now: {starts:?}"
    );

    // The next answer leaves zone b out and changes zone a: a is updated, b kept.
    env.kwok.withdraw_spot_price("m5.large", &b);
    env.kwok.set_spot_price("m5.large", &a, 0.041);
    let seq = env.pricing.seq_num();
    env.pricing.update_spot_prices().await.unwrap();
    assert!(env.pricing.seq_num() > seq);
    assert_eq!(env.pricing.spot_price("m5.large", &a), Some(0.041));
    assert_eq!(env.pricing.spot_price("m5.large", &b), Some(0.032));
}

#[actix::test]
async fn on_demand_prices_come_from_the_pricing_api_when_reachable() {
    tokio::time::pause();
    let env = EnvBuilder::new().with_pricing_api().build().await;
    assert!((env.pricing.on_demand_price("m5.large").unwrap() - 0.096).abs() < 1e-9);
    env.pricing.update_on_demand_prices().await.unwrap();
    assert!((env.pricing.on_demand_price("m5.large").unwrap() - 0.192).abs() < 1e-9);
    // Bare-metal types are in the price list's other product family: asked for too.
    let builtin = karpenter_actors::providers::pricing::builtin_on_demand_prices().unwrap();
    let metal = builtin["m5.metal"];
    assert!(
        (env.pricing.on_demand_price("m5.metal").unwrap() - 2.0 * metal).abs() < 1e-9,
        "m5.metal at the Pricing API's price"
    );
    // Spot prices are on-demand prices until the first spot refresh.
    assert_eq!(
        env.pricing.spot_price("m5.large", "us-west-2a"),
        env.pricing.on_demand_price("m5.large")
    );
}

#[actix::test]
async fn an_insufficient_capacity_error_hides_the_offering_for_three_minutes() {
    tokio::time::pause();
    let env = EnvBuilder::new().build().await;
    let a = env.zone(0);
    env.kwok
        .set_capacity("c5.large", &a, CapacityType::OnDemand, 0);
    // Only zone a, where c5.large is cheapest but its pool is empty: m5.large launches instead.
    let mut only_a = env.subnets.clone();
    only_a.retain(|zone, _| *zone == a);
    let launch = env.launch_in(
        "ice",
        &[CapacityType::OnDemand],
        &["c5.large", "m5.large"],
        &only_a,
    );
    let launched = env.instances.create(&launch).await.unwrap();
    assert_eq!(launched.instance_type, "m5.large");
    assert!(
        env.unavailable
            .is_unavailable("c5.large", &a, CapacityType::OnDemand)
    );
    let offering = |env: &Env| {
        env.types(&["c5.large"])[0]
            .offerings
            .iter()
            .find(|o| o.zone() == Some(a.as_str()) && o.capacity_type() == Some("on-demand"))
            .unwrap()
            .available
    };
    assert!(!offering(&env), "listed as unavailable at once");

    tokio::time::sleep(
        UNAVAILABLE_OFFERINGS_TTL
            .checked_sub(Duration::from_secs(1))
            .unwrap(),
    )
    .await;
    assert!(!offering(&env));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(offering(&env), "available again after the TTL");

    // Every offering out of capacity: the launch fails as insufficient capacity.
    env.kwok
        .set_capacity("m5.large", &a, CapacityType::OnDemand, 0);
    let only = env.launch_in(
        "ice-2",
        &[CapacityType::OnDemand],
        &["c5.large", "m5.large"],
        &only_a,
    );
    let error = env.instances.create(&only).await.unwrap_err();
    let InstancesError::InsufficientCapacity { source, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(source.code.as_deref(), Some("UnfulfillableCapacity"));
    assert_eq!(source.operation, "CreateFleet");
    assert_eq!(source.status, Some(200));
    assert!(source.request_id.is_some());
    assert_eq!(error.category(), "insufficient_capacity");
}

/// Karpenter's `combineFleetErrors`: a fleet without instances whose errors are not all
/// capacity errors (an invalid image, an unusable KMS key) fails the launch with that error,
/// not as insufficient capacity, and marks no offering unavailable.
#[actix::test]
async fn a_fleet_without_instances_for_a_non_capacity_error_is_not_insufficient_capacity() {
    tokio::time::pause();
    let env = EnvBuilder::new().build().await;
    let a = env.zone(0);
    let mut only_a = env.subnets.clone();
    only_a.retain(|zone, _| *zone == a);
    env.kwok.answer_fleets_with(
        1,
        "InvalidAMIID.Malformed",
        "The image id '[ami-x]' is malformed.",
    );
    let launch = env.launch_in(
        "bad-ami",
        &[CapacityType::OnDemand],
        &["c5.large", "m5.large"],
        &only_a,
    );
    let error = env.instances.create(&launch).await.unwrap_err();
    assert!(
        !matches!(error, InstancesError::InsufficientCapacity { .. }),
        "{error:?}"
    );
    assert_ne!(error.category(), "insufficient_capacity");
    assert!(
        format!("{error:?}").contains("InvalidAMIID.Malformed"),
        "{error:?}"
    );
    assert!(
        !env.unavailable
            .is_unavailable("c5.large", &a, CapacityType::OnDemand),
        "no offering is hidden for a non-capacity error"
    );

    // Only capacity errors: insufficient capacity, as before.
    env.kwok.answer_fleets_with(
        1,
        "InsufficientInstanceCapacity",
        "We currently do not have sufficient capacity.",
    );
    let launch = env.launch_in(
        "no-capacity",
        &[CapacityType::OnDemand],
        &["c5.large", "m5.large"],
        &only_a,
    );
    let error = env.instances.create(&launch).await.unwrap_err();
    assert!(
        matches!(error, InstancesError::InsufficientCapacity { .. }),
        "{error:?}"
    );
}

#[actix::test]
async fn a_hundred_concurrent_launches_become_a_handful_of_fleet_calls() {
    tokio::time::pause();
    let env = Arc::new(EnvBuilder::new().build().await);
    let handles: Vec<_> = (0..100)
        .map(|i| {
            let env = Arc::clone(&env);
            tokio::spawn(async move {
                let mut launch =
                    env.launch(&format!("claim-{i}"), &[CapacityType::OnDemand], GENERAL);
                // One launch group: the tag is the same on every request, so they still merge.
                launch.launch_group = Some(GROUP.to_owned());
                env.instances.create(&launch).await
            })
        })
        .collect();
    let mut ids = std::collections::BTreeSet::new();
    for handle in handles {
        ids.insert(handle.await.unwrap().unwrap().id);
    }
    assert_eq!(ids.len(), 100, "every NodeClaim got its own instance");
    let fleets = env.kwok.faults().count("CreateFleet");
    assert!((1..=3).contains(&fleets), "{fleets} CreateFleet calls");
    assert_eq!(env.kwok.instances_tagged(LAUNCH_GROUP, GROUP).len(), 100);
    assert_eq!(
        env.kwok.faults().count("DescribeInstances"),
        0,
        "launches without adoption look for nothing"
    );
    // Every launch went through the CreateFleet batcher actor.
    let snapshot = env.aws.kit.snapshot();
    let batcher = snapshot
        .actor("CreateFleetBatcherActor", "create-fleet")
        .unwrap();
    assert_eq!(batcher.handled_by_message["Add"], 100);
    assert_eq!(batcher.restarts, 0);
}

#[actix::test]
async fn a_retried_launch_returns_the_same_instance_even_after_a_lost_response() {
    tokio::time::pause();
    let env = EnvBuilder::new().build().await;
    let launch = env.launch("retry", &[CapacityType::OnDemand], GENERAL);
    let first = env.instances.create(&launch).await.unwrap();
    assert_eq!(env.instances.create(&launch).await.unwrap(), first);
    assert_eq!(env.kwok.faults().count("CreateFleet"), 1);

    // The fleet launches but its answer is lost: the retry re-sends the same token.
    let lost = env.launch("lost", &[CapacityType::OnDemand], GENERAL);
    env.kwok.faults().lose_next_responses(
        "CreateFleet",
        1,
        AwsError::new(
            AwsService::Ec2,
            "CreateFleet",
            Some("InternalError"),
            "connection reset",
        )
        .with_status(500),
    );
    let error = env.instances.create(&lost).await.unwrap_err();
    assert!(
        matches!(&error, InstancesError::Launch { source, .. } if source.class == AwsErrorClass::Server),
        "{error:?}"
    );
    assert_eq!(env.kwok.instances().len(), 2, "the lost fleet did launch");
    let retried = env.instances.create(&lost).await.unwrap();
    assert_eq!(
        env.kwok.instances().len(),
        2,
        "the retry launched nothing new"
    );
    assert!(env.kwok.instances().iter().any(|i| i.id == retried.id));
    assert_eq!(env.kwok.faults().count("CreateFleet"), 3);
}

#[actix::test]
async fn throttled_calls_recover_once_the_token_bucket_refills() {
    tokio::time::pause();
    let env = EnvBuilder::new()
        .throttled(RetryPolicy {
            jitter: false,
            ..RetryPolicy::default()
        })
        .build()
        .await;
    // Empty the mutating bucket (burst 50) with dry runs.
    let mut request = env
        .instances
        .fleet_request(&env.launch("drain", &[CapacityType::OnDemand], GENERAL))
        .unwrap();
    request.dry_run = true;
    for _ in 0..60 {
        let _ = env.kwok.create_fleet(&request).await;
    }
    let before = env.kwok.faults().count("CreateFleet");
    let launched = env
        .instances
        .create(&env.launch("after-throttle", &[CapacityType::OnDemand], GENERAL))
        .await
        .unwrap();
    assert!(!launched.id.is_empty());
    let attempts = env.kwok.faults().count("CreateFleet") - before;
    assert!(
        attempts >= 2,
        "the first attempt was throttled ({attempts} attempts)"
    );

    // Without retries, the throttling error surfaces classified.
    let error = env.kwok.create_fleet(&request).await.unwrap_err();
    assert_eq!(error.class, AwsErrorClass::Throttled);
    assert_eq!(error.code.as_deref(), Some("RequestLimitExceeded"));
    assert_eq!(error.status, Some(503));
}

#[actix::test]
async fn instances_launch_pending_run_and_terminate_through_the_batchers() {
    tokio::time::pause();
    let env = EnvBuilder::new().build().await;
    let launched = env
        .instances
        .create(&env.launch("life", &[CapacityType::OnDemand], GENERAL))
        .await
        .unwrap();
    let instance = env.instances.get(&launched.id).await.unwrap();
    assert_eq!(instance.state, InstanceState::Pending);
    assert_eq!(instance.tags["karpenter.sh/nodepool"], "default");
    tokio::time::sleep(Duration::from_secs(16)).await;
    assert_eq!(
        env.instances.get(&launched.id).await.unwrap().state,
        InstanceState::Running
    );
    assert_eq!(env.instances.list().await.unwrap().len(), 1);

    env.name_instance(&launched.id).await;
    env.instances.delete(&launched.id).await.unwrap();
    assert_eq!(
        env.instances.get(&launched.id).await.unwrap().state,
        InstanceState::ShuttingDown
    );
    env.instances.delete(&launched.id).await.unwrap();
    assert_eq!(
        env.kwok.faults().count("TerminateInstances"),
        1,
        "no second terminate while shutting down"
    );
    tokio::time::sleep(Duration::from_secs(16)).await;
    assert!(matches!(
        env.instances.get(&launched.id).await,
        Err(InstancesError::NotFound { .. })
    ));
    assert!(env.instances.list().await.unwrap().is_empty());
}

/// The simulation's kubelet skips its pass and the bill is reused while kwok's generation
/// stays the same: every change either reads must move it, and nothing else may.
#[actix::test]
async fn kwoks_generation_and_bill_follow_every_launch_settle_and_termination() {
    tokio::time::pause();
    let env = EnvBuilder::new().build().await;
    let start = env.kwok.generation();
    assert!(
        env.kwok.billed_per_hour().abs() < f64::EPSILON,
        "nothing runs yet"
    );
    assert_eq!(
        format!("{:.2}", env.kwok.billed_per_hour()),
        "0.00",
        "an empty bill is +0, not -0"
    );
    let launched = env
        .instances
        .create(&env.launch("bill", &[CapacityType::OnDemand], GENERAL))
        .await
        .unwrap();
    let pending = env.kwok.generation();
    assert_ne!(pending, start, "a launch is a change");
    let bill = env.kwok.billed_per_hour();
    assert!(bill > 0.0, "a pending instance is billed");
    assert_eq!(env.kwok.generation(), pending, "reading changes nothing");
    tokio::time::sleep(Duration::from_secs(16)).await;
    let running = env.kwok.generation();
    assert_ne!(running, pending, "settling to Running is a change");
    assert!((env.kwok.billed_per_hour() - bill).abs() < 1e-12);
    env.name_instance(&launched.id).await;
    assert_eq!(env.kwok.generation(), running, "tags change no state");
    env.instances.delete(&launched.id).await.unwrap();
    let shutting = env.kwok.generation();
    assert_ne!(shutting, running, "a termination is a change");
    assert!(
        env.kwok.billed_per_hour().abs() < f64::EPSILON,
        "a shutting-down instance is no longer billed (the kept bill is not reused)"
    );
    tokio::time::sleep(Duration::from_secs(16)).await;
    assert_ne!(
        env.kwok.generation(),
        shutting,
        "settling to Terminated is a change"
    );
    let settled = env.kwok.generation();
    env.kwok.set_spot_price("m5.large", &env.zone(0), 0.031);
    assert_ne!(
        env.kwok.generation(),
        settled,
        "a fixed spot price is a change"
    );
}

#[actix::test]
async fn spot_interruptions_reach_the_interruption_queue() {
    tokio::time::pause();
    let env = EnvBuilder::new().build().await;
    let url = env.sqs.create_queue(CLUSTER).await.unwrap();
    let arn = env.sqs.get_queue_arn(&url).await.unwrap();
    env.events
        .put_rule(
            "spot",
            r#"{"source":["aws.ec2"],"detail-type":["EC2 Spot Instance Interruption Warning"]}"#,
        )
        .await
        .unwrap();
    env.events.put_targets("spot", "1", &arn).await.unwrap();
    let launched = env
        .instances
        .create(&env.launch("spot", &[CapacityType::Spot], GENERAL))
        .await
        .unwrap();
    env.kwok.interrupt_spot(&launched.id).await.unwrap();
    let messages = env
        .sqs
        .receive_messages(
            &url,
            ReceiveRequest {
                max_messages: 10,
                wait_time_seconds: 20,
                visibility_timeout_seconds: 20,
            },
        )
        .await
        .unwrap();
    assert_eq!(messages.len(), 1);
    let body: serde_json::Value = serde_json::from_str(&messages[0].body).unwrap();
    assert_eq!(body["detail"]["instance-id"], launched.id.as_str());
    assert_eq!(body["source"], "aws.ec2");
    // A long poll on the empty queue returns when the wait ends, on the paused clock.
    env.sqs
        .delete_message(&url, &messages[0].receipt_handle)
        .await
        .unwrap();
    let empty = env
        .sqs
        .receive_messages(
            &url,
            ReceiveRequest {
                max_messages: 10,
                wait_time_seconds: 20,
                visibility_timeout_seconds: 20,
            },
        )
        .await
        .unwrap();
    assert!(empty.is_empty());
}

/// kwok answers a describe by instance ids as EC2 does: each named instance once (a repeated
/// id too), in id order, the filters still applied, and an unknown id refused.
#[actix::test]
async fn kwok_describes_named_instances_once_each_with_the_filters_applied() {
    tokio::time::pause();
    let env = EnvBuilder::new().build().await;
    let mut request = env
        .instances
        .fleet_request(&env.grouped("describe"))
        .unwrap();
    request.total_target_capacity = 3;
    env.kwok.create_fleet(&request).await.unwrap();
    let mut ids: Vec<String> = env.kwok.instances().iter().map(|i| i.id.clone()).collect();
    ids.sort();
    assert_eq!(ids.len(), 3);
    let describe = |instance_ids: Vec<String>, filters: Vec<Filter>| {
        let kwok = Arc::clone(&env.kwok);
        async move {
            kwok.describe_instances(&DescribeInstancesRequest {
                instance_ids,
                filters,
            })
            .await
        }
    };
    let named = |found: Vec<Instance>| found.into_iter().map(|i| i.id).collect::<Vec<_>>();

    let found = describe(vec![ids[2].clone(), ids[0].clone(), ids[2].clone()], vec![])
        .await
        .unwrap();
    assert_eq!(named(found), [ids[0].clone(), ids[2].clone()]);
    let all = describe(vec![], vec![]).await.unwrap();
    assert_eq!(named(all), ids);
    let filtered = describe(
        vec![ids[1].clone()],
        vec![Filter {
            name: "instance-state-name".into(),
            values: vec!["terminated".into()],
        }],
    )
    .await
    .unwrap();
    assert!(filtered.is_empty(), "{filtered:?}");
    let missing = describe(vec!["i-0000000000000missing".into()], vec![]).await;
    assert!(missing.is_err());
}

#[actix::test]
async fn kwok_keeps_a_client_token_for_a_day_and_refuses_it_with_other_parameters() {
    tokio::time::pause();
    let env = EnvBuilder::new().build().await;
    let mut request = env.instances.fleet_request(&env.grouped("token")).unwrap();
    request.client_token = Some("karpenter-token-1".into());
    let first = env.kwok.create_fleet(&request).await.unwrap();
    let again = env.kwok.create_fleet(&request).await.unwrap();
    assert_eq!(
        first, again,
        "the same token and request answer the first fleet"
    );
    assert_eq!(env.kwok.instances().len(), 1);

    let mut bigger = request.clone();
    bigger.total_target_capacity = 2;
    let refused = env.kwok.create_fleet(&bigger).await.unwrap_err();
    assert_eq!(refused.class, AwsErrorClass::IdempotentParameterMismatch);
    assert_eq!(refused.code.as_deref(), Some("IdempotentParameterMismatch"));
    assert_eq!(refused.status, Some(400));
    assert_eq!(
        env.kwok.instances().len(),
        1,
        "a refused token launches nothing"
    );

    tokio::time::advance(Duration::from_hours(24) + Duration::from_secs(1)).await;
    let expired = env.kwok.create_fleet(&bigger).await.unwrap();
    assert_eq!(expired.instances.len(), 2, "an expired token is a new one");
    assert_eq!(env.kwok.instances().len(), 3);
}

#[actix::test]
async fn a_fleet_whose_caller_gives_up_before_the_answer_launches_and_is_kept_for_its_next_try() {
    tokio::time::pause();
    let env = Arc::new(EnvBuilder::new().build().await);
    env.kwok.set_create_fleet_latency(Duration::from_secs(5));
    let caller = {
        let env = Arc::clone(&env);
        tokio::spawn(async move { env.instances.create(&env.grouped("gave-up")).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.kwok.faults().count("CreateFleet"),
        1,
        "the call reached EC2"
    );
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let launched = env.kwok.instances_tagged(LAUNCH_GROUP, GROUP);
    assert_eq!(
        launched.len(),
        1,
        "the instance outlives its caller, tagged with its launch group"
    );
    // The batch's answer still came back to this process: the next try gets that instance.
    let retried = env.instances.create(&env.grouped("gave-up")).await.unwrap();
    assert_eq!(retried.id, launched[0].id);
    assert_eq!(env.kwok.faults().count("CreateFleet"), 1);
    // A process that died with its caller knows nothing of it.
    assert!(env.restarted().launched("uid-gave-up").is_none());
}

#[actix::test]
async fn a_restarted_provider_adopts_each_orphan_of_a_launch_group_once() {
    tokio::time::pause();
    let env = Arc::new(EnvBuilder::new().build().await);
    // Three NodeClaims merged into one fleet whose answer is lost: three orphans.
    env.kwok
        .faults()
        .lose_next_responses("CreateFleet", 1, server_error());
    let lost: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|name| {
            let env = Arc::clone(&env);
            tokio::spawn(async move { env.instances.create(&env.grouped(name)).await })
        })
        .collect();
    for handle in lost {
        assert!(handle.await.unwrap().is_err());
    }
    assert_eq!(
        env.kwok.faults().count("CreateFleet"),
        1,
        "one merged fleet"
    );
    let orphans: std::collections::BTreeSet<String> = env
        .kwok
        .instances_tagged(LAUNCH_GROUP, GROUP)
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(orphans.len(), 3);

    let restarted = env.restarted();
    let mut adopted = std::collections::BTreeSet::new();
    for name in ["a", "b", "c"] {
        let uid = format!("uid-{name}");
        let instance = restarted
            .adopt(&adoption(name, &uid))
            .await
            .unwrap()
            .expect("an orphan to adopt");
        assert_eq!(
            restarted.launched(&uid),
            Some(instance.clone()),
            "held for it"
        );
        adopted.insert(instance.id);
    }
    assert_eq!(adopted, orphans, "each orphan adopted exactly once");
    assert!(
        restarted
            .adopt(&adoption("d", "uid-d"))
            .await
            .unwrap()
            .is_none(),
        "nothing left"
    );
    assert!(
        !restarted.is_suspect(GROUP),
        "the group has no orphans left"
    );
    assert_eq!(
        env.kwok.faults().count("CreateFleet"),
        1,
        "nothing launched again"
    );
    // The census and one lookup per adoption; the last adoption knew there was nothing left.
    assert_eq!(env.kwok.faults().count("DescribeInstances"), 1 + 3);

    // A launch of a group without orphans looks for nothing.
    let before = env.kwok.faults().count("DescribeInstances");
    let other = Adoption {
        launch_group: "ffffffffffffffffffffffffffffffff-ffffffffffffffff",
        ..adoption("e", "uid-e")
    };
    assert!(restarted.adopt(&other).await.unwrap().is_none());
    assert_eq!(env.kwok.faults().count("DescribeInstances"), before);
}

#[actix::test]
async fn an_adoption_distrusts_a_lookup_while_a_fleet_of_its_group_waits_for_its_answer() {
    tokio::time::pause();
    let env = Arc::new(EnvBuilder::new().build().await);
    // An orphan from a lost answer, then a restart.
    env.kwok
        .faults()
        .lose_next_responses("CreateFleet", 1, server_error());
    assert!(env.instances.create(&env.grouped("lost")).await.is_err());
    let lost = env.kwok.instances_tagged(LAUNCH_GROUP, GROUP).remove(0).id;
    let restarted = Arc::new(env.restarted());
    // A fresh launch of the same group is in EC2, its instance not handed out yet.
    env.kwok.set_create_fleet_latency(Duration::from_secs(5));
    let fresh = {
        let (env, restarted) = (Arc::clone(&env), Arc::clone(&restarted));
        tokio::spawn(async move { restarted.create(&env.grouped("fresh")).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(env.kwok.instances_tagged(LAUNCH_GROUP, GROUP).len(), 2);
    // Only the in-flight fleet's instance would do: it looks orphaned, and is not taken.
    let not_lost = move |i: &Instance| i.id != lost;
    let picky = Adoption {
        accepts: &not_lost,
        ..adoption("other", "uid-other")
    };
    assert!(
        restarted.adopt(&picky).await.unwrap().is_none(),
        "a lookup while a fleet of the group is in flight is not trusted"
    );
    let fresh = fresh.await.unwrap().unwrap();
    let adopted = restarted
        .adopt(&adoption("other", "uid-other"))
        .await
        .unwrap()
        .expect("the lost launch's instance");
    assert_ne!(
        adopted.id, fresh.id,
        "never the instance another launch holds"
    );
}

#[actix::test]
async fn a_refused_client_token_is_replaced_and_the_launch_goes_through() {
    tokio::time::pause();
    let env = EnvBuilder::new().build().await;
    env.kwok.faults().fail_next(
        "CreateFleet",
        1,
        AwsError::new(
            AwsService::Ec2,
            "CreateFleet",
            Some("IdempotentParameterMismatch"),
            "The client token you have provided is associated with a resource that is already deleted or has different parameters.",
        )
        .with_status(400),
    );
    let launched = env.instances.create(&env.grouped("refused")).await.unwrap();
    assert_eq!(env.kwok.faults().count("CreateFleet"), 2, "sent again once");
    let tokens: Vec<String> = env
        .kwok
        .faults()
        .calls()
        .into_iter()
        .filter(|c| c.operation == "CreateFleet")
        .map(|c| c.detail)
        .collect();
    assert_ne!(tokens[0], tokens[1], "with a new token");
    assert_eq!(env.kwok.instances().len(), 1);
    assert!(env.kwok.instances().iter().any(|i| i.id == launched.id));
    assert!(
        env.instances.is_suspect(GROUP),
        "what the first use of the token launched may be adopted"
    );

    // A token refused every time ends the launch as a retryable launch error.
    env.kwok.faults().fail_next(
        "CreateFleet",
        usize::try_from(TOKEN_ATTEMPTS).unwrap(),
        AwsError::new(
            AwsService::Ec2,
            "CreateFleet",
            Some("IdempotentParameterMismatch"),
            "no",
        )
        .with_status(400),
    );
    let error = env
        .instances
        .create(&env.grouped("stubborn"))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, InstancesError::Launch { source, .. } if source.class == AwsErrorClass::IdempotentParameterMismatch),
        "{error:?}"
    );
    assert_eq!(error.category(), "idempotent_parameter_mismatch");
}

#[actix::test]
async fn a_replayed_answer_naming_an_instance_another_nodeclaim_holds_is_refused() {
    tokio::time::pause();
    let env = Arc::new(EnvBuilder::new().build().await);
    // NodeClaims a and b are launched together and the answer is lost with the process.
    env.kwok
        .faults()
        .lose_next_responses("CreateFleet", 1, server_error());
    let pair = |instances: Arc<InstancesProvider>| {
        ["a", "b"].map(|name| {
            let (env, instances) = (Arc::clone(&env), Arc::clone(&instances));
            tokio::spawn(async move { instances.create(&env.grouped(name)).await })
        })
    };
    let first = Arc::new(env.restarted());
    for handle in pair(Arc::clone(&first)) {
        assert!(handle.await.unwrap().is_err());
    }
    let orphans: Vec<String> = env
        .kwok
        .instances_tagged(LAUNCH_GROUP, GROUP)
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(orphans.len(), 2);
    // After the restart a third NodeClaim of the group adopts one of them...
    let restarted = Arc::new(env.restarted());
    let taken = restarted
        .adopt(&adoption("c", "uid-c"))
        .await
        .unwrap()
        .unwrap();
    // ...and a and b launch together again: the same members and request give the same token,
    // and EC2 answers with the first fleet, whose instances include the one c holds.
    let mut got = Vec::new();
    for handle in pair(Arc::clone(&restarted)) {
        got.push(handle.await.unwrap().unwrap());
    }
    let ids: std::collections::BTreeSet<&str> = got.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids.len(), 2, "a and b have their own instances");
    assert!(
        !ids.contains(taken.id.as_str()),
        "c's instance is not handed out twice"
    );
    assert!(
        got.iter().any(|i| orphans.contains(&i.id)),
        "the replay's other instance is used"
    );
    assert_eq!(
        env.kwok.instances_tagged(LAUNCH_GROUP, GROUP).len(),
        3,
        "one instance more, for the NodeClaim whose replayed instance was taken"
    );
}
