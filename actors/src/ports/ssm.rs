//! The narrow SSM port: `GetParameter`, which resolves AMI aliases to image ids.

use async_trait::async_trait;

use super::aws_error::AwsError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parameter {
    pub name: String,
    pub value: String,
    pub version: i64,
}

#[async_trait]
pub trait SsmApi: Send + Sync + std::fmt::Debug {
    async fn get_parameter(&self, name: &str) -> Result<Parameter, AwsError>;
}
