//! The interruption actor (reference section 3): long-polls the interruption queue, parses each
//! message, acts on it and deletes it.
//!
//! Flow of one [`Poll`]: resolve the queue URL (once), `ReceiveMessage` (20 s long poll, 10
//! messages, 20 s visibility), index the NodeClaims by instance id from the
//! [`ClusterView`], then handle the batch with up to [`PARALLEL_MESSAGES`] messages at once:
//! [`Parser::parse`] -> [`plan`] -> carry out the commands (events, ICE cache, NodeClaim
//! deletion through [`ClusterApi`]) -> `DeleteMessage`. A message that does not parse is deleted
//! (it never will); a message whose handling fails is left in the queue and comes back after the
//! visibility timeout, and so is one naming an instance the view cannot see while it has not
//! listed every kind once (an empty view at startup would otherwise drop warnings for nodes it
//! is about to learn of; Karpenter's controller waits for the cluster state to sync). SQS delivers at least once, so every command is idempotent (deleting a
//! NodeClaim that is already gone is success). The actor then polls again at once, or after a
//! capped backoff when SQS itself failed.

pub mod metrics;
pub mod setup;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ObjectReference;

pub use metrics::InterruptionMetrics;

use crate::logs;
use crate::ports::clock::Clock;
use crate::ports::cluster::{ClusterApi, ClusterError, ClusterEvent, Deletion, EventType};
use crate::ports::cluster_view::ClusterView;
use crate::ports::sqs::{INTERRUPTION_RECEIVE, SqsApi, SqsMessage};
use crate::providers::unavailable::UnavailableOfferings;
use crate::runtime::{ActorCtx, ActorError, ControllerId, Handles, Mail, Supervised};
use karpenter_core::apis::SlimNodeClaim;
use karpenter_core::apis::labels;
use karpenter_core::domain::instance_type::CapacityType;
use karpenter_core::domain::interruption::{Command, Event, Message, NodeClaimRef, Parser, plan};

/// Messages of a batch handled at once (Karpenter's `ParallelizeUntil(10)`).
pub const PARALLEL_MESSAGES: usize = 10;
/// First wait after SQS fails; doubles up to [`MAX_POLL_BACKOFF`].
const MIN_POLL_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between polls while SQS keeps failing.
const MAX_POLL_BACKOFF: Duration = Duration::from_secs(30);

/// Acting on a message failed; the message stays in the queue for redelivery.
#[derive(Debug, thiserror::Error)]
pub enum InterruptionError {
    #[error("deleting nodeclaim {nodeclaim}")]
    DeleteNodeClaim {
        nodeclaim: String,
        #[source]
        source: ClusterError,
    },
    #[error("replacing nodeclaim {nodeclaim}")]
    ReplaceNodeClaim {
        nodeclaim: String,
        #[source]
        source: ClusterError,
    },
}

impl InterruptionError {
    /// Label for metrics and logs.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::DeleteNodeClaim { source, .. } | Self::ReplaceNodeClaim { source, .. } => {
                source.category()
            }
        }
    }
}

/// What the actor needs.
#[derive(Debug, Clone)]
pub struct InterruptionDeps {
    pub sqs: Arc<dyn SqsApi>,
    pub cluster: Arc<dyn ClusterApi>,
    pub view: Arc<dyn ClusterView>,
    /// The ICE cache shared with the instance-type and instances providers.
    pub unavailable: Arc<UnavailableOfferings>,
    pub clock: Arc<dyn Clock>,
    /// `INTERRUPTION_QUEUE`: the queue's name.
    pub queue: String,
    /// `INTERRUPTION_REBALANCE_REPLACE`: replace nodes on rebalance recommendations.
    pub rebalance_replace: bool,
    pub metrics: InterruptionMetrics,
}

/// Polls the queue and handles a batch; sent by the actor to itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Poll;

impl Mail for Poll {
    type Reply = ();
    const NAME: &'static str = "Poll";
}

/// The interruption actor (a singleton, started only when `INTERRUPTION_QUEUE` is set).
#[derive(Debug)]
pub struct InterruptionActor {
    deps: InterruptionDeps,
    parser: Parser,
    queue_url: Option<String>,
    backoff: Duration,
}

impl Supervised for InterruptionActor {
    const KIND: &'static str = "InterruptionActor";
    const CONTROLLER: ControllerId = ControllerId::singleton("interruption");
    // Only its own Poll (one at a time) ever waits here.
    const MAILBOX_CAPACITY: usize = 4;
    type Deps = InterruptionDeps;

    fn build(_key: &str, deps: &Self::Deps) -> Result<Self, ActorError> {
        Ok(Self {
            deps: deps.clone(),
            parser: Parser::default(),
            queue_url: None,
            backoff: MIN_POLL_BACKOFF,
        })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.send_after(Duration::ZERO, Poll);
        Ok(())
    }
}

