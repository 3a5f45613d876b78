//! Ports of the AWS provider's scheduling suite (`aws: test/suites/scheduling/suite_test.go`)
//! over the simulation: well-known labels selected through a pod's node selector and required
//! and preferred node affinity (instance type, zone id, local `NVMe`, encryption in transit,
//! deprecated labels, topology and architecture, restricted domain exceptions), the pool
//! template's annotations on the node, and provisioning for a deployment, for self affinity
//! and for a zonal spread; besides, arm64 beside amd64, spot beside on-demand and hostname
//! anti-affinity. Upstream's pool is "fully flexible": instance category and generation
//! `Exists`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter::sim::clock::SimClock;
use karpenter::sim::scenario::{LoadedScenario, Simulation};
use karpenter::sim::world::{KwokAws, KwokAwsConfig};
use karpenter_actors::ports::cloud_provider::parse_provider_id;
use karpenter_actors::ports::ec2::{Instance, Subnet};
use serde_json::json;

use super::support::{
    self, POOL, PoolScenario, REGION, describe, hostname_affinity, in_simulation, is_bound,
    label_of, nodes, pods,
};

/// Upstream's `BeforeEach`: category and generation `Exists`, so every type may be chosen.
const FLEXIBLE: [&str; 2] = [
    "{key: karpenter.k8s.aws/instance-category, operator: Exists}",
    "{key: karpenter.k8s.aws/instance-generation, operator: Exists}",
];

/// How long a test runs: launch, registration and readiness take under a minute in kwok.
const SETTLED: Duration = Duration::from_secs(90);

/// A node selector requirement.
fn requirement(key: &str, operator: &str, values: &[&str]) -> serde_json::Value {
    json!({"key": key, "operator": operator, "values": values})
}

/// Upstream's `PodOptions{NodeSelector, NodeRequirements, NodePreferences}` as workload fields
/// (YAML lines at 4 spaces): `selector` as the node selector, and `requirements` both required
/// and preferred.
fn node_affinity(selector: &[(&str, &str)], requirements: &[serde_json::Value]) -> String {
    let selector: serde_json::Map<String, serde_json::Value> = selector
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let affinity = json!({"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": requirements}],
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": requirements}},
        ],
    }});
    let selector =
        (!selector.is_empty()).then(|| format!("    nodeSelector: {}\n", json!(selector)));
    let affinity = (!requirements.is_empty()).then(|| format!("    affinity: {affinity}\n"));
    selector.unwrap_or_default() + &affinity.unwrap_or_default()
}

/// The selector's pairs as `In` requirements (upstream's `lo.MapToSlice`).
fn as_requirements(selector: &[(&str, &str)]) -> Vec<serde_json::Value> {
    selector
        .iter()
        .map(|(k, v)| requirement(k, "In", &[v]))
        .collect()
}

/// A workload of `replicas` small pods from the start, with `extra` fields.
fn workload(name: &str, replicas: u32, extra: &str) -> String {
    support::workload(
        name,
        "100m",
        &format!("[{{at: 0s, replicas: {replicas}}}]"),
        extra,
    )
}

/// Runs `scenario` for [`SETTLED`]: every pod bound and running; the nodes and kwok's
/// instances.
async fn settled(scenario: LoadedScenario) -> (Vec<Node>, Vec<Instance>) {
    let mut sim = Simulation::start(scenario, None).await.unwrap();
    assert!(sim.advance(SETTLED).await);
    let pods = pods(&sim).await;
    assert!(!pods.is_empty());
    let nodes = nodes(&sim).await;
    for pod in &pods {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        assert!(
            is_bound(pod) && phase == Some("Running"),
            "{:?} not running ({phase:?}) on:\n{}",
            pod.metadata.name,
            describe(&nodes)
        );
    }
    let instances = sim.world().ec2.instances();
    sim.finish().await;
    (nodes, instances)
}

/// One pod selecting `selector` (node selector and affinity) and `requirements`, on upstream's
/// flexible pool: one node, which carries every selected label; the node.
async fn one_node_selecting(
    selector: &[(&str, &str)],
    requirements: &[serde_json::Value],
    scenario: PoolScenario<'_>,
) -> Node {
    let node = one_node_for(selector, requirements, scenario).await;
    for (key, value) in selector {
        assert_eq!(
            label_of(&node, key),
            Some(*value),
            "{key} on {:?}",
            node.metadata.labels
        );
    }
    node
}

