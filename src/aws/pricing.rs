//! [`PricingApi`] over aws-sdk-pricing, and the Pricing endpoint region Karpenter uses.

use async_trait::async_trait;
use aws_sdk_pricing as pricing;
use aws_sdk_pricing::types::{Filter, FilterType};
use karpenter_actors::ports::aws_error::{AwsError, AwsService};
use karpenter_actors::ports::pricing::{PricingApi, ProductFilter};
use karpenter_actors::retry::RetryPolicy;

#[derive(Debug, Clone)]
pub struct PricingAdapter {
    client: pricing::Client,
    retry: RetryPolicy,
}

impl PricingAdapter {
    #[must_use]
    pub fn new(client: pricing::Client, retry: RetryPolicy) -> Self {
        PricingAdapter { client, retry }
    }
}

/// The Pricing API region serving a cluster region (reference 4.2).
#[must_use]
pub fn pricing_endpoint_region(region: &str) -> String {
    if region.starts_with("ap-") {
        "ap-south-1"
    } else if region.starts_with("cn-") {
        "cn-northwest-1"
    } else if region.starts_with("eu-") {
        "eu-central-1"
    } else {
        "us-east-1"
    }
    .to_owned()
}

#[async_trait]
impl PricingApi for PricingAdapter {
    async fn get_products(
        &self,
        service_code: &str,
        filters: &[ProductFilter],
    ) -> Result<Vec<String>, AwsError> {
        let filters = filters
            .iter()
            .map(|f| {
                Filter::builder()
                    .r#type(FilterType::TermMatch)
                    .field(&f.field)
                    .value(&f.value)
                    .build()
                    .map_err(|e| {
                        AwsError::new(
                            AwsService::Pricing,
                            "GetProducts",
                            Some("InvalidParameterException"),
                            e.to_string(),
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        super::call(
            &self.retry,
            AwsService::Pricing,
            "GetProducts",
            &self.client,
            |c| {
                c.get_products()
                    .service_code(service_code)
                    .set_filters(Some(filters.clone()))
                    .into_paginator()
                    .items()
                    .send()
                    .try_collect()
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pricing_endpoints_follow_the_cluster_region() {
        assert_eq!(pricing_endpoint_region("us-west-2"), "us-east-1");
        assert_eq!(pricing_endpoint_region("eu-west-1"), "eu-central-1");
        assert_eq!(pricing_endpoint_region("ap-southeast-2"), "ap-south-1");
        assert_eq!(pricing_endpoint_region("cn-north-1"), "cn-northwest-1");
    }
}
