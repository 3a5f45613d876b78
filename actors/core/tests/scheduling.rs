//! The scheduler, black-box: for each kind of constraint, a table of pods that must be placed
//! and pods that must be refused with the right reason; then property tests that every plan
//! keeps every placed pod's constraints, fits each NodeClaim into its cheapest instance type
//! and stays within the NodePools' limits.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, Pod, PodAffinity, PodAffinityTerm, PodAntiAffinity, PodSpec,
    PreferredSchedulingTerm, ResourceRequirements, Toleration as ApiToleration,
    TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector as ApiSelector, ObjectMeta};
use karpenter_core::apis::SlimPod;
use karpenter_core::apis::labels::{self, CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, ZONE};
use karpenter_core::apis::taints::{Taint, TaintEffect};
use karpenter_core::domain::instance_type::{InstanceType, Offering, Overhead};
use karpenter_core::domain::requirements::{
    AllowUndefined, Incompatibility, Operator, Requirement, Requirements,
};
use karpenter_core::domain::resources::{CPU, MEMORY, NODES, ResourceLimits, Resources};
use karpenter_core::domain::scheduling::workload::{ZONES, fake_instance_type};
use karpenter_core::domain::scheduling::{
    BoundPod, ExistingNode, InstanceTypeChecks, NodePoolInput, Options, Placement, Plan,
    PreferencePolicy, Reason, SchedulingPod, Snapshot, TopologyRule, TypeCache, cost_lower_bound,
    cost_report, first_untolerated, solve, solve_observed, solve_shared,
};

const GI: i64 = 1 << 30;

// ---- builders ------------------------------------------------------------------------------

/// A pod under construction.
#[derive(Clone)]
struct PodBuilder(Pod);

fn pod(name: &str) -> PodBuilder {
    PodBuilder(Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            uid: Some(format!("uid-{name}")),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".to_owned(),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    })
}

fn list(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn selector(pairs: &[(&str, &str)]) -> ApiSelector {
    ApiSelector {
        match_labels: Some(map(pairs)),
        match_expressions: None,
    }
}

fn expression(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
    }
}

fn term(key: &str, labels: &[(&str, &str)]) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(selector(labels)),
        topology_key: key.to_owned(),
        ..PodAffinityTerm::default()
    }
}

impl PodBuilder {
    fn spec(&mut self) -> &mut PodSpec {
        self.0.spec.as_mut().unwrap()
    }

    fn affinity(&mut self) -> &mut Affinity {
        self.spec().affinity.get_or_insert_with(Affinity::default)
    }

    fn requests(mut self, cpu: &str, memory: &str) -> Self {
        self.spec().containers[0].resources = Some(ResourceRequirements {
            requests: Some(list(&[(CPU, cpu), (MEMORY, memory)])),
            ..ResourceRequirements::default()
        });
        self
    }

    fn resource(mut self, name: &str, amount: &str) -> Self {
        let resources = self.spec().containers[0]
            .resources
            .get_or_insert_with(ResourceRequirements::default);
        resources
            .requests
            .get_or_insert_with(BTreeMap::new)
            .insert(name.to_owned(), Quantity(amount.to_owned()));
        self
    }

    fn init_container(mut self, cpu: &str, sidecar: bool) -> Self {
        let container = Container {
            name: format!("init-{cpu}"),
            restart_policy: sidecar.then(|| "Always".to_owned()),
            resources: Some(ResourceRequirements {
                requests: Some(list(&[(CPU, cpu)])),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        };
        self.spec()
            .init_containers
            .get_or_insert_with(Vec::new)
            .push(container);
        self
    }

    fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value.to_owned());
        self
    }

    fn namespace(mut self, namespace: &str) -> Self {
        self.0.metadata.namespace = Some(namespace.to_owned());
        self
    }

    fn node_selector(mut self, key: &str, value: &str) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value.to_owned());
        self
    }

    /// Required node affinity with these ORed terms.
    fn required_terms(mut self, terms: Vec<Vec<NodeSelectorRequirement>>) -> Self {
        self.affinity().node_affinity = Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: terms
                    .into_iter()
                    .map(|expressions| NodeSelectorTerm {
                        match_expressions: Some(expressions),
                        match_fields: None,
                    })
                    .collect(),
            }),
            preferred_during_scheduling_ignored_during_execution: None,
        });
        self
    }

    fn preferred_term(mut self, weight: i32, expressions: Vec<NodeSelectorRequirement>) -> Self {
        let node = self
            .affinity()
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        node.preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PreferredSchedulingTerm {
                weight,
                preference: NodeSelectorTerm {
                    match_expressions: Some(expressions),
                    match_fields: None,
                },
            });
        self
    }

    fn toleration(mut self, key: &str, operator: &str, value: Option<&str>, effect: &str) -> Self {
        self.spec()
            .tolerations
            .get_or_insert_with(Vec::new)
            .push(ApiToleration {
                key: Some(key.to_owned()),
                operator: Some(operator.to_owned()),
                value: value.map(str::to_owned),
                effect: (!effect.is_empty()).then(|| effect.to_owned()),
                toleration_seconds: None,
            });
        self
    }

    fn spread(self, key: &str, max_skew: i32, labels: &[(&str, &str)]) -> Self {
        self.spread_with(TopologySpreadConstraint {
            max_skew,
            topology_key: key.to_owned(),
            when_unsatisfiable: "DoNotSchedule".to_owned(),
            label_selector: Some(selector(labels)),
            ..TopologySpreadConstraint::default()
        })
    }

    fn spread_with(mut self, constraint: TopologySpreadConstraint) -> Self {
        self.spec()
            .topology_spread_constraints
            .get_or_insert_with(Vec::new)
            .push(constraint);
        self
    }

    fn pod_affinity(mut self, key: &str, labels: &[(&str, &str)]) -> Self {
        self.affinity()
            .pod_affinity
            .get_or_insert_with(PodAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term(key, labels));
        self
    }

    fn anti_affinity(mut self, key: &str, labels: &[(&str, &str)]) -> Self {
        self.affinity()
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term(key, labels));
        self
    }

    fn preferred_anti_affinity(mut self, weight: i32, key: &str, labels: &[(&str, &str)]) -> Self {
        self.affinity()
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(WeightedPodAffinityTerm {
                weight,
                pod_affinity_term: term(key, labels),
            });
        self
    }

    fn host_port(mut self, port: i32) -> Self {
        self.spec().containers[0]
            .ports
            .get_or_insert_with(Vec::new)
            .push(ContainerPort {
                container_port: port,
                host_port: Some(port),
                protocol: Some("TCP".to_owned()),
                ..ContainerPort::default()
            });
        self
    }

    fn build(&self) -> SchedulingPod {
        SchedulingPod::from_pod(&SlimPod::from(&self.0)).unwrap()
    }

    fn bound(&self) -> Arc<BoundPod> {
        let mut pod = self.0.clone();
        pod.spec.as_mut().unwrap().node_name = Some("bound".to_owned());
        Arc::new(BoundPod::from_pod(&SlimPod::from(pod)))
    }
}

/// Karpenter's fake types with 1, 2, 4, 8 and 16 CPUs (2 GiB per CPU), spot in zones 1-2,
/// on-demand in zones 1-3, with the well-known `instance-cpu` label.
fn small_types() -> Vec<Arc<InstanceType>> {
    [1, 2, 4, 8, 16]
        .iter()
        .map(|cpu| {
            let mut t = fake_instance_type(&format!("c{cpu}"), *cpu, 2 * cpu * GI, 10 * cpu);
            t.requirements.add(Requirement::in_values(
                labels::INSTANCE_CPU,
                &[cpu.to_string().as_str()],
            ));
            Arc::new(t)
        })
        .collect()
}

