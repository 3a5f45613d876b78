//! The CEL and runtime rules of `NodePool`s (reference section 1.1).

use croner::parser::{CronParser, Seconds, Year};

use super::common;
use super::path::{FieldPath, Violations};
use crate::apis::labels::LabelUse;
use crate::apis::nodepool::{Budget, NodePoolSpec};
use crate::apis::requirements::Requirement;

/// Every rule violation of a `NodePool` spec.
pub fn check(spec: &NodePoolSpec, out: &mut Violations) {
    let template = FieldPath::root().child("spec").child("template");
    common::template_labels(
        spec.template.metadata.labels.keys(),
        &template.child("metadata").child("labels"),
        out,
    );
    let template_spec = template.child("spec");
    let requirements: Vec<Requirement> = spec
        .template
        .spec
        .requirements
        .iter()
        .map(super::super::requirements::NodePoolRequirement::as_requirement)
        .collect();
    common::requirements(
        &requirements,
        LabelUse::NodePoolRequirement,
        &template_spec.child("requirements"),
        out,
    );
    common::node_class_ref(
        &spec.template.spec.node_class_ref,
        &template_spec.child("nodeClassRef"),
        out,
    );
    common::taints(
        &[
            (&spec.template.spec.taints, template_spec.child("taints")),
            (
                &spec.template.spec.startup_taints,
                template_spec.child("startupTaints"),
            ),
        ],
        out,
    );
    let budgets = FieldPath::root()
        .child("spec")
        .child("disruption")
        .child("budgets");
    for (index, budget) in spec.disruption.budgets.iter().enumerate() {
        check_budget(budget, &budgets.index(index), out);
    }
}

fn check_budget(budget: &Budget, path: &FieldPath, out: &mut Violations) {
    match (&budget.schedule, &budget.duration) {
        (Some(_), None) => out.add(
            &path.child("duration"),
            "'schedule' must be set with 'duration'",
        ),
        (None, Some(_)) => out.add(
            &path.child("schedule"),
            "'duration' must be set with 'schedule'",
        ),
        _ => {}
    }
    if let Some(schedule) = &budget.schedule
        && let Err(problem) = parse_schedule(schedule)
    {
        out.add(
            &path.child("schedule"),
            format!("invalid cron schedule {schedule:?}: {problem}"),
        );
    }
}

/// Why a budget schedule is not a schedule.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// Budgets run in UTC; `TZ=` / `CRON_TZ=` prefixes are refused (as Karpenter's CRD does).
    #[error("time zones are not supported")]
    TimeZone,
    #[error(transparent)]
    Cron(#[from] croner::errors::CronError),
}

/// Parses a budget schedule: five cron fields or an `@` descriptor, UTC only.
pub fn parse_schedule(schedule: &str) -> Result<croner::Cron, ScheduleError> {
    if schedule.contains("TZ=") || schedule.contains("CRON_TZ=") {
        return Err(ScheduleError::TimeZone);
    }
    Ok(CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(schedule)?)
}
