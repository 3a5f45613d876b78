//! What the interruption queue and its EventBridge rules must look like (reference 3.1, the
//! getting-started `CloudFormation` template), and what is missing or different in what exists.
//!
//! `karpenter interruption setup` creates or fixes the infrastructure from [`desired`];
//! `--check` and the daemon's startup check compare what exists with it through [`check`].

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// A rule as it exists on the default bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleInfo {
    pub name: String,
    pub arn: String,
    /// The pattern as JSON text.
    pub event_pattern: String,
    /// `ENABLED` or `DISABLED`.
    pub state: String,
}

/// A target of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetInfo {
    pub id: String,
    pub arn: String,
}

/// SQS keeps interruption messages 5 minutes: a spot warning is useless after 2.
pub const MESSAGE_RETENTION_SECONDS: u32 = 300;
/// Longest EventBridge rule name.
const MAX_RULE_NAME: usize = 64;
/// Target id used on every rule.
pub const TARGET_ID: &str = "KarpenterInterruptionQueueTarget";

/// One EventBridge rule routing an event kind to the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSpec {
    pub name: String,
    pub pattern: Value,
}

/// The infrastructure for a queue and cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub queue: String,
    pub rules: Vec<RuleSpec>,
}

/// The queue and the four rules Karpenter's interruption handling needs.
#[must_use]
pub fn desired(queue: &str, cluster: &str) -> Desired {
    let kinds: [(&str, &str, &str); 4] = [
        ("ScheduledChange", "aws.health", "AWS Health Event"),
        (
            "SpotInterruption",
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
        ),
        (
            "Rebalance",
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
        ),
        (
            "InstanceStateChange",
            "aws.ec2",
            "EC2 Instance State-change Notification",
        ),
    ];
    let rules = kinds
        .into_iter()
        .map(|(kind, source, detail_type)| RuleSpec {
            name: rule_name(cluster, kind),
            pattern: json!({ "source": [source], "detail-type": [detail_type] }),
        })
        .collect();
    Desired {
        queue: queue.to_owned(),
        rules,
    }
}

/// `Karpenter-<cluster>-<Kind>`, shortened with a stable hash when over EventBridge's limit.
fn rule_name(cluster: &str, kind: &str) -> String {
    let name = format!("Karpenter-{cluster}-{kind}");
    if name.len() <= MAX_RULE_NAME {
        return name;
    }
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let suffix = format!("-{kind}-{:08x}", hash & 0xffff_ffff);
    let keep = MAX_RULE_NAME - suffix.len() - "Karpenter-".len();
    let cluster: String = cluster.chars().take(keep).collect();
    format!("Karpenter-{cluster}{suffix}")
}

/// The queue policy: EventBridge (and SQS itself) may send; plain-HTTP access is denied.
#[must_use]
pub fn queue_policy(queue_arn: &str) -> Value {
    json!({
        "Version": "2012-10-17",
        "Id": "EC2InterruptionPolicy",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": { "Service": ["events.amazonaws.com", "sqs.amazonaws.com"] },
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
            },
            {
                "Sid": "DenyHTTP",
                "Effect": "Deny",
                "Action": "sqs:*",
                "Resource": queue_arn,
                "Condition": { "Bool": { "aws:SecureTransport": false } },
                "Principal": "*",
            },
        ],
    })
}

/// The queue attributes to set.
#[must_use]
pub fn queue_attributes(queue_arn: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "MessageRetentionPeriod".to_owned(),
            MESSAGE_RETENTION_SECONDS.to_string(),
        ),
        ("SqsManagedSseEnabled".to_owned(), "true".to_owned()),
        ("Policy".to_owned(), queue_policy(queue_arn).to_string()),
    ])
}

