//! Turns the solver's cheap refusal codes into [`Reason`]s with the detail a user needs:
//! which taint, which requirement and why, which topology rule with its counts, which of
//! requirements, resources and offerings ruled out the instance types. Runs only for pods the
//! plan leaves pending, so it may take its time.

use std::collections::BTreeMap;

use crate::domain::requirements::AllowUndefined;

use super::plan::{InstanceTypeChecks, Reason, TopologyRule};
use super::solver::{Reject, Solver};
use super::topology::GroupKind;

/// Most domains a topology reason lists.
const MAX_LISTED_DOMAINS: usize = 25;

pub(super) fn reason(
    solver: &mut Solver<'_>,
    pool: usize,
    variant: usize,
    reject: Reject,
) -> Reason {
    match reject {
        Reject::Taint(taint) => Reason::Taint {
            key: taint.key.clone(),
            value: taint.value.clone(),
            effect: taint.effect.as_str().to_owned(),
        },
        Reject::HostPort(port) => Reason::HostPort {
            port: port.to_string(),
        },
        Reject::Hostname => Reason::Hostname {
            requirement: solver.variants[variant]
                .host
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
        },
        Reject::Requirements | Reject::Resources => {
            let base = solver.reqs.get(solver.pools[pool].base);
            let pod = solver.reqs.get(solver.variants[variant].req);
            match base.compatible(pod, AllowUndefined::WellKnown) {
                Err(detail) => Reason::Requirements { detail },
                Ok(()) => Reason::InstanceTypes {
                    requirements: base.to_string(),
                    requests: solver.sigs[solver.variants[variant].sig]
                        .shape
                        .requests
                        .to_string(),
                    checks: InstanceTypeChecks {
                        requirements_met: true,
                        has_offering: true,
                        requirements_and_offering: true,
                        ..InstanceTypeChecks::default()
                    },
                },
            }
        }
        Reject::Topology { group, inverse } => topology_reason(solver, variant, group, inverse),
        Reject::Limits(resource) => Reason::Limits { resource },
        Reject::InstanceTypes { class } => instance_types_reason(solver, pool, variant, class),
        Reject::Reserved => Reason::ReservedCapacity,
        Reject::MinValues(error) => Reason::MinValues {
            key: error.key,
            needed: error.needed,
            available: error.available,
        },
    }
}

fn topology_reason(solver: &Solver<'_>, variant: usize, group: usize, inverse: bool) -> Reason {
    let g = &solver.groups[group];
    let rule = match (inverse, g.key.kind) {
        (true, _) => TopologyRule::InverseAntiAffinity,
        (false, GroupKind::Spread { .. }) => TopologyRule::TopologySpread,
        (false, GroupKind::Affinity) => TopologyRule::PodAffinity,
        (false, GroupKind::AntiAffinity) => TopologyRule::PodAntiAffinity,
    };
    let mut counts = BTreeMap::new();
    match g.table {
        Some(table) => {
            for (domain, count) in g.domain_counts().take(MAX_LISTED_DOMAINS) {
                if let Some(value) = solver.tables[table].values.get(domain) {
                    counts.insert(value.to_string(), count);
                }
            }
        }
        None => {
            for slot in g.nonzero().iter().take(MAX_LISTED_DOMAINS) {
                if let Some(s) = solver.slots.get(slot) {
                    counts.insert(s.hostname.to_string(), g.count(slot));
                }
            }
        }
    }
    let v = &solver.variants[variant];
    let pod_domains = if g.table.is_some() {
        solver
            .reqs
            .get(v.strict)
            .get(&g.key.topology_key)
            .map(ToString::to_string)
            .unwrap_or_default()
    } else {
        v.strict_host
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default()
    };
    Reason::Topology {
        rule,
        topology_key: g.key.topology_key.to_string(),
        selector: g.key.selector.to_string(),
        counts,
        pod_domains,
    }
}

fn instance_types_reason(
    solver: &mut Solver<'_>,
    pool: usize,
    variant: usize,
    class: usize,
) -> Reason {
    let shape = solver.sigs[solver.variants[variant].sig].shape.clone();
    let p = &solver.pools[pool];
    let mut need = p.daemon.clone();
    need.add(&shape.requests);
    let requirements = solver.reqs.get(class);
    let mut checks = InstanceTypeChecks::default();
    for instance_type in &p.types {
        let compatible = instance_type.requirements.intersects_ok(requirements);
        let fits = need.fits_in(instance_type.allocatable());
        let offering = instance_type
            .available_offerings()
            .any(|o| o.is_compatible(requirements));
        checks.requirements_met |= compatible;
        checks.fits |= fits;
        checks.has_offering |= offering;
        checks.requirements_and_fits |= compatible && fits && !offering;
        checks.requirements_and_offering |= compatible && offering && !fits;
        checks.fits_and_offering |= fits && offering && !compatible;
    }
    Reason::InstanceTypes {
        requirements: requirements.to_string(),
        requests: need.to_string(),
        checks,
    }
}
