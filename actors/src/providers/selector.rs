//! EC2 filters from `EC2NodeClass` selector tags, shared by the subnet, security-group and AMI
//! providers: a tag whose value is `*` matches any value (`tag-key`), any other value matches
//! exactly (`tag:<key>`).

use crate::ports::ec2::Filter;
use karpenter_core::apis::ec2nodeclass::SelectorTags;

/// The value that matches any value of a tag.
pub const ANY_VALUE: &str = "*";

/// One filter per tag, in key order (the tags are a sorted map).
#[must_use]
pub fn tag_filters(tags: &SelectorTags) -> Vec<Filter> {
    tags.0
        .iter()
        .map(|(key, value)| {
            if value == ANY_VALUE {
                Filter::tag_key(key)
            } else {
                Filter::tag(key, &[value])
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_star_matches_any_value_and_other_values_match_exactly() {
        let tags = SelectorTags(
            [
                ("karpenter.sh/discovery".to_owned(), "my-cluster".to_owned()),
                ("team".to_owned(), "*".to_owned()),
            ]
            .into(),
        );
        assert_eq!(
            tag_filters(&tags),
            vec![
                Filter::tag("karpenter.sh/discovery", &["my-cluster"]),
                Filter::tag_key("team"),
            ]
        );
    }
}
