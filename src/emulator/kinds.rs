//! The resources the emulator serves: one [`ResourceKind`] per group, version and plural, built
//! once from a static table of built-in kinds plus our three CRDs (read from the generated
//! CustomResourceDefinitions, so names, scope and subresources follow the Rust types).
//!
//! Handlers look a request's path up here ([`Kinds::find`]); the store indexes objects by
//! [`KindId`]; discovery documents are rendered from the same table.

use karpenter_core::apis::crd;
use karpenter_core::apis::validation::Kind as CrdKind;
use serde_json::{Value, json};

/// Index of a kind in [`Kinds`]; also the index of its storage in the store.
pub(crate) type KindId = usize;

/// What a kind does beyond plain storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Behavior {
    Generic,
    Pod,
    Node,
    Namespace,
    /// `core/v1` Event: the storage form of both event APIs.
    CoreEvent,
    /// `events.k8s.io/v1` Event: served from the core events storage through a conversion.
    EventsV1,
    PodDisruptionBudget,
    /// One of our CRDs, validated against its schema.
    Custom(CrdKind),
    CustomResourceDefinition,
}

/// One served resource.
#[derive(Debug, Clone)]
pub(crate) struct ResourceKind {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    /// Whether `status` is a subresource (spec and status written separately).
    pub status_subresource: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub behavior: Behavior,
    /// The kind whose store holds this kind's objects (itself, except for events.k8s.io).
    pub storage: KindId,
    /// The CRD's `openAPIV3Schema`, for our custom kinds.
    pub schema: Option<Value>,
    /// The CRD's printer columns (name, type, `JSONPath`, priority), for custom kinds.
    pub printer_columns: Vec<PrinterColumn>,
}

/// A column of `kubectl get` output, from a CRD's `additionalPrinterColumns`.
#[derive(Debug, Clone)]
pub(crate) struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub json_path: String,
    pub priority: i64,
}

impl ResourceKind {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods` or `nodepools.karpenter.sh`, as the API server names a resource in messages.
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Pod` or `NodePool.karpenter.sh`, as the API server names a kind in 422 messages.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Whether a DELETE that removes the object answers with the object itself rather than a
    /// `Status`: kube-apiserver's stores that set `ReturnDeletedObject` (pods, services,
    /// namespaces, persistent volumes and claims). Every kind answers with the object while
    /// finalizers or a grace period keep it.
    pub fn returns_deleted_object(&self) -> bool {
        self.group.is_empty()
            && matches!(
                self.kind.as_str(),
                "Pod" | "Service" | "Namespace" | "PersistentVolume" | "PersistentVolumeClaim"
            )
    }

    /// Subresources other than `status` that accept POST.
    pub fn action_subresources(&self) -> &'static [&'static str] {
        match self.behavior {
            Behavior::Pod => &["binding", "eviction"],
            _ => &[],
        }
    }
}

/// A row of the built-in table: group, version, kind, plural, namespaced, status subresource,
/// short names, in the "all" category, behaviour.
type BuiltIn = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    bool,
    &'static [&'static str],
    bool,
    Behavior,
);

