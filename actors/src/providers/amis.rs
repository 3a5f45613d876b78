//! The AMI provider (reference 1.3 `amiSelectorTerms`, 4.2 `amifamily` and `ssm`): the images
//! an `EC2NodeClass` selects, with the instance requirements each serves, which become
//! `status.amis`.
//!
//! Data flow for [`AmiProvider::list`]:
//!
//! - an **alias** (`al2023@latest`) names the public SSM parameters of its family for the
//!   cluster's Kubernetes version ([`karpenter_core::domain::amifamily::alias_parameters`]); each is read
//!   with `GetParameter` through [`SsmParameters`] (cached 24 h), missing ones are skipped (a
//!   variant not built for that version), and the image ids found become one `DescribeImages`
//!   query that knows which variant (standard, nvidia, neuron) each image is;
//! - other terms become queries by id (all ids in one), by name (owners default to `self` and
//!   `amazon`), by owner, by tags, or by a **custom SSM parameter** (cached 5 minutes) holding
//!   an image id;
//! - every query asks for available images, deprecated ones included, and its answer is cached
//!   for a minute; [`karpenter_core::domain::amifamily::select_amis`] then keeps the newest
//!   non-deprecated image per architecture and variant.
//!
//! A `latest` alias parameter whose image has become deprecated is evicted at once, so the next
//! reconcile reads the parameter again (Karpenter's SSM invalidation controller does this every
//! 30 minutes).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::selector::tag_filters;
use super::ttl_cache::TtlCache;
use crate::ports::aws_error::AwsError;
use crate::ports::ec2::{DescribeImagesRequest, Ec2Api, Filter, Image};
use crate::ports::ssm::SsmApi;
use karpenter_core::apis::ec2nodeclass::{Ami, AmiSelectorTerm};
use karpenter_core::domain::amifamily::{
    Alias, AliasError, AliasParameter, ImageCandidate, QueryImages, known_requirements, select_amis,
};

/// How long a public (EKS, Bottlerocket, Windows) SSM parameter is trusted (Karpenter: 24 h).
pub const SSM_PUBLIC_PARAMETER_TTL: Duration = Duration::from_hours(24);
/// How long a custom `ssmParameter` term's value is trusted (Karpenter: 5 minutes), since
/// users update their own parameters to roll AMIs.
pub const SSM_CUSTOM_PARAMETER_TTL: Duration = Duration::from_mins(5);
/// How long a `DescribeImages` answer is reused (Karpenter's AMI query cache TTL).
pub const IMAGE_QUERY_CACHE_TTL: Duration = Duration::from_mins(1);
/// Owners a `name` term searches when it names none: the account itself and Amazon, so a
/// public image from a stranger with a matching name is never picked up by accident.
pub const DEFAULT_NAME_OWNERS: [&str; 2] = ["self", "amazon"];
/// The prefix every image id has; a custom parameter holding anything else is ignored.
const IMAGE_ID_PREFIX: &str = "ami-";

/// Whose parameter it is, which decides how long its value is trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParameterKind {
    /// AWS's public alias parameters.
    Public,
    /// A parameter the user named in `ssmParameter`.
    Custom,
}

impl ParameterKind {
    fn ttl(self) -> Duration {
        match self {
            Self::Public => SSM_PUBLIC_PARAMETER_TTL,
            Self::Custom => SSM_CUSTOM_PARAMETER_TTL,
        }
    }
}

/// SSM parameter values, cached per name.
#[derive(Debug)]
pub struct SsmParameters {
    ssm: Arc<dyn SsmApi>,
    cache: TtlCache<String, String>,
}

impl SsmParameters {
    #[must_use]
    pub fn new(ssm: Arc<dyn SsmApi>) -> Self {
        Self {
            ssm,
            cache: TtlCache::new(SSM_PUBLIC_PARAMETER_TTL),
        }
    }

    /// The parameter's value; `None` when it does not exist.
    pub async fn get(&self, name: &str, kind: ParameterKind) -> Result<Option<String>, AwsError> {
        if let Some(value) = self.cache.get(&name.to_owned()) {
            return Ok(Some(value));
        }
        match self.ssm.get_parameter(name).await {
            Ok(parameter) => {
                tracing::info!(parameter = name, value = %parameter.value, "discovered ssm parameter");
                self.cache
                    .insert_for(name.to_owned(), parameter.value.clone(), kind.ttl());
                Ok(Some(parameter.value))
            }
            Err(error) if error.is_not_found() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Forgets a value, so the next read asks SSM.
    pub fn evict(&self, name: &str) {
        self.cache.remove(&name.to_owned());
    }
}

/// Why the AMIs of a class could not be listed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmiError {
    /// None of the alias's SSM parameters exist for this Kubernetes version.
    #[error(
        "failed to discover any AMIs for alias {alias}: none of its SSM parameters exist for Kubernetes {kubernetes_version}"
    )]
    AliasNotFound {
        alias: String,
        kubernetes_version: String,
    },
    #[error(transparent)]
    InvalidAlias(#[from] AliasError),
    #[error("reading ssm parameter {parameter}")]
    Ssm {
        parameter: String,
        #[source]
        source: AwsError,
    },
    #[error("describing images")]
    DescribeImages {
        #[source]
        source: AwsError,
    },
}

