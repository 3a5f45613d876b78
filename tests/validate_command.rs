//! `karpenter validate`: exit codes, report lines, and no panic on any input.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::path::PathBuf;
use std::sync::LazyLock;

use karpenter::commands::Status;
use karpenter::commands::validate::{self, DocumentReport};
use karpenter_core::apis::validation::Validator;
use proptest::prelude::*;

static VALIDATOR: LazyLock<Validator> = LazyLock::new(|| Validator::new().unwrap());

fn run(files: &[PathBuf]) -> (Status, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = validate::run(files, &mut out, &mut err);
    (
        status,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("karpenter-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_examples_are_valid_and_exit_zero() {
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/examples");
    let (status, out, _) = run(&[examples]);
    assert_eq!(status, Status::Success, "{out}");
    assert!(out.contains("NodePool/default: valid"), "{out}");
    assert!(out.contains("EC2NodeClass/bottlerocket: valid"), "{out}");
    assert!(out.contains(" 0 invalid"), "{out}");
}

#[test]
fn an_invalid_document_exits_one_and_names_index_kind_name_and_path() {
    let file = temp_file(
        "invalid.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n\
         apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: broken}\nspec:\n  template:\n    spec:\n      \
         nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      \
         requirements: [{key: a, operator: In}]\n",
    );
    let (status, out, _) = run(std::slice::from_ref(&file));
    assert_eq!(status, Status::Problems);
    let expected = format!(
        "{}[1] NodePool/broken: spec.template.spec.requirements[0].values: requirements with operator 'In' must have a value defined",
        file.display()
    );
    assert!(out.contains(&expected), "{out}");
    assert!(
        out.contains("[0]: skipped: ConfigMap is not validated"),
        "{out}"
    );
}

#[test]
fn an_empty_node_class_reference_is_invalid_as_karpenters_crd_says() {
    let file = temp_file(
        "nameless.yaml",
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: nameless}\nspec:\n  template:\n    spec:\n      \
         nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: ''}\n      \
         requirements: [{key: a, operator: Exists}]\n",
    );
    let (status, out, _) = run(std::slice::from_ref(&file));
    assert_eq!(status, Status::Problems, "{out}");
    assert!(
        out.contains(
            "NodePool/nameless: spec.template.spec.nodeClassRef.name: name may not be empty"
        ),
        "{out}"
    );
}

#[test]
fn an_unreadable_file_exits_two() {
    let (status, _, err) = run(&[PathBuf::from("/nonexistent/karpenter.yaml")]);
    assert_eq!(status, Status::BadInput);
    assert!(err.contains("/nonexistent/karpenter.yaml"), "{err}");
}

#[test]
fn unparsable_yaml_exits_two_and_keeps_earlier_documents() {
    let file = temp_file(
        "garbage.yaml",
        "apiVersion: v1\nkind: ConfigMap\n---\nkey: [unclosed\n",
    );
    let (status, out, err) = run(&[file]);
    assert_eq!(status, Status::BadInput);
    assert!(out.contains("[0]: skipped"), "{out}");
    assert!(err.contains("document 1"), "{err}");
}

#[test]
fn deeply_nested_yaml_is_an_error_not_a_crash() {
    let text = format!("spec: {}{}", "[".repeat(10_000), "]".repeat(10_000));
    let report = validate::validate_text("deep", &text, &VALIDATOR);
    assert!(report.error.is_some());
}

#[test]
fn a_huge_document_is_validated() {
    let mut labels = serde_json::Map::new();
    for i in 0..20_000 {
        labels.insert(format!("example.com/l{i}"), "v".into());
    }
    let document = serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": { "name": "huge" },
        "spec": { "template": {
            "metadata": { "labels": labels },
            "spec": { "nodeClassRef": { "group": "g", "kind": "k", "name": "n" }, "requirements": [] },
        } },
    });
    let text = karpenter_core::yaml::to_string(&document).unwrap();
    let report = validate::validate_text("huge", &text, &VALIDATOR);
    let [(0, DocumentReport::Invalid { violations, .. })] = report.documents.as_slice() else {
        panic!("{report:?}");
    };
    assert!(
        violations
            .iter()
            .any(|v| v.message.contains("at most 100 entries")),
        "{violations:?}"
    );
}

fn yaml_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        "[a-zA-Z0-9 .:/@%*-]{0,12}".prop_map(|s| format!("{s:?}")),
        Just("true".to_owned()),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4)
                .prop_map(|items| format!("[{}]", items.join(", "))),
            prop::collection::vec(("[a-zA-Z]{1,10}", inner), 0..4).prop_map(|entries| {
                let body: Vec<String> = entries
                    .into_iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect();
                format!("{{{}}}", body.join(", "))
            }),
        ]
    })
}

const KINDS: [&str; 3] = [
    "karpenter.sh/v1 NodePool",
    "karpenter.sh/v1 NodeClaim",
    "karpenter.k8s.aws/v1 EC2NodeClass",
];

/// Valid documents of each kind, parsed from the examples.
static EXAMPLES: LazyLock<Vec<serde_json::Value>> = LazyLock::new(|| {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/examples");
    [
        "nodepool-budgets.yaml",
        "nodepool-gpu.yaml",
        "nodeclass-bottlerocket.yaml",
        "nodeclass-custom.yaml",
    ]
    .iter()
    .map(|name| {
        karpenter_core::yaml::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
    })
    .collect()
});

/// Replaces the node reached by following `steps` (each picks a child by index) with `new`.
fn mutate(value: &mut serde_json::Value, steps: &[usize], new: serde_json::Value) {
    let Some((&step, rest)) = steps.split_first() else {
        *value = new;
        return;
    };
    let child = match value {
        serde_json::Value::Object(map) if !map.is_empty() => {
            let len = map.len();
            map.values_mut().nth(step % len)
        }
        serde_json::Value::Array(items) if !items.is_empty() => {
            let len = items.len();
            items.get_mut(step % len)
        }
        _ => None,
    };
    match child {
        Some(child) => mutate(child, rest, new),
        None => *value = new,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn mutated_valid_documents_never_panic(
        example in 0..4usize,
        steps in prop::collection::vec(any::<usize>(), 1..8),
        replacement in yaml_value(),
    ) {
        let mut document = EXAMPLES[example].clone();
        let new = karpenter_core::yaml::from_str(&replacement).unwrap_or(serde_json::Value::Null);
        mutate(&mut document, &steps, new);
        let _ = VALIDATOR.validate(&document);
    }

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let _ = validate::validate_text("fuzz", &text, &VALIDATOR);
    }

    #[test]
    fn arbitrary_specs_of_our_kinds_never_panic(kind in 0..3usize, spec in yaml_value(), status in yaml_value()) {
        let (api_version, kind) = KINDS[kind].split_once(' ').unwrap();
        let text = format!("apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: fuzz}}\nspec: {spec}\nstatus: {status}\n");
        let _ = validate::validate_text("fuzz", &text, &VALIDATOR);
    }
}