fn gpu_type() -> Arc<InstanceType> {
    let mut capacity = Resources::core(8000, 32 * GI, 80);
    capacity.set("nvidia.com/gpu", 2);
    Arc::new(InstanceType::new(
        "gpu8",
        Requirements::from_requirements([
            Requirement::in_values(INSTANCE_TYPE, &["gpu8"]),
            Requirement::in_values(ZONE, &ZONES),
            Requirement::in_values(CAPACITY_TYPE, &["on-demand"]),
        ]),
        ZONES
            .iter()
            .map(|z| Offering::new(z, "on-demand", 5.0))
            .collect(),
        capacity,
        Overhead::default(),
    ))
}

fn node_pool(name: &str) -> NodePoolInput {
    NodePoolInput::new(name, small_types())
}

fn existing_node(name: &str, zone: &str, cpu: i64) -> ExistingNode {
    ExistingNode {
        name: name.to_owned(),
        labels: map(&[
            (HOSTNAME, name),
            (ZONE, zone),
            (INSTANCE_TYPE, "c-existing"),
            (CAPACITY_TYPE, "on-demand"),
        ])
        .into(),
        allocatable: Resources::core(cpu * 1000, 2 * cpu * GI, 110),
        capacity: Resources::core(cpu * 1000, 2 * cpu * GI, 110),
        initialized: true,
        registered: true,
        ..ExistingNode::default()
    }
}

fn snapshot(pods: &[PodBuilder], pools: Vec<NodePoolInput>) -> Snapshot {
    Snapshot {
        pods: pods.iter().map(PodBuilder::build).collect(),
        node_pools: pools,
        ..Snapshot::default()
    }
}

fn run(snapshot: &Snapshot) -> Plan {
    solve(snapshot, &Options::default())
}

/// The zone a placed pod ended in.
fn zone_of(snapshot: &Snapshot, plan: &Plan, pod: usize) -> Option<String> {
    match plan.placements(snapshot.pods.len())[pod]? {
        Placement::Existing(node) => snapshot.existing_nodes[node].labels.get(ZONE).cloned(),
        Placement::NewNodeClaim(claim) => plan.new_node_claims[claim]
            .requirements
            .get(ZONE)
            .and_then(Requirement::single_value)
            .map(str::to_owned),
    }
}

fn placement(snapshot: &Snapshot, plan: &Plan, pod: usize) -> Option<Placement> {
    plan.placements(snapshot.pods.len())[pod]
}

fn reason(plan: &Plan, pod: usize) -> &Reason {
    let failure = plan
        .failures
        .iter()
        .find(|f| f.pod == pod)
        .unwrap_or_else(|| panic!("pod {pod} should have failed; plan: {plan:#?}"));
    &failure.reasons[0].reason
}

