//! [`SqsApi`] over aws-sdk-sqs.

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_sqs as sqs;
use aws_sdk_sqs::types::QueueAttributeName;
use karpenter_actors::ports::aws_error::{AwsError, AwsService};
use karpenter_actors::ports::sqs::{ReceiveRequest, SqsApi, SqsMessage};
use karpenter_actors::retry::RetryPolicy;

#[derive(Debug, Clone)]
pub struct SqsAdapter {
    client: sqs::Client,
    retry: RetryPolicy,
}

impl SqsAdapter {
    #[must_use]
    pub fn new(client: sqs::Client, retry: RetryPolicy) -> Self {
        SqsAdapter { client, retry }
    }
}

fn int(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

#[async_trait]
impl SqsApi for SqsAdapter {
    async fn get_queue_url(&self, queue_name: &str) -> Result<String, AwsError> {
        let out = super::call(
            &self.retry,
            AwsService::Sqs,
            "GetQueueUrl",
            &self.client,
            |c| c.get_queue_url().queue_name(queue_name).send(),
        )
        .await?;
        Ok(out.queue_url().unwrap_or("").to_owned())
    }

    async fn create_queue(&self, queue_name: &str) -> Result<String, AwsError> {
        let out = super::call(
            &self.retry,
            AwsService::Sqs,
            "CreateQueue",
            &self.client,
            |c| c.create_queue().queue_name(queue_name).send(),
        )
        .await?;
        Ok(out.queue_url().unwrap_or("").to_owned())
    }

    async fn get_queue_arn(&self, queue_url: &str) -> Result<String, AwsError> {
        let out = super::call(
            &self.retry,
            AwsService::Sqs,
            "GetQueueAttributes",
            &self.client,
            |c| {
                c.get_queue_attributes()
                    .queue_url(queue_url)
                    .attribute_names(QueueAttributeName::QueueArn)
                    .send()
            },
        )
        .await?;
        Ok(out
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::QueueArn))
            .cloned()
            .unwrap_or_default())
    }

    async fn receive_messages(
        &self,
        queue_url: &str,
        request: ReceiveRequest,
    ) -> Result<Vec<SqsMessage>, AwsError> {
        let out = super::call(
            &self.retry,
            AwsService::Sqs,
            "ReceiveMessage",
            &self.client,
            |c| {
                c.receive_message()
                    .queue_url(queue_url)
                    .max_number_of_messages(int(request.max_messages))
                    .wait_time_seconds(int(request.wait_time_seconds))
                    .visibility_timeout(int(request.visibility_timeout_seconds))
                    .customize()
                    // The answer comes when the long poll's wait ends: its attempt gets the wait
                    // on top of the ordinary timeout.
                    .config_override(sqs::config::Builder::default().timeout_config(
                        super::long_poll_timeouts(std::time::Duration::from_secs(u64::from(
                            request.wait_time_seconds,
                        ))),
                    ))
                    .send()
            },
        )
        .await?;
        Ok(out
            .messages()
            .iter()
            .map(|m| SqsMessage {
                message_id: m.message_id().unwrap_or("").to_owned(),
                receipt_handle: m.receipt_handle().unwrap_or("").to_owned(),
                body: m.body().unwrap_or("").to_owned(),
            })
            .collect())
    }

    async fn get_queue_attributes(
        &self,
        queue_url: &str,
    ) -> Result<BTreeMap<String, String>, AwsError> {
        let out = super::call(
            &self.retry,
            AwsService::Sqs,
            "GetQueueAttributes",
            &self.client,
            |c| {
                c.get_queue_attributes()
                    .queue_url(queue_url)
                    .attribute_names(QueueAttributeName::All)
                    .send()
            },
        )
        .await?;
        Ok(out
            .attributes()
            .map(|attributes| {
                attributes
                    .iter()
                    .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn set_queue_attributes(
        &self,
        queue_url: &str,
        attributes: &BTreeMap<String, String>,
    ) -> Result<(), AwsError> {
        let attributes: std::collections::HashMap<QueueAttributeName, String> = attributes
            .iter()
            .map(|(k, v)| (QueueAttributeName::from(k.as_str()), v.clone()))
            .collect();
        super::call(
            &self.retry,
            AwsService::Sqs,
            "SetQueueAttributes",
            &self.client,
            |c| {
                c.set_queue_attributes()
                    .queue_url(queue_url)
                    .set_attributes(Some(attributes.clone()))
                    .send()
            },
        )
        .await?;
        Ok(())
    }

    async fn delete_message(&self, queue_url: &str, receipt_handle: &str) -> Result<(), AwsError> {
        super::call(
            &self.retry,
            AwsService::Sqs,
            "DeleteMessage",
            &self.client,
            |c| {
                c.delete_message()
                    .queue_url(queue_url)
                    .receipt_handle(receipt_handle)
                    .send()
            },
        )
        .await?;
        Ok(())
    }

    async fn send_message(&self, queue_url: &str, body: &str) -> Result<String, AwsError> {
        let out = super::call(
            &self.retry,
            AwsService::Sqs,
            "SendMessage",
            &self.client,
            |c| {
                c.send_message()
                    .queue_url(queue_url)
                    .message_body(body)
                    .send()
            },
        )
        .await?;
        Ok(out.message_id().unwrap_or("").to_owned())
    }
}
