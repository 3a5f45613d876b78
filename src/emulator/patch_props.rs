//! Property tests of the PATCH formats ([`super::api::apply_patch`]): arbitrary documents never
//! panic, merge patches follow RFC 7386, and empty patches are the identity.

use proptest::prelude::*;
use serde_json::{Map, Value};

use super::api::{PatchType, apply_patch};
use super::kinds::Behavior;

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-c0-9/~-]{0,4}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-c$]{1,2}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn object() -> impl Strategy<Value = Value> {
    prop::collection::btree_map("[a-c]{1,2}", json(), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn pointer() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("/".to_owned()),
        Just("/-".to_owned()),
        Just("/a/-".to_owned()),
        Just("/a/0".to_owned()),
        Just("/a/99999999999999999999".to_owned()),
        Just("/~2".to_owned()),
        "(/[a-c0-9~-]{0,2}){0,3}",
        "[a-c/~0-9]{0,6}",
    ]
}

/// A JSON patch document: mostly well-formed operations with arbitrary arguments, sometimes
/// anything at all.
fn json_patch() -> impl Strategy<Value = Value> {
    let op = prop_oneof![
        Just("add"),
        Just("remove"),
        Just("replace"),
        Just("move"),
        Just("copy"),
        Just("test"),
        Just("frobnicate"),
    ];
    let operation = (op, pointer(), pointer(), json(), any::<u8>()).prop_map(
        |(op, path, from, value, drop)| {
            let mut map = Map::new();
            map.insert("op".to_owned(), Value::from(op));
            if drop & 1 == 0 {
                map.insert("path".to_owned(), Value::from(path));
            }
            if drop & 2 == 0 {
                map.insert("from".to_owned(), Value::from(from));
            }
            if drop & 4 == 0 {
                map.insert("value".to_owned(), value);
            }
            Value::Object(map)
        },
    );
    prop_oneof![
        4 => prop::collection::vec(operation, 0..5).prop_map(Value::Array),
        1 => json(),
    ]
}

/// RFC 7386's `MergePatch`, written from the RFC's pseudocode.
fn merge_reference(target: &Value, patch: &Value) -> Value {
    let Value::Object(patch) = patch else {
        return patch.clone();
    };
    let mut result = match target {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    for (key, value) in patch {
        if value.is_null() {
            result.remove(key);
        } else {
            let merged = merge_reference(result.get(key).unwrap_or(&Value::Null), value);
            result.insert(key.clone(), merged);
        }
    }
    Value::Object(result)
}

const BEHAVIORS: [Behavior; 3] = [Behavior::Generic, Behavior::Pod, Behavior::Node];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn prop_any_patch_document_never_panics(
        target in json(),
        json_document in json_patch(),
        other in json(),
        behavior in 0..BEHAVIORS.len(),
    ) {
        let behavior = BEHAVIORS[behavior];
        let _ = apply_patch(PatchType::Json, behavior, &mut target.clone(), &json_document);
        let _ = apply_patch(PatchType::Merge, behavior, &mut target.clone(), &other);
        let _ = apply_patch(PatchType::Strategic, behavior, &mut target.clone(), &other);
        let _ = apply_patch(PatchType::Strategic, behavior, &mut target.clone(), &json_document);
    }

    #[test]
    fn prop_merge_patch_follows_rfc_7386(
        target in json(),
        patch in object(),
    ) {
        let mut object = target.clone();
        apply_patch(PatchType::Merge, Behavior::Generic, &mut object, &patch)
            .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(&object, &merge_reference(&target, &patch));
        // Keys set to non-null scalars or arrays hold exactly those values afterwards; keys
        // set to null are gone.
        for (key, value) in patch.as_object().unwrap() {
            match value {
                Value::Null => prop_assert!(object.get(key).is_none(), "{} kept", key),
                Value::Object(_) => prop_assert!(object.get(key).is_some_and(Value::is_object)),
                _ => prop_assert_eq!(object.get(key), Some(value)),
            }
        }
    }

    #[test]
    fn prop_empty_patches_are_the_identity(
        target in object(),
        behavior in 0..BEHAVIORS.len(),
    ) {
        let behavior = BEHAVIORS[behavior];
        for (patch_type, empty) in [
            (PatchType::Merge, Value::Object(Map::new())),
            (PatchType::Json, Value::Array(Vec::new())),
            (PatchType::Strategic, Value::Object(Map::new())),
        ] {
            let mut object = target.clone();
            apply_patch(patch_type, behavior, &mut object, &empty)
                .map_err(|e| TestCaseError::fail(format!("{patch_type:?}: {e:?}")))?;
            prop_assert_eq!(&object, &target, "{:?}", patch_type);
        }
    }
}