/// [`one_node_selecting`] without the check of the node's labels.
async fn one_node_for(
    selector: &[(&str, &str)],
    requirements: &[serde_json::Value],
    scenario: PoolScenario<'_>,
) -> Node {
    let mut all = as_requirements(selector);
    all.extend_from_slice(requirements);
    let workloads = workload("app", 1, &node_affinity(selector, &all));
    let (nodes, _) = settled(
        PoolScenario {
            workloads: &workloads,
            ..scenario
        }
        .load(),
    )
    .await;
    assert_eq!(nodes.len(), 1, "{}", describe(&nodes));
    nodes.into_iter().next().unwrap()
}

fn flexible() -> PoolScenario<'static> {
    PoolScenario {
        requirements: &FLEXIBLE,
        ..PoolScenario::default()
    }
}

/// `Scheduling / It("should apply annotations to the node")`.
#[test]
fn the_pool_templates_annotations_are_on_the_node() {
    in_simulation(|| async {
        let metadata = "        metadata:\n          annotations: {foo: bar, karpenter.sh/do-not-disrupt: \"true\"}\n";
        let node = one_node_selecting(
            &[],
            &[],
            PoolScenario {
                template_metadata: metadata,
                ..flexible()
            },
        )
        .await;
        let annotations = node.metadata.annotations.unwrap_or_default();
        assert_eq!(annotations.get("foo").map(String::as_str), Some("bar"));
        assert_eq!(
            annotations
                .get("karpenter.sh/do-not-disrupt")
                .map(String::as_str),
            Some("true")
        );
    });
}

/// `Scheduling / Labels / It("should support well-known labels for instance type selection")`:
/// upstream's selector for a c5.large, with the catalogue's values for its AWS labels.
#[test]
fn well_known_labels_select_the_instance_type() {
    in_simulation(|| async {
        let selector = [
            ("karpenter.sh/nodepool", POOL),
            ("node.kubernetes.io/instance-type", "c5.large"),
            ("karpenter.k8s.aws/instance-hypervisor", "nitro"),
            ("karpenter.k8s.aws/instance-category", "c"),
            ("karpenter.k8s.aws/instance-generation", "5"),
            ("karpenter.k8s.aws/instance-family", "c5"),
            ("karpenter.k8s.aws/instance-size", "large"),
            ("karpenter.k8s.aws/instance-cpu", "2"),
            ("karpenter.k8s.aws/instance-cpu-manufacturer", "intel"),
            (
                "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
                "3400",
            ),
            ("karpenter.k8s.aws/instance-memory", "4096"),
            ("karpenter.k8s.aws/instance-ebs-bandwidth", "4750"),
            ("karpenter.k8s.aws/instance-network-bandwidth", "750"),
        ];
        one_node_selecting(&selector, &[], flexible()).await;
    });
}

/// kwok's discovered subnets, one per zone, as upstream's `env.GetSubnetInfo` (kwok's account
/// is the same in every simulation of the region).
fn subnets() -> Vec<Subnet> {
    let world = KwokAws::new(
        &KwokAwsConfig {
            region: REGION.into(),
            cluster_name: "simulated".into(),
            launch_latency: Duration::from_secs(10),
        },
        Arc::new(SimClock::at_epoch()),
    )
    .unwrap();
    let mut subnets = world.ec2.subnets().to_vec();
    subnets.dedup_by(|a, b| a.zone == b.zone);
    subnets
}

fn zone_of(node: &Node) -> (Option<&str>, Option<&str>) {
    (
        label_of(node, "topology.kubernetes.io/zone"),
        label_of(node, "topology.k8s.aws/zone-id"),
    )
}

/// `Scheduling / Labels / It("should support well-known labels for zone id selection")`: the
/// zone id of the first subnet; the node lands in that subnet's zone.
#[test]
fn the_zone_id_label_selects_the_zone() {
    let subnet = subnets().remove(0);
    in_simulation(|| async {
        let zone_id = [requirement(
            "topology.k8s.aws/zone-id",
            "In",
            &[subnet.zone_id.as_str()],
        )];
        let node = one_node_selecting(&[], &zone_id, flexible()).await;
        assert_eq!(
            zone_of(&node),
            (Some(subnet.zone.as_str()), Some(subnet.zone_id.as_str()))
        );
    });
}

