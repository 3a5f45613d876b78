//! Leader election on a Lease, on tokio's paused clock: one leader at a time, handover when the
//! leader stops renewing (after the lease duration) or releases (at the next retry), a
//! leader that cannot renew steps down after the renew deadline, and one whose renewal hangs
//! closes its write gate at the deadline, before anyone else can lead.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use karpenter::emulator::{Emulator, FaultRule, Verb};
use karpenter::kube::leader::{
    DEFAULT_LEASE_NAME, Ended, LeaderElector, LeadershipGate, LeaseTiming,
};
use kube::Api;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

fn candidate(emulator: &Emulator, identity: &str) -> LeaderElector {
    LeaderElector::new(
        emulator.client(),
        "kube-system",
        DEFAULT_LEASE_NAME,
        identity,
        LeaseTiming::default(),
    )
}

async fn until_leading(leading: &mut watch::Receiver<bool>) {
    leading.wait_for(|l| *l).await.unwrap();
}

async fn holder(emulator: &Emulator) -> (Option<String>, Option<i32>) {
    let leases: Api<Lease> = Api::namespaced(emulator.client(), "kube-system");
    let spec = leases.get(DEFAULT_LEASE_NAME).await.unwrap().spec.unwrap();
    (spec.holder_identity, spec.lease_transitions)
}

#[tokio::test(start_paused = true)]
async fn a_follower_takes_over_once_the_leader_stops_renewing_for_a_lease_duration() {
    let emulator = Emulator::new().unwrap();
    let (a_tx, mut a_leading) = watch::channel(false);
    let a = tokio::spawn(candidate(&emulator, "a").run(a_tx, std::future::pending()));
    until_leading(&mut a_leading).await;

    let (b_tx, mut b_leading) = watch::channel(false);
    let b = tokio::spawn(candidate(&emulator, "b").run(b_tx, std::future::pending()));
    // A minute of renewals: b never leads meanwhile.
    tokio::time::sleep(Duration::from_mins(1)).await;
    assert!(!*b_leading.borrow());
    assert_eq!(holder(&emulator).await, (Some("a".into()), Some(0)));

    // a crashes without releasing.
    a.abort();
    let crashed = Instant::now();
    until_leading(&mut b_leading).await;
    let waited = crashed.elapsed();
    let timing = LeaseTiming::default();
    assert!(
        waited
            >= timing
                .lease_duration
                .checked_sub(timing.retry_period)
                .unwrap(),
        "took over after {waited:?}"
    );
    assert!(
        waited <= timing.lease_duration + 2 * timing.retry_period,
        "took over after {waited:?}"
    );
    assert_eq!(holder(&emulator).await, (Some("b".into()), Some(1)));
    b.abort();
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_stops_releases_the_lease_for_a_quick_handover() {
    let emulator = Emulator::new().unwrap();
    let (stop_a, stopped_a) = oneshot::channel::<()>();
    let (a_tx, mut a_leading) = watch::channel(false);
    let a = tokio::spawn(candidate(&emulator, "a").run(a_tx, async {
        let _ = stopped_a.await;
    }));
    until_leading(&mut a_leading).await;
    let (b_tx, mut b_leading) = watch::channel(false);
    let b = tokio::spawn(candidate(&emulator, "b").run(b_tx, std::future::pending()));
    tokio::time::sleep(Duration::from_secs(5)).await;

    stop_a.send(()).unwrap();
    assert_eq!(a.await.unwrap(), Ended::Stopped);
    assert!(!*a_leading.borrow());
    let released = Instant::now();
    until_leading(&mut b_leading).await;
    assert!(released.elapsed() <= LeaseTiming::default().retry_period);
    assert_eq!(holder(&emulator).await.0.as_deref(), Some("b"));
    b.abort();
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_steps_down_after_the_renew_deadline() {
    let emulator = Emulator::new().unwrap();
    let (a_tx, mut a_leading) = watch::channel(false);
    let a = tokio::spawn(candidate(&emulator, "a").run(a_tx, std::future::pending()));
    until_leading(&mut a_leading).await;
    emulator
        .faults()
        .inject(FaultRule::fail(500).on(Verb::Update).resource("leases"));
    let failing = Instant::now();
    assert_eq!(a.await.unwrap(), Ended::Lost);
    assert!(!*a_leading.borrow());
    let timing = LeaseTiming::default();
    let waited = failing.elapsed();
    assert!(
        waited
            >= timing
                .renew_deadline
                .checked_sub(timing.retry_period)
                .unwrap()
            && waited <= timing.renew_deadline + timing.retry_period,
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hung_renewal_closes_the_gate_and_ends_leadership_at_the_renew_deadline() {
    let emulator = Emulator::new().unwrap();
    let gate = LeadershipGate::new();
    let (a_tx, mut a_leading) = watch::channel(false);
    assert!(!gate.is_open(), "closed before the first acquisition");
    let a = tokio::spawn(
        candidate(&emulator, "a")
            .with_gate(gate.clone())
            .run(a_tx, std::future::pending()),
    );
    until_leading(&mut a_leading).await;
    assert!(gate.is_open());
    // Every renewal from now on hangs for an hour (the API server accepts the connection and
    // never answers).
    emulator.faults().inject(
        FaultRule::delay(Duration::from_hours(1))
            .on(Verb::Update)
            .resource("leases"),
    );
    let hung = Instant::now();
    let timing = LeaseTiming::default();
    // The last successful renewal started at most one retry period before the hang.
    let mut closed_at = None;
    while closed_at.is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if !gate.is_open() {
            closed_at = Some(hung.elapsed());
        }
    }
    let closed_at = closed_at.unwrap();
    assert!(
        closed_at <= timing.renew_deadline,
        "the gate closed {closed_at:?} after the hang, past the renew deadline"
    );
    assert!(
        closed_at + timing.retry_period >= timing.renew_deadline,
        "closed too early: {closed_at:?}"
    );
    assert_eq!(a.await.unwrap(), Ended::Lost);
    let ended = hung.elapsed();
    assert!(
        ended <= timing.renew_deadline + Duration::from_millis(200),
        "a hung renewal kept the elector past the deadline: {ended:?}"
    );
    assert!(!*a_leading.borrow());
    assert!(!gate.is_open());
    // Another candidate can only take over once the lease expired in its own eyes: after
    // the gate closed.
    emulator.faults().clear();
    let (b_tx, mut b_leading) = watch::channel(false);
    let b = tokio::spawn(candidate(&emulator, "b").run(b_tx, std::future::pending()));
    until_leading(&mut b_leading).await;
    assert!(
        hung.elapsed()
            >= closed_at
                + timing
                    .lease_duration
                    .checked_sub(timing.renew_deadline)
                    .unwrap(),
        "b led {:?} after the hang, a's gate closed at {closed_at:?}",
        hung.elapsed()
    );
    b.abort();
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_closes_the_gate_before_the_release_is_written() {
    let emulator = Emulator::new().unwrap();
    let gate = LeadershipGate::new();
    let (stop, stopped) = oneshot::channel::<()>();
    let (a_tx, mut a_leading) = watch::channel(false);
    let a = tokio::spawn(
        candidate(&emulator, "a")
            .with_gate(gate.clone())
            .run(a_tx, async {
                let _ = stopped.await;
            }),
    );
    until_leading(&mut a_leading).await;
    // The release hangs: the gate must not wait for it.
    emulator.faults().inject(
        FaultRule::delay(Duration::from_hours(1))
            .on(Verb::Update)
            .resource("leases"),
    );
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!gate.is_open());
    assert!(!*a_leading.borrow());
    a.abort();
}
