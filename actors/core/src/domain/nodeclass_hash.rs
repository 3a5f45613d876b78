//! The `karpenter.k8s.aws/ec2nodeclass-hash` annotation: a hash of the static fields of an
//! `EC2NodeClass` spec, which drift detection compares between a class and the NodeClaims
//! launched from it (reference 1.3 "Annotations", 2.2 `nodeclass.hash`).
//!
//! What is hashed follows Karpenter's `EC2NodeClass.Hash()`: the whole spec except the selector
//! terms (subnets, security groups, capacity reservations, AMIs: their drift is detected from the
//! resolved status instead) and except the literal `amiFamily`, for which the family *resolved*
//! from the alias is hashed (so setting `amiFamily: AL2023` next to `al2023@latest` drifts
//! nothing). As in Karpenter, lists are hashed as sets, unset and empty values are ignored, and
//! `volumeSize` is hashed as its canonical quantity (`20Gi` and `20480Mi` hash alike).
//!
//! The encoding is ours (canonical JSON under FNV-1a), not Go's `hashstructure`, so the hash
//! values differ from Karpenter's. [`HASH_VERSION`] therefore differs from Karpenter's `v4`:
//! when a cluster switches from Karpenter, the `NodeClassActor` sees a class stamped `v4`,
//! re-stamps the class's NodeClaims with our hash and version (instead of finding every hash
//! different and drifting every node), exactly as Karpenter does on its own version bumps.
//! Bump the `-rsN` suffix whenever this encoding or the hashed field set changes.

use std::fmt::Write as _;

use serde_json::Value;

use crate::apis::ec2nodeclass::{AmiFamily, EC2NodeClassSpec};
use crate::apis::labels::EC2NODECLASS_HASH_VERSION_VALUE;
use crate::domain::resources::parse_units;

/// The hash version written next to the hash; see the module docs for why it is not `v4`.
pub const HASH_VERSION: &str = EC2NODECLASS_HASH_VERSION_VALUE;

/// Spec fields left out of the hash (JSON names).
const UNHASHED_FIELDS: &[&str] = &[
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "capacityReservationSelectorTerms",
    "amiSelectorTerms",
    "amiFamily",
];

/// The family a class launches with: `amiFamily` when set, else its alias's family, else
/// `Custom` (the CRD requires one of the first two).
#[must_use]
pub fn resolved_ami_family(spec: &EC2NodeClassSpec) -> AmiFamily {
    spec.ami_family
        .or_else(|| {
            spec.ami_selector_terms
                .iter()
                .find_map(|t| t.alias.as_deref())
                .and_then(AmiFamily::from_alias)
        })
        .unwrap_or(AmiFamily::Custom)
}

/// The `karpenter.k8s.aws/ec2nodeclass-hash` value of a spec (decimal, as Karpenter writes it).
#[must_use]
pub fn nodeclass_hash(spec: &EC2NodeClassSpec) -> String {
    let mut value = serde_json::to_value(spec).unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut value {
        for field in UNHASHED_FIELDS {
            fields.remove(*field);
        }
        fields.insert(
            "amiFamily".to_owned(),
            Value::String(resolved_ami_family(spec).as_str().to_owned()),
        );
        if let Some(Value::Array(mappings)) = fields.get_mut("blockDeviceMappings") {
            for mapping in mappings {
                canonical_volume_size(mapping);
            }
        }
    }
    let text = canonical(&value).unwrap_or_default();
    fnv1a_64(text.as_bytes()).to_string()
}

/// Replaces `ebs.volumeSize` by its size in bytes, when it parses.
fn canonical_volume_size(mapping: &mut Value) {
    let Some(size) = mapping.pointer_mut("/ebs/volumeSize") else {
        return;
    };
    if let Some(bytes) = size.as_str().and_then(|s| parse_units(s).ok()) {
        *size = Value::String(bytes.to_string());
    }
}

