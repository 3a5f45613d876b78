//! Interruption messages (reference section 3): spot interruption warnings, rebalance
//! recommendations, AWS Health scheduled changes and instance state changes, as EventBridge
//! delivers them to the interruption queue.
//!
//! Flow: the interruption actor receives SQS bodies and calls [`Parser::parse`] (a registry keyed
//! by `(version, source, detail-type)`) to get a [`Message`]; [`plan`] turns it, with a lookup of
//! the `NodeClaim` behind each instance, into [`Command`]s (record events, mark the spot offering
//! unavailable, delete or replace the `NodeClaim`) that the actor carries out before deleting
//! the message.

mod message;
mod parse;
mod plan;
pub mod setup;

pub use message::{Kind, Message};
pub use parse::{MAX_BODY_BYTES, ParseError, Parser};
pub use plan::{Command, Event, NodeClaimRef, plan};
