//! User data for every AMI family, merged with the user's `spec.userData` (reference 4.5).
//!
//! Data flow: the launch-template work resolves a [`UserDataInput`] per (AMI, max pods) group —
//! cluster facts from the daemon's startup ([`ClusterInfo`]), the EC2NodeClass kubelet settings,
//! the group's max pods, the labels from [`launch_labels`] and the NodeClaim's taints and
//! startup taints — and calls [`render`] with the class's AMI family. The result is the plain
//! text; [`UserData::to_base64`] is what `CreateLaunchTemplate` takes. A [`UserDataError`] means
//! the class cannot launch (bad user data, missing cluster facts); the `NodeClass` work turns it
//! into a condition with its message.
//!
//! | family | format | module |
//! |---|---|---|
//! | AL2 | MIME multipart: the user's parts, then `/etc/eks/bootstrap.sh` | [`al2`] |
//! | AL2023 | MIME multipart: the user's parts, then a nodeadm `NodeConfig` | [`al2023`] |
//! | Bottlerocket | TOML: Karpenter's `[settings.kubernetes]` merged into the user's | [`bottlerocket`] |
//! | Windows2019/2022 | `<powershell>`: the user's script, then `Start-EKSBootstrap.ps1` | [`windows`] |
//! | Custom | the user data verbatim | here |
//!
//! Every family but `Custom` registers the taints through the kubelet and labels the node
//! `karpenter.sh/do-not-sync-taints=true`; labels in `node-restriction.kubernetes.io` and
//! `kops.k8s.io` are never passed to the kubelet. Maps render sorted, so equal inputs give
//! byte-equal output.

pub mod al2;
pub mod al2023;
pub mod bottlerocket;
mod kubelet;
pub mod labels;
pub mod mime;
pub mod windows;

use std::collections::BTreeMap;
use std::net::IpAddr;

use base64::Engine as _;

pub use self::labels::{is_restricted_node_label, launch_labels};
pub use self::mime::MimeError;
use crate::apis::ec2nodeclass::{AmiFamily, InstanceStorePolicy, KubeletConfiguration};
use crate::apis::taints::Taint;

/// Facts about the cluster, found once at startup (settings, `DescribeCluster`, the kube-dns
/// Service).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterInfo {
    /// `CLUSTER_NAME`.
    pub name: String,
    /// The API server URL (`CLUSTER_ENDPOINT` or `DescribeCluster`).
    pub endpoint: String,
    /// Base64 PEM of the cluster CA; nodes fetch it themselves when absent.
    pub ca_bundle: Option<String>,
    /// The cluster DNS service addresses, used when `kubelet.clusterDNS` is empty.
    pub dns_ips: Vec<IpAddr>,
    /// The Kubernetes service CIDR (`10.100.0.0/16`); AL2023's nodeadm cannot join without it.
    pub service_cidr: Option<String>,
}

/// Everything one launch template's user data depends on besides the AMI family.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserDataInput {
    pub cluster: ClusterInfo,
    /// `spec.kubelet` of the EC2NodeClass (default when unset).
    pub kubelet: KubeletConfiguration,
    /// Max pods of the instance type group, used when `kubelet.maxPods` is unset.
    pub max_pods: i32,
    /// Node labels, usually from [`launch_labels`].
    pub labels: BTreeMap<String, String>,
    /// The NodeClaim's taints, then its startup taints; `karpenter.sh/unregistered:NoExecute`
    /// is added when missing.
    pub taints: Vec<Taint>,
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// `spec.userData` of the EC2NodeClass.
    pub user_data: Option<String>,
}

/// Rendered user data, as plain text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserData(String);

impl UserData {
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    #[must_use]
    pub fn into_string(self) -> String {
        self.0
    }

    /// Standard base64, as EC2 launch templates carry user data.
    #[must_use]
    pub fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.0.as_bytes())
    }
}

/// Why user data cannot be rendered. Every variant names the family.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserDataError {
    #[error("{} user data is not a valid MIME multipart archive: {reason}", .family.as_str())]
    InvalidMime {
        family: AmiFamily,
        reason: MimeError,
    },
    #[error("{} user data is not valid TOML: {reason}", .family.as_str())]
    InvalidToml { family: AmiFamily, reason: String },
    #[error("{} user data: `{key}` must be a table, found {found}", .family.as_str())]
    TomlNotATable {
        family: AmiFamily,
        key: String,
        found: &'static str,
    },
    #[error("{} user data: {location} is not a valid nodeadm NodeConfig: {reason}", .family.as_str())]
    InvalidNodeConfig {
        family: AmiFamily,
        location: String,
        reason: al2023::NodeConfigError,
    },
    #[error("{} user data: {reason}", .family.as_str())]
    InvalidPowerShell {
        family: AmiFamily,
        reason: windows::PowerShellError,
    },
    #[error("{} user data needs the cluster's service CIDR, which is not known yet", .family.as_str())]
    MissingClusterCidr { family: AmiFamily },
    #[error("{} user data: cluster service CIDR {value:?} is not an address/prefix", .family.as_str())]
    InvalidClusterCidr { family: AmiFamily, value: String },
    #[error("{} user data: cluster CA bundle is not base64: {reason}", .family.as_str())]
    InvalidCaBundle { family: AmiFamily, reason: String },
    #[error("{} user data: cluster DNS address {value:?} is not an IP address", .family.as_str())]
    InvalidClusterDns { family: AmiFamily, value: String },
    #[error("{} user data could not be written: {reason}", .family.as_str())]
    Encode { family: AmiFamily, reason: String },
    #[error("{} user data: kubelet evictionSoftGracePeriod[{signal}] {value:?} is not a duration: {reason}", .family.as_str())]
    InvalidGracePeriod {
        family: AmiFamily,
        signal: String,
        value: String,
        reason: String,
    },
}

impl UserDataError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidMime { .. }
            | Self::InvalidToml { .. }
            | Self::TomlNotATable { .. }
            | Self::InvalidNodeConfig { .. }
            | Self::InvalidPowerShell { .. } => "invalid_user_data",
            Self::MissingClusterCidr { .. } => "cluster_cidr_unknown",
            Self::InvalidClusterCidr { .. }
            | Self::InvalidCaBundle { .. }
            | Self::InvalidClusterDns { .. } => "invalid_cluster_info",
            Self::InvalidGracePeriod { .. } => "invalid_kubelet_configuration",
            Self::Encode { .. } => "encode_failed",
        }
    }

    /// Whether the user's `spec.userData` is at fault (rather than the cluster facts or the
    /// kubelet settings).
    #[must_use]
    pub fn is_user_data_error(&self) -> bool {
        self.category() == "invalid_user_data"
    }
}

/// Renders the user data of `family` for `input`.
pub fn render(family: AmiFamily, input: &UserDataInput) -> Result<UserData, UserDataError> {
    let text = match family {
        AmiFamily::AL2 => al2::render(input)?,
        AmiFamily::AL2023 => al2023::render(input)?,
        AmiFamily::Bottlerocket => bottlerocket::render(input)?,
        AmiFamily::Windows2019 | AmiFamily::Windows2022 => windows::render(family, input)?,
        // Custom AMIs bootstrap themselves: labels, taints and the unregistered taint are the
        // user's to register.
        AmiFamily::Custom => input.user_data.clone().unwrap_or_default(),
    };
    Ok(UserData(text))
}