impl AmiError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::AliasNotFound { .. } => "ami_not_found",
            Self::InvalidAlias(error) => error.category(),
            Self::Ssm { source, .. } | Self::DescribeImages { source } => source.category(),
        }
    }

    /// Whether the selector itself resolves to nothing (a condition), rather than a call
    /// failing (a retry).
    #[must_use]
    pub fn is_selector_problem(&self) -> bool {
        matches!(self, Self::AliasNotFound { .. } | Self::InvalidAlias(_))
    }
}

/// One `DescribeImages` query and what its SSM parameters said its images serve.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageQuery {
    pub owners: Vec<String>,
    pub filters: Vec<Filter>,
    pub known_requirements:
        BTreeMap<String, Vec<Vec<karpenter_core::apis::ec2nodeclass::AmiRequirement>>>,
}

impl ImageQuery {
    /// The request: available images only, deprecated ones included (a pinned image keeps
    /// working, marked deprecated, after AWS deprecates it).
    #[must_use]
    pub fn request(&self) -> DescribeImagesRequest {
        let mut filters = self.filters.clone();
        filters.push(Filter::new("state", &["available"]));
        DescribeImagesRequest {
            image_ids: Vec::new(),
            owners: self.owners.clone(),
            filters,
            include_deprecated: true,
        }
    }

    fn cache_key(&self) -> QueryKey {
        let mut owners = self.owners.clone();
        owners.sort();
        let mut filters = self.filters.clone();
        filters.sort();
        (owners, filters)
    }
}

/// The AMIs of a class, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAmis {
    /// `status.amis`, newest first.
    pub amis: Vec<Ami>,
    /// The alias parameters that resolved, with the image each named.
    pub alias_images: Vec<(AliasParameter, String)>,
}

/// A `DescribeImages` query's cache key: owners and filters, sorted.
type QueryKey = (Vec<String>, Vec<Filter>);

/// AMIs by selector.
#[derive(Debug)]
pub struct AmiProvider {
    ec2: Arc<dyn Ec2Api>,
    ssm: SsmParameters,
    images: TtlCache<QueryKey, Arc<Vec<Image>>>,
}

impl AmiProvider {
    #[must_use]
    pub fn new(ec2: Arc<dyn Ec2Api>, ssm: Arc<dyn SsmApi>) -> Self {
        Self {
            ec2,
            ssm: SsmParameters::new(ssm),
            images: TtlCache::new(IMAGE_QUERY_CACHE_TTL),
        }
    }

    /// The SSM parameter cache (shared with nothing else; exposed for eviction in tests).
    #[must_use]
    pub fn ssm(&self) -> &SsmParameters {
        &self.ssm
    }

    /// `status.amis` for these terms and Kubernetes version (`1.33`), judged at `now`.
    pub async fn list(
        &self,
        terms: &[AmiSelectorTerm],
        kubernetes_version: &str,
        now: Timestamp,
    ) -> Result<ResolvedAmis, AmiError> {
        let (queries, alias_images) = self.queries(terms, kubernetes_version).await?;
        let mut answered = Vec::with_capacity(queries.len());
        for query in queries {
            let images = self.describe(&query).await?;
            answered.push(QueryImages {
                known_requirements: query.known_requirements,
                images: images.iter().map(candidate).collect(),
            });
        }
        let amis = select_amis(&answered, now);
        self.invalidate_deprecated(&alias_images, &answered, now);
        Ok(ResolvedAmis { amis, alias_images })
    }

    async fn describe(&self, query: &ImageQuery) -> Result<Arc<Vec<Image>>, AmiError> {
        let key = query.cache_key();
        if let Some(hit) = self.images.get(&key) {
            return Ok(hit);
        }
        let images = Arc::new(
            self.ec2
                .describe_images(&query.request())
                .await
                .map_err(|source| AmiError::DescribeImages { source })?,
        );
        self.images.insert(key, Arc::clone(&images));
        Ok(images)
    }

