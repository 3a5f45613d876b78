//! The verbs over the [`Store`]: get, list, create, update and patch (deletes live in
//! [`super::delete`], the pod subresources in [`super::pods`]), and the request types they share.
//!
//! Every write runs inside one [`Store::write`] call: read the stored object, compute the new one
//! (patch, status split, system metadata, admission of custom resources), check the
//! resourceVersion precondition, store it, and run the follow-ups (PodDisruptionBudget status
//! after a pod change, object removal when the last finalizer goes). Handlers get back the bytes
//! to send and the HTTP code; failures are [`ApiError`]s.

use std::sync::Arc;

use bytes::Bytes;
use karpenter_core::apis::validation::Validator;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::EmulatorConfig;
use super::apply::{self, ApplyConflict};
use super::events;
use super::faults::{Faults, RequestLog};
use super::kinds::{Behavior, KindId, Kinds, ResourceKind};
use super::lifecycle::{self, meta_str, set_meta};
use super::schema::{self, FieldValidation};
use super::selector::{FieldSelector, LabelSelector};
use super::status::{self, ApiError};
use super::store::{EventType, ObjectKey, Store, StoredObject, Txn, View};
use super::strategic;

/// A list's items, its resourceVersion and its continue token.
pub(crate) type Listed = (Vec<Arc<StoredObject>>, u64, Option<String>);

/// Characters of generated name suffixes (Kubernetes' alphabet: no vowels, no confusable digits).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// Length of a generated name suffix, as in Kubernetes.
const NAME_SUFFIX_LEN: usize = 5;

/// State shared by every request.
pub(crate) struct Shared {
    pub kinds: Kinds,
    pub store: Store,
    pub validator: Validator,
    pub faults: Faults,
    pub log: RequestLog,
    pub config: EmulatorConfig,
    /// The `major` and `minor` `/version` reports: `config.kubernetes_version` at first,
    /// changed by `Emulator::set_kubernetes_version` (a control-plane upgrade).
    pub kubernetes_version: std::sync::RwLock<(String, String)>,
    /// Bumped to end every open watch.
    pub watch_epoch: watch::Sender<u64>,
    /// When false, custom objects are stored without schema admission, as a server with a
    /// newer version of the CRDs would accept them (`Emulator::set_schema_admission`).
    pub schema_admission: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn admits_schemas(&self) -> bool {
        self.schema_admission
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

/// The resource a request addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub kind: KindId,
    /// Set for namespaced kinds addressed within a namespace.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// A response to send.
#[derive(Debug)]
pub(crate) struct Reply {
    pub code: u16,
    pub body: Bytes,
    pub warnings: Vec<String>,
}

impl Reply {
    pub(crate) fn json(code: u16, value: &Value) -> Self {
        Self {
            code,
            body: Bytes::from(serde_json::to_vec(value).unwrap_or_default()),
            warnings: Vec::new(),
        }
    }
}

/// Options of a write.
#[derive(Debug, Clone)]
pub(crate) struct WriteOptions {
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    pub field_manager: Option<String>,
    pub force: bool,
}

/// The patch formats, by content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Applies a merge, JSON or strategic merge `patch` to `object` (server-side apply, which
/// needs the managed fields, is not one of these and leaves `object` alone).
pub(crate) fn apply_patch(
    patch_type: PatchType,
    behavior: Behavior,
    object: &mut Value,
    patch: &Value,
) -> Result<(), ApiError> {
    match patch_type {
        PatchType::Merge => json_patch::merge(object, patch),
        PatchType::Json => {
            let operations: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(object, &operations).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the JSON patch could not be applied: {e}"),
                )
            })?;
        }
        PatchType::Strategic => strategic::apply(behavior, object, patch)?,
        PatchType::Apply => {}
    }
    Ok(())
}

/// Options of a list or watch.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListOptions {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

/// Options of a delete.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub dry_run: bool,
}

