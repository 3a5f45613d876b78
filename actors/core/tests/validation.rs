//! Each invalid document of reference section 1 is rejected with the right field path and rule,
//! each by its own test; valid documents pass.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

mod documents;

use serde_json::{Value, json};

use documents::{VALIDATOR, nodeclaim, nodeclass, nodepool, violations};
use karpenter_core::apis::validation::Outcome;

/// Asserts `document` has a violation at exactly `path` whose message contains `rule`.
#[track_caller]
fn expect_violation(document: &Value, path: &str, rule: &str) {
    let found = violations(document);
    assert!(
        found
            .iter()
            .any(|v| v.path == path && v.message.contains(rule)),
        "expected {path}: ...{rule}..., got {found:#?}"
    );
}

fn set(mut document: Value, pointer: &str, value: Value) -> Value {
    *document
        .pointer_mut(pointer)
        .unwrap_or_else(|| panic!("no {pointer}")) = value;
    document
}

fn with_requirement(requirement: Value) -> Value {
    set(
        nodepool(),
        "/spec/template/spec/requirements",
        Value::Array(vec![requirement]),
    )
}

fn with_label(key: &str) -> Value {
    set(
        nodepool(),
        "/spec/template/metadata/labels",
        json!({ key: "x" }),
    )
}

fn with_budget(budget: Value) -> Value {
    let mut document = nodepool();
    document["spec"]["disruption"]["budgets"] = Value::Array(vec![budget]);
    document
}

fn with_spec(mut document: Value, field: &str, value: Value) -> Value {
    document["spec"][field] = value;
    document
}

fn with_kubelet(kubelet: Value) -> Value {
    with_spec(nodeclass(), "kubelet", kubelet)
}

fn with_ebs(ebs: Value) -> Value {
    let mut mapping = json!({ "deviceName": "/dev/xvda" });
    mapping["ebs"] = ebs;
    with_spec(
        nodeclass(),
        "blockDeviceMappings",
        Value::Array(vec![mapping]),
    )
}

// ---- valid documents -------------------------------------------------------------------------

#[test]
fn minimal_documents_of_each_kind_are_valid() {
    for document in [nodepool(), nodeclaim(), nodeclass()] {
        assert_eq!(violations(&document), Vec::new(), "{document}");
    }
}

#[test]
fn other_kinds_are_skipped_with_a_note() {
    let outcome = VALIDATOR.validate(&json!({ "apiVersion": "v1", "kind": "ConfigMap" }));
    assert!(matches!(outcome, Outcome::Skipped { reason } if reason.contains("ConfigMap")));
}

#[test]
fn exception_domains_are_allowed_as_template_labels() {
    for key in [
        "node-restriction.kubernetes.io/team",
        "node.kubernetes.io/role",
        "kops.k8s.io/x",
    ] {
        assert_eq!(violations(&with_label(key)), Vec::new(), "{key}");
    }
}

// ---- NodePool: labels and requirements --------------------------------------------------------

#[test]
fn template_label_in_kubernetes_io_domain_is_rejected() {
    expect_violation(
        &with_label("kubernetes.io/custom-label"),
        "spec.template.metadata.labels[kubernetes.io/custom-label]",
        "label domain \"kubernetes.io\" is restricted",
    );
}

#[test]
fn template_label_in_k8s_io_domain_is_rejected() {
    expect_violation(
        &with_label("example.k8s.io/x"),
        "spec.template.metadata.labels[example.k8s.io/x]",
        "label domain \"k8s.io\" is restricted",
    );
}

#[test]
fn template_label_karpenter_sh_nodepool_is_rejected() {
    expect_violation(
        &with_label("karpenter.sh/nodepool"),
        "spec.template.metadata.labels[karpenter.sh/nodepool]",
        "label \"karpenter.sh/nodepool\" is restricted",
    );
}

#[test]
fn template_label_hostname_is_rejected() {
    expect_violation(
        &with_label("kubernetes.io/hostname"),
        "spec.template.metadata.labels[kubernetes.io/hostname]",
        "label \"kubernetes.io/hostname\" is restricted",
    );
}

