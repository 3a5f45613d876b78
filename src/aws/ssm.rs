//! [`SsmApi`] over aws-sdk-ssm.

use async_trait::async_trait;
use aws_sdk_ssm as ssm;
use karpenter_actors::ports::aws_error::{AwsError, AwsService};
use karpenter_actors::ports::ssm::{Parameter, SsmApi};
use karpenter_actors::retry::RetryPolicy;

#[derive(Debug, Clone)]
pub struct SsmAdapter {
    client: ssm::Client,
    retry: RetryPolicy,
}

impl SsmAdapter {
    #[must_use]
    pub fn new(client: ssm::Client, retry: RetryPolicy) -> Self {
        SsmAdapter { client, retry }
    }
}

#[async_trait]
impl SsmApi for SsmAdapter {
    async fn get_parameter(&self, name: &str) -> Result<Parameter, AwsError> {
        let out = super::call(
            &self.retry,
            AwsService::Ssm,
            "GetParameter",
            &self.client,
            |c| c.get_parameter().name(name).send(),
        )
        .await?;
        let parameter = out.parameter();
        Ok(Parameter {
            name: parameter.and_then(|p| p.name()).unwrap_or(name).to_owned(),
            value: parameter.and_then(|p| p.value()).unwrap_or("").to_owned(),
            version: parameter.map_or(0, ssm::types::Parameter::version),
        })
    }
}
