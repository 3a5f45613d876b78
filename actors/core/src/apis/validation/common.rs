//! Rules shared by NodePools and NodeClaims: requirements, taints, label keys.

use std::collections::HashSet;

use super::path::{FieldPath, Violations};
use crate::apis::labels::{self, LabelUse};
use crate::apis::nodeclaim::NodeClassReference;
use crate::apis::requirements::{Operator, Requirement};
use crate::apis::taints::Taint;

/// Checks each requirement: restricted keys, operator arity, `minValues`, well-known values.
pub fn requirements(
    requirements: &[Requirement],
    usage: LabelUse,
    path: &FieldPath,
    out: &mut Violations,
) {
    for (index, requirement) in requirements.iter().enumerate() {
        let item = path.index(index);
        let key = labels::normalize(&requirement.key);
        if let Some(problem) = labels::restriction(key, usage) {
            out.add(
                &item.child("key"),
                format!("{problem}: {:?}", requirement.key),
            );
        }
        let values = &requirement.values;
        match requirement.operator {
            Operator::In if values.is_empty() => {
                out.add(
                    &item.child("values"),
                    "requirements with operator 'In' must have a value defined",
                );
            }
            Operator::Gt | Operator::Lt => {
                let single_non_negative =
                    values.len() == 1 && values[0].parse::<i64>().is_ok_and(|v| v >= 0);
                if !single_non_negative {
                    out.add(
                        &item.child("values"),
                        format!(
                            "requirements operator 'Gt' or 'Lt' must have a single positive integer value, got {values:?}"
                        ),
                    );
                }
            }
            _ => {}
        }
        if let Some(min_values) = requirement.min_values {
            let count = i64::try_from(values.len()).unwrap_or(i64::MAX);
            if requirement.operator == Operator::In && count < min_values {
                out.add(
                    &item.child("minValues"),
                    format!(
                        "requirements with 'minValues' must have at least that many values specified in the 'values' field ({min_values} > {count})"
                    ),
                );
            }
        }
        if requirement.operator == Operator::In
            && let Some(known) = labels::known_values(key)
        {
            let valid = values
                .iter()
                .filter(|v| known.contains(&v.as_str()))
                .count();
            if valid == 0 {
                out.add(
                    &item.child("values"),
                    format!("no valid values for {key}: expected one of {known:?}, got {values:?}"),
                );
            } else if let Some(min_values) = requirement.min_values
                && i64::try_from(valid).unwrap_or(i64::MAX) < min_values
            {
                out.add(
                    &item.child("minValues"),
                    format!(
                        "minValues {min_values} is more than the {valid} valid values of {key}"
                    ),
                );
            }
        }
    }
}

/// Checks that no key/effect pair appears twice across `taints` and `startupTaints`.
pub fn taints(groups: &[(&[Taint], FieldPath)], out: &mut Violations) {
    let mut seen = HashSet::new();
    for (taints, path) in groups {
        for (index, taint) in taints.iter().enumerate() {
            if !seen.insert((taint.key.as_str(), taint.effect)) {
                out.add(
                    &path.index(index),
                    format!(
                        "duplicate taint key/effect pair {}={}",
                        taint.key,
                        taint.effect.as_str()
                    ),
                );
            }
        }
    }
}

/// Checks template label keys against the restricted domains.
pub fn template_labels<'a>(
    keys: impl Iterator<Item = &'a String>,
    path: &FieldPath,
    out: &mut Violations,
) {
    for key in keys {
        if let Some(problem) = labels::restriction(key, LabelUse::TemplateLabel) {
            out.add(&path.key(key), problem);
        }
    }
}

/// Checks the CRDs' `self != ''` rules on a `nodeClassRef`'s group, kind and name.
pub fn node_class_ref(reference: &NodeClassReference, path: &FieldPath, out: &mut Violations) {
    for (field, value) in [
        ("group", &reference.group),
        ("kind", &reference.kind),
        ("name", &reference.name),
    ] {
        if value.is_empty() {
            out.add(&path.child(field), format!("{field} may not be empty"));
        }
    }
}
