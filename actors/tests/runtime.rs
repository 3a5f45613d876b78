//! The actor kit under failure: panics, fatal errors, start failures, escalation, one-for-all,
//! shutdown order, fault plans, mailbox bounds, and the registry and Prometheus output. Every
//! test runs in an actix system with tokio time paused, so backoffs and timeouts take no wall
//! time and nothing sleeps.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use karpenter_actors::runtime::{
    ActorCtx, ActorError, ActorKit, ActorRef, DEFAULT_PARK_FIRST, Family, FaultAction, FaultPlan,
    FaultRule, GroupSpec, Handles, KitOptions, Mail, Overflow, ParkChange, ParkHook, ParkNotice,
    RestartBackoff, RestartPolicy, RootGroup, STATE_PARKED, SendError, StopReason, Supervised,
    family_escalation_limit,
};
use prometheus_client::registry::Registry;

const TIMEOUT: Duration = Duration::from_secs(30);

/// A counter whose state is lost on restart.
struct Counter {
    count: u64,
    log: Option<Arc<Mutex<Vec<String>>>>,
    key: String,
}

#[derive(Default)]
struct CounterDeps {
    /// Shared log of `stopped` calls, to check the order.
    log: Option<Arc<Mutex<Vec<String>>>>,
    /// `started` fails while this is above zero (and counts down).
    failing_starts: AtomicU32,
}

impl Supervised for Counter {
    const KIND: &'static str = "Counter";
    // Tests fill it on purpose in one case; small keeps that cheap.
    const MAILBOX_CAPACITY: usize = 4;
    type Deps = CounterDeps;

    fn build(key: &str, deps: &CounterDeps) -> Result<Self, ActorError> {
        Ok(Self {
            count: 0,
            log: deps.log.clone(),
            key: key.to_owned(),
        })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.set_state("counting");
        Ok(())
    }

    fn stopped(&mut self, _ctx: &mut ActorCtx<Self>) {
        if let Some(log) = &self.log {
            log.lock().unwrap().push(self.key.clone());
        }
    }
}

struct Add(u64);
impl Mail for Add {
    type Reply = u64;
    const NAME: &'static str = "Add";
}
impl Handles<Add> for Counter {
    async fn handle(&mut self, Add(n): Add, _: &mut ActorCtx<Self>) -> Result<u64, ActorError> {
        self.count += n;
        Ok(self.count)
    }
}

struct Boom;
impl Mail for Boom {
    type Reply = ();
    const NAME: &'static str = "Boom";
}
impl Handles<Boom> for Counter {
    async fn handle(&mut self, _: Boom, _: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        panic!("boom at {}", self.count);
    }
}

/// Panics after an await, so the panic happens in a later poll.
struct LateBoom;
impl Mail for LateBoom {
    type Reply = ();
    const NAME: &'static str = "LateBoom";
}
impl Handles<LateBoom> for Counter {
    async fn handle(&mut self, _: LateBoom, _: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        panic!("late boom");
    }
}

struct Wait(Duration);
impl Mail for Wait {
    type Reply = u64;
    const NAME: &'static str = "Wait";
}
impl Handles<Wait> for Counter {
    async fn handle(&mut self, Wait(d): Wait, _: &mut ActorCtx<Self>) -> Result<u64, ActorError> {
        tokio::time::sleep(d).await;
        Ok(self.count)
    }
}

struct Fail {
    fatal: bool,
}
impl Mail for Fail {
    type Reply = ();
    const NAME: &'static str = "Fail";
}
impl Handles<Fail> for Counter {
    async fn handle(&mut self, msg: Fail, _: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        let error = ActorError::new("test_failure", "asked to fail");
        Err(if msg.fatal { error.into_fatal() } else { error })
    }
}

/// Fails with an AWS error, as a handler whose EC2 call was refused does.
struct FailOnAws;
impl Mail for FailOnAws {
    type Reply = ();
    const NAME: &'static str = "FailOnAws";
}
impl Handles<FailOnAws> for Counter {
    async fn handle(&mut self, _: FailOnAws, _: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        let aws = karpenter_actors::ports::aws_error::AwsError::new(
            karpenter_actors::ports::aws_error::AwsService::Ec2,
            "CreateFleet",
            Some("UnauthorizedOperation"),
            "You are not authorized. Encoded authorization failure message: AbCd",
        )
        .with_status(403);
        Err(ActorError::with_context(
            "unauthorized",
            "launching nodeclaim default-x",
            &aws,
        ))
    }
}

struct StopSelf;
impl Mail for StopSelf {
    type Reply = ();
    const NAME: &'static str = "StopSelf";
}
impl Handles<StopSelf> for Counter {
    async fn handle(&mut self, _: StopSelf, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.stop();
        Ok(())
    }
}

struct Tick;
impl Mail for Tick {
    type Reply = ();
    const NAME: &'static str = "Tick";
}
impl Handles<Tick> for Counter {
    async fn handle(&mut self, _: Tick, _: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        self.count += 100;
        Ok(())
    }
}

struct ScheduleTick(Duration);
impl Mail for ScheduleTick {
    type Reply = ();
    const NAME: &'static str = "ScheduleTick";
}
impl Handles<ScheduleTick> for Counter {
    async fn handle(
        &mut self,
        m: ScheduleTick,
        ctx: &mut ActorCtx<Self>,
    ) -> Result<(), ActorError> {
        ctx.send_after(m.0, Tick);
        Ok(())
    }
}

/// Same as Counter but transient: a normal stop removes it.
struct Member;
impl Supervised for Member {
    const KIND: &'static str = "Member";
    // One event at a time in these tests.
    const MAILBOX_CAPACITY: usize = 8;
    const RESTART: RestartPolicy = RestartPolicy::Transient;
    type Deps = ();

