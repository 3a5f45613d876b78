//! Scenario files: every shipped scenario loads; a broken one fails with the field named, from
//! the library and from `karpenter simulate`.

use std::path::PathBuf;

use karpenter::commands::simulate::{self, SimulateArgs};
use karpenter::sim::scenario::LoadedScenario;
use karpenter::sim::scenario::file::DEFAULT_SCENARIO;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn error_of(text: &str) -> String {
    LoadedScenario::from_yaml(text, None)
        .expect_err("the scenario is broken")
        .to_string()
}

#[test]
fn every_shipped_scenario_loads() {
    let mut count = 0;
    for entry in std::fs::read_dir(repo("config/scenarios")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            LoadedScenario::from_yaml(&text, None)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            count += 1;
        }
    }
    assert!(count >= 1);
}

#[test]
fn a_nodepool_breaking_a_crd_rule_is_named_by_its_scenario_path() {
    let text =
        std::fs::read_to_string(repo("tests/fixtures/scenarios/broken-nodepool.yaml")).unwrap();
    let message = error_of(&text);
    assert!(
        message.starts_with("nodePools[0].spec.template.spec.requirements[0].operator: "),
        "{message}"
    );
}

#[test]
fn a_nodepool_naming_a_missing_node_class_is_refused() {
    let text = DEFAULT_SCENARIO.replace(
        "            kind: EC2NodeClass\n            name: default",
        "            kind: EC2NodeClass\n            name: gpu",
    );
    let message = error_of(&text);
    assert_eq!(
        message,
        "nodePools[0].spec.template.spec.nodeClassRef.name: \"gpu\" is not one of the scenario's ec2NodeClasses"
    );
}

#[test]
fn kwok_capacity_must_name_a_known_instance_type_and_zone() {
    let text = DEFAULT_SCENARIO.replace("instanceType: c6i.2xlarge", "instanceType: c99.huge");
    assert_eq!(
        error_of(&text),
        "kwok.capacity[0].instanceType: \"c99.huge\" is not in kwok's catalogue"
    );
    let text = DEFAULT_SCENARIO.replace("zone: us-west-2a", "zone: eu-west-1a");
    assert_eq!(
        error_of(&text),
        "kwok.capacity[0].zone: \"eu-west-1a\" is not a zone of us-west-2"
    );
}

#[test]
fn chaos_plans_are_checked_with_the_field_named() {
    let actors = "actors:\n  seed: 1\n  rules:\n    - {kind: NodeClaimActor, action: delay}\n";
    let error = LoadedScenario::from_yaml(DEFAULT_SCENARIO, Some(actors)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "chaos.actors.rules[0].delay: required when action is delay"
    );
    let aws = "aws:\n  - {at: 1m, service: ec2, operation: LaunchInstances, count: 1, code: InternalError}\n";
    let error = LoadedScenario::from_yaml(DEFAULT_SCENARIO, Some(aws)).unwrap_err();
    assert!(
        error.to_string().starts_with(
            "chaos.aws[0].operation: \"LaunchInstances\" is not an operation kwok's ec2 answers"
        ),
        "{error}"
    );
}

#[test]
fn the_command_names_the_file_and_the_field_and_exits_2() {
    let args = SimulateArgs {
        scenario: Some(repo("tests/fixtures/scenarios/broken-nodepool.yaml")),
        quiet: true,
        ..SimulateArgs::default()
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    let status = simulate::run(&args, &mut out, &mut err);
    assert_eq!(status.code(), 2);
    let err = String::from_utf8(err).unwrap();
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.contains(
            "broken-nodepool.yaml: nodePools[0].spec.template.spec.requirements[0].operator"
        ),
        "{err}"
    );
    assert!(out.is_empty());
}

#[test]
fn a_pod_disruption_budget_spec_is_checked_with_the_field_named() {
    let budget = |spec: &str| {
        format!("{DEFAULT_SCENARIO}podDisruptionBudgets:\n  - name: web\n    spec: {spec}\n")
    };
    assert_eq!(
        error_of(&budget("{maxUnavailable: 0}")),
        "podDisruptionBudgets[0].spec.selector: required (a budget without a selector selects no pod)"
    );
    assert_eq!(
        error_of(&budget(
            "{minAvailable: 1, maxUnavailable: 0, selector: {matchLabels: {app: web}}}"
        )),
        "podDisruptionBudgets[0].spec: set exactly one of minAvailable and maxUnavailable"
    );
    let message = error_of(&budget("{maxUnavailable: [1], selector: {}}"));
    assert!(
        message.starts_with("podDisruptionBudgets[0].spec: "),
        "{message}"
    );
    LoadedScenario::from_yaml(
        &budget("{maxUnavailable: 1, selector: {matchLabels: {app: web}}}"),
        None,
    )
    .unwrap();
}
