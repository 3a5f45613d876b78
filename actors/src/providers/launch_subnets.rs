//! Launch subnets (reference 4.2 `subnet`, Karpenter's `ZonalSubnetsForLaunch`): for each zone of
//! an `EC2NodeClass`'s resolved subnets, the subnet with the most free IP addresses, counting the
//! addresses launches in flight will take.
//!
//! Data flow: the `NodeClass` work resolves `status.subnets`; free-address counts come from
//! `DescribeSubnets` (cached 5 minutes, fed by [`LaunchSubnets::record`] when the `NodeClass`
//! work already described them). [`LaunchSubnets::zonal_subnets_for_launch`] picks one subnet per
//! zone and debits each pick by the smallest pod count among the candidate types offered there
//! (what the launch will at least consume); [`LaunchSubnets::update_inflight`] credits back the
//! subnets the fleet did not use. A fresh `DescribeSubnets` count replaces the tracked one.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::instances::with_capacity_type;
use crate::ports::aws_error::AwsError;
use crate::ports::ec2::{Ec2Api, Filter, Subnet};
use karpenter_core::apis::EC2NodeClass;
use karpenter_core::apis::labels;
use karpenter_core::domain::instance_type::CapacityType;
use karpenter_core::domain::instance_type::InstanceType;
use karpenter_core::domain::requirements::{Requirement, Requirements};

/// How long a subnet's free-address count is trusted (Karpenter's `AvailableIPAddressTTL`).
pub const AVAILABLE_IP_ADDRESS_TTL: Duration = Duration::from_mins(5);

/// The subnet a launch uses in one zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZonalSubnet {
    pub id: String,
    pub zone: String,
    pub zone_id: Option<String>,
    /// Free addresses when it was chosen (before this launch's debit).
    pub available_ips: i64,
}

#[derive(Debug, Default)]
struct State {
    /// Subnet id to its free-address count and when that count expires.
    available: HashMap<String, (i64, Instant)>,
    /// Subnet id to the free addresses left after launches in flight.
    inflight: HashMap<String, i64>,
}

/// Free addresses per subnet and the choice of launch subnets.
#[derive(Debug)]
pub struct LaunchSubnets {
    ec2: Arc<dyn Ec2Api>,
    state: Mutex<State>,
}

/// The smallest pod capacity among the types with an available offering of this capacity type
/// in this zone: the addresses a launch there takes at least (0 when none is offered).
fn min_pods(instance_types: &[Arc<InstanceType>], zone: &str, capacity_type: CapacityType) -> i64 {
    let requirements = with_capacity_type(
        &Requirements::from_requirements([Requirement::in_values(labels::ZONE, &[zone])]),
        capacity_type,
    );
    instance_types
        .iter()
        .filter(|it| {
            it.available_offerings()
                .any(|o| o.is_compatible(&requirements))
        })
        .map(|it| it.capacity.pods)
        .min()
        .unwrap_or(0)
}

