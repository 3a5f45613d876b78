//! The Helm chart, rendered by the real Helm SDK (`helm-python-sdk` from `PyPI`, through
//! tests/chart/render.py) and checked: strict schema validation on Kubernetes 1.26 and the newest
//! bundled version, `helm lint`, the required cluster name, settings names, least-privilege RBAC
//! and the restricted Pod Security Standard.

#![recursion_limit = "256"]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use clap::CommandFactory as _;
use karpenter::permissions::{self, Permission};
use serde_json::{Value, json};

/// Oldest Kubernetes this release supports, and the newest schema bundled with
/// kubernetes-validate.
const KUBE_VERSIONS: [&str; 2] = ["1.26.0", "1.37.0"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn python() -> PathBuf {
    let venv =
        std::env::var_os("KARPENTER_VENV").map_or_else(|| repo().join(".venv"), PathBuf::from);
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/venv.sh (scripts/test.sh does) to install the Helm SDK",
        python.display()
    );
    python
}

#[derive(Debug)]
struct Rendered {
    error: Option<String>,
    documents: Vec<Value>,
    /// The rendered NOTES.txt.
    notes: String,
    invalid: Vec<Value>,
    unvalidated: Vec<String>,
    lint: Value,
}

impl Rendered {
    fn find(&self, kind: &str) -> Vec<&Value> {
        self.documents
            .iter()
            .filter(|d| d["kind"] == kind)
            .collect()
    }

    fn one(&self, kind: &str) -> &Value {
        let found = self.find(kind);
        assert_eq!(found.len(), 1, "expected one {kind}, got {}", found.len());
        found[0]
    }

    fn container(&self) -> &Value {
        &self.one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    }

    fn env(&self) -> Vec<(String, Value)> {
        self.container()["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_owned(),
                    e.get("value").cloned().unwrap_or(Value::Null),
                )
            })
            .collect()
    }
}

fn render_with(values: &Value, kube_versions: &[&str], lint: bool) -> Rendered {
    render_request(values, kube_versions, lint, &[])
}

