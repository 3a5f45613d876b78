//! A simulated cluster without Karpenter's actors: the emulator on the simulated clock, its
//! watchers' store, kwok's AWS account, the fake kubelet and scheduler.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use karpenter::emulator::{Emulator, EmulatorConfig};
use karpenter::kube::ingress::ClusterIngress;
use karpenter::sim::binder::FakeScheduler;
use karpenter::sim::clock::SimClock;
use karpenter::sim::kubelet::{FakeKubelet, KubeletConfig, KubeletDeps};
use karpenter::sim::world::{KwokAws, KwokAwsConfig};
use karpenter_actors::ports::cluster_view::ClusterView;

pub const REGION: &str = "us-west-2";

pub struct Cluster {
    /// Kept alive for the cluster's lifetime.
    pub _emulator: Emulator,
    pub client: kube::Client,
    pub world: KwokAws,
    pub kubelet: FakeKubelet,
    pub scheduler: FakeScheduler,
}

pub fn kubelet_config() -> KubeletConfig {
    KubeletConfig {
        registration_delay: Duration::from_secs(20),
        ready_delay: Duration::from_secs(5),
        startup_taint_delay: Duration::from_secs(10),
    }
}

impl Cluster {
    /// Call inside a paused tokio runtime.
    pub async fn start() -> Self {
        let clock = SimClock::at_epoch();
        let emulator = Emulator::with_config(EmulatorConfig {
            clock: clock.for_emulator(),
            seed: 7,
            ..EmulatorConfig::default()
        })
        .unwrap();
        let client = emulator.client();
        let ingress = ClusterIngress::new(client.clone());
        let state = ingress.state();
        tokio::spawn(ingress.run());
        state.wait_until_ready().await.unwrap();
        let world = KwokAws::new(
            &KwokAwsConfig {
                region: REGION.into(),
                cluster_name: "simulated".into(),
                launch_latency: Duration::from_secs(15),
            },
            Arc::new(clock),
        )
        .unwrap();
        let view: Arc<dyn ClusterView> = Arc::new(state.clone());
        let kubelet = FakeKubelet::new(
            KubeletDeps {
                client: client.clone(),
                ec2: Arc::clone(&world.ec2),
                view: Arc::clone(&view),
                clock: Arc::new(clock),
                region: REGION.into(),
            },
            kubelet_config(),
        );
        let scheduler = FakeScheduler::new(client.clone(), view, Arc::new(clock));
        Self {
            _emulator: emulator,
            client,
            world,
            kubelet,
            scheduler,
        }
    }

    /// Advances simulated time by `seconds`, ticking the kubelet and scheduler every second.
    pub async fn run_for(&mut self, seconds: u64) {
        for _ in 0..seconds {
            tokio::time::sleep(Duration::from_secs(1)).await;
            self.kubelet.tick().await;
            self.scheduler.tick().await;
        }
    }
}

/// Runs `body` as `karpenter simulate` runs: an actix System on paused tokio time.
pub fn in_simulation<F: Future>(body: impl FnOnce() -> F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    actix::System::with_tokio_rt(move || runtime).block_on(body())
}