/// Something missing or different.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    QueueMissing { queue: String },
    RetentionDiffers { actual: String },
    NotEncrypted,
    PolicyDoesNotAllowEventBridge,
    RuleMissing { rule: String },
    RulePatternDiffers { rule: String, actual: String },
    RuleDisabled { rule: String },
    TargetMissing { rule: String, queue_arn: String },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::QueueMissing { queue } => write!(f, "queue {queue} does not exist"),
            Self::RetentionDiffers { actual } => write!(
                f,
                "queue MessageRetentionPeriod is {actual}, expected {MESSAGE_RETENTION_SECONDS}"
            ),
            Self::NotEncrypted => write!(
                f,
                "queue is not encrypted (SqsManagedSseEnabled or a KMS key)"
            ),
            Self::PolicyDoesNotAllowEventBridge => {
                write!(
                    f,
                    "queue policy does not allow events.amazonaws.com to send messages"
                )
            }
            Self::RuleMissing { rule } => write!(f, "EventBridge rule {rule} does not exist"),
            Self::RulePatternDiffers { rule, actual } => {
                write!(f, "EventBridge rule {rule} has pattern {actual}")
            }
            Self::RuleDisabled { rule } => write!(f, "EventBridge rule {rule} is disabled"),
            Self::TargetMissing { rule, queue_arn } => {
                write!(f, "EventBridge rule {rule} does not target {queue_arn}")
            }
        }
    }
}

/// What exists: the queue's attributes (when it exists) and each desired rule as found.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub queue_attributes: Option<BTreeMap<String, String>>,
    /// One entry per desired rule, in order: the rule (when it exists) and its targets.
    pub rules: Vec<(Option<RuleInfo>, Vec<TargetInfo>)>,
}

/// Every difference between `observed` and `desired`.
#[must_use]
pub fn check(desired: &Desired, observed: &Observed) -> Vec<Problem> {
    let mut problems = Vec::new();
    let Some(attributes) = &observed.queue_attributes else {
        problems.push(Problem::QueueMissing {
            queue: desired.queue.clone(),
        });
        return problems;
    };
    let queue_arn = attributes.get("QueueArn").cloned().unwrap_or_default();
    let retention = attributes
        .get("MessageRetentionPeriod")
        .map_or("", String::as_str);
    if retention != MESSAGE_RETENTION_SECONDS.to_string() {
        problems.push(Problem::RetentionDiffers {
            actual: retention.to_owned(),
        });
    }
    let sse = attributes
        .get("SqsManagedSseEnabled")
        .is_some_and(|v| v == "true")
        || attributes
            .get("KmsMasterKeyId")
            .is_some_and(|v| !v.is_empty());
    if !sse {
        problems.push(Problem::NotEncrypted);
    }
    if !attributes
        .get("Policy")
        .is_some_and(|p| policy_allows_eventbridge(p, &queue_arn))
    {
        problems.push(Problem::PolicyDoesNotAllowEventBridge);
    }
    for (index, spec) in desired.rules.iter().enumerate() {
        let (rule, targets) = observed.rules.get(index).cloned().unwrap_or_default();
        let Some(rule) = rule else {
            problems.push(Problem::RuleMissing {
                rule: spec.name.clone(),
            });
            continue;
        };
        let pattern: Value = serde_json::from_str(&rule.event_pattern).unwrap_or(Value::Null);
        if pattern != spec.pattern {
            problems.push(Problem::RulePatternDiffers {
                rule: spec.name.clone(),
                actual: rule.event_pattern,
            });
        }
        if rule.state.eq_ignore_ascii_case("DISABLED") {
            problems.push(Problem::RuleDisabled {
                rule: spec.name.clone(),
            });
        }
        if !targets.iter().any(|t| t.arn == queue_arn) {
            problems.push(Problem::TargetMissing {
                rule: spec.name.clone(),
                queue_arn: queue_arn.clone(),
            });
        }
    }
    problems
}

