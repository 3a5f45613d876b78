//! The daemon's readiness and liveness checks.
//!
//! ```text
//! startup_checks: cache-synced (the store's first list of every kind)
//!   crds, aws, interruption-queue: probes retried every CHECK_RETRY until they pass, each
//!   result published in a cell the check reads
//! exit_checks: leader-election fails once the lease is lost, actors (liveness) once the root
//!   supervisor gave up
//! ```
//!
//! A probe fails with a typed [`ProbeError`]; the check keeps its text only, as `/readyz` only
//! displays it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use karpenter_actors::deps::AwsPorts;
use karpenter_actors::ports::aws_error::AwsError;
use karpenter_config::Settings;
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool};
use kube::api::ListParams;
use kube::{Api, Client, Resource};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::assembly::Exit;
use crate::http::{CheckResult, HealthChecks};
use crate::kube::state::ClusterState;

/// How often a failing startup check (CRDs, AWS, interruption queue) is tried again.
const CHECK_RETRY: Duration = Duration::from_secs(15);

/// Why a startup probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{plural}.{group} is not served: install the CRDs (charts/karpenter-crd)")]
    CrdNotServed { plural: String, group: String },
    #[error("listing {plural}")]
    List {
        plural: String,
        #[source]
        source: kube::Error,
    },
    #[error("EC2 DescribeAvailabilityZones")]
    Ec2(#[source] AwsError),
    #[error("SQS queue {queue} (INTERRUPTION_QUEUE)")]
    InterruptionQueue {
        queue: String,
        #[source]
        source: AwsError,
    },
}

impl ProbeError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::CrdNotServed { .. } => "crd_not_served",
            Self::List { .. } => "list",
            Self::Ec2(_) => "ec2",
            Self::InterruptionQueue { .. } => "interruption_queue",
        }
    }
}

type Cell = Arc<Mutex<CheckResult>>;

/// A named check whose result a background task keeps current.
fn background_check(checks: &HealthChecks, name: &str, initial: &str) -> Cell {
    let cell: Cell = Arc::new(Mutex::new(Err(initial.to_owned())));
    let reader = Arc::clone(&cell);
    checks.add(name, move || {
        reader
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    });
    cell
}

/// Tries `probe` until it succeeds, publishing each result (its text: the check only shows it)
/// in `cell`.
fn retry_until_ok<F, Fut>(cell: Cell, probe: F) -> JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), ProbeError>> + Send,
{
    tokio::spawn(async move {
        loop {
            let result = probe()
                .await
                .map_err(|error| karpenter_core::errors::chain(&error));
            let ok = result.is_ok();
            *cell.lock().unwrap_or_else(PoisonError::into_inner) = result;
            if ok {
                return;
            }
            tokio::time::sleep(CHECK_RETRY).await;
        }
    })
}

async fn served<K>(client: &Client) -> Result<(), ProbeError>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(ProbeError::CrdNotServed {
            plural: K::plural(&()).into_owned(),
            group: K::group(&()).into_owned(),
        }),
        Err(source) => Err(ProbeError::List {
            plural: K::plural(&()).into_owned(),
            source,
        }),
    }
}

/// The readiness checks of the startup: the cache has synced, and (kept current by probes
/// retried until they pass) the CRDs are served, AWS answers, the interruption queue exists.
/// Returns the probe tasks.
pub(super) fn startup_checks(
    readiness: &HealthChecks,
    settings: &Settings,
    client: &Client,
    aws: &AwsPorts,
    state: &ClusterState,
) -> Vec<JoinHandle<()>> {
    let synced = state.clone();
    readiness.add("cache-synced", move || {
        if synced.is_synced() {
            Ok(())
        } else {
            Err("waiting for the first list of every watched kind".to_owned())
        }
    });
    let mut tasks = Vec::new();
    let crds = background_check(readiness, "crds", "not checked yet");
    let crd_client = client.clone();
    tasks.push(retry_until_ok(crds, move || {
        let client = crd_client.clone();
        async move {
            served::<NodePool>(&client).await?;
            served::<NodeClaim>(&client).await?;
            served::<EC2NodeClass>(&client).await
        }
    }));
    let reachable = background_check(readiness, "aws", "not checked yet");
    let ec2 = Arc::clone(&aws.ec2);
    tasks.push(retry_until_ok(reachable, move || {
        let ec2 = Arc::clone(&ec2);
        async move {
            ec2.describe_availability_zones()
                .await
                .map(|_| ())
                .map_err(ProbeError::Ec2)
        }
    }));
    if let Some(queue) = settings.interruption_queue.clone() {
        let configured = background_check(readiness, "interruption-queue", "not checked yet");
        let sqs = Arc::clone(&aws.sqs);
        tasks.push(retry_until_ok(configured, move || {
            let sqs = Arc::clone(&sqs);
            let queue = queue.clone();
            async move {
                sqs.get_queue_url(&queue)
                    .await
                    .map(|_| ())
                    .map_err(|source| ProbeError::InterruptionQueue { queue, source })
            }
        }));
    }
    tasks
}

/// The checks that follow the daemon's own exit: readiness fails once the lease is lost,
/// liveness once the root supervisor gave up.
pub(super) fn exit_checks(
    readiness: &HealthChecks,
    liveness: &HealthChecks,
    exit: &watch::Receiver<Option<Exit>>,
) {
    let lost = exit.clone();
    readiness.add("leader-election", move || match &*lost.borrow() {
        Some(Exit::LostLeadership) => Err("lost the lease".to_owned()),
        _ => Ok(()),
    });
    let escalated = exit.clone();
    liveness.add("actors", move || match &*escalated.borrow() {
        Some(Exit::Escalated(reason)) => Err(format!("the root supervisor gave up: {reason}")),
        _ => Ok(()),
    });
}
