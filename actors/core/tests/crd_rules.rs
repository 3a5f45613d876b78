//! Karpenter's CRD rules, rule by rule. `tests/fixtures/karpenter-crd-rules.txt` (at the
//! workspace root) lists every `x-kubernetes-validations` rule of Karpenter v1.5's three CRDs.
//! The generated CRDs must carry exactly that set, and for each rule that reads only the new
//! object, one document breaking just that rule must be refused by the `Validator` (what
//! `karpenter validate` and the emulator's admission run) at the rule's field with its message.
//! The `oldSelf` rules are the emulator's (`tests/emulator/crd_validation.rs`).
//!
//! Every rule is carried. Where our CRDs still differ from Karpenter's, on purpose: an
//! `EC2NodeClass` must have a `spec` (Karpenter's CRD admits one without, which no launch can
//! use; our typed watchers could not decode it), and `minValues` says `format: int64` (Karpenter's
//! Go `int` has no format; the bounds 1..=50 are the same).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::collections::BTreeSet;

mod documents;

use karpenter_core::apis::crd;
use serde_json::{Value, json};

use documents::{nodeclaim, nodeclass, nodepool, violations};

const FIXTURE: &str = include_str!("../../../tests/fixtures/karpenter-crd-rules.txt");

/// One rule: the kind, the schema path carrying it (`[*]` for items), its message and its rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Rule {
    kind: String,
    path: String,
    message: String,
    rule: String,
}

impl Rule {
    fn is_transition(&self) -> bool {
        self.rule.contains("oldSelf")
    }
}

/// CEL ignores whitespace between tokens; Karpenter's template-label rule has a doubled space.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn karpenter_rules() -> BTreeSet<Rule> {
    FIXTURE
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 4, "malformed fixture line {line:?}");
            Rule {
                kind: fields[0].to_owned(),
                path: fields[1].to_owned(),
                message: fields[2].to_owned(),
                rule: squeeze(fields[3]),
            }
        })
        .collect()
}

fn collect(kind: &str, schema: &Value, path: &str, out: &mut BTreeSet<Rule>) {
    for entry in schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.insert(Rule {
            kind: kind.to_owned(),
            path: if path.is_empty() { "<root>" } else { path }.to_owned(),
            message: entry["message"].as_str().unwrap_or_default().to_owned(),
            rule: squeeze(entry["rule"].as_str().unwrap_or_default()),
        });
    }
    for (name, child) in schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let child_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        collect(kind, child, &child_path, out);
    }
    for nested in [schema.get("items"), schema.get("additionalProperties")]
        .into_iter()
        .flatten()
        .filter(|nested| nested.is_object())
    {
        collect(kind, nested, &format!("{path}[*]"), out);
    }
}

fn generated_rules() -> BTreeSet<Rule> {
    let mut out = BTreeSet::new();
    for crd in crd::all() {
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_owned();
        collect(&kind, &crd::schema_of(&crd), "", &mut out);
    }
    out
}

#[test]
fn the_generated_crds_carry_exactly_karpenters_rules() {
    let karpenter = karpenter_rules();
    let ours = generated_rules();
    assert_eq!(
        karpenter.len(),
        83,
        "the fixture lists Karpenter's 83 rules"
    );
    let missing: Vec<&Rule> = karpenter.difference(&ours).collect();
    let extra: Vec<&Rule> = ours.difference(&karpenter).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing from our CRDs: {missing:#?}\nnot in Karpenter's: {extra:#?}"
    );
}

fn base(kind: &str) -> Value {
    match kind {
        "NodePool" => nodepool(),
        "NodeClaim" => nodeclaim(),
        "EC2NodeClass" => nodeclass(),
        other => panic!("no base object for {other}"),
    }
}

/// Sets the field at a JSON pointer, creating objects on the way.
fn set(document: &mut Value, pointer: &str, value: Value) {
    let mut node = document;
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    let (last, parents) = parts.split_last().unwrap();
    for part in parents {
        node = match node {
            Value::Array(items) => &mut items[part.parse::<usize>().unwrap()],
            other => other
                .as_object_mut()
                .unwrap()
                .entry((*part).to_owned())
                .or_insert_with(|| json!({})),
        };
    }
    match node {
        Value::Array(items) => items[last.parse::<usize>().unwrap()] = value,
        other => {
            other
                .as_object_mut()
                .unwrap()
                .insert((*last).to_owned(), value);
        }
    }
}

