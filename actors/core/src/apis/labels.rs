//! Well-known label, annotation, taint, finalizer and tag names (reference section 1.4), and the
//! rules that decide which label keys users may set.
//!
//! Every other module refers to these constants; no label string is spelled out twice.

/// API group of `NodePool` and `NodeClaim`.
pub const CORE_GROUP: &str = "karpenter.sh";
/// API group of `EC2NodeClass`.
pub const AWS_GROUP: &str = "karpenter.k8s.aws";
/// The only version served for all three kinds.
pub const VERSION: &str = "v1";

// ---- labels --------------------------------------------------------------------------------

pub const NODEPOOL: &str = "karpenter.sh/nodepool";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const INITIALIZED: &str = "karpenter.sh/initialized";
pub const REGISTERED: &str = "karpenter.sh/registered";
/// Set to `"true"` on nodes whose kubelet registers the taints itself (v1.5, core#2125): the
/// NodeClaim registration then leaves the node's taints alone.
pub const DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";
pub const EC2NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";

pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";

pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
pub const INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: &str =
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
pub const INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: &str =
    "karpenter.k8s.aws/instance-encryption-in-transit-supported";
pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
pub const INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
pub const INSTANCE_ACCELERATOR_MANUFACTURER: &str =
    "karpenter.k8s.aws/instance-accelerator-manufacturer";
pub const INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";

/// Set on a node while it drains so load balancers stop sending it traffic.
pub const EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";

// ---- well-known values ---------------------------------------------------------------------

pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";
pub const ARCH_AMD64: &str = "amd64";
pub const ARCH_ARM64: &str = "arm64";
pub const OS_LINUX: &str = "linux";
pub const OS_WINDOWS: &str = "windows";

// ---- annotations ---------------------------------------------------------------------------

pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
pub const NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
/// Current `NodePool` hash version; a change re-stamps NodeClaims instead of drifting them.
/// Karpenter v1.5 writes `v3`; our hash covers the same fields with another algorithm
/// (`crate::domain::nodepool_hash`), so it carries its own version and a switch between the two
/// re-stamps NodeClaims instead of drifting every node.
pub const NODEPOOL_HASH_VERSION_VALUE: &str = "v3-rs1";
pub const NODECLAIM_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
pub const EC2NODECLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
pub const EC2NODECLASS_HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";
/// Current `EC2NodeClass` hash version. Not Karpenter's `v4`: our hash encoding differs from
/// Go's `hashstructure`, so a class stamped by Karpenter must look like an older version, which
/// re-stamps its NodeClaims instead of drifting them (`crate::domain::nodeclass_hash`).
pub const EC2NODECLASS_HASH_VERSION_VALUE: &str = "v4-rs1";
pub const TAGGED: &str = "karpenter.k8s.aws/tagged";
pub const CLUSTER_NAME_TAGGED: &str = "compatibility.karpenter.k8s.aws/cluster-name-tagged";
/// A `NodePool` carrying this annotation was converted from v1beta1 and may not be served.
pub const V1BETA1_KUBELET_CONVERSION: &str =
    "compatibility.karpenter.k8s.aws/v1beta1-kubelet-conversion";

// ---- taints --------------------------------------------------------------------------------

/// `NoSchedule` taint put on a node that Karpenter is disrupting.
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
/// `NoExecute` taint the kubelet registers with and Karpenter removes at registration.
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";

// ---- finalizers ----------------------------------------------------------------------------

/// On `NodeClaim`s and `Node`s: the instance is terminated before the object goes.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
/// On `EC2NodeClass`es: instance profile and launch templates are cleaned up first.
pub const EC2NODECLASS_TERMINATION_FINALIZER: &str = "karpenter.k8s.aws/termination";

// ---- EC2 tags ------------------------------------------------------------------------------

pub const TAG_EKS_CLUSTER_NAME: &str = "eks:eks-cluster-name";
/// Prefix of `kubernetes.io/cluster/<name>=owned`.
pub const TAG_CLUSTER_PREFIX: &str = "kubernetes.io/cluster/";
pub const TAG_NODEPOOL: &str = NODEPOOL;
pub const TAG_NODECLAIM: &str = "karpenter.sh/nodeclaim";
pub const TAG_EC2NODECLASS: &str = EC2NODECLASS;
pub const TAG_NAME: &str = "Name";

