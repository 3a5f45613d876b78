//! A daemon over the emulator and kwok, built as `karpenter run` builds one.

use std::sync::Arc;
use std::time::Duration;

use karpenter::cloud::CloudSource;
use karpenter::daemon::{DaemonInputs, DaemonOptions, Endpoints};
use karpenter::emulator::Emulator;
use karpenter::http::Routes;
use karpenter::kube::leader::LeaseTiming;
use karpenter::kube::version::KubeVersionSource;
use karpenter::sim::world::{KwokAws, KwokAwsConfig};
use karpenter_actors::deps::ClusterVersion;
use karpenter_actors::kwok;
use karpenter_actors::ports::clock::SystemClock;
use karpenter_actors::providers::cloud_provider::AwsProviders;
use karpenter_config::Settings;

pub const CLUSTER: &str = "test-cluster";

pub fn world() -> KwokAws {
    KwokAws::new(
        &KwokAwsConfig {
            region: "us-west-2".into(),
            cluster_name: CLUSTER.into(),
            launch_latency: Duration::from_secs(15),
        },
        Arc::new(SystemClock),
    )
    .unwrap()
}

/// Settings of a replica; `queue` names the interruption queue (so an actor runs once leading).
/// The debug endpoints are on (`ENABLE_PROFILING`): the tests read them.
pub fn settings(queue: Option<&str>, leader_election: bool) -> Settings {
    Settings {
        cluster_name: Some(CLUSTER.into()),
        aws_region: Some("us-west-2".into()),
        interruption_queue: queue.map(str::to_owned),
        disable_leader_election: !leader_election,
        enable_profiling: true,
        ..Settings::default()
    }
}

/// Inputs of a replica over `world`: the AWS cloud provider over kwok, as `run` builds it over
/// the SDK. Call on a tokio runtime.
pub fn inputs(
    emulator: &Emulator,
    world: &KwokAws,
    settings: Settings,
    identity: &str,
) -> DaemonInputs {
    let provider_settings = kwok::cloud_provider::settings("us-west-2", CLUSTER);
    let providers = AwsProviders::new(
        world.ec2.clone(),
        Some(world.pricing.clone()),
        &provider_settings,
        Arc::new(SystemClock),
    )
    .unwrap();
    DaemonInputs {
        cluster_info: provider_settings.cluster.clone(),
        region: "us-west-2".into(),
        kubernetes_version: ClusterVersion::default().get(),
        version_source: Arc::new(KubeVersionSource::new(emulator.client())),
        settings: Arc::new(settings),
        client: emulator.client(),
        aws: world.ports(),
        cloud: CloudSource::Aws {
            providers,
            settings: provider_settings,
        },
        clock: Arc::new(SystemClock),
        identity: identity.into(),
    }
}

/// `karpenter run`'s options, served on loopback ports of the system's choosing.
pub fn options() -> DaemonOptions {
    DaemonOptions::leader_elected(
        LeaseTiming::default(),
        Endpoints {
            metrics_addr: "127.0.0.1:0".parse().unwrap(),
            health_addr: "127.0.0.1:0".parse().unwrap(),
            routes: Routes::new(),
            daemon_routes: karpenter::daemon::daemon_routes(),
        },
    )
}
