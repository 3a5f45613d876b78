//! The CEL rules of `EC2NodeClass`es (reference section 1.3), one check per rule, each pointing
//! at the term or field that breaks it.

use std::collections::BTreeMap;

use super::path::{FieldPath, Violations};
use crate::apis::ec2nodeclass::{
    ALIAS_FAMILIES, AmiFamily, AmiSelectorTerm, BlockDeviceMapping, EC2NodeClassSpec,
    EVICTION_SIGNALS, KubeletConfiguration, RESERVED_RESOURCES, RESTRICTED_TAGS, SelectorTags,
    quoted_list,
};
use crate::apis::labels::TAG_CLUSTER_PREFIX;

/// Every rule violation of an `EC2NodeClass` spec.
pub fn check(spec: &EC2NodeClassSpec, out: &mut Violations) {
    let path = FieldPath::root().child("spec");
    subnet_terms(spec, &path.child("subnetSelectorTerms"), out);
    security_group_terms(spec, &path.child("securityGroupSelectorTerms"), out);
    capacity_reservation_terms(spec, &path.child("capacityReservationSelectorTerms"), out);
    ami_terms(
        &spec.ami_selector_terms,
        &path.child("amiSelectorTerms"),
        out,
    );
    ami_family(spec, &path, out);
    role_and_instance_profile(spec, &path, out);
    tags(&spec.tags, &path.child("tags"), out);
    if let Some(kubelet) = &spec.kubelet {
        self::kubelet(kubelet, &path.child("kubelet"), out);
    }
    block_device_mappings(
        &spec.block_device_mappings,
        &path.child("blockDeviceMappings"),
        out,
    );
}

fn selector_tags(tags: Option<&SelectorTags>, path: &FieldPath, out: &mut Violations) {
    for (key, value) in tags.map(|t| &t.0).into_iter().flatten() {
        if key.is_empty() || value.is_empty() {
            out.add(&path.key(key), "empty tag keys or values aren't supported");
        }
    }
}

/// Karpenter's mutual-exclusion rules on selector terms read `!self.all(x, ...)`: a list is
/// refused only when every term breaks the rule (so one clean term admits the list). Ours read
/// the same, so every class Karpenter admits is admitted here too.
fn every_term<T>(terms: &[T], breaks: impl Fn(&T) -> bool) -> bool {
    !terms.is_empty() && terms.iter().all(breaks)
}

fn subnet_terms(spec: &EC2NodeClassSpec, path: &FieldPath, out: &mut Violations) {
    let terms = &spec.subnet_selector_terms;
    if terms.is_empty() {
        out.add(path, "subnetSelectorTerms cannot be empty");
    }
    if every_term(terms, |t| t.id.is_some() && t.tags.is_some()) {
        out.add(
            path,
            "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
        );
    }
    for (index, term) in terms.iter().enumerate() {
        let item = path.index(index);
        if term.tags.is_none() && term.id.is_none() {
            out.add(&item, "expected at least one, got none, ['tags', 'id']");
        }
        selector_tags(term.tags.as_ref(), &item.child("tags"), out);
    }
}

fn security_group_terms(spec: &EC2NodeClassSpec, path: &FieldPath, out: &mut Violations) {
    let terms = &spec.security_group_selector_terms;
    if terms.is_empty() {
        out.add(path, "securityGroupSelectorTerms cannot be empty");
    }
    if every_term(terms, |t| {
        t.id.is_some() && (t.tags.is_some() || t.name.is_some())
    }) {
        out.add(
            path,
            "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
        );
    }
    if every_term(terms, |t| {
        t.name.is_some() && (t.tags.is_some() || t.id.is_some())
    }) {
        out.add(
            path,
            "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
        );
    }
    for (index, term) in spec.security_group_selector_terms.iter().enumerate() {
        let item = path.index(index);
        let (tags, id, name) = (term.tags.is_some(), term.id.is_some(), term.name.is_some());
        if !(tags || id || name) {
            out.add(
                &item,
                "expected at least one, got none, ['tags', 'id', 'name']",
            );
        }
        selector_tags(term.tags.as_ref(), &item.child("tags"), out);
    }
}