/// What a case expects of one pod.
enum Expect {
    /// Placed on a new NodeClaim.
    NewNode,
    /// Placed, in this zone.
    Zone(&'static str),
    /// Refused; the first NodePool's reason matches.
    Refused(fn(&Reason) -> bool),
}

struct Case {
    name: &'static str,
    snapshot: Snapshot,
    /// Expectations for the last pod of the snapshot.
    expect: Expect,
    policy: PreferencePolicy,
}

fn case(name: &'static str, pods: &[PodBuilder], expect: Expect) -> Case {
    Case {
        name,
        snapshot: snapshot(pods, vec![node_pool("default")]),
        expect,
        policy: PreferencePolicy::Respect,
    }
}

fn check(cases: Vec<Case>) {
    for case in cases {
        let plan = solve(
            &case.snapshot,
            &Options {
                preference_policy: case.policy,
                ..Options::default()
            },
        );
        let last = case.snapshot.pods.len() - 1;
        let name = case.name;
        match case.expect {
            Expect::NewNode => assert!(
                matches!(
                    placement(&case.snapshot, &plan, last),
                    Some(Placement::NewNodeClaim(_))
                ),
                "{name}: expected a new node, got {plan:#?}"
            ),
            Expect::Zone(zone) => assert_eq!(
                zone_of(&case.snapshot, &plan, last).as_deref(),
                Some(zone),
                "{name}: {plan:#?}"
            ),
            Expect::Refused(matches) => {
                let r = reason(&plan, last);
                assert!(matches(r), "{name}: unexpected reason {r:?} ({r})");
                assert!(!plan.failures[0].message().is_empty());
            }
        }
    }
}

// ---- resources ------------------------------------------------------------------------------

#[test]
fn pods_get_the_cheapest_instance_type_that_fits_their_requests() {
    let s = snapshot(
        &[pod("a").requests("1500m", "1Gi")],
        vec![node_pool("default")],
    );
    let plan = run(&s);
    let claim = &plan.new_node_claims[0];
    // c1 has 900m allocatable; c2 is the cheapest with room for 1.5 CPU.
    assert_eq!(claim.instance_types[0].name, "c2");
    assert_eq!(claim.requests.cpu, 1500);
    assert_eq!(claim.requests.pods, 1);
    assert!(
        claim
            .requests
            .fits_in(claim.instance_types[0].allocatable())
    );
}

#[test]
fn resource_requests_decide_placement() {
    check(vec![
        case(
            "fits the largest type",
            &[pod("a").requests("15", "16Gi")],
            Expect::NewNode,
        ),
        case(
            "larger than every type",
            &[pod("a").requests("17", "1Gi")],
            Expect::Refused(|r| {
                matches!(
                    r,
                    Reason::InstanceTypes {
                        checks: InstanceTypeChecks { fits: false, .. },
                        ..
                    }
                )
            }),
        ),
        case(
            "init container larger than every type",
            &[pod("a").requests("1", "1Gi").init_container("16", false)],
            Expect::Refused(|r| {
                matches!(
                    r,
                    Reason::InstanceTypes {
                        checks: InstanceTypeChecks { fits: false, .. },
                        ..
                    }
                )
            }),
        ),
        case(
            "sidecar adds to the containers",
            &[pod("a").requests("15", "1Gi").init_container("1", true)],
            Expect::Refused(|r| {
                matches!(
                    r,
                    Reason::InstanceTypes {
                        checks: InstanceTypeChecks { fits: false, .. },
                        ..
                    }
                )
            }),
        ),
        case(
            "extended resource no type offers",
            &[pod("a")
                .requests("1", "1Gi")
                .resource("nvidia.com/gpu", "1")],
            Expect::Refused(|r| {
                matches!(
                    r,
                    Reason::InstanceTypes {
                        checks: InstanceTypeChecks { fits: false, .. },
                        ..
                    }
                )
            }),
        ),
    ]);
}

#[test]
fn daemonset_overhead_is_added_to_every_new_nodeclaim() {
    let mut pool = node_pool("default");
    pool.daemon_overhead = Resources::core(1000, GI, 1);
    let s = snapshot(&[pod("a").requests("500m", "512Mi")], vec![pool]);
    let plan = run(&s);
    let claim = &plan.new_node_claims[0];
    assert_eq!((claim.requests.cpu, claim.requests.pods), (1500, 2));
    assert_eq!(claim.instance_types[0].name, "c2");
}

#[test]
fn extended_resources_select_the_types_that_have_them() {
    let mut pool = node_pool("default");
    pool.instance_types.push(gpu_type());
    let s = snapshot(
        &[pod("a")
            .requests("1", "1Gi")
            .resource("nvidia.com/gpu", "2")],
        vec![pool],
    );
    let plan = run(&s);
    assert_eq!(plan.new_node_claims[0].instance_type_names(), ["gpu8"]);
}

#[test]
fn pods_pack_onto_one_nodeclaim_until_it_is_full() {
    let pods: Vec<PodBuilder> = (0..20)
        .map(|i| pod(&format!("p{i}")).requests("1", "1Gi"))
        .collect();
    let s = snapshot(&pods, vec![node_pool("default")]);
    let plan = run(&s);
    // 20 CPUs: one 16-CPU node holds 15 (15.9 allocatable), another the rest.
    assert_eq!(plan.new_node_claims.len(), 2);
    assert_eq!(plan.scheduled_pods(), 20);
    for claim in &plan.new_node_claims {
        assert!(
            claim
                .requests
                .fits_in(claim.instance_types[0].allocatable())
        );
    }
}

// ---- requirements ---------------------------------------------------------------------------

#[test]
fn node_selectors_and_required_affinity_constrain_the_nodeclaim() {
    let mut team_pool = node_pool("team");
    team_pool
        .requirements
        .add(Requirement::in_values("example.com/team", &["blue"]));
    check(vec![
        case(
            "zone selector",
            &[pod("a").node_selector(ZONE, "test-zone-2")],
            Expect::Zone("test-zone-2"),
        ),
        case(
            "deprecated zone alias",
            &[pod("a").node_selector("failure-domain.beta.kubernetes.io/zone", "test-zone-3")],
            Expect::Zone("test-zone-3"),
        ),
        case(
            "zone no instance type offers",
            &[pod("a").node_selector(ZONE, "test-zone-9")],
            Expect::Refused(|r| {
                matches!(
                    r,
                    Reason::InstanceTypes {
                        checks: InstanceTypeChecks {
                            has_offering: false,
                            ..
                        },
                        ..
                    }
                )
            }),
        ),
        case(
            "custom label the pool does not define",
            &[pod("a").node_selector("example.com/team", "blue")],
            Expect::Refused(
                |r| matches!(r, Reason::Requirements { detail: Incompatibility::UndefinedLabel { key, .. } } if key == "example.com/team"),
            ),
        ),
        Case {
            name: "custom label the pool defines",
            snapshot: snapshot(
                &[pod("a").node_selector("example.com/team", "blue")],
                vec![team_pool],
            ),
            expect: Expect::NewNode,
            policy: PreferencePolicy::Respect,
        },
        case(
            "NotIn and DoesNotExist on undefined labels",
            &[pod("a").required_terms(vec![vec![
                expression("example.com/team", "NotIn", &["red"]),
                expression("example.com/gpu", "DoesNotExist", &[]),
            ]])],
            Expect::NewNode,
        ),
        case(
            "second affinity term used when the first cannot be met",
            &[pod("a").required_terms(vec![
                vec![expression(ZONE, "In", &["test-zone-9"])],
                vec![expression(ZONE, "In", &["test-zone-3"])],
            ])],
            Expect::Zone("test-zone-3"),
        ),
        case(
            "integer label the pool does not define",
            &[pod("a").required_terms(vec![vec![expression("integer", "Gt", &["8"])]])],
            Expect::Refused(|r| matches!(r, Reason::Requirements { .. })),
        ),
        case(
            "Gt on the instance-cpu label",
            &[pod("a").required_terms(vec![vec![expression(labels::INSTANCE_CPU, "Gt", &["8"])]])],
            Expect::NewNode,
        ),
        case(
            "capacity type with no such offering",
            &[pod("a").node_selector(CAPACITY_TYPE, "reserved")],
            Expect::Refused(|r| matches!(r, Reason::InstanceTypes { .. })),
        ),
    ]);
}

#[test]
fn gt_requirements_filter_instance_types() {
    let s = snapshot(
        &[pod("a").required_terms(vec![vec![expression(labels::INSTANCE_CPU, "Gt", &["8"])]])],
        vec![node_pool("default")],
    );
    let plan = run(&s);
    assert_eq!(plan.new_node_claims[0].instance_type_names(), ["c16"]);
}

#[test]
fn preferred_node_affinity_is_respected_then_relaxed_or_ignored() {
    let prefers_zone_2 =
        pod("a").preferred_term(10, vec![expression(ZONE, "In", &["test-zone-2"])]);
    let prefers_nowhere =
        pod("a").preferred_term(10, vec![expression(ZONE, "In", &["test-zone-9"])]);
    check(vec![
        case(
            "satisfiable preference",
            std::slice::from_ref(&prefers_zone_2),
            Expect::Zone("test-zone-2"),
        ),
        case(
            "unsatisfiable preference relaxed",
            &[prefers_nowhere],
            Expect::NewNode,
        ),
    ]);
    let s = snapshot(&[prefers_zone_2], vec![node_pool("default")]);
    let plan = solve(
        &s,
        &Options {
            preference_policy: PreferencePolicy::Ignore,
            ..Options::default()
        },
    );
    assert_eq!(
        zone_of(&s, &plan, 0),
        None,
        "an ignored preference leaves the zone open"
    );
}

#[test]
fn hostname_selectors_pin_pods_to_existing_nodes() {
    let mut s = snapshot(
        &[pod("a").node_selector(HOSTNAME, "node-b")],
        vec![node_pool("default")],
    );
    s.existing_nodes = vec![
        existing_node("node-a", "test-zone-1", 4),
        existing_node("node-b", "test-zone-2", 4),
    ];
    let plan = run(&s);
    assert_eq!(placement(&s, &plan, 0), Some(Placement::Existing(1)));
    let s = snapshot(
        &[pod("a").node_selector(HOSTNAME, "node-z")],
        vec![node_pool("default")],
    );
    let plan = run(&s);
    assert!(matches!(reason(&plan, 0), Reason::Hostname { .. }));
}

// ---- taints ---------------------------------------------------------------------------------

#[test]
fn taints_refuse_pods_that_do_not_tolerate_them() {
    let tainted = || {
        let mut pool = node_pool("gpu");
        pool.taints = vec![Taint::new("gpu", Some("true"), TaintEffect::NoSchedule)];
        pool
    };
    let cases = [
        (pod("a"), false),
        (
            pod("a").toleration("gpu", "Equal", Some("true"), "NoSchedule"),
            true,
        ),
        (pod("a").toleration("gpu", "Exists", None, ""), true),
        (
            pod("a").toleration("gpu", "Equal", Some("false"), "NoSchedule"),
            false,
        ),
        (
            pod("a").toleration("gpu", "Exists", None, "NoExecute"),
            false,
        ),
    ];
    for (builder, placed) in cases {
        let s = snapshot(&[builder], vec![tainted()]);
        let plan = run(&s);
        if placed {
            assert_eq!(plan.scheduled_pods(), 1);
        } else {
            assert_eq!(
                reason(&plan, 0),
                &Reason::Taint {
                    key: "gpu".to_owned(),
                    value: Some("true".to_owned()),
                    effect: "NoSchedule".to_owned()
                }
            );
            assert!(
                plan.failures[0]
                    .message()
                    .contains("did not tolerate taint gpu=true:NoSchedule")
            );
        }
    }
}

#[test]
fn prefer_no_schedule_taints_are_tolerated_after_relaxation() {
    let mut pool = node_pool("default");
    pool.taints = vec![Taint::new("soft", None, TaintEffect::PreferNoSchedule)];
    let s = snapshot(&[pod("a")], vec![pool]);
    assert_eq!(run(&s).scheduled_pods(), 1);
}

#[test]
fn tainted_existing_nodes_are_skipped() {
    let mut s = snapshot(
        &[pod("a").requests("100m", "100Mi")],
        vec![node_pool("default")],
    );
    let mut node = existing_node("node-a", "test-zone-1", 4);
    node.taints = vec![Taint::new("dedicated", Some("db"), TaintEffect::NoSchedule)];
    s.existing_nodes = vec![node, existing_node("node-b", "test-zone-1", 4)];
    let plan = run(&s);
    assert_eq!(placement(&s, &plan, 0), Some(Placement::Existing(1)));
}

// ---- existing nodes -------------------------------------------------------------------------

#[test]
fn existing_nodes_are_used_before_new_nodeclaims() {
    let mut s = snapshot(
        &[pod("a").requests("1", "1Gi"), pod("b").requests("3", "1Gi")],
        vec![node_pool("default")],
    );
    let mut node = existing_node("node-a", "test-zone-1", 4);
    node.requested = Resources::core(2000, GI, 2);
    s.existing_nodes = vec![node];
    let plan = run(&s);
    // 2 CPUs free: the 1-CPU pod fits, the 3-CPU one needs a new node.
    assert_eq!(placement(&s, &plan, 0), Some(Placement::Existing(0)));
    assert!(matches!(
        placement(&s, &plan, 1),
        Some(Placement::NewNodeClaim(_))
    ));
    assert_eq!(plan.existing[0].node_name, "node-a");
}

#[test]
fn initialized_existing_nodes_come_first() {
    let mut s = snapshot(
        &[pod("a").requests("100m", "100Mi")],
        vec![node_pool("default")],
    );
    let mut starting = existing_node("a-starting", "test-zone-1", 4);
    starting.initialized = false;
    s.existing_nodes = vec![starting, existing_node("b-ready", "test-zone-1", 4)];
    let plan = run(&s);
    assert_eq!(placement(&s, &plan, 0), Some(Placement::Existing(1)));
}

// ---- host ports -----------------------------------------------------------------------------

#[test]
fn host_ports_keep_conflicting_pods_apart() {
    let s = snapshot(
        &[
            pod("a").host_port(8080),
            pod("b").host_port(8080),
            pod("c").host_port(9090),
        ],
        vec![node_pool("default")],
    );
    let plan = run(&s);
    let placements = plan.placements(3);
    assert_ne!(placements[0], placements[1]);
    assert_eq!(plan.new_node_claims.len(), 2);

    let mut pool = node_pool("default");
    pool.daemon_host_ports = pod("d").host_port(8080).build().shape.host_ports.clone();
    let s = snapshot(&[pod("a").host_port(8080)], vec![pool]);
    assert!(matches!(reason(&run(&s), 0), Reason::HostPort { .. }));
}

// ---- volumes --------------------------------------------------------------------------------

#[test]
fn volume_zone_requirements_pin_the_nodeclaim() {
    let volume = vec![expression(ZONE, "In", &["test-zone-3"])];
    let mut s = snapshot(&[], vec![node_pool("default")]);
    s.pods = vec![pod("a").build().with_volume_requirements(&volume).unwrap()];
    let plan = run(&s);
    assert_eq!(zone_of(&s, &plan, 0).as_deref(), Some("test-zone-3"));
    // The volume's zone is kept in every required term, so relaxing terms cannot lose it.
    s.pods = vec![
        pod("b")
            .required_terms(vec![
                vec![expression(ZONE, "In", &["test-zone-1"])],
                vec![expression(ZONE, "In", &["test-zone-2", "test-zone-3"])],
            ])
            .build()
            .with_volume_requirements(&volume)
            .unwrap(),
    ];
    let plan = run(&s);
    assert_eq!(zone_of(&s, &plan, 0).as_deref(), Some("test-zone-3"));
}

// ---- topology spread ------------------------------------------------------------------------

fn zone_counts(s: &Snapshot, plan: &Plan) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for pod in 0..s.pods.len() {
        if let Some(zone) = zone_of(s, plan, pod) {
            *counts.entry(zone).or_insert(0) += 1;
        }
    }
    counts
}

