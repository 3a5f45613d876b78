//! kwok's Pricing API: price list documents built from the built-in on-demand table, so the
//! pricing provider's `GetProducts` parsing runs in tests and `simulate`. As the real price
//! list, bare-metal types (`*.metal*`) are in the product family `Compute Instance (bare
//! metal)`, the others in `Compute Instance`; a `productFamily` filter selects one.

use async_trait::async_trait;

use super::faults::Faults;
use crate::ports::aws_error::{AwsError, AwsService};
use crate::ports::pricing::{PricingApi, ProductFilter};
use crate::providers::pricing::builtin_on_demand_prices;

/// The in-memory Pricing API; `markup` scales every price (tests tell its prices from the
/// built-in ones).
#[derive(Debug, Default)]
pub struct KwokPricing {
    pub markup: f64,
    faults: Faults,
}

impl KwokPricing {
    #[must_use]
    pub fn new(markup: f64) -> Self {
        KwokPricing {
            markup,
            faults: Faults::default(),
        }
    }

    #[must_use]
    pub fn faults(&self) -> &Faults {
        &self.faults
    }
}

#[async_trait]
impl PricingApi for KwokPricing {
    async fn get_products(
        &self,
        service_code: &str,
        filters: &[ProductFilter],
    ) -> Result<Vec<String>, AwsError> {
        self.faults.check("GetProducts", service_code)?;
        let prices = builtin_on_demand_prices().map_err(|e| {
            AwsError::new(
                AwsService::Pricing,
                "GetProducts",
                Some("InternalErrorException"),
                e.to_string(),
            )
            .with_status(500)
        })?;
        let region = filters
            .iter()
            .find(|f| f.field == "regionCode")
            .map_or("us-east-1", |f| f.value.as_str());
        let family = filters
            .iter()
            .find(|f| f.field == "productFamily")
            .map(|f| f.value.as_str());
        Ok(prices
            .iter()
            .filter(|(name, _)| {
                let of_type = if name.contains(".metal") {
                    "Compute Instance (bare metal)"
                } else {
                    "Compute Instance"
                };
                family.is_none_or(|f| f == of_type)
            })
            .map(|(name, price)| {
                serde_json::json!({
                    "product": {"attributes": {"instanceType": name, "regionCode": region}},
                    "terms": {"OnDemand": {"T": {"priceDimensions": {"T.D": {
                        "pricePerUnit": {"USD": format!("{:.10}", price * self.markup)}
                    }}}}}
                })
                .to_string()
            })
            .collect())
    }
}