fn remove(document: &mut Value, pointer: &str) {
    let (parent, field) = pointer.rsplit_once('/').unwrap();
    document
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap()
        .remove(field);
}

/// A label key that breaks each label rule (by message), for labels and requirement keys.
fn restricted_key(message: &str) -> &'static str {
    match message {
        r#"label domain "kubernetes.io" is restricted"# => "kubernetes.io/team",
        r#"label domain "k8s.io" is restricted"# => "k8s.io/team",
        r#"label domain "karpenter.sh" is restricted"# => "karpenter.sh/team",
        r#"label "karpenter.sh/nodepool" is restricted"# => "karpenter.sh/nodepool",
        r#"label "kubernetes.io/hostname" is restricted"# => "kubernetes.io/hostname",
        r#"label domain "karpenter.k8s.aws" is restricted"# => "karpenter.k8s.aws/team",
        other => panic!("no restricted key for {other:?}"),
    }
}

/// The edits that turn the kind's base object into one that breaks `rule`, or `None` when the
/// table has no case for it (which fails the coverage test).
fn breaking_edit(rule: &Rule) -> Option<Value> {
    let mut document = base(&rule.kind);
    let requirements = match rule.kind.as_str() {
        "NodePool" => "/spec/template/spec/requirements",
        _ => "/spec/requirements",
    };
    let requirement = |document: &mut Value, value: Value| {
        set(document, requirements, json!([value]));
    };
    match (
        rule.kind.as_str(),
        rule.path.as_str(),
        rule.message.as_str(),
    ) {
        ("NodePool", "spec.template.metadata.labels", message) => set(
            &mut document,
            "/spec/template/metadata/labels",
            json!({ restricted_key(message): "x" }),
        ),
        (_, path, message) if path.ends_with("requirements[*].key") => requirement(
            &mut document,
            json!({ "key": restricted_key(message), "operator": "Exists" }),
        ),
        (_, path, message) if path.ends_with("requirements") => {
            let broken = match message {
                m if m.contains("'In'") => json!({ "key": "team", "operator": "In" }),
                m if m.contains("'Gt'") => {
                    json!({ "key": "team", "operator": "Gt", "values": ["-1"] })
                }
                _ => json!({ "key": "team", "operator": "In", "values": ["a"], "minValues": 2 }),
            };
            requirement(&mut document, broken);
        }
        (_, path, _) if path.contains("nodeClassRef.") => {
            let field = path.rsplit('.').next().unwrap();
            let pointer = match rule.kind.as_str() {
                "NodePool" => format!("/spec/template/spec/nodeClassRef/{field}"),
                _ => format!("/spec/nodeClassRef/{field}"),
            };
            set(&mut document, &pointer, json!(""));
        }
        ("NodePool", "spec.disruption.budgets", _) => set(
            &mut document,
            "/spec/disruption/budgets",
            json!([{ "nodes": "1", "schedule": "@daily" }]),
        ),
        ("EC2NodeClass", path, message) => ec2nodeclass_edit(&mut document, path, message)?,
        _ => return None,
    }
    Some(document)
}