/// The built-in kinds: those Karpenter's `ClusterRole` names, plus `ConfigMaps` for everyday kubectl.
#[rustfmt::skip]
const BUILT_IN: &[BuiltIn] = &[
    ("", "v1", "Pod", "pods", true, true, &["po"], true, Behavior::Pod),
    ("", "v1", "Node", "nodes", false, true, &["no"], false, Behavior::Node),
    ("", "v1", "Namespace", "namespaces", false, true, &["ns"], false, Behavior::Namespace),
    ("", "v1", "Event", "events", true, false, &["ev"], false, Behavior::CoreEvent),
    ("", "v1", "Service", "services", true, true, &["svc"], true, Behavior::Generic),
    ("", "v1", "ConfigMap", "configmaps", true, false, &["cm"], false, Behavior::Generic),
    ("", "v1", "PersistentVolume", "persistentvolumes", false, true, &["pv"], false, Behavior::Generic),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true, true, &["pvc"], false, Behavior::Generic),
    ("", "v1", "ReplicationController", "replicationcontrollers", true, true, &["rc"], true, Behavior::Generic),
    ("apps", "v1", "DaemonSet", "daemonsets", true, true, &["ds"], true, Behavior::Generic),
    ("apps", "v1", "Deployment", "deployments", true, true, &["deploy"], true, Behavior::Generic),
    ("apps", "v1", "ReplicaSet", "replicasets", true, true, &["rs"], true, Behavior::Generic),
    ("apps", "v1", "StatefulSet", "statefulsets", true, true, &["sts"], true, Behavior::Generic),
    ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", true, true, &["pdb"], false, Behavior::PodDisruptionBudget),
    ("storage.k8s.io", "v1", "StorageClass", "storageclasses", false, false, &["sc"], false, Behavior::Generic),
    ("storage.k8s.io", "v1", "CSINode", "csinodes", false, false, &[], false, Behavior::Generic),
    ("storage.k8s.io", "v1", "VolumeAttachment", "volumeattachments", false, true, &[], false, Behavior::Generic),
    ("coordination.k8s.io", "v1", "Lease", "leases", true, false, &[], false, Behavior::Generic),
    ("events.k8s.io", "v1", "Event", "events", true, false, &["ev"], false, Behavior::EventsV1),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", false, true, &["crd", "crds"], false, Behavior::CustomResourceDefinition),
];

/// Every served kind, indexed by [`KindId`].
#[derive(Debug, Clone)]
pub(crate) struct Kinds {
    kinds: Vec<ResourceKind>,
}

impl Kinds {
    /// The built-in table plus our three CRDs.
    pub fn new() -> Self {
        let mut kinds: Vec<ResourceKind> = BUILT_IN
            .iter()
            .map(
                |&(group, version, kind, plural, namespaced, status, short, all, behavior)| {
                    ResourceKind {
                        group: group.to_owned(),
                        version: version.to_owned(),
                        kind: kind.to_owned(),
                        plural: plural.to_owned(),
                        singular: kind.to_lowercase(),
                        namespaced,
                        status_subresource: status,
                        short_names: short.iter().map(|s| (*s).to_owned()).collect(),
                        categories: if all {
                            vec!["all".to_owned()]
                        } else {
                            Vec::new()
                        },
                        behavior,
                        storage: 0,
                        schema: None,
                        printer_columns: Vec::new(),
                    }
                },
            )
            .collect();
        for (definition, kind) in crd::all().into_iter().zip([
            CrdKind::NodePool,
            CrdKind::NodeClaim,
            CrdKind::EC2NodeClass,
        ]) {
            kinds.push(custom_kind(&definition, kind));
        }
        for (id, kind) in kinds.iter_mut().enumerate() {
            kind.storage = id;
        }
        let core_events = kinds
            .iter()
            .position(|k| k.behavior == Behavior::CoreEvent)
            .unwrap_or(0);
        for kind in &mut kinds {
            if kind.behavior == Behavior::EventsV1 {
                kind.storage = core_events;
            }
        }
        Self { kinds }
    }

    pub fn get(&self, id: KindId) -> &ResourceKind {
        &self.kinds[id]
    }

    pub fn iter(&self) -> impl Iterator<Item = (KindId, &ResourceKind)> {
        self.kinds.iter().enumerate()
    }

