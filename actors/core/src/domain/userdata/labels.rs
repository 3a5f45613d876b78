//! The node labels and taints a kubelet registers with (reference 4.2 `launchtemplate`, 5.1).
//!
//! The launch-template work builds the label set with [`launch_labels`] (NodeClaim labels, then
//! single-valued requirements, then the capacity type); rendering then drops the domains the
//! kubelet may not set, adds `karpenter.sh/do-not-sync-taints=true` for every family but
//! `Custom`, and makes sure the `karpenter.sh/unregistered:NoExecute` taint is registered.

use std::collections::{BTreeMap, BTreeSet};

use crate::apis::ec2nodeclass::AmiFamily;
use crate::apis::labels::{self, CAPACITY_TYPE, DO_NOT_SYNC_TAINTS, UNREGISTERED_TAINT};
use crate::apis::requirements::{Operator, Requirement};
use crate::apis::taints::{Taint, TaintEffect};

/// Label domains the `NodeRestriction` admission plugin forbids a kubelet to set
/// (`node-restriction.kubernetes.io`) or that kOps manages (`kops.k8s.io`): Karpenter never
/// passes them to the kubelet.
pub const KUBELET_FORBIDDEN_LABEL_DOMAINS: &[&str] =
    &["node-restriction.kubernetes.io", "kops.k8s.io"];

/// Domains whose labels Karpenter or Kubernetes set themselves (core `RestrictedLabelDomains`
/// plus the AWS provider's): a requirement on such a key is not turned into a label.
const RESTRICTED_LABEL_DOMAINS: &[&str] = &[
    "kubernetes.io",
    "k8s.io",
    "karpenter.sh",
    "karpenter.k8s.aws",
];
/// Sub-domains of restricted domains that users may label with (core `LabelDomainExceptions`).
const LABEL_DOMAIN_EXCEPTIONS: &[&str] = &[
    "kops.k8s.io",
    "node.kubernetes.io",
    "node-restriction.kubernetes.io",
];

/// The labels for a launch: the NodeClaim's labels, overridden by the labels its single-valued
/// requirements imply (v1.5 #8107), overridden by the capacity type being launched.
///
/// A key whose `In` requirements intersect to exactly one value becomes a label; well-known and
/// restricted-domain keys do not. Karpenter also turns `Exists`/`NotIn` requirements into
/// random values here, which re-randomizes every launch template hash; the NodeClaim's labels
/// already carry the value chosen when it was created, so those are left out.
#[must_use]
pub fn launch_labels(
    nodeclaim_labels: &BTreeMap<String, String>,
    requirements: &[Requirement],
    capacity_type: &str,
) -> BTreeMap<String, String> {
    let mut labels = nodeclaim_labels.clone();
    let mut allowed: BTreeMap<&str, Option<BTreeSet<&str>>> = BTreeMap::new();
    for requirement in requirements {
        let entry = allowed.entry(requirement.key.as_str()).or_insert(None);
        if requirement.operator != Operator::In {
            continue;
        }
        let values: BTreeSet<&str> = requirement.values.iter().map(String::as_str).collect();
        *entry = Some(match entry.take() {
            Some(previous) => previous.intersection(&values).copied().collect(),
            None => values,
        });
    }
    for (key, values) in allowed {
        let single = values
            .filter(|v| v.len() == 1)
            .and_then(|v| v.first().copied());
        if let Some(value) = single
            && !is_restricted_node_label(key)
        {
            labels.insert(key.to_owned(), value.to_owned());
        }
    }
    labels.insert(CAPACITY_TYPE.to_owned(), capacity_type.to_owned());
    labels
}

/// Whether Karpenter or Kubernetes owns this label key on nodes (core `IsRestrictedNodeLabel`):
/// well-known labels and keys in a restricted domain that is not an exception.
#[must_use]
pub fn is_restricted_node_label(key: &str) -> bool {
    if labels::is_well_known(key) {
        return true;
    }
    let domain = labels::domain(key).unwrap_or("");
    if LABEL_DOMAIN_EXCEPTIONS.iter().any(|d| domain.ends_with(d)) {
        return false;
    }
    RESTRICTED_LABEL_DOMAINS.iter().any(|d| domain.ends_with(d))
}

