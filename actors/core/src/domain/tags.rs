//! The tags of an instance and its launch template (Karpenter's `GetTags`): the class's
//! `spec.tags` plus the tags Karpenter owns (cluster ownership, EKS cluster name, NodePool,
//! EC2NodeClass). A class that sets one of the owned tags itself cannot launch: the launch path
//! refuses it and the class's validation reports it with the field path.

use std::collections::BTreeMap;

use crate::apis::ec2nodeclass::EC2NodeClassSpec;
use crate::apis::labels::{
    TAG_CLUSTER_PREFIX, TAG_EC2NODECLASS, TAG_EKS_CLUSTER_NAME, TAG_NODEPOOL,
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
}
