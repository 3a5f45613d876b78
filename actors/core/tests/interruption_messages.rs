//! Interruption message parsing and planning over captured real-shape EventBridge JSON, and
//! malformed input: every body is parsed or rejected with the right metric label, never a panic.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::path::PathBuf;

use karpenter_core::domain::interruption::{
    Command, Event, Kind, MAX_BODY_BYTES, NodeClaimRef, ParseError, Parser, plan,
};
use proptest::prelude::*;

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/interruption")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn parse(name: &str) -> karpenter_core::domain::interruption::Message {
    Parser::default().parse(&fixture(name)).unwrap()
}

fn claim(name: &str, capacity_type: &str) -> NodeClaimRef {
    NodeClaimRef {
        name: name.to_owned(),
        nodepool: Some("default".to_owned()),
        node_name: Some(format!("node-{name}")),
        instance_type: Some("m5.large".to_owned()),
        zone: Some("us-west-2a".to_owned()),
        capacity_type: Some(capacity_type.to_owned()),
        replace_on_rebalance: false,
        deleting: false,
    }
}

// ---- parsing each kind -----------------------------------------------------------------------

#[test]
fn spot_interruption_warning_names_its_instance_and_time() {
    let message = parse("spot_interruption.json");
    assert_eq!(message.kind, Kind::SpotInterrupted);
    assert_eq!(message.kind.metric_label(), "spot_interrupted");
    assert_eq!(message.instance_ids, vec!["i-0b2f3c4d5e6f70819"]);
    assert_eq!(message.time.unwrap().to_string(), "2025-05-01T12:00:00Z");
    assert_eq!(message.account.as_deref(), Some("123456789012"));
}

#[test]
fn rebalance_recommendation_is_parsed() {
    let message = parse("rebalance_recommendation.json");
    assert_eq!(message.kind, Kind::RebalanceRecommendation);
    assert_eq!(message.instance_ids, vec!["i-0b2f3c4d5e6f70819"]);
}

#[test]
fn scheduled_change_names_every_affected_instance() {
    let message = parse("scheduled_change.json");
    assert_eq!(message.kind, Kind::ScheduledChange);
    assert_eq!(
        message.instance_ids,
        vec!["i-0a1b2c3d4e5f60718", "i-0f1e2d3c4b5a69788"]
    );
    assert_eq!(
        message.event_type_code.as_deref(),
        Some("AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED")
    );
}

#[test]
fn health_events_of_other_services_are_no_ops() {
    assert_eq!(parse("health_non_ec2.json").kind, Kind::NoOp);
}

#[test]
fn stopping_and_terminated_state_changes_are_parsed_and_running_is_a_no_op() {
    assert_eq!(
        parse("state_change_stopping.json").kind,
        Kind::InstanceStopped
    );
    assert_eq!(
        parse("state_change_terminated.json").kind,
        Kind::InstanceTerminated
    );
    assert_eq!(parse("state_change_running.json").kind, Kind::NoOp);
}

#[test]
fn a_missing_account_field_is_tolerated() {
    let message = parse("moto_spot_interruption_no_account.json");
    assert_eq!(message.kind, Kind::SpotInterrupted);
    assert_eq!(message.account, None);
}

// ---- malformed input -------------------------------------------------------------------------

fn error_of(body: &str) -> ParseError {
    Parser::default().parse(body).expect_err("must be rejected")
}

#[test]
fn an_empty_body_is_a_no_op() {
    assert_eq!(Parser::default().parse("").unwrap().kind, Kind::NoOp);
    assert_eq!(Parser::default().parse("  \n").unwrap().kind, Kind::NoOp);
}

#[test]
fn truncated_json_is_a_malformed_envelope() {
    let body = fixture("spot_interruption.json");
    assert_eq!(
        error_of(&body[..body.len() / 2]).category(),
        "malformed_envelope"
    );
}

#[test]
fn a_non_object_body_is_a_malformed_envelope() {
    assert_eq!(error_of("[1, 2, 3]").category(), "malformed_envelope");
    assert_eq!(error_of("hello").category(), "malformed_envelope");
}

#[test]
fn an_instance_id_of_the_wrong_type_is_a_malformed_detail() {
    let body = fixture("spot_interruption.json").replace("\"i-0b2f3c4d5e6f70819\",\n", "12345,\n");
    let error = error_of(&body);
    assert_eq!(error.category(), "malformed_detail", "{error}");
}

