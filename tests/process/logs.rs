//! What an operator reads with `kubectl logs`: every line `karpenter run` prints is a JSON object
//! with Karpenter's fields (`level`, `time`, `logger`, `message`), from startup through a
//! scale-up to a SIGTERM.

use crate::support::{TERMINATION_GRACE, World};

/// Karpenter's keys every line carries, and the values they take.
const FIELDS: [&str; 4] = ["level", "time", "logger", "message"];
const LEVELS: [&str; 5] = ["DEBUG", "INFO", "WARN", "ERROR", "FATAL"];

/// Why `line` is not a log line as Karpenter writes them; `None` when it is.
fn not_a_log_line(line: &str) -> Option<String> {
    let value: serde_json::Value = match serde_json::from_str(line) {
        Ok(value) => value,
        Err(error) => return Some(format!("not JSON ({error})")),
    };
    let Some(object) = value.as_object() else {
        return Some("not a JSON object".to_owned());
    };
    for field in FIELDS {
        match object.get(field) {
            Some(serde_json::Value::String(text)) if !text.is_empty() => {}
            other => return Some(format!("{field} is {other:?}")),
        }
    }
    let level = object.get("level").and_then(|l| l.as_str()).unwrap_or("");
    if !LEVELS.contains(&level.to_ascii_uppercase().as_str()) {
        return Some(format!("level {level:?} is not one of {LEVELS:?}"));
    }
    let time = object.get("time").and_then(|t| t.as_str()).unwrap_or("");
    if time.parse::<jiff::Timestamp>().is_err() {
        return Some(format!("time {time:?} is not an RFC 3339 timestamp"));
    }
    None
}

#[test]
fn the_line_check_tells_karpenters_lines_from_others() {
    assert_eq!(
        not_a_log_line(
            r#"{"level":"INFO","time":"2026-01-01T00:00:00.000Z","logger":"controller","message":"discovered ssm parameter","commit":"abc"}"#
        ),
        None
    );
    assert!(not_a_log_line("serving http://127.0.0.1:8080/metrics").is_some());
    assert!(not_a_log_line(r#"{"level":"INFO","message":"no time or logger"}"#).is_some());
    assert!(
        not_a_log_line(
            r#"{"level":"LOUD","time":"2026-01-01T00:00:00Z","logger":"l","message":"m"}"#
        )
        .is_some()
    );
}

/// Expected to fail until the JSON logging of issue 15 item 1 lands (`karpenter run` prints
/// plain text today).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_the_daemon_prints_is_a_json_object_with_karpenters_fields() {
    let Some(world) = World::start("logs").await else {
        return;
    };
    world.apply_nodepool().await;
    let mut daemon = world.daemon(&[("LOG_LEVEL", "debug")]);
    world.until_leading_and_ready(&daemon).await;
    world.create_pods("web", 1).await;
    world.until_pods_run("web", 1, &[&daemon]).await;
    daemon.proc.terminate();
    assert!(
        daemon.proc.wait_exit(TERMINATION_GRACE).await.is_some(),
        "{}",
        daemon.proc.tail()
    );

    let output = format!("{}{}", daemon.proc.stdout(), daemon.proc.stderr());
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "the daemon printed nothing");
    let bad: Vec<String> = lines
        .iter()
        .filter_map(|line| not_a_log_line(line).map(|why| format!("{why}: {line}")))
        .take(10)
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {} lines are not Karpenter's JSON log lines, e.g.:\n{}",
        lines
            .iter()
            .filter(|line| not_a_log_line(line).is_some())
            .count(),
        lines.len(),
        bad.join("\n")
    );
}
