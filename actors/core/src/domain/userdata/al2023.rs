//! AL2023: a MIME multipart archive whose last part is a nodeadm `NodeConfig`
//! (`application/node.eks.aws`) with the cluster, the kubelet configuration and the node-label
//! flag (Karpenter's `nodeadm.go`). nodeadm merges every `NodeConfig` part in order, so the
//! user's parts come first and Karpenter's settings win.
//!
//! User data that is not MIME is a `NodeConfig` when it parses as a YAML mapping, else a shell
//! script. A `NodeConfig` that does not parse is an error here rather than a node that never
//! joins: every `application/node.eks.aws` part must hold YAML mappings, and non-MIME user data
//! that declares `apiVersion: node.eks.aws/...` or `kind: NodeConfig` must parse.

use std::collections::BTreeMap;
use std::net::IpAddr;

use base64::Engine as _;
use serde_json::{Map, Value};

use super::al2::SHELL_SCRIPT_CONTENT_TYPE;
use super::kubelet::ResolvedKubelet;
use super::mime::{self, Part};
use super::{UserDataError, UserDataInput};
use crate::apis::ec2nodeclass::{AmiFamily, InstanceStorePolicy};
use crate::yaml;

const FAMILY: AmiFamily = AmiFamily::AL2023;
/// Content type of nodeadm configuration parts.
pub const NODE_CONFIG_CONTENT_TYPE: &str = "application/node.eks.aws";
const NODE_CONFIG_API_VERSION: &str = "node.eks.aws/v1alpha1";
const NODE_CONFIG_KIND: &str = "NodeConfig";
/// First line of Karpenter's part, so a reader of the instance's user data can tell it apart.
const GENERATED_HEADER: &str = "# Karpenter Generated NodeConfig";

pub(crate) fn render(input: &UserDataInput) -> Result<String, UserDataError> {
    let kubelet = ResolvedKubelet::resolve(FAMILY, input)?;
    let node_config = node_config(input, &kubelet)?;
    let mut parts = user_parts(input.user_data.as_deref())?;
    parts.push(Part::new(NODE_CONFIG_CONTENT_TYPE, node_config));
    Ok(mime::serialize(&parts))
}

fn user_parts(user_data: Option<&str>) -> Result<Vec<Part>, UserDataError> {
    let text = match user_data {
        None | Some("") => return Ok(Vec::new()),
        Some(text) => text,
    };
    if mime::looks_like_mime(text) {
        let parts = mime::parse(text).map_err(|reason| UserDataError::InvalidMime {
            family: FAMILY,
            reason,
        })?;
        for (index, part) in parts.iter().enumerate() {
            if part.media_type().as_deref() == Some(NODE_CONFIG_CONTENT_TYPE) {
                check_yaml_mappings(&part.body).map_err(|reason| {
                    UserDataError::InvalidNodeConfig {
                        family: FAMILY,
                        location: format!("MIME part {}", index + 1),
                        reason,
                    }
                })?;
            }
        }
        return Ok(parts);
    }
    match check_yaml_mappings(text) {
        Ok(true) => Ok(vec![Part::new(NODE_CONFIG_CONTENT_TYPE, text)]),
        Err(reason) if declares_node_config(text) => Err(UserDataError::InvalidNodeConfig {
            family: FAMILY,
            location: "the user data".to_owned(),
            reason,
        }),
        // Not YAML, or YAML without a mapping: a script.
        Ok(false) | Err(_) => Ok(vec![Part::new(SHELL_SCRIPT_CONTENT_TYPE, text)]),
    }
}

/// Checks that every YAML document in `text` is a mapping (or empty); `Ok(true)` when at least
/// one mapping was found.
fn check_yaml_mappings(text: &str) -> Result<bool, NodeConfigError> {
    let mut found = false;
    for (index, document) in yaml::documents::<Value>(text).into_iter().enumerate() {
        match document.map_err(|e| NodeConfigError::Yaml(e.to_string()))? {
            Value::Object(_) => found = true,
            Value::Null => {}
            other => {
                return Err(NodeConfigError::NotAMapping {
                    document: index + 1,
                    found: yaml_kind(&other),
                });
            }
        }
    }
    Ok(found)
}

