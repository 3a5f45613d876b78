//! Bottlerocket: TOML settings. Karpenter's `[settings.kubernetes]` keys are merged into the
//! user's document (Karpenter's `bottlerocket.go`, with v1.5's soft eviction keys).
//!
//! Merge rules, as Karpenter's: `api-server`, `cluster-name` and `max-pods` are always ours;
//! `cluster-certificate` and `cluster-dns-ip` are ours when known; `node-labels` are the user's
//! overridden by ours; `node-taints` are exactly ours (the NodePool owns taints); each kubelet
//! setting of the EC2NodeClass (reservations, eviction thresholds and grace periods, image GC
//! thresholds, CFS quota) replaces the user's key when set and leaves it alone otherwise. With
//! `instanceStorePolicy: RAID0` a bootstrap command mounts the instance stores.
//!
//! Unlike Karpenter, which re-encodes `settings.kubernetes` through a fixed struct and so drops
//! keys it does not know, every other key of the user's document passes through: new Bottlerocket
//! settings (`single-process-oom-kill` in v1.5) need no release of ours. Output keys are sorted.

use std::collections::BTreeMap;

use toml::{Table, Value};

use super::kubelet::ResolvedKubelet;
use super::{UserDataError, UserDataInput};
use crate::apis::ec2nodeclass::{AmiFamily, InstanceStorePolicy};

const FAMILY: AmiFamily = AmiFamily::Bottlerocket;
/// Name of the bootstrap command that stripes and mounts instance-store disks.
const MOUNT_INSTANCE_STORAGE_COMMAND: &str = "000-mount-instance-storage";
/// Directories bound to the instance-store array.
const INSTANCE_STORAGE_DIRS: &[&str] =
    &["/var/lib/containerd", "/var/lib/kubelet", "/var/log/pods"];

pub(crate) fn render(input: &UserDataInput) -> Result<String, UserDataError> {
    let kubelet = ResolvedKubelet::resolve(FAMILY, input)?;
    let mut document: Table = match input.user_data.as_deref() {
        None => Table::new(),
        Some(text) => text
            .parse::<Table>()
            .map_err(|error| UserDataError::InvalidToml {
                family: FAMILY,
                reason: describe_toml_error(text, &error),
            })?,
    };
    let settings = table_at(&mut document, "settings", "settings")?;
    merge_kubernetes(
        table_at(settings, "kubernetes", "settings.kubernetes")?,
        input,
        &kubelet,
    )?;
    if input.instance_store_policy == Some(InstanceStorePolicy::RAID0) {
        let commands = table_at(
            settings,
            "bootstrap-commands",
            "settings.bootstrap-commands",
        )?;
        commands.insert(
            MOUNT_INSTANCE_STORAGE_COMMAND.to_owned(),
            Value::Table(mount_instance_storage()),
        );
    }
    toml::to_string(&document).map_err(|error| UserDataError::Encode {
        family: FAMILY,
        reason: error.to_string(),
    })
}

fn merge_kubernetes(
    kubernetes: &mut Table,
    input: &UserDataInput,
    kubelet: &ResolvedKubelet<'_>,
) -> Result<(), UserDataError> {
    let cluster = &input.cluster;
    let config = kubelet.config;
    set(kubernetes, "api-server", cluster.endpoint.as_str());
    set(kubernetes, "cluster-name", cluster.name.as_str());
    if let Some(ca) = &cluster.ca_bundle {
        set(kubernetes, "cluster-certificate", ca.as_str());
    }
    if let Some(dns) = kubelet.first_cluster_dns() {
        set(kubernetes, "cluster-dns-ip", dns);
    }
    set(kubernetes, "max-pods", i64::from(kubelet.max_pods));

    let labels = table_at(kubernetes, "node-labels", "settings.kubernetes.node-labels")?;
    for (key, value) in &kubelet.labels {
        labels.insert(key.clone(), Value::from(value.as_str()));
    }

    let mut taints: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for taint in &kubelet.taints {
        taints
            .entry(taint.key.as_str())
            .or_default()
            .push(Value::from(format!(
                "{}:{}",
                taint.value.as_deref().unwrap_or_default(),
                taint.effect.as_str()
            )));
    }
    set(
        kubernetes,
        "node-taints",
        taints
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value::Array(v)))
            .collect::<Table>(),
    );

    let maps = [
        ("system-reserved", config.system_reserved.as_ref()),
        ("kube-reserved", config.kube_reserved.as_ref()),
        ("eviction-hard", config.eviction_hard.as_ref()),
        ("eviction-soft", config.eviction_soft.as_ref()),
        (
            "eviction-soft-grace-period",
            kubelet.eviction_soft_grace_period.as_ref(),
        ),
    ];
    for (key, map) in maps {
        match map {
            // An empty map clears the user's setting, as Karpenter's omitted empty map does.
            Some(map) if map.is_empty() => {
                kubernetes.remove(key);
            }
            Some(map) => set(kubernetes, key, string_table(map)),
            None => {}
        }
    }
    if let Some(period) = config.eviction_max_pod_grace_period {
        set(
            kubernetes,
            "eviction-max-pod-grace-period",
            i64::from(period),
        );
    }
    // Bottlerocket types the image GC thresholds as strings.
    if let Some(high) = config.image_gc_high_threshold_percent {
        set(
            kubernetes,
            "image-gc-high-threshold-percent",
            high.to_string(),
        );
    }
    if let Some(low) = config.image_gc_low_threshold_percent {
        set(
            kubernetes,
            "image-gc-low-threshold-percent",
            low.to_string(),
        );
    }
    if let Some(quota) = config.cpu_cfs_quota {
        set(kubernetes, "cpu-cfs-quota-enforced", quota);
    }
    Ok(())
}