impl Handles<Poll> for InterruptionActor {
    async fn handle(&mut self, _: Poll, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        match self.poll_once(ctx).await {
            Ok(()) => {
                self.backoff = MIN_POLL_BACKOFF;
                ctx.send_after(Duration::ZERO, Poll);
                Ok(())
            }
            Err(error) => {
                ctx.set_state("backing-off");
                ctx.send_after(self.backoff, Poll);
                self.backoff = (self.backoff * 2).min(MAX_POLL_BACKOFF);
                Err(error)
            }
        }
    }
}

/// How one message ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handled {
    /// Acted on (or nothing to do): delete it.
    Done,
    /// Will never parse: delete it.
    Unparseable,
    /// Acting failed: leave it for redelivery.
    Failed,
    /// It names an instance the view cannot see and the view has not synced yet: leave it for
    /// redelivery, when the view can tell a gone instance from one not listed yet.
    Deferred,
}

impl InterruptionActor {
    async fn poll_once(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        let queue_url = if let Some(url) = &self.queue_url {
            url.clone()
        } else {
            ctx.set_state("resolving-queue");
            let url = self
                .deps
                .sqs
                .get_queue_url(&self.deps.queue)
                .await
                .map_err(|e| {
                    tracing::error!(
                        queue = %self.deps.queue,
                        error = logs::err(&e),
                        "failed to create valid sqs provider"
                    );
                    ActorError::with_context(
                        e.category(),
                        &format!("resolving interruption queue {}", self.deps.queue),
                        &e,
                    )
                })?;
            self.queue_url = Some(url.clone());
            url
        };
        ctx.set_state("polling");
        let messages = self
            .deps
            .sqs
            .receive_messages(&queue_url, INTERRUPTION_RECEIVE)
            .await
            .map_err(|e| {
                tracing::error!(error = logs::err(&e), "Reconciler error");
                ActorError::with_context(e.category(), &format!("receiving from {queue_url}"), &e)
            })?;
        if messages.is_empty() {
            return Ok(());
        }
        ctx.set_state("handling");
        let index = self.index_nodeclaims();
        let this = &*self;
        let handled: Vec<(SqsMessage, Handled)> = futures::stream::iter(messages)
            .map(|message| {
                let index = &index;
                async move {
                    let outcome = this.handle_message(&message, index).await;
                    (message, outcome)
                }
            })
            .buffer_unordered(PARALLEL_MESSAGES)
            .collect()
            .await;
        for (message, outcome) in handled {
            if matches!(outcome, Handled::Failed | Handled::Deferred) {
                continue;
            }
            match self
                .deps
                .sqs
                .delete_message(&queue_url, &message.receipt_handle)
                .await
            {
                Ok(()) => {
                    self.deps.metrics.deleted.inc();
                }
                Err(error) => {
                    tracing::error!(
                        error = logs::err(&error),
                        "failed deleting interruption message"
                    );
                }
            }
        }
        Ok(())
    }

    /// NodeClaims by the instance id at the end of their provider id.
    fn index_nodeclaims(&self) -> HashMap<String, NodeClaimRef> {
        let rebalance_replace = self.deps.rebalance_replace;
        self.deps
            .view
            .nodeclaims()
            .iter()
            .filter_map(|claim| {
                let provider_id = claim.status.as_ref()?.provider_id.as_deref()?;
                let instance_id = provider_id.rsplit('/').next()?.to_owned();
                Some((instance_id, reference(claim, rebalance_replace)))
            })
            .collect()
    }

    async fn handle_message(
        &self,
        message: &SqsMessage,
        index: &HashMap<String, NodeClaimRef>,
    ) -> Handled {
        let parsed = match self.parser.parse(&message.body) {
            Ok(parsed) => parsed,
            Err(error) => {
                self.deps.metrics.unparseable(error.category());
                tracing::error!(
                    messageID = %message.message_id,
                    reason = error.category(),
                    error = logs::err(&error),
                    "failed parsing interruption message"
                );
                return Handled::Unparseable;
            }
        };
        if !self.deps.view.is_synced()
            && parsed.instance_ids.iter().any(|id| !index.contains_key(id))
        {
            tracing::debug!(
                message_id = message.message_id,
                "interruption message names an instance the unsynced cluster view cannot see; left for redelivery"
            );
            return Handled::Deferred;
        }
        self.deps.metrics.received(parsed.kind);
        if let Some(time) = parsed.time {
            let seconds = self
                .deps
                .clock
                .now()
                .duration_since(time)
                .as_secs_f64()
                .max(0.0);
            self.deps.metrics.queue_duration.observe(seconds);
        }
        let commands = plan(&parsed, |instance_id| index.get(instance_id).cloned());
        for command in commands {
            if let Err(error) = self.execute(&parsed, command).await {
                tracing::error!(
                    messageID = %message.message_id,
                    error = logs::err(&error),
                    "failed handling interruption message; it will be redelivered"
                );
                return Handled::Failed;
            }
        }
        Handled::Done
    }