/// `Scheduling / Provisioning / It("should provision a node for a pod with overlapping zone and
/// zone-id requirements")`: zones of subnets 0 and 1, zone ids of subnets 1 and 2: subnet 1.
#[test]
fn overlapping_zone_and_zone_id_requirements_get_the_zone_in_both() {
    let subnets = subnets();
    assert!(subnets.len() >= 3);
    in_simulation(|| async {
        let zones: Vec<&str> = subnets[0..2].iter().map(|s| s.zone.as_str()).collect();
        let ids: Vec<&str> = subnets[1..3].iter().map(|s| s.zone_id.as_str()).collect();
        let requirements = [
            requirement("topology.kubernetes.io/zone", "In", &zones),
            requirement("topology.k8s.aws/zone-id", "In", &ids),
        ];
        let node = one_node_for(&[], &requirements, flexible()).await;
        assert_eq!(
            zone_of(&node),
            (
                Some(subnets[1].zone.as_str()),
                Some(subnets[1].zone_id.as_str())
            )
        );
    });
}

/// `Scheduling / Provisioning / It("should provision nodes for pods with zone-id requirements
/// in the correct zone")`: one pod per subnet requiring its zone id and, through a label the
/// pool allows (`expected-zone-label Exists`), saying which zone that is.
#[test]
fn pods_requiring_a_zone_id_each_get_a_node_in_that_zone() {
    let subnets = subnets();
    in_simulation(|| async {
        let workloads: String = subnets
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let requirements = [
                    requirement("expected-zone-label", "In", &[s.zone.as_str()]),
                    requirement("topology.k8s.aws/zone-id", "In", &[s.zone_id.as_str()]),
                ];
                workload(&format!("zone-{i}"), 1, &node_affinity(&[], &requirements))
            })
            .collect();
        let scenario = PoolScenario {
            requirements: &["{key: expected-zone-label, operator: Exists}"],
            workloads: &workloads,
            ..PoolScenario::default()
        };
        let (nodes, _) = settled(scenario.load()).await;
        assert_eq!(nodes.len(), subnets.len(), "{}", describe(&nodes));
        for node in &nodes {
            let expected = label_of(node, "expected-zone-label").expect("the pod's label");
            let subnet = subnets.iter().find(|s| s.zone == expected).unwrap();
            assert_eq!(
                zone_of(node),
                (Some(subnet.zone.as_str()), Some(subnet.zone_id.as_str()))
            );
        }
    });
}

/// `Scheduling / Labels / It("should support well-known labels for local NVME storage")` and
/// `It("... for encryption in transit")`: `Gt 0` and `In true`, each on its own.
#[test]
fn local_nvme_and_encryption_in_transit_labels_select_instance_types_that_have_them() {
    in_simulation(|| async {
        let nvme = [requirement(
            "karpenter.k8s.aws/instance-local-nvme",
            "Gt",
            &["0"],
        )];
        let node = one_node_selecting(&[], &nvme, flexible()).await;
        let size: u64 = label_of(&node, "karpenter.k8s.aws/instance-local-nvme")
            .expect("the label")
            .parse()
            .unwrap();
        assert!(size > 0);
        let encrypted = [requirement(
            "karpenter.k8s.aws/instance-encryption-in-transit-supported",
            "In",
            &["true"],
        )];
        one_node_selecting(&[], &encrypted, flexible()).await;
    });
}

/// `Scheduling / Labels / It("should support well-known deprecated labels")`: Karpenter reads
/// each as its stable key (the EBS CSI driver's zone key too), and the node has the stable
/// labels (the deprecated ones are the kubelet's, the cloud controller's and the CSI driver's
/// to add, which the simulation's kubelet does not).
#[test]
fn deprecated_well_known_labels_select_the_node() {
    in_simulation(|| async {
        let zone = format!("{REGION}a");
        let selector = [
            ("failure-domain.beta.kubernetes.io/region", REGION),
            ("failure-domain.beta.kubernetes.io/zone", zone.as_str()),
            ("topology.ebs.csi.aws.com/zone", zone.as_str()),
            ("beta.kubernetes.io/arch", "amd64"),
            ("beta.kubernetes.io/os", "linux"),
            ("beta.kubernetes.io/instance-type", "c5.large"),
        ];
        let node = one_node_for(&selector, &[], flexible()).await;
        for (key, value) in [
            ("topology.kubernetes.io/region", REGION),
            ("topology.kubernetes.io/zone", zone.as_str()),
            ("kubernetes.io/arch", "amd64"),
            ("kubernetes.io/os", "linux"),
            ("node.kubernetes.io/instance-type", "c5.large"),
        ] {
            assert_eq!(label_of(&node, key), Some(value), "{key}");
        }
    });
}

