//! Pod facts Karpenter decides on, as pure functions of the pod.
//!
//! [`provisionable`] is Karpenter's `IsProvisionable`: the Provisioner builds its snapshot from
//! the pods it accepts, `karpenter explain` says why it refuses one ([`NotProvisionable`]), and
//! the daemon's change routing marks a watched pod `pending` (a provisioning trigger) with the
//! same rule, so what triggers a run is what a run places.
//!
//! [`is_pod_event`] is Karpenter's `nodeclaim.podevents` filter: the change routing marks a pod
//! change that moves a node's pods (bound, finished, being deleted, gone) so its NodeClaim
//! records `status.lastPodEventTime`, which consolidation waits `consolidateAfter` from.

use std::fmt;

use crate::apis::SlimPod;

/// Why a pod is not something the Provisioner acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotProvisionable {
    Bound {
        node: String,
    },
    Terminal {
        phase: String,
    },
    Terminating,
    OwnedByDaemonSet,
    /// A static (mirror) pod, owned by its Node.
    Static,
    /// kube-scheduler is preempting pods for it on this node.
    Preempting {
        node: String,
    },
    /// `spec.schedulingGates` hold it back.
    Gated,
}

impl fmt::Display for NotProvisionable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bound { node } => write!(f, "it is bound to node {node}"),
            Self::Terminal { phase } => write!(f, "it has finished ({phase})"),
            Self::Terminating => f.write_str("it is being deleted"),
            Self::OwnedByDaemonSet => f.write_str("it belongs to a DaemonSet"),
            Self::Static => f.write_str("it is a static pod"),
            Self::Preempting { node } => {
                write!(
                    f,
                    "kube-scheduler nominated node {node} and is preempting for it"
                )
            }
            Self::Gated => f.write_str("scheduling gates hold it back"),
        }
    }
}

/// Whether `pod` has an owner of this API version and kind (`apps/v1` `DaemonSet`, `v1` `Node`).
#[must_use]
pub fn owned_by(pod: &SlimPod, api_version: &str, kind: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.api_version == api_version && o.kind == kind)
}

/// The phase of a pod that has finished (`Succeeded` or `Failed`).
#[must_use]
pub fn is_terminal(pod: &SlimPod) -> Option<String> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref())?;
    matches!(phase, "Succeeded" | "Failed").then(|| phase.to_owned())
}