#[test]
fn zonal_spread_keeps_the_skew() {
    let pods: Vec<PodBuilder> = (0..7)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("app", "web")
                .spread(ZONE, 1, &[("app", "web")])
        })
        .collect();
    let s = snapshot(&pods, vec![node_pool("default")]);
    let plan = run(&s);
    let counts = zone_counts(&s, &plan);
    assert_eq!(counts.values().sum::<usize>(), 7);
    let (min, max) = (
        counts.values().min().unwrap(),
        counts.values().max().unwrap(),
    );
    assert!(max - min <= 1, "{counts:?}");
    assert_eq!(counts.len(), 3);
}

/// Existing pods count one by one, however many share a node and labels (a disruption
/// simulation's ghost node carries thousands): 4 in one zone and 2 in another leave the six
/// new pods to even the three zones out at four each.
#[test]
fn zonal_spread_counts_every_existing_pod_of_a_node() {
    let web = |name: &str| {
        pod(name)
            .label("app", "web")
            .spread(ZONE, 1, &[("app", "web")])
    };
    let mut full_a = existing_node("full-a", "test-zone-1", 1);
    full_a.pods = (0..4).map(|i| web(&format!("a{i}")).bound()).collect();
    let mut full_b = existing_node("full-b", "test-zone-2", 1);
    full_b.pods = (0..2).map(|i| web(&format!("b{i}")).bound()).collect();
    for node in [&mut full_a, &mut full_b] {
        node.requested = node.allocatable.clone();
    }
    let pods: Vec<PodBuilder> = (0..6).map(|i| web(&format!("p{i}"))).collect();
    let mut s = snapshot(&pods, vec![node_pool("default")]);
    s.existing_nodes = vec![full_a, full_b];
    let plan = run(&s);
    assert_eq!(
        zone_counts(&s, &plan),
        BTreeMap::from([("test-zone-2".to_owned(), 2), ("test-zone-3".to_owned(), 4)])
    );
}

#[test]
fn hostname_spread_puts_one_selected_pod_per_node() {
    let pods: Vec<PodBuilder> = (0..4)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("app", "web")
                .spread(HOSTNAME, 1, &[("app", "web")])
        })
        .collect();
    let s = snapshot(&pods, vec![node_pool("default")]);
    assert_eq!(run(&s).new_node_claims.len(), 4);
}

#[test]
fn spread_constraints_refuse_pods_that_would_break_them() {
    let min_domains = |i: usize| {
        pod(&format!("p{i}"))
            .label("app", "web")
            .spread_with(TopologySpreadConstraint {
                max_skew: 1,
                min_domains: Some(4),
                topology_key: ZONE.to_owned(),
                when_unsatisfiable: "DoNotSchedule".to_owned(),
                label_selector: Some(selector(&[("app", "web")])),
                ..TopologySpreadConstraint::default()
            })
    };
    let spot_only = |i: usize| {
        pod(&format!("p{i}"))
            .label("app", "web")
            .node_selector(CAPACITY_TYPE, "spot")
            .spread(ZONE, 1, &[("app", "web")])
    };
    check(vec![
        case(
            // Three zones exist but minDomains asks for four: the minimum counts as zero, so
            // each zone takes one pod and the fourth has nowhere to go.
            "minDomains above the zone count",
            &(0..4).map(min_domains).collect::<Vec<_>>(),
            Expect::Refused(
                |r| matches!(r, Reason::Topology { rule: TopologyRule::TopologySpread, topology_key, .. } if topology_key == ZONE),
            ),
        ),
        case(
            // Spot is offered in two zones only, but the third zone (on-demand) still counts
            // for the skew, as in Karpenter.
            "skew over a zone the pod cannot use",
            &(0..3).map(spot_only).collect::<Vec<_>>(),
            Expect::Refused(|r| {
                matches!(r, Reason::Topology { .. } | Reason::InstanceTypes { .. })
            }),
        ),
    ]);
}

#[test]
fn node_taints_policy_honor_leaves_out_zones_of_untolerated_pools() {
    // Zone 3 is only offered by a tainted pool.
    let mut open = node_pool("open");
    open.requirements.add(Requirement::in_values(
        ZONE,
        &["test-zone-1", "test-zone-2"],
    ));
    let mut tainted = node_pool("tainted");
    tainted
        .requirements
        .add(Requirement::in_values(ZONE, &["test-zone-3"]));
    tainted.taints = vec![Taint::new("dedicated", None, TaintEffect::NoSchedule)];
    let spread = |policy: &str, i: usize| {
        pod(&format!("p{i}"))
            .label("app", "web")
            .spread_with(TopologySpreadConstraint {
                max_skew: 1,
                topology_key: ZONE.to_owned(),
                when_unsatisfiable: "DoNotSchedule".to_owned(),
                label_selector: Some(selector(&[("app", "web")])),
                node_taints_policy: Some(policy.to_owned()),
                ..TopologySpreadConstraint::default()
            })
    };
    let honor: Vec<PodBuilder> = (0..4).map(|i| spread("Honor", i)).collect();
    let s = snapshot(&honor, vec![open.clone(), tainted.clone()]);
    assert_eq!(
        run(&s).scheduled_pods(),
        4,
        "zone 3 does not count under Honor"
    );
    let ignore: Vec<PodBuilder> = (0..4).map(|i| spread("Ignore", i)).collect();
    let s = snapshot(&ignore, vec![open, tainted]);
    let plan = run(&s);
    assert_eq!(
        plan.scheduled_pods(),
        2,
        "zone 3 holds the minimum at zero under Ignore"
    );
}