    fn build(_: &str, (): &()) -> Result<Self, ActorError> {
        Ok(Self)
    }
}
impl Handles<StopSelf> for Member {
    async fn handle(&mut self, _: StopSelf, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.stop();
        Ok(())
    }
}

/// Fails in `started` while the deps say so.
struct Flaky {
    deps_failures: u32,
}
impl Supervised for Flaky {
    const KIND: &'static str = "Flaky";
    // Never more than one message in flight in these tests.
    const MAILBOX_CAPACITY: usize = 8;
    type Deps = CounterDeps;

    fn build(_: &str, deps: &CounterDeps) -> Result<Self, ActorError> {
        let before = deps
            .failing_starts
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        Ok(Self {
            deps_failures: u32::from(before.is_ok()),
        })
    }

    async fn started(&mut self, _: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        tokio::task::yield_now().await;
        if self.deps_failures > 0 {
            return Err(ActorError::new("start", "dependency not ready"));
        }
        Ok(())
    }
}
impl Handles<Add> for Flaky {
    async fn handle(&mut self, Add(n): Add, _: &mut ActorCtx<Self>) -> Result<u64, ActorError> {
        Ok(n)
    }
}

fn kit() -> (ActorKit, Registry) {
    let mut registry = Registry::default();
    let kit = ActorKit::new(&mut registry, KitOptions::default());
    (kit, registry)
}

fn kit_with_faults(plan: FaultPlan) -> (ActorKit, Registry) {
    let mut registry = Registry::default();
    let kit = ActorKit::new(
        &mut registry,
        KitOptions {
            faults: Some(Arc::new(plan)),
            ..KitOptions::default()
        },
    );
    (kit, registry)
}

fn fast_backoff() -> RestartBackoff {
    RestartBackoff {
        jitter_seed: Some(1),
        ..RestartBackoff::default()
    }
}

/// A family of counters under a root that gives up at its first escalation, so the family's
/// escalation is visible as the root's.
fn counters_under_a_root_that_escalates_at_once(kit: &ActorKit) -> (RootGroup, Family<Counter>) {
    let root = kit
        .root(GroupSpec::one_for_one("root").intensity(0, Duration::from_mins(1)))
        .unwrap();
    let family = root
        .family::<Counter>(
            GroupSpec::one_for_one("counters").backoff(fast_backoff()),
            CounterDeps::default(),
        )
        .unwrap();
    (root, family)
}

async fn add(actor: &ActorRef<Counter>, n: u64) -> u64 {
    actor.request(Add(n), TIMEOUT).await.unwrap()
}

#[actix::test]
async fn a_panicking_handler_restarts_the_actor_with_fresh_state_and_counts_one_panic() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    assert_eq!(add(&counter, 5).await, 5);

    let error = counter.request(Boom, TIMEOUT).await.unwrap_err();
    assert!(matches!(error, SendError::Panicked { ref panic, .. } if panic == "boom at 5"));

    assert_eq!(
        add(&counter, 1).await,
        1,
        "a fresh instance starts from zero"
    );
    let snapshot = kit.snapshot();
    let actor = snapshot.actor("Counter", "c").unwrap();
    assert_eq!(actor.panics, 1);
    assert_eq!(actor.restarts, 1);
    assert_eq!(actor.state, "counting");
    assert!(actor.last_error.as_deref().unwrap().contains("boom at 5"));
}

#[actix::test]
async fn callers_of_a_panicked_request_get_an_error() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    // A panic on the first poll and one after an await: both answer the caller at once.
    let first = counter.request(Boom, TIMEOUT).await.unwrap_err();
    assert_eq!(first.category(), "panicked");
    let late = counter.request(LateBoom, TIMEOUT).await.unwrap_err();
    assert!(
        matches!(late, SendError::Panicked { ref panic, message: "LateBoom", .. } if panic == "late boom"),
        "{late}"
    );
    // A fatal error answers the caller too, and restarts.
    let fatal = counter
        .request(Fail { fatal: true }, TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(fatal.actor_error().unwrap().category(), "test_failure");
    assert_eq!(add(&counter, 2).await, 2);
    assert_eq!(counter.restarts(), 3);
    assert_eq!(kit.snapshot().actor("Counter", "c").unwrap().panics, 2);
}

#[actix::test]
async fn a_recoverable_error_keeps_the_state() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    add(&counter, 3).await;
    let error = counter
        .request(Fail { fatal: false }, TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(error.category(), "test_failure");
    assert_eq!(add(&counter, 1).await, 4);
    let snapshot = kit.snapshot();
    let actor = snapshot.actor("Counter", "c").unwrap();
    assert_eq!((actor.errors, actor.restarts), (1, 0));
    assert_eq!(
        actor.last_error.as_deref(),
        Some("test_failure: asked to fail")
    );
}

#[actix::test]
async fn an_actors_last_error_shows_an_aws_errors_fields_but_not_the_services_text() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    let error = counter.request(FailOnAws, TIMEOUT).await.unwrap_err();
    // The caller (and the logs) get the whole text.
    assert!(error.to_string().contains("AbCd"), "{error}");
    let snapshot = kit.snapshot();
    let last = snapshot
        .actor("Counter", "c")
        .unwrap()
        .last_error
        .clone()
        .unwrap();
    assert!(
        !last.contains("not authorized") && !last.contains("AbCd"),
        "{last}"
    );
    assert!(
        last.starts_with("unauthorized: launching nodeclaim default-x: "),
        "{last}"
    );
    assert!(
        last.contains("aws-error-code=UnauthorizedOperation")
            && last.contains("aws-operation-name=CreateFleet")
            && last.contains("aws-status-code=403"),
        "{last}"
    );
}

