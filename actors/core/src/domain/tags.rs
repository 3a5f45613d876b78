//! The tags of an instance and its launch template (Karpenter's `GetTags`): the class's
//! `spec.tags` plus the tags Karpenter owns (cluster ownership, EKS cluster name, NodePool,
//! EC2NodeClass). A class that sets one of the owned tags itself cannot launch: the launch path
//! refuses it and the class's validation reports it with the field path.
//!
//! Once a node registers, its instance is tagged with the node's name, its NodeClaim and the EKS
//! cluster name (Karpenter AWS's `nodeclaim.tagging`): [`registered_instance_tags`], of which only
//! the [`missing`] ones are written.

use std::collections::BTreeMap;

use crate::apis::ec2nodeclass::EC2NodeClassSpec;
use crate::apis::labels::{
    TAG_CLUSTER_PREFIX, TAG_EC2NODECLASS, TAG_EKS_CLUSTER_NAME, TAG_NAME, TAG_NODECLAIM,
    TAG_NODEPOOL,
};
use crate::apis::validation::ec2nodeclass_violations;

/// Tags of an AWS resource, sorted so requests compare and hash deterministically.
pub type Tags = BTreeMap<String, String>;

/// The class's `spec.tags` set keys Karpenter owns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tags failed validation requirements: {}", .violations.join("; "))]
pub struct RestrictedTags {
    /// One `field: rule` per offending key (`spec.tags[karpenter.sh/nodeclaim]: ...`).
    pub violations: Vec<String>,
}

impl RestrictedTags {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        "restricted_tags"
    }
}

/// The tags of a launch of class `class_name` for `nodepool` (empty for the class's own dry
/// runs) in `cluster`.
pub fn launch_tags(
    class_name: &str,
    spec: &EC2NodeClassSpec,
    cluster: &str,
    nodepool: &str,
) -> Result<Tags, RestrictedTags> {
    let violations: Vec<String> = ec2nodeclass_violations(spec)
        .into_iter()
        .filter(|v| v.path.starts_with("spec.tags["))
        .map(|v| v.to_string())
        .collect();
    if !violations.is_empty() {
        return Err(RestrictedTags { violations });
    }
    let mut tags = spec.tags.clone();
    tags.insert(format!("{TAG_CLUSTER_PREFIX}{cluster}"), "owned".to_owned());
    tags.insert(TAG_NODEPOOL.to_owned(), nodepool.to_owned());
    tags.insert(TAG_EKS_CLUSTER_NAME.to_owned(), cluster.to_owned());
    tags.insert(TAG_EC2NODECLASS.to_owned(), class_name.to_owned());
    Ok(tags)
}

/// The tags an instance gets once its node registered: `Name` (the node's name, what the EC2
/// console shows), `karpenter.sh/nodeclaim` and `eks:eks-cluster-name`.
#[must_use]
pub fn registered_instance_tags(node_name: &str, nodeclaim: &str, cluster: &str) -> Tags {
    Tags::from([
        (TAG_NAME.to_owned(), node_name.to_owned()),
        (TAG_NODECLAIM.to_owned(), nodeclaim.to_owned()),
        (TAG_EKS_CLUSTER_NAME.to_owned(), cluster.to_owned()),
    ])
}

/// The tags of `wanted` whose keys `present` lacks: a key the instance already has keeps its
/// value (a `Name` a user set is not overwritten, as in Karpenter).
#[must_use]
pub fn missing(wanted: &Tags, present: &Tags) -> Tags {
    wanted
        .iter()
        .filter(|(key, _)| !present.contains_key(*key))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> EC2NodeClassSpec {
        serde_json::from_value(serde_json::json!({
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "r",
            "tags": {"team": "a"},
        }))
        .unwrap()
    }

    #[test]
    fn the_owned_tags_join_the_class_tags() {
        let tags = launch_tags("default", &spec(), "c1", "web").unwrap();
        assert_eq!(tags["team"], "a");
        assert_eq!(tags["kubernetes.io/cluster/c1"], "owned");
        assert_eq!(tags[TAG_EKS_CLUSTER_NAME], "c1");
        assert_eq!(tags[TAG_NODEPOOL], "web");
        assert_eq!(tags[TAG_EC2NODECLASS], "default");
    }

    #[test]
    fn a_class_setting_an_owned_tag_is_refused_with_the_field_path() {
        let mut spec = spec();
        spec.tags
            .insert("karpenter.sh/nodeclaim".into(), "x".into());
        spec.tags
            .insert("kubernetes.io/cluster/other".into(), "owned".into());
        let error = launch_tags("default", &spec, "c1", "").unwrap_err();
        assert_eq!(error.violations.len(), 2, "{error}");
        let message = error.to_string();
        assert!(
            message.starts_with("tags failed validation requirements: "),
            "{message}"
        );
        assert!(
            message.contains("spec.tags[karpenter.sh/nodeclaim]"),
            "{message}"
        );
        assert_eq!(error.category(), "restricted_tags");
    }

    #[test]
    fn a_registered_instance_gets_only_the_tags_it_lacks() {
        let wanted = registered_instance_tags("ip-10-0-0-1.ec2.internal", "default-abc", "c1");
        assert_eq!(
            wanted.keys().map(String::as_str).collect::<Vec<_>>(),
            ["Name", "eks:eks-cluster-name", "karpenter.sh/nodeclaim"]
        );
        assert_eq!(wanted["Name"], "ip-10-0-0-1.ec2.internal");
        let present = Tags::from([
            ("Name".to_owned(), "my-own-name".to_owned()),
            (TAG_EKS_CLUSTER_NAME.to_owned(), "c1".to_owned()),
        ]);
        assert_eq!(
            missing(&wanted, &present),
            Tags::from([(TAG_NODECLAIM.to_owned(), "default-abc".to_owned())])
        );
        assert!(missing(&wanted, &wanted).is_empty());
    }
}