/// Why a nodeadm `NodeConfig` document cannot be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeConfigError {
    /// Not YAML (the parser's message names the line and column).
    #[error("{0}")]
    Yaml(String),
    #[error("YAML document {document} is {found}, not a mapping")]
    NotAMapping {
        document: usize,
        found: &'static str,
    },
}

fn yaml_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

fn declares_node_config(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_end();
        line.starts_with("apiVersion: node.eks.aws/") || line == "kind: NodeConfig"
    })
}

fn node_config(
    input: &UserDataInput,
    kubelet: &ResolvedKubelet<'_>,
) -> Result<String, UserDataError> {
    let cluster = &input.cluster;
    let cidr = cluster
        .service_cidr
        .as_deref()
        .filter(|c| !c.is_empty())
        .ok_or(UserDataError::MissingClusterCidr { family: FAMILY })?;
    if !is_cidr(cidr) {
        return Err(UserDataError::InvalidClusterCidr {
            family: FAMILY,
            value: cidr.to_owned(),
        });
    }

    let mut cluster_config = Map::new();
    insert(
        &mut cluster_config,
        "apiServerEndpoint",
        cluster.endpoint.as_str(),
    );
    if let Some(ca) = cluster.ca_bundle.as_deref().filter(|ca| !ca.is_empty()) {
        insert(
            &mut cluster_config,
            "certificateAuthority",
            normalize_ca(ca)?,
        );
    }
    insert(&mut cluster_config, "cidr", cidr);
    insert(&mut cluster_config, "name", cluster.name.as_str());

    let mut kubelet_config = Map::new();
    insert(
        &mut kubelet_config,
        "config",
        kubelet_configuration(kubelet),
    );
    if let Some(flag) = kubelet.node_labels_flag() {
        insert(&mut kubelet_config, "flags", vec![flag]);
    }

    let mut spec = Map::new();
    insert(&mut spec, "cluster", cluster_config);
    if input.instance_store_policy == Some(InstanceStorePolicy::RAID0) {
        let mut local_storage = Map::new();
        insert(&mut local_storage, "strategy", "RAID0");
        let mut instance = Map::new();
        insert(&mut instance, "localStorage", local_storage);
        insert(&mut spec, "instance", instance);
    }
    insert(&mut spec, "kubelet", kubelet_config);

    let mut document = Map::new();
    insert(&mut document, "apiVersion", NODE_CONFIG_API_VERSION);
    insert(&mut document, "kind", NODE_CONFIG_KIND);
    insert(&mut document, "spec", spec);
    let yaml =
        yaml::to_string(&Value::Object(document)).map_err(|error| UserDataError::Encode {
            family: FAMILY,
            reason: error.to_string(),
        })?;
    Ok(format!("{GENERATED_HEADER}\n{yaml}"))
}