#[actix::test]
async fn a_child_that_exceeds_its_intensity_escalates() {
    tokio::time::pause();
    let (kit, registry) = kit();
    let root = kit
        .root(GroupSpec::one_for_one("root").intensity(0, Duration::from_mins(1)))
        .unwrap();
    let inner = root
        .group(
            GroupSpec::one_for_one("inner")
                .intensity(2, Duration::from_mins(1))
                .backoff(fast_backoff()),
        )
        .unwrap();
    let counter = inner.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    for _ in 0..3 {
        counter.request(Boom, TIMEOUT).await.unwrap_err();
    }
    let reason = tokio::time::timeout(TIMEOUT, root.escalated())
        .await
        .expect("root escalates");
    match reason {
        StopReason::Escalated { group, cause } => {
            assert_eq!(group, "root");
            assert!(cause.contains("group inner"), "{cause}");
        }
        other => panic!("expected an escalation, got {other:?}"),
    }
    let snapshot = kit.snapshot();
    let inner_snapshot = snapshot
        .supervisors
        .iter()
        .find(|s| s.name == "inner")
        .unwrap();
    assert_eq!(inner_snapshot.escalations, 1);
    assert_eq!(
        inner_snapshot.restarts, 2,
        "two restarts, the third escalated"
    );
    assert_eq!(snapshot.actor("Counter", "c").unwrap().state, "suspended");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(text.contains("karpenter_actor_supervisor_escalations_total{supervisor=\"inner\"} 1"));
}

#[actix::test]
async fn an_escalated_group_is_restarted_by_its_parent_with_fresh_children() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit
        .root(GroupSpec::one_for_one("root").backoff(fast_backoff()))
        .unwrap();
    let inner = root
        .group(
            GroupSpec::one_for_one("inner")
                .intensity(0, Duration::from_mins(1))
                .backoff(fast_backoff()),
        )
        .unwrap();
    let counter = inner.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    add(&counter, 7).await;
    counter.request(Boom, TIMEOUT).await.unwrap_err();
    // Queued while the inner group is escalated: delivered once the root restarts it.
    assert_eq!(add(&counter, 1).await, 1);
    assert!(root.escalation().is_none());
    let snapshot = kit.snapshot();
    let root_snapshot = snapshot
        .supervisors
        .iter()
        .find(|s| s.name == "root")
        .unwrap();
    assert_eq!(root_snapshot.restarts, 1);
}

#[actix::test]
async fn a_child_that_fails_in_started_is_restarted_and_then_serves() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit
        .root(GroupSpec::one_for_one("root").backoff(fast_backoff()))
        .unwrap();
    let deps = CounterDeps {
        failing_starts: AtomicU32::new(2),
        ..CounterDeps::default()
    };
    let flaky = root.spawn::<Flaky>("f", deps).unwrap();
    assert_eq!(flaky.request(Add(9), TIMEOUT).await.unwrap(), 9);
    let snapshot = kit.snapshot();
    let actor = snapshot.actor("Flaky", "f").unwrap();
    assert_eq!((actor.restarts, actor.errors), (2, 2));
    assert_eq!(actor.state, "running");
    assert!(
        actor
            .last_error
            .as_deref()
            .unwrap()
            .contains("dependency not ready")
    );
}

#[actix::test]
async fn a_panic_injected_in_started_is_supervised() {
    tokio::time::pause();
    let plan = FaultPlan::new(1)
        .with_rule(
            FaultRule::new(FaultAction::Panic)
                .kind("Counter")
                .message("started")
                .nth(1),
        )
        .unwrap();
    let (kit, _) = kit_with_faults(plan);
    let root = kit
        .root(GroupSpec::one_for_one("root").backoff(fast_backoff()))
        .unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    assert_eq!(add(&counter, 1).await, 1);
    let snapshot = kit.snapshot();
    let actor = snapshot.actor("Counter", "c").unwrap();
    assert_eq!((actor.panics, actor.restarts), (1, 1));
}

#[actix::test]
async fn one_for_all_restarts_the_whole_group() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let group = root
        .group(GroupSpec::one_for_all("aws").backoff(fast_backoff()))
        .unwrap();
    let a = group.spawn::<Counter>("a", CounterDeps::default()).unwrap();
    let b = group.spawn::<Counter>("b", CounterDeps::default()).unwrap();
    let c = group.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    for actor in [&a, &b, &c] {
        add(actor, 5).await;
    }
    // A handler in flight in a sibling is cancelled, and its caller told so.
    let waiting = {
        let a = a.clone();
        actix::spawn(async move { a.request(Wait(Duration::from_secs(10)), TIMEOUT).await })
    };
    tokio::task::yield_now().await;
    b.request(Boom, TIMEOUT).await.unwrap_err();
    let interrupted = waiting.await.unwrap().unwrap_err();
    assert!(
        matches!(
            interrupted,
            SendError::Interrupted {
                message: "Wait",
                ..
            }
        ),
        "{interrupted}"
    );
    for actor in [&a, &b, &c] {
        assert_eq!(add(actor, 1).await, 1, "{} restarted fresh", actor.key());
        assert_eq!(actor.restarts(), 1);
    }
}

#[actix::test]
async fn one_for_one_restarts_only_the_failed_child() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit
        .root(GroupSpec::one_for_one("root").backoff(fast_backoff()))
        .unwrap();
    let a = root.spawn::<Counter>("a", CounterDeps::default()).unwrap();
    let b = root.spawn::<Counter>("b", CounterDeps::default()).unwrap();
    add(&a, 5).await;
    add(&b, 5).await;
    b.request(Boom, TIMEOUT).await.unwrap_err();
    assert_eq!(add(&a, 1).await, 6);
    assert_eq!(add(&b, 1).await, 1);
}