    async fn execute(&self, message: &Message, command: Command) -> Result<(), InterruptionError> {
        match command {
            Command::RecordEvent {
                nodeclaim,
                node,
                event,
            } => {
                self.record(&nodeclaim, node.as_deref(), event).await;
                Ok(())
            }
            Command::MarkSpotOfferingUnavailable {
                instance_type,
                zone,
            } => {
                self.deps.unavailable.mark_unavailable(
                    &instance_type,
                    &zone,
                    CapacityType::Spot,
                    message.kind.metric_label(),
                );
                Ok(())
            }
            Command::DeleteNodeClaim {
                nodeclaim,
                nodepool,
                capacity_type,
                kind,
            } => {
                self.log_delete(message, &nodeclaim);
                let deletion = self
                    .deps
                    .cluster
                    .delete_nodeclaim(&nodeclaim)
                    .await
                    .map_err(|source| InterruptionError::DeleteNodeClaim {
                        nodeclaim: nodeclaim.clone(),
                        source,
                    })?;
                if deletion == Deletion::NotFound {
                    // Gone meanwhile: nothing to count (Karpenter ignores NotFound).
                    return Ok(());
                }
                self.deps
                    .metrics
                    .disrupted(kind, nodepool.as_deref(), capacity_type.as_deref());
                Ok(())
            }
            Command::ReplaceNodeClaim { nodeclaim } => {
                // The provisioner sees the deleting node's pods and launches their replacement
                // while the drain honours PDBs: the node goes before the interruption would
                // have taken it, with its pods placed elsewhere first.
                self.log_delete(message, &nodeclaim);
                self.deps
                    .cluster
                    .delete_nodeclaim(&nodeclaim)
                    .await
                    .map_err(|source| InterruptionError::ReplaceNodeClaim {
                        nodeclaim: nodeclaim.clone(),
                        source,
                    })?;
                self.deps.metrics.disrupted(message.kind, None, None);
                Ok(())
            }
        }
    }

    /// Karpenter's line for a NodeClaim deleted because of a message.
    fn log_delete(&self, message: &Message, nodeclaim: &str) {
        let node = self
            .deps
            .view
            .nodeclaim(nodeclaim)
            .and_then(|c| c.status.as_ref().and_then(|s| s.node_name.clone()))
            .unwrap_or_default();
        tracing::info!(
            queue = %self.deps.queue,
            messageKind = message.kind.metric_label(),
            NodeClaim = nodeclaim,
            action = "CordonAndDrain",
            Node = %node,
            "initiating delete from interruption message"
        );
    }

    /// Events are best effort: a lost event must not bring the message back.
    async fn record(&self, nodeclaim: &str, node: Option<&str>, event: Event) {
        let mut regarding = vec![object_reference("NodeClaim", labels::CORE_GROUP, nodeclaim)];
        if let Some(node) = node {
            regarding.push(object_reference("Node", "", node));
        }
        for regarding in regarding {
            let published = self
                .deps
                .cluster
                .publish_event(&ClusterEvent {
                    regarding,
                    related: None,
                    type_: if event.type_() == "Normal" {
                        EventType::Normal
                    } else {
                        EventType::Warning
                    },
                    reason: event.reason().to_owned(),
                    action: "Interrupted".to_owned(),
                    note: Some(event.message().to_owned()),
                })
                .await;
            if let Err(error) = published {
                tracing::debug!(
                    NodeClaim = nodeclaim,
                    reason = event.reason(),
                    error = logs::err(&error),
                    "failed publishing event"
                );
            }
        }
    }
}

fn object_reference(kind: &str, group: &str, name: &str) -> ObjectReference {
    let api_version = if group.is_empty() {
        "v1".to_owned()
    } else {
        format!("{group}/v1")
    };
    ObjectReference {
        api_version: Some(api_version),
        kind: Some(kind.to_owned()),
        name: Some(name.to_owned()),
        ..ObjectReference::default()
    }
}

/// What interruption handling needs of a NodeClaim.
fn reference(claim: &SlimNodeClaim, rebalance_replace: bool) -> NodeClaimRef {
    let label = |key: &str| {
        claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(key))
            .cloned()
    };
    NodeClaimRef {
        name: claim.metadata.name.clone().unwrap_or_default(),
        nodepool: label(labels::NODEPOOL),
        node_name: claim.status.as_ref().and_then(|s| s.node_name.clone()),
        instance_type: label(labels::INSTANCE_TYPE),
        zone: label(labels::ZONE),
        capacity_type: label(labels::CAPACITY_TYPE),
        replace_on_rebalance: rebalance_replace,
        deleting: claim.metadata.deletion_timestamp.is_some(),
    }
}
