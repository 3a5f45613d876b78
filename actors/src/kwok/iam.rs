//! kwok's IAM: instance profiles in memory, with IAM's error codes.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;

use super::faults::Faults;
use crate::ports::aws_error::{AwsError, AwsService};
use crate::ports::ec2::Tags;
use crate::ports::iam::{IamApi, InstanceProfile};

const ACCOUNT: &str = "000000000000";

/// The in-memory IAM.
#[derive(Debug, Default)]
pub struct KwokIam {
    profiles: Mutex<BTreeMap<String, InstanceProfile>>,
    faults: Faults,
}

fn error(operation: &'static str, code: &str, status: u16, message: String) -> AwsError {
    AwsError::new(AwsService::Iam, operation, Some(code), message).with_status(status)
}

impl KwokIam {
    #[must_use]
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    fn with_profile<T>(
        &self,
        operation: &'static str,
        name: &str,
        f: impl FnOnce(&mut InstanceProfile) -> Result<T, AwsError>,
    ) -> Result<T, AwsError> {
        let mut profiles = self.profiles.lock().unwrap_or_else(PoisonError::into_inner);
        let profile = profiles.get_mut(name).ok_or_else(|| {
            error(
                operation,
                "NoSuchEntity",
                404,
                format!("Instance Profile {name} cannot be found."),
            )
        })?;
        f(profile)
    }
}

#[async_trait]
impl IamApi for KwokIam {
    async fn get_instance_profile(&self, name: &str) -> Result<InstanceProfile, AwsError> {
        self.faults.check("GetInstanceProfile", name)?;
        self.with_profile("GetInstanceProfile", name, |p| Ok(p.clone()))
    }

    async fn create_instance_profile(
        &self,
        name: &str,
        path: &str,
        tags: &Tags,
    ) -> Result<InstanceProfile, AwsError> {
        self.faults.check("CreateInstanceProfile", name)?;
        let mut profiles = self.profiles.lock().unwrap_or_else(PoisonError::into_inner);
        if profiles.contains_key(name) {
            return Err(error(
                "CreateInstanceProfile",
                "EntityAlreadyExists",
                409,
                format!("Instance Profile {name} already exists."),
            ));
        }
        let profile = InstanceProfile {
            name: name.to_owned(),
            id: format!("AIPA{:016}", profiles.len() + 1),
            arn: format!("arn:aws:iam::{ACCOUNT}:instance-profile{path}{name}"),
            path: path.to_owned(),
            roles: Vec::new(),
            tags: tags.clone(),
        };
        profiles.insert(name.to_owned(), profile.clone());
        Ok(profile)
    }

    async fn add_role_to_instance_profile(
        &self,
        profile: &str,
        role: &str,
    ) -> Result<(), AwsError> {
        const OP: &str = "AddRoleToInstanceProfile";
        self.faults.check(OP, profile)?;
        self.with_profile(OP, profile, |p| {
            if p.roles.is_empty() {
                p.roles.push(role.to_owned());
                Ok(())
            } else {
                Err(error(
                    OP,
                    "LimitExceeded",
                    409,
                    "Cannot exceed quota for InstanceSessionsPerInstanceProfile: 1".into(),
                ))
            }
        })
    }

    async fn remove_role_from_instance_profile(
        &self,
        profile: &str,
        role: &str,
    ) -> Result<(), AwsError> {
        const OP: &str = "RemoveRoleFromInstanceProfile";
        self.faults.check(OP, profile)?;
        self.with_profile(OP, profile, |p| {
            let before = p.roles.len();
            p.roles.retain(|r| r != role);
            if p.roles.len() == before {
                return Err(error(
                    OP,
                    "NoSuchEntity",
                    404,
                    format!("Role {role} is not in {profile}."),
                ));
            }
            Ok(())
        })
    }

    async fn delete_instance_profile(&self, name: &str) -> Result<(), AwsError> {
        const OP: &str = "DeleteInstanceProfile";
        self.faults.check(OP, name)?;
        let has_roles = self.with_profile(OP, name, |p| Ok(!p.roles.is_empty()))?;
        if has_roles {
            return Err(error(
                OP,
                "DeleteConflict",
                409,
                "Cannot delete entity, must remove roles from instance profile first.".into(),
            ));
        }
        self.profiles
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        Ok(())
    }
}
