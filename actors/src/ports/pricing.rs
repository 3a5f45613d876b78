//! The narrow AWS Pricing port: `GetProducts` for EC2 on-demand prices. The price list documents
//! are returned as the JSON text the API sends; `crate::providers::pricing` parses them.

use async_trait::async_trait;

use super::aws_error::AwsError;

/// A `TERM_MATCH` filter of `GetProducts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductFilter {
    pub field: String,
    pub value: String,
}

impl ProductFilter {
    #[must_use]
    pub fn term_match(field: &str, value: &str) -> Self {
        ProductFilter {
            field: field.to_owned(),
            value: value.to_owned(),
        }
    }
}

#[async_trait]
pub trait PricingApi: Send + Sync + std::fmt::Debug {
    /// Every page of `GetProducts` for `service_code` (`AmazonEC2`).
    async fn get_products(
        &self,
        service_code: &str,
        filters: &[ProductFilter],
    ) -> Result<Vec<String>, AwsError>;
}
