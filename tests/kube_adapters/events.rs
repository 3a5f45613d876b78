//! The event recorder against the emulator, on a manual clock: repeats within six minutes
//! become a series stamped with the clock's time, later ones start a new Event, events at the
//! same instant get distinct names, and expired series are forgotten.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter::emulator::Emulator;
use karpenter::kube::events::{EventRecorder, Occurrence};
use karpenter_actors::ports::clock::{Clock as _, ManualClock};
use kube::Api;
use kube::api::ListParams;
use kube::runtime::events::Reporter;

fn recorder(emulator: &Emulator) -> (EventRecorder, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(
        "2026-01-02T03:04:05Z".parse::<Timestamp>().unwrap(),
    ));
    let reporter = Reporter {
        controller: "karpenter".into(),
        instance: Some("karpenter-0".into()),
    };
    let recorder = EventRecorder::new(emulator.client(), reporter, clock.clone());
    (recorder, clock)
}

fn node(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        ..ObjectReference::default()
    }
}

/// Publishes a `Normal` event of `reason` about `regarding`; the emulator must take it.
async fn publish(recorder: &EventRecorder, regarding: &ObjectReference, reason: &str) {
    let occurrence = Occurrence {
        type_: "Normal",
        reason,
        action: "Disrupting",
        note: Some("a note"),
        regarding,
        related: None,
    };
    recorder.publish(&occurrence).await.unwrap();
}

async fn events(emulator: &Emulator) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(emulator.client(), "default");
    let mut items = api.list(&ListParams::default()).await.unwrap().items;
    items.sort_by_key(|e| e.metadata.name.clone());
    items
}

#[tokio::test]
async fn a_repeat_within_six_minutes_joins_the_series_at_the_clocks_time() {
    let emulator = Emulator::new().unwrap();
    let (recorder, clock) = recorder(&emulator);
    let regarding = node("n1");
    let started = clock.now();
    publish(&recorder, &regarding, "Unconsolidatable").await;
    clock.advance(Duration::from_mins(5));
    publish(&recorder, &regarding, "Unconsolidatable").await;

    let stored = events(&emulator).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    let event = &stored[0];
    assert_eq!(
        event.event_time.as_ref().map(|t| t.0),
        Some(started),
        "created at the clock's time"
    );
    let series = event.series.as_ref().expect("a series");
    assert_eq!(series.count, 2);
    assert_eq!(
        series.last_observed_time.0,
        started + SignedDuration::from_mins(5)
    );
    assert_eq!(event.reporting_instance.as_deref(), Some("karpenter-0"));
    assert_eq!(event.note.as_deref(), Some("a note"));
}

#[tokio::test]
async fn a_repeat_after_six_minutes_is_a_new_event_and_the_old_series_is_forgotten() {
    let emulator = Emulator::new().unwrap();
    let (recorder, clock) = recorder(&emulator);
    let first = node("n1");
    let second = node("n2");
    publish(&recorder, &first, "Unconsolidatable").await;
    publish(&recorder, &second, "Unconsolidatable").await;
    assert_eq!(recorder.remembered(), 2);
    clock.advance(Duration::from_secs(361));
    publish(&recorder, &first, "Unconsolidatable").await;

    let stored = events(&emulator).await;
    assert_eq!(stored.len(), 3, "{stored:?}");
    assert!(
        stored.iter().all(|e| e.series.is_none()),
        "no series past the six minutes: {stored:?}"
    );
    assert_eq!(
        recorder.remembered(),
        1,
        "the expired series of n2 is swept, n1's is the new one"
    );
}

#[tokio::test]
async fn events_at_the_same_instant_get_distinct_names() {
    let emulator = Emulator::new().unwrap();
    let (recorder, _clock) = recorder(&emulator);
    let regarding = node("n1");
    for reason in ["Launched", "Registered", "Initialized"] {
        publish(&recorder, &regarding, reason).await;
    }
    let stored = events(&emulator).await;
    let reasons: Vec<_> = stored.iter().filter_map(|e| e.reason.as_deref()).collect();
    assert_eq!(reasons, ["Launched", "Registered", "Initialized"]);
}
