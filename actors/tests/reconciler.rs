//! The kit's reconcile shape: what every per-object family (the `NodeClaim`, `NodePool` and
//! `NodeClass` actors) gets from [`Reconciler`]: requeue timers folded per policy, error backoff
//! reset by a success, deferred bursts, the first look at start, and a stop once the object is
//! gone. A scripted reconciler records when it ran; time is tokio's paused clock.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use karpenter_actors::runtime::{
    Action, ActorCtx, ActorError, ActorKit, Backoff, Cause, Coalesce, Family, FaultAction,
    FaultPlan, FaultRule, GroupSpec, KitOptions, Reconcile, ReconcileError, ReconcilePolicy,
    Reconciler, RestartPolicy, RootGroup, Start, Supervised,
};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(5);
const KEY: &str = "thing";

#[derive(Debug, Clone, thiserror::Error)]
#[error("scripted failure")]
struct Scripted;

impl ReconcileError for Scripted {
    fn category(&self) -> &'static str {
        "scripted"
    }
}

/// What the scripted reconciler answers and what it saw.
struct Script {
    start: Instant,
    present: AtomicBool,
    /// Outcomes in order; `AwaitChange` once they run out.
    outcomes: Mutex<VecDeque<Result<Action, Scripted>>>,
    /// Member events within this long of the last reconcile are folded.
    fold_members: Option<Duration>,
    /// Seconds since the start, and why, of every reconcile.
    log: Mutex<Vec<(u64, Cause)>>,
    last: Mutex<Option<Instant>>,
}

impl Script {
    fn new(outcomes: Vec<Result<Action, Scripted>>) -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            present: AtomicBool::new(true),
            outcomes: Mutex::new(outcomes.into()),
            fold_members: None,
            log: Mutex::new(Vec::new()),
            last: Mutex::new(None),
        })
    }

    fn log(&self) -> Vec<(u64, Cause)> {
        self.log.lock().unwrap().clone()
    }
}

/// A reconciler whose policy is picked by `P`; its object is there while `present`.
struct ScriptedActor<P> {
    script: Arc<Script>,
    policy: std::marker::PhantomData<P>,
}

trait Policy: 'static {
    const POLICY: ReconcilePolicy;
}

/// The `NodeClaim` shape: earliest timer wins, 1 s doubling to 4 s, a look at every start.
struct Earliest;
impl Policy for Earliest {
    const POLICY: ReconcilePolicy = ReconcilePolicy {
        coalesce: Coalesce::Earliest,
        backoff: Backoff::exponential(Duration::from_secs(1), Duration::from_secs(4)),
        start: Start::Reconcile,
    };
}

/// The `NodeClass` shape: latest timer wins, no look at the first start.
struct Latest;
impl Policy for Latest {
    const POLICY: ReconcilePolicy = ReconcilePolicy {
        coalesce: Coalesce::Latest,
        backoff: Backoff::exponential(Duration::from_secs(1), Duration::from_secs(4)),
        start: Start::RequeueAfterRestart,
    };
}

impl<P: Policy> Supervised for ScriptedActor<P> {
    const KIND: &'static str = "ScriptedActor";
    // A test sends a handful of events at once.
    const MAILBOX_CAPACITY: usize = 16;
    const RESTART: RestartPolicy = RestartPolicy::Transient;
    type Deps = Arc<Script>;

    fn build(_key: &str, script: &Arc<Script>) -> Result<Self, ActorError> {
        Ok(Self {
            script: Arc::clone(script),
            policy: std::marker::PhantomData,
        })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.start_reconciling();
        Ok(())
    }
}

impl<P: Policy> Reconciler for ScriptedActor<P> {
    type Object = ();
    type Error = Scripted;
    const POLICY: ReconcilePolicy = P::POLICY;

    fn fetch(&self, _key: &str) -> Option<Arc<()>> {
        self.script
            .present
            .load(Ordering::Acquire)
            .then(Arc::default)
    }

    fn defer(&self, cause: Cause) -> Option<Duration> {
        let window = self.script.fold_members?;
        let last = (*self.script.last.lock().unwrap())?;
        let end = last + window;
        let now = Instant::now();
        (cause == Cause::Member && now < end).then(|| end - now)
    }

    async fn reconcile(
        &mut self,
        _object: Arc<()>,
        cause: Cause,
        _ctx: &mut ActorCtx<Self>,
    ) -> Result<Action, Scripted> {
        let now = Instant::now();
        let at = now.duration_since(self.script.start).as_secs();
        self.script.log.lock().unwrap().push((at, cause));
        *self.script.last.lock().unwrap() = Some(now);
        self.script
            .outcomes
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Ok(Action::AwaitChange))
    }
}

struct Env<P: Policy> {
    kit: ActorKit,
    root: RootGroup,
    family: Family<ScriptedActor<P>>,
    script: Arc<Script>,
}

impl<P: Policy> Env<P> {
    /// Starts the actor and lets its `started` run.
    async fn start(script: Arc<Script>) -> Self {
        Self::start_with(script, KitOptions::default()).await
    }

    async fn start_with(script: Arc<Script>, options: KitOptions) -> Self {
        let kit = ActorKit::new(&mut Registry::default(), options);
        let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
        let family = root
            .family::<ScriptedActor<P>>(GroupSpec::one_for_one("things"), Arc::clone(&script))
            .unwrap();
        family.ensure(KEY).unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        Self {
            kit,
            root,
            family,
            script,
        }
    }

    async fn send(&self, cause: Cause) {
        // Failed reconciles are the tests' business; the send itself must arrive.
        let _ = self.family.request(KEY, Reconcile { cause }, TIMEOUT).await;
    }

