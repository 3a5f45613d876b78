//! The AWS group: one supervised actor per AWS subsystem over kwok, on tokio's paused clock.
//! The catalogue refresh retries after a minute and re-arms for 12 hours; a fault plan can
//! crash a batcher, whose callers fail at once and whose next batch works; every subsystem shows
//! in the registry.

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
use karpenter_actors::aws::catalogue::{
    CATALOGUE_REFRESH, CATALOGUE_RETRY, CatalogueRefreshActor, CatalogueStatus,
};
use karpenter_actors::aws::{AwsActorOptions, AwsActors};
use karpenter_actors::kwok::cloud_provider::settings;
use karpenter_actors::kwok::ec2::{KwokEc2, KwokEc2Config, KwokEc2Deps};
use karpenter_actors::ports::aws_error::{AwsError, AwsService};
use karpenter_actors::ports::clock::{Clock, ManualClock};
use karpenter_actors::ports::ec2::{
    CreateLaunchTemplateRequest, Ec2Api, FleetLaunchTemplateConfig,
};
use karpenter_actors::providers::cloud_provider::AwsProviders;
use karpenter_actors::providers::instance_types::NodeClassSettings;
use karpenter_actors::providers::instances::{
    InstancesError, LaunchRequest, overrides, with_capacity_type,
};
use karpenter_actors::runtime::{FaultAction, FaultPlan, FaultRule, KitOptions};
use karpenter_actors::testing::AwsTestKit;
use karpenter_core::domain::instance_type::CapacityType;
use karpenter_core::domain::requirements::Requirements;

const REGION: &str = "us-west-2";
const CLUSTER: &str = "test-cluster";
const LAUNCH_TEMPLATE: &str = "karpenter.k8s.aws/test";

fn kwok() -> Arc<KwokEc2> {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
    Arc::new(
        KwokEc2::new(
            KwokEc2Config::new(REGION, CLUSTER),
            KwokEc2Deps {
                clock,
                events: None,
            },
        )
        .unwrap(),
    )
}

fn providers(kwok: &Arc<KwokEc2>) -> AwsProviders {
    AwsProviders::new(
        Arc::clone(kwok) as Arc<dyn Ec2Api>,
        None,
        &settings(REGION, CLUSTER),
        Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH)),
    )
    .unwrap()
}

fn unavailable() -> AwsError {
    AwsError::new(
        AwsService::Ec2,
        "DescribeInstanceTypes",
        Some("ServiceUnavailable"),
        "try later",
    )
    .with_status(503)
}

/// An on-demand m5.large launch in the first zone, as the cloud provider builds one.
fn launch(kwok: &KwokEc2, providers: &AwsProviders, nodeclaim: &str) -> LaunchRequest {
    let zone_ids: BTreeMap<String, String> = kwok
        .subnets()
        .iter()
        .map(|s| (s.zone.clone(), s.zone_id.clone()))
        .collect();
    let subnets: BTreeMap<String, String> = kwok
        .subnets()
        .iter()
        .take(1)
        .map(|s| (s.zone.clone(), s.id.clone()))
        .collect();
    let types: Vec<_> = providers
        .instance_types
        .list(&NodeClassSettings::default(), &zone_ids)
        .unwrap()
        .iter()
        .filter(|t| t.name == "m5.large")
        .cloned()
        .collect();
    let requirements = with_capacity_type(&Requirements::default(), CapacityType::OnDemand);
    LaunchRequest {
        nodeclaim: nodeclaim.into(),
        nodeclaim_uid: format!("uid-{nodeclaim}"),
        capacity_type: CapacityType::OnDemand,
        launch_templates: vec![FleetLaunchTemplateConfig {
            launch_template_name: LAUNCH_TEMPLATE.into(),
            version: "$Latest".into(),
            overrides: overrides(&types, &subnets, &requirements, None),
        }],
        tags: BTreeMap::from([("karpenter.sh/nodepool".to_owned(), "default".to_owned())]),
        context: None,
        launch_group: None,
    }
}

#[actix::test]
async fn the_catalogue_refresh_retries_after_a_minute_and_then_every_twelve_hours() {
    tokio::time::pause();
    let kwok = kwok();
    kwok.faults()
        .fail_next("DescribeInstanceTypes", 1, unavailable());
    let providers = providers(&kwok);
    let aws = AwsTestKit::new(KitOptions::default());
    let status = CatalogueStatus::default();
    AwsActors::start(
        &aws.root,
        &providers,
        AwsActorOptions {
            refresh: Some(status.clone()),
        },
    )
    .unwrap();
    let calls = || kwok.faults().count("DescribeInstanceTypes");

    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(calls(), 1, "refreshed at once");
    let error = status.get().unwrap_err();
    assert!(error.contains("server"), "{error}");
    let snapshot = aws.kit.snapshot();
    let actor = snapshot
        .actor("CatalogueRefreshActor", CatalogueRefreshActor::KEY)
        .unwrap();
    assert_eq!((actor.state.as_str(), actor.errors), ("retrying", 1));

    tokio::time::sleep(CATALOGUE_RETRY.checked_sub(Duration::from_secs(2)).unwrap()).await;
    assert_eq!(calls(), 1, "no retry before a minute");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(calls(), 2, "retried after a minute");
    assert_eq!(status.get(), Ok(()));
    assert!(
        !providers
            .instance_types
            .list(&NodeClassSettings::default(), &BTreeMap::new())
            .unwrap()
            .is_empty(),
        "the catalogue loaded"
    );

    tokio::time::sleep(
        CATALOGUE_REFRESH
            .checked_sub(Duration::from_secs(2))
            .unwrap(),
    )
    .await;
    assert_eq!(calls(), 2, "loaded: next refresh in 12 hours");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(calls(), 3);
    // A failure once loaded keeps the catalogue and readiness.
    kwok.faults()
        .fail_next("DescribeInstanceTypes", 1, unavailable());
    tokio::time::sleep(CATALOGUE_REFRESH).await;
    assert_eq!(calls(), 4);
    assert_eq!(status.get(), Ok(()));
    tokio::time::sleep(CATALOGUE_RETRY).await;
    assert_eq!(calls(), 5, "a failed refresh is retried after a minute");
}