/// The kubelet `config` block: the EC2NodeClass kubelet settings under their
/// `KubeletConfiguration` names, sorted, with the resolved DNS, max pods and taints.
fn kubelet_configuration(kubelet: &ResolvedKubelet<'_>) -> Map<String, Value> {
    let config = kubelet.config;
    let mut fields: BTreeMap<&str, Value> = BTreeMap::new();
    if !kubelet.cluster_dns.is_empty() {
        fields.insert("clusterDNS", Value::from(kubelet.cluster_dns.clone()));
    }
    fields.insert("maxPods", Value::from(kubelet.max_pods));
    let optional_numbers = [
        ("podsPerCore", config.pods_per_core),
        (
            "evictionMaxPodGracePeriod",
            config.eviction_max_pod_grace_period,
        ),
        (
            "imageGCHighThresholdPercent",
            config.image_gc_high_threshold_percent,
        ),
        (
            "imageGCLowThresholdPercent",
            config.image_gc_low_threshold_percent,
        ),
    ];
    for (name, value) in optional_numbers {
        if let Some(value) = value {
            fields.insert(name, Value::from(value));
        }
    }
    if let Some(quota) = config.cpu_cfs_quota {
        fields.insert("cpuCFSQuota", Value::from(quota));
    }
    let maps = [
        ("systemReserved", config.system_reserved.as_ref()),
        ("kubeReserved", config.kube_reserved.as_ref()),
        ("evictionHard", config.eviction_hard.as_ref()),
        ("evictionSoft", config.eviction_soft.as_ref()),
        (
            "evictionSoftGracePeriod",
            kubelet.eviction_soft_grace_period.as_ref(),
        ),
    ];
    for (name, map) in maps {
        if let Some(map) = map.filter(|m| !m.is_empty()) {
            fields.insert(name, string_map(map));
        }
    }
    let taints: Vec<Value> = kubelet
        .taints
        .iter()
        .map(|taint| {
            let mut entry = Map::new();
            insert(&mut entry, "effect", taint.effect.as_str());
            insert(&mut entry, "key", taint.key.as_str());
            if let Some(value) = taint.value.as_deref().filter(|v| !v.is_empty()) {
                insert(&mut entry, "value", value);
            }
            Value::Object(entry)
        })
        .collect();
    fields.insert("registerWithTaints", Value::Array(taints));
    fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn string_map(map: &BTreeMap<String, String>) -> Value {
    Value::Object(
        map.iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect(),
    )
}

/// Every mapping here gets its keys in alphabetical order, so the output is the same whether or
/// not `serde_json` keeps insertion order (its `preserve_order` feature).
fn insert(mapping: &mut Map<String, Value>, key: &str, value: impl Into<Value>) {
    mapping.insert(key.to_owned(), value.into());
}

/// nodeadm wants the CA as base64 of the PEM: decode (ignoring line breaks) and re-encode.
fn normalize_ca(ca: &str) -> Result<String, UserDataError> {
    let compact: String = ca.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let engine = &base64::engine::general_purpose::STANDARD;
    let bytes =
        engine
            .decode(compact.as_bytes())
            .map_err(|error| UserDataError::InvalidCaBundle {
                family: FAMILY,
                reason: error.to_string(),
            })?;
    Ok(engine.encode(bytes))
}

fn is_cidr(text: &str) -> bool {
    let Some((address, prefix)) = text.split_once('/') else {
        return false;
    };
    let Ok(address) = address.parse::<IpAddr>() else {
        return false;
    };
    let max = if address.is_ipv4() { 32 } else { 128 };
    prefix.parse::<u8>().is_ok_and(|p| p <= max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_need_an_address_and_a_prefix_in_range() {
        assert!(is_cidr("10.100.0.0/16"));
        assert!(is_cidr("fd00::/108"));
        assert!(!is_cidr("10.100.0.0"));
        assert!(!is_cidr("10.100.0.0/33"));
        assert!(!is_cidr("cluster/16"));
    }

    #[test]
    fn yaml_mappings_are_node_configs_and_scripts_are_not() {
        assert_eq!(check_yaml_mappings("kind: NodeConfig\n"), Ok(true));
        assert_eq!(
            check_yaml_mappings("#!/bin/bash\necho hi\n"),
            Err(NodeConfigError::NotAMapping {
                document: 1,
                found: "a string"
            })
        );
        assert_eq!(
            check_yaml_mappings("#!/bin/bash\necho hi\n")
                .unwrap_err()
                .to_string(),
            "YAML document 1 is a string, not a mapping"
        );
        assert_eq!(check_yaml_mappings("# only a comment\n"), Ok(false));
        assert_eq!(check_yaml_mappings("a: 1\n---\nb: 2\n"), Ok(true));
    }
}
