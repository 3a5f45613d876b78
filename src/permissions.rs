//! The permissions the daemon needs, each with the code that needs it: Kubernetes RBAC rules
//! ([`CLUSTER`], [`NAMESPACED`]) and AWS IAM actions ([`AWS`]). The Helm chart's roles grant
//! exactly the Kubernetes ones (`tests/chart.rs` fails when a role grants more), and
//! `deploy/controller-iam-policy.json` grants exactly the AWS ones (a test below fails when the
//! two differ), so adding a Kubernetes or AWS call means adding its permission here first.

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
            "namespaces",
        ],
        READ,
        "cluster state watchers; volume topology for scheduling; namespace labels for pod \
         (anti-)affinity namespaceSelectors (as Karpenter's clusterrole-core)",
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

/// One IAM action the controller's role needs (`deploy/controller-iam-policy.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AwsPermission {
    /// `service:Action`, as IAM spells it.
    pub action: &'static str,
    /// The code that needs it.
    pub used_by: &'static str,
}

const fn aws(action: &'static str, used_by: &'static str) -> AwsPermission {
    AwsPermission { action, used_by }
}

/// The AWS actions of `karpenter run` (not those of `karpenter interruption setup`, which an
/// administrator runs once with their own credentials).
pub const AWS: &[AwsPermission] = &[
    aws(
        "ec2:CreateFleet",
        "launches (one instant fleet per NodeClaim)",
    ),
    aws(
        "ec2:RunInstances",
        "CreateFleet launches through it; EC2NodeClass validation (dry run)",
    ),
    aws("ec2:CreateLaunchTemplate", "launch templates per AMI group"),
    aws(
        "ec2:DeleteLaunchTemplate",
        "launch templates of deleted EC2NodeClasses",
    ),
    aws(
        "ec2:CreateTags",
        "instance tags after registration (Name, nodeclaim, eks:eks-cluster-name)",
    ),
    aws(
        "ec2:TerminateInstances",
        "termination and garbage collection",
    ),
    aws(
        "ec2:DescribeInstances",
        "instance state, drift and garbage collection",
    ),
    aws("ec2:DescribeInstanceTypes", "the instance-type catalogue"),
    aws("ec2:DescribeInstanceTypeOfferings", "offerings per zone"),
    aws(
        "ec2:DescribeAvailabilityZones",
        "zone ids; the aws readiness check",
    ),
    aws("ec2:DescribeSpotPriceHistory", "spot prices"),
    aws("ec2:DescribeSubnets", "EC2NodeClass subnet selectors"),
    aws(
        "ec2:DescribeSecurityGroups",
        "EC2NodeClass security group selectors",
    ),
    aws("ec2:DescribeImages", "EC2NodeClass AMI selectors"),
    aws(
        "ec2:DescribeLaunchTemplates",
        "finding launch templates made earlier",
    ),
    aws(
        "ec2:DescribeCapacityReservations",
        "not called yet (capacityReservationSelectorTerms are not resolved); kept from \
         Karpenter's policy so one role serves both",
    ),
    aws("ssm:GetParameter", "AMI aliases (al2023@latest ...)"),
    aws(
        "pricing:GetProducts",
        "on-demand prices (not with ISOLATED_VPC)",
    ),
    aws(
        "sqs:GetQueueUrl",
        "the interruption queue (INTERRUPTION_QUEUE)",
    ),
    aws(
        "sqs:GetQueueAttributes",
        "the interruption-queue readiness check",
    ),
    aws("sqs:ReceiveMessage", "interruption messages"),
    aws("sqs:DeleteMessage", "interruption messages once handled"),
    aws("iam:GetInstanceProfile", "EC2NodeClass instance profiles"),
    aws(
        "iam:CreateInstanceProfile",
        "EC2NodeClass instance profiles",
    ),
    aws(
        "iam:TagInstanceProfile",
        "instance profiles are created with the cluster's tags",
    ),
    aws("iam:AddRoleToInstanceProfile", "EC2NodeClass spec.role"),
    aws("iam:RemoveRoleFromInstanceProfile", "a changed spec.role"),
    aws("iam:DeleteInstanceProfile", "deleted EC2NodeClasses"),
    aws(
        "iam:PassRole",
        "adding the node role to an instance profile",
    ),
    aws(
        "eks:DescribeCluster",
        "cluster discovery: the endpoint when CLUSTER_ENDPOINT is unset, the service CIDR for AL2023 (src/discovery.rs)",
    ),
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every action `deploy/controller-iam-policy.json` allows.
    fn granted() -> BTreeSet<String> {
        let policy: serde_json::Value =
            serde_json::from_str(include_str!("../deploy/controller-iam-policy.json")).unwrap();
        let mut actions = BTreeSet::new();
        for statement in policy["Statement"].as_array().unwrap() {
            assert_eq!(statement["Effect"], "Allow", "{statement}");
            match &statement["Action"] {
                serde_json::Value::String(action) => {
                    actions.insert(action.clone());
                }
                serde_json::Value::Array(list) => {
                    actions.extend(list.iter().map(|a| a.as_str().unwrap().to_owned()));
                }
                other => panic!("Action {other}"),
            }
        }
        actions
    }

    #[test]
    fn the_iam_policy_grants_exactly_the_aws_actions_the_code_lists() {
        let listed: BTreeSet<String> = AWS.iter().map(|p| p.action.to_owned()).collect();
        assert_eq!(listed.len(), AWS.len(), "an action is listed twice");
        let granted = granted();
        let missing: Vec<&String> = listed.difference(&granted).collect();
        let extra: Vec<&String> = granted.difference(&listed).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "not granted by deploy/controller-iam-policy.json: {missing:?}; granted but not \
             listed here: {extra:?}"
        );
    }

    #[test]
    fn cluster_discovery_may_describe_only_its_own_cluster() {
        let policy: serde_json::Value =
            serde_json::from_str(include_str!("../deploy/controller-iam-policy.json")).unwrap();
        let statement = policy["Statement"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["Action"] == "eks:DescribeCluster")
            .unwrap();
        assert_eq!(
            statement["Resource"],
            "arn:aws:eks:${AWS_REGION}:${AWS_ACCOUNT_ID}:cluster/${CLUSTER_NAME}"
        );
    }
}