#[test]
fn an_empty_instance_id_is_a_malformed_detail() {
    let body = fixture("rebalance_recommendation.json").replace("i-0b2f3c4d5e6f70819\"\n", "\"\n");
    assert_eq!(error_of(&body).category(), "malformed_detail");
}

#[test]
fn a_known_event_without_detail_is_rejected() {
    let body = r#"{"version":"0","source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning"}"#;
    assert_eq!(error_of(body).category(), "missing_detail");
}

#[test]
fn a_malformed_time_is_rejected() {
    let body = fixture("spot_interruption.json").replace("2025-05-01T12:00:00Z", "yesterday");
    assert_eq!(error_of(&body).category(), "malformed_time");
}

#[test]
fn an_unknown_detail_type_is_a_no_op() {
    let body = fixture("spot_interruption.json")
        .replace("EC2 Spot Instance Interruption Warning", "EC2 Fleet Error");
    assert_eq!(Parser::default().parse(&body).unwrap().kind, Kind::NoOp);
}

#[test]
fn an_unknown_version_is_a_no_op() {
    let body =
        fixture("spot_interruption.json").replace("\"version\": \"0\"", "\"version\": \"1\"");
    assert_eq!(Parser::default().parse(&body).unwrap().kind, Kind::NoOp);
}

#[test]
fn a_body_of_256_kib_is_parsed_and_a_larger_one_rejected() {
    let base = fixture("spot_interruption.json");
    let padding = MAX_BODY_BYTES - base.len();
    let at_limit = base.replacen(
        '{',
        &format!("{{\"padding\": \"{}\",", "x".repeat(padding - 16)),
        1,
    );
    assert!(at_limit.len() <= MAX_BODY_BYTES);
    assert_eq!(
        Parser::default().parse(&at_limit).unwrap().kind,
        Kind::SpotInterrupted
    );
    let over = base.replacen(
        '{',
        &format!("{{\"padding\": \"{}\",", "x".repeat(padding)),
        1,
    );
    assert_eq!(error_of(&over).category(), "too_large");
}

// ---- planning --------------------------------------------------------------------------------

#[test]
fn spot_interruption_marks_the_offering_and_deletes_the_nodeclaim() {
    let commands = plan(&parse("spot_interruption.json"), |_| {
        Some(claim("default-x7k2p", "spot"))
    });
    assert_eq!(
        commands,
        vec![
            Command::RecordEvent {
                nodeclaim: "default-x7k2p".into(),
                node: Some("node-default-x7k2p".into()),
                event: Event::SpotInterrupted
            },
            Command::MarkSpotOfferingUnavailable {
                instance_type: "m5.large".into(),
                zone: "us-west-2a".into()
            },
            Command::RecordEvent {
                nodeclaim: "default-x7k2p".into(),
                node: Some("node-default-x7k2p".into()),
                event: Event::TerminatingOnInterruption
            },
            Command::DeleteNodeClaim {
                nodeclaim: "default-x7k2p".into(),
                nodepool: Some("default".into()),
                capacity_type: Some("spot".into()),
                kind: Kind::SpotInterrupted
            },
        ]
    );
}

/// Karpenter's `deleteNodeClaim` returns early for a NodeClaim already being deleted: its
/// message is still recorded and the spot offering marked, but no second delete, no
/// `TerminatingOnInterruption` and no second count in `karpenter_nodeclaims_disrupted_total`.
#[test]
fn a_nodeclaim_already_deleting_is_not_deleted_again_for_any_kind() {
    let deleting = NodeClaimRef {
        deleting: true,
        replace_on_rebalance: true,
        ..claim("default-x7k2p", "spot")
    };
    for fixture in [
        "spot_interruption.json",
        "scheduled_change.json",
        "rebalance_recommendation.json",
    ] {
        let commands = plan(&parse(fixture), |_| Some(deleting.clone()));
        assert!(
            !commands.is_empty(),
            "{fixture}: the message is still recorded"
        );
        assert!(
            commands.iter().all(|c| !matches!(
                c,
                Command::DeleteNodeClaim { .. }
                    | Command::ReplaceNodeClaim { .. }
                    | Command::RecordEvent {
                        event: Event::TerminatingOnInterruption,
                        ..
                    }
            )),
            "{fixture}: {commands:?}"
        );
    }
    let spot = plan(&parse("spot_interruption.json"), |_| Some(deleting.clone()));
    assert!(
        spot.iter()
            .any(|c| matches!(c, Command::MarkSpotOfferingUnavailable { .. }))
    );
}

