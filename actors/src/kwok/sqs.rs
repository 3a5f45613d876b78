//! kwok's SQS: queues in memory with visibility timeouts and long polls on tokio's clock.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::faults::Faults;
use crate::ports::aws_error::{AwsError, AwsService};
use crate::ports::sqs::{ReceiveRequest, SqsApi, SqsMessage};

const ACCOUNT: &str = "000000000000";

#[derive(Debug, Clone)]
struct Stored {
    id: String,
    body: String,
    visible_at: Instant,
    receipt: Option<String>,
}

#[derive(Debug, Default)]
struct Queue {
    name: String,
    messages: VecDeque<Stored>,
    attributes: BTreeMap<String, String>,
}

#[derive(Debug, Default)]
struct State {
    queues: BTreeMap<String, Queue>,
    next_id: u64,
}

/// The in-memory SQS.
#[derive(Debug)]
pub struct KwokSqs {
    region: String,
    state: Mutex<State>,
    arrived: Notify,
    faults: Faults,
}

fn not_found(operation: &'static str, queue: &str) -> AwsError {
    AwsError::new(
        AwsService::Sqs,
        operation,
        Some("AWS.SimpleQueueService.NonExistentQueue"),
        format!("The specified queue does not exist: {queue}"),
    )
    .with_status(400)
}

impl KwokSqs {
    #[must_use]
    pub fn new(region: &str) -> Self {
        KwokSqs {
            region: region.to_owned(),
            state: Mutex::new(State::default()),
            arrived: Notify::new(),
            faults: Faults::default(),
        }
    }

    #[must_use]
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn url(&self, name: &str) -> String {
        format!("https://sqs.{}.amazonaws.com/{ACCOUNT}/{name}", self.region)
    }

    /// The ARN of a queue url, as `GetQueueAttributes` would tell.
    #[must_use]
    pub fn arn_of_url(&self, url: &str) -> String {
        let name = url.rsplit('/').next().unwrap_or(url);
        format!("arn:aws:sqs:{}:{ACCOUNT}:{name}", self.region)
    }

    /// Delivers a message to the queue with this ARN (EventBridge targets); `false` if none.
    pub fn deliver_to_arn(&self, arn: &str, body: &str) -> bool {
        let name = arn.rsplit(':').next().unwrap_or(arn);
        let url = self.url(name);
        let mut state = self.lock();
        state.next_id += 1;
        let id = format!("msg-{}", state.next_id);
        let Some(queue) = state.queues.get_mut(&url) else {
            return false;
        };
        queue.messages.push_back(Stored {
            id,
            body: body.to_owned(),
            visible_at: Instant::now(),
            receipt: None,
        });
        drop(state);
        self.arrived.notify_waiters();
        true
    }

    /// Messages in a queue, visible or not.
    #[must_use]
    pub fn depth(&self, url: &str) -> usize {
        self.lock().queues.get(url).map_or(0, |q| q.messages.len())
    }

    fn take_visible(
        &self,
        url: &str,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<SqsMessage>, AwsError> {
        let now = Instant::now();
        let mut state = self.lock();
        let mut next = state.next_id;
        let queue = state
            .queues
            .get_mut(url)
            .ok_or_else(|| not_found("ReceiveMessage", url))?;
        let mut out = Vec::new();
        for message in queue
            .messages
            .iter_mut()
            .filter(|m| m.visible_at <= now)
            .take(max)
        {
            next += 1;
            let receipt = format!("receipt-{next}");
            message.visible_at = now + visibility;
            message.receipt = Some(receipt.clone());
            out.push(SqsMessage {
                message_id: message.id.clone(),
                receipt_handle: receipt,
                body: message.body.clone(),
            });
        }
        state.next_id = next;
        Ok(out)
    }
}

#[async_trait]
impl SqsApi for KwokSqs {
    async fn get_queue_url(&self, queue_name: &str) -> Result<String, AwsError> {
        self.faults.check("GetQueueUrl", queue_name)?;
        let url = self.url(queue_name);
        if self.lock().queues.contains_key(&url) {
            Ok(url)
        } else {
            Err(not_found("GetQueueUrl", queue_name))
        }
    }

