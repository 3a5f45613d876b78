//! Turning the solver state into a [`Plan`]: placements, NodeClaims with their cheapest
//! instance types, and a reason per NodePool for every pod left pending.

use std::sync::Arc;

use crate::apis::labels;
use crate::domain::instance_type::{InstanceType, satisfies_min_values};
use crate::domain::requirements::Requirement;

use super::super::explain;
use super::super::plan::{ExistingPlacement, NewNodeClaim, Plan, PodFailure, PoolReason, Reason};
use super::{SlotKind, Solver};

impl Solver<'_> {
    pub(crate) fn into_plan(mut self) -> Plan {
        let mut plan = Plan {
            pools_without_instance_types: self
                .skipped_pools
                .iter()
                .map(|i| self.snapshot.node_pools[*i].name.clone())
                .collect(),
            ..Plan::default()
        };
        let mut failed_pods: Vec<(usize, Option<Reason>, Option<String>)> = Vec::new();
        for slot in 0..self.slots.len() {
            if self.slots[slot].pods.is_empty() {
                continue;
            }
            match self.slots[slot].kind {
                SlotKind::Existing(node) => plan.existing.push(ExistingPlacement {
                    node,
                    node_name: self.snapshot.existing_nodes[node].name.clone(),
                    pods: self.slots[slot].pods.clone(),
                }),
                SlotKind::Claim(pool) => {
                    let class = self.slots[slot].class;
                    self.ensure_class_order(pool, class);
                    let (s, p) = (&self.slots[slot], &self.pools[pool]);
                    let mut requirements = self.reqs.get(class).clone();
                    if !s.reserved.is_empty() {
                        // Karpenter's FinalizeScheduling: launch into the held reservations.
                        requirements.set(Requirement::in_values(
                            labels::CAPACITY_TYPE,
                            &[labels::CAPACITY_TYPE_RESERVED],
                        ));
                        requirements.add(Requirement::in_shared(
                            Arc::from(labels::CAPACITY_RESERVATION_ID),
                            s.reserved.iter().cloned(),
                        ));
                    }
                    // The class's price order, restricted to the types that still fit.
                    let types: Vec<Arc<InstanceType>> = p.class_order[&class]
                        .iter()
                        .filter(|t| s.types.contains(**t) && s.used.fits_in(&p.alloc[**t]))
                        .filter(|t| {
                            s.reserved.is_empty() || p.types[**t].is_compatible(&requirements)
                        })
                        .take(self.max_instance_types)
                        .map(|t| p.types[*t].clone())
                        .collect();
                    if let Err(error) = satisfies_min_values(&types, &requirements) {
                        for pod in &s.pods {
                            failed_pods.push((
                                *pod,
                                Some(Reason::MinValues {
                                    key: error.key.clone(),
                                    needed: error.needed,
                                    available: error.available,
                                }),
                                Some(p.name.clone()),
                            ));
                        }
                        continue;
                    }
                    let min_values = requirements
                        .get(labels::INSTANCE_TYPE)
                        .and_then(Requirement::min_values);
                    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
                    requirements.add(
                        Requirement::in_values(labels::INSTANCE_TYPE, &names)
                            .with_min_values(min_values),
                    );
                    let price = types
                        .first()
                        .map_or(0.0, |t| t.cheapest_price(&requirements));
                    plan.new_node_claims.push(NewNodeClaim {
                        node_pool: p.name.clone(),
                        node_pool_index: p.input,
                        requirements,
                        requests: s.used.clone(),
                        instance_types: types,
                        pods: s.pods.clone(),
                        price,
                    });
                }
            }
        }
        for pod in 0..self.snapshot.pods.len() {
            if self.placed[pod].is_none() {
                failed_pods.push((pod, None, None));
            }
        }
        failed_pods.sort_by_key(|(pod, _, _)| *pod);
        for (pod, reason, pool) in failed_pods {
            let reasons = match (reason, pool) {
                (Some(reason), Some(node_pool)) => vec![PoolReason { node_pool, reason }],
                _ => self.explain(pod),
            };
            plan.failures.push(PodFailure {
                pod,
                pod_key: self.snapshot.pods[pod].key(),
                reasons,
                deferred: self.deferred[pod],
            });
        }
        plan
    }

    /// Why each NodePool refused the pod at its last relaxation step. A pod waiting for
    /// reserved capacity was never offered to the NodePools after the one holding it back.
    pub(super) fn explain(&mut self, pod: usize) -> Vec<PoolReason> {
        let variant = self.last_variant[pod];
        self.prepare_attempt(variant);
        let mut out = Vec::new();
        let mut order: Vec<(usize, Option<usize>)> = self
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| (p.input, Some(i)))
            .collect();
        order.extend(self.skipped_pools.iter().map(|i| (*i, None)));
        for (input, pool) in order {
            let node_pool = self.snapshot.node_pools[input].name.clone();
            let reason = match pool {
                None => Reason::NoInstanceTypes,
                Some(pool) => match self.check_new(pool, variant) {
                    Ok(_) => continue,
                    Err(reject) => explain::reason(self, pool, variant, reject),
                },
            };
            let waiting = reason == Reason::ReservedCapacity;
            out.push(PoolReason { node_pool, reason });
            if waiting {
                break;
            }
        }
        out
    }
}
