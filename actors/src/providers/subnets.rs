//! The subnet provider (reference 4.2 `subnet`): `spec.subnetSelectorTerms` resolved with
//! `DescribeSubnets`, cached for a minute per selector.
//!
//! Data flow: the `NodeClassActor` calls [`SubnetProvider::list`] with the class's terms; each
//! tag term is one `DescribeSubnets` call (terms are ORed), every id term goes into one
//! `subnet-id` call, the answers are merged by subnet id and sorted with the most free
//! addresses first, the order `status.subnets` keeps. Launches pick one subnet per zone with
//! [`super::launch_subnets::LaunchSubnets`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::selector::tag_filters;
use super::ttl_cache::TtlCache;
use crate::ports::aws_error::AwsError;
use crate::ports::ec2::{Ec2Api, Filter, Subnet};
use karpenter_core::apis::ec2nodeclass::{self, SubnetSelectorTerm};

/// How long a selector's answer is reused (Karpenter's subnet cache TTL).
pub const SUBNET_CACHE_TTL: Duration = Duration::from_mins(1);

/// The `DescribeSubnets` filter sets of the terms: one per tag term, then one `subnet-id` set
/// holding every id term. Sorted, so equal selectors give equal sets (the cache key).
#[must_use]
pub fn filter_sets(terms: &[SubnetSelectorTerm]) -> Vec<Vec<Filter>> {
    let mut ids: Vec<&str> = Vec::new();
    let mut sets: Vec<Vec<Filter>> = Vec::new();
    for term in terms {
        if let Some(id) = &term.id {
            ids.push(id);
        } else if let Some(tags) = &term.tags {
            sets.push(tag_filters(tags));
        }
    }
    if !ids.is_empty() {
        ids.sort_unstable();
        ids.dedup();
        sets.push(vec![Filter::new("subnet-id", &ids)]);
    }
    for set in &mut sets {
        set.sort();
    }
    sets.sort();
    sets.dedup();
    sets
}

/// Subnets by selector.
#[derive(Debug)]
pub struct SubnetProvider {
    ec2: Arc<dyn Ec2Api>,
    cache: TtlCache<Vec<Vec<Filter>>, Arc<Vec<Subnet>>>,
}

impl SubnetProvider {
    #[must_use]
    pub fn new(ec2: Arc<dyn Ec2Api>) -> Self {
        Self {
            ec2,
            cache: TtlCache::new(SUBNET_CACHE_TTL),
        }
    }

    /// The subnets the terms select, each once, most free addresses first (then by id).
    pub async fn list(&self, terms: &[SubnetSelectorTerm]) -> Result<Arc<Vec<Subnet>>, AwsError> {
        let sets = filter_sets(terms);
        if sets.is_empty() {
            return Ok(Arc::default());
        }
        if let Some(hit) = self.cache.get(&sets) {
            return Ok(hit);
        }
        let mut found: BTreeMap<String, Subnet> = BTreeMap::new();
        for filters in &sets {
            for subnet in self.ec2.describe_subnets(filters).await? {
                found.insert(subnet.id.clone(), subnet);
            }
        }
        let mut subnets: Vec<Subnet> = found.into_values().collect();
        subnets.sort_by(|a, b| {
            b.available_ip_address_count
                .cmp(&a.available_ip_address_count)
                .then_with(|| a.id.cmp(&b.id))
        });
        let subnets = Arc::new(subnets);
        self.cache.insert(sets, Arc::clone(&subnets));
        Ok(subnets)
    }
}

/// `status.subnets` entries of resolved subnets, in the same order.
#[must_use]
pub fn status_subnets(subnets: &[Subnet]) -> Vec<ec2nodeclass::Subnet> {
    subnets
        .iter()
        .map(|s| ec2nodeclass::Subnet {
            id: s.id.clone(),
            zone: s.zone.clone(),
            zone_id: Some(s.zone_id.clone()).filter(|z| !z.is_empty()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::apis::ec2nodeclass::SelectorTags;

    fn tags(pairs: &[(&str, &str)]) -> SelectorTags {
        SelectorTags(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn id_terms_share_one_filter_set_and_tag_terms_get_their_own() {
        let terms = vec![
            SubnetSelectorTerm {
                id: Some("subnet-b".into()),
                tags: None,
            },
            SubnetSelectorTerm {
                tags: Some(tags(&[("karpenter.sh/discovery", "c"), ("tier", "*")])),
                id: None,
            },
            SubnetSelectorTerm {
                id: Some("subnet-a".into()),
                tags: None,
            },
        ];
        assert_eq!(
            filter_sets(&terms),
            vec![
                vec![Filter::new("subnet-id", &["subnet-a", "subnet-b"])],
                // Sorted by filter name: `tag-key` before `tag:...`.
                vec![
                    Filter::tag_key("tier"),
                    Filter::tag("karpenter.sh/discovery", &["c"]),
                ],
            ]
        );
    }
}