    async fn create_queue(&self, queue_name: &str) -> Result<String, AwsError> {
        self.faults.check("CreateQueue", queue_name)?;
        let url = self.url(queue_name);
        self.lock()
            .queues
            .entry(url.clone())
            .or_insert_with(|| Queue {
                name: queue_name.to_owned(),
                messages: VecDeque::new(),
                attributes: BTreeMap::new(),
            });
        Ok(url)
    }

    async fn get_queue_arn(&self, queue_url: &str) -> Result<String, AwsError> {
        self.faults.check("GetQueueAttributes", queue_url)?;
        let state = self.lock();
        let queue = state
            .queues
            .get(queue_url)
            .ok_or_else(|| not_found("GetQueueAttributes", queue_url))?;
        Ok(format!(
            "arn:aws:sqs:{}:{ACCOUNT}:{}",
            self.region, queue.name
        ))
    }

    async fn receive_messages(
        &self,
        queue_url: &str,
        request: ReceiveRequest,
    ) -> Result<Vec<SqsMessage>, AwsError> {
        self.faults.check("ReceiveMessage", queue_url)?;
        let max = usize::try_from(request.max_messages.clamp(1, 10)).unwrap_or(10);
        let visibility = Duration::from_secs(u64::from(request.visibility_timeout_seconds));
        let deadline = Instant::now() + Duration::from_secs(u64::from(request.wait_time_seconds));
        loop {
            let arrived = self.arrived.notified();
            let messages = self.take_visible(queue_url, max, visibility)?;
            if !messages.is_empty() || Instant::now() >= deadline {
                return Ok(messages);
            }
            // Wake on a new message, or re-check when the long poll ends.
            let _ = tokio::time::timeout_at(deadline, arrived).await;
        }
    }

    async fn delete_message(&self, queue_url: &str, receipt_handle: &str) -> Result<(), AwsError> {
        self.faults.check("DeleteMessage", receipt_handle)?;
        let mut state = self.lock();
        let queue = state
            .queues
            .get_mut(queue_url)
            .ok_or_else(|| not_found("DeleteMessage", queue_url))?;
        let before = queue.messages.len();
        queue
            .messages
            .retain(|m| m.receipt.as_deref() != Some(receipt_handle));
        if queue.messages.len() == before {
            return Err(AwsError::new(
                AwsService::Sqs,
                "DeleteMessage",
                Some("ReceiptHandleIsInvalid"),
                format!("The input receipt handle \"{receipt_handle}\" is not valid."),
            )
            .with_status(400));
        }
        Ok(())
    }

    async fn get_queue_attributes(
        &self,
        queue_url: &str,
    ) -> Result<BTreeMap<String, String>, AwsError> {
        self.faults.check("GetQueueAttributes", queue_url)?;
        let arn = self.get_queue_arn(queue_url).await?;
        let state = self.lock();
        let queue = state
            .queues
            .get(queue_url)
            .ok_or_else(|| not_found("GetQueueAttributes", queue_url))?;
        let mut attributes = queue.attributes.clone();
        attributes.insert("QueueArn".to_owned(), arn);
        attributes
            .entry("MessageRetentionPeriod".to_owned())
            .or_insert_with(|| "345600".to_owned());
        attributes.insert(
            "ApproximateNumberOfMessages".to_owned(),
            queue.messages.len().to_string(),
        );
        Ok(attributes)
    }

    async fn set_queue_attributes(
        &self,
        queue_url: &str,
        attributes: &BTreeMap<String, String>,
    ) -> Result<(), AwsError> {
        self.faults.check("SetQueueAttributes", queue_url)?;
        let mut state = self.lock();
        let queue = state
            .queues
            .get_mut(queue_url)
            .ok_or_else(|| not_found("SetQueueAttributes", queue_url))?;
        queue
            .attributes
            .extend(attributes.iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(())
    }

    async fn send_message(&self, queue_url: &str, body: &str) -> Result<String, AwsError> {
        self.faults.check("SendMessage", queue_url)?;
        let arn = self.arn_of_url(queue_url);
        if !self.deliver_to_arn(&arn, body) {
            return Err(not_found("SendMessage", queue_url));
        }
        Ok(format!("msg-{}", self.lock().next_id))
    }
}
