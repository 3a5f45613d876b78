//! Leader election on a `coordination.k8s.io/v1` Lease, with Karpenter's timing (lease 15 s,
//! renew deadline 10 s, retry every 2 s) and client-go's rules, written on the Lease API rather
//! than taken from a crate so it runs on tokio's clock (tests pause it) and against the emulator.
//!
//! A candidate tries every `retry_period` to take the lease: it may when the lease has no
//! holder, is its own, or has not changed for `lease_duration` as seen on the candidate's own
//! monotonic clock (like client-go, it never compares the holder's timestamps with its own
//! clock). Writes carry the read resourceVersion, so two candidates cannot both win. The leader
//! renews every `retry_period`; when no renewal succeeds for `renew_deadline` it has lost the
//! lease. On a clean stop the leader releases the lease so a successor takes over at its next
//! try instead of waiting out the lease (Karpenter's `LeaderElectionReleaseOnCancel`).
//!
//! [`LeaderElector::run`] publishes leadership on a `tokio::sync::watch` channel: `true` while
//! leading, and keeps a [`LeadershipGate`] that every write port of the actors checks. The gate
//! is open until `renew_deadline` after the *start* of the last successful renewal: another
//! candidate counts `lease_duration` (longer) from when it saw that renewal, which was after it
//! started, so the gate closes at least `lease_duration - renew_deadline` (5 s) before anyone
//! else can take the lease, whatever the network does. Each try is bounded by a timeout that
//! ends at the renew deadline (the kube client has no read timeout of its own on long polls), so
//! a hung renewal cannot keep a leader past it; leadership is then lost at the deadline itself.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;

/// Whether this replica may write: open while it holds a lease renewed within the renew deadline
/// (or always, without leader election). Clones share the state; checking it is a lock and a
/// clock read, cheap enough for every write.
#[derive(Debug, Clone, Default)]
pub struct LeadershipGate {
    state: Arc<Mutex<GateState>>,
}

#[derive(Debug, Clone, Copy, Default)]
enum GateState {
    /// Not leading (the start, and after a loss or a stop).
    #[default]
    Closed,
    /// Leading until this instant unless renewed.
    Until(Instant),
    /// Leader election is off: this replica is the only one.
    Always,
}

/// A write refused because this replica does not hold the lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this replica does not hold the leader lease (renewal past its deadline, lost or released)"
)]
pub struct NotLeading;

impl NotLeading {
    #[must_use]
    pub fn category(&self) -> &'static str {
        "not_leading"
    }
}

impl LeadershipGate {
    /// A closed gate.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A gate open for good (`DISABLE_LEADER_ELECTION`, simulations).
    #[must_use]
    pub fn always_open() -> Self {
        let gate = Self::new();
        gate.set(GateState::Always);
        gate
    }

    /// Opens the gate for good (leader election turned off).
    pub fn open_for_good(&self) {
        self.set(GateState::Always);
    }

    fn set(&self, state: GateState) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
    }

    fn get(&self) -> GateState {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens the gate until `until` (a renewal), unless it is open for good.
    pub fn open_until(&self, until: Instant) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !matches!(*state, GateState::Always) {
            *state = GateState::Until(until);
        }
    }

    /// Closes the gate (a loss or a release), unless it is open for good.
    pub fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !matches!(*state, GateState::Always) {
            *state = GateState::Closed;
        }
    }

    /// Whether writes may go out now.
    #[must_use]
    pub fn is_open(&self) -> bool {
        match self.get() {
            GateState::Closed => false,
            GateState::Until(until) => Instant::now() < until,
            GateState::Always => true,
        }
    }

    /// `Ok` when writes may go out now.
    pub fn check(&self) -> Result<(), NotLeading> {
        if self.is_open() {
            Ok(())
        } else {
            Err(NotLeading)
        }
    }
}

/// Karpenter's default Lease name.
pub const DEFAULT_LEASE_NAME: &str = "karpenter-leader-election";

/// Lease timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long a lease stays valid without renewal.
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// Pause between tries.
    pub retry_period: Duration,
}

impl Default for LeaseTiming {
    /// Karpenter's (controller-runtime's) values: 15 s, 10 s, 2 s.
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// How a [`LeaderElector::run`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Asked to stop; the lease was released if held.
    Stopped,
    /// Leadership was lost (no renewal within the renew deadline). Karpenter exits then.
    Lost,
}

/// Failures talking to the API server during an election step.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("reading lease {namespace}/{name}")]
    Read {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("writing lease {namespace}/{name}")]
    Write {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl LeaderError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Read { .. } => "read",
            Self::Write { .. } => "write",
        }
    }
}

/// One candidate for leadership.
#[derive(Debug)]
pub struct LeaderElector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timing: LeaseTiming,
    gate: LeadershipGate,
    /// The lease as last seen (spec and resourceVersion), and when it was seen to change.
    observed: Option<(Option<LeaseSpec>, Option<String>)>,
    observed_at: Instant,
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)
}

