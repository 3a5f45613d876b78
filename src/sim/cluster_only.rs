//! The cluster without Karpenter (`karpenter simulate --serve ADDR --cluster-only`): what a
//! process-level test runs `karpenter run` against. It is the simulation's cluster with neither
//! the daemon nor kwok: the API emulator on loopback (with our CRDs, the initial namespaces and
//! the `kube-system/kube-dns` Service an EKS cluster has) and a kubeconfig for it, the fake
//! kube-scheduler, and the fake kubelet over NodeClaims ([`Machines::NodeClaims`]): the instances
//! live wherever the daemon launched them (moto), so each NodeClaim with a provider id stands for
//! its instance.
//!
//! ```text
//! emulator <- kube-dns Service; on loopback + kubeconfig (written whole, then renamed)
//! watchers (the daemon's own ClusterIngress) -> ClusterState
//! every CLUSTER_TICK until stopped (SIGTERM / Ctrl-C):
//!   kubelet: NodeClaim with providerID -> Node (its labels, taints + karpenter.sh/unregistered,
//!            capacity and allocatable), Ready after a delay, startup taints removed, bound pods
//!            Running; NodeClaim gone -> Node deleted
//!   scheduler: pending pods -> bindings on Ready nodes, or PodScheduled=False Unschedulable
//! ```
//!
//! Everything runs on the wall clock.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use karpenter_actors::ports::clock::{Clock, SystemClock};
use karpenter_actors::ports::cluster_view::ClusterView;
use tokio::sync::oneshot;

use super::binder::FakeScheduler;
use super::kubelet::{FakeKubelet, KubeletConfig};
use super::scenario::{SimulationError, write_kubeconfig};
use crate::emulator::Emulator;
use crate::kube::ingress::ClusterIngress;

/// How often the kubelet and the scheduler look at the cluster: often enough that a test sees a
/// node a fraction of a second after the delays below, cheap enough for an idle cluster (a tick
/// without changes skips the scheduler's solve).
pub const CLUSTER_TICK: Duration = Duration::from_millis(200);

/// A node's life in the cluster-only server: shorter than EKS's (tens of seconds), so tests wait
/// seconds, and long enough that Karpenter sees each step (registered, not yet Ready) separately.
pub const CLUSTER_ONLY_KUBELET: KubeletConfig = KubeletConfig {
    registration_delay: Duration::from_millis(500),
    ready_delay: Duration::from_secs(1),
    startup_taint_delay: Duration::from_secs(1),
};

/// Where the cluster-only server listens and what it tells.
#[derive(Debug)]
pub struct ClusterOnlyOptions {
    /// The emulator's address (port 0 picks one).
    pub api: SocketAddr,
    pub kubeconfig: PathBuf,
    /// The region the nodes' labels name.
    pub region: String,
    pub kubelet: KubeletConfig,
    /// Told the emulator's URL once it listens and the kubeconfig is written.
    pub announce: Option<oneshot::Sender<String>>,
}

/// What the cluster-only server did, for its last line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClusterOnlyTotals {
    pub nodes_registered: usize,
    pub nodes_deleted: usize,
    pub pods_bound: usize,
    pub pods_started: usize,
    /// Writes that failed (each retried on a later tick).
    pub errors: usize,
}

/// Serves the cluster until `stop` resolves (see the module docs).
pub async fn serve_cluster(
    mut options: ClusterOnlyOptions,
    stop: impl std::future::Future<Output = ()>,
) -> Result<ClusterOnlyTotals, SimulationError> {
    let emulator = Emulator::new().map_err(SimulationError::Emulator)?;
    let client = emulator.client();
    super::cluster::seed_kube_dns(&client)
        .await
        .map_err(|source| SimulationError::Seed {
            what: "Service kube-system/kube-dns".to_owned(),
            source,
        })?;
    let ingress = ClusterIngress::new(client.clone());
    let state = ingress.state();
    let watchers = tokio::spawn(ingress.run());
    // The watchers only stop with the task; a dropped writer means they are gone already.
    if state.wait_until_ready().await.is_err() {
        watchers.abort();
        return Err(SimulationError::Watchers);
    }
    let view: Arc<dyn ClusterView> = Arc::new(state);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let mut kubelet = FakeKubelet::over_nodeclaims(
        client.clone(),
        Arc::clone(&view),
        Arc::clone(&clock),
        &options.region,
        options.kubelet,
    );
    let mut scheduler = FakeScheduler::new(client, view, clock);

    let api = emulator
        .serve(options.api)
        .await
        .map_err(SimulationError::Emulator)?;
    write_kubeconfig(&options.kubeconfig, &api.kubeconfig())?;
    if let Some(announce) = options.announce.take() {
        let _ = announce.send(api.url());
    }

    let mut totals = ClusterOnlyTotals::default();
    let mut stop = std::pin::pin!(stop);
    let mut ticks = tokio::time::interval(CLUSTER_TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = &mut stop => break,
            _ = ticks.tick() => {}
        }
        let kubelet_step = kubelet.tick().await;
        totals.nodes_registered += kubelet_step.registered;
        totals.nodes_deleted += kubelet_step.deleted;
        totals.pods_started += kubelet_step.pods_started;
        totals.errors += kubelet_step.errors;
        let bound = scheduler.tick().await;
        totals.pods_bound += bound.bound.len();
        totals.errors += bound.errors;
    }
    api.shutdown().await;
    emulator.close_watches();
    watchers.abort();
    Ok(totals)
}