// ---- extended resources (AWS) ---------------------------------------------------------------

/// Extended resources AWS instance types offer (Karpenter's `pkg/apis/v1/labels.go`), counted
/// in whole devices or interfaces.
pub const RESOURCE_NVIDIA_GPU: &str = "nvidia.com/gpu";
pub const RESOURCE_AMD_GPU: &str = "amd.com/gpu";
pub const RESOURCE_AWS_NEURON: &str = "aws.amazon.com/neuron";
pub const RESOURCE_AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
pub const RESOURCE_HABANA_GAUDI: &str = "habana.ai/gaudi";
pub const RESOURCE_EFA: &str = "vpc.amazonaws.com/efa";
pub const RESOURCE_AWS_POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
pub const RESOURCE_PRIVATE_IPV4_ADDRESS: &str = "vpc.amazonaws.com/PrivateIPv4Address";

// ---- label key rules -----------------------------------------------------------------------

/// Labels the scheduler understands that are not AWS-specific (see [`AWS_WELL_KNOWN_LABELS`]).
pub const CORE_WELL_KNOWN_LABELS: &[&str] = &[
    NODEPOOL,
    CAPACITY_TYPE,
    INSTANCE_TYPE,
    ARCH,
    OS,
    ZONE,
    REGION,
    WINDOWS_BUILD,
    ZONE_ID,
];

/// Whether the scheduler understands this label, so users may require it even in a restricted
/// domain.
#[must_use]
pub fn is_well_known(key: &str) -> bool {
    CORE_WELL_KNOWN_LABELS.contains(&key) || AWS_WELL_KNOWN_LABELS.contains(&key)
}

/// Deprecated label keys and the stable keys they mean: Karpenter's `NormalizedLabels` and the
/// EBS CSI driver's zone key the AWS provider adds to them (`pkg/operator/operator.go`).
pub const NORMALIZED_LABELS: &[(&str, &str)] = &[
    ("failure-domain.beta.kubernetes.io/zone", ZONE),
    ("topology.ebs.csi.aws.com/zone", ZONE),
    ("failure-domain.beta.kubernetes.io/region", REGION),
    ("beta.kubernetes.io/arch", ARCH),
    ("beta.kubernetes.io/os", OS),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE),
];

/// The stable key for a possibly deprecated label key.
#[must_use]
pub fn normalize(key: &str) -> &str {
    NORMALIZED_LABELS
        .iter()
        .find(|(old, _)| *old == key)
        .map_or(key, |(_, new)| new)
}

/// The domain part of a label key (`a.b/c` has domain `a.b`; a key without `/` has none).
#[must_use]
pub fn domain(key: &str) -> Option<&str> {
    key.split_once('/').map(|(domain, _)| domain)
}

/// Where a label key may be used: node templates can set fewer keys than requirements can
/// select on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelUse {
    /// `spec.template.metadata.labels` of a `NodePool`.
    TemplateLabel,
    /// A requirement key of a `NodePool`.
    NodePoolRequirement,
    /// A requirement key of a `NodeClaim` (which may name its own `NodePool`).
    NodeClaimRequirement,
}

