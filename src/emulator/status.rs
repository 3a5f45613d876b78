//! Failures as the API server reports them: a `meta/v1` `Status` with HTTP code, reason,
//! message and details (name, group, kind, causes), built by the constructors below so every
//! handler words a failure the way the real server does.

use serde_json::{Value, json};

use super::kinds::ResourceKind;

/// A failed request, rendered as a `Status` body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

/// One entry of `details.causes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cause {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

fn details(kind: &ResourceKind, name: &str) -> Value {
    let mut details = json!({ "name": name, "kind": kind.plural });
    if !kind.group.is_empty() {
        details["group"] = json!(kind.group);
    }
    details
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn not_found(kind: &ResourceKind, name: &str) -> Self {
        Self {
            details: Some(details(kind, name)),
            ..Self::new(
                404,
                "NotFound",
                format!("{} \"{name}\" not found", kind.qualified_plural()),
            )
        }
    }

    pub fn path_not_found(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    pub fn namespace_not_found(namespace: &str) -> Self {
        Self {
            details: Some(json!({ "name": namespace, "kind": "namespaces" })),
            ..Self::new(
                404,
                "NotFound",
                format!("namespaces \"{namespace}\" not found"),
            )
        }
    }

    pub fn already_exists(kind: &ResourceKind, name: &str) -> Self {
        Self {
            details: Some(details(kind, name)),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", kind.qualified_plural()),
            )
        }
    }

    /// A write with a stale resourceVersion or failed precondition.
    pub fn conflict(kind: &ResourceKind, name: &str, why: &str) -> Self {
        Self {
            details: Some(details(kind, name)),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": {why}",
                    kind.qualified_plural()
                ),
            )
        }
    }

    pub fn stale(kind: &ResourceKind, name: &str) -> Self {
        Self::conflict(
            kind,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with one cause per violated field, worded as the server words them.
    pub fn invalid(kind: &ResourceKind, name: &str, causes: &[Cause]) -> Self {
        let listed: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let message = if listed.len() == 1 {
            format!(
                "{} \"{name}\" is invalid: {}",
                kind.qualified_kind(),
                listed[0]
            )
        } else {
            format!(
                "{} \"{name}\" is invalid: [{}]",
                kind.qualified_kind(),
                listed.join(", ")
            )
        };
        let mut detail = json!({ "name": name, "kind": kind.kind });
        if !kind.group.is_empty() {
            detail["group"] = json!(kind.group);
        }
        detail["causes"] = causes
            .iter()
            .map(|c| json!({ "reason": c.reason, "message": c.message, "field": c.field }))
            .collect();
        Self {
            details: Some(detail),
            ..Self::new(422, "Invalid", message)
        }
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {content_type})"
            ),
        )
    }

    /// 406: the client accepts only answers the emulator cannot write (protobuf).
    pub fn not_acceptable() -> Self {
        Self::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json",
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// The `Status` of a successful delete or subresource action.
pub(crate) fn success(kind: &ResourceKind, name: &str, uid: Option<&str>, code: u16) -> Value {
    let mut detail = details(kind, name);
    if let Some(uid) = uid {
        detail["uid"] = json!(uid);
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": detail,
        "code": code,
    })
}
