//! [`EventBridgeApi`] over aws-sdk-eventbridge.

use async_trait::async_trait;
use aws_sdk_eventbridge as eb;
use aws_sdk_eventbridge::types::{PutEventsRequestEntry, Target};
use karpenter_actors::ports::aws_error::{AwsError, AwsService};
use karpenter_actors::ports::eventbridge::{EventBridgeApi, EventEntry, RuleInfo, TargetInfo};
use karpenter_actors::retry::RetryPolicy;

#[derive(Debug, Clone)]
pub struct EventBridgeAdapter {
    client: eb::Client,
    retry: RetryPolicy,
}

impl EventBridgeAdapter {
    #[must_use]
    pub fn new(client: eb::Client, retry: RetryPolicy) -> Self {
        EventBridgeAdapter { client, retry }
    }
}

#[async_trait]
impl EventBridgeApi for EventBridgeAdapter {
    async fn put_rule(&self, name: &str, event_pattern: &str) -> Result<String, AwsError> {
        let out = super::call(
            &self.retry,
            AwsService::EventBridge,
            "PutRule",
            &self.client,
            |c| c.put_rule().name(name).event_pattern(event_pattern).send(),
        )
        .await?;
        Ok(out.rule_arn().unwrap_or("").to_owned())
    }

    async fn put_targets(
        &self,
        rule: &str,
        target_id: &str,
        target_arn: &str,
    ) -> Result<(), AwsError> {
        let target = Target::builder()
            .id(target_id)
            .arn(target_arn)
            .build()
            .map_err(|e| {
                AwsError::new(
                    AwsService::EventBridge,
                    "PutTargets",
                    Some("ValidationException"),
                    e.to_string(),
                )
            })?;
        let out = super::call(
            &self.retry,
            AwsService::EventBridge,
            "PutTargets",
            &self.client,
            |c| c.put_targets().rule(rule).targets(target.clone()).send(),
        )
        .await?;
        if let Some(failed) = out.failed_entries().first() {
            return Err(AwsError::new(
                AwsService::EventBridge,
                "PutTargets",
                failed.error_code(),
                failed.error_message().unwrap_or("target rejected"),
            ));
        }
        Ok(())
    }

    async fn describe_rule(&self, name: &str) -> Result<Option<RuleInfo>, AwsError> {
        let described = super::call(
            &self.retry,
            AwsService::EventBridge,
            "DescribeRule",
            &self.client,
            |c| c.describe_rule().name(name).send(),
        )
        .await;
        match described {
            Ok(out) => Ok(Some(RuleInfo {
                name: out.name().unwrap_or(name).to_owned(),
                arn: out.arn().unwrap_or_default().to_owned(),
                event_pattern: out.event_pattern().unwrap_or_default().to_owned(),
                state: out
                    .state()
                    .map(|s| s.as_str().to_owned())
                    .unwrap_or_default(),
            })),
            Err(error) if error.is_not_found() => Ok(None),
            Err(error) => Err(error),
        }
    }

    async fn list_targets(&self, rule: &str) -> Result<Vec<TargetInfo>, AwsError> {
        let out = super::call(
            &self.retry,
            AwsService::EventBridge,
            "ListTargetsByRule",
            &self.client,
            |c| c.list_targets_by_rule().rule(rule).send(),
        )
        .await?;
        Ok(out
            .targets()
            .iter()
            .map(|t| TargetInfo {
                id: t.id().to_owned(),
                arn: t.arn().to_owned(),
            })
            .collect())
    }

    async fn put_events(&self, entries: &[EventEntry]) -> Result<u32, AwsError> {
        let entries: Vec<PutEventsRequestEntry> = entries
            .iter()
            .map(|e| {
                PutEventsRequestEntry::builder()
                    .source(&e.source)
                    .detail_type(&e.detail_type)
                    .detail(&e.detail)
                    .set_resources((!e.resources.is_empty()).then(|| e.resources.clone()))
                    .build()
            })
            .collect();
        let out = super::call(
            &self.retry,
            AwsService::EventBridge,
            "PutEvents",
            &self.client,
            |c| c.put_events().set_entries(Some(entries.clone())).send(),
        )
        .await?;
        Ok(u32::try_from(out.failed_entry_count()).unwrap_or(0))
    }
}