/// Renders on a cluster that also serves `api_versions` (`.Capabilities.APIVersions`).
fn render_request(
    values: &Value,
    kube_versions: &[&str],
    lint: bool,
    api_versions: &[&str],
) -> Rendered {
    let request = json!({
        "chart": repo().join("charts/karpenter"),
        "values": values,
        "name": "karpenter",
        "namespace": "kube-system",
        "kube_versions": kube_versions,
        "lint": lint,
        "api_versions": api_versions,
    });
    let mut child = Command::new(python())
        .arg(repo().join("tests/chart/render.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "render.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    Rendered {
        error: report["error"].as_str().map(str::to_owned),
        documents: report["documents"].as_array().cloned().unwrap_or_default(),
        notes: report["notes"].as_str().unwrap_or_default().to_owned(),
        invalid: report["invalid"].as_array().cloned().unwrap_or_default(),
        unvalidated: serde_json::from_value(report["unvalidated"].clone()).unwrap_or_default(),
        lint: report["lint"].clone(),
    }
}

/// Renders `values` on top of a cluster name, validating on both Kubernetes versions.
fn render(values: Value) -> Rendered {
    render_on(values, &[])
}

/// [`render`] on a cluster that also serves `api_versions`.
fn render_on(mut values: Value, api_versions: &[&str]) -> Rendered {
    if values.pointer("/settings/clusterName").is_none() {
        values["settings"]["clusterName"] = json!("my-cluster");
    }
    let rendered = render_request(&values, &KUBE_VERSIONS, false, api_versions);
    assert_eq!(rendered.error, None, "render failed");
    rendered
}

/// What the Prometheus Operator serves.
const MONITORING_API: &str = "monitoring.coreos.com/v1";

#[track_caller]
fn assert_valid(rendered: &Rendered) {
    assert!(
        rendered.invalid.is_empty(),
        "schema violations: {:#?}",
        rendered.invalid
    );
    assert!(
        rendered.unvalidated.is_empty(),
        "objects without a schema: {:?}",
        rendered.unvalidated
    );
}

#[test]
fn rendering_without_a_cluster_name_fails_with_karpenters_message() {
    let rendered = render_with(&json!({}), &[], false);
    let error = rendered.error.expect("render must fail");
    assert!(
        error.contains("Chart cannot be installed without a valid settings.clusterName!"),
        "{error}"
    );
}

#[test]
fn default_values_render_objects_valid_on_1_26_and_the_newest_kubernetes() {
    let rendered = render(json!({}));
    assert_valid(&rendered);
    let kinds: BTreeSet<&str> = rendered
        .documents
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    let expected = [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ];
    assert_eq!(kinds, expected.into_iter().collect());
}

#[test]
fn helm_lint_is_clean() {
    let rendered = render_with(
        &json!({ "settings": { "clusterName": "my-cluster" } }),
        &[],
        true,
    );
    assert_eq!(rendered.lint["errors"], json!([]), "{:#?}", rendered.lint);
    let serious: Vec<&Value> = rendered.lint["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["severity"].as_i64().unwrap_or(0) >= 2)
        .collect();
    assert!(serious.is_empty(), "lint warnings: {serious:#?}");
}

#[test]
fn irsa_annotations_land_on_the_service_account() {
    let arn = "arn:aws:iam::123456789012:role/KarpenterController";
    let rendered = render(
        json!({ "serviceAccount": { "annotations": { "eks.amazonaws.com/role-arn": arn } } }),
    );
    assert_valid(&rendered);
    assert_eq!(
        rendered.one("ServiceAccount")["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        arn
    );
}

#[test]
fn service_monitor_carries_relabelings_and_metric_relabelings() {
    let relabel = json!([{ "action": "replace", "targetLabel": "cluster", "replacement": "prod" }]);
    let drop = json!([{ "action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*" }]);
    let rendered = render_on(
        json!({
            "serviceMonitor": { "enabled": true, "relabelings": relabel, "metricRelabelings": drop,
                                "additionalLabels": { "release": "prometheus" } }
        }),
        &[MONITORING_API],
    );
    let monitor = rendered.one("ServiceMonitor");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "http-metrics");
    assert_eq!(endpoint["relabelings"], relabel);
    assert_eq!(endpoint["metricRelabelings"], drop);
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    // ServiceMonitor is a Prometheus Operator CRD: no bundled schema; everything else validates.
    assert_eq!(
        rendered.unvalidated,
        vec!["ServiceMonitor/karpenter".to_owned()]
    );
    assert!(rendered.invalid.is_empty(), "{:#?}", rendered.invalid);
}

#[test]
fn the_service_monitor_renders_only_where_the_monitoring_api_is_served() {
    // As Karpenter's chart: enabled alone would fail the install on a cluster without the CRD.
    let enabled = json!({ "serviceMonitor": { "enabled": true } });
    assert!(render(enabled.clone()).find("ServiceMonitor").is_empty());
    assert_eq!(
        render_on(enabled, &[MONITORING_API])
            .find("ServiceMonitor")
            .len(),
        1
    );
    let disabled = json!({ "serviceMonitor": { "enabled": false } });
    assert!(
        render_on(disabled, &[MONITORING_API])
            .find("ServiceMonitor")
            .is_empty()
    );
}

#[test]
fn the_interruption_queue_and_templated_settings_become_env() {
    let rendered = render(json!({
        "settings": { "clusterName": "{{ .Release.Name }}-cluster", "interruptionQueue": "{{ .Release.Name }}-queue",
                      "isolatedVPC": true, "featureGates": { "nodeRepair": true } }
    }));
    assert_valid(&rendered);
    let env = rendered.env();
    let value = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    assert_eq!(value("CLUSTER_NAME"), Some(json!("karpenter-cluster")));
    assert_eq!(value("INTERRUPTION_QUEUE"), Some(json!("karpenter-queue")));
    assert_eq!(value("ISOLATED_VPC"), Some(json!("true")));
    assert_eq!(
        value("FEATURE_GATES"),
        Some(json!(
            "ReservedCapacity=false,SpotToSpotConsolidation=false,NodeRepair=true"
        ))
    );
}

#[test]
fn the_debug_endpoints_are_off_unless_enable_profiling_is_set() {
    let name = |rendered: &Rendered| {
        rendered
            .env()
            .into_iter()
            .find(|(n, _)| n == "ENABLE_PROFILING")
            .map(|(_, v)| v)
    };
    let default = render(json!({}));
    assert_valid(&default);
    assert_eq!(name(&default), None);
    let on = render(json!({ "settings": { "enableProfiling": true } }));
    assert_valid(&on);
    assert_eq!(name(&on), Some(json!("true")));
}

#[test]
fn custom_security_profiles_are_added_to_the_hardened_context() {
    let rendered = render(json!({ "controller": { "securityContext": {
        "seLinuxOptions": { "level": "s0:c123,c456" },
        "seccompProfile": { "type": "Localhost", "localhostProfile": "profiles/karpenter.json" },
    } } }));
    assert_valid(&rendered);
    let context = &rendered.container()["securityContext"];
    assert_eq!(context["seLinuxOptions"]["level"], "s0:c123,c456");
    assert_eq!(context["seccompProfile"]["type"], "Localhost");
    assert_eq!(context["readOnlyRootFilesystem"], true);

    // AppArmor fields exist from Kubernetes 1.30: validate against the newest only.
    let mut values = json!({ "controller": { "securityContext": { "appArmorProfile": { "type": "RuntimeDefault" } } } });
    values["settings"]["clusterName"] = json!("my-cluster");
    let newest = render_with(&values, &KUBE_VERSIONS[1..], false);
    assert!(newest.invalid.is_empty(), "{:#?}", newest.invalid);
    assert_eq!(
        newest.container()["securityContext"]["appArmorProfile"]["type"],
        "RuntimeDefault"
    );
}

#[test]
fn extra_env_is_appended_after_the_settings() {
    let rendered = render(
        json!({ "controller": { "env": [{ "name": "AWS_REGION", "value": "eu-west-1" }] } }),
    );
    assert_valid(&rendered);
    let env = rendered.env();
    assert_eq!(
        env.last().map(|(n, v)| (n.as_str(), v.clone())),
        Some(("AWS_REGION", json!("eu-west-1")))
    );
}

#[test]
fn every_env_var_the_chart_sets_is_a_daemon_setting() {
    let settings: BTreeSet<String> = karpenter::cli::Cli::command()
        .find_subcommand("settings")
        .unwrap()
        .get_arguments()
        .filter_map(|arg| arg.get_env().map(|env| env.to_string_lossy().into_owned()))
        .collect();
    let rendered = render(json!({ "settings": {
        "clusterCABundle": "Y2E=", "clusterEndpoint": "https://example.eks.amazonaws.com",
        "isolatedVPC": true, "eksControlPlane": true, "interruptionQueue": "q", "reservedENIs": "1",
    } }));
    let chart_env: BTreeSet<String> = rendered.env().into_iter().map(|(name, _)| name).collect();
    let unknown: Vec<&String> = chart_env.difference(&settings).collect();
    assert!(
        unknown.is_empty(),
        "the chart sets env vars the daemon does not read: {unknown:?}"
    );
    for expected in [
        "CLUSTER_NAME",
        "CLUSTER_ENDPOINT",
        "CLUSTER_CA_BUNDLE",
        "ISOLATED_VPC",
        "EKS_CONTROL_PLANE",
        "VM_MEMORY_OVERHEAD_PERCENT",
        "INTERRUPTION_QUEUE",
        "RESERVED_ENIS",
        "BATCH_MAX_DURATION",
        "BATCH_IDLE_DURATION",
        "PREFERENCE_POLICY",
        "FEATURE_GATES",
        "LOG_LEVEL",
        "METRICS_PORT",
        "HEALTH_PROBE_PORT",
        "MEMORY_LIMIT",
        "SYSTEM_NAMESPACE",
    ] {
        assert!(chart_env.contains(expected), "{expected} not rendered");
    }
}

/// Every (group, resource, verb, name) a role grants.
fn grants(role: &Value) -> Vec<(String, String, String, Option<String>)> {
    let mut out = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        let strings = |field: &str| -> Vec<String> {
            rule[field]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
                .unwrap_or_default()
        };
        let names = strings("resourceNames");
        for group in strings("apiGroups") {
            for resource in strings("resources") {
                for verb in strings("verbs") {
                    if names.is_empty() {
                        out.push((group.clone(), resource.clone(), verb.clone(), None));
                    }
                    for name in &names {
                        out.push((
                            group.clone(),
                            resource.clone(),
                            verb.clone(),
                            Some(name.clone()),
                        ));
                    }
                }
            }
        }
    }
    out
}

fn assert_within(role: &Value, allowed: &[Permission]) {
    for (group, resource, verb, name) in grants(role) {
        assert!(
            permissions::allows(allowed, &group, &resource, &verb, name.as_deref()),
            "{} grants {verb} on {group}/{resource} {name:?}, which src/permissions.rs does not list",
            role["metadata"]["name"]
        );
    }
}

#[test]
fn the_controller_can_read_namespaces_for_affinity_namespace_selectors() {
    // Karpenter's clusterrole-core grants get/list/watch on namespaces: pod (anti-)affinity
    // terms select namespaces by their labels.
    let rendered = render(json!({}));
    let granted: Vec<_> = rendered
        .find("ClusterRole")
        .into_iter()
        .filter(|r| r["metadata"]["name"] == "karpenter-core")
        .flat_map(grants)
        .collect();
    for verb in ["get", "list", "watch"] {
        assert!(
            granted
                .iter()
                .any(|(g, r, v, n)| g.is_empty() && r == "namespaces" && v == verb && n.is_none()),
            "{verb} namespaces"
        );
        assert!(permissions::allows(
            permissions::CLUSTER,
            "",
            "namespaces",
            verb,
            None
        ));
    }
}

#[test]
fn roles_grant_nothing_beyond_the_permissions_the_code_lists() {
    let rendered = render(json!({}));
    for role in rendered.find("ClusterRole") {
        let name = role["metadata"]["name"].as_str().unwrap();
        if name.ends_with("-admin") {
            // The aggregated admin role is for users, not for the controller.
            assert_eq!(
                role["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"],
                "true"
            );
            continue;
        }
        assert_within(role, permissions::CLUSTER);
    }
    for role in rendered.find("Role") {
        assert_within(role, permissions::NAMESPACED);
    }
    // And nothing listed is left ungranted: the chart and the list describe the same set.
    let granted: Vec<_> = rendered
        .find("ClusterRole")
        .into_iter()
        .flat_map(grants)
        .collect();
    for permission in permissions::CLUSTER {
        for resource in permission.resources {
            for verb in permission.verbs {
                assert!(
                    granted
                        .iter()
                        .any(|(g, r, v, _)| g == permission.group && r == resource && v == verb),
                    "{verb} on {}/{resource} is listed but not granted",
                    permission.group
                );
            }
        }
    }
}

#[test]
fn the_controller_pod_meets_the_restricted_pod_security_standard() {
    let rendered = render(json!({}));
    let pod = &rendered.one("Deployment")["spec"]["template"]["spec"];
    assert_eq!(
        pod["securityContext"]["runAsNonRoot"], true,
        "pod runAsNonRoot"
    );
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        assert_ne!(pod[field], true, "{field}");
    }
    assert!(
        pod["volumes"]
            .as_array()
            .is_none_or(|v| v.iter().all(|v| v.get("hostPath").is_none()))
    );
    for container in pod["containers"].as_array().unwrap() {
        let context = &container["securityContext"];
        assert_eq!(context["privileged"], false);
        assert_eq!(context["allowPrivilegeEscalation"], false);
        assert_eq!(context["runAsNonRoot"], true);
        assert_ne!(context["runAsUser"], 0);
        assert_eq!(context["runAsUser"], 65532);
        assert_eq!(context["runAsGroup"], 65532);
        assert_eq!(context["readOnlyRootFilesystem"], true);
        assert_eq!(context["capabilities"]["drop"], json!(["ALL"]));
        assert!(context["capabilities"].get("add").is_none());
        assert!(
            container["ports"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p.get("hostPort").is_none())
        );
    }
}

#[test]
fn probes_resources_and_scheduling_defaults_follow_karpenter() {
    let rendered = render(json!({}));
    let deployment = rendered.one("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = rendered.container();
    assert_eq!(container["args"], json!(["run"]));
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(container["resources"]["requests"]["cpu"].is_string());
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    let node_affinity =
        &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(
        node_affinity["nodeSelectorTerms"][0]["matchExpressions"][0]["key"],
        "karpenter.sh/nodepool"
    );
    let anti =
        &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(
        anti["labelSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "karpenter"
    );
    assert_eq!(
        pod["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"],
        "karpenter"
    );
    assert_eq!(pod["tolerations"][0]["key"], "CriticalAddonsOnly");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        rendered.one("PodDisruptionBudget")["spec"]["maxUnavailable"],
        1
    );
}

#[test]
fn a_key_the_chart_does_not_use_is_accepted_and_named_in_the_notes() {
    // Karpenter's chart has no schema, so its users' files may carry keys of older releases or
    // typos; refusing them would break `helm upgrade` where Karpenter's chart installs.
    let rendered = render_with(
        &json!({ "settings": { "clusterName": "c", "clustrEndpoint": "x" }, "webhook": { "enabled": false } }),
        &[],
        false,
    );
    assert_eq!(rendered.error, None);
    assert!(rendered.notes.contains("WARNING"), "{}", rendered.notes);
    assert_eq!(
        warned_keys(&rendered.notes),
        ["settings.clustrEndpoint", "webhook"]
    );
}

#[test]
fn the_default_values_use_every_key_so_the_notes_warn_of_none() {
    let rendered = render(json!({}));
    assert!(
        rendered.notes.contains("karpenter is installed"),
        "{}",
        rendered.notes
    );
    assert_eq!(warned_keys(&rendered.notes), Vec::<String>::new());
}

/// The keys NOTES.txt names as unused, in its order.
fn warned_keys(notes: &str) -> Vec<String> {
    notes
        .lines()
        .filter_map(|line| line.strip_prefix("- "))
        .map(str::to_owned)
        .collect()
}

fn karpenter_values() -> Value {
    let text =
        std::fs::read_to_string(repo().join("tests/fixtures/karpenter-v1.5-values.yaml")).unwrap();
    karpenter_core::yaml::from_str(&text).unwrap()
}

/// Every leaf of a values tree by dotted path (an empty mapping is a leaf).
fn leaves(value: &Value, prefix: &str, out: &mut BTreeMap<String, Value>) {
    match value.as_object() {
        Some(map) if !map.is_empty() => {
            for (key, child) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                leaves(child, &path, out);
            }
        }
        _ => {
            out.insert(prefix.to_owned(), value.clone());
        }
    }
}

#[test]
fn karpenters_own_values_file_renders_valid_with_extra_keys_only_warned() {
    let mut values = karpenter_values();
    values["settings"]["clusterName"] = json!("my-cluster");
    // Keys of older Karpenter releases a long-lived values file may still carry.
    values["webhook"] = json!({ "enabled": false, "port": 8443 });
    values["settings"]["aws"] = json!({ "clusterName": "my-cluster" });
    let rendered = render(values);
    assert_valid(&rendered);
    assert_eq!(warned_keys(&rendered.notes), ["settings.aws", "webhook"]);
}

#[test]
fn every_default_we_share_with_karpenter_has_karpenters_value() {
    // Deliberate differences: the image is ours; the pod runs as non-root (the container
    // already must; Karpenter 1.6 made the same change) and the controller has resource
    // requests (a BestEffort controller is the first evicted under memory pressure). The README
    // says so.
    const OURS: [&str; 4] = [
        "controller.image.repository",
        "controller.image.tag",
        "controller.image.digest",
        "podSecurityContext.runAsNonRoot",
    ];
    let text = std::fs::read_to_string(repo().join("charts/karpenter/values.yaml")).unwrap();
    let ours: Value = karpenter_core::yaml::from_str(&text).unwrap();
    let (mut theirs_leaves, mut our_leaves) = (BTreeMap::new(), BTreeMap::new());
    leaves(&karpenter_values(), "", &mut theirs_leaves);
    leaves(&ours, "", &mut our_leaves);
    let mut differing = Vec::new();
    for (path, theirs) in &theirs_leaves {
        if OURS.contains(&path.as_str()) {
            continue;
        }
        match our_leaves.get(path) {
            Some(mine) if mine == theirs => {}
            // Karpenter's empty `controller.resources` against our requests.
            None if path == "controller.resources" => {}
            mine => differing.push(format!("{path}: Karpenter {theirs}, ours {mine:?}")),
        }
    }
    assert!(differing.is_empty(), "{differing:#?}");
}

#[test]
fn a_karpenter_values_file_with_every_key_is_accepted() {
    // Every key of Karpenter v1.5's values.yaml (reference section 8.1), set to a typical value.
    let values = json!({
        "nameOverride": "", "fullnameOverride": "karpenter", "additionalLabels": { "team": "platform" },
        "additionalAnnotations": { "owner": "platform" }, "imagePullPolicy": "Always",
        "imagePullSecrets": [{ "name": "registry" }], "service": { "annotations": { "a": "b" } },
        "serviceAccount": { "create": true, "name": "karpenter", "annotations": {} },
        "additionalClusterRoleRules": [],
        "serviceMonitor": { "enabled": false, "additionalLabels": {}, "relabelings": [], "metricRelabelings": [], "endpointConfig": {} },
        "replicas": 2, "revisionHistoryLimit": 10, "strategy": { "rollingUpdate": { "maxUnavailable": 1 } },
        "podLabels": {}, "podAnnotations": {}, "podDisruptionBudget": { "name": "karpenter", "maxUnavailable": 1 },
        "podSecurityContext": { "fsGroup": 65532, "runAsNonRoot": true, "seccompProfile": { "type": "RuntimeDefault" } },
        "priorityClassName": "system-cluster-critical", "terminationGracePeriodSeconds": 60, "hostNetwork": false,
        "schedulerName": "default-scheduler", "dnsPolicy": "ClusterFirst", "dnsConfig": {}, "initContainers": {},
        "nodeSelector": { "kubernetes.io/os": "linux" }, "tolerations": [{ "key": "CriticalAddonsOnly", "operator": "Exists" }],
        "extraVolumes": [],
        "controller": {
            "containerName": "controller",
            "image": { "repository": "public.ecr.aws/karpenter/controller", "tag": "1.5.0", "digest": "" },
            "env": [], "envFrom": [],
            "securityContext": { "appArmorProfile": {}, "seLinuxOptions": {}, "seccompProfile": {} },
            "resources": { "requests": { "cpu": 1, "memory": "1Gi" }, "limits": { "cpu": 1, "memory": "1Gi" } },
            "extraVolumeMounts": [], "sidecarContainer": [], "sidecarVolumeMounts": [],
            "metrics": { "port": 8080 }, "healthProbe": { "port": 8081 },
        },
        "logLevel": "info", "logOutputPaths": ["stdout"], "logErrorOutputPaths": ["stderr"],
        "settings": {
            "batchMaxDuration": "10s", "batchIdleDuration": "1s", "preferencePolicy": "Respect",
            "clusterCABundle": "", "clusterName": "my-cluster", "clusterEndpoint": "", "isolatedVPC": false,
            "eksControlPlane": false, "vmMemoryOverheadPercent": 0.075, "interruptionQueue": "my-cluster",
            "reservedENIs": "0",
            "featureGates": { "nodeRepair": false, "reservedCapacity": false, "spotToSpotConsolidation": false },
        },
    });
    let rendered = render(values);
    assert_valid(&rendered);
    assert_eq!(
        rendered.container()["image"],
        "public.ecr.aws/karpenter/controller:1.5.0"
    );
}

#[test]
fn the_chart_readme_describes_every_value() {
    let output = Command::new(python())
        .arg(repo().join("scripts/chart_readme.py"))
        .arg("--check")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
