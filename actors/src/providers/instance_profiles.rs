//! The instance-profile provider (reference 1.3 `role`, 4.2 `instanceprofile`, 5.1 #8074).
//!
//! For an `EC2NodeClass` with a `role`, Karpenter owns an instance profile named
//! `<cluster>_<hash(region + class name)>` ([`profile_name`], the same name Karpenter v1.5
//! computes, so a cluster switching over keeps its profiles), tagged for the cluster, region
//! and class ([`profile_tags`]), holding exactly that role. Profiles are cached for 15 minutes.
//!
//! Data flow: the `NodeClassActor` calls [`InstanceProfileProvider::ensure`] on every reconcile
//! (a cache hit with the right role costs no IAM call) and [`InstanceProfileProvider::delete`]
//! when the class goes. `delete` always evicts the cache entry: a class re-created under the same
//! name must create a fresh profile instead of trusting a 15-minute-old entry for a profile that
//! no longer exists (the v1.5 fix).

use std::sync::Arc;
use std::time::Duration;

use super::ttl_cache::TtlCache;
use crate::ports::aws_error::AwsError;
use crate::ports::ec2::Tags;
use crate::ports::iam::{IamApi, InstanceProfile};
use karpenter_core::apis::labels::{
    REGION, TAG_CLUSTER_PREFIX, TAG_EC2NODECLASS, TAG_EKS_CLUSTER_NAME,
};

/// How long a profile read or written is trusted (Karpenter's instance-profile cache TTL).
pub const INSTANCE_PROFILE_CACHE_TTL: Duration = Duration::from_mins(15);
/// Karpenter creates its profiles without a path.
const PROFILE_PATH: &str = "/";

/// FNV-1 (64 bit), the hash Karpenter's `hashstructure` applies to a string.
fn fnv1_64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET, |hash, byte| {
        hash.wrapping_mul(PRIME) ^ u64::from(*byte)
    })
}

/// The name of the profile Karpenter manages for a class: `<cluster>_<hash>`, the hash being
/// FNV-1 of `<region><class name>` in decimal, exactly as Karpenter v1.5 names it.
#[must_use]
pub fn profile_name(cluster: &str, region: &str, class_name: &str) -> String {
    let hash = fnv1_64(format!("{region}{class_name}").as_bytes());
    format!("{cluster}_{hash}")
}

/// The tags of a managed profile: the class's `spec.tags`, then
/// `kubernetes.io/cluster/<cluster>=owned`, `eks:eks-cluster-name`, the class name and the
/// region (these win over user tags of the same key).
#[must_use]
pub fn profile_tags(spec_tags: &Tags, cluster: &str, region: &str, class_name: &str) -> Tags {
    let mut tags = spec_tags.clone();
    tags.insert(format!("{TAG_CLUSTER_PREFIX}{cluster}"), "owned".to_owned());
    tags.insert(TAG_EKS_CLUSTER_NAME.to_owned(), cluster.to_owned());
    tags.insert(TAG_EC2NODECLASS.to_owned(), class_name.to_owned());
    tags.insert(REGION.to_owned(), region.to_owned());
    tags
}

/// `AddRoleToInstanceProfile` takes a role name without its path.
fn role_name(role: &str) -> &str {
    role.rsplit('/').next().unwrap_or(role)
}

/// A failed instance-profile operation; the AWS error is the source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstanceProfileError {
    #[error("getting instance profile {profile}")]
    Get {
        profile: String,
        #[source]
        source: AwsError,
    },
    #[error("creating instance profile {profile}")]
    Create {
        profile: String,
        #[source]
        source: AwsError,
    },
    #[error("removing role {role} from instance profile {profile}")]
    RemoveRole {
        profile: String,
        role: String,
        #[source]
        source: AwsError,
    },
    #[error("adding role {role} to instance profile {profile}")]
    AddRole {
        profile: String,
        role: String,
        #[source]
        source: AwsError,
    },
    #[error("deleting instance profile {profile}")]
    Delete {
        profile: String,
        #[source]
        source: AwsError,
    },
}

impl InstanceProfileError {
    /// The AWS error behind it.
    #[must_use]
    pub fn aws(&self) -> &AwsError {
        match self {
            Self::Get { source, .. }
            | Self::Create { source, .. }
            | Self::RemoveRole { source, .. }
            | Self::AddRole { source, .. }
            | Self::Delete { source, .. } => source,
        }
    }

    /// The AWS error class, for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        self.aws().category()
    }
}

/// Instance profiles, cached.
#[derive(Debug)]
pub struct InstanceProfileProvider {
    iam: Arc<dyn IamApi>,
    cache: TtlCache<String, InstanceProfile>,
}

impl InstanceProfileProvider {
    #[must_use]
    pub fn new(iam: Arc<dyn IamApi>) -> Self {
        Self {
            iam,
            cache: TtlCache::new(INSTANCE_PROFILE_CACHE_TTL),
        }
    }

