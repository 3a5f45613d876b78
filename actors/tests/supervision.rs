//! Supervision that does not amplify, through the daemon's real families: a NodeClaim whose
//! actor keeps failing is parked (with an event on the NodeClaim) and retried later, while the
//! other NodeClaims launch and neither the family nor the root escalates. Time is tokio's
//! paused clock.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

mod support;

use std::time::Duration;

use karpenter_actors::daemon::parking::{REASON_PARKED, REASON_RETRIED};
use karpenter_actors::runtime::{
    DEFAULT_PARK_FIRST, FaultAction, FaultPlan, FaultRule, STATE_PARKED,
};
use serde_json::json;
use support::{Harness, nodeclaim};

fn launched(h: &Harness, name: &str) -> bool {
    h.condition(name, "Launched").map(|c| c.0) == Some("True".to_owned())
}

#[actix::test]
async fn a_nodeclaim_whose_actor_keeps_panicking_is_parked_with_an_event_and_retried_later() {
    tokio::time::pause();
    // Six panics in a row (each start of the bad claim's actor), then it behaves.
    let plan = FaultPlan::new(3)
        .with_rule(
            FaultRule::new(FaultAction::Panic)
                .kind("NodeClaimActor")
                .key("default-bad")
                .times(6),
        )
        .unwrap();
    let h = Harness::start_with(Some(plan));
    h.add_nodeclaim(nodeclaim("default-bad", json!({})));
    h.add_nodeclaim(nodeclaim("default-good", json!({})));
    // Five restarts back off 0.1 s to 1.6 s (with jitter); well within half a minute.
    h.advance(Duration::from_secs(30)).await;

    assert!(launched(&h, "default-good"), "its sibling goes on");
    assert!(!launched(&h, "default-bad"));
    let snapshot = h.kit.snapshot();
    let bad = snapshot.actor("NodeClaimActor", "default-bad").unwrap();
    assert_eq!(bad.state, STATE_PARKED);
    assert_eq!((bad.panics, bad.restarts), (6, 5));
    assert!(bad.unpark_in_seconds.is_some());
    let family = snapshot.supervisor("nodeclaims").unwrap();
    assert_eq!((family.parked, family.escalations), (1, 0));
    assert!(h.root.escalation().is_none());
    assert!(
        h.events()
            .contains(&(REASON_PARKED.to_owned(), "default-bad".to_owned())),
        "{:?}",
        h.events()
    );
    let event = h
        .api
        .events()
        .into_iter()
        .find(|e| e.reason == REASON_PARKED)
        .unwrap();
    assert_eq!(event.regarding.kind.as_deref(), Some("NodeClaim"));
    assert!(
        event.regarding.uid.is_some(),
        "the NodeClaim's uid from the store"
    );
    assert!(
        event
            .note
            .as_deref()
            .unwrap()
            .contains("panicked handling started"),
        "{event:?}"
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &h.registry).unwrap();
    assert!(text.contains("karpenter_actor_parked{kind=\"NodeClaimActor\"} 1"));

    // Retried after its parking: the fault has run its course, and the claim launches.
    h.advance(DEFAULT_PARK_FIRST).await;
    let retried = h
        .wait_for(Duration::from_secs(30), Duration::from_secs(1), |h| {
            launched(h, "default-bad")
        })
        .await;
    assert!(retried, "the retried actor launches its NodeClaim");
    assert!(
        h.events()
            .contains(&(REASON_RETRIED.to_owned(), "default-bad".to_owned()))
    );
    assert_ne!(
        h.kit
            .snapshot()
            .actor("NodeClaimActor", "default-bad")
            .unwrap()
            .state,
        STATE_PARKED
    );
    assert!(h.root.escalation().is_none());
}