impl LaunchSubnets {
    #[must_use]
    pub fn new(ec2: Arc<dyn Ec2Api>) -> Self {
        LaunchSubnets {
            ec2,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records free-address counts fresh from `DescribeSubnets`; they replace the tracked
    /// in-flight counts of those subnets.
    pub fn record(&self, subnets: &[Subnet]) {
        let expires = Instant::now() + AVAILABLE_IP_ADDRESS_TTL;
        let mut state = self.lock();
        for subnet in subnets {
            state.available.insert(
                subnet.id.clone(),
                (i64::from(subnet.available_ip_address_count), expires),
            );
            state.inflight.remove(&subnet.id);
        }
    }

    /// Describes the subnets whose counts are unknown or expired.
    async fn refresh(&self, ids: &[String]) -> Result<(), AwsError> {
        let now = Instant::now();
        let stale: Vec<&str> = {
            let state = self.lock();
            ids.iter()
                .filter(|id| state.available.get(*id).is_none_or(|(_, at)| *at <= now))
                .map(String::as_str)
                .collect()
        };
        if stale.is_empty() {
            return Ok(());
        }
        let described = self
            .ec2
            .describe_subnets(&[Filter::new("subnet-id", &stale)])
            .await?;
        self.record(&described);
        Ok(())
    }

    /// One subnet per zone of the class's subnets: the one with the most free addresses
    /// (in-flight launches counted), each debited by what this launch will take.
    pub async fn zonal_subnets_for_launch(
        &self,
        nodeclass: &EC2NodeClass,
        instance_types: &[Arc<InstanceType>],
        capacity_type: CapacityType,
    ) -> Result<BTreeMap<String, ZonalSubnet>, AwsError> {
        let subnets = nodeclass
            .status
            .as_ref()
            .map(|s| s.subnets.as_slice())
            .unwrap_or_default();
        let ids: Vec<String> = subnets.iter().map(|s| s.id.clone()).collect();
        self.refresh(&ids).await?;
        let mut state = self.lock();
        let count = |state: &State, id: &str| -> i64 {
            state
                .inflight
                .get(id)
                .copied()
                .or_else(|| state.available.get(id).map(|(count, _)| *count))
                .unwrap_or(0)
        };
        let mut chosen: BTreeMap<String, ZonalSubnet> = BTreeMap::new();
        for subnet in subnets {
            if let Some(current) = chosen.get(&subnet.zone)
                && count(&state, &current.id) >= count(&state, &subnet.id)
            {
                continue;
            }
            chosen.insert(
                subnet.zone.clone(),
                ZonalSubnet {
                    id: subnet.id.clone(),
                    zone: subnet.zone.clone(),
                    zone_id: subnet.zone_id.clone(),
                    available_ips: state.available.get(&subnet.id).map_or(0, |(c, _)| *c),
                },
            );
        }
        for subnet in chosen.values() {
            let predicted = min_pods(instance_types, &subnet.zone, capacity_type);
            let left = count(&state, &subnet.id) - predicted;
            state.inflight.insert(subnet.id.clone(), left);
        }
        Ok(chosen)
    }

    /// After a fleet request: gives back the addresses debited from the subnets the fleet did
    /// not launch into (`launched_subnet` is `None` when nothing launched), unless their count
    /// was refreshed meanwhile.
    pub fn update_inflight(
        &self,
        zonal_subnets: &BTreeMap<String, ZonalSubnet>,
        launched_subnet: Option<&str>,
        instance_types: &[Arc<InstanceType>],
        capacity_type: CapacityType,
    ) {
        let mut state = self.lock();
        for subnet in zonal_subnets.values() {
            if Some(subnet.id.as_str()) == launched_subnet {
                continue;
            }
            let unchanged = state
                .available
                .get(&subnet.id)
                .is_some_and(|(count, _)| *count == subnet.available_ips);
            if !unchanged {
                continue;
            }
            let credit = min_pods(instance_types, &subnet.zone, capacity_type);
            if let Some(left) = state.inflight.get_mut(&subnet.id) {
                *left += credit;
            }
        }
    }

    /// Free addresses of a subnet after launches in flight, if known.
    #[must_use]
    pub fn inflight_ips(&self, subnet_id: &str) -> Option<i64> {
        self.lock().inflight.get(subnet_id).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kwok::ec2::{KwokEc2, KwokEc2Config, KwokEc2Deps};
    use crate::ports::clock::SystemClock;
    use karpenter_core::apis::ec2nodeclass::{EC2NodeClassStatus, Subnet as StatusSubnet};
    use karpenter_core::domain::instance_type::{Offering, Overhead};

    fn subnet(id: &str, zone: &str, free: u32) -> Subnet {
        Subnet {
            id: id.into(),
            zone: zone.into(),
            available_ip_address_count: free,
            ..Subnet::default()
        }
    }

    fn nodeclass(subnets: &[Subnet]) -> EC2NodeClass {
        let spec = serde_json::from_value(serde_json::json!({
            "subnetSelectorTerms": [{"id": "subnet-a"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "amiSelectorTerms": [{"id": "ami-1"}],
            "amiFamily": "AL2023",
            "role": "node",
        }))
        .expect("spec");
        let mut class = EC2NodeClass::new("default", spec);
        class.status = Some(EC2NodeClassStatus {
            subnets: subnets
                .iter()
                .map(|s| StatusSubnet {
                    id: s.id.clone(),
                    zone: s.zone.clone(),
                    zone_id: None,
                })
                .collect(),
            ..EC2NodeClassStatus::default()
        });
        class
    }

    fn types() -> Vec<Arc<InstanceType>> {
        [("small", 10), ("big", 50)]
            .into_iter()
            .map(|(name, pods)| {
                Arc::new(InstanceType::new(
                    name,
                    Requirements::new(),
                    vec![Offering::new("z1", "on-demand", 0.1)],
                    karpenter_core::domain::resources::Resources::core(1000, 1 << 30, pods),
                    Overhead::default(),
                ))
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn the_subnet_with_most_free_addresses_wins_and_launches_in_flight_count() {
        let ec2 = KwokEc2::new(
            KwokEc2Config::new("us-west-2", "test"),
            KwokEc2Deps {
                clock: Arc::new(SystemClock),
                events: None,
            },
        )
        .expect("kwok");
        let provider = LaunchSubnets::new(Arc::new(ec2));
        let subnets = [subnet("subnet-a", "z1", 100), subnet("subnet-b", "z1", 105)];
        provider.record(&subnets);
        let class = nodeclass(&subnets);
        let chosen = provider
            .zonal_subnets_for_launch(&class, &types(), CapacityType::OnDemand)
            .await
            .expect("chosen");
        assert_eq!(chosen["z1"].id, "subnet-b");
        // The launch takes at least the smallest type's 10 pods: b has 95 left, a still 100.
        assert_eq!(provider.inflight_ips("subnet-b"), Some(95));
        let next = provider
            .zonal_subnets_for_launch(&class, &types(), CapacityType::OnDemand)
            .await
            .expect("chosen");
        assert_eq!(next["z1"].id, "subnet-a");
        // The fleet used neither: the addresses come back.
        provider.update_inflight(&next, None, &types(), CapacityType::OnDemand);
        assert_eq!(provider.inflight_ips("subnet-a"), Some(100));
        // A fresh count replaces what was tracked.
        provider.record(&[subnet("subnet-b", "z1", 80)]);
        assert_eq!(provider.inflight_ips("subnet-b"), None);
    }
}