    /// The profile, from the cache when fresh.
    pub async fn get(&self, name: &str) -> Result<InstanceProfile, AwsError> {
        if let Some(profile) = self.cache.get(&name.to_owned()) {
            return Ok(profile);
        }
        let profile = self.iam.get_instance_profile(name).await?;
        self.cache.insert(name.to_owned(), profile.clone());
        Ok(profile)
    }

    /// Whether the cache holds the profile (for tests and debugging).
    #[must_use]
    pub fn is_cached(&self, name: &str) -> bool {
        self.cache.get(&name.to_owned()).is_some()
    }

    /// Makes the profile exist with exactly `role` (Karpenter's `Create`): created with `tags`
    /// when missing; a different role is replaced. The role's path, if any, is dropped.
    pub async fn ensure(
        &self,
        name: &str,
        role: &str,
        tags: &Tags,
    ) -> Result<(), InstanceProfileError> {
        let role = role_name(role);
        let mut profile = match self.get(name).await {
            Ok(profile) => profile,
            Err(error) if error.is_not_found() => self
                .iam
                .create_instance_profile(name, PROFILE_PATH, tags)
                .await
                .map_err(|source| InstanceProfileError::Create {
                    profile: name.to_owned(),
                    source,
                })?,
            Err(source) => {
                return Err(InstanceProfileError::Get {
                    profile: name.to_owned(),
                    source,
                });
            }
        };
        if profile.roles.iter().any(|r| r == role) {
            return Ok(());
        }
        // A profile holds at most one role.
        if let Some(current) = profile.roles.first().cloned() {
            self.iam
                .remove_role_from_instance_profile(name, &current)
                .await
                .map_err(|source| {
                    self.cache.remove(&name.to_owned());
                    InstanceProfileError::RemoveRole {
                        profile: name.to_owned(),
                        role: current.clone(),
                        source,
                    }
                })?;
        }
        self.iam
            .add_role_to_instance_profile(name, role)
            .await
            .map_err(|source| {
                self.cache.remove(&name.to_owned());
                InstanceProfileError::AddRole {
                    profile: name.to_owned(),
                    role: role.to_owned(),
                    source,
                }
            })?;
        profile.roles = vec![role.to_owned()];
        self.cache.insert(name.to_owned(), profile);
        Ok(())
    }

    /// Deletes the profile (its role first) and evicts it from the cache. A profile that is
    /// already gone is not an error.
    pub async fn delete(&self, name: &str) -> Result<(), InstanceProfileError> {
        // Evict first: whatever happens next, the cached copy is no longer the truth.
        self.cache.remove(&name.to_owned());
        let profile = match self.iam.get_instance_profile(name).await {
            Ok(profile) => profile,
            Err(error) if error.is_not_found() => return Ok(()),
            Err(source) => {
                return Err(InstanceProfileError::Get {
                    profile: name.to_owned(),
                    source,
                });
            }
        };
        for role in &profile.roles {
            match self.iam.remove_role_from_instance_profile(name, role).await {
                Ok(()) => {}
                Err(error) if error.is_not_found() => {}
                Err(source) => {
                    return Err(InstanceProfileError::RemoveRole {
                        profile: name.to_owned(),
                        role: role.clone(),
                        source,
                    });
                }
            }
        }
        match self.iam.delete_instance_profile(name).await {
            Ok(()) => Ok(()),
            Err(error) if error.is_not_found() => Ok(()),
            Err(source) => Err(InstanceProfileError::Delete {
                profile: name.to_owned(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_name_is_karpenters_fnv1_hash_of_region_and_class() {
        // FNV-1 64 of the empty input is its offset basis; "a" is a published test vector.
        assert_eq!(fnv1_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1_64(b"a"), 0xaf63_bd4c_8601_b7be);
        let name = profile_name("my-cluster", "us-west-2", "default");
        let hash = fnv1_64(b"us-west-2default");
        assert_eq!(name, format!("my-cluster_{hash}"));
        assert_ne!(name, profile_name("my-cluster", "us-east-1", "default"));
    }

    #[test]
    fn karpenters_tags_win_over_user_tags_of_the_same_key() {
        let user: Tags = [
            ("team".to_owned(), "a".to_owned()),
            (TAG_EC2NODECLASS.to_owned(), "spoofed".to_owned()),
        ]
        .into();
        let tags = profile_tags(&user, "c1", "us-west-2", "default");
        assert_eq!(tags["team"], "a");
        assert_eq!(tags[TAG_EC2NODECLASS], "default");
        assert_eq!(tags["kubernetes.io/cluster/c1"], "owned");
        assert_eq!(tags[TAG_EKS_CLUSTER_NAME], "c1");
        assert_eq!(tags[REGION], "us-west-2");
    }

    #[test]
    fn role_paths_are_dropped() {
        assert_eq!(
            role_name("team/nodes/KarpenterNodeRole"),
            "KarpenterNodeRole"
        );
        assert_eq!(role_name("KarpenterNodeRole"), "KarpenterNodeRole");
    }
}