#[actix::test]
async fn a_message_sent_while_a_child_restarts_is_delivered_to_the_fresh_instance() {
    tokio::time::pause();
    let (kit, _) = kit();
    let backoff = RestartBackoff {
        min: Duration::from_secs(10),
        jitter: false,
        ..RestartBackoff::default()
    };
    let root = kit
        .root(GroupSpec::one_for_one("root").backoff(backoff))
        .unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    add(&counter, 5).await;
    counter.request(Boom, TIMEOUT).await.unwrap_err();
    // The restart waits 10 s: the event and the request queue meanwhile.
    counter.try_send_event(Add(2)).unwrap();
    let start = tokio::time::Instant::now();
    assert_eq!(add(&counter, 1).await, 3, "both go to the fresh instance");
    assert!(start.elapsed() >= Duration::from_secs(10));
    // A request whose timeout is shorter than the restart fails with a clear error.
    counter.request(Boom, TIMEOUT).await.unwrap_err();
    let error = counter
        .request(Add(1), Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(error, SendError::Timeout { message: "Add", .. }),
        "{error}"
    );
}

#[actix::test]
async fn a_request_queued_behind_an_escalation_fails_with_stopped_when_the_group_stops() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit
        .root(GroupSpec::one_for_one("root").intensity(0, Duration::from_mins(1)))
        .unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    counter.request(Boom, TIMEOUT).await.unwrap_err();
    root.escalated().await;
    let pending = {
        let counter = counter.clone();
        actix::spawn(async move { counter.request(Add(1), TIMEOUT).await })
    };
    tokio::task::yield_now().await;
    root.stop().await;
    let error = pending.await.unwrap().unwrap_err();
    assert!(
        matches!(error, SendError::Stopped { message: "Add", .. }),
        "{error}"
    );
    let error = counter.try_send_event(Add(1)).unwrap_err();
    assert!(matches!(error, Overflow::Stopped { .. }), "{error}");
    assert!(kit.registry().is_empty());
}

#[actix::test]
async fn stopping_a_supervisor_stops_children_in_reverse_start_order() {
    tokio::time::pause();
    let (kit, _) = kit();
    let log = Arc::new(Mutex::new(Vec::new()));
    let deps = || CounterDeps {
        log: Some(Arc::clone(&log)),
        ..CounterDeps::default()
    };
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let a = root.spawn::<Counter>("a", deps()).unwrap();
    root.spawn::<Counter>("b", deps()).unwrap();
    let inner = root.group(GroupSpec::one_for_one("inner")).unwrap();
    inner.spawn::<Counter>("inner-1", deps()).unwrap();
    inner.spawn::<Counter>("inner-2", deps()).unwrap();
    root.spawn::<Counter>("c", deps()).unwrap();
    add(&a, 1).await;
    root.stop().await;
    assert_eq!(
        *log.lock().unwrap(),
        vec!["c", "inner-2", "inner-1", "b", "a"]
    );
    assert!(kit.registry().is_empty());
    assert!(kit.snapshot().supervisors.is_empty());
    let late = root.spawn::<Counter>("late", deps()).unwrap_err();
    assert_eq!(late.category(), "group_stopped");
}

#[actix::test]
async fn a_family_routes_by_key_and_a_restarted_member_keeps_its_key() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let family = root
        .family::<Counter>(
            GroupSpec::one_for_one("counters").backoff(fast_backoff()),
            CounterDeps::default(),
        )
        .unwrap();
    family.ensure("x").unwrap();
    family.ensure("y").unwrap();
    assert_eq!(family.request("x", Add(2), TIMEOUT).await.unwrap(), 2);
    assert_eq!(family.request("y", Add(3), TIMEOUT).await.unwrap(), 3);
    family.request("x", Boom, TIMEOUT).await.unwrap_err();
    assert_eq!(family.request("x", Add(1), TIMEOUT).await.unwrap(), 1);
    assert_eq!(family.keys(), vec!["x", "y"]);
    let missing = family.request("z", Add(1), TIMEOUT).await.unwrap_err();
    assert!(matches!(missing, SendError::NoActor { .. }));

    let y = family.get("y").unwrap();
    assert!(family.remove("y"));
    y.terminated().await;
    assert_eq!(family.keys(), vec!["x"]);
    assert_eq!(kit.registry().count_kind("Counter"), 1);
    assert_eq!(
        family
            .ensure("y")
            .unwrap()
            .request(Add(1), TIMEOUT)
            .await
            .unwrap(),
        1
    );
}

/// A hook that keeps every notice.
fn recording_hook() -> (ParkHook, Arc<Mutex<Vec<ParkNotice>>>) {
    let notices = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&notices);
    let hook: ParkHook = Arc::new(move |notice: &ParkNotice| {
        seen.lock().unwrap().push(notice.clone());
    });
    (hook, notices)
}

