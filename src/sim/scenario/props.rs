//! Property tests of the scenario file and the `--chaos` file: arbitrary YAML never panics
//! either, a rejected mutation of a valid file names a field path, and an accepted file written
//! back out and read again is the same scenario.

use karpenter_actors::runtime::{FaultPlan, FaultPlanError};
use karpenter_core::yaml;
use proptest::prelude::*;
use serde_json::Value;

use super::file::{Scenario, ScenarioError, ScenarioFile};
use super::load::LoadedScenario;

const SMALL: &str = include_str!("../../../tests/fixtures/scenarios/small.yaml");

const CHAOS: &str = "
actors:
  seed: 7
  rules:
    - {message: Launch, nth: 2, action: panic}
    - {kind: NodeClaimActor, key: \"a*\", probability: 0.5, times: 3, action: delay, delay: 2s}
aws:
  - {at: 1m, service: ec2, operation: CreateFleet, count: 2, code: InsufficientInstanceCapacity}
";

/// The top-level fields of [`ScenarioFile`] (where every error path starts).
const FIELDS: [&str; 16] = [
    "name",
    "description",
    "seed",
    "duration",
    "region",
    "clusterName",
    "progressEvery",
    "featureGates",
    "kwok",
    "nodePools",
    "ec2NodeClasses",
    "workloads",
    "interruptions",
    "nodeFailures",
    "amiReleases",
    "podDisruptionBudgets",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "[a-zA-Z0-9 .:/@%*-]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("0s"),
            Just("-1m"),
            Just("99999h"),
            Just("5m"),
            Just("1.5s")
        ]
        .prop_map(Value::from),
    ]
}

/// Arbitrary YAML text: flow maps and sequences (keys often the file's own) over scalars.
fn yaml_value() -> impl Strategy<Value = String> {
    let leaf = scalar().prop_map(|v| serde_json::to_string(&v).unwrap());
    let key = prop_oneof![
        prop::sample::select(&FIELDS[..]).prop_map(str::to_owned),
        prop::sample::select(&["actors", "aws", "rules", "seed", "at", "action"][..])
            .prop_map(str::to_owned),
        "[a-zA-Z]{1,8}",
    ];
    leaf.prop_recursive(4, 32, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4)
                .prop_map(|items| format!("[{}]", items.join(", "))),
            prop::collection::vec((key.clone(), inner), 0..5).prop_map(|entries| {
                let body: Vec<String> = entries
                    .into_iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect();
                format!("{{{}}}", body.join(", "))
            }),
        ]
    })
}

/// Replaces the node reached by `steps` (each picks a child by index) with `new`; returns the
/// path replaced (`workloads[0].steps[1].at`) and the last key on it.
fn mutate(value: &mut Value, steps: &[usize], new: Value) -> (String, String) {
    let mut path = String::new();
    let mut key = String::new();
    replace(value, steps, new, &mut path, &mut key);
    (path, key)
}

fn replace(value: &mut Value, steps: &[usize], new: Value, path: &mut String, key: &mut String) {
    let Some((&step, rest)) = steps.split_first() else {
        *value = new;
        return;
    };
    match value {
        Value::Object(map) if !map.is_empty() => {
            let len = map.len();
            let (k, child) = map.iter_mut().nth(step % len).unwrap();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(k);
            key.clone_from(k);
            replace(child, rest, new, path, key);
        }
        Value::Array(items) if !items.is_empty() => {
            let i = step % items.len();
            path.push('[');
            path.push_str(&i.to_string());
            path.push(']');
            replace(&mut items[i], rest, new, path, key);
        }
        _ => *value = new,
    }
}

/// Whether a YAML error locates the mutation: by its key (unknown fields, missing fields, bad
/// enum values) or by line and column (type errors from the YAML reader name only those).
fn names_the_place(message: &str, key: &str) -> bool {
    (!key.is_empty() && message.contains(key)) || message.contains(" at line ")
}

fn top_level(path: &str) -> &str {
    path.split(['.', '[']).next().unwrap_or("")
}

