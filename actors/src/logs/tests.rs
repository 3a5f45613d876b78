//! The formatter against Karpenter's shape: key order, levels, object references, durations,
//! resource lists, error chains with AWS fields, sampling, `LOG_LEVEL` filtering, sinks.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use karpenter_config::LogLevel;
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{Layer as _, Registry};

use super::*;
use crate::ports::aws_error::{AwsError, AwsService};
use crate::ports::cloud_provider::CloudProviderError;

/// 2025-06-01T12:00:00.123Z
fn fixed_clock() -> WallClock {
    Arc::new(|| UNIX_EPOCH + Duration::from_millis(1_748_779_200_123))
}

/// Runs `body` with a Karpenter layer at `level` writing to memory; returns its lines.
fn capture_with(
    level: LogLevel,
    layer: impl FnOnce(KarpenterJson) -> KarpenterJson,
    body: impl FnOnce(),
) -> Vec<LogLine> {
    let memory = MemorySink::new();
    let json = layer(
        KarpenterJson::new(vec![memory.sink()])
            .commit(Some("490ef94"))
            .clock(fixed_clock()),
    );
    let subscriber = Registry::default().with(json.with_filter(level_filter(level)));
    tracing::subscriber::with_default(subscriber, body);
    memory.lines()
}

fn capture(body: impl FnOnce()) -> Vec<LogLine> {
    capture_with(LogLevel::Info, |layer| layer, body)
}

const NODECLAIM: ControllerId =
    ControllerId::of_kind("nodeclaim.lifecycle", "karpenter.sh", "NodeClaim");

#[test]
fn a_reconcile_line_has_karpenters_keys_in_karpenters_order() {
    let lines = capture(|| {
        let _reconcile = reconcile_span(&NODECLAIM, None, "default-sfpsl").entered();
        tracing::info!(
            "provider-id" = "aws:///us-west-2b/i-0123",
            "instance-type" = "c3.2xlarge",
            allocatable = %json(&std::collections::BTreeMap::from([("cpu", "7910m"), ("pods", "58")])),
            "launched nodeclaim"
        );
    });
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    assert_eq!(
        line.keys(),
        [
            "level",
            "time",
            "logger",
            "message",
            "commit",
            "controller",
            "controllerGroup",
            "controllerKind",
            "NodeClaim",
            "namespace",
            "name",
            "reconcileID",
            "provider-id",
            "instance-type",
            "allocatable",
        ]
    );
    assert_eq!(line.str("level"), Some("INFO"));
    assert_eq!(line.str("time"), Some("2025-06-01T12:00:00.123Z"));
    assert_eq!(line.str("logger"), Some("controller"));
    assert_eq!(line.str("commit"), Some("490ef94"));
    assert_eq!(line.str("controller"), Some("nodeclaim.lifecycle"));
    assert_eq!(line.str("controllerGroup"), Some("karpenter.sh"));
    assert_eq!(
        line.get("NodeClaim"),
        Some(&json!({"name": "default-sfpsl"}))
    );
    assert_eq!(line.str("namespace"), Some(""));
    assert_eq!(line.str("name"), Some("default-sfpsl"));
    assert_eq!(line.str("reconcileID").map(str::len), Some(36));
    assert_eq!(
        line.get("allocatable"),
        Some(&json!({"cpu": "7910m", "pods": "58"}))
    );
}

#[test]
fn singletons_name_only_the_controller_with_an_empty_key() {
    let lines = capture(|| {
        let _reconcile =
            reconcile_span(&ControllerId::singleton("provisioner"), None, "provisioner").entered();
        tracing::info!(
            nodeclaims = 2_u64,
            pods = 7_u64,
            "computed new nodeclaim(s) to fit pod(s)"
        );
    });
    let line = &lines[0];
    assert_eq!(
        line.keys()[4..],
        [
            "commit",
            "controller",
            "namespace",
            "name",
            "reconcileID",
            "nodeclaims",
            "pods"
        ]
    );
    assert_eq!(line.str("name"), Some(""));
    assert_eq!(line.get("nodeclaims"), Some(&json!(2)));
}