/// `Scheduling / Labels / It("should support well-known labels for topology and
/// architecture")`.
#[test]
fn topology_and_architecture_labels_select_the_node() {
    in_simulation(|| async {
        let zone = format!("{REGION}a");
        let selector = [
            ("karpenter.sh/nodepool", POOL),
            ("topology.kubernetes.io/region", REGION),
            ("topology.kubernetes.io/zone", zone.as_str()),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/arch", "amd64"),
            ("karpenter.sh/capacity-type", "on-demand"),
        ];
        one_node_selecting(&selector, &[], flexible()).await;
    });
}

/// `Scheduling / Labels / DescribeTable("should support restricted label domain exceptions")`
/// with its three Entries: the pool allows `<domain>/team`, `<domain>/custom-label` and
/// `subdomain.<domain>/custom-label`; the pod's values end on the node.
#[test]
fn labels_of_restricted_domain_exceptions_are_set_on_the_node() {
    for domain in [
        "node-restriction.kuberentes.io",
        "node.kubernetes.io",
        "kops.k8s.io",
    ] {
        in_simulation(|| async {
            let keys = [
                format!("{domain}/team"),
                format!("{domain}/custom-label"),
                format!("subdomain.{domain}/custom-label"),
            ];
            let requirements: Vec<String> = keys
                .iter()
                .map(|k| format!("{{key: {k}, operator: Exists}}"))
                .collect();
            let requirements: Vec<&str> = requirements.iter().map(String::as_str).collect();
            let selector = [
                (keys[0].as_str(), "team-1"),
                (keys[1].as_str(), "custom-value"),
                (keys[2].as_str(), "custom-value"),
            ];
            let scenario = PoolScenario {
                requirements: &requirements,
                ..PoolScenario::default()
            };
            one_node_selecting(&selector, &[], scenario).await;
        });
    }
}

/// Runs one workload per `(name, count, extra fields)` on the flexible pool; the nodes and
/// instances.
async fn nodes_for(workloads: &[(&str, u32, String)]) -> (Vec<Node>, Vec<Instance>) {
    let workloads: String = workloads
        .iter()
        .map(|(name, count, extra)| workload(name, *count, extra))
        .collect();
    settled(
        PoolScenario {
            workloads: &workloads,
            ..flexible()
        }
        .load(),
    )
    .await
}

/// `Scheduling / Provisioning / It("should provision a node for a deployment")`: 50 replicas
/// on at most two nodes ("at worst two depending on batching").
#[test]
fn fifty_replicas_get_at_most_two_nodes() {
    in_simulation(|| async {
        let (nodes, _) = nodes_for(&[("app", 50, String::new())]).await;
        assert!(
            (1..=2).contains(&nodes.len()),
            "{} nodes:\n{}",
            nodes.len(),
            describe(&nodes)
        );
    });
}

/// `Scheduling / Provisioning / It("should provision a node for a self-affinity deployment")`.
#[test]
fn a_self_affine_deployment_gets_one_node() {
    in_simulation(|| async {
        let (nodes, _) = nodes_for(&[("app", 2, hostname_affinity("podAffinity", "app"))]).await;
        assert_eq!(nodes.len(), 1, "{}", describe(&nodes));
    });
}

/// `Utilization / It("should provision one pod per node")` (kubernetes-sigs
/// `test/suites/regression/intagration_test.go`): 100 `karpenter.sh/do-not-disrupt` pods with
/// required hostname anti-affinity get 100 nodes. (Upstream also sizes each pod at 1800m less
/// the DaemonSet overhead; the anti-affinity alone makes the count.)
#[test]
fn one_hundred_anti_affine_pods_get_one_hundred_nodes() {
    in_simulation(|| async {
        let extra = hostname_affinity("podAntiAffinity", "app")
            + "    annotations: {karpenter.sh/do-not-disrupt: \"true\"}\n";
        let (nodes, _) = nodes_for(&[("app", 100, extra)]).await;
        assert_eq!(nodes.len(), 100);
    });
}