    /// The kind served at `group/version/plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<KindId> {
        self.kinds
            .iter()
            .position(|k| k.group == group && k.version == version && k.plural == plural)
    }

    /// The kind of a behaviour (for built-ins with one kind each).
    pub fn by_behavior(&self, behavior: Behavior) -> Option<KindId> {
        self.kinds.iter().position(|k| k.behavior == behavior)
    }

    /// The group versions served, core first, in table order without repeats.
    pub fn group_versions(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for kind in &self.kinds {
            let pair = (kind.group.clone(), kind.version.clone());
            if !out.contains(&pair) {
                out.push(pair);
            }
        }
        out
    }

    /// `/api` or `/apis/<group>/<version>` resource list (`APIResourceList`).
    pub fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
        let mut resources = Vec::new();
        for kind in self
            .kinds
            .iter()
            .filter(|k| k.group == group && k.version == version)
        {
            let mut entry = json!({
                "name": kind.plural,
                "singularName": kind.singular,
                "namespaced": kind.namespaced,
                "kind": kind.kind,
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
            });
            if !kind.short_names.is_empty() {
                entry["shortNames"] = json!(kind.short_names);
            }
            if !kind.categories.is_empty() {
                entry["categories"] = json!(kind.categories);
            }
            resources.push(entry);
            if kind.status_subresource {
                resources.push(json!({
                    "name": format!("{}/status", kind.plural),
                    "singularName": "",
                    "namespaced": kind.namespaced,
                    "kind": kind.kind,
                    "verbs": ["get", "patch", "update"],
                }));
            }
            if kind.behavior == Behavior::Pod {
                resources.push(json!({
                    "name": "pods/binding", "singularName": "", "namespaced": true,
                    "kind": "Binding", "verbs": ["create"],
                }));
                resources.push(json!({
                    "name": "pods/eviction", "singularName": "", "namespaced": true,
                    "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"],
                }));
            }
        }
        if resources.is_empty() {
            return None;
        }
        let group_version = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        Some(json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": resources,
        }))
    }

    /// `/apis` (`APIGroupList`).
    pub fn group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .group_versions()
            .into_iter()
            .filter(|(group, _)| !group.is_empty())
            .map(|(group, version)| {
                let gv =
                    json!({ "groupVersion": format!("{group}/{version}"), "version": version });
                json!({ "name": group, "versions": [gv.clone()], "preferredVersion": gv })
            })
            .collect();
        json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
    }

    /// `/apis/<group>` (`APIGroup`).
    pub fn group(&self, group: &str) -> Option<Value> {
        let (_, version) = self
            .group_versions()
            .into_iter()
            .find(|(g, _)| g == group && !g.is_empty())?;
        let gv = json!({ "groupVersion": format!("{group}/{version}"), "version": version });
        Some(json!({
            "kind": "APIGroup", "apiVersion": "v1", "name": group,
            "versions": [gv.clone()], "preferredVersion": gv,
        }))
    }
}

fn custom_kind(definition: &Value, behavior: CrdKind) -> ResourceKind {
    let text = |pointer: &str| {
        definition
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let strings = |pointer: &str| -> Vec<String> {
        definition
            .pointer(pointer)
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let printer_columns = definition
        .pointer("/spec/versions/0/additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|columns| {
            columns
                .iter()
                .map(|c| PrinterColumn {
                    name: c["name"].as_str().unwrap_or_default().to_owned(),
                    type_: c["type"].as_str().unwrap_or("string").to_owned(),
                    json_path: c["jsonPath"].as_str().unwrap_or_default().to_owned(),
                    priority: c["priority"].as_i64().unwrap_or(0),
                })
                .collect()
        })
        .unwrap_or_default();
    ResourceKind {
        group: text("/spec/group"),
        version: text("/spec/versions/0/name"),
        kind: text("/spec/names/kind"),
        plural: text("/spec/names/plural"),
        singular: text("/spec/names/singular"),
        namespaced: text("/spec/scope") == "Namespaced",
        status_subresource: definition
            .pointer("/spec/versions/0/subresources/status")
            .is_some(),
        short_names: strings("/spec/names/shortNames"),
        categories: strings("/spec/names/categories"),
        behavior: Behavior::Custom(behavior),
        storage: 0,
        schema: Some(crd::schema_of(definition)),
        printer_columns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_crds_are_cluster_scoped_with_a_status_subresource() {
        let kinds = Kinds::new();
        for plural in ["nodepools", "nodeclaims"] {
            let id = kinds.find("karpenter.sh", "v1", plural).unwrap();
            assert!(!kinds.get(id).namespaced);
            assert!(kinds.get(id).status_subresource);
        }
        let id = kinds
            .find("karpenter.k8s.aws", "v1", "ec2nodeclasses")
            .unwrap();
        assert_eq!(kinds.get(id).kind, "EC2NodeClass");
    }

    #[test]
    fn events_of_both_apis_share_one_storage() {
        let kinds = Kinds::new();
        let core = kinds.find("", "v1", "events").unwrap();
        let new = kinds.find("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(kinds.get(new).storage, core);
    }
}
