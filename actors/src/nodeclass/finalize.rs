//! Deleting an `EC2NodeClass` (reference 1.3 "Finalizer"): the pieces the actor's finalizer
//! step uses.
//!
//! While any NodeClaim still uses the class the finalizer stays and a
//! `WaitingOnNodeClaimTermination` event names them (every 10 minutes; the actor is also woken
//! when a NodeClaim goes). Then the managed instance profile is deleted (and evicted from the
//! provider's cache), the class's launch templates are deleted, and the finalizer is removed.
//! "No NodeClaim uses it" is only believed once the view has listed every kind: an unsynced
//! view has no NodeClaims yet, and deleting the profile and templates then would strand the
//! instances still running under them.

use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;

use crate::ports::aws_error::AwsError;
use crate::ports::cluster::{ClusterEvent, EventType};
use crate::ports::ec2::{DescribeLaunchTemplatesRequest, Ec2Api, Filter, LaunchTemplateRef};
use karpenter_core::apis::EC2NodeClass;
use karpenter_core::apis::labels::{AWS_GROUP, TAG_EC2NODECLASS, TAG_EKS_CLUSTER_NAME, VERSION};

use super::metadata::EC2NODECLASS_KIND;

/// How often the waiting event is repeated while NodeClaims remain (Karpenter's requeue).
pub const WAITING_EVENT_INTERVAL: Duration = Duration::from_mins(10);
/// Karpenter's event reason while deletion waits for NodeClaims.
pub const REASON_WAITING_ON_NODECLAIM_TERMINATION: &str = "WaitingOnNodeClaimTermination";
/// How soon a deleting class looks again while the cluster view has not synced.
pub const UNSYNCED_RECHECK: Duration = Duration::from_secs(1);
/// NodeClaim names listed in the event before "and N other(s)".
const NAMES_IN_EVENT: usize = 5;

/// Karpenter's `PrettySlice`: the first `max` items, then "and N other(s)".
#[must_use]
pub fn pretty_list(items: &[String], max: usize) -> String {
    let mut out = items
        .iter()
        .take(max)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > max {
        let _ = write!(out, " and {} other(s)", items.len() - max);
    }
    out
}

/// The `WaitingOnNodeClaimTermination` event for a class and the NodeClaims it waits for.
#[must_use]
pub fn waiting_event(class: &EC2NodeClass, nodeclaims: &[String]) -> ClusterEvent {
    ClusterEvent {
        regarding: ObjectReference {
            api_version: Some(format!("{AWS_GROUP}/{VERSION}")),
            kind: Some(EC2NODECLASS_KIND.to_owned()),
            name: class.metadata.name.clone(),
            uid: class.metadata.uid.clone(),
            ..ObjectReference::default()
        },
        related: None,
        type_: EventType::Normal,
        reason: REASON_WAITING_ON_NODECLAIM_TERMINATION.to_owned(),
        action: "Finalizing".to_owned(),
        note: Some(format!(
            "Waiting on NodeClaim termination for {}",
            pretty_list(nodeclaims, NAMES_IN_EVENT)
        )),
    }
}

/// Deletes every launch template of the class (found by the cluster and class tags, as
/// Karpenter's `DeleteAll`); templates already gone are skipped. Returns how many it deleted.
pub async fn delete_launch_templates(
    ec2: &dyn Ec2Api,
    cluster: &str,
    class_name: &str,
) -> Result<usize, AwsError> {
    let templates = ec2
        .describe_launch_templates(&DescribeLaunchTemplatesRequest {
            names: Vec::new(),
            filters: vec![
                Filter::tag(TAG_EKS_CLUSTER_NAME, &[cluster]),
                Filter::tag(TAG_EC2NODECLASS, &[class_name]),
            ],
        })
        .await?;
    let mut deleted = 0;
    for template in templates {
        match ec2
            .delete_launch_template(&LaunchTemplateRef::Id(template.id.clone()))
            .await
        {
            Ok(()) => deleted += 1,
            Err(error) if error.is_not_found() => {}
            Err(error) => return Err(error),
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lists_name_five_and_count_the_rest() {
        let names: Vec<String> = (1..=7).map(|i| format!("c{i}")).collect();
        assert_eq!(pretty_list(&names, 5), "c1, c2, c3, c4, c5 and 2 other(s)");
        assert_eq!(pretty_list(&names[..2], 5), "c1, c2");
    }
}
