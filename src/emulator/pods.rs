//! The pod subresources (`binding`, `eviction`) and the follow-up of every pod write: the
//! status of the PodDisruptionBudgets that select the pod (see [`super::disruption`]).

use std::sync::Arc;

use serde_json::{Value, json};

use super::api::{DeleteOptions, Reply, Shared, Target, parse_body};
use super::disruption;
use super::kinds::Behavior;
use super::lifecycle::{self, meta_str};
use super::selector::Text;
use super::status::{self, ApiError};
use super::store::{EventType, ObjectKey, StoredObject, Txn, View};

/// Sets `PodScheduled=True` as the API server's binding does: the condition is replaced
/// whole, so the scheduler's earlier `Unschedulable` reason and message go with it; its
/// transition time stays if it was already true.
fn set_scheduled(pod: &mut Value, now: &str) {
    let mut scheduled =
        json!({ "type": "PodScheduled", "status": "True", "lastTransitionTime": now });
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    let status = &mut pod["status"];
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    let Some(conditions) = status["conditions"].as_array_mut() else {
        return;
    };
    match conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"))
    {
        Some(old) => {
            if old.get("status").and_then(Value::as_str) == Some("True")
                && let Some(since) = old.get("lastTransitionTime")
            {
                scheduled["lastTransitionTime"] = since.clone();
            }
            *old = scheduled;
        }
        None => conditions.push(scheduled),
    }
}

impl Shared {
    /// `pods/binding`: assigns the pod to a node once.
    pub fn bind(&self, target: &Target, body: &[u8]) -> Result<Reply, ApiError> {
        let kind = self.kind(target.kind);
        let key = Self::key(target)?;
        let binding = parse_body(body)?;
        let node = binding
            .pointer("/target/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ApiError::bad_request("a binding needs target.name"))?
            .to_owned();
        let now = self.now();
        self.store.write(|txn| {
            let old = txn
                .get(kind.storage, &key)
                .ok_or_else(|| ApiError::not_found(kind, &key.name))?;
            let mut pod = txn.value(&old);
            if let Some(current) = pod
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
            {
                return Err(ApiError::conflict(
                    kind,
                    &key.name,
                    &format!("pod {} is already assigned to node \"{current}\"", key.name),
                ));
            }
            if lifecycle::is_deleting(&pod) {
                return Err(ApiError::conflict(kind, &key.name, "pod is being deleted"));
            }
            pod["spec"]["nodeName"] = json!(node);
            set_scheduled(&mut pod, &now);
            let stored = txn.put(kind.storage, key.clone(), pod, EventType::Modified);
            self.after_pod_write(txn, &key.namespace, Some(&old.labels), Some(&stored.labels));
            Ok(())
        })?;
        Ok(Reply::json(
            201,
            &status::success(kind, &key.name, None, 201),
        ))
    }

    /// `pods/eviction`: deletes the pod unless a PodDisruptionBudget forbids it (429).
    pub fn evict(&self, target: &Target, body: &[u8]) -> Result<Reply, ApiError> {
        let kind = self.kind(target.kind);
        let key = Self::key(target)?;
        let eviction = if body.is_empty() {
            json!({})
        } else {
            parse_body(body)?
        };
        if let Some(name) = meta_str(&eviction, "name")
            && name != &*key.name
        {
            return Err(ApiError::bad_request(format!(
                "name in URL does not match name in Eviction object: {} vs {name}",
                key.name
            )));
        }
        let options = DeleteOptions::default()
            .with_body(eviction.get("deleteOptions").unwrap_or(&Value::Null));
        let pdb_kind = self
            .kinds
            .by_behavior(Behavior::PodDisruptionBudget)
            .ok_or_else(|| ApiError::internal("no PodDisruptionBudget resource"))?;
        self.store.write(|txn| {
            let pod = txn
                .get(kind.storage, &key)
                .ok_or_else(|| ApiError::not_found(kind, &key.name))?;
            let pod_value = pod.value();
            if !lifecycle::is_deleting(&pod_value) {
                let view = txn.view();
                let budgets: Vec<Value> = view
                    .objects(pdb_kind, Some(&key.namespace), None)
                    .map(|b| b.value())
                    .collect();
                disruption::admit_eviction(
                    self.kind(pdb_kind),
                    &pod,
                    &pod_value,
                    &budgets,
                    view.objects(kind.storage, Some(&key.namespace), None),
                    |controller| self.controller_scale(&view, &key.namespace, controller),
                )?;
                self.delete_in(txn, target.kind, &pod, &options)?;
            }
            Ok::<(), ApiError>(())
        })?;
        Ok(Reply::json(
            201,
            &status::success(kind, &key.name, None, 201),
        ))
    }

    /// Recomputes the status of the namespace's budgets that select the pod before or after.
    pub(crate) fn after_pod_write(
        &self,
        txn: &mut Txn<'_>,
        namespace: &str,
        before: Option<&[(Text, Text)]>,
        after: Option<&[(Text, Text)]>,
    ) {
        let Some(pdb_kind) = self.kinds.by_behavior(Behavior::PodDisruptionBudget) else {
            return;
        };
        let budgets: Vec<Arc<StoredObject>> = txn
            .view()
            .objects(pdb_kind, Some(namespace), None)
            .cloned()
            .collect();
        if budgets.is_empty() {
            return;
        }
        let now = self.now();
        for budget in budgets {
            let mut value = budget.value();
            let affected = before.is_some_and(|l| disruption::selects(&value, l))
                || after.is_some_and(|l| disruption::selects(&value, l));
            if !affected {
                continue;
            }
            let old = value.clone();
            self.refresh_budget_status(txn, &mut value, namespace, &now);
            if disruption::status_changed(&old, value.get("status").unwrap_or(&Value::Null)) {
                txn.put(pdb_kind, budget.key.clone(), value, EventType::Modified);
            }
        }
    }

    pub(crate) fn refresh_budget_status(
        &self,
        txn: &Txn<'_>,
        pdb: &mut Value,
        namespace: &str,
        now: &str,
    ) {
        let Some(pods) = self.kinds.by_behavior(Behavior::Pod) else {
            return;
        };
        let view = txn.view();
        let budget = disruption::evaluate(
            pdb,
            view.objects(pods, Some(namespace), None),
            |controller| self.controller_scale(&view, namespace, controller),
        );
        let status = disruption::status(pdb, budget, now);
        if let Value::Object(map) = pdb {
            map.insert("status".into(), status);
        }
    }
    /// `spec.replicas` of a pod controller named `Kind/name` in `namespace`.
    pub(crate) fn controller_scale(
        &self,
        view: &View<'_>,
        namespace: &str,
        controller: &str,
    ) -> Option<i64> {
        let (kind, name) = controller.split_once('/')?;
        let (group, plural) = match kind {
            "ReplicaSet" => ("apps", "replicasets"),
            "StatefulSet" => ("apps", "statefulsets"),
            "ReplicationController" => ("", "replicationcontrollers"),
            _ => return None,
        };
        let id = self.kinds.find(group, "v1", plural)?;
        let object = view.get(id, &ObjectKey::new(namespace, name))?;
        Some(
            object
                .value()
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1),
        )
    }
}