#[test]
fn match_label_keys_spread_each_version_on_its_own() {
    let pods: Vec<PodBuilder> = (0..6)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("app", "web")
                .label("version", if i < 3 { "v1" } else { "v2" })
                .spread_with(TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: HOSTNAME.to_owned(),
                    when_unsatisfiable: "DoNotSchedule".to_owned(),
                    label_selector: Some(selector(&[("app", "web")])),
                    match_label_keys: Some(vec!["version".to_owned()]),
                    ..TopologySpreadConstraint::default()
                })
        })
        .collect();
    let s = snapshot(&pods, vec![node_pool("default")]);
    let plan = run(&s);
    // One v1 and one v2 pod per node.
    assert_eq!(plan.new_node_claims.len(), 3);
}

#[test]
fn schedule_anyway_spread_is_relaxed_under_respect_and_dropped_under_ignore() {
    let pods: Vec<PodBuilder> = (0..3)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("app", "web")
                .spread_with(TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: HOSTNAME.to_owned(),
                    when_unsatisfiable: "ScheduleAnyway".to_owned(),
                    label_selector: Some(selector(&[("app", "web")])),
                    ..TopologySpreadConstraint::default()
                })
        })
        .collect();
    let s = snapshot(&pods, vec![node_pool("default")]);
    assert_eq!(
        run(&s).new_node_claims.len(),
        3,
        "respected while it can be"
    );
    let plan = solve(
        &s,
        &Options {
            preference_policy: PreferencePolicy::Ignore,
            ..Options::default()
        },
    );
    assert_eq!(plan.new_node_claims.len(), 1, "ignored");
}

// ---- pod affinity ---------------------------------------------------------------------------

#[test]
fn pod_affinity_follows_the_selected_pods() {
    let mut with_db = snapshot(
        &[pod("web")
            .requests("1", "1Gi")
            .label("app", "web")
            .pod_affinity(ZONE, &[("app", "db")])],
        vec![node_pool("default")],
    );
    let mut node = existing_node("node-db", "test-zone-2", 2);
    node.requested = Resources::core(1900, 4 * GI - (10 << 20), 1);
    node.pods = vec![pod("db").label("app", "db").bound()];
    with_db.existing_nodes = vec![node];
    let plan = run(&with_db);
    assert_eq!(zone_of(&with_db, &plan, 0).as_deref(), Some("test-zone-2"));
    assert!(matches!(
        placement(&with_db, &plan, 0),
        Some(Placement::NewNodeClaim(_))
    ));

    check(vec![
        case(
            "affinity to pods that do not exist",
            &[pod("web")
                .label("app", "web")
                .pod_affinity(ZONE, &[("app", "db")])],
            Expect::Refused(|r| {
                matches!(
                    r,
                    Reason::Topology {
                        rule: TopologyRule::PodAffinity,
                        ..
                    }
                )
            }),
        ),
        case(
            "self affinity bootstraps",
            &[pod("web")
                .label("app", "web")
                .pod_affinity(ZONE, &[("app", "web")])],
            Expect::NewNode,
        ),
    ]);
}

#[test]
fn zonal_self_affinity_keeps_a_group_in_one_zone() {
    let pods: Vec<PodBuilder> = (0..6)
        .map(|i| {
            pod(&format!("p{i}"))
                .requests("4", "4Gi")
                .label("app", "web")
                .pod_affinity(ZONE, &[("app", "web")])
        })
        .collect();
    let s = snapshot(&pods, vec![node_pool("default")]);
    let plan = run(&s);
    assert_eq!(plan.scheduled_pods(), 6);
    assert_eq!(zone_counts(&s, &plan).len(), 1);
}

#[test]
fn hostname_affinity_colocates_pods() {
    let pods: Vec<PodBuilder> = (0..3)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("app", "web")
                .pod_affinity(HOSTNAME, &[("app", "web")])
        })
        .collect();
    let s = snapshot(&pods, vec![node_pool("default")]);
    assert_eq!(run(&s).new_node_claims.len(), 1);
}

#[test]
fn anti_affinity_keeps_selected_pods_apart() {
    let pods: Vec<PodBuilder> = (0..4)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("app", "web")
                .anti_affinity(HOSTNAME, &[("app", "web")])
        })
        .collect();
    let s = snapshot(&pods, vec![node_pool("default")]);
    assert_eq!(run(&s).new_node_claims.len(), 4);

    let zonal: Vec<PodBuilder> = (0..4)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("app", "web")
                .anti_affinity(ZONE, &[("app", "web")])
        })
        .collect();
    let s = snapshot(&zonal, vec![node_pool("default")]);
    let plan = run(&s);
    // As in Karpenter ("late committal"), the first pod's NodeClaim may land in any zone, so it
    // blocks all three until it launches: one pod per batch.
    assert_eq!(plan.scheduled_pods(), 1);
    let refused = plan.failures[0].pod;
    assert!(matches!(
        reason(&plan, refused),
        Reason::Topology {
            rule: TopologyRule::PodAntiAffinity,
            ..
        }
    ));
    // Pods pinned to zones do not block each other.
    let pinned: Vec<PodBuilder> = (0..3)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("app", "web")
                .node_selector(ZONE, ZONES[i])
                .anti_affinity(ZONE, &[("app", "web")])
        })
        .collect();
    let s = snapshot(&pinned, vec![node_pool("default")]);
    assert_eq!(run(&s).scheduled_pods(), 3);
}

#[test]
fn existing_pods_anti_affinity_keeps_new_pods_out_of_their_zone() {
    let mut s = snapshot(
        &[pod("web").label("app", "web")],
        vec![node_pool("default")],
    );
    let mut node = existing_node("node-a", "test-zone-1", 4);
    node.pods = vec![
        pod("guard")
            .label("app", "guard")
            .anti_affinity(ZONE, &[("app", "web")])
            .bound(),
    ];
    s.existing_nodes = vec![node];
    let plan = run(&s);
    assert_ne!(zone_of(&s, &plan, 0).as_deref(), Some("test-zone-1"));
    assert!(matches!(
        placement(&s, &plan, 0),
        Some(Placement::NewNodeClaim(_))
    ));
}

#[test]
fn affinity_terms_select_namespaces() {
    let mut s = snapshot(
        &[pod("web")
            .namespace("shop")
            .label("app", "web")
            .pod_affinity(ZONE, &[("app", "db")])],
        vec![node_pool("default")],
    );
    let mut node = existing_node("node-db", "test-zone-3", 1);
    node.pods = vec![pod("db").namespace("data").label("app", "db").bound()];
    s.existing_nodes = vec![node];
    // The term looks in the pod's own namespace only: no db there.
    assert!(matches!(reason(&run(&s), 0), Reason::Topology { .. }));
}