#[test]
fn a_rebalance_recommendation_only_records_an_event_by_default() {
    let commands = plan(&parse("rebalance_recommendation.json"), |_| {
        Some(claim("a", "spot"))
    });
    assert_eq!(commands.len(), 1);
    assert!(matches!(
        &commands[0],
        Command::RecordEvent {
            event: Event::SpotRebalanceRecommendation,
            ..
        }
    ));
}

#[test]
fn a_rebalance_recommendation_replaces_the_node_when_the_pool_opted_in() {
    let mut opted_in = claim("a", "spot");
    opted_in.replace_on_rebalance = true;
    let commands = plan(&parse("rebalance_recommendation.json"), |_| {
        Some(opted_in.clone())
    });
    assert!(commands.contains(&Command::ReplaceNodeClaim {
        nodeclaim: "a".into()
    }));
    assert!(
        !commands
            .iter()
            .any(|c| matches!(c, Command::DeleteNodeClaim { .. }))
    );
}

#[test]
fn scheduled_change_deletes_each_affected_nodeclaim() {
    let commands = plan(&parse("scheduled_change.json"), |id| {
        Some(claim(id, "on-demand"))
    });
    let deleted: Vec<&str> = commands
        .iter()
        .filter_map(|c| match c {
            Command::DeleteNodeClaim {
                nodeclaim,
                kind: Kind::ScheduledChange,
                ..
            } => Some(nodeclaim.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, vec!["i-0a1b2c3d4e5f60718", "i-0f1e2d3c4b5a69788"]);
    assert!(commands.iter().any(|c| matches!(
        c,
        Command::RecordEvent {
            event: Event::InstanceUnhealthy,
            ..
        }
    )));
}

#[test]
fn state_changes_record_stopping_or_terminating_and_delete() {
    for (fixture_name, event) in [
        ("state_change_stopping.json", Event::InstanceStopping),
        ("state_change_terminated.json", Event::InstanceTerminating),
    ] {
        let commands = plan(&parse(fixture_name), |_| Some(claim("a", "on-demand")));
        assert!(
            commands
                .iter()
                .any(|c| matches!(c, Command::RecordEvent { event: e, .. } if *e == event))
        );
        assert!(
            commands
                .iter()
                .any(|c| matches!(c, Command::DeleteNodeClaim { .. }))
        );
    }
}

#[test]
fn unknown_instances_are_ignored() {
    assert!(plan(&parse("spot_interruption.json"), |_| None).is_empty());
}

#[test]
fn an_on_demand_instance_does_not_mark_a_spot_offering() {
    let commands = plan(&parse("spot_interruption.json"), |_| {
        Some(claim("a", "on-demand"))
    });
    assert!(
        !commands
            .iter()
            .any(|c| matches!(c, Command::MarkSpotOfferingUnavailable { .. }))
    );
}

#[test]
fn every_kind_has_a_distinct_metric_label() {
    let labels: std::collections::BTreeSet<&str> =
        Kind::ALL.iter().map(|k| k.metric_label()).collect();
    assert_eq!(labels.len(), Kind::ALL.len());
}

// ---- fuzzing ---------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bodies_never_panic(body in any::<String>()) {
        let _ = Parser::default().parse(&body);
    }

    #[test]
    fn corrupted_fixtures_never_panic(
        which in 0..5usize,
        cut in any::<prop::sample::Index>(),
        insert in "[\\[\\]{}\":,0-9a-z ]{0,8}",
    ) {
        let names = ["spot_interruption.json", "rebalance_recommendation.json", "scheduled_change.json",
                     "state_change_stopping.json", "moto_spot_interruption_no_account.json"];
        let body = fixture(names[which]);
        let mut at = cut.index(body.len());
        while !body.is_char_boundary(at) { at -= 1; }
        let corrupted = format!("{}{insert}{}", &body[..at], &body[at..]);
        if let Ok(message) = Parser::default().parse(&corrupted) {
            let _ = plan(&message, |id| Some(claim(id, "spot")));
        }
    }
}
