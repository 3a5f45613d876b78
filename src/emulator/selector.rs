//! Label and field selectors, parsed as the API server parses the `labelSelector` and
//! `fieldSelector` query parameters, and matched against the index the store keeps per object
//! (sorted labels and the selectable field values of its kind).
//!
//! Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>1`,
//! `k<1`, joined by commas. Field selectors: `f=v`, `f==v`, `f!=v`, joined by commas, on the
//! fields each kind supports ([`is_supported`]); others are rejected as the server does.

use std::sync::Arc;

use serde_json::Value;

use super::kinds::Behavior;

/// A label's key or value, or a field's value: the store keeps one copy of each text its
/// indexes hold (every Node carries the same label keys, and mostly the same values).
pub(crate) type Text = Arc<str>;

/// Labels of an object, sorted by key.
pub(crate) type Labels = Arc<[(Text, Text)]>;

/// The indexed field values of an object, in the order [`indexed_fields`] names them for its
/// kind: values only, since every object of a kind has the same names (at 50,000 pods, each
/// with its own `status.podIP`, the names took half of 12 MB of field sets). The values an
/// object nearly always has its own of are not indexed ([`read_from_object`]), so objects
/// share their sets: the pods of a node, the events of one reason.
pub(crate) type Fields = Arc<[Text]>;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LabelRequirement {
    Exists(String),
    DoesNotExist(String),
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<LabelRequirement>);

/// A label selector that cannot be parsed, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unable to parse requirement: {0}")]
pub(crate) struct SelectorError(pub String);

fn lookup<'a>(labels: &'a [(Text, Text)], key: &str) -> Option<&'a str> {
    labels
        .binary_search_by(|(k, _)| k.as_ref().cmp(key))
        .ok()
        .map(|i| labels[i].1.as_ref())
}

impl LabelRequirement {
    fn matches(&self, labels: &[(Text, Text)]) -> bool {
        match self {
            Self::Exists(key) => lookup(labels, key).is_some(),
            Self::DoesNotExist(key) => lookup(labels, key).is_none(),
            Self::Equals(key, value) => lookup(labels, key) == Some(value.as_str()),
            Self::NotEquals(key, value) => lookup(labels, key) != Some(value.as_str()),
            Self::In(key, values) => {
                lookup(labels, key).is_some_and(|v| values.iter().any(|x| x == v))
            }
            Self::NotIn(key, values) => {
                lookup(labels, key).is_none_or(|v| values.iter().all(|x| x != v))
            }
            Self::GreaterThan(key, bound) => lookup(labels, key)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *bound),
            Self::LessThan(key, bound) => lookup(labels, key)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *bound),
        }
    }
}

impl LabelSelector {
    /// Parses the text form (`app=web,tier in (a,b),!legacy`).
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser {
            chars: text.chars().collect(),
            at: 0,
        };
        let mut requirements = Vec::new();
        loop {
            parser.skip_spaces();
            if parser.done() {
                break;
            }
            requirements.push(parser.requirement()?);
            parser.skip_spaces();
            if parser.done() {
                break;
            }
            if !parser.eat(',') {
                return Err(SelectorError(format!(
                    "found '{}', expected: ',' or end of string",
                    parser.rest()
                )));
            }
        }
        Ok(Self(requirements))
    }

    /// The selector of a `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`).
    /// `None` when the object is absent or invalid: such a selector matches nothing.
    pub fn from_object(selector: &Value) -> Option<Self> {
        let object = selector.as_object()?;
        let mut requirements = Vec::new();
        if let Some(labels) = object.get("matchLabels").and_then(Value::as_object) {
            for (key, value) in labels {
                requirements.push(LabelRequirement::Equals(
                    key.clone(),
                    value.as_str()?.to_owned(),
                ));
            }
        }
        if let Some(expressions) = object.get("matchExpressions").and_then(Value::as_array) {
            for expression in expressions {
                let key = expression.get("key")?.as_str()?.to_owned();
                let values: Vec<String> = expression
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|v| {
                        v.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                requirements.push(match expression.get("operator")?.as_str()? {
                    "In" => LabelRequirement::In(key, values),
                    "NotIn" => LabelRequirement::NotIn(key, values),
                    "Exists" => LabelRequirement::Exists(key),
                    "DoesNotExist" => LabelRequirement::DoesNotExist(key),
                    _ => return None,
                });
            }
        }
        Some(Self(requirements))
    }

    pub fn matches(&self, labels: &[(Text, Text)]) -> bool {
        self.0.iter().all(|r| r.matches(labels))
    }
}

