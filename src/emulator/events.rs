//! The two event APIs over one storage, as in Kubernetes: `events.k8s.io/v1` Events (what
//! kube-runtime's recorder writes) are stored as `core/v1` Events (what `kubectl get events`
//! and `kubectl describe` read) and converted field by field on the way in and out.

use serde_json::{Map, Value};

/// Field renames between the two representations: (events.k8s.io/v1, core/v1).
const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

fn rename(object: &Value, to_core: bool, api_version: &str) -> Value {
    let Value::Object(map) = object else {
        return object.clone();
    };
    let mut out = Map::new();
    for (key, value) in map {
        let renamed = RENAMES
            .iter()
            .find_map(|(new, core)| {
                if to_core {
                    (key == new).then_some(*core)
                } else {
                    (key == core).then_some(*new)
                }
            })
            .unwrap_or(key.as_str());
        out.insert(renamed.to_owned(), value.clone());
    }
    out.insert("apiVersion".into(), Value::String(api_version.to_owned()));
    out.insert("kind".into(), Value::String("Event".to_owned()));
    Value::Object(out)
}

/// An `events.k8s.io/v1` Event as the `core/v1` Event stored.
pub(crate) fn to_core(object: &Value) -> Value {
    rename(object, true, "v1")
}

/// A stored `core/v1` Event as an `events.k8s.io/v1` Event.
pub(crate) fn from_core(object: &Value) -> Value {
    rename(object, false, "events.k8s.io/v1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_round_trip_between_the_two_apis() {
        let new = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": { "name": "e", "namespace": "default" },
            "regarding": { "kind": "Node", "name": "n1" },
            "note": "drained", "reason": "Disrupting", "reportingController": "karpenter",
        });
        let core = to_core(&new);
        assert_eq!(core["involvedObject"]["name"], "n1");
        assert_eq!(core["message"], "drained");
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(from_core(&core), new);
    }
}