impl DeleteOptions {
    /// Merges a `DeleteOptions` body over query parameters.
    pub fn with_body(mut self, body: &Value) -> Self {
        if let Some(grace) = body.get("gracePeriodSeconds").and_then(Value::as_i64) {
            self.grace_period_seconds = Some(grace);
        }
        if let Some(uid) = body.pointer("/preconditions/uid").and_then(Value::as_str) {
            self.uid = Some(uid.to_owned());
        }
        if let Some(rv) = body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
        {
            self.resource_version = Some(rv.to_owned());
        }
        if body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|d| !d.is_empty())
        {
            self.dry_run = true;
        }
        self
    }
}

/// Parses a request body as JSON, or YAML (server-side apply bodies may be either).
pub(crate) fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    serde_json::from_slice(body).or_else(|json_error| {
        std::str::from_utf8(body)
            .ok()
            .and_then(|text| karpenter_core::yaml::from_str::<Value>(text).ok())
            .ok_or_else(|| {
                ApiError::bad_request(format!("the request body is not valid JSON: {json_error}"))
            })
    })
}

/// A write's result before rendering.
enum Written {
    Stored(Arc<StoredObject>),
    /// Dry run, or a deletion that already removed the object: the object to send back.
    Value(Value),
}

impl Shared {
    pub(crate) fn now(&self) -> String {
        let now = (self.config.clock)();
        jiff::Timestamp::from_second(now.as_second())
            .unwrap_or(now)
            .to_string()
    }

    pub(crate) fn kind(&self, id: KindId) -> &ResourceKind {
        self.kinds.get(id)
    }

    /// The object as the requested kind presents it (events.k8s.io converts from storage).
    pub fn render(&self, kind: KindId, object: &StoredObject) -> Bytes {
        let json = self.store.json(object);
        if self.kind(kind).behavior == Behavior::EventsV1 {
            let core = serde_json::from_slice(&json).unwrap_or(Value::Null);
            Bytes::from(serde_json::to_vec(&events::from_core(&core)).unwrap_or_default())
        } else {
            json
        }
    }

    fn render_value(&self, kind: KindId, value: &Value) -> Bytes {
        let value = if self.kind(kind).behavior == Behavior::EventsV1 {
            events::from_core(value)
        } else {
            value.clone()
        };
        Bytes::from(serde_json::to_vec(&value).unwrap_or_default())
    }

    fn reply(&self, kind: KindId, code: u16, written: &Written, warnings: Vec<String>) -> Reply {
        let body = match written {
            Written::Stored(stored) => self.render(kind, stored),
            Written::Value(value) => self.render_value(kind, value),
        };
        Reply {
            code,
            body,
            warnings,
        }
    }

    pub(crate) fn key(target: &Target) -> Result<ObjectKey, ApiError> {
        let name = target
            .name
            .as_deref()
            .ok_or_else(|| ApiError::method_not_allowed("a resource name is required"))?;
        Ok(ObjectKey::new(
            target.namespace.as_deref().unwrap_or(""),
            name,
        ))
    }