struct Parser {
    chars: Vec<char>,
    at: usize,
}

impl Parser {
    fn done(&self) -> bool {
        self.at >= self.chars.len()
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn rest(&self) -> String {
        self.chars[self.at.min(self.chars.len())..].iter().collect()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn skip_spaces(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }

    fn word(&mut self) -> String {
        let start = self.at;
        while self
            .peek()
            .is_some_and(|c| !c.is_whitespace() && !"=!<>(),".contains(c))
        {
            self.at += 1;
        }
        self.chars[start..self.at].iter().collect()
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        self.skip_spaces();
        let key = self.word();
        if key.is_empty() {
            return Err(SelectorError(format!(
                "found '{}', expected: identifier",
                self.rest()
            )));
        }
        Ok(key)
    }

    fn requirement(&mut self) -> Result<LabelRequirement, SelectorError> {
        if self.eat('!') {
            return Ok(LabelRequirement::DoesNotExist(self.key()?));
        }
        let key = self.key()?;
        self.skip_spaces();
        match self.peek() {
            None | Some(',') => Ok(LabelRequirement::Exists(key)),
            Some('=') => {
                self.at += 1;
                self.eat('=');
                Ok(LabelRequirement::Equals(key, self.value()))
            }
            Some('!') => {
                self.at += 1;
                if !self.eat('=') {
                    return Err(SelectorError(format!("expected '=' after '!' in {key}")));
                }
                Ok(LabelRequirement::NotEquals(key, self.value()))
            }
            Some(c @ ('>' | '<')) => {
                self.at += 1;
                let value = self.value();
                let bound = value.parse::<i64>().map_err(|_| {
                    SelectorError(format!(
                        "for '{c}' operator, the value must be an integer, got {value:?}"
                    ))
                })?;
                Ok(if c == '>' {
                    LabelRequirement::GreaterThan(key, bound)
                } else {
                    LabelRequirement::LessThan(key, bound)
                })
            }
            Some(_) => {
                let operator = self.word();
                let values = self.set()?;
                match operator.as_str() {
                    "in" => Ok(LabelRequirement::In(key, values)),
                    "notin" => Ok(LabelRequirement::NotIn(key, values)),
                    other => Err(SelectorError(format!(
                        "found '{other}', expected: in, notin, =, ==, !=, gt, lt"
                    ))),
                }
            }
        }
    }

    fn value(&mut self) -> String {
        self.skip_spaces();
        let value = self.word();
        self.skip_spaces();
        value
    }

    fn set(&mut self) -> Result<Vec<String>, SelectorError> {
        self.skip_spaces();
        if !self.eat('(') {
            return Err(SelectorError(format!(
                "found '{}', expected: '('",
                self.rest()
            )));
        }
        let mut values = Vec::new();
        loop {
            self.skip_spaces();
            let value = self.word();
            self.skip_spaces();
            if !value.is_empty() {
                values.push(value);
            }
            if self.eat(')') {
                return Ok(values);
            }
            if !self.eat(',') {
                return Err(SelectorError(format!(
                    "found '{}', expected: ',' or ')'",
                    self.rest()
                )));
            }
        }
    }
}

/// One requirement of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldRequirement {
    pub field: String,
    /// Where `field` sits in the kind's [`indexed_fields`] (`None` for `metadata.name`,
    /// `metadata.namespace`, and a field the kind supports but does not index).
    position: Option<usize>,
    /// The JSON pointer of a field read from the object itself ([`read_from_object`]).
    pointer: Option<String>,
    pub value: String,
    pub equal: bool,
}

/// A parsed field selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<FieldRequirement>);

impl FieldSelector {
    /// Parses `f=v,g!=w`, accepting only the fields `behavior` supports.
    pub fn parse(text: &str, behavior: Behavior) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, value, equal) = if let Some((f, v)) = term.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, v, true)
            } else {
                return Err(SelectorError(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            let field = canonical_field(behavior, field);
            if !is_supported(behavior, field) {
                return Err(SelectorError(format!("field label not supported: {field}")));
            }
            requirements.push(FieldRequirement {
                position: indexed_fields(behavior).iter().position(|f| *f == field),
                pointer: read_from_object(behavior)
                    .contains(&field)
                    .then(|| format!("/{}", field.replace('.', "/"))),
                field: field.to_owned(),
                value: value.trim().to_owned(),
                equal,
            });
        }
        Ok(Self(requirements))
    }

    /// Whether the object with `name`, `namespace` and kind-specific `fields` matches.
    /// `fields` are the object's indexed values, of the kind the selector was parsed for;
    /// `object` gives the whole object, parsed only if a requirement reads a field from it.
    pub fn matches(
        &self,
        name: &str,
        namespace: &str,
        fields: &[Text],
        object: impl FnOnce() -> Value,
    ) -> bool {
        let whole = std::cell::LazyCell::new(object);
        self.0.iter().all(|r| {
            let read;
            let actual = match (r.field.as_str(), &r.pointer) {
                ("metadata.name", _) => name,
                ("metadata.namespace", _) => namespace,
                (_, Some(pointer)) => {
                    read = text_at(&whole, pointer);
                    &*read
                }
                _ => r
                    .position
                    .and_then(|at| fields.get(at))
                    .map_or("", AsRef::as_ref),
            };
            (actual == r.value) == r.equal
        })
    }
}

