//! The security-group provider (reference 4.2 `securitygroup`):
//! `spec.securityGroupSelectorTerms` resolved with `DescribeSecurityGroups`, cached for a
//! minute per selector.
//!
//! Data flow: the `NodeClassActor` calls [`SecurityGroupProvider::list`]; each tag term is one
//! call, all id terms share one `group-id` call and all name terms one `group-name` call; the
//! answers are merged by group id and sorted by id, the order `status.securityGroups` keeps.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::selector::tag_filters;
use super::ttl_cache::TtlCache;
use crate::ports::aws_error::AwsError;
use crate::ports::ec2::{Ec2Api, Filter, SecurityGroup};
use karpenter_core::apis::ec2nodeclass::{self, SecurityGroupSelectorTerm};

/// How long a selector's answer is reused (Karpenter's security-group cache TTL).
pub const SECURITY_GROUP_CACHE_TTL: Duration = Duration::from_mins(1);

/// The `DescribeSecurityGroups` filter sets of the terms, sorted (the cache key).
#[must_use]
pub fn filter_sets(terms: &[SecurityGroupSelectorTerm]) -> Vec<Vec<Filter>> {
    let mut ids: Vec<&str> = Vec::new();
    let mut names: Vec<&str> = Vec::new();
    let mut sets: Vec<Vec<Filter>> = Vec::new();
    for term in terms {
        if let Some(id) = &term.id {
            ids.push(id);
        } else if let Some(name) = &term.name {
            names.push(name);
        } else if let Some(tags) = &term.tags {
            sets.push(tag_filters(tags));
        }
    }
    for (filter, values) in [("group-id", &mut ids), ("group-name", &mut names)] {
        if !values.is_empty() {
            values.sort_unstable();
            values.dedup();
            sets.push(vec![Filter::new(filter, values)]);
        }
    }
    for set in &mut sets {
        set.sort();
    }
    sets.sort();
    sets.dedup();
    sets
}

/// Security groups by selector.
#[derive(Debug)]
pub struct SecurityGroupProvider {
    ec2: Arc<dyn Ec2Api>,
    cache: TtlCache<Vec<Vec<Filter>>, Arc<Vec<SecurityGroup>>>,
}

impl SecurityGroupProvider {
    #[must_use]
    pub fn new(ec2: Arc<dyn Ec2Api>) -> Self {
        Self {
            ec2,
            cache: TtlCache::new(SECURITY_GROUP_CACHE_TTL),
        }
    }

    /// The groups the terms select, each once, sorted by id.
    pub async fn list(
        &self,
        terms: &[SecurityGroupSelectorTerm],
    ) -> Result<Arc<Vec<SecurityGroup>>, AwsError> {
        let sets = filter_sets(terms);
        if sets.is_empty() {
            return Ok(Arc::default());
        }
        if let Some(hit) = self.cache.get(&sets) {
            return Ok(hit);
        }
        let mut found: BTreeMap<String, SecurityGroup> = BTreeMap::new();
        for filters in &sets {
            for group in self.ec2.describe_security_groups(filters).await? {
                found.insert(group.id.clone(), group);
            }
        }
        let groups = Arc::new(found.into_values().collect::<Vec<_>>());
        self.cache.insert(sets, Arc::clone(&groups));
        Ok(groups)
    }
}

/// `status.securityGroups` entries of resolved groups, in the same order.
#[must_use]
pub fn status_security_groups(groups: &[SecurityGroup]) -> Vec<ec2nodeclass::SecurityGroup> {
    groups
        .iter()
        .map(|g| ec2nodeclass::SecurityGroup {
            id: g.id.clone(),
            name: Some(g.name.clone()).filter(|n| !n.is_empty()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::apis::ec2nodeclass::SelectorTags;

    #[test]
    fn ids_names_and_tags_become_separate_filter_sets() {
        let terms = vec![
            SecurityGroupSelectorTerm {
                name: Some("nodes".into()),
                ..SecurityGroupSelectorTerm::default()
            },
            SecurityGroupSelectorTerm {
                id: Some("sg-2".into()),
                ..SecurityGroupSelectorTerm::default()
            },
            SecurityGroupSelectorTerm {
                id: Some("sg-1".into()),
                ..SecurityGroupSelectorTerm::default()
            },
            SecurityGroupSelectorTerm {
                tags: Some(SelectorTags(
                    [("karpenter.sh/discovery".to_owned(), "c".to_owned())].into(),
                )),
                ..SecurityGroupSelectorTerm::default()
            },
        ];
        assert_eq!(
            filter_sets(&terms),
            vec![
                vec![Filter::new("group-id", &["sg-1", "sg-2"])],
                vec![Filter::new("group-name", &["nodes"])],
                vec![Filter::tag("karpenter.sh/discovery", &["c"])],
            ]
        );
    }
}
