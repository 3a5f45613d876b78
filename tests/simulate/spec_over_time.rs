//! Issue 17 over the whole stack (the emulator, kwok and the daemon on paused time, as
//! `karpenter simulate` runs them): the `Drifted` condition set and cleared by each reason,
//! expiration at the exact instant, Node Repair after 30 minutes (off without its gate, held
//! back when a fifth of the pool is unhealthy), instance tagging done once, and the upgrade and
//! expiration scenarios of `config/scenarios`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use karpenter::sim::clock::SIMULATION_EPOCH_SECONDS;
use karpenter::sim::scenario::{self, LoadedScenario, RunOptions, Simulation};
use karpenter_actors::ports::cloud_provider::parse_provider_id;
use karpenter_actors::ports::ec2::{InstanceState, SecurityGroup};
use karpenter_core::apis::conditions::ConditionStatus;
use karpenter_core::apis::{EC2NodeClass, EC2NodeClassStatus, NodeClaim};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

use super::support::{
    advance_to, commands, disrupting_within_budget, in_simulation, is_bound, live_instances, load,
    nodeclaims, nodes, of_pool, patch_pool, pods, ready_condition,
};

const POOL: &str = "default";
const CLASS: &str = "default";
const CLUSTER: &str = "simulated";

/// A cluster whose web pods (3 CPUs each, on 4-vCPU on-demand instances) take one node each,
/// so `n` pods make `n` nodes; `steps` is the workload's (see [`replicas`]). Its NodePool's
/// budget is `nodes: "0"` and consolidation is off: no disruption command replaces a node, so
/// what happens to the nodes is the subject's doing (drift only marks, expiration and repair do
/// not ask budgets).
/// `template_spec` goes into the pool's `spec.template.spec` (10 spaces of indent), `top` at
/// the top level (`featureGates`, `nodeFailures`, ...).
fn one_pod_per_node(duration: &str, steps: &str, template_spec: &str, top: &str) -> LoadedScenario {
    let yaml = format!(
        r#"name: spec-over-time
seed: 17
duration: {duration}
progressEvery: 1h
kwok:
  launchLatency: 10s
  registrationDelay: 10s
  readyDelay: 5s
  startupTaintDelay: 5s
nodePools:
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata:
      name: {POOL}
    spec:
      template:
        spec:
          nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {CLASS}}}
{template_spec}          requirements:
            - {{key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}}
            - {{key: kubernetes.io/arch, operator: In, values: ["amd64"]}}
            - {{key: karpenter.k8s.aws/instance-category, operator: In, values: ["c", "m"]}}
            - {{key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["5"]}}
            - {{key: karpenter.k8s.aws/instance-cpu, operator: In, values: ["4"]}}
      disruption:
        consolidateAfter: Never
        budgets:
          - nodes: "0"
ec2NodeClasses:
  - apiVersion: karpenter.k8s.aws/v1
    kind: EC2NodeClass
    metadata:
      name: {CLASS}
    spec:
      role: KarpenterNodeRole-simulated
      amiSelectorTerms:
        - alias: al2023@latest
      subnetSelectorTerms:
        - tags:
            karpenter.sh/discovery: {CLUSTER}
      securityGroupSelectorTerms:
        - tags:
            karpenter.sh/discovery: {CLUSTER}
workloads:
  - name: web
    requests: {{cpu: "3", memory: 2Gi}}
    steps: {steps}
{top}"#
    );
    LoadedScenario::from_yaml(&yaml, None).unwrap()
}

/// The steps of a workload of `n` pods from the start.
fn replicas(n: u32) -> String {
    format!("[{{at: 0s, replicas: {n}}}]")
}

fn name(claim: &NodeClaim) -> String {
    claim.metadata.name.clone().unwrap_or_default()
}

fn node_name(claim: &NodeClaim) -> Option<String> {
    claim.status.as_ref().and_then(|s| s.node_name.clone())
}