/// Not an upstream `It` of these suites (the consolidation budget tests' setup): required
/// hostname anti-affinity puts each of three pods on a node of its own.
#[test]
fn hostname_anti_affinity_gives_each_pod_its_own_node() {
    in_simulation(|| async {
        let (nodes, _) =
            nodes_for(&[("app", 3, hostname_affinity("podAntiAffinity", "app"))]).await;
        assert_eq!(nodes.len(), 3, "{}", describe(&nodes));
    });
}

/// `Scheduling / Provisioning / It("should provision three nodes for a zonal topology
/// spread")`: `maxSkew: 1`, `minDomains: 3` over zones: three nodes in three zones.
#[test]
fn a_zonal_spread_with_three_min_domains_gets_three_nodes_in_three_zones() {
    in_simulation(|| async {
        let spread = "    topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, minDomains: 3}]\n";
        let (nodes, _) = nodes_for(&[("app", 3, spread.to_owned())]).await;
        assert_eq!(nodes.len(), 3, "{}", describe(&nodes));
        let zones: BTreeSet<&str> = nodes
            .iter()
            .filter_map(|n| label_of(n, "topology.kubernetes.io/zone"))
            .collect();
        assert_eq!(zones.len(), 3, "{zones:?}");
    });
}

/// Ours: pods selecting each value of `key` get a node with that value each (and no other);
/// the nodes and instances.
async fn one_node_per_value(key: &str, values: &[&str]) -> (Vec<Node>, Vec<Instance>) {
    let workloads: Vec<(&str, u32, String)> = values
        .iter()
        .map(|v| (*v, 1, node_affinity(&[(key, v)], &[])))
        .collect();
    let (nodes, instances) = nodes_for(&workloads).await;
    let mut seen: Vec<&str> = nodes.iter().filter_map(|n| label_of(n, key)).collect();
    seen.sort_unstable();
    let mut wanted = values.to_vec();
    wanted.sort_unstable();
    assert_eq!(seen, wanted, "{}", describe(&nodes));
    (nodes, instances)
}

/// Not an upstream `It`: an arm64 pod and an amd64 pod get one node each, each instance
/// running the alias's image for its architecture.
#[test]
fn arm64_and_amd64_pods_get_a_node_of_their_architecture_each() {
    in_simulation(|| async {
        let (nodes, instances) =
            one_node_per_value("kubernetes.io/arch", &["arm64", "amd64"]).await;
        let images: BTreeSet<&str> = nodes
            .iter()
            .map(|node| {
                let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
                let id = parse_provider_id(provider_id.unwrap()).unwrap().1;
                let instance = instances.iter().find(|i| i.id == id).unwrap();
                instance.image_id.as_str()
            })
            .collect();
        assert_eq!(images.len(), 2, "one image per architecture: {images:?}");
    });
}

/// Not an upstream `It`: a spot pod and an on-demand pod get one node each of their capacity
/// type.
#[test]
fn spot_and_on_demand_pods_get_a_node_of_their_capacity_type_each() {
    in_simulation(|| async {
        one_node_per_value("karpenter.sh/capacity-type", &["spot", "on-demand"]).await;
    });
}

/// Upstream's accelerated-label tests: the selected labels with the `al2@latest` alias
/// ("accelerated AMIs aren't yet available" for AL2023 there).
async fn accelerated_node(selector: &[(&str, &str)]) -> Node {
    let scenario = PoolScenario {
        alias: "al2@latest",
        ..flexible()
    };
    one_node_selecting(selector, &[], scenario).await
}

/// `Scheduling / Labels / It("should support well-known labels for a gpu (nvidia)")`.
#[test]
fn gpu_labels_select_an_nvidia_t4_instance() {
    in_simulation(|| async {
        accelerated_node(&[
            ("karpenter.k8s.aws/instance-gpu-name", "t4"),
            ("karpenter.k8s.aws/instance-gpu-memory", "16384"),
            ("karpenter.k8s.aws/instance-gpu-manufacturer", "nvidia"),
            ("karpenter.k8s.aws/instance-gpu-count", "1"),
        ])
        .await;
    });
}

/// `Scheduling / Labels / It("should support well-known labels for an accelerator
/// (inferentia2)")`.
#[test]
fn accelerator_labels_select_an_inferentia_instance() {
    in_simulation(|| async {
        accelerated_node(&[
            ("karpenter.k8s.aws/instance-accelerator-name", "inferentia"),
            ("karpenter.k8s.aws/instance-accelerator-manufacturer", "aws"),
            ("karpenter.k8s.aws/instance-accelerator-count", "1"),
        ])
        .await;
    });
}

