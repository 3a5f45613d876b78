//! Rendering of one line's parts into JSON text: strings, keys, values by the conventions of
//! the [module docs](super), errors with their chains and structured AWS fields, and the time.
//! Everything appends to caller-owned `String`s, so a line costs no allocation once the
//! buffers have grown.

use std::error::Error;
use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};

use super::OBJECT_KINDS;
use crate::ports::aws_error::AwsError;
use crate::ports::cloud_provider::CloudProviderError;
use crate::providers::cloud_provider::RefreshError;
use crate::providers::instances::InstancesError;
use crate::providers::pricing::PricingError;

/// Appends `text` as a JSON string (quoted, escaped).
pub(super) fn push_json_str(out: &mut String, text: &str) {
    out.push('"');
    push_escaped(out, text);
    out.push('"');
}

/// Appends `text` escaped for the inside of a JSON string.
fn push_escaped(out: &mut String, text: &str) {
    let mut start = 0;
    for (index, byte) in text.bytes().enumerate() {
        let escape = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1F => "",
            _ => continue,
        };
        out.push_str(&text[start..index]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{byte:04x}");
        } else {
            out.push_str(escape);
        }
        start = index + 1;
    }
    out.push_str(&text[start..]);
}

/// Appends `,"key":`.
pub(super) fn push_key(out: &mut String, key: &str) {
    out.push(',');
    push_json_str(out, key);
    out.push(':');
}

/// Whether `key` is an object kind, and whether that kind is namespaced.
fn object_kind(key: &str) -> Option<bool> {
    OBJECT_KINDS
        .iter()
        .find(|(kind, _)| *kind == key)
        .map(|(_, namespaced)| *namespaced)
}

/// Appends an object reference: `{"name":"x"}`, or `{"name":"x","namespace":"y"}` for a
/// namespaced kind given `y/x` (klog's `ObjectRef`, namespace left out when empty).
fn push_object_ref(out: &mut String, namespaced: bool, text: &str) {
    let (namespace, name) = match text.split_once('/') {
        Some((namespace, name)) if namespaced => (namespace, name),
        _ => ("", text),
    };
    out.push_str("{\"name\":");
    push_json_str(out, name);
    if !namespace.is_empty() {
        out.push_str(",\"namespace\":");
        push_json_str(out, namespace);
    }
    out.push('}');
}

/// Appends `text` as JSON if it is a JSON object or array (compacted), else as a string.
fn push_text_value(out: &mut String, text: &str) {
    let trimmed = text.trim();
    if (trimmed.starts_with('{') || trimmed.starts_with('['))
        && serde_json::from_str::<serde::de::IgnoredAny>(trimmed).is_ok()
    {
        push_compact_json(out, trimmed);
    } else {
        push_json_str(out, text);
    }
}

/// Appends valid JSON without the whitespace outside its strings (`["a", "b"]` from a `Vec`'s
/// `Debug` becomes `["a","b"]`).
fn push_compact_json(out: &mut String, json: &str) {
    let mut in_string = false;
    let mut escaped = false;
    for c in json.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if !c.is_whitespace() {
            if c == '"' {
                in_string = true;
            }
            out.push(c);
        }
    }
}

/// Appends a field's value given as text (a `str`, or a `%`/`?` value formatted).
pub(super) fn push_field_text(out: &mut String, key: &str, text: &str) {
    push_key(out, key);
    match object_kind(key) {
        Some(namespaced) => push_object_ref(out, namespaced, text),
        None => push_text_value(out, text),
    }
}

/// The `time` format: `2006-01-02T15:04:05.000Z` (UTC, milliseconds), Karpenter's ISO8601.
#[must_use]
pub fn format_time(time: SystemTime) -> String {
    let mut out = String::with_capacity(24);
    push_time(&mut out, time);
    out
}

pub(super) fn push_time(out: &mut String, time: SystemTime) {
    thread_local! {
        /// The last second formatted on this thread, `2006-01-02T15:04:05.`: lines come many
        /// per second, and only the milliseconds change between them.
        static SECOND: std::cell::RefCell<(u64, String)> =
            const { std::cell::RefCell::new((u64::MAX, String::new())) };
    }
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since.as_secs();
    SECOND.with(|cell| {
        let Ok(mut cached) = cell.try_borrow_mut() else {
            push_second(out, seconds);
            return;
        };
        if cached.0 != seconds {
            cached.1.clear();
            push_second(&mut cached.1, seconds);
            cached.0 = seconds;
        }
        out.push_str(&cached.1);
    });
    let millis = since.subsec_millis();
    for digit in [millis / 100, millis / 10 % 10, millis % 10] {
        out.push(char::from(b'0' + u8::try_from(digit).unwrap_or(0)));
    }
    out.push('Z');
}