fn prometheus(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

#[actix::test]
async fn a_member_that_keeps_failing_is_parked_while_its_family_and_siblings_keep_working() {
    tokio::time::pause();
    let (kit, registry) = kit();
    let root = kit
        .root(GroupSpec::one_for_one("root").backoff(fast_backoff()))
        .unwrap();
    let (hook, notices) = recording_hook();
    let family = root
        .family_with_park_hook::<Counter>(
            GroupSpec::one_for_one("counters").backoff(fast_backoff()),
            CounterDeps::default(),
            hook,
        )
        .unwrap();
    let bad = family.ensure("bad").unwrap();
    family.ensure("good").unwrap();
    // Five restarts within the window are restarts; the sixth failure parks the member.
    for _ in 0..6 {
        let error = bad.request(Boom, TIMEOUT).await.unwrap_err();
        assert_eq!(error.category(), "panicked");
    }
    let snapshot = kit.snapshot();
    let parked = snapshot.actor("Counter", "bad").unwrap();
    assert_eq!(parked.state, STATE_PARKED);
    assert_eq!(parked.restarts, 5);
    let left = parked.unpark_in_seconds.unwrap();
    assert!(
        (DEFAULT_PARK_FIRST.as_secs_f64() - 1.0..=DEFAULT_PARK_FIRST.as_secs_f64()).contains(&left),
        "{left}"
    );
    assert_eq!(snapshot.parked(), 1);
    let group = snapshot.supervisor("counters").unwrap();
    assert_eq!((group.parked, group.escalations), (1, 0));
    assert!(root.escalation().is_none());

    // Sends to it fail at once, and are counted; its sibling is untouched.
    let error = family.request("bad", Add(1), TIMEOUT).await.unwrap_err();
    assert!(
        matches!(error, SendError::Parked { message: "Add", .. }),
        "{error}"
    );
    let overflow = family.try_send_event("bad", Add(1)).unwrap_err();
    assert_eq!(overflow.category(), "parked");
    assert!(family.nudge("bad", Add(1)).is_err());
    assert_eq!(family.request("good", Add(2), TIMEOUT).await.unwrap(), 2);
    assert_eq!(family.keys(), vec!["bad", "good"], "it keeps its key");

    let text = prometheus(&registry);
    for line in [
        "karpenter_actor_parked{kind=\"Counter\"} 1",
        "karpenter_actor_parkings_total{kind=\"Counter\"} 1",
        "karpenter_actor_messages_dropped_total{kind=\"Counter\",message=\"Add\",reason=\"parked\"} 3",
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
    {
        let notices = notices.lock().unwrap();
        assert_eq!(notices.len(), 1);
        assert_eq!((notices[0].kind, &*notices[0].key), ("Counter", "bad"));
        match &notices[0].change {
            ParkChange::Parked {
                retry_in,
                failures,
                parkings,
                reason,
                ..
            } => {
                assert_eq!(*retry_in, DEFAULT_PARK_FIRST);
                assert_eq!((*failures, *parkings), (6, 1));
                assert_eq!(reason.category(), "panicked");
            }
            other @ ParkChange::Unparked { .. } => panic!("expected a parking, got {other:?}"),
        }
    }

    // After its parking it is retried with a fresh instance.
    tokio::time::sleep(DEFAULT_PARK_FIRST + Duration::from_secs(1)).await;
    assert_eq!(family.request("bad", Add(3), TIMEOUT).await.unwrap(), 3);
    let snapshot = kit.snapshot();
    let retried = snapshot.actor("Counter", "bad").unwrap();
    assert_eq!(retried.state, "counting");
    assert!(retried.unpark_in_seconds.is_none());
    assert!(
        prometheus(&registry).contains("karpenter_actor_parked{kind=\"Counter\"} 0"),
        "the gauge follows"
    );
    let retry = notices.lock().unwrap()[1].change.clone();
    // Tokio timers round up to the millisecond.
    assert!(
        matches!(retry, ParkChange::Unparked { parked_for }
            if (DEFAULT_PARK_FIRST..DEFAULT_PARK_FIRST + Duration::from_millis(10)).contains(&parked_for)),
        "{retry:?}"
    );

    // Failing again soon after its retry parks it again at once, for twice as long.
    bad.request(Boom, TIMEOUT).await.unwrap_err();
    let snapshot = kit.snapshot();
    assert_eq!(
        snapshot.actor("Counter", "bad").unwrap().state,
        STATE_PARKED
    );
    assert!(matches!(
        notices.lock().unwrap()[2].change,
        ParkChange::Parked { retry_in, parkings: 2, .. } if retry_in == DEFAULT_PARK_FIRST * 2
    ));
    assert_eq!(family.request("good", Add(1), TIMEOUT).await.unwrap(), 3);
    assert!(root.escalation().is_none());

    // A parked member whose object goes is stopped like any other.
    assert!(family.remove("bad"));
    bad.terminated().await;
    assert!(
        prometheus(&registry).contains("karpenter_actor_parked{kind=\"Counter\"} 0"),
        "a stopped parked actor leaves the gauge"
    );
    assert_eq!(kit.snapshot().supervisor("counters").unwrap().parked, 0);
}

#[actix::test]
async fn a_retried_member_that_runs_a_window_without_failing_is_forgiven() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let (hook, notices) = recording_hook();
    let family = root
        .family_with_park_hook::<Counter>(
            GroupSpec::one_for_one("counters")
                .intensity(1, Duration::from_mins(1))
                .backoff(fast_backoff()),
            CounterDeps::default(),
            hook,
        )
        .unwrap();
    let member = family.ensure("m").unwrap();
    member.request(Boom, TIMEOUT).await.unwrap_err();
    member.request(Boom, TIMEOUT).await.unwrap_err();
    assert!(member.is_parked());
    tokio::time::sleep(DEFAULT_PARK_FIRST + Duration::from_secs(1)).await;
    assert_eq!(add(&member, 1).await, 1);
    // A quiet window after the retry: the next failure is an ordinary restart.
    tokio::time::sleep(Duration::from_mins(2)).await;
    member.request(Boom, TIMEOUT).await.unwrap_err();
    assert_eq!(add(&member, 1).await, 1);
    assert!(!member.is_parked());
    // ... and its next parking starts from the first delay again.
    member.request(Boom, TIMEOUT).await.unwrap_err();
    assert!(member.is_parked());
    assert!(matches!(
        notices.lock().unwrap().last().unwrap().change,
        ParkChange::Parked { retry_in, parkings: 1, .. } if retry_in == DEFAULT_PARK_FIRST
    ));
    assert!(root.escalation().is_none());
}

#[actix::test]
async fn many_distinct_failing_members_still_escalate_their_family() {
    tokio::time::pause();
    let (kit, _) = kit();
    let (root, family) = counters_under_a_root_that_escalates_at_once(&kit);
    let members: Vec<_> = (0..10)
        .map(|i| family.ensure(&format!("m{i}")).unwrap())
        .collect();
    let limit = family_escalation_limit(members.len());
    assert_eq!(limit, 5, "max(5, 20% of 10)");
    // One failure each: the first `limit` members are restarted, one more escalates.
    for member in &members[..limit] {
        member.request(Boom, TIMEOUT).await.unwrap_err();
        assert_eq!(add(member, 1).await, 1);
    }
    assert!(root.escalation().is_none());
    assert_eq!(
        kit.snapshot().supervisor("counters").unwrap().escalations,
        0
    );
    members[limit].request(Boom, TIMEOUT).await.unwrap_err();
    let reason = tokio::time::timeout(TIMEOUT, root.escalated())
        .await
        .expect("the family escalates");
    match reason {
        StopReason::Escalated { cause, .. } => {
            assert!(cause.contains("group counters"), "{cause}");
        }
        other => panic!("expected an escalation, got {other:?}"),
    }
    let snapshot = kit.snapshot();
    let group = snapshot.supervisor("counters").unwrap();
    assert_eq!(group.escalations, 1);
    assert!(
        group
            .last_child_stop
            .as_deref()
            .is_some_and(|s| s.contains("m5")),
        "{group:?}"
    );
}

#[actix::test]
async fn failures_spread_over_more_than_a_window_do_not_escalate_a_family() {
    tokio::time::pause();
    let (kit, _) = kit();
    let (root, family) = counters_under_a_root_that_escalates_at_once(&kit);
    for i in 0..20 {
        let member = family.ensure(&format!("m{i}")).unwrap();
        member.request(Boom, TIMEOUT).await.unwrap_err();
        assert_eq!(add(&member, 1).await, 1);
        tokio::time::sleep(Duration::from_secs(20)).await;
    }
    assert!(root.escalation().is_none());
    assert_eq!(
        kit.snapshot().supervisor("counters").unwrap().escalations,
        0
    );
}

#[actix::test]
async fn a_transient_member_that_stops_itself_leaves_its_family() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let family = root
        .family::<Member>(GroupSpec::one_for_one("members"), ())
        .unwrap();
    let member = family.ensure("m").unwrap();
    member.request(StopSelf, TIMEOUT).await.unwrap();
    member.terminated().await;
    assert!(family.get("m").is_none());
    assert!(kit.registry().is_empty());
    assert_eq!(member.restarts(), 0);
}

