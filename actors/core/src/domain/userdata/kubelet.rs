//! The kubelet settings every family renders, resolved once from a [`UserDataInput`]: the
//! effective cluster DNS and max pods, eviction grace periods in Go's duration format, the
//! labels after Karpenter's filtering and injection, the taints with `karpenter.sh/unregistered`,
//! and the `--flag=value` list that AL2 and Windows pass to the kubelet.
//!
//! Maps are `BTreeMap`s, so every list comes out sorted and the rendered user data (and the
//! launch template hash over it) is stable.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use karpenter_config::{format_go_duration, parse_go_duration};

use super::{UserDataError, UserDataInput, labels};
use crate::apis::ec2nodeclass::{AmiFamily, KubeletConfiguration};
use crate::apis::taints::Taint;

/// What the renderers need, validated and resolved.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedKubelet<'a> {
    pub config: &'a KubeletConfiguration,
    /// `kubelet.clusterDNS` when set, else the cluster's DNS service addresses.
    pub cluster_dns: Vec<String>,
    /// Whether the first cluster DNS address is IPv6 (AL2 then bootstraps with `--ip-family ipv6`).
    pub ipv6: bool,
    /// `kubelet.maxPods` when set, else the instance type group's.
    pub max_pods: i32,
    /// `evictionSoftGracePeriod` with values in Go's `Duration.String` form (`1m0s`).
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
}

impl<'a> ResolvedKubelet<'a> {
    pub fn resolve(family: AmiFamily, input: &'a UserDataInput) -> Result<Self, UserDataError> {
        let config = &input.kubelet;
        let cluster_dns: Vec<String> = if config.cluster_dns.is_empty() {
            input
                .cluster
                .dns_ips
                .iter()
                .map(ToString::to_string)
                .collect()
        } else {
            config.cluster_dns.clone()
        };
        let mut ipv6 = false;
        for (index, value) in cluster_dns.iter().enumerate() {
            let address: IpAddr =
                value
                    .trim()
                    .parse()
                    .map_err(|_| UserDataError::InvalidClusterDns {
                        family,
                        value: value.clone(),
                    })?;
            if index == 0 {
                ipv6 = address.is_ipv6();
            }
        }
        let eviction_soft_grace_period = config
            .eviction_soft_grace_period
            .as_ref()
            .map(|periods| {
                periods
                    .iter()
                    .map(|(signal, value)| {
                        parse_go_duration(value)
                            .map(|d| (signal.clone(), format_go_duration(d)))
                            .map_err(|error| UserDataError::InvalidGracePeriod {
                                family,
                                signal: signal.clone(),
                                value: value.clone(),
                                reason: error.kind().to_string(),
                            })
                    })
                    .collect::<Result<BTreeMap<_, _>, _>>()
            })
            .transpose()?;
        Ok(Self {
            config,
            cluster_dns,
            ipv6,
            max_pods: config.max_pods.unwrap_or(input.max_pods),
            eviction_soft_grace_period,
            labels: labels::node_labels(family, &input.labels),
            taints: labels::registered_taints(&input.taints),
        })
    }

    /// The first cluster DNS address, which every family but AL2023 passes on its own.
    pub fn first_cluster_dns(&self) -> Option<&str> {
        self.cluster_dns.first().map(String::as_str)
    }

    /// `--node-labels="a=b,c=d"`, or `None` without labels.
    pub fn node_labels_flag(&self) -> Option<String> {
        if self.labels.is_empty() {
            return None;
        }
        let joined = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        Some(format!("--node-labels={}", go_quote(&joined)))
    }

    /// The kubelet flags AL2 and Windows pass through their bootstrap scripts, in Karpenter's
    /// order; map-valued flags list their entries sorted by key.
    pub fn extra_args(&self) -> Vec<String> {
        let config = self.config;
        let mut args: Vec<String> = Vec::new();
        args.extend(self.node_labels_flag());
        let taints = self
            .taints
            .iter()
            .map(taint_string)
            .collect::<Vec<_>>()
            .join(",");
        args.push(format!("--register-with-taints={}", go_quote(&taints)));
        args.push(format!("--max-pods={}", self.max_pods));
        if let Some(pods_per_core) = config.pods_per_core {
            args.push(format!("--pods-per-core={pods_per_core}"));
        }
        let maps = [
            ("--system-reserved", config.system_reserved.as_ref(), "="),
            ("--kube-reserved", config.kube_reserved.as_ref(), "="),
            ("--eviction-hard", config.eviction_hard.as_ref(), "<"),
            ("--eviction-soft", config.eviction_soft.as_ref(), "<"),
            (
                "--eviction-soft-grace-period",
                self.eviction_soft_grace_period.as_ref(),
                "=",
            ),
        ];
        for (flag, map, separator) in maps {
            if let Some(map) = map.filter(|m| !m.is_empty()) {
                let joined = map
                    .iter()
                    .map(|(k, v)| format!("{k}{separator}{v}"))
                    .collect::<Vec<_>>()
                    .join(",");
                args.push(format!("{flag}={}", go_quote(&joined)));
            }
        }
        if let Some(period) = config.eviction_max_pod_grace_period {
            args.push(format!("--eviction-max-pod-grace-period={period}"));
        }
        if let Some(high) = config.image_gc_high_threshold_percent {
            args.push(format!("--image-gc-high-threshold={high}"));
        }
        if let Some(low) = config.image_gc_low_threshold_percent {
            args.push(format!("--image-gc-low-threshold={low}"));
        }
        if let Some(quota) = config.cpu_cfs_quota {
            args.push(format!("--cpu-cfs-quota={quota}"));
        }
        args
    }
}

/// `key=value:Effect`, or `key:Effect` without a value (Kubernetes' `Taint.ToString`).
pub(crate) fn taint_string(taint: &Taint) -> String {
    match taint.value.as_deref() {
        Some(value) if !value.is_empty() => {
            format!("{}={value}:{}", taint.key, taint.effect.as_str())
        }
        _ => format!("{}:{}", taint.key, taint.effect.as_str()),
    }
}

/// A double-quoted string with Go's `%q` escapes for the characters that can occur here.
pub(crate) fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A single-quoted bash word: `it's` becomes `'it'\''s'`.
pub(crate) fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// A single-quoted `PowerShell` string: `it's` becomes `'it''s'`.
pub(crate) fn powershell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_quote_escapes_quotes_backslashes_and_controls() {
        assert_eq!(go_quote("a=b,c"), "\"a=b,c\"");
        assert_eq!(
            go_quote("say \"hi\"\\\n\u{1}"),
            "\"say \\\"hi\\\"\\\\\\n\\x01\""
        );
    }

    #[test]
    fn single_quotes_survive_shell_and_powershell_quoting() {
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(powershell_quote("it's"), "'it''s'");
    }
}
