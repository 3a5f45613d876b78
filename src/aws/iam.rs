//! [`IamApi`] over aws-sdk-iam.

use async_trait::async_trait;
use aws_sdk_iam as iam;
use karpenter_actors::ports::aws_error::{AwsError, AwsService};
use karpenter_actors::ports::ec2::Tags;
use karpenter_actors::ports::iam::{IamApi, InstanceProfile};
use karpenter_actors::retry::RetryPolicy;

#[derive(Debug, Clone)]
pub struct IamAdapter {
    client: iam::Client,
    retry: RetryPolicy,
}

impl IamAdapter {
    #[must_use]
    pub fn new(client: iam::Client, retry: RetryPolicy) -> Self {
        IamAdapter { client, retry }
    }
}

fn profile(p: &iam::types::InstanceProfile) -> InstanceProfile {
    InstanceProfile {
        name: p.instance_profile_name().to_owned(),
        id: p.instance_profile_id().to_owned(),
        arn: p.arn().to_owned(),
        path: p.path().to_owned(),
        roles: p.roles().iter().map(|r| r.role_name().to_owned()).collect(),
        tags: p
            .tags()
            .iter()
            .map(|t| (t.key().to_owned(), t.value().to_owned()))
            .collect(),
    }
}

fn build_error(operation: &'static str, error: &impl std::fmt::Display) -> AwsError {
    AwsError::new(
        AwsService::Iam,
        operation,
        Some("ValidationError"),
        error.to_string(),
    )
}

#[async_trait]
impl IamApi for IamAdapter {
    async fn get_instance_profile(&self, name: &str) -> Result<InstanceProfile, AwsError> {
        let out = super::call(
            &self.retry,
            AwsService::Iam,
            "GetInstanceProfile",
            &self.client,
            |c| c.get_instance_profile().instance_profile_name(name).send(),
        )
        .await?;
        Ok(out.instance_profile().map(profile).unwrap_or_default())
    }

    async fn create_instance_profile(
        &self,
        name: &str,
        path: &str,
        tags: &Tags,
    ) -> Result<InstanceProfile, AwsError> {
        let tags = tags
            .iter()
            .map(|(k, v)| iam::types::Tag::builder().key(k).value(v).build())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| build_error("CreateInstanceProfile", &e))?;
        let out = super::call(
            &self.retry,
            AwsService::Iam,
            "CreateInstanceProfile",
            &self.client,
            |c| {
                c.create_instance_profile()
                    .instance_profile_name(name)
                    .path(path)
                    .set_tags((!tags.is_empty()).then(|| tags.clone()))
                    .send()
            },
        )
        .await?;
        Ok(out.instance_profile().map(profile).unwrap_or_default())
    }

    async fn add_role_to_instance_profile(
        &self,
        profile_name: &str,
        role: &str,
    ) -> Result<(), AwsError> {
        super::call(
            &self.retry,
            AwsService::Iam,
            "AddRoleToInstanceProfile",
            &self.client,
            |c| {
                c.add_role_to_instance_profile()
                    .instance_profile_name(profile_name)
                    .role_name(role)
                    .send()
            },
        )
        .await?;
        Ok(())
    }

    async fn remove_role_from_instance_profile(
        &self,
        profile_name: &str,
        role: &str,
    ) -> Result<(), AwsError> {
        super::call(
            &self.retry,
            AwsService::Iam,
            "RemoveRoleFromInstanceProfile",
            &self.client,
            |c| {
                c.remove_role_from_instance_profile()
                    .instance_profile_name(profile_name)
                    .role_name(role)
                    .send()
            },
        )
        .await?;
        Ok(())
    }

    async fn delete_instance_profile(&self, name: &str) -> Result<(), AwsError> {
        super::call(
            &self.retry,
            AwsService::Iam,
            "DeleteInstanceProfile",
            &self.client,
            |c| {
                c.delete_instance_profile()
                    .instance_profile_name(name)
                    .send()
            },
        )
        .await?;
        Ok(())
    }
}