#[test]
fn a_message_may_name_another_controller_of_the_same_actor() {
    let lines = capture(|| {
        let _reconcile = reconcile_span(
            &ControllerId::singleton("instance.garbagecollection"),
            Some("nodeclaim.garbagecollection"),
            "garbage-collector",
        )
        .entered();
        tracing::info!("x");
    });
    assert_eq!(
        lines[0].str("controller"),
        Some("nodeclaim.garbagecollection")
    );
}

#[test]
fn levels_are_debug_info_and_error_and_warn_is_info() {
    let lines = capture_with(
        LogLevel::Debug,
        |layer| layer,
        || {
            tracing::debug!("d");
            tracing::info!("i");
            tracing::warn!("w");
            tracing::error!("e");
            tracing::trace!("t");
        },
    );
    let levels: Vec<_> = lines.iter().map(|l| l.str("level").unwrap_or("")).collect();
    assert_eq!(levels, ["DEBUG", "INFO", "INFO", "ERROR"]);
}

#[test]
fn log_level_filters_our_lines_and_keeps_dependencies_to_warnings() {
    let emit = || {
        tracing::debug!("ours debug");
        tracing::info!("ours info");
        tracing::error!("ours error");
        tracing::info!(target: "hyper::proto", "theirs info");
        tracing::warn!(target: "hyper::proto", "theirs warn");
        tracing::debug!(target: "aws_smithy_runtime", "theirs debug");
    };
    let messages = |level| {
        capture_with(level, |layer| layer, emit)
            .iter()
            .map(|l| l.str("message").unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        messages(LogLevel::Debug),
        ["ours debug", "ours info", "ours error", "theirs warn"]
    );
    assert_eq!(
        messages(LogLevel::Info),
        ["ours info", "ours error", "theirs warn"]
    );
    assert_eq!(messages(LogLevel::Error), ["ours error"]);
}

#[test]
fn caller_is_written_only_when_asked_for_debug() {
    let with = capture_with(
        LogLevel::Debug,
        |layer| layer.caller(true),
        || {
            tracing::debug!("here");
        },
    );
    let caller = with[0].str("caller").unwrap_or_default().to_owned();
    assert!(caller.starts_with("logs/tests.rs:"), "{caller}");
    assert_eq!(
        with[0].keys()[..5],
        ["level", "time", "logger", "caller", "message"]
    );
    let without = capture(|| tracing::info!("here"));
    assert!(without[0].get("caller").is_none());
}

#[test]
fn a_build_without_a_commit_writes_no_commit_key() {
    let lines = capture_with(
        LogLevel::Info,
        |layer| layer.commit(None),
        || {
            tracing::info!("x");
        },
    );
    assert_eq!(lines[0].keys(), ["level", "time", "logger", "message"]);
}

#[test]
fn object_references_durations_and_lists_render_as_karpenters() {
    let pods = vec!["web/a".to_owned(), "web/b".to_owned()];
    let lines = capture(|| {
        tracing::info!(
            NodePool = "default",
            Node = %"ip-10-0-0-1.ec2.internal",
            Pod = %"web/web-1",
            duration = %GoDuration(Duration::from_nanos(100_761_702)),
            ttl = %GoDuration(Duration::from_mins(15)),
            requests = %"{\"cpu\":\"5150m\",\"pods\":\"8\"}",
            names = ?pods,
            count = 3_i64,
            ok = true,
            ratio = 0.5,
            "facts"
        );
    });
    let line = &lines[0];
    assert_eq!(line.get("NodePool"), Some(&json!({"name": "default"})));
    assert_eq!(
        line.get("Node"),
        Some(&json!({"name": "ip-10-0-0-1.ec2.internal"}))
    );
    assert_eq!(
        line.get("Pod"),
        Some(&json!({"name": "web-1", "namespace": "web"}))
    );
    assert_eq!(line.str("duration"), Some("100.761702ms"));
    assert_eq!(line.str("ttl"), Some("15m0s"));
    assert_eq!(
        line.get("requests"),
        Some(&json!({"cpu": "5150m", "pods": "8"}))
    );
    assert_eq!(line.get("names"), Some(&json!(["web/a", "web/b"])));
    assert_eq!(line.get("count"), Some(&json!(3)));
    assert_eq!(line.get("ok"), Some(&json!(true)));
    assert_eq!(line.get("ratio"), Some(&json!(0.5)));
}

#[derive(Debug, thiserror::Error)]
#[error("creating instance")]
struct Launch(#[source] CloudProviderError);

#[test]
fn an_error_walks_its_chain_and_an_aws_error_adds_its_fields_last() {
    let aws = AwsError::new(
        AwsService::Ec2,
        "CreateFleet",
        Some("UnauthorizedOperation"),
        "You are not authorized to perform this operation.",
    )
    .with_status(403)
    .with_request_id("7f3c-req");
    let error = Launch(CloudProviderError::Aws(aws));
    let lines = capture(|| {
        tracing::error!(
            error = err(&error),
            NodeClaim = "default-x",
            "failed launching nodeclaim"
        );
    });
    let line = &lines[0];
    assert_eq!(
        line.keys()[3..],
        [
            "message",
            "commit",
            "NodeClaim",
            "aws-error-code",
            "aws-operation-name",
            "aws-request-id",
            "aws-service-name",
            "aws-status-code",
            "error",
        ]
    );
    assert_eq!(line.str("aws-service-name"), Some("EC2"));
    assert_eq!(line.str("aws-operation-name"), Some("CreateFleet"));
    assert_eq!(line.str("aws-request-id"), Some("7f3c-req"));
    assert_eq!(line.get("aws-status-code"), Some(&json!(403)));
    assert_eq!(line.str("aws-error-code"), Some("UnauthorizedOperation"));
    assert_eq!(
        line.str("error"),
        Some(
            "creating instance: You are not authorized to perform this operation. \
             (aws-error-code=UnauthorizedOperation, aws-operation-name=CreateFleet, \
             aws-request-id=7f3c-req, aws-service-name=EC2, aws-status-code=403)"
        )
    );
}

#[derive(Debug, thiserror::Error)]
#[error("launching nodeclaim default-x: {source}")]
struct Inline {
    source: AwsError,
}

#[test]
fn a_source_already_in_the_message_is_not_repeated() {
    let aws = AwsError::new(
        AwsService::Ec2,
        "CreateFleet",
        Some("InsufficientInstanceCapacity"),
        "no capacity",
    );
    let lines = capture(|| tracing::error!(error = err(&Inline { source: aws }), "x"));
    assert_eq!(
        lines[0].str("error"),
        Some(
            "launching nodeclaim default-x: no capacity (aws-error-code=InsufficientInstanceCapacity, \
             aws-operation-name=CreateFleet, aws-service-name=EC2)"
        )
    );
}

#[test]
fn the_public_text_withholds_the_aws_message_and_keeps_the_context_and_fields() {
    let aws = AwsError::new(
        AwsService::Ec2,
        "CreateFleet",
        Some("UnauthorizedOperation"),
        "You are not authorized. Encoded authorization failure message: AbCd",
    )
    .with_status(403)
    .with_request_id("7f3c-req");
    // As a source, and formatted into an outer message: withheld both ways.
    for error in [
        &Launch(CloudProviderError::Aws(aws.clone())) as &(dyn std::error::Error + 'static),
        &Inline { source: aws },
    ] {
        let text = public_text(error);
        assert!(!text.contains("not authorized"), "{text}");
        assert!(!text.contains("AbCd"), "{text}");
        assert!(text.contains(WITHHELD_AWS_MESSAGE), "{text}");
        assert!(
            text.ends_with(
                "(aws-error-code=UnauthorizedOperation, aws-operation-name=CreateFleet, \
                 aws-request-id=7f3c-req, aws-service-name=EC2, aws-status-code=403)"
            ),
            "{text}"
        );
    }
    assert!(
        public_text(&Launch(CloudProviderError::Aws(AwsError::new(
            AwsService::Ec2,
            "CreateFleet",
            None,
            "x"
        ))))
        .starts_with("creating instance: ")
    );
}

#[test]
fn an_aws_error_without_a_response_has_only_service_and_operation() {
    let aws = AwsError::new(
        AwsService::Sqs,
        "ReceiveMessage",
        None,
        "connection refused",
    );
    let lines = capture(|| tracing::error!(error = err(&aws), "x"));
    assert_eq!(
        lines[0].keys()[4..],
        ["commit", "aws-operation-name", "aws-service-name", "error"]
    );
}

#[test]
fn a_plain_error_text_is_still_the_last_key() {
    let lines = capture(|| tracing::error!(error = %"boom", Node = "n", "x"));
    assert_eq!(lines[0].keys()[4..], ["commit", "Node", "error"]);
    assert_eq!(lines[0].str("error"), Some("boom"));
}

#[test]
fn the_sampler_keeps_the_first_hundred_then_every_hundredth_per_message() {
    let lines = capture(|| {
        for _ in 0..250 {
            tracing::info!("same message");
        }
        tracing::info!("another message");
    });
    // 1..=100 and the 200th.
    assert_eq!(lines.len(), 102);
    let unsampled = capture_with(
        LogLevel::Info,
        |layer| layer.sampling(false),
        || {
            for _ in 0..250 {
                tracing::info!("same message");
            }
        },
    );
    assert_eq!(unsampled.len(), 250);
}

#[test]
fn strings_with_quotes_and_newlines_stay_one_valid_line() {
    let memory = MemorySink::new();
    let subscriber = Registry::default().with(
        KarpenterJson::new(vec![memory.sink()])
            .clock(fixed_clock())
            .with_filter(level_filter(LogLevel::Info)),
    );
    tracing::subscriber::with_default(subscriber, || {
        tracing::info!(reason = "a \"b\"\nc", "multi\nline");
    });
    let text = memory.text();
    assert_eq!(text.lines().count(), 1, "{text}");
    let line: LogLine = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(line.str("message"), Some("multi\nline"));
    assert_eq!(line.str("reason"), Some("a \"b\"\nc"));
}

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("karpenter-logs-{}-{name}", std::process::id()))
}

#[test]
fn output_paths_open_every_sink_and_a_file_is_appended_to() {
    let path = temp_path("out.log");
    let _ = std::fs::remove_file(&path);
    std::fs::write(&path, "kept\n").unwrap();
    let list = format!("stdout, file://{}", path.display());
    let sinks = Sink::open_all(&list, "LOG_OUTPUT_PATHS").unwrap();
    assert_eq!(sinks.len(), 2);
    let file_only = Sink::open_all(&path.display().to_string(), "LOG_OUTPUT_PATHS").unwrap();
    let subscriber = Registry::default().with(
        KarpenterJson::new(file_only)
            .clock(fixed_clock())
            .with_filter(level_filter(LogLevel::Info)),
    );
    tracing::subscriber::with_default(subscriber, || tracing::info!("to the file"));
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("kept"));
    let line: LogLine = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(line.str("message"), Some("to the file"));
    assert!(matches!(
        Sink::open_all(" , ", "LOG_OUTPUT_PATHS"),
        Err(SinkError::Empty {
            setting: "LOG_OUTPUT_PATHS"
        })
    ));
    let missing_dir = temp_path("no-such-dir").join("x.log");
    let error = Sink::open_all(&missing_dir.display().to_string(), "LOG_OUTPUT_PATHS").unwrap_err();
    assert_eq!(error.category(), "log_output");
}