/// The scenario `text` describes, read twice: directly, and after writing its file form back out.
fn round_trip(text: &str) -> Result<(), TestCaseError> {
    let file: ScenarioFile =
        yaml::from_str(text).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let Ok(scenario) = file.clone().check() else {
        return Ok(());
    };
    let written = yaml::to_string(&serde_json::to_value(&file).unwrap())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let again: ScenarioFile =
        yaml::from_str(&written).map_err(|e| TestCaseError::fail(format!("{e}\n{written}")))?;
    prop_assert_eq!(&again, &file, "{}", written);
    prop_assert_eq!(again.check(), Ok(scenario), "{}", written);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn prop_arbitrary_yaml_scenarios_never_panic(document in yaml_value(), text in any::<String>()) {
        for text in [&document, &text] {
            if let Err(error) = LoadedScenario::from_yaml(text, None) {
                prop_assert!(!error.to_string().is_empty());
            }
            if let Ok(scenario) = Scenario::from_yaml(SMALL) {
                let _ = scenario.with_chaos_yaml(text);
            }
            let _ = FaultPlan::from_yaml(text);
        }
    }

    #[test]
    fn prop_mutated_scenarios_name_the_field(
        steps in prop::collection::vec(any::<usize>(), 1..8),
        replacement in scalar(),
    ) {
        let mut document: Value = yaml::from_str(SMALL).unwrap();
        let (path, key) = mutate(&mut document, &steps, replacement);
        let text = yaml::to_string(&document).unwrap();
        match LoadedScenario::from_yaml(&text, None) {
            Ok(_) => round_trip(&text)?,
            Err(ScenarioError::Parse(message)) => {
                prop_assert!(names_the_place(&message, &key), "{path}: {message}");
            }
            Err(ScenarioError::Invalid { path: at, rule }) => {
                prop_assert!(FIELDS.contains(&top_level(&at)), "{path}: {at}: {rule}");
            }
        }
    }

}

// Each case below builds the API server's validator: fewer cases keep the suite fast.
proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn prop_mutated_chaos_files_name_the_field(
        steps in prop::collection::vec(any::<usize>(), 1..6),
        replacement in scalar(),
    ) {
        let mut document: Value = yaml::from_str(CHAOS).unwrap();
        let (path, key) = mutate(&mut document, &steps, replacement);
        let text = yaml::to_string(&document).unwrap();
        let scenario = Scenario::from_yaml(SMALL).unwrap();
        let checked = scenario
            .with_chaos_yaml(&text)
            .and_then(LoadedScenario::from_scenario);
        match checked {
            Ok(_) => {}
            Err(ScenarioError::Parse(message)) => {
                prop_assert!(names_the_place(&message, &key), "{path}: {message}");
            }
            Err(ScenarioError::Invalid { path: at, rule }) => {
                prop_assert!(at.starts_with("chaos."), "{path}: {at}: {rule}");
            }
        }
        // The actors section alone is a fault plan file (when the mutation is inside it).
        if let Some(actors) = document.get("actors").filter(|_| path.starts_with("actors.")) {
            let text = yaml::to_string(actors).unwrap();
            match FaultPlan::from_yaml(&text) {
                Ok(_) => {}
                Err(FaultPlanError::Parse(message)) => {
                    prop_assert!(names_the_place(&message, &key), "{path}: {message}");
                }
                Err(FaultPlanError::Invalid { path: at, rule }) => {
                    prop_assert!(at.starts_with("rules["), "{path}: {at}: {rule}");
                }
            }
        }
    }

    #[test]
    fn prop_accepted_scenarios_round_trip(seed in any::<u64>(), minutes in 7u32..600, replicas in 0u32..100) {
        let text = SMALL
            .replace("seed: 3", &format!("seed: {seed}"))
            .replace("duration: 8m", &format!("duration: {minutes}m"))
            .replace("replicas: 12", &format!("replicas: {replicas}"));
        LoadedScenario::from_yaml(&text, Some(CHAOS))
            .map_err(|e| TestCaseError::fail(format!("{e}")))?;
        round_trip(&text)?;
    }
}