impl LeaderElector {
    /// A candidate named `identity` (unique per process: the pod name) for the Lease
    /// `namespace/name`.
    #[must_use]
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: LeaseTiming,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timing,
            gate: LeadershipGate::new(),
            observed: None,
            observed_at: Instant::now(),
        }
    }

    /// Keeps `gate` open while this candidate leads (instead of a gate of its own).
    #[must_use]
    pub fn with_gate(mut self, gate: LeadershipGate) -> Self {
        self.gate = gate;
        self
    }

    /// The gate this candidate keeps.
    #[must_use]
    pub fn gate(&self) -> LeadershipGate {
        self.gate.clone()
    }

    #[must_use]
    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn read_error(&self, source: kube::Error) -> LeaderError {
        LeaderError::Read {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    fn write_error(&self, source: kube::Error) -> LeaderError {
        LeaderError::Write {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    /// One try to take or renew the lease; `Ok(true)` when this candidate holds it after.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaderError> {
        let current = match self.api.get_opt(&self.name).await {
            Ok(current) => current,
            Err(error) => return Err(self.read_error(error)),
        };
        let Some(current) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds(self.timing.lease_duration)),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created);
                    Ok(true)
                }
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(error) => Err(self.write_error(error)),
            };
        };
        self.observe(&current);
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.identity;
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.timing.lease_duration, Duration::from_secs);
        if !holder.is_empty() && !mine && self.observed_at + duration > Instant::now() {
            return Ok(false);
        }
        let mut next = current.clone();
        next.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(seconds(self.timing.lease_duration)),
            renew_time: Some(now()),
            acquire_time: if mine {
                spec.acquire_time.clone()
            } else {
                Some(now())
            },
            lease_transitions: Some(
                spec.lease_transitions.unwrap_or(0) + i32::from(!mine && !holder.is_empty()),
            ),
            ..spec
        });
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(written) => {
                self.observe(&written);
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(self.write_error(error)),
        }
    }

    /// Notes the lease as seen now; restarts the expiry clock when it changed.
    fn observe(&mut self, lease: &Lease) {
        let seen = (lease.spec.clone(), lease.metadata.resource_version.clone());
        if self.observed.as_ref() != Some(&seen) {
            self.observed = Some(seen);
            self.observed_at = Instant::now();
        }
    }

    /// Gives the lease up if held (holder cleared, duration 1 s).
    pub async fn release(&mut self) -> Result<(), LeaderError> {
        let current = match self.api.get_opt(&self.name).await {
            Ok(Some(current)) => current,
            Ok(None) => return Ok(()),
            Err(error) => return Err(self.read_error(error)),
        };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        let mut released = current;
        released.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            renew_time: Some(now()),
            acquire_time: Some(now()),
            ..spec
        });
        match self
            .api
            .replace(&self.name, &PostParams::default(), &released)
            .await
        {
            Ok(_) => Ok(()),
            Err(error) => Err(self.write_error(error)),
        }
    }

    /// One try bounded by `limit`: a try that has not answered by then counts as failed.
    async fn try_within(&mut self, limit: Duration) -> Result<bool, TryError> {
        match tokio::time::timeout(limit, self.try_acquire_or_renew()).await {
            Ok(result) => result.map_err(TryError::Api),
            Err(_) => Err(TryError::TimedOut(limit)),
        }
    }

    /// Campaigns, leads and renews until `stop` completes or leadership is lost; publishes
    /// whether it leads on `leading` and keeps the gate open while it does.
    pub async fn run(
        mut self,
        leading: watch::Sender<bool>,
        stop: impl Future<Output = ()>,
    ) -> Ended {
        let mut stop = std::pin::pin!(stop);
        // client-go's leader election lines, which Karpenter writes through its logger.
        let lease = format!("{}/{}", self.namespace, self.name);
        tracing::info!("attempting to acquire leader lease {lease}...");
        // Campaign. A try that takes longer than the renew deadline would leave less than the
        // whole deadline to the first renewal; it counts as failed.
        let mut acquired_at = loop {
            let started = Instant::now();
            match self.try_within(self.timing.renew_deadline).await {
                Ok(true) => break started,
                Ok(false) => {}
                Err(error) => {
                    tracing::error!(
                        error = karpenter_actors::logs::err(&error),
                        "error retrieving resource lock {lease}"
                    );
                }
            }
            tokio::select! {
                () = &mut stop => return Ended::Stopped,
                () = tokio::time::sleep(self.timing.retry_period) => {}
            }
        };
        self.gate
            .open_until(acquired_at + self.timing.renew_deadline);
        leading.send_replace(true);
        tracing::info!(identity = %self.identity, "successfully acquired lease {lease}");
        loop {
            let deadline = acquired_at + self.timing.renew_deadline;
            tokio::select! {
                () = &mut stop => {
                    self.gate.close();
                    leading.send_replace(false);
                    if let Err(error) = self.release().await {
                        tracing::error!(
                            error = karpenter_actors::logs::err(&error),
                            "failed to release lock {lease}"
                        );
                    }
                    return Ended::Stopped;
                }
                // Wake at the deadline at the latest, so a loss is published when it happens.
                () = tokio::time::sleep(
                    self.timing.retry_period.min(deadline.saturating_duration_since(Instant::now()))
                ) => {}
            }
            let started = Instant::now();
            if started < deadline {
                // The try may run until the deadline and no further.
                match self.try_within(deadline - started).await {
                    Ok(true) => {
                        acquired_at = started;
                        self.gate.open_until(started + self.timing.renew_deadline);
                    }
                    Ok(false) => {}
                    Err(error) => {
                        tracing::error!(
                            error = karpenter_actors::logs::err(&error),
                            "error retrieving resource lock {lease}"
                        );
                    }
                }
            }
            if Instant::now() >= acquired_at + self.timing.renew_deadline {
                self.gate.close();
                leading.send_replace(false);
                tracing::error!(
                    identity = %self.identity,
                    error = "leader election lost",
                    "failed to renew lease {lease}"
                );
                return Ended::Lost;
            }
        }
    }
}

/// A failed try: the API answered with an error, or did not answer in time.
#[derive(Debug, thiserror::Error)]
enum TryError {
    #[error(transparent)]
    Api(LeaderError),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}