#[actix::test]
async fn a_permanent_actor_that_stops_itself_is_restarted() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit
        .root(GroupSpec::one_for_one("root").backoff(fast_backoff()))
        .unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    add(&counter, 4).await;
    counter.request(StopSelf, TIMEOUT).await.unwrap();
    assert_eq!(add(&counter, 1).await, 1);
    assert_eq!(counter.restarts(), 1);
}

#[actix::test]
async fn a_full_mailbox_rejects_events_and_counts_overflows() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    add(&counter, 0).await;
    // Hold the actor busy so nothing drains.
    let busy = {
        let counter = counter.clone();
        actix::spawn(async move { counter.request(Wait(Duration::from_secs(5)), TIMEOUT).await })
    };
    tokio::task::yield_now().await;
    for _ in 0..Counter::MAILBOX_CAPACITY {
        counter.try_send_event(Add(1)).unwrap();
    }
    let overflow = counter.try_send_event(Add(1)).unwrap_err();
    assert!(
        matches!(overflow, Overflow::MailboxFull { capacity: 4, .. }),
        "{overflow}"
    );
    counter.send_lossy(Add(1));
    assert_eq!(counter.mailbox_depth(), 4);
    // A request waits for room instead of failing.
    assert_eq!(add(&counter, 10).await, 14);
    busy.await.unwrap().unwrap();
    let snapshot = kit.snapshot();
    let actor = snapshot.actor("Counter", "c").unwrap();
    assert_eq!(actor.overflows, 2);
    assert_eq!(actor.mailbox_depth, 0);
    assert_eq!(actor.mailbox_capacity, 4);
}

#[actix::test]
async fn nudges_coalesce_while_one_is_queued_and_queue_again_once_it_is_handled() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    add(&counter, 0).await;
    let busy = {
        let counter = counter.clone();
        actix::spawn(async move { counter.request(Wait(Duration::from_secs(5)), TIMEOUT).await })
    };
    tokio::task::yield_now().await;
    // Ten times the mailbox: one queued message, no overflow.
    for _ in 0..(Counter::MAILBOX_CAPACITY * 10) {
        counter.nudge(Add(1)).unwrap();
    }
    assert_eq!(counter.mailbox_depth(), 1);
    busy.await.unwrap().unwrap();
    assert_eq!(add(&counter, 0).await, 1, "the burst was handled once");
    // Handled: the next nudge queues again.
    counter.nudge(Add(1)).unwrap();
    assert_eq!(add(&counter, 0).await, 2);
    let snapshot = kit.snapshot();
    assert_eq!(snapshot.actor("Counter", "c").unwrap().overflows, 0);
}

#[actix::test]
async fn a_nudge_lost_with_a_panicked_incarnation_does_not_block_the_next() {
    tokio::time::pause();
    let (kit, _) = kit();
    let root = kit
        .root(GroupSpec::one_for_one("root").backoff(fast_backoff()))
        .unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    add(&counter, 0).await;
    let boom = {
        let counter = counter.clone();
        actix::spawn(async move { counter.request(LateBoom, TIMEOUT).await })
    };
    tokio::task::yield_now().await;
    // Queued behind the panicking handler.
    counter.nudge(Add(1)).unwrap();
    boom.await.unwrap().unwrap_err();
    tokio::time::sleep(Duration::from_secs(1)).await;
    counter.nudge(Add(5)).unwrap();
    let total = add(&counter, 0).await;
    assert!(
        total >= 5,
        "the nudge after the restart was handled: {total}"
    );
}