/// Whether a field selector may name `field` on objects of `behavior`, as the API server
/// decides: `metadata.name` everywhere, `metadata.namespace` but on the cluster-scoped built-in
/// kinds, and the kind's [`indexed_fields`] but the emulator's own. Nodes support only
/// `spec.unschedulable`: a real server rejects `spec.providerID`, so the emulator does too (look
/// nodes up by provider ID in the cluster-state store instead).
pub(crate) fn is_supported(behavior: Behavior, field: &str) -> bool {
    match field {
        "metadata.name" => true,
        "metadata.namespace" => !matches!(behavior, Behavior::Node | Behavior::Namespace),
        _ => {
            !field.starts_with(EMULATOR_FIELD)
                && (indexed_fields(behavior).contains(&field)
                    || read_from_object(behavior).contains(&field))
        }
    }
}

/// The selectable fields of `behavior` that nearly every object has its own value of (a pod's
/// IP; the name, uid and resourceVersion of the object an Event is about). They stay out of
/// the shared [`Fields`] (indexed, each pod's IP made every pod's set its own: 50,000 sets of
/// 11 values, about 10 MB), and a selector that names one reads it from the object, which
/// only a kubectl-style lookup does.
fn read_from_object(behavior: Behavior) -> &'static [&'static str] {
    match behavior {
        Behavior::Pod => &["status.podIP"],
        Behavior::CoreEvent | Behavior::EventsV1 => &[
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.resourceVersion",
        ],
        _ => &[],
    }
}

/// The events.k8s.io field names map onto the core ones, as the server converts them.
fn canonical_field(behavior: Behavior, field: &str) -> &str {
    if behavior != Behavior::EventsV1 {
        return field;
    }
    match field {
        "regarding.kind" => "involvedObject.kind",
        "regarding.namespace" => "involvedObject.namespace",
        "regarding.name" => "involvedObject.name",
        "regarding.uid" => "involvedObject.uid",
        "regarding.apiVersion" => "involvedObject.apiVersion",
        "regarding.resourceVersion" => "involvedObject.resourceVersion",
        "regarding.fieldPath" => "involvedObject.fieldPath",
        "reportingController" => "reportingComponent",
        "deprecatedSource" => "source",
        other => other,
    }
}

/// The fields the store indexes per object of `behavior`, in the order of its [`Fields`]: the
/// selectable ones beyond name and namespace, and for Pods what PodDisruptionBudgets read.
pub(crate) fn indexed_fields(behavior: Behavior) -> &'static [&'static str] {
    match behavior {
        Behavior::Pod => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.nominatedNodeName",
            // Not selectable (the emulator's own): indexed for PodDisruptionBudgets.
            POD_READY,
            POD_DELETING,
            POD_CONTROLLER,
        ],
        Behavior::Node => &["spec.unschedulable"],
        Behavior::Namespace => &["status.phase"],
        // events.k8s.io objects are stored as core Events, their field names mapped onto the
        // core ones ([`canonical_field`]).
        Behavior::CoreEvent | Behavior::EventsV1 => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.apiVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        _ => &[],
    }
}