#[test]
fn preferred_anti_affinity_is_respected_relaxed_or_ignored() {
    let spread_out: Vec<PodBuilder> = (0..5)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("app", "web")
                .preferred_anti_affinity(10, HOSTNAME, &[("app", "web")])
        })
        .collect();
    let s = snapshot(&spread_out, vec![node_pool("default")]);
    assert_eq!(run(&s).new_node_claims.len(), 5, "respected: one node each");
    let ignore = Options {
        preference_policy: PreferencePolicy::Ignore,
        ..Options::default()
    };
    assert_eq!(
        solve(&s, &ignore).new_node_claims.len(),
        1,
        "ignored: packed"
    );
    // Zonal anti-affinity blocks every zone the first NodeClaim may use; the rest relax it.
    let zonal: Vec<PodBuilder> = (0..5)
        .map(|i| {
            pod(&format!("p{i}"))
                .label("app", "web")
                .preferred_anti_affinity(10, ZONE, &[("app", "web")])
        })
        .collect();
    let s = snapshot(&zonal, vec![node_pool("default")]);
    let plan = run(&s);
    assert_eq!(plan.scheduled_pods(), 5);
    assert!(plan.failures.is_empty());
}

// ---- NodePools: weights, limits, minValues ----------------------------------------------------

#[test]
fn heavier_nodepools_are_tried_first() {
    let mut light = node_pool("light");
    light.weight = 1;
    let mut heavy = node_pool("heavy");
    heavy.weight = 50;
    let s = snapshot(&[pod("a")], vec![light.clone(), heavy.clone()]);
    assert_eq!(run(&s).new_node_claims[0].node_pool, "heavy");
    heavy.taints = vec![Taint::new("x", None, TaintEffect::NoSchedule)];
    let s = snapshot(&[pod("a")], vec![light, heavy]);
    let plan = run(&s);
    assert_eq!(plan.new_node_claims[0].node_pool, "light");
}

#[test]
fn limits_stop_new_nodeclaims() {
    let mut pool = node_pool("default");
    pool.limits = ResourceLimits::unlimited().with(CPU, 4000);
    let s = snapshot(
        &[pod("a").requests("3", "1Gi"), pod("b").requests("3", "1Gi")],
        vec![pool],
    );
    let plan = run(&s);
    assert_eq!(plan.new_node_claims.len(), 1);
    assert!(
        plan.new_node_claims[0]
            .instance_types
            .iter()
            .all(|t| t.capacity.cpu <= 4000)
    );
    assert_eq!(
        plan.failures[0].reasons[0].reason,
        Reason::Limits {
            resource: CPU.to_owned()
        }
    );

    let mut pool = node_pool("default");
    pool.limits = ResourceLimits::unlimited().with(NODES, 1);
    let s = snapshot(
        &[pod("a").host_port(80), pod("b").host_port(80)],
        vec![pool],
    );
    let plan = run(&s);
    assert_eq!((plan.new_node_claims.len(), plan.failures.len()), (1, 1));
}

#[test]
fn existing_nodes_count_against_limits() {
    let mut pool = node_pool("default");
    pool.limits = ResourceLimits::unlimited().with(CPU, 4000);
    let mut s = snapshot(&[pod("a").requests("3", "1Gi")], vec![pool]);
    let mut node = existing_node("node-a", "test-zone-1", 4);
    node.labels
        .insert(labels::NODEPOOL.to_owned(), "default".to_owned());
    node.requested = Resources::core(4000, GI, 1);
    s.existing_nodes = vec![node];
    assert!(matches!(reason(&run(&s), 0), Reason::Limits { .. }));
}

#[test]
fn nodepools_without_instance_types_are_reported() {
    let mut pool = node_pool("empty");
    pool.requirements
        .add(Requirement::in_values(ZONE, &["test-zone-9"]));
    let s = snapshot(&[pod("a")], vec![pool]);
    let plan = run(&s);
    assert_eq!(plan.pools_without_instance_types, ["empty"]);
    assert_eq!(reason(&plan, 0), &Reason::NoInstanceTypes);
}

#[test]
fn min_values_keep_enough_instance_types() {
    let mut pool = node_pool("default");
    pool.requirements.add(
        Requirement::new(INSTANCE_TYPE, Operator::Exists, &[] as &[&str])
            .unwrap()
            .with_min_values(Some(3)),
    );
    let s = snapshot(&[pod("a").requests("1", "1Gi")], vec![pool.clone()]);
    let plan = run(&s);
    let claim = &plan.new_node_claims[0];
    assert!(claim.instance_types.len() >= 3);
    assert_eq!(
        claim.requirements.get(INSTANCE_TYPE).unwrap().min_values(),
        Some(3)
    );
    // A pod that only the two largest types fit cannot offer three.
    let s = snapshot(&[pod("a").requests("7", "1Gi")], vec![pool]);
    assert!(matches!(
        reason(&run(&s), 0),
        Reason::MinValues {
            needed: 3,
            available: 2,
            ..
        }
    ));
}

#[test]
fn plans_truncate_to_the_cheapest_sixty_instance_types() {
    let types: Vec<Arc<InstanceType>> = (1..=100)
        .map(|cpu| {
            Arc::new(fake_instance_type(
                &format!("t{cpu}"),
                cpu,
                2 * cpu * GI,
                10 * cpu,
            ))
        })
        .collect();
    let s = snapshot(
        &[pod("a").requests("100m", "100Mi")],
        vec![NodePoolInput::new("default", types)],
    );
    let plan = run(&s);
    let claim = &plan.new_node_claims[0];
    assert_eq!(claim.instance_types.len(), 60);
    assert_eq!(claim.instance_types[0].name, "t1");
    assert_eq!(
        claim
            .requirements
            .get(INSTANCE_TYPE)
            .unwrap()
            .values()
            .len(),
        60
    );
    let report = cost_report(&s, &plan);
    assert!(report.cost >= report.lower_bound);
}

#[test]
fn failure_messages_name_each_nodepool() {
    let mut tainted = node_pool("tainted");
    tainted.taints = vec![Taint::new("gpu", None, TaintEffect::NoSchedule)];
    let s = snapshot(
        &[pod("a").requests("64", "1Gi")],
        vec![node_pool("default"), tainted],
    );
    let plan = run(&s);
    let message = plan.failures[0].message();
    assert!(
        message.contains(
            "incompatible with nodepool \"default\", no instance type has enough resources"
        ),
        "{message}"
    );
    assert!(
        message.contains(
            "incompatible with nodepool \"tainted\", did not tolerate taint gpu:NoSchedule"
        ),
        "{message}"
    );
    let json = serde_json::to_value(&plan.failures[0]).unwrap();
    assert_eq!(json["reasons"][1]["reason"]["kind"], "taint");
}

// ---- reserved capacity ------------------------------------------------------------------------

fn reserved_pool() -> NodePoolInput {
    let reserved = |name: &str, cpu: i64, reservation: Option<(&str, u32)>| {
        let mut offerings = vec![Offering::new("test-zone-1", "on-demand", 0.1 * approx(cpu))];
        if let Some((id, capacity)) = reservation {
            offerings.push(Offering::reserved("test-zone-1", id, 0.01, capacity));
        }
        Arc::new(InstanceType::new(
            name,
            Requirements::from_requirements([
                Requirement::in_values(INSTANCE_TYPE, &[name]),
                Requirement::in_values(ZONE, &["test-zone-1"]),
                Requirement::in_values(CAPACITY_TYPE, &["on-demand", "reserved"]),
            ]),
            offerings,
            Resources::core(cpu * 1000, 2 * cpu * GI, 10 * cpu),
            Overhead::default(),
        ))
    };
    NodePoolInput::new(
        "default",
        vec![
            reserved("r4", 4, Some(("cr-1", 1))),
            reserved("o8", 8, None),
        ],
    )
}

fn approx(n: i64) -> f64 {
    karpenter_core::domain::resources::approx_f64(n)
}

fn apart(n: usize) -> Vec<PodBuilder> {
    (0..n)
        .map(|i| {
            pod(&format!("p{i}"))
                .requests("1", "1Gi")
                .label("app", "web")
                .anti_affinity(HOSTNAME, &[("app", "web")])
        })
        .collect()
}