#[test]
fn template_label_in_karpenter_k8s_aws_domain_is_rejected() {
    expect_violation(
        &with_label("karpenter.k8s.aws/custom"),
        "spec.template.metadata.labels[karpenter.k8s.aws/custom]",
        "label domain \"karpenter.k8s.aws\" is restricted",
    );
}

#[test]
fn template_label_value_that_is_not_a_label_value_is_rejected() {
    let document = set(
        nodepool(),
        "/spec/template/metadata/labels",
        json!({ "team": "a b" }),
    );
    expect_violation(
        &document,
        "spec.template.metadata.labels[team]",
        "does not match pattern",
    );
}

#[test]
fn requirement_on_restricted_domain_is_rejected() {
    expect_violation(
        &with_requirement(json!({ "key": "karpenter.sh/custom", "operator": "Exists" })),
        "spec.template.spec.requirements[0].key",
        "label domain \"karpenter.sh\" is restricted",
    );
}

#[test]
fn nodepool_requirement_on_its_own_nodepool_label_is_rejected() {
    expect_violation(
        &with_requirement(
            json!({ "key": "karpenter.sh/nodepool", "operator": "In", "values": ["a"] }),
        ),
        "spec.template.spec.requirements[0].key",
        "label \"karpenter.sh/nodepool\" is restricted",
    );
}

#[test]
fn requirement_in_without_values_is_rejected() {
    let document = set(
        nodepool(),
        "/spec/template/spec/requirements",
        json!([
            { "key": "a", "operator": "Exists" },
            { "key": "b", "operator": "Exists" },
            { "key": "team", "operator": "In" },
        ]),
    );
    expect_violation(
        &document,
        "spec.template.spec.requirements[2].values",
        "requirements with operator 'In' must have a value defined",
    );
}