/// `aws: Extended Resources / It("should provision nodes for a deployment that requests
/// vpc.amazonaws.com/pod-eni (security groups for pods)")`: two pods asking one pod ENI each get
/// a trunking-capable type whose node advertises the pod ENIs. Upstream enables the VPC CNI's
/// pod ENIs on the cluster; the simulated kubelet advertises the NodeClaim's capacity.
#[test]
fn pods_requesting_pod_enis_get_a_trunking_node() {
    in_simulation(|| async {
        let workloads = "  - name: sgp\n    requests: {cpu: 100m, memory: 256Mi, \"vpc.amazonaws.com/pod-eni\": \"1\"}\n    steps: [{at: 0s, replicas: 2}]\n";
        let (nodes, _) = settled(
            PoolScenario {
                workloads,
                ..flexible()
            }
            .load(),
        )
        .await;
        assert!(!nodes.is_empty());
        for node in &nodes {
            let status = node.status.clone().unwrap_or_default();
            let enis = status
                .allocatable
                .unwrap_or_default()
                .get("vpc.amazonaws.com/pod-eni")
                .map(|q| q.0.clone());
            let enis: u32 = enis.as_deref().unwrap_or("0").parse().unwrap();
            assert!(enis >= 1, "{:?} offers {enis} pod ENIs", node.metadata.name);
        }
    });
}

/// `Scheduling / Labels / It("should support well-known labels for windows-build version")`:
/// a Windows Server 2022 pool (`windows2022@latest`, `kubernetes.io/os In windows`). Upstream's
/// IPAM setup is the VPC resource controller's, which the simulation has no need of.
#[test]
fn the_windows_build_label_selects_a_windows_2022_node() {
    in_simulation(|| async {
        let requirements = [
            FLEXIBLE[0],
            FLEXIBLE[1],
            r#"{key: kubernetes.io/os, operator: In, values: ["windows"]}"#,
        ];
        let scenario = PoolScenario {
            alias: "windows2022@latest",
            requirements: &requirements,
            ..PoolScenario::default()
        };
        let selector = [
            ("node.kubernetes.io/windows-build", "10.0.20348"),
            ("kubernetes.io/os", "windows"),
        ];
        one_node_selecting(&selector, &[], scenario).await;
    });
}

/// A NodePool of `weight` allowing only `instance_type` (linux), as YAML list entries at 2
/// spaces.
fn weighted_pool(name: &str, weight: u32, instance_type: &str) -> String {
    format!(
        r"  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata:
      name: {name}
    spec:
      weight: {weight}
      template:
        spec:
          nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {POOL}}}
          requirements:
            - {{key: kubernetes.io/os, operator: In, values: [linux]}}
            - {{key: node.kubernetes.io/instance-type, operator: In, values: [{instance_type}]}}
      disruption:
        consolidateAfter: Never
"
    )
}

/// `Provisioning / It("should provision a node using a NodePool with higher priority")`: a
/// pool of weight 10 allowing only `t3.nano` and one of weight 100 allowing only `c5.large`;
/// one pod gets one `c5.large` node of the heavier pool (and the flexible, unweighted pool
/// of these tests, weight 0, is not used either).
#[test]
fn a_pod_lands_on_the_nodepool_with_the_highest_weight() {
    in_simulation(|| async {
        let workloads = workload("app", 1, "");
        let yaml = PoolScenario {
            workloads: &workloads,
            ..flexible()
        }
        .yaml()
        .replacen(
            "nodePools:\n",
            &format!(
                "nodePools:\n{}{}",
                weighted_pool("low-priority", 10, "t3.nano"),
                weighted_pool("high-priority", 100, "c5.large")
            ),
            1,
        );
        let scenario =
            LoadedScenario::from_yaml(&yaml, None).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let (nodes, instances) = settled(scenario).await;
        assert_eq!(nodes.len(), 1, "{}", describe(&nodes));
        let node = &nodes[0];
        assert_eq!(
            label_of(node, "karpenter.sh/nodepool"),
            Some("high-priority")
        );
        assert_eq!(
            label_of(node, "node.kubernetes.io/instance-type"),
            Some("c5.large")
        );
        let launched: Vec<&str> = instances.iter().map(|i| i.instance_type.as_str()).collect();
        assert_eq!(launched, ["c5.large"]);
    });
}