    fn uid(txn: &mut Txn<'_>) -> String {
        let (a, b) = (txn.random(), txn.random());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | (b >> 48) & 0x3fff,
            b & 0xffff_ffff_ffff
        )
    }

    fn generated_name(txn: &mut Txn<'_>, prefix: &str) -> String {
        let mut name = prefix.to_owned();
        let mut bits = txn.random();
        for _ in 0..NAME_SUFFIX_LEN {
            let alphabet_len = NAME_ALPHABET.len() as u64;
            #[expect(
                clippy::cast_possible_truncation,
                reason = "the remainder is below the alphabet length"
            )]
            let index = (bits % alphabet_len) as usize;
            name.push(char::from(NAME_ALPHABET[index]));
            bits /= alphabet_len;
        }
        name
    }

    fn require_namespace(&self, view: &View<'_>, namespace: &str) -> Result<(), ApiError> {
        let Some(namespaces) = self.kinds.by_behavior(Behavior::Namespace) else {
            return Ok(());
        };
        match view.get(namespaces, &ObjectKey::new("", namespace)) {
            None => Err(ApiError::namespace_not_found(namespace)),
            Some(ns) if lifecycle::is_deleting(&ns.value()) => Err(ApiError::new(
                403,
                "Forbidden",
                format!(
                    "unable to create new content in namespace {namespace} because it is being terminated"
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Creates an object directly (initial namespaces and CRDs).
    pub fn seed(&self, kind: KindId, namespace: &str, object: Value) -> Result<(), ApiError> {
        let options = WriteOptions {
            dry_run: false,
            field_validation: FieldValidation::Ignore,
            field_manager: None,
            force: false,
        };
        self.store
            .write(|txn| self.create_in(txn, kind, namespace, object, &options))
            .map(|_| ())
    }

    // ---------------------------------------------------------------- reads

    pub fn get(&self, target: &Target) -> Result<Reply, ApiError> {
        let key = Self::key(target)?;
        let kind = self.kind(target.kind);
        let stored = self
            .store
            .read(|view| view.get(kind.storage, &key))
            .ok_or_else(|| ApiError::not_found(kind, &key.name))?;
        Ok(Reply {
            code: 200,
            body: self.render(target.kind, &stored),
            warnings: Vec::new(),
        })
    }

    /// Lists matching objects; returns the items, the list's resourceVersion and the continue
    /// token.
    pub fn list_items(&self, target: &Target, options: &ListOptions) -> Result<Listed, ApiError> {
        let kind = self.kind(target.kind);
        let (after, token_rv) = match &options.continue_token {
            Some(token) => {
                let (rv, key) = decode_continue(token)?;
                (Some(key), Some(rv))
            }
            None => (None, None),
        };
        let namespace = target.namespace.as_deref();
        self.store.read(|view| {
            let rv = token_rv.unwrap_or_else(|| view.rv());
            if options.resource_version_match.as_deref() == Some("Exact")
                && options.resource_version.as_deref() != Some(&rv.to_string())
            {
                return Err(ApiError::gone(
                    "the resourceVersion for the provided list is too old",
                ));
            }
            let mut items = Vec::new();
            let mut next = None;
            for object in view.objects(kind.storage, namespace, after.as_ref()) {
                if !options.labels.matches(&object.labels)
                    || !options.fields.matches(
                        &object.key.name,
                        &object.key.namespace,
                        &object.fields,
                        || object.value(),
                    )
                {
                    continue;
                }
                if options
                    .limit
                    .is_some_and(|limit| limit > 0 && items.len() == limit)
                {
                    next = Some(encode_continue(rv, &items_last_key(&items)));
                    break;
                }
                items.push(Arc::clone(object));
            }
            Ok((items, rv, next))
        })
    }

    pub fn list(&self, target: &Target, options: &ListOptions) -> Result<Reply, ApiError> {
        let kind = self.kind(target.kind);
        let (items, rv, next) = self.list_items(target, options)?;
        let size: usize = items.iter().map(|i| i.json_len() + 1).sum();
        let mut body = Vec::with_capacity(size + 256);
        let mut metadata = json!({ "resourceVersion": rv.to_string() });
        if let Some(token) = next {
            metadata["continue"] = json!(token);
        }
        body.extend_from_slice(
            format!(
                "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
                kind.list_kind(),
                kind.api_version(),
                metadata
            )
            .as_bytes(),
        );
        for (index, item) in items.iter().enumerate() {
            if index > 0 {
                body.push(b',');
            }
            body.extend_from_slice(&self.render(target.kind, item));
        }
        body.extend_from_slice(b"]}");
        Ok(Reply {
            code: 200,
            body: Bytes::from(body),
            warnings: Vec::new(),
        })
    }

    // ---------------------------------------------------------------- create

    pub fn create(
        &self,
        target: &Target,
        body: &[u8],
        options: &WriteOptions,
    ) -> Result<Reply, ApiError> {
        let kind = self.kind(target.kind);
        let mut object = parse_body(body)?;
        lifecycle::check_type(kind, &object)?;
        if kind.behavior == Behavior::EventsV1 {
            object = events::to_core(&object);
        }
        let namespace = Self::namespace_of(kind, target, &object)?;
        let (written, warnings) = self
            .store
            .write(|txn| self.create_in(txn, target.kind, &namespace, object, options))?;
        Ok(self.reply(target.kind, 201, &written, warnings))
    }

    fn namespace_of(
        kind: &ResourceKind,
        target: &Target,
        object: &Value,
    ) -> Result<String, ApiError> {
        if !kind.namespaced {
            return Ok(String::new());
        }
        let in_body = meta_str(object, "namespace").filter(|n| !n.is_empty());
        match (&target.namespace, in_body) {
            (Some(url), Some(body)) if url != body => Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            )),
            (Some(url), _) => Ok(url.clone()),
            (None, _) => Err(ApiError::not_found(kind, "")),
        }
    }

    fn create_in(
        &self,
        txn: &mut Txn<'_>,
        kind_id: KindId,
        namespace: &str,
        mut object: Value,
        options: &WriteOptions,
    ) -> Result<(Written, Vec<String>), ApiError> {
        let kind = self.kind(kind_id);
        if kind.namespaced {
            self.require_namespace(&txn.view(), namespace)?;
        }
        let name = if let Some(name) = meta_str(&object, "name").filter(|n| !n.is_empty()) {
            name.to_owned()
        } else {
            let Some(prefix) = meta_str(&object, "generateName").filter(|n| !n.is_empty()) else {
                return Err(ApiError::invalid(
                    kind,
                    "",
                    &[status::Cause {
                        reason: "FieldValueRequired",
                        field: "metadata.name".into(),
                        message: "Required value: name or generateName is required".into(),
                    }],
                ));
            };
            let prefix = prefix.to_owned();
            let mut name = Self::generated_name(txn, &prefix);
            while txn
                .get(kind.storage, &ObjectKey::new(namespace, &name))
                .is_some()
            {
                name = Self::generated_name(txn, &prefix);
            }
            name
        };
        if kind.behavior != Behavior::CoreEvent
            && kind.behavior != Behavior::EventsV1
            && let Some(problem) = lifecycle::name_problem(&name)
        {
            return Err(ApiError::invalid(
                kind,
                &name,
                &[status::Cause {
                    reason: "FieldValueInvalid",
                    field: "metadata.name".into(),
                    message: format!("Invalid value: \"{name}\": {problem}"),
                }],
            ));
        }
        let key = ObjectKey::new(namespace, &name);
        if txn.get(kind.storage, &key).is_some() {
            return Err(ApiError::already_exists(kind, &name));
        }
        let uid = Self::uid(txn);
        let now = self.now();
        lifecycle::prepare_create(kind, &mut object, namespace, &name, &uid, &now);
        let mut warnings = Vec::new();
        if let Behavior::Custom(crd_kind) = kind.behavior
            && self.admits_schemas()
        {
            warnings = schema::admit(
                &self.validator,
                kind,
                crd_kind,
                &mut object,
                None,
                options.field_validation,
            )?;
        }
        if kind.behavior == Behavior::PodDisruptionBudget {
            self.refresh_budget_status(txn, &mut object, namespace, &now);
        }
        if options.dry_run {
            return Ok((Written::Value(object), warnings));
        }
        let labels_after = super::selector::extract_labels(&object);
        let stored = txn.put(kind.storage, key, object, EventType::Added);
        if kind.behavior == Behavior::Pod {
            self.after_pod_write(txn, namespace, None, Some(&labels_after));
        }
        Ok((Written::Stored(stored), warnings))
    }

    // ---------------------------------------------------------------- update and patch

    pub fn replace(
        &self,
        target: &Target,
        body: &[u8],
        options: &WriteOptions,
    ) -> Result<Reply, ApiError> {
        let kind = self.kind(target.kind);
        let mut object = parse_body(body)?;
        lifecycle::check_type(kind, &object)?;
        let key = Self::key(target)?;
        if let Some(name) = meta_str(&object, "name")
            && name != &*key.name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({})",
                key.name
            )));
        }
        if kind.behavior == Behavior::EventsV1 {
            object = events::to_core(&object);
        }
        let (written, warnings) = self.store.write(|txn| {
            let old = txn
                .get(kind.storage, &key)
                .ok_or_else(|| ApiError::not_found(kind, &key.name))?;
            if let Some(rv) = meta_str(&object, "resourceVersion").filter(|rv| !rv.is_empty())
                && rv != old.rv.to_string()
            {
                return Err(ApiError::stale(kind, &key.name));
            }
            let old_value = txn.value(&old);
            self.update_in(txn, target, &old, &old_value, object, options, false)
        })?;
        Ok(self.reply(target.kind, 200, &written, warnings))
    }

    pub fn patch(
        &self,
        target: &Target,
        patch_type: PatchType,
        body: &[u8],
        options: &WriteOptions,
    ) -> Result<Reply, ApiError> {
        let kind = self.kind(target.kind);
        let key = Self::key(target)?;
        if patch_type == PatchType::Strategic && matches!(kind.behavior, Behavior::Custom(_)) {
            return Err(ApiError::unsupported_media_type(
                "application/strategic-merge-patch+json",
            ));
        }
        let patch = parse_body(body)?;
        let manager = match (patch_type, &options.field_manager) {
            (PatchType::Apply, None) => {
                return Err(ApiError::bad_request(
                    "PATCH, application/apply-patch+yaml requires fieldManager",
                ));
            }
            (_, manager) => manager.clone().unwrap_or_default(),
        };
        let now = self.now();
        let (code, written, warnings) = self.store.write(|txn| {
            let Some(old) = txn.get(kind.storage, &key) else {
                if patch_type != PatchType::Apply {
                    return Err(ApiError::not_found(kind, &key.name));
                }
                lifecycle::check_type(kind, &patch)?;
                let mut object = json!({
                    "apiVersion": kind.api_version(),
                    "kind": kind.kind,
                    "metadata": { "name": &*key.name },
                });
                Self::run_apply(
                    kind,
                    &mut object,
                    &patch,
                    &manager,
                    options.force,
                    None,
                    &now,
                )?;
                let object = if kind.behavior == Behavior::EventsV1 {
                    events::to_core(&object)
                } else {
                    object
                };
                let (written, warnings) =
                    self.create_in(txn, target.kind, &key.namespace, object, options)?;
                return Ok((201, written, warnings));
            };
            let old_value = txn.value(&old);
            let mut object = if kind.behavior == Behavior::EventsV1 {
                events::from_core(&old_value)
            } else {
                old_value.clone()
            };
            match patch_type {
                PatchType::Merge | PatchType::Json | PatchType::Strategic => {
                    apply_patch(patch_type, kind.behavior, &mut object, &patch)?;
                }
                PatchType::Apply => {
                    lifecycle::check_type(kind, &patch)?;
                    Self::run_apply(
                        kind,
                        &mut object,
                        &patch,
                        &manager,
                        options.force,
                        target.subresource.as_deref(),
                        &now,
                    )?;
                }
            }
            if let Some(rv) = meta_str(&object, "resourceVersion").filter(|rv| !rv.is_empty())
                && rv != old.rv.to_string()
            {
                return Err(ApiError::stale(kind, &key.name));
            }
            if kind.behavior == Behavior::EventsV1 {
                object = events::to_core(&object);
            }
            let (written, warnings) = self.update_in(
                txn,
                target,
                &old,
                &old_value,
                object,
                options,
                patch_type == PatchType::Apply,
            )?;
            Ok((200, written, warnings))
        })?;
        Ok(self.reply(target.kind, code, &written, warnings))
    }

    fn run_apply(
        kind: &ResourceKind,
        object: &mut Value,
        config: &Value,
        manager: &str,
        force: bool,
        subresource: Option<&str>,
        now: &str,
    ) -> Result<(), ApiError> {
        apply::apply(
            kind.behavior,
            object,
            config,
            manager,
            force,
            subresource,
            now,
        )
        .map_err(|conflicts| {
            let name = meta_str(object, "name").unwrap_or_default().to_owned();
            apply_conflict(kind, &name, &conflicts)
        })
    }

    /// Stores `new` over `old` (already checked against its resourceVersion). `old_value` is
    /// `old` parsed: the callers have read it already, and parsing is much of a write's cost.
    #[expect(
        clippy::too_many_arguments,
        reason = "the update's inputs; grouped at the two call sites"
    )]
    fn update_in(
        &self,
        txn: &mut Txn<'_>,
        target: &Target,
        old: &Arc<StoredObject>,
        old_value: &Value,
        new: Value,
        options: &WriteOptions,
        applied: bool,
    ) -> Result<(Written, Vec<String>), ApiError> {
        let kind = self.kind(target.kind);
        let key = &old.key;
        let subresource = target.subresource.as_deref();
        if let Some(sub) = subresource
            && (sub != "status" || !kind.status_subresource)
        {
            return Err(ApiError::method_not_allowed(format!(
                "the subresource {sub:?} of {} cannot be updated",
                kind.plural
            )));
        }
        let mut merged = lifecycle::merge_update(kind, old_value, new, subresource, applied);
        lifecycle::check_update(kind, old_value, &merged)?;
        set_meta(&mut merged, "resourceVersion", json!(old.rv.to_string()));
        // An update that changes nothing is answered with the stored object before admission:
        // what is stored was admitted, and the server ratchets unchanged values. (A budget's
        // status is refreshed on every write, so its no-op writes go on.)
        if kind.behavior != Behavior::PodDisruptionBudget && merged == *old_value {
            return Ok((Written::Stored(Arc::clone(old)), Vec::new()));
        }
        let mut warnings = Vec::new();
        if let Behavior::Custom(crd_kind) = kind.behavior
            && self.admits_schemas()
        {
            warnings = schema::admit(
                &self.validator,
                kind,
                crd_kind,
                &mut merged,
                Some(old_value),
                options.field_validation,
            )?;
        }
        lifecycle::bump_generation(old_value, &mut merged);
        let now = self.now();
        if kind.behavior == Behavior::PodDisruptionBudget {
            self.refresh_budget_status(txn, &mut merged, &key.namespace, &now);
        }
        if merged == *old_value {
            return Ok((Written::Stored(Arc::clone(old)), warnings));
        }
        if options.dry_run {
            return Ok((Written::Value(merged), warnings));
        }
        let labels_after = super::selector::extract_labels(&merged);
        let written =
            if lifecycle::is_deleting(&merged) && lifecycle::finalizers(&merged).is_empty() {
                let gone = txn.remove(kind.storage, key, merged);
                Written::Value(gone.value())
            } else {
                Written::Stored(txn.put(kind.storage, key.clone(), merged, EventType::Modified))
            };
        if kind.behavior == Behavior::Pod {
            self.after_pod_write(txn, &key.namespace, Some(&old.labels), Some(&labels_after));
        }
        Ok((written, warnings))
    }
}