#[test]
fn reserved_capacity_is_used_until_it_runs_out_then_pods_wait() {
    let s = snapshot(&apart(2), vec![reserved_pool()]);
    let options = Options {
        reserved_capacity: true,
        ..Options::default()
    };
    let plan = solve(&s, &options);
    assert_eq!(plan.new_node_claims.len(), 1);
    let claim = &plan.new_node_claims[0];
    assert_eq!(
        claim
            .requirements
            .get(CAPACITY_TYPE)
            .and_then(Requirement::single_value),
        Some("reserved")
    );
    assert_eq!(
        claim
            .requirements
            .get(labels::CAPACITY_RESERVATION_ID)
            .and_then(Requirement::single_value),
        Some("cr-1")
    );
    assert_eq!(claim.instance_type_names(), ["r4"]);
    let waiting = &plan.failures[0];
    assert!(waiting.deferred);
    assert_eq!(waiting.reasons[0].reason, Reason::ReservedCapacity);
}

#[test]
fn reserved_capacity_falls_back_or_is_ignored_when_asked() {
    let s = snapshot(&apart(2), vec![reserved_pool()]);
    let fallback = Options {
        reserved_capacity: true,
        reserved_offering_mode: karpenter_core::domain::scheduling::ReservedOfferingMode::Fallback,
        ..Options::default()
    };
    let plan = solve(&s, &fallback);
    assert_eq!((plan.new_node_claims.len(), plan.failures.len()), (2, 0));
    let reserved = plan
        .new_node_claims
        .iter()
        .filter(|c| c.requirements.has(labels::CAPACITY_RESERVATION_ID))
        .count();
    assert_eq!(
        reserved, 1,
        "one reservation, the other NodeClaim falls back"
    );

    let plan = run(&s);
    assert_eq!(plan.new_node_claims.len(), 2, "the gate is off by default");
    assert!(
        plan.new_node_claims
            .iter()
            .all(|c| !c.requirements.has(labels::CAPACITY_RESERVATION_ID))
    );
}