    /// The queries of the terms: one for an alias; otherwise one per name/owner/tag term and
    /// one for every id (ids from custom SSM parameters included).
    pub async fn queries(
        &self,
        terms: &[AmiSelectorTerm],
        kubernetes_version: &str,
    ) -> Result<(Vec<ImageQuery>, Vec<(AliasParameter, String)>), AmiError> {
        // The CRD allows an alias only as the one term.
        if let Some(alias) = terms.iter().find_map(|t| t.alias.as_deref()) {
            let parsed = Alias::parse(alias)?;
            let mut resolved: Vec<(AliasParameter, String)> = Vec::new();
            for parameter in parsed.parameters(kubernetes_version) {
                let value = self
                    .ssm
                    .get(&parameter.name, ParameterKind::Public)
                    .await
                    .map_err(|source| AmiError::Ssm {
                        parameter: parameter.name.clone(),
                        source,
                    })?;
                if let Some(image_id) = value {
                    resolved.push((parameter, image_id));
                }
            }
            if resolved.is_empty() {
                return Err(AmiError::AliasNotFound {
                    alias: alias.to_owned(),
                    kubernetes_version: kubernetes_version.to_owned(),
                });
            }
            let ids: BTreeSet<&str> = resolved.iter().map(|(_, id)| id.as_str()).collect();
            let ids: Vec<&str> = ids.into_iter().collect();
            let query = ImageQuery {
                owners: Vec::new(),
                filters: vec![Filter::new("image-id", &ids)],
                known_requirements: known_requirements(
                    resolved.iter().map(|(p, id)| (p, id.as_str())),
                ),
            };
            return Ok((vec![query], resolved));
        }
        let mut ids: BTreeSet<String> = BTreeSet::new();
        let mut queries = Vec::new();
        for term in terms {
            if let Some(id) = &term.id {
                ids.insert(id.clone());
            } else if let Some(parameter) = &term.ssm_parameter {
                let value = self
                    .ssm
                    .get(parameter, ParameterKind::Custom)
                    .await
                    .map_err(|source| AmiError::Ssm {
                        parameter: parameter.clone(),
                        source,
                    })?;
                match value {
                    Some(id) if id.starts_with(IMAGE_ID_PREFIX) => {
                        ids.insert(id);
                    }
                    Some(value) => {
                        tracing::error!(
                            ssmParameter = parameter,
                            value,
                            "parameter is not an AMI id; ignored"
                        );
                    }
                    None => tracing::error!(ssmParameter = parameter, "parameter not found"),
                }
            } else {
                queries.push(term_query(term));
            }
        }
        if !ids.is_empty() {
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            queries.push(ImageQuery {
                filters: vec![Filter::new("image-id", &ids)],
                ..ImageQuery::default()
            });
        }
        Ok((queries, Vec::new()))
    }

    /// Evicts `latest` alias parameters whose image is deprecated, so AWS's next release is
    /// picked up on the next reconcile instead of after the 24-hour TTL.
    fn invalidate_deprecated(
        &self,
        alias_images: &[(AliasParameter, String)],
        answered: &[QueryImages],
        now: Timestamp,
    ) {
        for (parameter, image_id) in alias_images.iter().filter(|(p, _)| p.mutable) {
            let deprecated = answered
                .iter()
                .flat_map(|q| &q.images)
                .filter(|image| &image.id == image_id)
                .any(|image| is_deprecated(image, now));
            if deprecated {
                tracing::debug!(
                    parameter = %parameter.name,
                    "image-id" = image_id,
                    "evicting ssm parameter whose AMI is deprecated"
                );
                self.ssm.evict(&parameter.name);
            }
        }
    }
}

fn is_deprecated(image: &ImageCandidate, now: Timestamp) -> bool {
    image
        .deprecation_time
        .as_deref()
        .and_then(|t| t.parse::<Timestamp>().ok())
        .is_some_and(|at| at <= now)
}

/// A name, owner or tags term as a query.
fn term_query(term: &AmiSelectorTerm) -> ImageQuery {
    let mut query = ImageQuery::default();
    if let Some(owner) = &term.owner {
        query.owners = vec![owner.clone()];
    }
    if let Some(name) = &term.name {
        if term.owner.is_none() {
            query.owners = DEFAULT_NAME_OWNERS.iter().map(|&o| o.to_owned()).collect();
        }
        query.filters.push(Filter::new("name", &[name]));
    }
    if let Some(tags) = &term.tags {
        query.filters.extend(tag_filters(tags));
    }
    query
}

fn candidate(image: &Image) -> ImageCandidate {
    ImageCandidate {
        id: image.id.clone(),
        name: image.name.clone(),
        architecture: image.architecture.clone(),
        creation_date: Some(image.creation_date.clone()).filter(|d| !d.is_empty()),
        deprecation_time: image.deprecation_time.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::apis::ec2nodeclass::SelectorTags;

    #[test]
    fn a_name_term_searches_self_and_amazon_unless_it_names_an_owner() {
        let by_name = term_query(&AmiSelectorTerm {
            name: Some("my-ami-*".into()),
            ..AmiSelectorTerm::default()
        });
        assert_eq!(by_name.owners, ["self", "amazon"]);
        assert_eq!(by_name.filters, vec![Filter::new("name", &["my-ami-*"])]);
        let with_owner = term_query(&AmiSelectorTerm {
            name: Some("my-ami-*".into()),
            owner: Some("123456789012".into()),
            tags: Some(SelectorTags([("team".to_owned(), "*".to_owned())].into())),
            ..AmiSelectorTerm::default()
        });
        assert_eq!(with_owner.owners, ["123456789012"]);
        assert_eq!(
            with_owner.filters,
            vec![Filter::new("name", &["my-ami-*"]), Filter::tag_key("team")]
        );
    }

    #[test]
    fn queries_ask_for_available_images_including_deprecated_ones() {
        let request = ImageQuery {
            filters: vec![Filter::new("image-id", &["ami-1"])],
            ..ImageQuery::default()
        }
        .request();
        assert!(request.include_deprecated);
        assert!(
            request
                .filters
                .contains(&Filter::new("state", &["available"]))
        );
    }
}