/// The indexed field values of an object of `behavior`, in [`indexed_fields`] order.
pub(crate) fn extract_fields(behavior: Behavior, object: &Value) -> Fields {
    let text = |pointer: &str| text_at(object, pointer);
    let or_false = |text: Text| {
        if text.is_empty() {
            "false".into()
        } else {
            text
        }
    };
    let values: Vec<Text> = match behavior {
        Behavior::Pod => vec![
            text("/spec/nodeName"),
            text("/spec/restartPolicy"),
            text("/spec/schedulerName"),
            text("/spec/serviceAccountName"),
            or_false(text("/spec/hostNetwork")),
            text("/status/phase"),
            text("/status/nominatedNodeName"),
            bool_text(pod_ready(object)),
            bool_text(
                object
                    .pointer("/metadata/deletionTimestamp")
                    .is_some_and(|v| !v.is_null()),
            ),
            controller_of(object),
        ],
        Behavior::Node => vec![or_false(text("/spec/unschedulable"))],
        Behavior::Namespace => vec![text("/status/phase")],
        Behavior::CoreEvent | Behavior::EventsV1 => vec![
            text("/involvedObject/kind"),
            text("/involvedObject/namespace"),
            text("/involvedObject/apiVersion"),
            text("/involvedObject/fieldPath"),
            text("/reason"),
            text("/reportingComponent"),
            text("/source/component"),
            text("/type"),
        ],
        _ => Vec::new(),
    };
    debug_assert_eq!(values.len(), indexed_fields(behavior).len());
    values.into()
}

/// The text of the field at `pointer` in `object`, as a selector compares it.
fn text_at(object: &Value, pointer: &str) -> Text {
    match object.pointer(pointer) {
        Some(Value::String(s)) => s.as_str().into(),
        Some(Value::Bool(b)) => b.to_string().into(),
        _ => "".into(),
    }
}

/// The prefix of the fields the emulator indexes for itself, which no selector may name.
const EMULATOR_FIELD: &str = "emulator.";

/// Index entry of a Pod: whether its `Ready` condition is `True`.
pub(crate) const POD_READY: &str = "emulator.ready";
/// Index entry of a Pod: whether it has a deletionTimestamp.
pub(crate) const POD_DELETING: &str = "emulator.deleting";

/// Index entry of a Pod: its controller as `Kind/name` (empty without one).
pub(crate) const POD_CONTROLLER: &str = "emulator.controller";

fn controller_of(object: &Value) -> Text {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .and_then(|owners| owners.iter().find(|o| o["controller"] == true))
        .map_or_else(
            || "".into(),
            |o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap_or_default(),
                    o["name"].as_str().unwrap_or_default()
                )
                .into()
            },
        )
}

fn bool_text(value: bool) -> Text {
    if value { "true".into() } else { "false".into() }
}

fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// The value of the indexed field `name` of an object of `behavior` (empty if not indexed).
pub(crate) fn field<'a>(behavior: Behavior, fields: &'a [Text], name: &str) -> &'a str {
    indexed_fields(behavior)
        .iter()
        .position(|f| *f == name)
        .and_then(|at| fields.get(at))
        .map_or("", AsRef::as_ref)
}