/// `2006-01-02T15:04:05.` for a Unix second.
fn push_second(out: &mut String, seconds: u64) {
    let days = i64::try_from(seconds / 86_400).unwrap_or(0);
    let of_day = seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60,
    );
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Appends the short `caller`, `dir/file.rs:line` (zap's short caller encoder).
pub(super) fn push_caller(out: &mut String, file: &str, line: u32) {
    let mut parts = file.rsplitn(3, ['/', '\\']);
    let name = parts.next().unwrap_or(file);
    push_key(out, "caller");
    out.push('"');
    if let Some(dir) = parts.next() {
        push_escaped(out, dir);
        out.push('/');
    }
    push_escaped(out, name);
    let _ = write!(out, ":{line}\"");
}

/// The error of an event: its chain's text and the structured fields found in the chain.
#[derive(Debug, Default)]
pub(super) struct ErrorParts {
    pub text: String,
    pub present: bool,
    /// `(key, rendered JSON value)`, in the order found.
    pub fields: Vec<(&'static str, String)>,
}

impl ErrorParts {
    pub(super) fn clear(&mut self) {
        self.text.clear();
        self.present = false;
        self.fields.clear();
    }

    /// Records an error: the text of each error of the chain, joined by `": "` (the project's
    /// chain form, `karpenter_core::errors::chain`), and the `aws-*` fields of an AWS error in it.
    pub(super) fn record(&mut self, error: &(dyn Error + 'static)) {
        self.present = true;
        let mut current = Some(error);
        let mut link = String::new();
        while let Some(error) = current {
            link.clear();
            let _ = write!(link, "{error}");
            // A message that already ends with its source's text (`"…: {source}"`) is not
            // repeated.
            if self.text.is_empty() {
                self.text.push_str(&link);
            } else if !self.text.ends_with(link.as_str()) {
                self.text.push_str(": ");
                self.text.push_str(&link);
            }
            if let Some(aws) = aws_error_in(error) {
                self.push_aws(aws);
            }
            current = error.source();
        }
    }

    fn push_aws(&mut self, aws: &AwsError) {
        // Karpenter's structured error handler: keys sorted, request id, status and code only
        // when present; the text gets the same pairs as a ` (k=v, ...)` suffix.
        let mut pairs: Vec<(&'static str, String, String)> = Vec::with_capacity(5);
        if let Some(code) = aws.code.as_deref() {
            pairs.push(("aws-error-code", code.to_owned(), quoted(code)));
        }
        pairs.push((
            "aws-operation-name",
            aws.operation.to_owned(),
            quoted(aws.operation),
        ));
        if let Some(id) = aws.request_id.as_deref() {
            pairs.push(("aws-request-id", id.to_owned(), quoted(id)));
        }
        pairs.push((
            "aws-service-name",
            aws.service.as_str().to_owned(),
            quoted(aws.service.as_str()),
        ));
        if let Some(status) = aws.status {
            pairs.push(("aws-status-code", status.to_string(), status.to_string()));
        }
        self.text.push_str(" (");
        for (index, (key, plain, json)) in pairs.into_iter().enumerate() {
            if index > 0 {
                self.text.push_str(", ");
            }
            let _ = write!(self.text, "{key}={plain}");
            self.fields.push((key, json));
        }
        self.text.push(')');
    }

    /// Appends the structured fields (sorted by key; a key found more than once becomes
    /// `<key>s` with every value, as Karpenter's structured errors do) and `error`.
    pub(super) fn push_to(&mut self, out: &mut String) {
        if !self.present {
            return;
        }
        self.fields.sort_by(|a, b| a.0.cmp(b.0));
        let mut index = 0;
        while index < self.fields.len() {
            let key = self.fields[index].0;
            let end = index
                + self.fields[index..]
                    .iter()
                    .take_while(|(k, _)| *k == key)
                    .count();
            if end - index == 1 {
                push_key(out, key);
                out.push_str(&self.fields[index].1);
            } else {
                out.push(',');
                push_json_str(out, &format!("{key}s"));
                out.push_str(":[");
                for (n, (_, value)) in self.fields[index..end].iter().enumerate() {
                    if n > 0 {
                        out.push(',');
                    }
                    out.push_str(value);
                }
                out.push(']');
            }
            index = end;
        }
        push_key(out, "error");
        push_json_str(out, &self.text);
    }
}

fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    push_json_str(&mut out, text);
    out
}

/// What an AWS message in a public rendering is replaced by.
pub const WITHHELD_AWS_MESSAGE: &str = "<AWS message withheld>";

/// The text of an error's chain for readers outside the process (`/debug/actors`): the same
/// chain as `error` in a log line, with its `(aws-…=…)` structured fields, but every AWS
/// service message in it replaced by [`WITHHELD_AWS_MESSAGE`] (a service's text may name
/// resources, policies or encoded authorization details; logs keep it, as Karpenter's do).
#[must_use]
pub fn public_text(error: &(dyn Error + 'static)) -> String {
    let mut parts = ErrorParts::default();
    parts.record(error);
    let mut text = parts.text;
    let mut current = Some(error);
    while let Some(link) = current {
        if let Some(aws) = aws_error_in(link)
            && !aws.message.is_empty()
        {
            text = text.replace(aws.message.as_str(), WITHHELD_AWS_MESSAGE);
        }
        current = link.source();
    }
    text
}

/// The AWS error an error is or carries without exposing it as its source: `#[error(transparent)]`
/// wrappers forward `source()` past themselves, and some errors format it into their message.
fn aws_error_in<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a AwsError> {
    if let Some(aws) = error.downcast_ref::<AwsError>() {
        return Some(aws);
    }
    if let Some(CloudProviderError::Aws(aws)) = error.downcast_ref::<CloudProviderError>() {
        return Some(aws);
    }
    if let Some(InstancesError::Aws(aws)) = error.downcast_ref::<InstancesError>() {
        return Some(aws);
    }
    // Errors that show an AWS error inside their own message rather than as a source.
    if let Some(RefreshError::InstanceTypes(aws)) = error.downcast_ref::<RefreshError>() {
        return Some(aws);
    }
    if let Some(PricingError::Spot(aws)) = error.downcast_ref::<PricingError>() {
        return Some(aws);
    }
    None
}

/// Collects an event's fields in two passes: the message alone (the sampler decides on it
/// before anything else is rendered), then the other fields and the error.
pub(super) struct EventVisitor<'a> {
    pub message_only: bool,
    pub message: &'a mut String,
    pub fields: &'a mut String,
    pub error: &'a mut ErrorParts,
    pub scratch: &'a mut String,
}

impl EventVisitor<'_> {
    /// Whether this pass renders `field` (other than the message).
    fn renders(&self, field: &Field) -> bool {
        !self.message_only && field.name() != "message"
    }
}

impl Visit for EventVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => {
                if self.message_only {
                    let _ = write!(self.message, "{value:?}");
                }
            }
            _ if self.message_only => {}
            "error" => {
                self.error.present = true;
                let _ = write!(self.error.text, "{value:?}");
            }
            name if name.starts_with("log.") => {}
            name => {
                self.scratch.clear();
                let _ = write!(self.scratch, "{value:?}");
                push_field_text(self.fields, name, self.scratch);
            }
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => {
                if self.message_only {
                    self.message.push_str(value);
                }
            }
            _ if self.message_only => {}
            "error" => {
                self.error.present = true;
                self.error.text.push_str(value);
            }
            name => {
                push_key(self.fields, name);
                match object_kind(name) {
                    Some(namespaced) => push_object_ref(self.fields, namespaced, value),
                    None => push_json_str(self.fields, value),
                }
            }
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn Error + 'static)) {
        if !self.renders(field) {
            return;
        }
        if field.name() == "error" {
            self.error.record(value);
        } else {
            let mut parts = ErrorParts::default();
            parts.record(value);
            push_key(self.fields, field.name());
            push_json_str(self.fields, &parts.text);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.renders(field) {
            push_key(self.fields, field.name());
            let _ = write!(self.fields, "{value}");
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.renders(field) {
            push_key(self.fields, field.name());
            let _ = write!(self.fields, "{value}");
        }
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        if self.renders(field) {
            push_key(self.fields, field.name());
            let _ = write!(self.fields, "{value}");
        }
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        if self.renders(field) {
            push_key(self.fields, field.name());
            let _ = write!(self.fields, "{value}");
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if !self.renders(field) {
            return;
        }
        push_key(self.fields, field.name());
        if value.is_finite() {
            let _ = write!(self.fields, "{value}");
        } else {
            // JSON has no NaN or infinity; zap writes them as strings.
            push_json_str(self.fields, &value.to_string());
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.renders(field) {
            push_key(self.fields, field.name());
            self.fields.push_str(if value { "true" } else { "false" });
        }
    }
}

/// Renders a span's fields as context fields. The actor kit's `reconcile` span names the
/// object with `controllerKind` then `object` (singletons have neither); `object` is written
/// as `"<Kind>":{"name":…}`.
pub(super) struct SpanVisitor<'a> {
    pub out: &'a mut String,
    /// Where `controllerKind`'s quoted value sits in `out`, for `object`'s key.
    pub kind: Option<std::ops::Range<usize>>,
    /// Whether that kind is namespaced.
    pub namespaced: bool,
    pub scratch: &'a mut String,
}

impl SpanVisitor<'_> {
    fn text(&mut self, name: &str, text: &str) {
        match name {
            "controllerKind" => {
                push_key(self.out, name);
                let start = self.out.len();
                push_json_str(self.out, text);
                self.kind = Some(start..self.out.len());
                self.namespaced = object_kind(text).unwrap_or(false);
            }
            "object" => {
                if let Some(kind) = self.kind.clone() {
                    self.out.push(',');
                    self.out.extend_from_within(kind);
                    self.out.push(':');
                    push_object_ref(self.out, self.namespaced, text);
                }
            }
            _ => push_field_text(self.out, name, text),
        }
    }
}

impl Visit for SpanVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut scratch = std::mem::take(self.scratch);
        scratch.clear();
        let _ = write!(scratch, "{value:?}");
        self.record_str(field, &scratch);
        *self.scratch = scratch;
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.text(field.name(), value);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn Error + 'static)) {
        let mut parts = ErrorParts::default();
        parts.record(value);
        push_key(self.out, field.name());
        push_json_str(self.out, &parts.text);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        push_key(self.out, field.name());
        let _ = write!(self.out, "{value}");
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        push_key(self.out, field.name());
        let _ = write!(self.out, "{value}");
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        push_key(self.out, field.name());
        self.out.push_str(if value { "true" } else { "false" });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn strings_escape_quotes_backslashes_and_control_characters() {
        let mut out = String::new();
        push_json_str(&mut out, "a\"b\\c\nd\u{1}é");
        assert_eq!(out, r#""a\"b\\c\nd\u0001é""#);
    }

    #[test]
    fn times_are_utc_with_milliseconds() {
        let time = UNIX_EPOCH + Duration::from_millis(1_748_779_200_123);
        assert_eq!(format_time(time), "2025-06-01T12:00:00.123Z");
        assert_eq!(format_time(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let leap = UNIX_EPOCH + Duration::from_hours(264_384);
        assert_eq!(format_time(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn the_caller_is_the_last_directory_and_the_file() {
        let mut out = String::new();
        push_caller(&mut out, "actors/src/nodeclaim/lifecycle.rs", 358);
        assert_eq!(out, r#","caller":"nodeclaim/lifecycle.rs:358""#);
        out.clear();
        push_caller(&mut out, "main.rs", 3);
        assert_eq!(out, r#","caller":"main.rs:3""#);
    }

    #[test]
    fn object_kinds_render_as_references_and_json_text_is_embedded() {
        let mut out = String::new();
        push_field_text(&mut out, "NodeClaim", "default-x");
        push_field_text(&mut out, "Pod", "web/web-1");
        push_field_text(&mut out, "allocatable", r#"{"cpu": "5150m"}"#);
        push_field_text(&mut out, "nodes", r#"["a", "b c"]"#);
        push_field_text(&mut out, "reason", "[not json");
        assert_eq!(
            out,
            r#","NodeClaim":{"name":"default-x"},"Pod":{"name":"web-1","namespace":"web"},"allocatable":{"cpu":"5150m"},"nodes":["a","b c"],"reason":"[not json""#
        );
    }
}