#[test]
fn requirement_gt_with_two_values_is_rejected() {
    expect_violation(
        &with_requirement(
            json!({ "key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["1", "2"] }),
        ),
        "spec.template.spec.requirements[0].values",
        "requirements operator 'Gt' or 'Lt' must have a single positive integer value",
    );
}

#[test]
fn requirement_lt_with_a_negative_value_is_rejected() {
    expect_violation(
        &with_requirement(
            json!({ "key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["-1"] }),
        ),
        "spec.template.spec.requirements[0].values",
        "requirements operator 'Gt' or 'Lt' must have a single positive integer value",
    );
}

#[test]
fn requirement_with_unknown_operator_is_rejected() {
    expect_violation(
        &with_requirement(json!({ "key": "a", "operator": "Like", "values": ["x"] })),
        "spec.template.spec.requirements[0].operator",
        "unsupported value \"Like\"",
    );
}

#[test]
fn min_values_above_the_value_count_is_rejected() {
    expect_violation(
        &with_requirement(
            json!({ "key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"], "minValues": 3 }),
        ),
        "spec.template.spec.requirements[0].minValues",
        "requirements with 'minValues' must have at least that many values specified in the 'values' field (3 > 2)",
    );
}

#[test]
fn min_values_above_fifty_is_rejected() {
    expect_violation(
        &with_requirement(json!({ "key": "a", "operator": "Exists", "minValues": 51 })),
        "spec.template.spec.requirements[0].minValues",
        "less than or equal to 50",
    );
}

#[test]
fn min_values_of_zero_is_rejected() {
    expect_violation(
        &with_requirement(json!({ "key": "a", "operator": "Exists", "minValues": 0 })),
        "spec.template.spec.requirements[0].minValues",
        "greater than or equal to 1",
    );
}

#[test]
fn capacity_type_without_a_known_value_is_rejected() {
    expect_violation(
        &with_requirement(
            json!({ "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["cheap"] }),
        ),
        "spec.template.spec.requirements[0].values",
        "no valid values for karpenter.sh/capacity-type",
    );
}

#[test]
fn more_than_one_hundred_requirements_are_rejected() {
    let requirements: Vec<Value> = (0..101)
        .map(|i| json!({ "key": format!("example.com/k{i}"), "operator": "Exists" }))
        .collect();
    expect_violation(
        &set(
            nodepool(),
            "/spec/template/spec/requirements",
            Value::Array(requirements),
        ),
        "spec.template.spec.requirements",
        "at most 100 items",
    );
}

#[test]
fn duplicate_taint_key_and_effect_is_rejected() {
    let taint = json!({ "key": "dedicated", "value": "gpu", "effect": "NoSchedule" });
    let mut document = nodepool();
    document["spec"]["template"]["spec"]["taints"] = json!([taint]);
    document["spec"]["template"]["spec"]["startupTaints"] = json!([taint]);
    expect_violation(
        &document,
        "spec.template.spec.startupTaints[0]",
        "duplicate taint key/effect pair dedicated=NoSchedule",
    );
}

#[test]
fn taint_with_unknown_effect_is_rejected() {
    let mut document = nodepool();
    document["spec"]["template"]["spec"]["taints"] = json!([{ "key": "a", "effect": "NoRun" }]);
    expect_violation(
        &document,
        "spec.template.spec.taints[0].effect",
        "unsupported value \"NoRun\"",
    );
}

// ---- NodePool: disruption, durations, weight ---------------------------------------------------

#[test]
fn budget_schedule_without_duration_is_rejected() {
    expect_violation(
        &with_budget(json!({ "nodes": "1", "schedule": "@daily" })),
        "spec.disruption.budgets[0].duration",
        "'schedule' must be set with 'duration'",
    );
}

#[test]
fn budget_duration_without_schedule_is_rejected() {
    expect_violation(
        &with_budget(json!({ "nodes": "1", "duration": "1h" })),
        "spec.disruption.budgets[0].schedule",
        "'duration' must be set with 'schedule'",
    );
}

#[test]
fn budget_with_a_bad_cron_is_rejected() {
    expect_violation(
        &with_budget(json!({ "nodes": "1", "schedule": "0 25 * * *", "duration": "1h" })),
        "spec.disruption.budgets[0].schedule",
        "invalid cron schedule",
    );
}

#[test]
fn budget_of_101_percent_is_rejected() {
    expect_violation(
        &with_budget(json!({ "nodes": "101%" })),
        "spec.disruption.budgets[0].nodes",
        "does not match pattern",
    );
}

#[test]
fn budget_duration_in_seconds_is_rejected() {
    expect_violation(
        &with_budget(json!({ "nodes": "1", "schedule": "@hourly", "duration": "30s" })),
        "spec.disruption.budgets[0].duration",
        "does not match pattern",
    );
}

#[test]
fn budget_with_unknown_reason_is_rejected() {
    expect_violation(
        &with_budget(json!({ "nodes": "1", "reasons": ["Expired"] })),
        "spec.disruption.budgets[0].reasons[0]",
        "unsupported value \"Expired\"",
    );
}

#[test]
fn malformed_consolidate_after_is_rejected() {
    expect_violation(
        &set(
            nodepool(),
            "/spec/disruption/consolidateAfter",
            json!("-10s"),
        ),
        "spec.disruption.consolidateAfter",
        "does not match pattern",
    );
}

#[test]
fn missing_consolidate_after_is_rejected() {
    expect_violation(
        &set(
            nodepool(),
            "/spec/disruption",
            json!({ "consolidationPolicy": "WhenEmpty" }),
        ),
        "spec.disruption.consolidateAfter",
        "Required value",
    );
}

#[test]
fn unknown_consolidation_policy_is_rejected() {
    expect_violation(
        &set(
            nodepool(),
            "/spec/disruption",
            json!({ "consolidateAfter": "0s", "consolidationPolicy": "Always" }),
        ),
        "spec.disruption.consolidationPolicy",
        "unsupported value \"Always\"",
    );
}

#[test]
fn malformed_expire_after_is_rejected() {
    let mut document = nodepool();
    document["spec"]["template"]["spec"]["expireAfter"] = json!("30d");
    expect_violation(
        &document,
        "spec.template.spec.expireAfter",
        "does not match pattern",
    );
}

#[test]
fn termination_grace_period_never_is_rejected() {
    let mut document = nodepool();
    document["spec"]["template"]["spec"]["terminationGracePeriod"] = json!("Never");
    expect_violation(
        &document,
        "spec.template.spec.terminationGracePeriod",
        "does not match pattern",
    );
}

#[test]
fn weight_above_one_hundred_is_rejected() {
    expect_violation(
        &with_spec(nodepool(), "weight", json!(101)),
        "spec.weight",
        "less than or equal to 100",
    );
}

#[test]
fn node_class_ref_group_with_a_slash_is_rejected() {
    expect_violation(
        &set(
            nodepool(),
            "/spec/template/spec/nodeClassRef/group",
            json!("karpenter.k8s.aws/v1"),
        ),
        "spec.template.spec.nodeClassRef.group",
        "does not match pattern",
    );
}

#[test]
fn node_class_ref_without_a_name_is_rejected() {
    expect_violation(
        &set(
            nodepool(),
            "/spec/template/spec/nodeClassRef",
            json!({ "group": "g", "kind": "k" }),
        ),
        "spec.template.spec.nodeClassRef.name",
        "Required value",
    );
}

#[test]
fn unknown_fields_are_rejected_as_strict_validation_would() {
    let document = with_spec(nodepool(), "limit", json!({ "cpu": 10 }));
    expect_violation(&document, "spec.limit", "unknown field");
}

#[test]
fn a_malformed_limit_quantity_is_rejected() {
    expect_violation(
        &with_spec(nodepool(), "limits", json!({ "cpu": "ten" })),
        "spec.limits[cpu]",
        "does not match pattern",
    );
}

#[test]
fn a_wrong_json_type_names_the_field() {
    expect_violation(
        &set(nodepool(), "/spec/template/spec/requirements", json!("all")),
        "spec.template.spec.requirements",
        "must be of type array, got string",
    );
}

#[test]
fn an_unserved_api_version_is_rejected() {
    let document = set(nodepool(), "/apiVersion", json!("karpenter.sh/v1beta1"));
    expect_violation(
        &document,
        "apiVersion",
        "karpenter.sh/v1beta1 is not served",
    );
}

#[test]
fn an_invalid_object_name_is_rejected() {
    expect_violation(
        &set(nodepool(), "/metadata/name", json!("Default_Pool")),
        "metadata.name",
        "not a valid DNS subdomain",
    );
}

// ---- NodeClaim -------------------------------------------------------------------------------

#[test]
fn nodeclaim_may_require_its_nodepool_label() {
    let document = set(
        nodeclaim(),
        "/spec/requirements",
        json!([{ "key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"] }]),
    );
    assert_eq!(violations(&document), Vec::new());
}

#[test]
fn nodeclaim_requirement_in_without_values_is_rejected() {
    expect_violation(
        &set(
            nodeclaim(),
            "/spec/requirements",
            json!([{ "key": "a", "operator": "In", "values": [] }]),
        ),
        "spec.requirements[0].values",
        "requirements with operator 'In' must have a value defined",
    );
}

#[test]
fn nodeclaim_malformed_resource_request_is_rejected() {
    expect_violation(
        &set(
            nodeclaim(),
            "/spec/resources/requests/cpu",
            json!("1.5 cores"),
        ),
        "spec.resources.requests[cpu]",
        "does not match pattern",
    );
}

// ---- EC2NodeClass ----------------------------------------------------------------------------

#[test]
fn alias_mixed_with_other_ami_terms_is_rejected() {
    let document = with_spec(
        nodeclass(),
        "amiSelectorTerms",
        json!([{ "alias": "al2023@latest" }, { "id": "ami-0123" }]),
    );
    expect_violation(
        &document,
        "spec.amiSelectorTerms[0].alias",
        "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
    );
}

#[test]
fn alias_and_tags_in_one_term_are_rejected() {
    let document = with_spec(
        nodeclass(),
        "amiSelectorTerms",
        json!([{ "alias": "al2023@latest", "tags": { "a": "b" } }]),
    );
    expect_violation(
        &document,
        "spec.amiSelectorTerms[0].alias",
        "'alias' is mutually exclusive, cannot be set with a combination of other fields",
    );
}

#[test]
fn alias_with_an_unknown_family_is_rejected() {
    expect_violation(
        &with_spec(
            nodeclass(),
            "amiSelectorTerms",
            json!([{ "alias": "ubuntu@latest" }]),
        ),
        "spec.amiSelectorTerms[0].alias",
        "family is not supported, must be one of the following",
    );
}

#[test]
fn windows_alias_with_a_pinned_version_is_rejected() {
    expect_violation(
        &with_spec(
            nodeclass(),
            "amiSelectorTerms",
            json!([{ "alias": "windows2022@v1" }]),
        ),
        "spec.amiSelectorTerms[0].alias",
        "windows families may only specify version 'latest'",
    );
}

#[test]
fn alias_without_a_version_is_rejected() {
    expect_violation(
        &with_spec(
            nodeclass(),
            "amiSelectorTerms",
            json!([{ "alias": "al2023" }]),
        ),
        "spec.amiSelectorTerms[0].alias",
        "must match the format 'family@version'",
    );
}

#[test]
fn ami_family_contradicting_the_alias_is_rejected() {
    expect_violation(
        &with_spec(nodeclass(), "amiFamily", json!("Bottlerocket")),
        "spec.amiFamily",
        "amiFamily must be 'AL2023' or 'Custom' when using an AL2023 alias",
    );
}

#[test]
fn ami_terms_without_alias_need_an_ami_family() {
    expect_violation(
        &with_spec(
            nodeclass(),
            "amiSelectorTerms",
            json!([{ "id": "ami-0123" }]),
        ),
        "spec.amiFamily",
        "must specify amiFamily if amiSelectorTerms does not contain an alias",
    );
}

#[test]
fn empty_ami_selector_term_is_rejected() {
    let mut document = with_spec(nodeclass(), "amiSelectorTerms", json!([{}]));
    document["spec"]["amiFamily"] = json!("AL2023");
    expect_violation(
        &document,
        "spec.amiSelectorTerms[0]",
        "expected at least one, got none",
    );
}

#[test]
fn both_role_and_instance_profile_are_rejected() {
    expect_violation(
        &with_spec(nodeclass(), "instanceProfile", json!("profile")),
        "spec",
        "must specify exactly one of ['role', 'instanceProfile']",
    );
}

#[test]
fn neither_role_nor_instance_profile_is_rejected() {
    let mut document = nodeclass();
    document["spec"].as_object_mut().unwrap().remove("role");
    expect_violation(
        &document,
        "spec",
        "must specify exactly one of ['role', 'instanceProfile']",
    );
}

#[test]
fn empty_role_is_rejected() {
    expect_violation(
        &with_spec(nodeclass(), "role", json!("")),
        "spec.role",
        "role cannot be empty",
    );
}

#[test]
fn subnet_term_with_id_and_tags_is_rejected() {
    let document = with_spec(
        nodeclass(),
        "subnetSelectorTerms",
        json!([{ "id": "subnet-0abc", "tags": { "a": "b" } }]),
    );
    expect_violation(
        &document,
        "spec.subnetSelectorTerms",
        "'id' is mutually exclusive",
    );
}

#[test]
fn empty_subnet_selector_terms_are_rejected() {
    expect_violation(
        &with_spec(nodeclass(), "subnetSelectorTerms", json!([])),
        "spec.subnetSelectorTerms",
        "subnetSelectorTerms cannot be empty",
    );
}

#[test]
fn security_group_term_with_name_and_tags_is_rejected() {
    let document = with_spec(
        nodeclass(),
        "securityGroupSelectorTerms",
        json!([{ "name": "nodes", "tags": { "a": "b" } }]),
    );
    expect_violation(
        &document,
        "spec.securityGroupSelectorTerms",
        "'name' is mutually exclusive",
    );
}

#[test]
fn selector_tag_with_an_empty_value_is_rejected() {
    let document = with_spec(
        nodeclass(),
        "securityGroupSelectorTerms",
        json!([{ "tags": { "team": "" } }]),
    );
    expect_violation(
        &document,
        "spec.securityGroupSelectorTerms[0].tags[team]",
        "empty tag keys or values aren't supported",
    );
}

#[test]
fn malformed_subnet_id_is_rejected() {
    expect_violation(
        &with_spec(
            nodeclass(),
            "subnetSelectorTerms",
            json!([{ "id": "sn-123" }]),
        ),
        "spec.subnetSelectorTerms[0].id",
        "does not match pattern",
    );
}

#[test]
fn each_forbidden_tag_key_is_rejected() {
    for key in [
        "eks:eks-cluster-name",
        "kubernetes.io/cluster/my-cluster",
        "karpenter.sh/nodepool",
        "karpenter.sh/nodeclaim",
        "karpenter.k8s.aws/ec2nodeclass",
    ] {
        expect_violation(
            &with_spec(nodeclass(), "tags", json!({ key: "x" })),
            &format!("spec.tags[{key}]"),
            "tag contains a restricted tag",
        );
    }
}

#[test]
fn volume_initialization_rate_without_snapshot_is_rejected() {
    expect_violation(
        &with_ebs(json!({ "volumeSize": "20Gi", "volumeInitializationRate": 200 })),
        "spec.blockDeviceMappings[0].ebs.volumeInitializationRate",
        "snapshotID must be set when volumeInitializationRate is set",
    );
}

#[test]
fn volume_initialization_rate_outside_100_to_300_is_rejected() {
    for (rate, rule) in [
        (99, "greater than or equal to 100"),
        (301, "less than or equal to 300"),
    ] {
        expect_violation(
            &with_ebs(json!({ "snapshotID": "snap-1", "volumeInitializationRate": rate })),
            "spec.blockDeviceMappings[0].ebs.volumeInitializationRate",
            rule,
        );
    }
}

#[test]
fn volume_without_size_or_snapshot_is_rejected() {
    expect_violation(
        &with_ebs(json!({ "volumeType": "gp3" })),
        "spec.blockDeviceMappings[0].ebs",
        "snapshotID or volumeSize must be defined",
    );
}

#[test]
fn volume_size_above_64_terabytes_is_rejected() {
    expect_violation(
        &with_ebs(json!({ "volumeSize": "65T" })),
        "spec.blockDeviceMappings[0].ebs.volumeSize",
        "does not match pattern",
    );
}

#[test]
fn two_root_volumes_are_rejected() {
    let document = with_spec(
        nodeclass(),
        "blockDeviceMappings",
        json!([
            { "deviceName": "/dev/xvda", "rootVolume": true, "ebs": { "volumeSize": "20Gi" } },
            { "deviceName": "/dev/xvdb", "rootVolume": true, "ebs": { "volumeSize": "20Gi" } },
        ]),
    );
    expect_violation(
        &document,
        "spec.blockDeviceMappings",
        "must have only one blockDeviceMappings with rootVolume",
    );
}

#[test]
fn hop_limit_zero_is_rejected() {
    expect_violation(
        &with_spec(
            nodeclass(),
            "metadataOptions",
            json!({ "httpPutResponseHopLimit": 0 }),
        ),
        "spec.metadataOptions.httpPutResponseHopLimit",
        "greater than or equal to 1",
    );
}

#[test]
fn http_tokens_other_than_required_or_optional_are_rejected() {
    expect_violation(
        &with_spec(
            nodeclass(),
            "metadataOptions",
            json!({ "httpTokens": "always" }),
        ),
        "spec.metadataOptions.httpTokens",
        "unsupported value \"always\"",
    );
}

#[test]
fn eviction_soft_without_a_matching_grace_period_is_rejected() {
    expect_violation(
        &with_kubelet(json!({
            "evictionSoft": { "memory.available": "500Mi", "nodefs.available": "10%" },
            "evictionSoftGracePeriod": { "memory.available": "1m" },
        })),
        "spec.kubelet.evictionSoft[nodefs.available]",
        "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
    );
}

#[test]
fn eviction_grace_period_without_a_matching_threshold_is_rejected() {
    expect_violation(
        &with_kubelet(json!({ "evictionSoftGracePeriod": { "memory.available": "1m" } })),
        "spec.kubelet.evictionSoftGracePeriod[memory.available]",
        "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
    );
}

#[test]
fn unknown_eviction_signal_is_rejected() {
    expect_violation(
        &with_kubelet(json!({ "evictionHard": { "memory.free": "100Mi" } })),
        "spec.kubelet.evictionHard[memory.free]",
        "valid keys for evictionHard are",
    );
}

#[test]
fn image_gc_high_not_above_low_is_rejected() {
    expect_violation(
        &with_kubelet(
            json!({ "imageGCHighThresholdPercent": 80, "imageGCLowThresholdPercent": 80 }),
        ),
        "spec.kubelet.imageGCHighThresholdPercent",
        "must be greater than imageGCLowThresholdPercent",
    );
}

#[test]
fn negative_kube_reserved_is_rejected() {
    expect_violation(
        &with_kubelet(json!({ "kubeReserved": { "memory": "-100Mi" } })),
        "spec.kubelet.kubeReserved[memory]",
        "kubeReserved value cannot be a negative resource quantity",
    );
}

#[test]
fn unknown_system_reserved_resource_is_rejected() {
    expect_violation(
        &with_kubelet(json!({ "systemReserved": { "gpu": "1" } })),
        "spec.kubelet.systemReserved[gpu]",
        "valid keys for systemReserved are",
    );
}

#[test]
fn negative_max_pods_is_rejected() {
    expect_violation(
        &with_kubelet(json!({ "maxPods": -1 })),
        "spec.kubelet.maxPods",
        "greater than or equal to 0",
    );
}

// ---- all violations at once --------------------------------------------------------------------

#[test]
fn every_violation_of_a_document_is_reported_together() {
    let mut document = with_requirement(json!({ "key": "a", "operator": "In" }));
    document["spec"]["weight"] = json!(0);
    document["spec"]["disruption"]["consolidateAfter"] = json!("soon");
    document["spec"]["template"]["metadata"]["labels"] = json!({ "kubernetes.io/x": "y" });
    let paths: Vec<String> = violations(&document).into_iter().map(|v| v.path).collect();
    for expected in [
        "spec.weight",
        "spec.disruption.consolidateAfter",
        "spec.template.metadata.labels[kubernetes.io/x]",
        "spec.template.spec.requirements[0].values",
    ] {
        assert!(
            paths.iter().any(|p| p == expected),
            "{expected} missing from {paths:?}"
        );
    }
}

/// The paths of an outcome's violations.
fn violation_paths(outcome: Outcome) -> Vec<String> {
    match outcome {
        Outcome::Checked { violations, .. } => violations.into_iter().map(|v| v.path).collect(),
        Outcome::Skipped { reason } => panic!("skipped: {reason}"),
    }
}

#[test]
fn an_update_ratchets_schema_errors_only_where_the_value_did_not_change() {
    let schema_errors = violation_paths;
    let old = with_spec(nodepool(), "weight", json!(1000));
    assert!(
        schema_errors(VALIDATOR.validate(&old)).contains(&"spec.weight".to_owned()),
        "the old document is invalid on its own"
    );
    let mut relabelled = old.clone();
    relabelled["metadata"]["labels"] = json!({ "team": "a" });
    assert!(
        schema_errors(VALIDATOR.validate_update(&relabelled, &old)).is_empty(),
        "an unchanged invalid weight is ratcheted"
    );
    let reweighted = with_spec(old.clone(), "weight", json!(2000));
    assert_eq!(
        schema_errors(VALIDATOR.validate_update(&reweighted, &old)),
        ["spec.weight"],
        "a changed weight is checked"
    );
}

#[test]
fn an_update_ratchets_rule_errors_while_the_spec_is_unchanged() {
    let paths = violation_paths;
    let old = with_budget(json!({ "nodes": "1", "schedule": "@daily" }));
    let rule = "spec.disruption.budgets[0].duration".to_owned();
    assert!(
        paths(VALIDATOR.validate(&old)).contains(&rule),
        "the old document breaks a rule on its own"
    );
    let mut status_write = old.clone();
    status_write["status"] = json!({ "resources": { "nodes": "3" } });
    assert!(
        paths(VALIDATOR.validate_update(&status_write, &old)).is_empty(),
        "an unchanged spec is not checked again"
    );
    let mut reweighted = old.clone();
    reweighted["spec"]["weight"] = json!(10);
    assert_eq!(
        paths(VALIDATOR.validate_update(&reweighted, &old)),
        [rule],
        "a changed spec runs the rules on the whole spec"
    );
}