/// The labels of an object, sorted by key.
pub(crate) fn extract_labels(object: &Value) -> Labels {
    let mut labels: Vec<(Text, Text)> = object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .map(|(k, v)| (k.as_str().into(), v.as_str().unwrap_or_default().into()))
                .collect()
        })
        .unwrap_or_default();
    labels.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    labels.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        extract_labels(
            &json!({ "metadata": { "labels": pairs.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect::<serde_json::Map<_, _>>() } }),
        )
    }

    #[test]
    fn set_based_selectors_match_as_the_server_does() {
        let web = labels(&[("app", "web"), ("tier", "front")]);
        let db = labels(&[("app", "db")]);
        let in_set = LabelSelector::parse("app in (web, api)").unwrap();
        assert!(in_set.matches(&web));
        assert!(!in_set.matches(&db));
        let not_in = LabelSelector::parse("app notin (web),!tier").unwrap();
        assert!(not_in.matches(&db));
        assert!(!not_in.matches(&web));
        let exists = LabelSelector::parse("tier,app!=db").unwrap();
        assert!(exists.matches(&web));
        assert!(!exists.matches(&db));
        assert!(LabelSelector::parse("").unwrap().matches(&db));
    }

    #[test]
    fn numeric_comparisons_need_integer_values() {
        let node = labels(&[("gpus", "4")]);
        assert!(LabelSelector::parse("gpus>2").unwrap().matches(&node));
        assert!(!LabelSelector::parse("gpus<2").unwrap().matches(&node));
        assert!(LabelSelector::parse("gpus>two").is_err());
    }

    #[test]
    fn malformed_selectors_are_rejected() {
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("app in (web").is_err());
        assert!(LabelSelector::parse("=web").is_err());
    }

    #[test]
    fn unsupported_field_selectors_are_rejected_like_the_server() {
        let error = FieldSelector::parse("spec.providerID=aws:///x", Behavior::Node).unwrap_err();
        assert_eq!(error.0, "field label not supported: spec.providerID");
        assert!(FieldSelector::parse("spec.unschedulable=true", Behavior::Node).is_ok());
        assert!(FieldSelector::parse("metadata.namespace=a", Behavior::Namespace).is_err());
        assert!(FieldSelector::parse("metadata.namespace=a", Behavior::Pod).is_ok());
        assert!(FieldSelector::parse("status.podIP=10.0.0.1", Behavior::Pod).is_ok());
        let internal = format!("{POD_READY}=true");
        assert!(FieldSelector::parse(&internal, Behavior::Pod).is_err());
    }

    #[test]
    fn field_selectors_compare_extracted_values() {
        let pod = json!({ "spec": { "nodeName": "n1" }, "status": { "phase": "Running" } });
        let fields = extract_fields(Behavior::Pod, &pod);
        let selector =
            FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed", Behavior::Pod).unwrap();
        assert!(selector.matches("p", "default", &fields, || pod.clone()));
        let other = FieldSelector::parse("spec.nodeName=n2", Behavior::Pod).unwrap();
        assert!(!other.matches("p", "default", &fields, || pod.clone()));
    }

    #[test]
    fn each_indexed_value_is_read_under_its_own_name() {
        let pod = json!({
            "metadata": {
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [{ "kind": "ReplicaSet", "name": "web", "controller": true }],
            },
            "spec": { "nodeName": "n1", "restartPolicy": "Always", "schedulerName": "s" },
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.7",
                "conditions": [{ "type": "Ready", "status": "True" }],
            },
        });
        let fields = extract_fields(Behavior::Pod, &pod);
        assert_eq!(fields.len(), indexed_fields(Behavior::Pod).len());
        let read = |name| field(Behavior::Pod, &fields, name);
        assert_eq!(read("spec.nodeName"), "n1");
        assert_eq!(read("spec.schedulerName"), "s");
        assert_eq!(read("spec.hostNetwork"), "false");
        assert_eq!(read("status.podIP"), "", "read from the pod, not indexed");
        assert_eq!(read("status.nominatedNodeName"), "");
        assert_eq!(read(POD_READY), "true");
        assert_eq!(read(POD_DELETING), "true");
        assert_eq!(read(POD_CONTROLLER), "ReplicaSet/web");
        assert_eq!(read("no.such.field"), "");
        let node = extract_fields(
            Behavior::Node,
            &json!({ "spec": { "unschedulable": true } }),
        );
        assert_eq!(field(Behavior::Node, &node, "spec.unschedulable"), "true");
    }

    #[test]
    fn a_field_nearly_every_object_has_its_own_of_is_read_from_the_object() {
        let pod = |ip: &str| json!({ "spec": { "nodeName": "n1" }, "status": { "podIP": ip } });
        let (a, b) = (pod("10.0.0.1"), pod("10.0.0.2"));
        let fields = extract_fields(Behavior::Pod, &a);
        assert_eq!(
            fields,
            extract_fields(Behavior::Pod, &b),
            "one set for both"
        );
        let by_ip =
            FieldSelector::parse("status.podIP=10.0.0.1,spec.nodeName=n1", Behavior::Pod).unwrap();
        let parsed = std::cell::Cell::new(0);
        let read = |pod: &Value| {
            parsed.set(parsed.get() + 1);
            pod.clone()
        };
        assert!(by_ip.matches("a", "default", &fields, || read(&a)));
        assert!(!by_ip.matches("b", "default", &fields, || read(&b)));
        let not_ip = FieldSelector::parse("status.podIP!=10.0.0.1", Behavior::Pod).unwrap();
        assert!(not_ip.matches("b", "default", &fields, || read(&b)));
        assert_eq!(parsed.get(), 3, "once per match that reads the pod");
        let by_node = FieldSelector::parse("spec.nodeName=n1", Behavior::Pod).unwrap();
        assert!(by_node.matches("a", "default", &fields, || read(&a)));
        assert_eq!(
            parsed.get(),
            3,
            "a selector of indexed fields does not parse the pod"
        );

        let event = |name: &str, uid: &str| json!({ "involvedObject": { "kind": "Pod", "name": name, "uid": uid, "resourceVersion": "7" }, "reason": "Nominated" });
        let (first, second) = (event("web-1", "u1"), event("web-2", "u2"));
        let fields = extract_fields(Behavior::CoreEvent, &first);
        assert_eq!(fields, extract_fields(Behavior::CoreEvent, &second));
        let about = FieldSelector::parse(
            "involvedObject.name=web-2,involvedObject.uid=u2,involvedObject.resourceVersion=7",
            Behavior::CoreEvent,
        )
        .unwrap();
        assert!(!about.matches("e1", "default", &fields, || first.clone()));
        assert!(about.matches("e2", "default", &fields, || second.clone()));
    }

    #[test]
    fn events_k8s_io_selectors_read_the_stored_core_event() {
        // Stored as a core Event (the events.k8s.io kind's storage), selected by v1 names.
        let event = json!({
            "involvedObject": { "kind": "Pod", "name": "web-1", "namespace": "default" },
            "reason": "Nominated",
            "type": "Normal",
        });
        let fields = extract_fields(Behavior::CoreEvent, &event);
        let v1 = |text| FieldSelector::parse(text, Behavior::EventsV1).unwrap();
        assert!(v1("regarding.name=web-1,reason=Nominated").matches(
            "e",
            "default",
            &fields,
            || event.clone()
        ));
        assert!(!v1("regarding.name=web-2").matches("e", "default", &fields, || event.clone()));
        assert!(!v1("type=Warning").matches("e", "default", &fields, || event.clone()));
    }
}