/// Canonical text of a JSON value: object keys sorted, arrays as sorted sets, nulls, empty
/// strings, empty arrays and empty objects left out (`None` for a value left out).
fn canonical(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(quote(s)),
        Value::Array(items) => {
            let mut parts: Vec<String> = items.iter().filter_map(canonical).collect();
            parts.sort();
            parts.dedup();
            (!parts.is_empty()).then(|| format!("[{}]", parts.join(",")))
        }
        Value::Object(fields) => {
            let mut parts: Vec<(&String, String)> = fields
                .iter()
                .filter_map(|(k, v)| canonical(v).map(|c| (k, c)))
                .collect();
            parts.sort_by(|a, b| a.0.cmp(b.0));
            if parts.is_empty() {
                return None;
            }
            let mut out = String::from("{");
            for (i, (key, value)) in parts.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}:{value}", quote(key));
            }
            out.push('}');
            Some(out)
        }
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// FNV-1a (64 bit): stable across processes and Rust releases, unlike `DefaultHasher`.
fn fnv1a_64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> EC2NodeClassSpec {
        let mut base = serde_json::json!({
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole",
        });
        if let (Value::Object(base), Value::Object(extra)) = (&mut base, json) {
            base.extend(extra);
        }
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn selector_terms_do_not_change_the_hash_but_static_fields_do() {
        let base = nodeclass_hash(&spec(serde_json::json!({})));
        let other_selectors = nodeclass_hash(&spec(serde_json::json!({
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "amiSelectorTerms": [{"alias": "al2023@v20250101"}],
        })));
        assert_eq!(base, other_selectors);
        let tagged = nodeclass_hash(&spec(serde_json::json!({"tags": {"team": "a"}})));
        assert_ne!(base, tagged);
        let user_data = nodeclass_hash(&spec(serde_json::json!({"userData": "#!/bin/bash"})));
        assert_ne!(base, user_data);
    }

    #[test]
    fn the_resolved_family_is_hashed_not_the_literal_field() {
        let implied = nodeclass_hash(&spec(serde_json::json!({})));
        let explicit = nodeclass_hash(&spec(serde_json::json!({"amiFamily": "AL2023"})));
        assert_eq!(implied, explicit);
        let custom = nodeclass_hash(&spec(serde_json::json!({"amiFamily": "Custom"})));
        assert_ne!(implied, custom);
    }

    #[test]
    fn lists_hash_as_sets_and_volume_sizes_as_quantities() {
        let mapping = |device: &str, size: &str| serde_json::json!({"deviceName": device, "ebs": {"volumeSize": size, "volumeType": "gp3"}});
        let a = nodeclass_hash(&spec(serde_json::json!({
            "blockDeviceMappings": [mapping("/dev/xvda", "20Gi"), mapping("/dev/xvdb", "100Gi")],
            "kubelet": {"clusterDNS": ["10.0.0.10", "10.0.0.11"]},
        })));
        let b = nodeclass_hash(&spec(serde_json::json!({
            "blockDeviceMappings": [mapping("/dev/xvdb", "102400Mi"), mapping("/dev/xvda", "20480Mi")],
            "kubelet": {"clusterDNS": ["10.0.0.11", "10.0.0.10"]},
        })));
        assert_eq!(a, b);
        let c = nodeclass_hash(&spec(serde_json::json!({
            "blockDeviceMappings": [mapping("/dev/xvda", "30Gi"), mapping("/dev/xvdb", "100Gi")],
            "kubelet": {"clusterDNS": ["10.0.0.10", "10.0.0.11"]},
        })));
        assert_ne!(a, c);
    }

    #[test]
    fn empty_values_hash_like_unset_ones() {
        let unset = nodeclass_hash(&spec(serde_json::json!({})));
        let empty = nodeclass_hash(&spec(serde_json::json!({"tags": {}, "kubelet": {}})));
        assert_eq!(unset, empty);
    }

    #[test]
    fn the_hash_is_stable_across_runs() {
        // A fixed spec hashes to a fixed value: NodeClaims stamped by one process must compare
        // equal in the next. Changing this value means bumping HASH_VERSION.
        assert_eq!(
            nodeclass_hash(&spec(serde_json::json!({}))),
            "7933747740249722436"
        );
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(HASH_VERSION, "v4");
    }
}
