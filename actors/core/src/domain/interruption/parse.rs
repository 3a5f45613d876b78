//! Parses SQS message bodies into [`Message`]s.
//!
//! A body is an EventBridge envelope. Its `(version, source, detail-type)` picks a parser from a
//! registry, as Karpenter does; unknown keys and empty bodies are [`Kind::NoOp`] (deleted
//! without action). The envelope is read once with `detail` kept raw, so only the matched
//! parser looks at the detail. A body that is not a valid envelope, or whose detail does not
//! have the shape its kind requires, is a [`ParseError`] whose [`ParseError::category`] labels
//! the metric; the interruption actor deletes such messages (they will never parse).

use std::collections::HashMap;

use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::message::{Kind, Message};

/// Largest body SQS delivers (256 KiB); anything longer did not come from SQS.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// The EventBridge envelope with the detail left unparsed.
#[derive(Debug, Deserialize)]
struct Envelope<'a> {
    #[serde(default)]
    version: String,
    #[serde(default)]
    id: String,
    #[serde(default, rename = "detail-type")]
    detail_type: String,
    #[serde(default)]
    source: String,
    /// Tolerated when missing: moto's EventBridge omits it.
    #[serde(default)]
    account: Option<String>,
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    region: Option<String>,
    #[serde(borrow, default)]
    detail: Option<&'a RawValue>,
}

/// Why a body could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("message body of {size} bytes exceeds the {MAX_BODY_BYTES}-byte SQS limit")]
    TooLarge { size: usize },
    #[error("message body is not an EventBridge event: {reason}")]
    Envelope { reason: String },
    #[error("event time {time:?} is not an RFC 3339 timestamp")]
    Time { time: String },
    #[error("{detail_type} event has no detail")]
    MissingDetail { detail_type: String },
    #[error("{detail_type} detail is malformed: {reason}")]
    Detail {
        detail_type: String,
        reason: DetailError,
    },
}

impl ParseError {
    /// Bounded label for metrics and logs.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::Envelope { .. } => "malformed_envelope",
            Self::Time { .. } => "malformed_time",
            Self::MissingDetail { .. } => "missing_detail",
            Self::Detail { .. } => "malformed_detail",
        }
    }
}

/// Why an event's `detail` does not have the shape its kind requires.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetailError {
    /// Not JSON of the expected shape (serde's message names the field).
    #[error("{0}")]
    Shape(String),
    #[error("instance-id is empty")]
    EmptyInstanceId,
}

/// What a detail parser returns: the kind (a state change may be stopped or terminated) and
/// the instances, or `None` when the event is filtered out (a no-op).
struct Parsed {
    kind: Kind,
    instance_ids: Vec<String>,
    event_type_code: Option<String>,
    state: Option<String>,
}

type DetailParser = fn(&str) -> Result<Option<Parsed>, DetailError>;