/// Why a label key is refused, with the same wording as Karpenter's CRD rules, or `None` when
/// the key is allowed for this use.
#[must_use]
pub fn restriction(key: &str, usage: LabelUse) -> Option<&'static str> {
    if key == NODEPOOL && usage != LabelUse::NodeClaimRequirement {
        return Some("label \"karpenter.sh/nodepool\" is restricted");
    }
    if key == HOSTNAME {
        return Some("label \"kubernetes.io/hostname\" is restricted");
    }
    let domain = domain(key).unwrap_or("");
    let kubernetes_io_allowed: &[&str] = match usage {
        LabelUse::TemplateLabel => &[
            "beta.kubernetes.io/instance-type",
            "failure-domain.beta.kubernetes.io/region",
            "beta.kubernetes.io/os",
            "beta.kubernetes.io/arch",
            "failure-domain.beta.kubernetes.io/zone",
            ZONE,
            REGION,
            ARCH,
            OS,
            WINDOWS_BUILD,
        ],
        LabelUse::NodePoolRequirement | LabelUse::NodeClaimRequirement => &[
            "beta.kubernetes.io/instance-type",
            "failure-domain.beta.kubernetes.io/region",
            "beta.kubernetes.io/os",
            "beta.kubernetes.io/arch",
            "failure-domain.beta.kubernetes.io/zone",
            ZONE,
            REGION,
            INSTANCE_TYPE,
            ARCH,
            OS,
            WINDOWS_BUILD,
        ],
    };
    if domain.ends_with("kubernetes.io")
        && !kubernetes_io_allowed.contains(&key)
        && !domain.ends_with("node.kubernetes.io")
        && !domain.ends_with("node-restriction.kubernetes.io")
    {
        return Some("label domain \"kubernetes.io\" is restricted");
    }
    if domain.ends_with("k8s.io") && !domain.ends_with("kops.k8s.io") {
        return Some("label domain \"k8s.io\" is restricted");
    }
    if domain.ends_with("karpenter.sh") && key != CAPACITY_TYPE && key != NODEPOOL {
        return Some("label domain \"karpenter.sh\" is restricted");
    }
    if domain.ends_with("karpenter.k8s.aws") && !AWS_WELL_KNOWN_LABELS.contains(&key) {
        return Some("label domain \"karpenter.k8s.aws\" is restricted");
    }
    None
}

/// The `karpenter.k8s.aws` labels users may set or require.
pub const AWS_WELL_KNOWN_LABELS: &[&str] = &[
    CAPACITY_RESERVATION_ID,
    EC2NODECLASS,
    INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
    INSTANCE_CATEGORY,
    INSTANCE_HYPERVISOR,
    INSTANCE_FAMILY,
    INSTANCE_GENERATION,
    INSTANCE_LOCAL_NVME,
    INSTANCE_SIZE,
    INSTANCE_CPU,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    INSTANCE_MEMORY,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_MEMORY,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT,
];

/// The well-known values of a label whose values Karpenter knows in advance (core#2164): a
/// requirement on such a key must name at least one of them.
#[must_use]
pub fn known_values(key: &str) -> Option<&'static [&'static str]> {
    (key == CAPACITY_TYPE).then_some(
        &[
            CAPACITY_TYPE_ON_DEMAND,
            CAPACITY_TYPE_SPOT,
            CAPACITY_TYPE_RESERVED,
        ][..],
    )
}

/// The value of annotation `key` of an object, if set.
#[must_use]
pub fn annotation<'a>(meta: &'a impl super::MetaFields, key: &str) -> Option<&'a str> {
    meta.annotation(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_labels_refuse_restricted_domains() {
        for key in [
            "kubernetes.io/custom",
            "foo.k8s.io/x",
            "karpenter.sh/other",
            "karpenter.k8s.aws/nope",
            HOSTNAME,
            NODEPOOL,
        ] {
            assert!(restriction(key, LabelUse::TemplateLabel).is_some(), "{key}");
        }
    }

    #[test]
    fn exception_domains_and_well_known_labels_are_allowed() {
        for key in [
            "node.kubernetes.io/role",
            "node-restriction.kubernetes.io/team",
            "kops.k8s.io/group",
            CAPACITY_TYPE,
            ZONE,
            INSTANCE_FAMILY,
            "example.com/team",
            "team",
        ] {
            assert_eq!(restriction(key, LabelUse::TemplateLabel), None, "{key}");
        }
    }

    #[test]
    fn only_nodeclaims_may_require_their_nodepool() {
        assert!(restriction(NODEPOOL, LabelUse::NodePoolRequirement).is_some());
        assert_eq!(restriction(NODEPOOL, LabelUse::NodeClaimRequirement), None);
    }

    #[test]
    fn aws_instance_labels_are_well_known() {
        assert!(is_well_known(INSTANCE_GPU_COUNT));
        assert!(is_well_known(ZONE_ID));
        assert!(!is_well_known("example.com/team"));
    }

    #[test]
    fn deprecated_keys_normalize_to_stable_keys() {
        assert_eq!(normalize("failure-domain.beta.kubernetes.io/zone"), ZONE);
        assert_eq!(normalize("topology.ebs.csi.aws.com/zone"), ZONE);
        assert_eq!(normalize("example.com/x"), "example.com/x");
    }
}