/// Property tests: arbitrary text never panics either parser, and selectors built from
/// generated terms match exactly what an independent evaluator says.
#[cfg(test)]
mod props {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// Every field a selector may name on objects of `behavior`.
    fn supported_fields(behavior: Behavior) -> Vec<&'static str> {
        ["metadata.name", "metadata.namespace"]
            .into_iter()
            .chain(indexed_fields(behavior).iter().copied())
            .chain(read_from_object(behavior).iter().copied())
            .filter(|field| is_supported(behavior, field))
            .collect()
    }

    /// One generated label requirement, as the evaluator below reads it.
    #[derive(Debug, Clone)]
    enum Term {
        Eq(String, String),
        Ne(String, String),
        In(String, Vec<String>),
        NotIn(String, Vec<String>),
        Exists(String),
        Absent(String),
    }

    impl Term {
        fn text(&self, pad: &str) -> String {
            match self {
                Self::Eq(k, v) => format!("{k}{pad}={pad}{v}"),
                Self::Ne(k, v) => format!("{k}{pad}!={pad}{v}"),
                Self::In(k, vs) => format!("{k} in{pad}({})", vs.join(&format!(",{pad}"))),
                Self::NotIn(k, vs) => format!("{k} notin ({pad}{}{pad})", vs.join(",")),
                Self::Exists(k) => format!("{pad}{k}"),
                Self::Absent(k) => format!("!{k}"),
            }
        }

        /// The Kubernetes semantics, written independently of the parser.
        fn holds(&self, labels: &BTreeMap<String, String>) -> bool {
            match self {
                Self::Eq(k, v) => labels.get(k) == Some(v),
                Self::Ne(k, v) => labels.get(k) != Some(v),
                Self::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
                Self::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
                Self::Exists(k) => labels.contains_key(k),
                Self::Absent(k) => !labels.contains_key(k),
            }
        }
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-d]",
            Just("app".to_owned()),
            Just("example.com/tier".to_owned())
        ]
    }

    fn value() -> impl Strategy<Value = String> + Clone {
        "[xyz]{1,2}"
    }

    fn term() -> impl Strategy<Value = Term> {
        let values = prop::collection::vec(value(), 1..4);
        prop_oneof![
            (key(), value()).prop_map(|(k, v)| Term::Eq(k, v)),
            (key(), value()).prop_map(|(k, v)| Term::Ne(k, v)),
            (key(), values.clone()).prop_map(|(k, vs)| Term::In(k, vs)),
            (key(), values).prop_map(|(k, vs)| Term::NotIn(k, vs)),
            key().prop_map(Term::Exists),
            key().prop_map(Term::Absent),
        ]
    }

    fn label_map() -> impl Strategy<Value = BTreeMap<String, String>> {
        prop::collection::btree_map(key(), value(), 0..5)
    }

    fn as_labels(map: &BTreeMap<String, String>) -> Labels {
        map.iter()
            .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
            .collect()
    }

    const BEHAVIORS: [Behavior; 7] = [
        Behavior::Generic,
        Behavior::Pod,
        Behavior::Node,
        Behavior::Namespace,
        Behavior::CoreEvent,
        Behavior::EventsV1,
        Behavior::PodDisruptionBudget,
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn prop_label_selector_never_panics(text in any::<String>(), picked in "[a-z=!<>(), 0-9-]{0,24}") {
            let _ = LabelSelector::parse(&text);
            if let Ok(selector) = LabelSelector::parse(&picked) {
                let _ = selector.matches(&as_labels(&BTreeMap::new()));
            }
        }

        #[test]
        fn prop_field_selector_never_panics(
            text in any::<String>(),
            picked in "[a-zA-Z.=!, ]{0,32}",
            behavior in 0..BEHAVIORS.len(),
        ) {
            let _ = FieldSelector::parse(&text, BEHAVIORS[behavior]);
            if let Ok(selector) = FieldSelector::parse(&picked, BEHAVIORS[behavior]) {
                let _ = selector.matches("n", "ns", &[], || Value::Null);
            }
        }

        #[test]
        fn prop_label_selector_matches_like_the_evaluator(
            terms in prop::collection::vec(term(), 0..5),
            pad in prop_oneof![Just(""), Just(" ")],
            maps in prop::collection::vec(label_map(), 1..8),
        ) {
            let text = terms.iter().map(|t| t.text(pad)).collect::<Vec<_>>().join(&format!(",{pad}"));
            let selector = LabelSelector::parse(&text)
                .map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
            for map in &maps {
                let expected = terms.iter().all(|t| t.holds(map));
                prop_assert_eq!(selector.matches(&as_labels(map)), expected, "{} on {:?}", text, map);
            }
        }

        #[test]
        fn prop_field_selector_matches_like_the_evaluator(
            terms in prop::collection::vec((0..supported_fields(Behavior::Pod).len(), "[xyz]{0,2}", any::<bool>()), 0..5),
            name in "[xyz]{1,2}",
            namespace in "[xyz]{1,2}",
            values in prop::collection::vec("[xyz]{0,2}", supported_fields(Behavior::Pod).len()),
        ) {
            let supported = supported_fields(Behavior::Pod);
            let text = terms
                .iter()
                .map(|(f, v, equal)| format!("{}{}{v}", supported[*f], if *equal { "=" } else { "!=" }))
                .collect::<Vec<_>>()
                .join(",");
            let selector = FieldSelector::parse(&text, Behavior::Pod)
                .map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
            let actual = |f: usize| match supported[f] {
                "metadata.name" => name.as_str(),
                "metadata.namespace" => namespace.as_str(),
                _ => values[f].as_str(),
            };
            let expected = terms.iter().all(|(f, v, equal)| (actual(*f) == v) == *equal);
            let indexed = indexed_fields(Behavior::Pod);
            let fields: Vec<Text> = indexed
                .iter()
                .map(|name| supported.iter().position(|f| f == name).map_or("", |i| values[i].as_str()).into())
                .collect();
            // The fields read from the object, at their paths in it.
            let mut object = serde_json::json!({});
            for field in read_from_object(Behavior::Pod) {
                let at = supported.iter().position(|f| f == field).unwrap();
                let mut place = &mut object;
                for part in field.split('.') {
                    place = &mut place[part];
                }
                *place = serde_json::json!(values[at]);
            }
            prop_assert_eq!(selector.matches(&name, &namespace, &fields, || object.clone()), expected, "{}", text);
        }
    }
}