fn items_last_key(items: &[Arc<StoredObject>]) -> ObjectKey {
    items
        .last()
        .map_or_else(|| ObjectKey::new("", ""), |i| i.key.clone())
}

fn apply_conflict(kind: &ResourceKind, name: &str, conflicts: &[ApplyConflict]) -> ApiError {
    let described: Vec<String> = conflicts
        .iter()
        .map(|c| format!("conflict with \"{}\": {}", c.manager, c.field))
        .collect();
    let plural = if conflicts.len() == 1 { "" } else { "s" };
    let mut details = json!({ "name": name, "kind": kind.plural });
    if !kind.group.is_empty() {
        details["group"] = json!(kind.group);
    }
    details["causes"] = conflicts
        .iter()
        .map(|c| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with \"{}\"", c.manager),
                "field": c.field,
            })
        })
        .collect();
    ApiError {
        details: Some(details),
        ..ApiError::new(
            409,
            "Conflict",
            format!(
                "Apply failed with {} conflict{plural}: {}",
                conflicts.len(),
                described.join(", ")
            ),
        )
    }
}

/// A continue token: the list's resourceVersion and the last key returned, as JSON.
fn encode_continue(rv: u64, key: &ObjectKey) -> String {
    json!({ "rv": rv, "ns": &*key.namespace, "name": &*key.name }).to_string()
}

fn decode_continue(token: &str) -> Result<(u64, ObjectKey), ApiError> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token}"));
    let value: Value = serde_json::from_str(token).map_err(|_| bad())?;
    let rv = value.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let namespace = value.get("ns").and_then(Value::as_str).ok_or_else(bad)?;
    let name = value.get("name").and_then(Value::as_str).ok_or_else(bad)?;
    Ok((rv, ObjectKey::new(namespace, name)))
}
