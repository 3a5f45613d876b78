//! `karpenter interruption setup` and the daemon's startup check, over the SQS and EventBridge
//! ports: [`ensure`] creates or fixes the queue and its four rules (idempotent), [`inspect`]
//! reads what exists and [`check`](karpenter_core::domain::interruption::setup::check) lists what is
//! missing or different.

use crate::ports::aws_error::AwsError;
use crate::ports::eventbridge::EventBridgeApi;
use crate::ports::sqs::SqsApi;
use karpenter_core::domain::interruption::setup::{self, Desired, Observed, Problem};

/// What `ensure` changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    pub queue_url: String,
    pub queue_arn: String,
    /// Human-readable steps taken, in order (empty when everything was already right).
    pub changes: Vec<String>,
}

/// Reads the queue and the rules as they exist.
pub async fn inspect(
    sqs: &dyn SqsApi,
    eventbridge: &dyn EventBridgeApi,
    desired: &Desired,
) -> Result<Observed, AwsError> {
    let queue_attributes = match sqs.get_queue_url(&desired.queue).await {
        Ok(url) => Some(sqs.get_queue_attributes(&url).await?),
        Err(error) if error.is_not_found() => None,
        Err(error) => return Err(error),
    };
    let mut rules = Vec::with_capacity(desired.rules.len());
    for rule in &desired.rules {
        let found = eventbridge.describe_rule(&rule.name).await?;
        let targets = match &found {
            Some(_) => eventbridge.list_targets(&rule.name).await?,
            None => Vec::new(),
        };
        rules.push((found, targets));
    }
    Ok(Observed {
        queue_attributes,
        rules,
    })
}

/// What is missing or different; empty when the infrastructure is right.
pub async fn check(
    sqs: &dyn SqsApi,
    eventbridge: &dyn EventBridgeApi,
    queue: &str,
    cluster: &str,
) -> Result<Vec<Problem>, AwsError> {
    let desired = setup::desired(queue, cluster);
    let observed = inspect(sqs, eventbridge, &desired).await?;
    Ok(setup::check(&desired, &observed))
}

/// Creates the queue and rules, or fixes what differs. Running it twice changes nothing the
/// second time.
pub async fn ensure(
    sqs: &dyn SqsApi,
    eventbridge: &dyn EventBridgeApi,
    queue: &str,
    cluster: &str,
) -> Result<Applied, AwsError> {
    let desired = setup::desired(queue, cluster);
    let before = inspect(sqs, eventbridge, &desired).await?;
    let mut applied = Applied::default();
    let queue_url = if before.queue_attributes.is_some() {
        sqs.get_queue_url(queue).await?
    } else {
        applied.changes.push(format!("created queue {queue}"));
        sqs.create_queue(queue).await?
    };
    let queue_arn = sqs.get_queue_arn(&queue_url).await?;
    let problems = setup::check(&desired, &before);
    let queue_needs_fix = problems.iter().any(|p| {
        matches!(
            p,
            Problem::QueueMissing { .. }
                | Problem::RetentionDiffers { .. }
                | Problem::NotEncrypted
                | Problem::PolicyDoesNotAllowEventBridge
        )
    });
    if queue_needs_fix {
        sqs.set_queue_attributes(&queue_url, &setup::queue_attributes(&queue_arn))
            .await?;
        applied.changes.push(format!(
            "set queue attributes: retention {} s, SSE, policy allowing EventBridge",
            setup::MESSAGE_RETENTION_SECONDS
        ));
    }
    for (rule, (found, targets)) in desired.rules.iter().zip(&before.rules) {
        let pattern_right = found.as_ref().is_some_and(|found| {
            serde_json::from_str::<serde_json::Value>(&found.event_pattern)
                .ok()
                .as_ref()
                == Some(&rule.pattern)
                && !found.state.eq_ignore_ascii_case("DISABLED")
        });
        if !pattern_right {
            eventbridge
                .put_rule(&rule.name, &rule.pattern.to_string())
                .await?;
            applied.changes.push(format!("put rule {}", rule.name));
        }
        if !targets.iter().any(|t| t.arn == queue_arn) {
            eventbridge
                .put_targets(&rule.name, setup::TARGET_ID, &queue_arn)
                .await?;
            applied
                .changes
                .push(format!("targeted rule {} at {queue_arn}", rule.name));
        }
    }
    applied.queue_url = queue_url;
    applied.queue_arn = queue_arn;
    Ok(applied)
}