#[actix::test]
async fn a_timer_set_before_a_restart_is_dropped() {
    tokio::time::pause();
    let (kit, registry) = kit();
    let root = kit
        .root(GroupSpec::one_for_one("root").backoff(fast_backoff()))
        .unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    counter
        .request(ScheduleTick(Duration::from_secs(5)), TIMEOUT)
        .await
        .unwrap();
    counter.request(Boom, TIMEOUT).await.unwrap_err();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        add(&counter, 0).await,
        0,
        "the old instance's tick never arrives"
    );
    counter
        .request(ScheduleTick(Duration::from_secs(1)), TIMEOUT)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        add(&counter, 0).await,
        100,
        "the fresh instance's tick arrives"
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(text.contains(
        "karpenter_actor_messages_dropped_total{kind=\"Counter\",message=\"Tick\",reason=\"stale_timer\"} 1"
    ));
}

/// Runs 3 actors x 40 requests under a probabilistic plan and returns which requests failed.
async fn failures_under(plan: FaultPlan) -> (Vec<String>, Vec<(String, u64)>) {
    let (kit, _) = kit_with_faults(plan);
    let root = kit
        .root(
            GroupSpec::one_for_one("root")
                .intensity(1000, Duration::from_mins(1))
                .backoff(fast_backoff()),
        )
        .unwrap();
    let actors: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|key| root.spawn::<Counter>(*key, CounterDeps::default()).unwrap())
        .collect();
    let mut failures = Vec::new();
    for round in 0..40 {
        for actor in &actors {
            if let Err(error) = actor.request(Add(1), TIMEOUT).await {
                failures.push(format!("{}#{round}: {}", actor.key(), error.category()));
            }
        }
    }
    let injected = kit
        .faults()
        .unwrap()
        .injected()
        .into_iter()
        .map(|f| (format!("{}/{}", f.key, f.action), f.occurrence))
        .collect();
    (failures, injected)
}

fn chaos_plan(seed: u64) -> FaultPlan {
    FaultPlan::new(seed)
        .with_rule(
            FaultRule::new(FaultAction::Panic)
                .message("Add")
                .probability(0.1),
        )
        .unwrap()
        .with_rule(
            FaultRule::new(FaultAction::Error)
                .message("Add")
                .probability(0.1),
        )
        .unwrap()
        .with_rule(
            FaultRule::new(FaultAction::Drop)
                .message("Add")
                .probability(0.1),
        )
        .unwrap()
}

#[actix::test]
async fn the_same_fault_plan_seed_gives_the_same_failures() {
    tokio::time::pause();
    let first = failures_under(chaos_plan(42)).await;
    let second = failures_under(chaos_plan(42)).await;
    assert_eq!(first, second);
    assert!(!first.0.is_empty());
    for category in ["panicked", "injected", "dropped"] {
        assert!(
            first.0.iter().any(|f| f.ends_with(category)),
            "{category} in {:?}",
            first.0
        );
    }
    let other = failures_under(chaos_plan(43)).await;
    assert_ne!(first.0, other.0, "another seed, other failures");
}

#[actix::test]
async fn an_injected_delay_stalls_the_actor_and_times_out_its_caller() {
    tokio::time::pause();
    let plan = FaultPlan::from_yaml(
        "seed: 1\nrules:\n  - kind: Counter\n    message: Add\n    nth: 2\n    action: delay\n    delay: 1m\n",
    )
    .unwrap();
    let (kit, _) = kit_with_faults(plan);
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    add(&counter, 1).await;
    let error = counter.request(Add(1), TIMEOUT).await.unwrap_err();
    assert_eq!(error.category(), "timeout");
    // The delayed message is still handled, after the delay.
    assert_eq!(add(&counter, 1).await, 3);
    let snapshot = kit.snapshot();
    let actor = snapshot.actor("Counter", "c").unwrap();
    // Tokio timers round up to the millisecond.
    assert!(
        (60.0..60.01).contains(&actor.latency.max_seconds),
        "{:?}",
        actor.latency
    );
}

#[actix::test]
async fn the_registry_snapshot_and_prometheus_output_match_the_counts() {
    tokio::time::pause();
    let (kit, registry) = kit();
    let root = kit
        .root(GroupSpec::one_for_one("root").backoff(fast_backoff()))
        .unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    let other = root.spawn::<Counter>("d", CounterDeps::default()).unwrap();
    for _ in 0..3 {
        add(&counter, 1).await;
    }
    add(&other, 1).await;
    counter
        .request(Fail { fatal: false }, TIMEOUT)
        .await
        .unwrap_err();
    counter.request(Boom, TIMEOUT).await.unwrap_err();
    add(&counter, 1).await;

    let snapshot = kit.snapshot();
    let actor = snapshot.actor("Counter", "c").unwrap();
    assert_eq!(actor.handled, 6);
    assert_eq!(actor.handled_by_message["Add"], 4);
    assert_eq!(actor.handled_by_message["Fail"], 1);
    assert_eq!(actor.handled_by_message["Boom"], 1);
    assert_eq!((actor.errors, actor.panics, actor.restarts), (1, 1, 1));
    assert_eq!(snapshot.actors.len(), 2);
    let json = serde_json::to_value(&snapshot).unwrap();
    assert_eq!(json["actors"][0]["handledByMessage"]["Add"], 4);
    assert_eq!(json["actors"][0]["mailboxCapacity"], 4);
    let back: karpenter_actors::runtime::RegistrySnapshot = serde_json::from_value(json).unwrap();
    assert_eq!(back, snapshot);

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for line in [
        "karpenter_actor_messages_handled_total{kind=\"Counter\",message=\"Add\"} 5",
        "karpenter_actor_messages_handled_total{kind=\"Counter\",message=\"Boom\"} 1",
        "karpenter_actor_handler_errors_total{kind=\"Counter\",message=\"Fail\"} 1",
        "karpenter_actor_panics_total{kind=\"Counter\",message=\"Boom\"} 1",
        "karpenter_actor_restarts_total{kind=\"Counter\"} 1",
        "karpenter_actor_live_actors{kind=\"Counter\"} 2",
        "karpenter_actor_mailbox_depth{kind=\"Counter\"} 0",
        "karpenter_actor_handler_duration_seconds_count{kind=\"Counter\",message=\"Add\"} 5",
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
    assert!(!text.contains("key="), "keys never become labels");
}

fn assert_send_sync<T: Send + Sync>(_: &T) {}
fn assert_send<T: Send>(_: &T) {}

#[actix::test]
async fn actors_can_be_called_from_another_thread_and_runtime() {
    let (kit, _) = kit();
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let family = root
        .family::<Counter>(GroupSpec::one_for_one("counters"), CounterDeps::default())
        .unwrap();
    let counter = family.ensure("c").unwrap();
    assert_send_sync(&counter);
    assert_send_sync(&family);
    assert_send_sync(&*root);
    assert_send(&counter.request(Add(1), TIMEOUT));
    // A kube watcher or an HTTP handler runs on another runtime: it routes by key and waits.
    let remote = tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            family.try_send_event("c", Add(2)).unwrap();
            family.ensure("d").unwrap();
            family.request("c", Add(1), TIMEOUT).await
        })
    });
    assert_eq!(remote.await.unwrap().unwrap(), 3);
    assert_eq!(add(&counter, 0).await, 3);
    assert_eq!(kit.registry().count_kind("Counter"), 2);
}