fn capacity_reservation_terms(spec: &EC2NodeClassSpec, path: &FieldPath, out: &mut Violations) {
    let terms = &spec.capacity_reservation_selector_terms;
    if every_term(terms, |t| {
        t.id.is_some() && (t.tags.is_some() || t.owner_id.is_some())
    }) {
        out.add(
            path,
            "'id' is mutually exclusive, cannot be set along with tags in a capacity reservation selector term",
        );
    }
    for (index, term) in terms.iter().enumerate() {
        let item = path.index(index);
        if term.tags.is_none() && term.id.is_none() {
            out.add(&item, "expected at least one, got none, ['tags', 'id']");
        }
        selector_tags(term.tags.as_ref(), &item.child("tags"), out);
    }
}

fn ami_terms(terms: &[AmiSelectorTerm], path: &FieldPath, out: &mut Violations) {
    for (index, term) in terms.iter().enumerate() {
        let item = path.index(index);
        let others = term.tags.is_some() || term.name.is_some() || term.owner.is_some();
        if term.tags.is_none()
            && term.id.is_none()
            && term.name.is_none()
            && term.alias.is_none()
            && term.ssm_parameter.is_none()
        {
            out.add(
                &item,
                "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
            );
        }
        if term.id.is_some() && (term.alias.is_some() || others) {
            out.add(
                &item.child("id"),
                "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            );
        }
        if let Some(alias) = &term.alias {
            if term.id.is_some() || others {
                out.add(
                    &item.child("alias"),
                    "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
                );
            }
            if terms.len() != 1 {
                out.add(
                    &item.child("alias"),
                    "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
                );
            }
            alias_format(alias, &item.child("alias"), out);
        }
        selector_tags(term.tags.as_ref(), &item.child("tags"), out);
    }
}

fn alias_format(alias: &str, path: &FieldPath, out: &mut Violations) {
    const IMPROPER: &str =
        "'alias' is improperly formatted, must match the format 'family@version'";
    let Some((family, version)) = alias.split_once('@') else {
        out.add(path, IMPROPER);
        return;
    };
    if family.is_empty() || !family.bytes().all(|b| b.is_ascii_alphanumeric()) || version.is_empty()
    {
        out.add(path, IMPROPER);
        return;
    }
    if !ALIAS_FAMILIES.contains(&family) {
        out.add(
            path,
            "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022'",
        );
    } else if family.starts_with("windows") && version != "latest" {
        out.add(path, "windows families may only specify version 'latest'");
    }
}

fn ami_family(spec: &EC2NodeClassSpec, path: &FieldPath, out: &mut Violations) {
    let alias_family = spec
        .ami_selector_terms
        .iter()
        .find_map(|term| term.alias.as_deref())
        .map(AmiFamily::from_alias);
    match (alias_family, spec.ami_family) {
        (None, None) => out.add(
            &path.child("amiFamily"),
            "must specify amiFamily if amiSelectorTerms does not contain an alias",
        ),
        (Some(Some(implied)), Some(given)) if given != implied && given != AmiFamily::Custom => {
            out.add(&path.child("amiFamily"), implied.alias_family_message());
        }
        _ => {}
    }
}

fn role_and_instance_profile(spec: &EC2NodeClassSpec, path: &FieldPath, out: &mut Violations) {
    match (&spec.role, &spec.instance_profile) {
        (Some(_), Some(_)) | (None, None) => {
            out.add(
                path,
                "must specify exactly one of ['role', 'instanceProfile']",
            );
        }
        _ => {}
    }
    if spec.role.as_deref() == Some("") {
        out.add(&path.child("role"), "role cannot be empty");
    }
    if spec.instance_profile.as_deref() == Some("") {
        out.add(
            &path.child("instanceProfile"),
            "instanceProfile cannot be empty",
        );
    }
}

fn tags(tags: &BTreeMap<String, String>, path: &FieldPath, out: &mut Violations) {
    for key in tags.keys() {
        if key.is_empty() {
            out.add(&path.key(key), "empty tag keys aren't supported");
        } else if key.starts_with(TAG_CLUSTER_PREFIX.trim_end_matches('/')) {
            out.add(
                &path.key(key),
                "tag contains a restricted tag matching kubernetes.io/cluster/",
            );
        } else if RESTRICTED_TAGS.contains(&key.as_str()) {
            out.add(
                &path.key(key),
                format!("tag contains a restricted tag matching {key}"),
            );
        }
    }
}

fn kubelet(kubelet: &KubeletConfiguration, path: &FieldPath, out: &mut Violations) {
    if let (Some(high), Some(low)) = (
        kubelet.image_gc_high_threshold_percent,
        kubelet.image_gc_low_threshold_percent,
    ) && high <= low
    {
        out.add(
            &path.child("imageGCHighThresholdPercent"),
            format!("imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent ({high} <= {low})"),
        );
    }
    let empty = BTreeMap::new();
    let soft = kubelet.eviction_soft.as_ref();
    let grace = kubelet.eviction_soft_grace_period.as_ref();
    for key in soft.unwrap_or(&empty).keys() {
        if !grace.is_some_and(|g| g.contains_key(key)) {
            out.add(
                &path.child("evictionSoft").key(key),
                "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
            );
        }
    }
    for (key, value) in grace.unwrap_or(&empty) {
        if !soft.is_some_and(|s| s.contains_key(key)) {
            out.add(
                &path.child("evictionSoftGracePeriod").key(key),
                "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
            );
        }
        if let Err(error) = karpenter_config::parse_go_duration(value) {
            out.add(
                &path.child("evictionSoftGracePeriod").key(key),
                error.to_string(),
            );
        }
    }
    for (field, map) in [
        ("evictionHard", &kubelet.eviction_hard),
        ("evictionSoft", &kubelet.eviction_soft),
        (
            "evictionSoftGracePeriod",
            &kubelet.eviction_soft_grace_period,
        ),
    ] {
        for key in map.as_ref().unwrap_or(&empty).keys() {
            if !EVICTION_SIGNALS.contains(&key.as_str()) {
                out.add(
                    &path.child(field).key(key),
                    format!(
                        "valid keys for {field} are [{}]",
                        quoted_list(EVICTION_SIGNALS)
                    ),
                );
            }
        }
    }
    for (field, map) in [
        ("systemReserved", &kubelet.system_reserved),
        ("kubeReserved", &kubelet.kube_reserved),
    ] {
        for (key, value) in map.as_ref().unwrap_or(&empty) {
            if !RESERVED_RESOURCES.contains(&key.as_str()) {
                out.add(
                    &path.child(field).key(key),
                    format!(
                        "valid keys for {field} are [{}]",
                        quoted_list(RESERVED_RESOURCES)
                    ),
                );
            }
            if value.starts_with('-') {
                out.add(
                    &path.child(field).key(key),
                    format!("{field} value cannot be a negative resource quantity"),
                );
            }
        }
    }
}

fn block_device_mappings(mappings: &[BlockDeviceMapping], path: &FieldPath, out: &mut Violations) {
    let roots = mappings
        .iter()
        .filter(|m| m.root_volume == Some(true))
        .count();
    if roots > 1 {
        out.add(
            path,
            format!("must have only one blockDeviceMappings with rootVolume, got {roots}"),
        );
    }
    for (index, mapping) in mappings.iter().enumerate() {
        let Some(ebs) = &mapping.ebs else { continue };
        let ebs_path = path.index(index).child("ebs");
        if ebs.snapshot_id.is_none() && ebs.volume_size.is_none() {
            out.add(&ebs_path, "snapshotID or volumeSize must be defined");
        }
        if ebs.volume_initialization_rate.is_some()
            && ebs.snapshot_id.as_deref().is_none_or(str::is_empty)
        {
            out.add(
                &ebs_path.child("volumeInitializationRate"),
                "snapshotID must be set when volumeInitializationRate is set",
            );
        }
    }
}