/// What a watch saw happen to a pod, with the version it replaced.
#[derive(Debug, Clone, Copy)]
pub enum PodChange<'a> {
    /// Seen for the first time: created, or listed with no stored version before it (so after a
    /// restart every pod counts as created, as Karpenter's informer sends `Create` at startup).
    Created(&'a SlimPod),
    /// Changed from `old` to `new`.
    Updated { old: &'a SlimPod, new: &'a SlimPod },
    /// Deleted, in its last known state.
    Deleted(&'a SlimPod),
}

/// The node a pod is bound to (`spec.nodeName`, empty counts as none).
#[must_use]
pub fn node_name(pod: &SlimPod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Whether a pod change is a pod event on its node (Karpenter's `nodeclaim.podevents`
/// predicate and reconcile guard): a pod created or deleted while bound, or an update where
/// the pod became bound, became terminal (`Succeeded`/`Failed`) or became terminating
/// (`deletionTimestamp` set) while bound. `DaemonSet` pods never count: they follow the node,
/// they do not say it is in use.
#[must_use]
pub fn is_pod_event(change: PodChange<'_>) -> bool {
    let pod = match change {
        PodChange::Created(pod) | PodChange::Deleted(pod) => pod,
        PodChange::Updated { new, .. } => new,
    };
    if node_name(pod).is_none() || owned_by(pod, "apps/v1", "DaemonSet") {
        return false;
    }
    match change {
        PodChange::Created(_) | PodChange::Deleted(_) => true,
        PodChange::Updated { old, new } => {
            let bound = node_name(old).is_none();
            let terminal = is_terminal(old).is_none() && is_terminal(new).is_some();
            let terminating = old.metadata.deletion_timestamp.is_none()
                && new.metadata.deletion_timestamp.is_some();
            bound || terminal || terminating
        }
    }
}

/// Whether the Provisioner should find capacity for this pod (Karpenter's `IsProvisionable`).
/// Unlike Karpenter, a pod kube-scheduler has not marked `Unschedulable` yet counts too: the
/// scheduler tries existing nodes first, so such a pod is only nominated where it already fits,
/// and an emulated cluster without a kube-scheduler still provisions.
pub fn provisionable(pod: &SlimPod) -> Result<(), NotProvisionable> {
    let spec = pod.spec.as_ref();
    if let Some(node) = spec.and_then(|s| s.node_name.as_deref())
        && !node.is_empty()
    {
        return Err(NotProvisionable::Bound {
            node: node.to_owned(),
        });
    }
    if let Some(phase) = is_terminal(pod) {
        return Err(NotProvisionable::Terminal { phase });
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Err(NotProvisionable::Terminating);
    }
    if owned_by(pod, "apps/v1", "DaemonSet") {
        return Err(NotProvisionable::OwnedByDaemonSet);
    }
    if owned_by(pod, "v1", "Node") {
        return Err(NotProvisionable::Static);
    }
    if let Some(node) = pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        && !node.is_empty()
    {
        return Err(NotProvisionable::Preempting {
            node: node.to_owned(),
        });
    }
    if spec
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
    {
        return Err(NotProvisionable::Gated);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::{SharedPodSpec as PodSpec, SlimPod as Pod, SlimPodStatus as PodStatus};
    use k8s_openapi::api::core::v1::PodSchedulingGate;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    fn pending() -> Pod {
        Pod {
            spec: Some(PodSpec::default().into()),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn owned(api_version: &str, kind: &str) -> Pod {
        let mut pod = pending();
        pod.metadata.owner_references = Some(vec![OwnerReference {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            name: "owner".to_owned(),
            uid: "1".to_owned(),
            ..OwnerReference::default()
        }]);
        pod
    }

    #[test]
    fn an_unbound_pending_pod_is_provisionable() {
        assert_eq!(provisionable(&pending()), Ok(()));
        let mut empty_node = pending();
        empty_node.spec = Some(
            PodSpec {
                node_name: Some(String::new()),
                ..PodSpec::default()
            }
            .into(),
        );
        assert_eq!(provisionable(&empty_node), Ok(()));
    }

    #[test]
    fn bound_finished_deleting_owned_preempting_and_gated_pods_are_not() {
        let mut bound = pending();
        bound.spec = Some(
            PodSpec {
                node_name: Some("n1".to_owned()),
                ..PodSpec::default()
            }
            .into(),
        );
        assert_eq!(
            provisionable(&bound),
            Err(NotProvisionable::Bound {
                node: "n1".to_owned()
            })
        );
        let mut finished = pending();
        finished.status = Some(PodStatus {
            phase: Some("Succeeded".into()),
            ..PodStatus::default()
        });
        assert_eq!(
            provisionable(&finished),
            Err(NotProvisionable::Terminal {
                phase: "Succeeded".to_owned()
            })
        );
        let mut deleting = pending();
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(provisionable(&deleting), Err(NotProvisionable::Terminating));
        assert_eq!(
            provisionable(&owned("apps/v1", "DaemonSet")),
            Err(NotProvisionable::OwnedByDaemonSet)
        );
        assert_eq!(
            provisionable(&owned("v1", "Node")),
            Err(NotProvisionable::Static)
        );
        let mut nominated = pending();
        nominated.status = Some(PodStatus {
            nominated_node_name: Some("n2".into()),
            ..PodStatus::default()
        });
        assert_eq!(
            provisionable(&nominated),
            Err(NotProvisionable::Preempting {
                node: "n2".to_owned()
            })
        );
        let mut gated = pending();
        gated.spec = Some(
            PodSpec {
                scheduling_gates: Some(vec![PodSchedulingGate {
                    name: "example.com/wait".to_owned(),
                }]),
                ..PodSpec::default()
            }
            .into(),
        );
        assert_eq!(provisionable(&gated), Err(NotProvisionable::Gated));
        assert_eq!(
            NotProvisionable::Gated.to_string(),
            "scheduling gates hold it back"
        );
    }

    fn on(node: &str) -> Pod {
        let mut pod = pending();
        pod.spec = Some(
            PodSpec {
                node_name: Some(node.to_owned()),
                ..PodSpec::default()
            }
            .into(),
        );
        pod.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        });
        pod
    }

    fn updated(old: &Pod, new: &Pod) -> bool {
        is_pod_event(PodChange::Updated { old, new })
    }

    #[test]
    fn a_pod_binding_to_a_node_is_a_pod_event() {
        assert!(updated(&pending(), &on("n1")));
        let mut empty = pending();
        empty.spec = Some(
            PodSpec {
                node_name: Some(String::new()),
                ..PodSpec::default()
            }
            .into(),
        );
        assert!(updated(&empty, &on("n1")), "an empty nodeName is unbound");
    }

    #[test]
    fn a_bound_pod_finishing_is_a_pod_event_and_stays_one_only_once() {
        let mut succeeded = on("n1");
        succeeded.status = Some(PodStatus {
            phase: Some("Succeeded".into()),
            ..PodStatus::default()
        });
        let mut failed = on("n1");
        failed.status = Some(PodStatus {
            phase: Some("Failed".into()),
            ..PodStatus::default()
        });
        assert!(updated(&on("n1"), &succeeded));
        assert!(updated(&on("n1"), &failed));
        assert!(!updated(&succeeded, &succeeded), "already terminal");
        assert!(!updated(&succeeded, &failed), "terminal before and after");
    }

    #[test]
    fn a_bound_pod_starting_to_terminate_is_a_pod_event() {
        let mut terminating = on("n1");
        terminating.metadata.deletion_timestamp =
            Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(updated(&on("n1"), &terminating));
        assert!(!updated(&terminating, &terminating), "already terminating");
    }

    #[test]
    fn a_pod_created_or_deleted_while_bound_is_a_pod_event_and_unbound_is_not() {
        assert!(is_pod_event(PodChange::Created(&on("n1"))));
        assert!(is_pod_event(PodChange::Deleted(&on("n1"))));
        assert!(!is_pod_event(PodChange::Created(&pending())));
        assert!(!is_pod_event(PodChange::Deleted(&pending())));
        let mut finished_unbound = pending();
        finished_unbound.status = Some(PodStatus {
            phase: Some("Failed".into()),
            ..PodStatus::default()
        });
        assert!(
            !updated(&pending(), &finished_unbound),
            "a pod that never ran on a node says nothing about one"
        );
    }

    #[test]
    fn daemonset_pods_are_never_pod_events() {
        let mut daemon = owned("apps/v1", "DaemonSet");
        daemon.spec = on("n1").spec;
        let unbound = owned("apps/v1", "DaemonSet");
        assert!(!is_pod_event(PodChange::Created(&daemon)));
        assert!(!is_pod_event(PodChange::Deleted(&daemon)));
        assert!(!updated(&unbound, &daemon), "bound, but a DaemonSet's");
        assert!(
            is_pod_event(PodChange::Created(&{
                let mut other = owned("apps/v1", "ReplicaSet");
                other.spec = on("n1").spec;
                other
            })),
            "other owners count"
        );
    }

    #[test]
    fn an_unrelated_update_of_a_bound_pod_is_not_a_pod_event() {
        let mut labelled = on("n1");
        labelled.metadata.labels = Some([("app".to_owned(), "web".to_owned())].into());
        assert!(!updated(&on("n1"), &labelled));
        let mut ready = on("n1");
        if let Some(status) = ready.status.as_mut() {
            status.start_time = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        }
        assert!(!updated(&on("n1"), &ready));
    }
}