    /// Lets `secs` of paused time pass.
    async fn wait(&self, secs: u64) {
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }

    fn handled(&self, message: &str) -> u64 {
        let snapshot = self.kit.snapshot();
        let actor = snapshot.actor("ScriptedActor", KEY).unwrap();
        actor
            .handled_by_message
            .get(message)
            .copied()
            .unwrap_or_default()
    }
}

#[actix::test]
async fn a_burst_of_reconciles_with_the_same_requeue_sets_one_timer() {
    tokio::time::pause();
    let script = Script::new(vec![Ok(Action::requeue(Duration::from_secs(10))); 4]);
    let env = Env::<Earliest>::start(script).await;
    env.send(Cause::Changed).await;
    env.send(Cause::Changed).await;
    env.wait(15).await;
    assert_eq!(
        env.script.log(),
        [
            (0, Cause::Requeue),
            (0, Cause::Changed),
            (0, Cause::Changed),
            (10, Cause::Requeue),
        ],
        "the first look at start, two events, and one timer for all three"
    );
    env.root.stop().await;
}

#[actix::test]
async fn with_the_latest_policy_a_new_answer_replaces_the_pending_timer() {
    tokio::time::pause();
    let script = Script::new(vec![
        Ok(Action::requeue(Duration::from_secs(10))),
        Ok(Action::requeue(Duration::from_secs(30))),
        Ok(Action::requeue(Duration::from_secs(10))),
        Ok(Action::await_change()),
    ]);
    let env = Env::<Latest>::start(script).await;
    env.send(Cause::Changed).await;
    env.wait(5).await;
    env.send(Cause::Changed).await;
    env.wait(60).await;
    assert_eq!(
        env.script.log(),
        [
            (0, Cause::Changed),
            (5, Cause::Changed),
            (35, Cause::Requeue),
            (45, Cause::Requeue),
        ],
        "no look at the first start; the 10 s timer was replaced by the 30 s one"
    );
    assert_eq!(
        env.handled("Requeue"),
        3,
        "the superseded timer still arrives, and does nothing"
    );
    env.wait(600).await;
    assert_eq!(env.script.log().len(), 4, "AwaitChange cancels the timer");
    env.root.stop().await;
}

#[actix::test]
async fn failures_back_off_exponentially_and_a_success_resets_the_backoff() {
    tokio::time::pause();
    let script = Script::new(vec![
        Err(Scripted),
        Err(Scripted),
        Err(Scripted),
        Err(Scripted),
        Ok(Action::await_change()),
        Err(Scripted),
    ]);
    let env = Env::<Earliest>::start(script).await;
    env.wait(20).await;
    env.send(Cause::Changed).await;
    env.wait(5).await;
    let times: Vec<u64> = env.script.log().iter().map(|(at, _)| *at).collect();
    assert_eq!(
        times,
        [0, 1, 3, 7, 11, 20, 21],
        "1 s, 2 s, 4 s, then capped at 4 s; after a success 1 s again"
    );
    let snapshot = env.kit.snapshot();
    let actor = snapshot.actor("ScriptedActor", KEY).unwrap();
    assert_eq!(actor.errors, 5);
    assert_eq!(actor.restarts, 0, "a failed reconcile is not a crash");
    assert!(
        actor
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("scripted")),
        "{:?}",
        actor.last_error
    );
    env.root.stop().await;
}

#[actix::test]
async fn member_events_within_the_window_are_folded_into_one_reconcile() {
    tokio::time::pause();
    let mut script = Script::new(Vec::new());
    Arc::get_mut(&mut script).unwrap().fold_members = Some(Duration::from_secs(2));
    let env = Env::<Earliest>::start(script).await;
    for _ in 0..5 {
        env.send(Cause::Member).await;
    }
    env.wait(5).await;
    assert_eq!(
        env.script.log(),
        [(0, Cause::Requeue), (2, Cause::Requeue)],
        "five member events after the first look cost one reconcile at the window's end"
    );
    env.root.stop().await;
}

#[actix::test]
async fn a_restarted_instance_of_the_latest_policy_looks_again_at_once() {
    tokio::time::pause();
    let plan = FaultPlan::new(1)
        .with_rule(
            FaultRule::new(FaultAction::Panic)
                .kind("ScriptedActor")
                .message("Reconcile")
                .nth(2),
        )
        .unwrap();
    let options = KitOptions {
        faults: Some(Arc::new(plan)),
        ..KitOptions::default()
    };
    let env = Env::<Latest>::start_with(Script::new(Vec::new()), options).await;
    env.send(Cause::Changed).await;
    env.send(Cause::Changed).await;
    env.wait(10).await;
    let causes: Vec<Cause> = env.script.log().iter().map(|(_, cause)| *cause).collect();
    assert_eq!(
        causes,
        [Cause::Changed, Cause::Requeue],
        "the second event panicked; the fresh instance requeued itself"
    );
    let snapshot = env.kit.snapshot();
    assert_eq!(snapshot.actor("ScriptedActor", KEY).unwrap().restarts, 1);
    env.root.stop().await;
}

#[actix::test]
async fn an_object_gone_from_the_view_stops_its_actor() {
    tokio::time::pause();
    let env = Env::<Earliest>::start(Script::new(Vec::new())).await;
    let actor = env.family.get(KEY).unwrap();
    env.script.present.store(false, Ordering::Release);
    env.send(Cause::Deleted).await;
    tokio::time::timeout(TIMEOUT, actor.terminated())
        .await
        .unwrap();
    assert!(env.family.get(KEY).is_none());
    assert_eq!(env.script.log(), [(0, Cause::Requeue)]);
    env.root.stop().await;
}
