//! The narrow SQS port: the interruption queue's calls (reference 3.1) plus the two the setup
//! command and tests need (create a queue, send a message).

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::aws_error::AwsError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsMessage {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveRequest {
    /// 1..=10.
    pub max_messages: u32,
    /// Long-poll wait, 0..=20 s.
    pub wait_time_seconds: u32,
    pub visibility_timeout_seconds: u32,
}

/// Karpenter's interruption poll: 10 messages, 20 s long poll, 20 s visibility (reference 3.1).
pub const INTERRUPTION_RECEIVE: ReceiveRequest = ReceiveRequest {
    max_messages: 10,
    wait_time_seconds: 20,
    visibility_timeout_seconds: 20,
};

#[async_trait]
pub trait SqsApi: Send + Sync + std::fmt::Debug {
    async fn get_queue_url(&self, queue_name: &str) -> Result<String, AwsError>;
    async fn create_queue(&self, queue_name: &str) -> Result<String, AwsError>;
    async fn get_queue_arn(&self, queue_url: &str) -> Result<String, AwsError>;
    async fn receive_messages(
        &self,
        queue_url: &str,
        request: ReceiveRequest,
    ) -> Result<Vec<SqsMessage>, AwsError>;
    async fn delete_message(&self, queue_url: &str, receipt_handle: &str) -> Result<(), AwsError>;
    /// Every attribute of the queue (`QueueArn`, `MessageRetentionPeriod`,
    /// `SqsManagedSseEnabled`, `Policy`, ...), for `interruption setup --check`.
    async fn get_queue_attributes(
        &self,
        queue_url: &str,
    ) -> Result<BTreeMap<String, String>, AwsError>;
    async fn set_queue_attributes(
        &self,
        queue_url: &str,
        attributes: &BTreeMap<String, String>,
    ) -> Result<(), AwsError>;
    /// Returns the message id.
    async fn send_message(&self, queue_url: &str, body: &str) -> Result<String, AwsError>;
}
