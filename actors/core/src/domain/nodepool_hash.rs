//! The `karpenter.sh/nodepool-hash` of a `NodePool`'s template: the fingerprint static drift
//! compares (a NodeClaim stamped with an older hash than its pool's is drifted).
//!
//! Which fields count follows Karpenter v1.5 (`hashstructure` over `spec.template` with
//! `SlicesAsSets`, `IgnoreZeroValue`, `ZeroNil`): the template's labels and annotations, taints
//! and startup taints as sets, the `nodeClassRef`, `terminationGracePeriod` and `expireAfter` as
//! durations (so `60m` and `1h` are the same); requirements are left out (requirements drift is
//! computed separately), budgets are outside the template, and empty values count as absent.
//!
//! The value itself cannot equal Karpenter's (that one is Go's reflection walk through FNV), so
//! it is stamped with our own hash version, [`HASH_VERSION`]. Karpenter compares hashes only
//! when the versions match and re-stamps NodeClaims when the pool's version changes; so a
//! cluster switching from Karpenter to this daemon (or back) re-stamps its NodeClaims once
//! instead of seeing every node drift.

use std::fmt::Write as _;

use crate::apis::duration;
use crate::apis::labels;
use crate::apis::nodepool::NodeClaimTemplate;
use crate::apis::taints::Taint;

/// Our `karpenter.sh/nodepool-hash-version`: Karpenter's field set (its `v3`), our algorithm.
pub const HASH_VERSION: &str = labels::NODEPOOL_HASH_VERSION_VALUE;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The hash of a template, as a decimal string (the form Karpenter writes).
#[must_use]
pub fn template_hash(template: &NodeClaimTemplate) -> String {
    let mut fields: Vec<String> = Vec::new();
    for (key, value) in &template.metadata.labels {
        push(&mut fields, "metadata.labels", &[key, value]);
    }
    for (key, value) in &template.metadata.annotations {
        push(&mut fields, "metadata.annotations", &[key, value]);
    }
    let spec = &template.spec;
    for (name, taints) in [
        ("spec.taints", &spec.taints),
        ("spec.startupTaints", &spec.startup_taints),
    ] {
        let mut set: Vec<String> = taints.iter().map(taint_form).collect();
        set.sort();
        set.dedup();
        for taint in set {
            push(&mut fields, name, &[&taint]);
        }
    }
    let class = &spec.node_class_ref;
    for (name, value) in [
        ("spec.nodeClassRef.group", &class.group),
        ("spec.nodeClassRef.kind", &class.kind),
        ("spec.nodeClassRef.name", &class.name),
    ] {
        if !value.is_empty() {
            push(&mut fields, name, &[value]);
        }
    }
    if let Some(grace) = &spec.termination_grace_period {
        push_duration(&mut fields, "spec.terminationGracePeriod", &grace.0);
    }
    if spec.expire_after.0 != duration::NEVER {
        push_duration(&mut fields, "spec.expireAfter", &spec.expire_after.0);
    }
    fields.sort();
    let mut hash = FNV_OFFSET;
    for field in &fields {
        for byte in field.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(FNV_PRIME);
        }
    }
    hash.to_string()
}

/// One field as `name` followed by its length-prefixed parts, so no separator is ambiguous.
fn push(fields: &mut Vec<String>, name: &str, parts: &[&str]) {
    let mut field = format!("{}:{name}", name.len());
    for part in parts {
        let _ = write!(field, "|{}:{part}", part.len());
    }
    fields.push(field);
}

/// A duration hashed by its length (nanoseconds), zero left out; an unreadable one by its text.
fn push_duration(fields: &mut Vec<String>, name: &str, text: &str) {
    match duration::parse(text) {
        Ok(value) if value.is_zero() => {}
        Ok(value) => push(fields, name, &[&value.as_nanos().to_string()]),
        Err(_) => push(fields, name, &[text]),
    }
}

fn taint_form(taint: &Taint) -> String {
    let mut form = String::new();
    let _ = write!(
        form,
        "{}:{}|{}:{}|{}",
        taint.key.len(),
        taint.key,
        taint.value.as_deref().unwrap_or("").len(),
        taint.value.as_deref().unwrap_or(""),
        taint.effect.as_str()
    );
    if let Some(added) = &taint.time_added {
        let _ = write!(form, "|{}", added.0.as_second());
    }
    form
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::NodePool;

    #[expect(clippy::needless_pass_by_value, reason = "tests pass json! literals")]
    fn template(spec: serde_json::Value) -> NodeClaimTemplate {
        let pool: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": { "name": "default" },
            "spec": { "template": spec },
        }))
        .unwrap();
        pool.spec.template
    }

    fn base() -> serde_json::Value {
        serde_json::json!({
            "metadata": { "labels": { "team": "a" } },
            "spec": {
                "requirements": [{ "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"] }],
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
                "taints": [
                    { "key": "a", "effect": "NoSchedule" },
                    { "key": "b", "value": "x", "effect": "NoExecute" },
                ],
            },
        })
    }

    #[test]
    fn requirements_and_taint_order_do_not_change_the_hash() {
        let original = template_hash(&template(base()));
        let mut changed = base();
        changed["spec"]["requirements"][0]["values"] = serde_json::json!(["on-demand"]);
        changed["spec"]["taints"] = serde_json::json!([
            { "key": "b", "value": "x", "effect": "NoExecute" },
            { "key": "a", "effect": "NoSchedule" },
        ]);
        assert_eq!(template_hash(&template(changed)), original);
    }

    #[test]
    fn labels_taints_node_class_and_durations_change_the_hash() {
        let original = template_hash(&template(base()));
        let edits: [fn(&mut serde_json::Value); 4] = [
            |t| t["metadata"]["labels"]["team"] = serde_json::json!("b"),
            |t| t["spec"]["taints"][0]["key"] = serde_json::json!("c"),
            |t| t["spec"]["nodeClassRef"]["name"] = serde_json::json!("other"),
            |t| t["spec"]["expireAfter"] = serde_json::json!("24h"),
        ];
        for (index, edit) in edits.iter().enumerate() {
            let mut changed = base();
            edit(&mut changed);
            assert_ne!(template_hash(&template(changed)), original, "edit {index}");
        }
    }

    #[test]
    fn equal_durations_written_differently_hash_the_same() {
        let mut hour = base();
        hour["spec"]["terminationGracePeriod"] = serde_json::json!("1h");
        let mut minutes = base();
        minutes["spec"]["terminationGracePeriod"] = serde_json::json!("60m");
        assert_eq!(
            template_hash(&template(hour)),
            template_hash(&template(minutes))
        );
        let mut defaulted = base();
        defaulted["spec"]["expireAfter"] = serde_json::json!("720h");
        assert_eq!(
            template_hash(&template(defaulted)),
            template_hash(&template(base())),
            "the default expireAfter is the same as leaving it out"
        );
    }

    #[test]
    fn the_hash_version_differs_from_karpenters_own() {
        assert_ne!(HASH_VERSION, "v3");
    }
}
