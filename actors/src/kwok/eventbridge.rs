//! kwok's EventBridge: rules with `source` / `detail-type` patterns whose SQS targets receive
//! the events in the EventBridge envelope (kwok's SQS).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use super::faults::Faults;
use super::sqs::KwokSqs;
use crate::ports::aws_error::{AwsError, AwsService};
use crate::ports::clock::Clock;
use crate::ports::eventbridge::{EventBridgeApi, EventEntry};

const ACCOUNT: &str = "000000000000";

#[derive(Debug, Clone, Default)]
struct Rule {
    pattern: serde_json::Value,
    targets: Vec<String>,
}

/// The in-memory EventBridge.
#[derive(Debug)]
pub struct KwokEventBridge {
    region: String,
    sqs: Arc<KwokSqs>,
    clock: Arc<dyn Clock>,
    rules: Mutex<BTreeMap<String, Rule>>,
    next_id: Mutex<u64>,
    faults: Faults,
}

/// Whether an event matches a pattern's top-level value lists (`source`, `detail-type`, ...).
fn matches(pattern: &serde_json::Value, event: &serde_json::Value) -> bool {
    let Some(fields) = pattern.as_object() else {
        return false;
    };
    fields.iter().all(|(key, allowed)| match allowed {
        serde_json::Value::Array(values) => event.get(key).is_some_and(|v| values.contains(v)),
        serde_json::Value::Object(_) => event.get(key).is_some_and(|v| matches(allowed, v)),
        _ => false,
    })
}

impl KwokEventBridge {
    #[must_use]
    pub fn new(region: &str, sqs: Arc<KwokSqs>, clock: Arc<dyn Clock>) -> Self {
        KwokEventBridge {
            region: region.to_owned(),
            sqs,
            clock,
            rules: Mutex::new(BTreeMap::new()),
            next_id: Mutex::new(0),
            faults: Faults::default(),
        }
    }

    #[must_use]
    pub fn faults(&self) -> &Faults {
        &self.faults
    }
}

#[async_trait]
impl EventBridgeApi for KwokEventBridge {
    async fn put_rule(&self, name: &str, event_pattern: &str) -> Result<String, AwsError> {
        self.faults.check("PutRule", name)?;
        let pattern: serde_json::Value = serde_json::from_str(event_pattern).map_err(|e| {
            AwsError::new(
                AwsService::EventBridge,
                "PutRule",
                Some("InvalidEventPatternException"),
                format!("Event pattern is not valid: {e}"),
            )
            .with_status(400)
        })?;
        self.rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .pattern = pattern;
        Ok(format!(
            "arn:aws:events:{}:{ACCOUNT}:rule/{name}",
            self.region
        ))
    }

    async fn put_targets(
        &self,
        rule: &str,
        _target_id: &str,
        target_arn: &str,
    ) -> Result<(), AwsError> {
        self.faults.check("PutTargets", rule)?;
        let mut rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = rules.get_mut(rule).ok_or_else(|| {
            AwsError::new(
                AwsService::EventBridge,
                "PutTargets",
                Some("ResourceNotFoundException"),
                format!("Rule {rule} does not exist on EventBus default."),
            )
            .with_status(400)
        })?;
        if !entry.targets.iter().any(|t| t == target_arn) {
            entry.targets.push(target_arn.to_owned());
        }
        Ok(())
    }

    async fn put_events(&self, entries: &[EventEntry]) -> Result<u32, AwsError> {
        self.faults.check("PutEvents", "")?;
        let rules: Vec<Rule> = self
            .rules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let mut failed = 0;
        for entry in entries {
            let id = {
                let mut next = self.next_id.lock().unwrap_or_else(PoisonError::into_inner);
                *next += 1;
                format!("kwok-event-{next}")
            };
            let Ok(detail) = serde_json::from_str::<serde_json::Value>(&entry.detail) else {
                failed += 1;
                continue;
            };
            let event = serde_json::json!({
                "version": "0",
                "id": id,
                "detail-type": entry.detail_type,
                "source": entry.source,
                "account": ACCOUNT,
                "time": self.clock.now().to_string(),
                "region": self.region,
                "resources": entry.resources,
                "detail": detail,
            });
            let body = event.to_string();
            for rule in rules.iter().filter(|r| matches(&r.pattern, &event)) {
                for target in &rule.targets {
                    self.sqs.deliver_to_arn(target, &body);
                }
            }
        }
        Ok(failed)
    }
}