fn ec2nodeclass_edit(document: &mut Value, path: &str, message: &str) -> Option<()> {
    let tags = json!({ "k": "v" });
    match (path, message) {
        ("spec", m) if m.starts_with("must specify exactly one") => {
            set(document, "/spec/instanceProfile", json!("profile"));
        }
        ("spec.blockDeviceMappings", _) => set(
            document,
            "/spec/blockDeviceMappings",
            json!([
                { "deviceName": "/dev/xvda", "rootVolume": true, "ebs": { "volumeSize": "20Gi" } },
                { "deviceName": "/dev/xvdb", "rootVolume": true, "ebs": { "volumeSize": "20Gi" } },
            ]),
        ),
        ("spec.blockDeviceMappings[*].ebs", m) => {
            let ebs = if m.starts_with("snapshotID or volumeSize") {
                json!({ "volumeType": "gp3" })
            } else {
                json!({ "volumeSize": "20Gi", "volumeInitializationRate": 200 })
            };
            set(
                document,
                "/spec/blockDeviceMappings",
                json!([{ "deviceName": "/dev/xvda", "ebs": ebs }]),
            );
        }
        ("spec.capacityReservationSelectorTerms", m) => {
            let term = if m.starts_with("expected") {
                json!({ "ownerID": "012345678901" })
            } else {
                json!({ "id": "cr-0123456789abcdef0", "tags": tags })
            };
            set(
                document,
                "/spec/capacityReservationSelectorTerms",
                json!([term]),
            );
        }
        ("spec.capacityReservationSelectorTerms[*].tags", _) => set(
            document,
            "/spec/capacityReservationSelectorTerms",
            json!([{ "tags": { "": "v" } }]),
        ),
        ("spec.instanceProfile", _) => {
            remove(document, "/spec/role");
            set(document, "/spec/instanceProfile", json!(""));
        }
        ("spec.role", _) => set(document, "/spec/role", json!("")),
        ("spec.securityGroupSelectorTerms" | "spec.subnetSelectorTerms", m) => {
            let field = path.rsplit('.').next()?;
            let terms = match m {
                m if m.ends_with("cannot be empty") => json!([]),
                m if m.starts_with("expected") => json!([{}]),
                m if m.starts_with("'name'") => json!([{ "name": "sg", "tags": tags }]),
                _ if field == "subnetSelectorTerms" => json!([{ "id": "subnet-1", "tags": tags }]),
                _ => json!([{ "id": "sg-1", "tags": tags }]),
            };
            set(document, &format!("/spec/{field}"), terms);
        }
        ("spec.securityGroupSelectorTerms[*].tags" | "spec.subnetSelectorTerms[*].tags", _) => {
            let field = path.split('.').nth(1)?.trim_end_matches("[*]");
            set(
                document,
                &format!("/spec/{field}"),
                json!([{ "tags": { "k": "" } }]),
            );
        }
        ("spec.tags", m) => {
            let key = match m {
                m if m.starts_with("empty tag keys") => "",
                m => m.rsplit(' ').next()?,
            };
            set(document, "/spec/tags", json!({ key: "v" }));
        }
        (path, message) if path.starts_with("spec.kubelet") => {
            kubelet_edit(document, path, message)?;
        }
        (path, message) => ami_edit(document, path, message)?,
    }
    Some(())
}

/// The rules about AMIs: `amiFamily` against the alias, the terms, the alias format.
fn ami_edit(document: &mut Value, path: &str, message: &str) -> Option<()> {
    match (path, message) {
        ("spec", m) if m.starts_with("must specify amiFamily") => {
            set(
                document,
                "/spec/amiSelectorTerms",
                json!([{ "id": "ami-1" }]),
            );
        }
        ("spec", m) if m.starts_with("if set, amiFamily must be") => {
            let (alias, family) = match m {
                m if m.contains("'AL2023'") => ("al2023@latest", "AL2"),
                m if m.contains("'AL2'") => ("al2@latest", "AL2023"),
                m if m.contains("'Bottlerocket'") => ("bottlerocket@latest", "AL2"),
                m if m.contains("'Windows2019'") => ("windows2019@latest", "AL2"),
                _ => ("windows2022@latest", "AL2"),
            };
            set(
                document,
                "/spec/amiSelectorTerms",
                json!([{ "alias": alias }]),
            );
            set(document, "/spec/amiFamily", json!(family));
        }
        ("spec.amiSelectorTerms", m) => {
            let terms = match m {
                m if m.starts_with("expected at least one") => json!([{ "owner": "self" }]),
                m if m.starts_with("'id'") => json!([{ "id": "ami-1", "name": "n" }]),
                m if m.contains("other fields") => {
                    json!([{ "alias": "al2023@latest", "name": "n" }])
                }
                _ => json!([{ "alias": "al2023@latest" }, { "id": "ami-1" }]),
            };
            set(document, "/spec/amiSelectorTerms", terms);
            set(document, "/spec/amiFamily", json!("AL2023"));
        }
        ("spec.amiSelectorTerms[*].alias", m) => {
            let alias = match m {
                m if m.starts_with("'alias' is improperly") => "al2023",
                m if m.starts_with("family is not") => "ubuntu@latest",
                _ => "windows2022@v1",
            };
            set(document, "/spec/amiSelectorTerms/0/alias", json!(alias));
            set(document, "/spec/amiFamily", json!("Custom"));
        }
        ("spec.amiSelectorTerms[*].tags", _) => {
            set(
                document,
                "/spec/amiSelectorTerms",
                json!([{ "tags": { "k": "" } }]),
            );
            set(document, "/spec/amiFamily", json!("AL2023"));
        }
        _ => return None,
    }
    Some(())
}