#[actix::test]
async fn a_panicking_refresh_is_restarted_and_refreshes_at_once() {
    tokio::time::pause();
    let plan = FaultPlan::new(1)
        .with_rule(
            FaultRule::new(FaultAction::Panic)
                .kind("CatalogueRefreshActor")
                .message("Refresh")
                .nth(1),
        )
        .unwrap();
    let kwok = kwok();
    let providers = providers(&kwok);
    let aws = AwsTestKit::new(KitOptions {
        faults: Some(Arc::new(plan)),
        ..KitOptions::default()
    });
    let status = CatalogueStatus::default();
    AwsActors::start(
        &aws.root,
        &providers,
        AwsActorOptions {
            refresh: Some(status.clone()),
        },
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(status.get(), Ok(()));
    let snapshot = aws.kit.snapshot();
    let actor = snapshot
        .actor("CatalogueRefreshActor", CatalogueRefreshActor::KEY)
        .unwrap();
    assert_eq!((actor.panics, actor.restarts), (1, 1));
    assert_eq!(actor.state, "loaded");
    assert!(aws.root.escalation().is_none());
}

#[actix::test]
async fn a_fault_plan_can_crash_the_create_fleet_batcher_and_the_next_launch_works() {
    tokio::time::pause();
    let plan = FaultPlan::from_yaml(
        "seed: 7\nrules:\n  - kind: CreateFleetBatcherActor\n    message: Add\n    nth: 1\n    action: panic\n",
    )
    .unwrap();
    let kwok = kwok();
    kwok.create_launch_template(&CreateLaunchTemplateRequest {
        name: LAUNCH_TEMPLATE.into(),
        ..CreateLaunchTemplateRequest::default()
    })
    .await
    .unwrap();
    let providers = providers(&kwok);
    providers.refresh().await.unwrap();
    let aws = AwsTestKit::new(KitOptions {
        faults: Some(Arc::new(plan)),
        ..KitOptions::default()
    });
    AwsActors::start(&aws.root, &providers, AwsActorOptions::default()).unwrap();

    let first = providers
        .instances
        .create(&launch(&kwok, &providers, "first"))
        .await
        .unwrap_err();
    assert!(
        matches!(first, InstancesError::Dropped(ref dropped) if dropped.reason == "panicked"),
        "{first:?}"
    );
    assert_eq!(first.category(), "batch_dropped");
    assert_eq!(kwok.faults().count("CreateFleet"), 0, "nothing was sent");
    // The caller retries, as the NodeClaim actor does: the restarted batcher launches it.
    let retried = providers
        .instances
        .create(&launch(&kwok, &providers, "first"))
        .await
        .unwrap();
    assert_eq!(retried.instance_type, "m5.large");
    assert_eq!(kwok.instances().len(), 1);
    let snapshot = aws.kit.snapshot();
    let batcher = snapshot
        .actor("CreateFleetBatcherActor", "create-fleet")
        .unwrap();
    assert_eq!((batcher.panics, batcher.restarts), (1, 1));
    assert_eq!(aws.kit.faults().unwrap().injected().len(), 1);
}

#[actix::test]
async fn every_aws_subsystem_is_an_actor_of_the_aws_group() {
    tokio::time::pause();
    let kwok = kwok();
    let providers = providers(&kwok);
    let aws = AwsTestKit::new(KitOptions::default());
    AwsActors::start(
        &aws.root,
        &providers,
        AwsActorOptions {
            refresh: Some(CatalogueStatus::default()),
        },
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let snapshot = aws.kit.snapshot();
    let mut actors: Vec<(String, String)> = snapshot
        .actors
        .iter()
        .map(|a| (a.kind.clone(), a.key.clone()))
        .collect();
    actors.sort();
    assert_eq!(
        actors,
        [
            ("CatalogueRefreshActor", "aws-catalogue"),
            ("CreateFleetBatcherActor", "create-fleet"),
            ("DescribeInstancesBatcherActor", "describe-instances"),
            ("LaunchTemplateJanitorActor", "launch-templates"),
            ("TerminateInstancesBatcherActor", "terminate-instances"),
            ("UnavailableOfferingsActor", "unavailable-offerings"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    let group = snapshot.supervisor("aws").unwrap();
    assert_eq!(
        (group.children, group.strategy.as_str()),
        (6, "one_for_one")
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &aws.registry).unwrap();
    assert!(text.contains("karpenter_actor_live_actors{kind=\"CreateFleetBatcherActor\"} 1"));
    aws.root.stop().await;
    assert!(aws.kit.registry().is_empty());
    // A stopped batcher fails at once instead of hanging.
    let error = providers.instances.get("i-0123").await.unwrap_err();
    assert_eq!(error.category(), "batch_dropped");
}