/// The value of the sample `series` (name and labels as printed) in `text`.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

/// Fails unless the sample `series` has `value`.
fn assert_sample(text: &str, series: &str, value: f64) {
    let found = sample(text, series);
    assert!(
        (found - value).abs() < 1e-9,
        "{series} is {found}, not {value}, in\n{text}"
    );
}

#[actix::test]
async fn handled_messages_are_controller_runtime_reconciles_and_mailboxes_its_work_queue() {
    tokio::time::pause();
    let (kit, registry) = kit();
    let root = kit
        .root(GroupSpec::one_for_one("root").backoff(fast_backoff()))
        .unwrap();
    let counter = root.spawn::<Counter>("c", CounterDeps::default()).unwrap();
    let _idle = root.spawn::<Counter>("d", CounterDeps::default()).unwrap();
    let text = prometheus(&registry);
    // Every series exists at zero once the controller's first actor is spawned.
    for series in [
        "controller_runtime_reconcile_total{controller=\"Counter\",result=\"success\"} 0",
        "controller_runtime_reconcile_total{controller=\"Counter\",result=\"requeue_after\"} 0",
        "controller_runtime_reconcile_panics_total{controller=\"Counter\"} 0",
        "controller_runtime_terminal_reconcile_errors_total{controller=\"Counter\"} 0",
        "workqueue_retries_total{name=\"Counter\",controller=\"Counter\"} 0",
    ] {
        assert!(text.contains(series), "missing {series} in\n{text}");
    }

    for _ in 0..3 {
        add(&counter, 1).await;
    }
    counter
        .request(Fail { fatal: false }, TIMEOUT)
        .await
        .unwrap_err();
    counter.request(Boom, TIMEOUT).await.unwrap_err();
    add(&counter, 1).await;
    // A handler that runs for 10 s, scraped 4 s in.
    counter
        .try_send_event(Wait(Duration::from_secs(10)))
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;

    let text = prometheus(&registry);
    let queue = "{name=\"Counter\",controller=\"Counter\"}";
    let controller = "{controller=\"Counter\"}";
    for (series, value) in [
        (
            "controller_runtime_reconcile_total{controller=\"Counter\",result=\"success\"}",
            4.0,
        ),
        (
            "controller_runtime_reconcile_total{controller=\"Counter\",result=\"error\"}",
            2.0,
        ),
        (
            &format!("controller_runtime_reconcile_errors_total{controller}"),
            2.0,
        ),
        (
            &format!("controller_runtime_reconcile_panics_total{controller}"),
            1.0,
        ),
        (
            &format!("controller_runtime_reconcile_time_seconds_count{controller}"),
            6.0,
        ),
        (
            &format!("controller_runtime_active_workers{controller}"),
            1.0,
        ),
        (
            &format!("controller_runtime_max_concurrent_reconciles{controller}"),
            2.0,
        ),
        (&format!("workqueue_adds_total{queue}"), 7.0),
        (&format!("workqueue_retries_total{queue}"), 2.0),
        (&format!("workqueue_depth{queue}"), 0.0),
        (
            &format!("workqueue_queue_duration_seconds_count{queue}"),
            7.0,
        ),
        (
            &format!("workqueue_work_duration_seconds_count{queue}"),
            6.0,
        ),
    ] {
        assert_sample(&text, series, value);
    }
    for series in [
        format!("workqueue_unfinished_work_seconds{queue}"),
        format!("workqueue_longest_running_processor_seconds{queue}"),
    ] {
        let seconds = sample(&text, &series);
        assert!((4.0..4.1).contains(&seconds), "{series} {seconds}");
    }
    assert!(
        text.contains(
            "controller_runtime_reconcile_time_seconds_bucket{le=\"60.0\",controller=\"Counter\"} 6"
        ),
        "reconcile time buckets end at 60 s:\n{text}"
    );
    assert!(!text.contains("le=\"120.0\",controller=\"Counter\""));

    // Once the handler ends, nothing is in flight.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let text = prometheus(&registry);
    assert_sample(
        &text,
        &format!("controller_runtime_active_workers{controller}"),
        0.0,
    );
    assert_sample(
        &text,
        &format!("workqueue_longest_running_processor_seconds{queue}"),
        0.0,
    );
    root.stop().await;
}
