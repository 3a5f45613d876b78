//! The Kubernetes permissions the daemon needs, each with the code that needs it. The Helm
//! chart's roles grant exactly these (`tests/chart.rs` fails when a role grants more), so adding a
//! Kubernetes call means adding its permission here first.

/// One RBAC rule: verbs on resources of an API group, optionally limited to named objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    pub group: &'static str,
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
    /// Empty for every object of the resources.
    pub names: &'static [&'static str],
    /// The code that needs it.
    pub used_by: &'static str,
}

const fn rule(
    group: &'static str,
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
    used_by: &'static str,
) -> Permission {
    Permission {
        group,
        resources,
        verbs,
        names: &[],
        used_by,
    }
}

const READ: &[&str] = &["get", "list", "watch"];

/// Cluster-wide permissions (the chart's `-core` and provider cluster roles).
pub const CLUSTER: &[Permission] = &[
    rule(
        "karpenter.sh",
        &["nodepools", "nodeclaims"],
        READ,
        "cluster state watchers",
    ),
    rule(
        "karpenter.sh",
        &["nodeclaims"],
        &["create", "delete", "patch", "update"],
        "provisioner and disruption (create, delete); NodeClaim actors (finalizer, labels)",
    ),
    rule(
        "karpenter.sh",
        &["nodeclaims/status"],
        &["patch", "update"],
        "NodeClaim actors",
    ),
    rule(
        "karpenter.sh",
        &["nodepools", "nodepools/status"],
        &["patch", "update"],
        "NodePool actors (hash annotations, resources, conditions)",
    ),
    rule(
        "",
        &[
            "pods",
            "nodes",
            "persistentvolumes",
            "persistentvolumeclaims",
        ],
        READ,
        "cluster state watchers; volume topology for scheduling",
    ),
    rule(
        "storage.k8s.io",
        &["storageclasses", "csinodes", "volumeattachments"],
        READ,
        "volume topology and attachment checks while draining",
    ),
    rule(
        "apps",
        &["daemonsets"],
        &["list", "watch"],
        "daemonset overhead of new nodes",
    ),
    rule(
        "policy",
        &["poddisruptionbudgets"],
        READ,
        "drain and disruption candidates",
    ),
    rule(
        "",
        &["nodes"],
        &["patch", "update", "delete"],
        "registration and termination",
    ),
    rule("", &["pods/eviction"], &["create"], "draining"),
    rule(
        "",
        &["pods"],
        &["delete"],
        "draining past the termination grace period",
    ),
    rule(
        "events.k8s.io",
        &["events"],
        &["create", "patch"],
        "event recorder",
    ),
    rule(
        "karpenter.k8s.aws",
        &["ec2nodeclasses"],
        READ,
        "EC2NodeClass watcher",
    ),
    rule(
        "karpenter.k8s.aws",
        &["ec2nodeclasses", "ec2nodeclasses/status"],
        &["patch", "update"],
        "NodeClass actors (finalizer, hash annotations, status)",
    ),
];

/// Permissions in the release namespace (leader election) and in kube-system (cluster DNS).
pub const NAMESPACED: &[Permission] = &[
    rule(
        "coordination.k8s.io",
        &["leases"],
        &["get", "watch", "create"],
        "leader election",
    ),
    Permission {
        group: "coordination.k8s.io",
        resources: &["leases"],
        verbs: &["patch", "update"],
        names: &["karpenter-leader-election"],
        used_by: "leader election (renewing our own Lease only)",
    },
    Permission {
        group: "",
        resources: &["services"],
        verbs: &["get"],
        names: &["kube-dns"],
        used_by: "cluster DNS address for kubelet configuration",
    },
];

/// Whether `verb` on `resource` (optionally a named object) is in `permissions`.
#[must_use]
pub fn allows(
    permissions: &[Permission],
    group: &str,
    resource: &str,
    verb: &str,
    name: Option<&str>,
) -> bool {
    permissions.iter().any(|p| {
        p.group == group
            && p.resources.contains(&resource)
            && p.verbs.contains(&verb)
            && (p.names.is_empty() || name.is_some_and(|n| p.names.contains(&n)))
    })
}
