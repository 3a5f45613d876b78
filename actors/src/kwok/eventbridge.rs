//! kwok's EventBridge: rules with `source` / `detail-type` patterns whose SQS targets receive
//! the events in the EventBridge envelope (kwok's SQS).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use super::faults::Faults;
use super::sqs::KwokSqs;
use crate::ports::aws_error::{AwsError, AwsService};
use crate::ports::clock::Clock;
use crate::ports::eventbridge::{EventBridgeApi, EventEntry, RuleInfo, TargetInfo};

const ACCOUNT: &str = "000000000000";

#[derive(Debug, Clone, Default)]
struct Rule {
    pattern: serde_json::Value,
    pattern_text: String,
    /// `(id, arn)` pairs.
    targets: Vec<(String, String)>,
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

    fn rule_arn(&self, name: &str) -> String {
        format!("arn:aws:events:{}:{ACCOUNT}:rule/{name}", self.region)
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
        let mut rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        let rule = rules.entry(name.to_owned()).or_default();
        rule.pattern = pattern;
        event_pattern.clone_into(&mut rule.pattern_text);
        Ok(self.rule_arn(name))
    }

    async fn put_targets(
        &self,
        rule: &str,
        target_id: &str,
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
        entry.targets.retain(|(id, _)| id != target_id);
        entry
            .targets
            .push((target_id.to_owned(), target_arn.to_owned()));
        Ok(())
    }

    async fn describe_rule(&self, name: &str) -> Result<Option<RuleInfo>, AwsError> {
        self.faults.check("DescribeRule", name)?;
        let rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(rules.get(name).map(|rule| RuleInfo {
            name: name.to_owned(),
            arn: self.rule_arn(name),
            event_pattern: rule.pattern_text.clone(),
            state: "ENABLED".to_owned(),
        }))
    }

    async fn list_targets(&self, rule: &str) -> Result<Vec<TargetInfo>, AwsError> {
        self.faults.check("ListTargetsByRule", rule)?;
        let rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = rules.get(rule).ok_or_else(|| {
            AwsError::new(
                AwsService::EventBridge,
                "ListTargetsByRule",
                Some("ResourceNotFoundException"),
                format!("Rule {rule} does not exist."),
            )
            .with_status(400)
        })?;
        Ok(entry
            .targets
            .iter()
            .map(|(id, arn)| TargetInfo {
                id: id.clone(),
                arn: arn.clone(),
            })
            .collect())
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
                for (_, target) in &rule.targets {
                    self.sqs.deliver_to_arn(target, &body);
                }
            }
        }
        Ok(failed)
    }
}