fn instance_id(claim: &NodeClaim) -> Option<String> {
    let provider_id = claim.status.as_ref()?.provider_id.as_deref()?;
    Some(parse_provider_id(provider_id).ok()?.1.to_owned())
}

/// Seconds since the Unix epoch of a Kubernetes time.
fn seconds(time: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> i64 {
    time.0.as_second()
}

/// Pods bound to a node and running.
fn running(pods: &[Pod]) -> usize {
    pods.iter()
        .filter(|p| is_bound(p))
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count()
}

/// Registered NodeClaims that are not being deleted.
fn live_registered(claims: &[NodeClaim]) -> Vec<&NodeClaim> {
    claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none() && node_name(c).is_some())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// 1. Drift

/// The `Drifted` condition of each NodeClaim: `Some(reason)` when True, `None` when absent.
/// Any other status fails: the actor writes True or removes the condition.
fn drift_of(claim: &NodeClaim) -> Option<String> {
    let condition = claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Drifted")?;
    assert_eq!(
        condition.status,
        ConditionStatus::True,
        "{}: Drifted is True or absent: {condition:?}",
        name(claim)
    );
    Some(condition.reason.clone())
}

async fn drift(sim: &Simulation<'_>) -> BTreeMap<String, Option<String>> {
    nodeclaims(sim)
        .await
        .iter()
        .map(|c| (name(c), drift_of(c)))
        .collect()
}

/// Polls the NodeClaims every second for at most `limit` until each of `claims` has `wanted`
/// (a reason, or `None` for no condition); the simulated time it took, or the last state.
async fn await_drift(
    sim: &mut Simulation<'_>,
    claims: &BTreeSet<String>,
    wanted: Option<&str>,
    limit: Duration,
) -> Result<Duration, BTreeMap<String, Option<String>>> {
    let from = sim.now();
    loop {
        let now = drift(sim).await;
        let seen: BTreeSet<String> = now.keys().cloned().collect();
        assert_eq!(&seen, claims, "the same NodeClaims throughout (budget 0)");
        let took = sim.now().saturating_sub(from);
        if now.values().all(|reason| reason.as_deref() == wanted) {
            return Ok(took);
        }
        if took >= limit {
            return Err(now);
        }
        assert!(sim.advance(Duration::from_secs(1)).await);
    }
}

/// How long a spec change may take to show: the NodePool and EC2NodeClass actors stamp their
/// new hash at once, and every change of a pool or class nudges its NodeClaims, which decide
/// drift again at once (the cloud half's 5-minute memo is keyed by the pool's and class's
/// resource versions): a second here. Far below the 5-minute recheck, so a pass is the
/// change's doing.
const AT_ONCE: Duration = Duration::from_secs(10);

/// Starts a 3-node cluster (for an hour) and runs it until its nodes registered, with no
/// drift yet; the simulation and the NodeClaims' names.
async fn launched_without_drift() -> (Simulation<'static>, BTreeSet<String>) {
    let mut sim = Simulation::start(one_pod_per_node("1h", &replicas(3), "", ""), None)
        .await
        .unwrap();
    advance_to(&mut sim, Duration::from_mins(2)).await;
    let claims = nodeclaims(&sim).await;
    assert_eq!(live_registered(&claims).len(), 3, "three nodes registered");
    let now = drift(&sim).await;
    assert!(
        now.values().all(Option::is_none),
        "nothing drifted before a change: {now:?}"
    );
    (sim, now.into_keys().collect())
}

/// The `default` EC2NodeClass's status (empty before its first write).
async fn class_status(sim: &Simulation<'_>) -> EC2NodeClassStatus {
    Api::<EC2NodeClass>::all(sim.client())
        .get(CLASS)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

async fn patch_class(sim: &Simulation<'_>, patch: serde_json::Value) {
    Api::<EC2NodeClass>::all(sim.client())
        .patch(CLASS, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

async fn expect_drift(
    sim: &mut Simulation<'_>,
    claims: &BTreeSet<String>,
    wanted: Option<&str>,
    limit: Duration,
    what: &str,
) -> Duration {
    match await_drift(sim, claims, wanted, limit).await {
        Ok(took) => {
            eprintln!("{what}: every NodeClaim at {wanted:?} after {took:?}");
            took
        }
        Err(state) => {
            panic!("{what}: not every NodeClaim at {wanted:?} within {limit:?}: {state:?}")
        }
    }
}

fn requirements(categories: &[&str]) -> serde_json::Value {
    json!([
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": categories},
        {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["5"]},
        {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["4"]},
    ])
}

#[test]
fn nodepool_template_and_requirement_changes_drift_every_nodeclaim_and_reverting_clears_it() {
    in_simulation(|| async {
        let (mut sim, claims) = launched_without_drift().await;

        // A template label changes the pool's template hash: NodePoolDrifted.
        patch_pool(
            &sim,
            json!({"spec": {"template": {"metadata": {"labels": {"team": "payments"}}}}}),
        )
        .await;
        expect_drift(
            &mut sim,
            &claims,
            Some("NodePoolDrifted"),
            AT_ONCE,
            "label added",
        )
        .await;
        // Removing it restores the hash the NodeClaims were stamped with.
        patch_pool(
            &sim,
            json!({"spec": {"template": {"metadata": {"labels": {"team": null}}}}}),
        )
        .await;
        expect_drift(&mut sim, &claims, None, AT_ONCE, "label removed").await;

        // Requirements are not hashed: allowing only `r` instances drifts the `c`/`m` nodes
        // by their labels.
        patch_pool(
            &sim,
            json!({"spec": {"template": {"spec": {"requirements": requirements(&["r"])}}}}),
        )
        .await;
        expect_drift(
            &mut sim,
            &claims,
            Some("RequirementsDrifted"),
            AT_ONCE,
            "instance category r only",
        )
        .await;
        patch_pool(
            &sim,
            json!({"spec": {"template": {"spec": {"requirements": requirements(&["c", "m"])}}}}),
        )
        .await;
        expect_drift(&mut sim, &claims, None, AT_ONCE, "requirements restored").await;

        // Cleared for good: a recheck (every 5 minutes) finds nothing either.
        assert!(sim.advance(Duration::from_mins(6)).await);
        expect_drift(&mut sim, &claims, None, Duration::ZERO, "six minutes later").await;
        let report = sim.finish().await;
        assert!(
            report.disruptions.is_empty(),
            "budget 0: {:?}",
            report.disruptions
        );
    });
}

#[test]
fn nodeclass_static_fields_and_security_groups_drift_every_nodeclaim_and_reverting_clears_it() {
    in_simulation(|| async {
        let (mut sim, claims) = launched_without_drift().await;

        // `spec.tags` is hashed into `karpenter.k8s.aws/ec2nodeclass-hash`: NodeClassDrift.
        patch_class(&sim, json!({"spec": {"tags": {"team": "payments"}}})).await;
        expect_drift(
            &mut sim,
            &claims,
            Some("NodeClassDrift"),
            AT_ONCE,
            "tag added",
        )
        .await;
        patch_class(&sim, json!({"spec": {"tags": null}})).await;
        expect_drift(&mut sim, &claims, None, AT_ONCE, "tag removed").await;

        // The selector terms are not hashed: selecting another group drifts the instances,
        // which carry the first one, once the class's status names the new group (the
        // class resolves a changed selector at once; the cache is keyed by the selector).
        sim.world().ec2.add_security_group(SecurityGroup {
            id: "sg-0000000000000beef".into(),
            name: "payments-node".into(),
            vpc_id: "vpc-00000000000000001".into(),
            tags: [("team".to_owned(), "payments".to_owned())].into(),
        });
        let other = json!([{"tags": {"team": "payments"}}]);
        patch_class(&sim, json!({"spec": {"securityGroupSelectorTerms": other}})).await;
        expect_drift(
            &mut sim,
            &claims,
            Some("SecurityGroupDrift"),
            AT_ONCE,
            "another security group",
        )
        .await;
        let groups: Vec<String> = class_status(&sim)
            .await
            .security_groups
            .into_iter()
            .map(|g| g.id)
            .collect();
        assert_eq!(groups, ["sg-0000000000000beef"]);
        let back = json!([{"tags": {"karpenter.sh/discovery": CLUSTER}}]);
        patch_class(&sim, json!({"spec": {"securityGroupSelectorTerms": back}})).await;
        expect_drift(&mut sim, &claims, None, AT_ONCE, "security group restored").await;
        sim.finish().await;
    });
}

#[test]
fn an_ami_release_drifts_every_nodeclaim_with_ami_drift() {
    in_simulation(|| async {
        let (mut sim, claims) = launched_without_drift().await;
        let before: BTreeSet<String> = sim
            .world()
            .ec2
            .instances()
            .into_iter()
            .map(|i| i.image_id)
            .collect();
        let released = sim.world().release_amis();
        assert!(!released.is_empty());
        // Nothing tells the daemon: the class resolves AMIs again on its own timer (at least
        // every minute, its subnet period), its `DescribeImages` answer may be a minute old,
        // and only an answer showing the old image deprecated evicts the 24-hour SSM alias,
        // which the next reconcile reads again: at most about three minutes before
        // `status.amis` names the release (about one here). That status write nudges the
        // NodeClaims. Ten minutes also cover a 5-minute drift recheck, should the nudge be lost.
        expect_drift(
            &mut sim,
            &claims,
            Some("AMIDrift"),
            Duration::from_mins(10),
            "AMI release",
        )
        .await;
        let amis = class_amis(&sim).await;
        let released: BTreeSet<String> = released.into_values().collect();
        assert!(
            amis.is_subset(&released) && !amis.is_empty(),
            "status.amis {amis:?} are the released {released:?}"
        );
        assert!(amis.is_disjoint(&before), "the instances run {before:?}");
        sim.finish().await;
    });
}

// ---------------------------------------------------------------------------------------------
// 2. Expiration

/// What was seen of a NodeClaim: its creation and, once seen, its deletion (Unix seconds).
#[derive(Debug, Clone, Copy)]
struct Seen {
    created: i64,
    deleted: Option<i64>,
}

#[test]
fn every_nodeclaim_is_deleted_at_its_creation_plus_expire_after_to_the_second() {
    in_simulation(|| async {
        let scenario = one_pod_per_node("40m", &replicas(3), "          expireAfter: 10m\n", "");
        let mut sim = Simulation::start(scenario, None).await.unwrap();
        let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
        // Sampled every simulated second: a NodeClaim drains, then waits for its instance's
        // shutdown (10 s in kwok), so each deletion is seen.
        let end = Duration::from_mins(35);
        while sim.now() < end {
            assert!(sim.advance(Duration::from_secs(1)).await);
            for claim in nodeclaims(&sim).await {
                let created = seconds(claim.metadata.creation_timestamp.as_ref().unwrap());
                let deleted = claim.metadata.deletion_timestamp.as_ref().map(seconds);
                let entry = seen.entry(name(&claim)).or_insert(Seen {
                    created,
                    deleted: None,
                });
                entry.deleted = entry.deleted.or(deleted);
            }
        }
        let end_at = SIMULATION_EPOCH_SECONDS + i64::try_from(end.as_secs()).unwrap();
        let mut expired = 0;
        for (claim, s) in &seen {
            let deadline = s.created + 600;
            match s.deleted {
                Some(deleted) => {
                    assert_eq!(
                        deleted,
                        deadline,
                        "{claim}: created at {}s, deleted at {}s",
                        s.created - SIMULATION_EPOCH_SECONDS,
                        deleted - SIMULATION_EPOCH_SECONDS
                    );
                    expired += 1;
                }
                None => assert!(deadline >= end_at, "{claim} outlived its deadline: {s:?}"),
            }
        }
        // Three generations: at the start, ten minutes on, twenty minutes on.
        assert!(expired >= 6, "{seen:?}");
        let report = sim.finish().await;
        assert_eq!(
            report.nodes.disrupted,
            BTreeMap::from([("expired".to_owned(), expired)]),
            "one `expired` count per expired NodeClaim and nothing else"
        );
    });
}

#[test]
fn a_pool_whose_nodeclaims_never_expire_keeps_its_nodes() {
    in_simulation(|| async {
        let scenario = one_pod_per_node("3h", &replicas(3), "          expireAfter: Never\n", "");
        let mut sim = Simulation::start(scenario, None).await.unwrap();
        advance_to(&mut sim, Duration::from_mins(2)).await;
        let first: BTreeSet<String> = nodeclaims(&sim).await.iter().map(name).collect();
        assert_eq!(first.len(), 3);
        while sim.now() < Duration::from_mins(175) {
            assert!(sim.advance(Duration::from_mins(1)).await);
            let claims = nodeclaims(&sim).await;
            let now: BTreeSet<String> = claims.iter().map(name).collect();
            assert_eq!(now, first, "at {:?}", sim.now());
            assert!(
                claims
                    .iter()
                    .all(|c| c.metadata.deletion_timestamp.is_none()),
                "at {:?}",
                sim.now()
            );
        }
        let report = sim.finish().await;
        assert!(
            report.nodes.disrupted.is_empty(),
            "{:?}",
            report.nodes.disrupted
        );
        assert_eq!(report.nodes.nodeclaims_created, 3);
    });
}

// ---------------------------------------------------------------------------------------------
// 3. Node Repair

/// The nodes whose `Ready` is Unknown, with when it turned so (Unix seconds).
async fn failed_nodes(sim: &Simulation<'_>) -> BTreeMap<String, i64> {
    nodes(sim)
        .await
        .iter()
        .filter_map(|node| {
            let ready = ready_condition(node)?;
            (ready.status == "Unknown").then(|| {
                (
                    node.metadata.name.clone().unwrap_or_default(),
                    seconds(ready.last_transition_time.as_ref().unwrap()),
                )
            })
        })
        .collect()
}

/// The scenario of the repair tests: `nodes` nodes, `failed` of them stop reporting at 2m.
fn failing(nodes: u32, failed: u32, gate: bool) -> LoadedScenario {
    let gates = if gate {
        "featureGates: NodeRepair=true\n"
    } else {
        ""
    };
    let top = format!("{gates}nodeFailures:\n  - {{at: 2m, count: {failed}, mode: notReady}}\n");
    one_pod_per_node("1h", &replicas(nodes), "", &top)
}

/// Runs [`failing`] to just after the failure: the failed node, when its `Ready` turned
/// Unknown (Unix seconds), and its NodeClaim's name.
async fn one_failed(sim: &mut Simulation<'_>) -> (String, i64, String) {
    advance_to(sim, Duration::from_mins(2) + Duration::from_secs(5)).await;
    let failed = failed_nodes(sim).await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    let (node, at) = failed.into_iter().next().unwrap();
    // The harness fails the node at 2m and its kubelet reports Unknown that same tick.
    assert_eq!(at - SIMULATION_EPOCH_SECONDS, 120);
    let claim = nodeclaims(sim)
        .await
        .into_iter()
        .find(|c| node_name(c).as_deref() == Some(&node))
        .map(|c| name(&c))
        .unwrap();
    (node, at, claim)
}

#[test]
fn a_node_not_ready_for_thirty_minutes_is_replaced_with_the_node_repair_gate() {
    in_simulation(|| async {
        let mut sim = Simulation::start(failing(3, 1, true), None).await.unwrap();
        let (node, unknown_at, claim) = one_failed(&mut sim).await;
        let deadline = unknown_at + 30 * 60;

        // 29 minutes on, still tolerated.
        advance_to(
            &mut sim,
            Duration::from_secs(
                u64::try_from(unknown_at - SIMULATION_EPOCH_SECONDS + 29 * 60).unwrap(),
            ),
        )
        .await;
        let claims = nodeclaims(&sim).await;
        let victim = claims
            .iter()
            .find(|c| name(c) == claim)
            .expect("still there");
        assert!(
            victim.metadata.deletion_timestamp.is_none(),
            "not repaired before 30 minutes"
        );

        // Second by second across the deadline: the deletion's timestamp.
        let mut deleted_at = None;
        for _ in 0..120 {
            assert!(sim.advance(Duration::from_secs(1)).await);
            let found = nodeclaims(&sim)
                .await
                .into_iter()
                .find(|c| name(c) == claim);
            match found {
                Some(c) => {
                    if let Some(at) = c.metadata.deletion_timestamp.as_ref() {
                        deleted_at.get_or_insert(seconds(at));
                    }
                }
                None => break,
            }
        }
        let deleted_at = deleted_at.expect("the unhealthy NodeClaim was deleted");
        assert_eq!(
            deleted_at,
            deadline,
            "deleted 30 minutes after Ready turned Unknown, at {}s",
            deleted_at - SIMULATION_EPOCH_SECONDS
        );

        // A replacement runs the pod: three registered nodes again, every pod running.
        assert!(sim.advance(Duration::from_mins(2)).await);
        let claims = nodeclaims(&sim).await;
        assert!(claims.iter().all(|c| name(c) != claim), "finalized");
        let live = live_registered(&claims);
        assert_eq!(
            live.len(),
            3,
            "{:?}",
            claims.iter().map(name).collect::<Vec<_>>()
        );
        assert!(live.iter().all(|c| node_name(c).as_deref() != Some(&node)));
        assert_eq!(running(&pods(&sim).await), 3);
        let report = sim.finish().await;
        assert_eq!(
            report.nodes.disrupted,
            BTreeMap::from([("unhealthy".to_owned(), 1)])
        );
    });
}

#[test]
fn without_the_node_repair_gate_a_node_not_ready_is_never_replaced() {
    in_simulation(|| async {
        let mut sim = Simulation::start(failing(3, 1, false), None).await.unwrap();
        let (_, _, claim) = one_failed(&mut sim).await;
        advance_to(&mut sim, Duration::from_mins(55)).await;
        let claims = nodeclaims(&sim).await;
        let victim = claims
            .iter()
            .find(|c| name(c) == claim)
            .expect("still there");
        assert!(victim.metadata.deletion_timestamp.is_none());
        assert_eq!(claims.len(), 3);
        let report = sim.finish().await;
        assert!(
            report.nodes.disrupted.is_empty(),
            "{:?}",
            report.nodes.disrupted
        );
    });
}

#[test]
fn repair_waits_while_more_than_a_fifth_of_the_pool_is_unhealthy_and_says_so_on_the_nodes() {
    in_simulation(|| async {
        // Six nodes allow ceil(20% of 6) = 2 unhealthy; three fail.
        let mut sim = Simulation::start(failing(6, 3, true), None).await.unwrap();
        advance_to(&mut sim, Duration::from_mins(2)).await;
        let before: BTreeSet<String> = nodeclaims(&sim).await.iter().map(name).collect();
        assert_eq!(live_registered(&nodeclaims(&sim).await).len(), 6);
        assert!(sim.advance(Duration::from_secs(5)).await);
        let failed = failed_nodes(&sim).await;
        assert_eq!(failed.len(), 3, "{failed:?}");

        // Well past the 30 minutes: nothing repaired, nothing else lost.
        advance_to(&mut sim, Duration::from_mins(45)).await;
        let claims = nodeclaims(&sim).await;
        let now: BTreeSet<String> = claims.iter().map(name).collect();
        assert_eq!(now, before);
        assert!(
            claims
                .iter()
                .all(|c| c.metadata.deletion_timestamp.is_none())
        );

        let events = Api::<Event>::all(sim.client())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let blocked: Vec<&Event> = events
            .iter()
            .filter(|e| e.reason.as_deref() == Some("NodeRepairBlocked"))
            .collect();
        let on: BTreeSet<String> = blocked
            .iter()
            .filter(|e| e.involved_object.kind.as_deref() == Some("Node"))
            .filter_map(|e| e.involved_object.name.clone())
            .collect();
        let failed_names: BTreeSet<String> = failed.keys().cloned().collect();
        assert_eq!(
            on, failed_names,
            "a warning on each unhealthy node, due for repair"
        );
        assert!(
            blocked
                .iter()
                .all(|e| e.type_.as_deref() == Some("Warning"))
        );
        let report = sim.finish().await;
        assert!(
            report.nodes.disrupted.is_empty(),
            "{:?}",
            report.nodes.disrupted
        );
    });
}

// ---------------------------------------------------------------------------------------------
// 4. Tagging

/// Each NodeClaim's instance tags, by instance id.
fn tag_maps(sim: &Simulation<'_>) -> BTreeMap<String, BTreeMap<String, String>> {
    sim.world()
        .ec2
        .instances()
        .into_iter()
        .map(|i| (i.id, i.tags))
        .collect()
}

/// `CreateTags` calls naming each instance.
fn create_tags_calls(sim: &Simulation<'_>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for call in sim.world().ec2.faults().calls() {
        if call.operation == "CreateTags" {
            for id in call.detail.split(',') {
                *counts.entry(id.to_owned()).or_insert(0) += 1;
            }
        }
    }
    counts
}

/// Every registered NodeClaim's instance carries the three tags and the NodeClaim both
/// annotations; the number checked.
async fn check_tagged(sim: &Simulation<'_>) -> usize {
    let claims = nodeclaims(sim).await;
    let tags = tag_maps(sim);
    let registered = live_registered(&claims);
    for claim in &registered {
        let id = instance_id(claim).unwrap();
        let instance = &tags[&id];
        let wanted = [
            ("Name", node_name(claim).unwrap()),
            ("karpenter.sh/nodeclaim", name(claim)),
            ("eks:eks-cluster-name", CLUSTER.to_owned()),
        ];
        for (key, value) in wanted {
            assert_eq!(
                instance.get(key),
                Some(&value),
                "{id} of {}: {instance:?}",
                name(claim)
            );
        }
        let annotations = claim.metadata.annotations.clone().unwrap_or_default();
        for key in [
            "karpenter.k8s.aws/tagged",
            "compatibility.karpenter.k8s.aws/cluster-name-tagged",
        ] {
            assert_eq!(
                annotations.get(key).map(String::as_str),
                Some("true"),
                "{}: {annotations:?}",
                name(claim)
            );
        }
    }
    registered.len()
}

#[test]
fn registered_instances_are_tagged_once_with_their_node_nodeclaim_and_cluster() {
    in_simulation(|| async {
        // A second batch at 3m: tagging follows each registration.
        let steps = "[{at: 0s, replicas: 3}, {at: 3m, replicas: 6}]";
        let scenario = one_pod_per_node("30m", steps, "", "");
        let mut sim = Simulation::start(scenario, None).await.unwrap();
        advance_to(&mut sim, Duration::from_mins(2)).await;
        assert_eq!(check_tagged(&sim).await, 3);
        advance_to(&mut sim, Duration::from_mins(6)).await;
        assert_eq!(check_tagged(&sim).await, 6);
        let tagged = tag_maps(&sim);
        let calls = create_tags_calls(&sim);
        let claimed: BTreeSet<String> = nodeclaims(&sim)
            .await
            .iter()
            .filter_map(instance_id)
            .collect();
        assert_eq!(claimed.len(), 6);
        for id in &claimed {
            assert_eq!(
                calls.get(id),
                Some(&1),
                "one CreateTags for {id}: {calls:?}"
            );
        }

        // Time goes on, and a restarted daemon finds the annotations: no call, no change.
        assert!(sim.advance(Duration::from_mins(4)).await);
        sim.restart_daemon().await.unwrap();
        assert!(sim.advance(Duration::from_mins(10)).await);
        assert_eq!(check_tagged(&sim).await, 6);
        assert_eq!(
            create_tags_calls(&sim),
            calls,
            "no CreateTags after the first"
        );
        assert_eq!(tag_maps(&sim), tagged, "the instances' tags did not change");
        sim.finish().await;
    });
}

// ---------------------------------------------------------------------------------------------
// 5. and 6. The upgrade and expiration scenarios

/// The class's AMIs that are not deprecated, from its status.
async fn class_amis(sim: &Simulation<'_>) -> BTreeSet<String> {
    class_status(sim)
        .await
        .amis
        .into_iter()
        .filter(|a| a.deprecated != Some(true))
        .map(|a| a.id)
        .collect()
}

#[test]
fn the_upgrade_scenario_replaces_every_node_by_drift_within_the_budget() {
    in_simulation(|| async {
        let mut sim = Simulation::start(load("config/scenarios/upgrade.yaml"), None)
            .await
            .unwrap();
        // Up to the release at 4m (its tick has not run yet).
        advance_to(&mut sim, Duration::from_mins(4)).await;
        let old_nodes: BTreeSet<String> = nodes(&sim)
            .await
            .iter()
            .filter(|n| of_pool(n))
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let old_instances = live_instances(&sim);
        let old_amis = class_amis(&sim).await;
        assert!(!old_nodes.is_empty() && !old_amis.is_empty());
        assert_eq!(old_nodes.len(), old_instances.len());

        let most_disrupting =
            match disrupting_within_budget(&mut sim, |n| n.div_ceil(4), Duration::MAX).await {
                Ok(most) => most,
                Err(why) => {
                    let report = sim.finish().await;
                    panic!("{why}\ncommands:\n{}", commands(&report));
                }
            };
        assert!(most_disrupting > 0, "the budget check saw disruptions");

        let new_amis = class_amis(&sim).await;
        assert!(
            new_amis.is_disjoint(&old_amis),
            "{old_amis:?} -> {new_amis:?}"
        );
        for instance in sim.world().ec2.instances() {
            if matches!(
                instance.state,
                InstanceState::Pending | InstanceState::Running
            ) {
                assert!(
                    new_amis.contains(&instance.image_id),
                    "{} runs {} not among {new_amis:?}",
                    instance.id,
                    instance.image_id
                );
            }
        }
        let live = live_instances(&sim);
        assert!(
            live.is_disjoint(&old_instances),
            "{live:?} vs {old_instances:?}"
        );
        let names: BTreeSet<String> = nodes(&sim)
            .await
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        assert!(names.is_disjoint(&old_nodes), "{names:?} vs {old_nodes:?}");

        let report = sim.finish().await;
        assert!(!report.disruptions.is_empty());
        assert!(
            report
                .disruptions
                .iter()
                .all(|d| d.method == "drift" && d.reason == "Drifted"),
            "{}",
            commands(&report)
        );
        let drifted = report.nodes.disrupted.get("drifted").copied().unwrap_or(0);
        assert!(
            drifted >= u64::try_from(old_nodes.len()).unwrap(),
            "{drifted} drifted, {} nodes before the release: {:?}",
            old_nodes.len(),
            report.nodes.disrupted
        );
        assert!(
            report.time_to_schedule.max_seconds <= 60.0,
            "{:?}",
            report.time_to_schedule
        );
        assert_eq!(
            report.pods.pending_at_end, 0,
            "{:?}",
            report.pods.pending_reasons
        );
    });
}

#[test]
fn the_expiration_scenario_expires_nodes_and_leaves_no_pod_pending() {
    let report = scenario::run(
        load("config/scenarios/expiration.yaml"),
        RunOptions::quiet(),
    )
    .unwrap();
    let expired = report.nodes.disrupted.get("expired").copied().unwrap_or(0);
    assert!(expired > 0, "{:?}", report.nodes.disrupted);
    assert_eq!(
        report.pods.pending_at_end, 0,
        "{:?}",
        report.pods.pending_reasons
    );
}
