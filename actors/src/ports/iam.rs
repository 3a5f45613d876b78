//! The narrow IAM port: the instance-profile calls of Karpenter's instance-profile provider.

use async_trait::async_trait;

use super::aws_error::AwsError;
use super::ec2::Tags;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceProfile {
    pub name: String,
    pub id: String,
    pub arn: String,
    pub path: String,
    /// Role names (not ARNs).
    pub roles: Vec<String>,
    pub tags: Tags,
}

#[async_trait]
pub trait IamApi: Send + Sync + std::fmt::Debug {
    async fn get_instance_profile(&self, name: &str) -> Result<InstanceProfile, AwsError>;
    async fn create_instance_profile(
        &self,
        name: &str,
        path: &str,
        tags: &Tags,
    ) -> Result<InstanceProfile, AwsError>;
    async fn add_role_to_instance_profile(&self, profile: &str, role: &str)
    -> Result<(), AwsError>;
    async fn remove_role_from_instance_profile(
        &self,
        profile: &str,
        role: &str,
    ) -> Result<(), AwsError>;
    async fn delete_instance_profile(&self, name: &str) -> Result<(), AwsError>;
}