/// The parser's message with the line it points at.
fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end();
    match error.span() {
        Some(span) => {
            let line = text
                .get(..span.start)
                .map_or(0, |before| before.matches('\n').count())
                + 1;
            format!("line {line}: {message}")
        }
        None => message.to_owned(),
    }
}

fn mount_instance_storage() -> Table {
    let mut bind = vec!["apiclient", "ephemeral-storage", "bind", "--dirs"];
    bind.extend_from_slice(INSTANCE_STORAGE_DIRS);
    let commands = [vec!["apiclient", "ephemeral-storage", "init"], bind]
        .into_iter()
        .map(|command| Value::Array(command.into_iter().map(Value::from).collect()))
        .collect();
    let mut table = Table::new();
    table.insert("commands".to_owned(), Value::Array(commands));
    table.insert("essential".to_owned(), Value::Boolean(true));
    table.insert("mode".to_owned(), Value::from("always"));
    table
}

fn set(table: &mut Table, key: &str, value: impl Into<Value>) {
    table.insert(key.to_owned(), value.into());
}

fn string_table(map: &BTreeMap<String, String>) -> Table {
    map.iter()
        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
        .collect()
}

/// The table under `key`, created when missing; an error when the user put something else there.
fn table_at<'t>(
    parent: &'t mut Table,
    key: &str,
    path: &str,
) -> Result<&'t mut Table, UserDataError> {
    let value = parent
        .entry(key.to_owned())
        .or_insert_with(|| Value::Table(Table::new()));
    match value {
        Value::Table(table) => Ok(table),
        other => Err(UserDataError::TomlNotATable {
            family: FAMILY,
            key: path.to_owned(),
            found: other.type_str(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn rendered(input: &UserDataInput) -> Table {
        render(input).unwrap().parse().unwrap()
    }

    #[test]
    fn an_empty_kubelet_map_clears_the_users_setting_and_an_unset_one_keeps_it() {
        let mut input = UserDataInput {
            user_data: Some("[settings.kubernetes.eviction-hard]\n\"memory.available\" = \"12%\"\n[settings.kubernetes.kube-reserved]\ncpu = \"1\"\n".into()),
            ..UserDataInput::default()
        };
        input.kubelet.eviction_hard = Some(BTreeMap::new());
        let doc = rendered(&input);
        let kubernetes = doc["settings"]["kubernetes"].as_table().unwrap();
        assert!(!kubernetes.contains_key("eviction-hard"));
        assert_eq!(kubernetes["kube-reserved"]["cpu"].as_str(), Some("1"));
    }

    #[test]
    fn the_users_certificate_stays_when_the_cluster_ca_is_unknown() {
        let input = UserDataInput {
            user_data: Some("[settings.kubernetes]\ncluster-certificate = \"user-ca\"\n".into()),
            ..UserDataInput::default()
        };
        let doc = rendered(&input);
        assert_eq!(
            doc["settings"]["kubernetes"]["cluster-certificate"].as_str(),
            Some("user-ca")
        );
        assert!(
            doc["settings"]["kubernetes"]
                .get("cluster-dns-ip")
                .is_none()
        );
    }
}
