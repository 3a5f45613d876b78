//! AL2: a MIME multipart archive whose last part runs `/etc/eks/bootstrap.sh` with the kubelet
//! flags (Karpenter's `eksbootstrap.go`). The user's parts come first, unchanged; user data that
//! is not MIME becomes one `text/x-shellscript` part.

use super::kubelet::{ResolvedKubelet, shell_quote};
use super::mime::{self, Part};
use super::{UserDataError, UserDataInput};
use crate::apis::ec2nodeclass::{AmiFamily, InstanceStorePolicy};

const FAMILY: AmiFamily = AmiFamily::AL2;
/// Content type of shell script parts, as cloud-init and Karpenter spell it.
pub const SHELL_SCRIPT_CONTENT_TYPE: &str = "text/x-shellscript; charset=\"us-ascii\"";
/// The AL2 EKS AMI's bootstrap script.
const BOOTSTRAP_SCRIPT: &str = "/etc/eks/bootstrap.sh";
/// Sends the script's output to a log file and the console, like Karpenter's.
const LOG_REDIRECT: &str =
    "exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1";

pub(crate) fn render(input: &UserDataInput) -> Result<String, UserDataError> {
    let kubelet = ResolvedKubelet::resolve(FAMILY, input)?;
    let mut parts = user_parts(FAMILY, input.user_data.as_deref())?;
    parts.push(Part::new(
        SHELL_SCRIPT_CONTENT_TYPE,
        bootstrap_script(input, &kubelet),
    ));
    Ok(mime::serialize(&parts))
}

/// The user's MIME parts, or their script as one shell part; nothing for empty user data.
pub(crate) fn user_parts(
    family: AmiFamily,
    user_data: Option<&str>,
) -> Result<Vec<Part>, UserDataError> {
    match user_data {
        None | Some("") => Ok(Vec::new()),
        Some(text) if mime::looks_like_mime(text) => {
            mime::parse(text).map_err(|reason| UserDataError::InvalidMime { family, reason })
        }
        Some(text) => Ok(vec![Part::new(SHELL_SCRIPT_CONTENT_TYPE, text)]),
    }
}

fn bootstrap_script(input: &UserDataInput, kubelet: &ResolvedKubelet<'_>) -> String {
    let cluster = &input.cluster;
    let mut script = format!(
        "#!/bin/bash -xe\n{LOG_REDIRECT}\n{BOOTSTRAP_SCRIPT} {} --apiserver-endpoint {}",
        shell_quote(&cluster.name),
        shell_quote(&cluster.endpoint),
    );
    if let Some(ca) = &cluster.ca_bundle {
        script.push_str(" --b64-cluster-ca ");
        script.push_str(&shell_quote(ca));
    }
    let mut continuation = |line: String| {
        script.push_str(" \\\n");
        script.push_str(&line);
    };
    if kubelet.ipv6 {
        continuation("--ip-family ipv6".to_owned());
    }
    if let Some(dns) = kubelet.first_cluster_dns() {
        continuation(format!("--dns-cluster-ip {}", shell_quote(dns)));
    }
    // Max pods is always known (the instance type group's), so the AMI's own table is off.
    continuation("--use-max-pods false".to_owned());
    continuation(format!(
        "--kubelet-extra-args {}",
        shell_quote(&kubelet.extra_args().join(" "))
    ));
    if input.instance_store_policy == Some(InstanceStorePolicy::RAID0) {
        continuation("--local-disks raid0".to_owned());
    }
    script
}
