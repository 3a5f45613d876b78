//! Deletion: DELETE of one object (finalizers hold it with a deletionTimestamp, pods may wait
//! for a grace period), deletecollection, and a namespace's cascade to what it holds.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};

use super::api::{DeleteOptions, ListOptions, Reply, Shared, Target};
use super::kinds::{Behavior, KindId};
use super::lifecycle::{self, meta_str, remove_meta, set_meta};
use super::status::{self, ApiError};
use super::store::{EventType, StoredObject, Txn};

/// What a DELETE did to one object.
pub(crate) enum Deletion {
    /// Still stored: marked for deletion (finalizers, a pod's grace period) or a dry run.
    Kept(Arc<StoredObject>),
    /// Gone; its final state, as the DELETED event carries it.
    Removed(Arc<StoredObject>),
}

impl Shared {
    pub fn delete(&self, target: &Target, options: &DeleteOptions) -> Result<Reply, ApiError> {
        let kind = self.kind(target.kind);
        let key = Self::key(target)?;
        let (code, body) = self.store.write(|txn| -> Result<(u16, Bytes), ApiError> {
            let old = txn
                .get(kind.storage, &key)
                .ok_or_else(|| ApiError::not_found(kind, &key.name))?;
            if kind.behavior == Behavior::Namespace && !options.dry_run {
                self.delete_namespace_contents(txn, &key.name);
            }
            let deleted = match self.delete_in(txn, target.kind, &old, options)? {
                Deletion::Kept(remaining) => {
                    return Ok((200, self.render(target.kind, &remaining)));
                }
                Deletion::Removed(last) => last,
            };
            if kind.returns_deleted_object() {
                return Ok((200, self.render(target.kind, &deleted)));
            }
            let uid = meta_str(&old.value(), "uid").map(str::to_owned);
            let body = status::success(kind, &key.name, uid.as_deref(), 200);
            Ok((
                200,
                Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
            ))
        })?;
        Ok(Reply {
            code,
            body,
            warnings: Vec::new(),
        })
    }

    /// Deletes one stored object: marks it while finalizers or a grace period remain, or
    /// removes it.
    pub(crate) fn delete_in(
        &self,
        txn: &mut Txn<'_>,
        kind_id: KindId,
        old: &Arc<StoredObject>,
        options: &DeleteOptions,
    ) -> Result<Deletion, ApiError> {
        let kind = self.kind(kind_id);
        let mut value = old.value();
        let name = &old.key.name;
        if let Some(uid) = &options.uid
            && meta_str(&value, "uid") != Some(uid.as_str())
        {
            return Err(ApiError::conflict(
                kind,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&value, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = &options.resource_version
            && *rv != old.rv.to_string()
        {
            return Err(ApiError::conflict(
                kind,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    old.rv
                ),
            ));
        }
        if options.dry_run {
            return Ok(Deletion::Kept(Arc::clone(old)));
        }
        let graceful_pod = kind.behavior == Behavior::Pod
            && self.config.graceful_pod_deletion
            && value
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty())
            && options.grace_period_seconds != Some(0);
        if !lifecycle::finalizers(&value).is_empty() || graceful_pod {
            if lifecycle::is_deleting(&value) {
                return Ok(Deletion::Kept(Arc::clone(old)));
            }
            set_meta(&mut value, "deletionTimestamp", json!(self.now()));
            let grace = if graceful_pod {
                options
                    .grace_period_seconds
                    .or_else(|| {
                        value
                            .pointer("/spec/terminationGracePeriodSeconds")
                            .and_then(Value::as_i64)
                    })
                    .unwrap_or(30)
            } else {
                0
            };
            set_meta(&mut value, "deletionGracePeriodSeconds", json!(grace));
            let stored = txn.put(kind.storage, old.key.clone(), value, EventType::Modified);
            if kind.behavior == Behavior::Pod {
                self.after_pod_write(
                    txn,
                    &old.key.namespace,
                    Some(&old.labels),
                    Some(&stored.labels),
                );
            }
            return Ok(Deletion::Kept(stored));
        }
        remove_meta(&mut value, "resourceVersion");
        let last = txn.remove(kind.storage, &old.key, value);
        if kind.behavior == Behavior::Pod {
            self.after_pod_write(txn, &old.key.namespace, Some(&old.labels), None);
        }
        Ok(Deletion::Removed(last))
    }

    /// Namespace deletion: every object in it is deleted (those with finalizers stay, marked).
    fn delete_namespace_contents(&self, txn: &mut Txn<'_>, namespace: &str) {
        for (id, kind) in self.kinds.iter() {
            if !kind.namespaced || kind.storage != id {
                continue;
            }
            let objects: Vec<Arc<StoredObject>> = txn
                .view()
                .objects(id, Some(namespace), None)
                .cloned()
                .collect();
            for object in objects {
                // Preconditions are absent, so deleting cannot fail.
                let _ = self.delete_in(txn, id, &object, &DeleteOptions::default());
            }
        }
    }

    pub fn delete_collection(
        &self,
        target: &Target,
        list: &ListOptions,
        options: &DeleteOptions,
    ) -> Result<Reply, ApiError> {
        let kind = self.kind(target.kind);
        let (items, _, _) = self.list_items(
            target,
            &ListOptions {
                limit: None,
                continue_token: None,
                ..list.clone()
            },
        )?;
        self.store.write(|txn| {
            for item in items {
                if let Some(current) = txn.get(kind.storage, &item.key) {
                    self.delete_in(txn, target.kind, &current, options)?;
                }
            }
            Ok::<(), ApiError>(())
        })?;
        Ok(Reply::json(200, &status::success(kind, "", None, 200)))
    }
}