fn kubelet_edit(document: &mut Value, path: &str, message: &str) -> Option<()> {
    match (path, message) {
        ("spec.kubelet", m) => {
            let kubelet = match m {
                m if m.starts_with("imageGC") => {
                    json!({ "imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60 })
                }
                m if m.starts_with("evictionSoft OwnerKey") => {
                    json!({ "evictionSoft": { "memory.available": "5%" } })
                }
                _ => json!({ "evictionSoftGracePeriod": { "memory.available": "1m" } }),
            };
            set(document, "/spec/kubelet", kubelet);
        }
        ("spec.kubelet.evictionHard" | "spec.kubelet.evictionSoft", _) => {
            let field = path.rsplit('.').next()?;
            set(
                document,
                "/spec/kubelet",
                json!({ field: { "memory.free": "5%" } }),
            );
            if field == "evictionSoft" {
                set(
                    document,
                    "/spec/kubelet/evictionSoftGracePeriod",
                    json!({ "memory.free": "1m" }),
                );
            }
        }
        ("spec.kubelet.evictionSoftGracePeriod", _) => set(
            document,
            "/spec/kubelet",
            json!({
                "evictionSoft": { "memory.free": "5%" },
                "evictionSoftGracePeriod": { "memory.free": "1m" },
            }),
        ),
        ("spec.kubelet.kubeReserved" | "spec.kubelet.systemReserved", m) => {
            let field = path.rsplit('.').next()?;
            let reserved = if m.starts_with("valid keys") {
                json!({ "gpu": "1" })
            } else {
                json!({ "cpu": "-1" })
            };
            set(document, "/spec/kubelet", json!({ field: reserved }));
        }
        _ => return None,
    }
    Some(())
}

/// `spec.subnetSelectorTerms[*].tags` → `spec.subnetSelectorTerms[0].tags`: where the API
/// server reports the rule of the first item; our violations may name a field further in.
fn reported_prefix(path: &str) -> String {
    path.replace("[*]", "[0]")
}

#[test]
fn each_karpenter_rule_refuses_a_document_that_breaks_it() {
    for kind in ["NodePool", "NodeClaim", "EC2NodeClass"] {
        let violations = violations(&base(kind));
        assert!(
            violations.is_empty(),
            "the base {kind} is valid: {violations:#?}"
        );
    }
    let mut uncovered = Vec::new();
    for rule in karpenter_rules().iter().filter(|r| !r.is_transition()) {
        let Some(document) = breaking_edit(rule) else {
            uncovered.push(rule.clone());
            continue;
        };
        let violations = violations(&document);
        let prefix = reported_prefix(&rule.path);
        assert!(
            violations
                .iter()
                .any(|v| v.path.starts_with(&prefix) && v.message.contains(&rule.message)),
            "{} {}: expected {:?} at {prefix}, got {violations:#?}\nfor {document:#}",
            rule.kind,
            rule.path,
            rule.message,
        );
    }
    assert!(
        uncovered.is_empty(),
        "no breaking document for {uncovered:#?}"
    );
}

#[test]
fn a_selector_list_with_one_clean_term_is_admitted_as_karpenter_admits_it() {
    // `!self.all(x, has(x.id) && has(x.tags))` refuses only a list whose every term mixes them.
    let mut document = nodeclass();
    set(
        &mut document,
        "/spec/subnetSelectorTerms",
        json!([{ "id": "subnet-1", "tags": { "k": "v" } }, { "id": "subnet-2" }]),
    );
    set(
        &mut document,
        "/spec/securityGroupSelectorTerms",
        json!([{ "id": "sg-1", "name": "sg" }, { "name": "sg" }]),
    );
    let found = violations(&document);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn requirement_values_are_not_held_to_label_value_rules_as_karpenter_does_not() {
    // Karpenter's CRD puts maxLength and pattern on the `values` list, where they bind nothing.
    let mut document = nodepool();
    set(
        &mut document,
        "/spec/template/spec/requirements/0",
        json!({ "key": "example.com/path", "operator": "In", "values": ["a/b", "x".repeat(70)] }),
    );
    let found = violations(&document);
    assert!(found.is_empty(), "{found:#?}");
}