/// A writer that always fails.
struct Broken;

impl std::io::Write for Broken {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::other("disk full"))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failing_output_is_reported_on_the_error_outputs_and_others_still_get_the_line() {
    let errors = MemorySink::new();
    let good = MemorySink::new();
    let subscriber = Registry::default().with(
        KarpenterJson::new(vec![Sink::writer(Broken), good.sink()])
            .error_outputs(vec![errors.sink()])
            .clock(fixed_clock())
            .with_filter(level_filter(LogLevel::Info)),
    );
    tracing::subscriber::with_default(subscriber, || tracing::error!("lost"));
    assert_eq!(
        errors.text(),
        "2025-06-01T12:00:00.123Z write error: disk full\n"
    );
    assert_eq!(good.lines().len(), 1);
}

#[test]
fn the_system_clock_is_the_default() {
    let memory = MemorySink::new();
    let before = SystemTime::now();
    let subscriber = Registry::default()
        .with(KarpenterJson::new(vec![memory.sink()]).with_filter(level_filter(LogLevel::Info)));
    tracing::subscriber::with_default(subscriber, || tracing::info!("now"));
    let time = memory.lines()[0].str("time").unwrap_or_default().to_owned();
    assert!(
        time >= format_time(before - Duration::from_secs(1)),
        "{time}"
    );
}