/// The labels the kubelet registers with: `labels` without kubelet-forbidden domains, plus
/// `karpenter.sh/do-not-sync-taints=true` for every family but `Custom` (v1.5 #8029: the
/// kubelet registers the taints, so the NodeClaim registration must not re-add them).
pub(crate) fn node_labels(
    family: AmiFamily,
    labels: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut node_labels: BTreeMap<String, String> = labels
        .iter()
        .filter(|(key, _)| {
            let domain = labels::domain(key).unwrap_or("");
            !KUBELET_FORBIDDEN_LABEL_DOMAINS
                .iter()
                .any(|d| domain.ends_with(d))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if family != AmiFamily::Custom {
        node_labels.insert(DO_NOT_SYNC_TAINTS.to_owned(), "true".to_owned());
    }
    node_labels
}

/// The taints in order, with `karpenter.sh/unregistered:NoExecute` appended unless present.
pub(crate) fn registered_taints(taints: &[Taint]) -> Vec<Taint> {
    let mut registered = taints.to_vec();
    let has_unregistered = taints
        .iter()
        .any(|t| t.key == UNREGISTERED_TAINT && t.effect == TaintEffect::NoExecute);
    if !has_unregistered {
        registered.push(Taint::new(UNREGISTERED_TAINT, None, TaintEffect::NoExecute));
    }
    registered
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::labels::{ARCH, INSTANCE_TYPE, NODEPOOL};

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn single_valued_requirements_become_labels_and_capacity_type_wins() {
        let requirements = vec![
            Requirement::new("team", Operator::In, &["a"]),
            Requirement::new("tier", Operator::In, &["x", "y"]),
            Requirement::new("tier", Operator::In, &["y", "z"]),
            Requirement::new("multi", Operator::In, &["1", "2"]),
            Requirement::new("exists", Operator::Exists, &[]),
            Requirement::new(ARCH, Operator::In, &["arm64"]),
            Requirement::new(INSTANCE_TYPE, Operator::In, &["m5.large"]),
            Requirement::new("example.kubernetes.io/x", Operator::In, &["v"]),
            Requirement::new("node.kubernetes.io/role", Operator::In, &["web"]),
            Requirement::new(CAPACITY_TYPE, Operator::In, &["on-demand"]),
        ];
        let nodeclaim = map(&[(NODEPOOL, "default"), ("team", "old")]);
        let labels = launch_labels(&nodeclaim, &requirements, "spot");
        assert_eq!(
            labels,
            map(&[
                (NODEPOOL, "default"),
                (CAPACITY_TYPE, "spot"),
                ("node.kubernetes.io/role", "web"),
                ("team", "a"),
                ("tier", "y"),
            ])
        );
    }

    #[test]
    fn kubelet_forbidden_domains_are_dropped_and_do_not_sync_is_injected_except_for_custom() {
        let labels = map(&[
            ("node-restriction.kubernetes.io/team", "a"),
            ("sub.kops.k8s.io/group", "b"),
            ("team", "c"),
        ]);
        assert_eq!(
            node_labels(AmiFamily::AL2, &labels),
            map(&[(DO_NOT_SYNC_TAINTS, "true"), ("team", "c")])
        );
        assert_eq!(
            node_labels(AmiFamily::Custom, &labels),
            map(&[("team", "c")])
        );
    }

    #[test]
    fn the_unregistered_taint_is_added_once() {
        let taints = vec![Taint::new("a", Some("b"), TaintEffect::NoSchedule)];
        let registered = registered_taints(&taints);
        assert_eq!(registered.len(), 2);
        assert_eq!(registered[1].key, UNREGISTERED_TAINT);
        assert_eq!(registered_taints(&registered), registered);
    }
}