/// Registry of detail parsers keyed by `(version, source, detail-type)`.
#[derive(Debug)]
pub struct Parser {
    parsers: HashMap<(&'static str, &'static str, &'static str), DetailParser>,
}

impl Default for Parser {
    fn default() -> Self {
        let mut parsers: HashMap<_, DetailParser> = HashMap::new();
        parsers.insert(
            ("0", "aws.ec2", "EC2 Spot Instance Interruption Warning"),
            spot_interruption,
        );
        parsers.insert(
            ("0", "aws.ec2", "EC2 Instance Rebalance Recommendation"),
            rebalance,
        );
        parsers.insert(
            ("0", "aws.ec2", "EC2 Instance State-change Notification"),
            state_change,
        );
        parsers.insert(("0", "aws.health", "AWS Health Event"), scheduled_change);
        Self { parsers }
    }
}

impl Parser {
    /// Parses one SQS message body. Never panics, whatever the input.
    pub fn parse(&self, body: &str) -> Result<Message, ParseError> {
        if body.len() > MAX_BODY_BYTES {
            return Err(ParseError::TooLarge { size: body.len() });
        }
        if body.trim().is_empty() {
            return Ok(Message::no_op(String::new(), None));
        }
        let envelope: Envelope<'_> =
            serde_json::from_str(body).map_err(|error| ParseError::Envelope {
                reason: error.to_string(),
            })?;
        let time = match envelope.time.as_deref() {
            None | Some("") => None,
            Some(text) => Some(text.parse::<Timestamp>().map_err(|_| ParseError::Time {
                time: text.to_owned(),
            })?),
        };
        let key = (
            envelope.version.as_str(),
            envelope.source.as_str(),
            envelope.detail_type.as_str(),
        );
        let Some(parser) = self.parsers.get(&key) else {
            return Ok(Message::no_op(envelope.id, time));
        };
        let detail = envelope.detail.ok_or_else(|| ParseError::MissingDetail {
            detail_type: envelope.detail_type.clone(),
        })?;
        let parsed = parser(detail.get()).map_err(|reason| ParseError::Detail {
            detail_type: envelope.detail_type.clone(),
            reason,
        })?;
        let Some(parsed) = parsed else {
            return Ok(Message::no_op(envelope.id, time));
        };
        Ok(Message {
            kind: parsed.kind,
            instance_ids: parsed.instance_ids,
            id: envelope.id,
            time,
            account: envelope.account,
            region: envelope.region,
            event_type_code: parsed.event_type_code,
            state: parsed.state,
        })
    }
}

fn detail<'a, T: Deserialize<'a>>(raw: &'a str) -> Result<T, DetailError> {
    serde_json::from_str(raw).map_err(|error| DetailError::Shape(error.to_string()))
}

fn instance_id(id: String) -> Result<Vec<String>, DetailError> {
    if id.is_empty() {
        Err(DetailError::EmptyInstanceId)
    } else {
        Ok(vec![id])
    }
}

/// A warning about one instance (`detail.instance-id`): spot interruption or rebalance.
fn instance_warning(raw: &str, kind: Kind) -> Result<Option<Parsed>, DetailError> {
    #[derive(Deserialize)]
    struct Detail {
        #[serde(rename = "instance-id")]
        instance_id: String,
    }
    let detail: Detail = detail(raw)?;
    Ok(Some(Parsed {
        kind,
        instance_ids: instance_id(detail.instance_id)?,
        event_type_code: None,
        state: None,
    }))
}

fn spot_interruption(raw: &str) -> Result<Option<Parsed>, DetailError> {
    instance_warning(raw, Kind::SpotInterrupted)
}

fn rebalance(raw: &str) -> Result<Option<Parsed>, DetailError> {
    instance_warning(raw, Kind::RebalanceRecommendation)
}

fn state_change(raw: &str) -> Result<Option<Parsed>, DetailError> {
    #[derive(Deserialize)]
    struct Detail {
        #[serde(rename = "instance-id")]
        instance_id: String,
        state: String,
    }
    let detail: Detail = detail(raw)?;
    let kind = match detail.state.to_ascii_lowercase().as_str() {
        "stopping" | "stopped" => Kind::InstanceStopped,
        "shutting-down" | "terminated" => Kind::InstanceTerminated,
        // pending, running: nothing to do.
        _ => return Ok(None),
    };
    Ok(Some(Parsed {
        kind,
        instance_ids: instance_id(detail.instance_id)?,
        event_type_code: None,
        state: Some(detail.state),
    }))
}

fn scheduled_change(raw: &str) -> Result<Option<Parsed>, DetailError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Detail {
        #[serde(default)]
        service: String,
        #[serde(default)]
        event_type_category: String,
        #[serde(default)]
        event_type_code: Option<String>,
        #[serde(default)]
        affected_entities: Vec<Entity>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Entity {
        entity_value: String,
    }
    let detail: Detail = detail(raw)?;
    if detail.service != "EC2" || detail.event_type_category != "scheduledChange" {
        return Ok(None);
    }
    let instance_ids: Vec<String> = detail
        .affected_entities
        .into_iter()
        .map(|entity| entity.entity_value)
        .filter(|id| id.starts_with("i-"))
        .collect();
    Ok(Some(Parsed {
        kind: Kind::ScheduledChange,
        instance_ids,
        event_type_code: detail.event_type_code,
        state: None,
    }))
}