// ---- properties -------------------------------------------------------------------------------

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// A pod from a small vocabulary of constraints.
    #[derive(Debug, Clone)]
    #[expect(
        clippy::struct_excessive_bools,
        reason = "one flag per optional constraint"
    )]
    struct PodPlan {
        cpu: u32,
        memory_mi: u32,
        app: u8,
        zone: Option<u8>,
        capacity_type: Option<bool>,
        tolerate: bool,
        spread: Option<bool>,
        anti_hostname: bool,
        anti_zone: bool,
        affinity_zone: bool,
        host_port: Option<u8>,
        preferred_zone: Option<u8>,
    }

    fn pod_plan() -> impl Strategy<Value = PodPlan> {
        (
            (1u32..=40, 1u32..=64, 0u8..3, proptest::option::of(0u8..4)),
            (
                proptest::option::of(any::<bool>()),
                any::<bool>(),
                proptest::option::of(any::<bool>()),
            ),
            (
                prop::bool::weighted(0.15),
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.1),
            ),
            (proptest::option::of(0u8..2), proptest::option::of(0u8..3)),
        )
            .prop_map(
                |(
                    (cpu, memory, app, zone),
                    (capacity_type, tolerate, spread),
                    (anti_hostname, anti_zone, affinity_zone),
                    (host_port, preferred_zone),
                )| PodPlan {
                    cpu: cpu * 100,
                    memory_mi: memory * 128,
                    app,
                    zone,
                    capacity_type,
                    tolerate,
                    spread,
                    anti_hostname,
                    anti_zone,
                    affinity_zone,
                    host_port,
                    preferred_zone,
                },
            )
    }

    fn build(i: usize, p: &PodPlan) -> PodBuilder {
        let app = format!("app{}", p.app);
        let mut b = pod(&format!("p{i:03}"))
            .requests(&format!("{}m", p.cpu), &format!("{}Mi", p.memory_mi))
            .label("app", &app);
        if let Some(zone) = p.zone {
            let zone = ["test-zone-1", "test-zone-2", "test-zone-3", "test-zone-9"][zone as usize];
            b = b.node_selector(ZONE, zone);
        }
        if let Some(spot) = p.capacity_type {
            b = b.node_selector(CAPACITY_TYPE, if spot { "spot" } else { "on-demand" });
        }
        if p.tolerate {
            b = b.toleration("dedicated", "Exists", None, "");
        }
        if let Some(hostname) = p.spread {
            b = b.spread(if hostname { HOSTNAME } else { ZONE }, 1, &[("app", &app)]);
        }
        if p.anti_hostname {
            b = b.anti_affinity(HOSTNAME, &[("app", &app)]);
        }
        if p.anti_zone {
            b = b.anti_affinity(ZONE, &[("app", &app)]);
        }
        if p.affinity_zone {
            b = b.pod_affinity(ZONE, &[("app", &app)]);
        }
        if let Some(port) = p.host_port {
            b = b.host_port(8000 + i32::from(port));
        }
        if let Some(zone) = p.preferred_zone {
            b = b.preferred_term(5, vec![expression(ZONE, "In", &[ZONES[zone as usize]])]);
        }
        b
    }

    #[derive(Debug, Clone)]
    struct World {
        pods: Vec<PodPlan>,
        cpu_limit: Option<u8>,
        tainted_pool: bool,
        existing: Vec<(u8, u8)>,
        ignore: bool,
        reserved: bool,
    }

    fn world() -> impl Strategy<Value = World> {
        (
            prop::collection::vec(pod_plan(), 1..40),
            proptest::option::of(1u8..40),
            any::<bool>(),
            prop::collection::vec((0u8..3, 1u8..8), 0..3),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(pods, cpu_limit, tainted_pool, existing, ignore, reserved)| World {
                    pods,
                    cpu_limit,
                    tainted_pool,
                    existing,
                    ignore,
                    reserved,
                },
            )
    }

    fn snapshot_of(world: &World) -> Snapshot {
        let builders: Vec<PodBuilder> = world
            .pods
            .iter()
            .enumerate()
            .map(|(i, p)| build(i, p))
            .collect();
        let mut pools = vec![node_pool("default")];
        if let Some(limit) = world.cpu_limit {
            pools[0].limits = ResourceLimits::unlimited().with(CPU, i64::from(limit) * 1000);
        }
        if world.tainted_pool {
            let mut dedicated = node_pool("dedicated");
            dedicated.weight = 10;
            dedicated.taints = vec![Taint::new("dedicated", None, TaintEffect::NoSchedule)];
            pools.push(dedicated);
        }
        if world.reserved {
            let mut reserved = reserved_pool();
            "reserved".clone_into(&mut reserved.name);
            reserved.requirements = Requirements::from_requirements([Requirement::in_values(
                labels::NODEPOOL,
                &["reserved"],
            )]);
            reserved.weight = 20;
            pools.push(reserved);
        }
        let mut s = snapshot(&builders, pools);
        s.existing_nodes = world
            .existing
            .iter()
            .enumerate()
            .map(|(i, (zone, cpu))| {
                let mut node =
                    existing_node(&format!("node-{i}"), ZONES[*zone as usize], i64::from(*cpu));
                node.labels
                    .insert(labels::NODEPOOL.to_owned(), "default".to_owned());
                node
            })
            .collect();
        s
    }

    /// Requirements the pod's own spec forces (node selector and volume requirements).
    fn pod_requirements(pod: &SchedulingPod) -> Requirements {
        let mut r = pod.shape.node_selector.clone();
        r.add_all(&pod.shape.volume_requirements);
        r
    }

    fn check_plan(s: &Snapshot, plan: &Plan) {
        let placements = plan.placements(s.pods.len());
        // Every pod is placed once or failed once.
        let failed: Vec<usize> = plan.failures.iter().map(|f| f.pod).collect();
        for (pod, placement) in placements.iter().enumerate() {
            assert_eq!(placement.is_some(), !failed.contains(&pod), "pod {pod}");
        }
        assert_eq!(plan.scheduled_pods() + failed.len(), s.pods.len());
        check_claims(s, plan);
        check_existing(s, plan);
        check_limits(s, plan);
        let report = cost_report(s, plan);
        assert!(report.cost + 1e-9 >= report.lower_bound, "{report:?}");
        // The bound over what each pod may run on: no higher than the new NodeClaims' cost,
        // no lower than the bound over every instance type.
        let on_new_claims = plan
            .new_node_claims
            .iter()
            .flat_map(|c| &c.pods)
            .map(|p| &s.pods[*p]);
        let bound = cost_lower_bound(on_new_claims, &s.node_pools);
        assert_eq!(bound.unpriced_pods, 0, "{bound:?}");
        assert!(
            bound.per_hour <= report.cost * (1.0 + 1e-9) + 1e-12,
            "{bound:?} {report:?}"
        );
        assert!(
            bound.per_hour * (1.0 + 1e-9) + 1e-12 >= report.lower_bound,
            "{bound:?} {report:?}"
        );
        // A reservation (cr-1 holds one instance) is never promised twice.
        let holding = plan
            .new_node_claims
            .iter()
            .filter(|c| {
                c.requirements
                    .get(labels::CAPACITY_RESERVATION_ID)
                    .is_some_and(|r| r.has("cr-1"))
            })
            .count();
        assert!(holding <= 1, "cr-1 promised {holding} times");
    }

    /// New NodeClaims: types fit and match, requests add up, pods' requirements, taints, host
    /// ports and hostname anti-affinity hold.
    fn check_claims(s: &Snapshot, plan: &Plan) {
        for claim in &plan.new_node_claims {
            let pool = &s.node_pools[claim.node_pool_index];
            assert!(!claim.instance_types.is_empty());
            // Every instance type fits the requests, so the cheapest one does.
            for t in &claim.instance_types {
                assert!(
                    claim.requests.fits_in(t.allocatable()),
                    "{} too small",
                    t.name
                );
                assert!(
                    t.is_compatible(&claim.requirements),
                    "{} incompatible",
                    t.name
                );
            }
            let mut requests = pool.daemon_overhead.clone();
            let mut ports = Vec::new();
            for pod in &claim.pods {
                let p = &s.pods[*pod];
                requests.add(&p.shape.requests);
                assert!(
                    first_untolerated(&p.shape.tolerations, &pool.taints).is_none()
                        || pool
                            .taints
                            .iter()
                            .all(|t| t.effect == TaintEffect::PreferNoSchedule)
                );
                let without_host = {
                    let mut r = pod_requirements(p);
                    r.remove(HOSTNAME);
                    r
                };
                assert!(
                    claim
                        .requirements
                        .is_compatible(&without_host, AllowUndefined::WellKnown),
                    "pod {} requirements {without_host} vs claim {}",
                    p.name,
                    claim.requirements
                );
                for port in &p.shape.host_ports {
                    assert!(
                        !ports
                            .iter()
                            .any(|q: &karpenter_core::domain::scheduling::HostPort| q
                                .conflicts(port))
                    );
                    ports.push(port.clone());
                }
            }
            assert_eq!(requests, claim.requests);
            // Hostname anti-affinity: no other selected pod shares the node.
            for a in &claim.pods {
                for term in &s.pods[*a].shape.anti_affinity {
                    if term.topology_key != HOSTNAME {
                        continue;
                    }
                    for b in claim.pods.iter().filter(|b| *b != a) {
                        assert!(
                            !term.selector.matches(&s.pods[*b].shape.labels),
                            "anti-affinity broken"
                        );
                    }
                }
            }
        }
    }

    /// Existing nodes: resources, taints and labels hold.
    fn check_existing(s: &Snapshot, plan: &Plan) {
        for existing in &plan.existing {
            let node = &s.existing_nodes[existing.node];
            let mut used = node.requested.clone();
            for pod in &existing.pods {
                let p = &s.pods[*pod];
                used.add(&p.shape.requests);
                assert!(first_untolerated(&p.shape.tolerations, &node.taints).is_none());
                let node_reqs = Requirements::from_labels(&node.labels);
                assert!(node_reqs.is_compatible(&pod_requirements(p), AllowUndefined::None));
            }
            assert!(used.fits_in(&node.allocatable));
        }
    }

    /// Limits: the largest instance type of each new NodeClaim, plus existing capacity.
    fn check_limits(s: &Snapshot, plan: &Plan) {
        for (i, pool) in s.node_pools.iter().enumerate() {
            for (resource, limit) in pool.limits.iter() {
                let existing: i64 = s
                    .existing_nodes
                    .iter()
                    .filter(|n| n.node_pool() == Some(pool.name.as_str()))
                    .map(|n| n.capacity.get(resource))
                    .sum();
                let planned: i64 = plan
                    .new_node_claims
                    .iter()
                    .filter(|c| c.node_pool_index == i)
                    .map(|c| {
                        c.instance_types
                            .iter()
                            .map(|t| t.capacity.get(resource))
                            .max()
                            .unwrap_or(0)
                    })
                    .sum();
                if planned > 0 {
                    assert!(
                        existing + planned <= limit,
                        "{resource}: {existing} + {planned} > {limit}"
                    );
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn every_plan_keeps_placed_pods_constraints_resources_and_limits(world in world()) {
            let s = snapshot_of(&world);
            let options = Options {
                preference_policy: if world.ignore { PreferencePolicy::Ignore } else { PreferencePolicy::Respect },
                reserved_capacity: world.reserved,
                ..Options::default()
            };
            let plan = solve(&s, &options);
            check_plan(&s, &plan);
            // Refused pods are explained for every NodePool.
            for failure in &plan.failures {
                if failure.deferred {
                    prop_assert_eq!(&failure.reasons.last().unwrap().reason, &Reason::ReservedCapacity);
                } else {
                    prop_assert_eq!(failure.reasons.len(), s.node_pools.len());
                }
            }
        }
    }
}

// ---- solves sharing instance-type answers ---------------------------------------------------

#[test]
fn solves_sharing_a_type_cache_plan_as_solves_without_one() {
    use karpenter_core::domain::scheduling::workload::{
        PodFactory, benchmark_node_pool, fake_instance_types,
    };
    // One prepared pool solved for several different batches, as a disruption round does.
    let pool = benchmark_node_pool(fake_instance_types(60)).prepared();
    assert!(pool.types_prepared);
    let cache = TypeCache::default();
    let mut factory = PodFactory::new(7);
    for round in 0..4 {
        let mut pods = factory.diverse(40 + round * 30);
        pods.extend(factory.spread(20, ZONE));
        let snapshot = Snapshot {
            pods: pods
                .iter()
                .map(|p| SchedulingPod::from_pod(p).unwrap())
                .collect(),
            existing_nodes: vec![existing_node("node-a", "test-zone-1", 4)],
            node_pools: vec![pool.clone()],
            ..Snapshot::default()
        };
        let alone = solve_observed(&snapshot, &Options::default());
        let shared = solve_shared(&snapshot, &Options::default(), Some(&cache));
        assert_eq!(shared, alone, "round {round}");
        assert!(
            !alone.0.new_node_claims.is_empty(),
            "round {round} launches"
        );
    }
    assert!(!cache.is_empty(), "the solves kept their class answers");
}

#[test]
fn a_prepared_pool_keeps_only_the_allowed_types_cheapest_first() {
    let mut pool = node_pool("default");
    pool.requirements.add(Requirement::in_values(
        labels::INSTANCE_CPU,
        &["2", "8", "16"],
    ));
    let prepared = pool.prepared();
    let names: Vec<&str> = prepared
        .instance_types
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names, ["c2", "c8", "c16"]);
    assert_eq!(prepared.launchable_types().len(), 3);
    assert_eq!(pool.launchable_types().len(), 3);
    // A prepared pool plans as the raw one.
    let pods = [pod("a").requests("3", "1Gi")];
    assert_eq!(
        run(&snapshot(&pods, vec![prepared])),
        run(&snapshot(&pods, vec![pool]))
    );
}
