//! The narrow EventBridge port: the rules that route EC2 and Health events to the interruption
//! queue, and `PutEvents` for tests and kwok's spot interruptions.

use async_trait::async_trait;

use super::aws_error::AwsError;
pub use karpenter_core::domain::interruption::setup::{RuleInfo, TargetInfo};

/// One event to publish; `detail` is a JSON object as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventEntry {
    pub source: String,
    pub detail_type: String,
    pub detail: String,
    pub resources: Vec<String>,
}

#[async_trait]
pub trait EventBridgeApi: Send + Sync + std::fmt::Debug {
    /// Creates or updates a rule on the default bus; returns its ARN.
    async fn put_rule(&self, name: &str, event_pattern: &str) -> Result<String, AwsError>;
    async fn put_targets(
        &self,
        rule: &str,
        target_id: &str,
        target_arn: &str,
    ) -> Result<(), AwsError>;
    /// The rule, or `None` when it does not exist.
    async fn describe_rule(&self, name: &str) -> Result<Option<RuleInfo>, AwsError>;
    async fn list_targets(&self, rule: &str) -> Result<Vec<TargetInfo>, AwsError>;
    /// Returns the number of entries that failed.
    async fn put_events(&self, entries: &[EventEntry]) -> Result<u32, AwsError>;
}