/// Whether a queue policy has an `Allow` of `sqs:SendMessage` (or `sqs:*`) for
/// `events.amazonaws.com` on the queue.
#[must_use]
pub fn policy_allows_eventbridge(policy: &str, queue_arn: &str) -> bool {
    let Ok(policy) = serde_json::from_str::<Value>(policy) else {
        return false;
    };
    let statements = match &policy["Statement"] {
        Value::Array(statements) => statements.clone(),
        statement @ Value::Object(_) => vec![statement.clone()],
        _ => return false,
    };
    let contains = |value: &Value, wanted: &[&str]| match value {
        Value::String(s) => wanted.contains(&s.as_str()),
        Value::Array(items) => items
            .iter()
            .any(|v| v.as_str().is_some_and(|s| wanted.contains(&s))),
        _ => false,
    };
    statements.iter().any(|statement| {
        statement["Effect"] == "Allow"
            && contains(&statement["Action"], &["sqs:SendMessage", "sqs:*", "*"])
            && contains(
                &statement["Principal"]["Service"],
                &["events.amazonaws.com"],
            )
            && (statement["Resource"].is_null()
                || contains(&statement["Resource"], &[queue_arn, "*"]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy(desired: &Desired) -> Observed {
        let arn = "arn:aws:sqs:us-west-2:1:q".to_owned();
        let mut attributes = queue_attributes(&arn);
        attributes.insert("QueueArn".into(), arn.clone());
        Observed {
            queue_attributes: Some(attributes),
            rules: desired
                .rules
                .iter()
                .map(|r| {
                    (
                        Some(RuleInfo {
                            name: r.name.clone(),
                            arn: format!("arn:rule/{}", r.name),
                            event_pattern: r.pattern.to_string(),
                            state: "ENABLED".into(),
                        }),
                        vec![TargetInfo {
                            id: TARGET_ID.into(),
                            arn: arn.clone(),
                        }],
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn the_desired_infrastructure_has_four_rules_matching_karpenters() {
        let desired = desired("q", "my-cluster");
        let detail_types: Vec<&str> = desired
            .rules
            .iter()
            .filter_map(|r| r.pattern["detail-type"][0].as_str())
            .collect();
        assert_eq!(
            detail_types,
            [
                "AWS Health Event",
                "EC2 Spot Instance Interruption Warning",
                "EC2 Instance Rebalance Recommendation",
                "EC2 Instance State-change Notification"
            ]
        );
    }

    #[test]
    fn what_setup_creates_passes_the_check() {
        let desired = desired("q", "c");
        assert_eq!(check(&desired, &healthy(&desired)), Vec::new());
    }

    #[test]
    fn each_difference_is_reported() {
        let desired = desired("q", "c");
        let mut observed = healthy(&desired);
        let attributes = observed.queue_attributes.as_mut().unwrap();
        attributes.insert("MessageRetentionPeriod".into(), "345600".into());
        attributes.remove("SqsManagedSseEnabled");
        attributes.insert("Policy".into(), "{}".into());
        observed.rules[0].0 = None;
        observed.rules[1].0.as_mut().unwrap().state = "DISABLED".into();
        observed.rules[2].0.as_mut().unwrap().event_pattern = r#"{"source":["aws.ec2"]}"#.into();
        observed.rules[3].1.clear();
        let problems = check(&desired, &observed);
        assert_eq!(problems.len(), 7, "{problems:#?}");
        assert!(problems.contains(&Problem::NotEncrypted));
        assert!(problems.contains(&Problem::PolicyDoesNotAllowEventBridge));
        assert!(matches!(problems[3], Problem::RuleMissing { .. }));
    }

    #[test]
    fn a_missing_queue_is_the_only_problem_reported() {
        let desired = desired("q", "c");
        assert_eq!(
            check(&desired, &Observed::default()),
            vec![Problem::QueueMissing { queue: "q".into() }]
        );
    }

    #[test]
    fn long_cluster_names_give_rule_names_within_the_limit() {
        let name = "x".repeat(100);
        for rule in desired("q", &name).rules {
            assert!(rule.name.len() <= MAX_RULE_NAME, "{}", rule.name);
        }
        assert_ne!(
            rule_name(&name, "Rebalance"),
            rule_name(&format!("{name}y"), "Rebalance")
        );
    }
}
