//! Ports of kubernetes-sigs' performance suite (`test/suites/regression/perf_test.go`) over
//! the simulation: 100 one-CPU pods provisioned within five minutes, then a template label change drifts the pool
//! and every drifted NodeClaim is replaced within upstream's ten minutes. Upstream collects
//! the durations for a dashboard; here the thresholds are its `Eventually` timeouts, and the
//! test prints the simulated durations.

use std::time::Duration;

use karpenter::sim::scenario::Simulation;
use serde_json::json;

use super::support::{
    PoolScenario, condition_is_true, in_simulation, is_bound, nodeclaims, patch_pool, pods,
};

/// Upstream's `replicas`.
const REPLICAS: usize = 100;
/// Our bound for the simple case (upstream waits with its default `Eventually` timeout and
/// records the duration): launch, registration and readiness take under a minute in kwok.
const PROVISIONED_WITHIN: Duration = Duration::from_mins(5);

/// 100 one-CPU pods on an on-demand pool of kwok's c and m types of 8 or 16 CPUs; steps until every pod runs
/// and returns how long that took (simulated).
async fn provisioned() -> (Simulation<'static>, Duration) {
    let scenario = PoolScenario {
        duration: "30m",
        requirements: &[
            r#"{key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}"#,
            r#"{key: kubernetes.io/arch, operator: In, values: ["amd64"]}"#,
            r#"{key: karpenter.k8s.aws/instance-category, operator: In, values: ["c", "m"]}"#,
            // Several nodes rather than one large one, so drift goes through the budget.
            r#"{key: karpenter.k8s.aws/instance-cpu, operator: In, values: ["8", "16"]}"#,
        ],
        workloads: "  - name: app\n    requests: {cpu: \"1\", memory: 256Mi}\n    steps: [{at: 0s, replicas: 100}]\n",
        ..PoolScenario::default()
    };
    let mut sim = Simulation::start(scenario.load(), None).await.unwrap();
    loop {
        let pods = pods(&sim).await;
        let running = pods
            .iter()
            .filter(|p| is_bound(p))
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == REPLICAS {
            let took = sim.now();
            return (sim, took);
        }
        assert!(
            sim.now() < PROVISIONED_WITHIN,
            "{running} of {REPLICAS} running after {PROVISIONED_WITHIN:?}"
        );
        assert!(sim.advance(Duration::from_secs(1)).await);
    }
}

/// `Performance / Provisioning / It("should do simple provisioning")`.
#[test]
fn one_hundred_pods_are_provisioned_within_five_minutes() {
    in_simulation(|| async {
        let (sim, took) = provisioned().await;
        eprintln!("100 pods running after {took:?} (simulated)");
        sim.finish().await;
    });
}

/// How many NodeClaims are `Drifted`.
async fn drifted(sim: &Simulation<'_>) -> usize {
    nodeclaims(sim)
        .await
        .iter()
        .filter(|c| condition_is_true(c, "Drifted"))
        .count()
}

/// `Performance / Provisioning / It("should do simple provisioning and simple drift")`: after
/// a template label change some NodeClaim is `Drifted` within 5 s and none is within 10
/// minutes (all replaced under the default 10% budget).
#[test]
fn one_hundred_pods_drift_and_every_nodeclaim_is_replaced_within_ten_minutes() {
    in_simulation(|| async {
        let (mut sim, _) = provisioned().await;
        let before = nodeclaims(&sim).await.len();
        patch_pool(
            &sim,
            json!({"spec": {"template": {"metadata": {"labels": {"test-drift": "true"}}}}}),
        )
        .await;
        let from = sim.now();
        while drifted(&sim).await == 0 {
            assert!(
                sim.now().saturating_sub(from) <= Duration::from_secs(5),
                "nothing drifted in 5 s"
            );
            assert!(sim.advance(Duration::from_secs(1)).await);
        }
        while drifted(&sim).await > 0 {
            assert!(
                sim.now().saturating_sub(from) <= Duration::from_mins(10),
                "{} of {before} NodeClaims still drifted after 10 minutes",
                drifted(&sim).await
            );
            assert!(sim.advance(Duration::from_secs(1)).await);
        }
        eprintln!(
            "{before} NodeClaims drifted and replaced in {:?} (simulated)",
            sim.now().saturating_sub(from)
        );
        let report = sim.finish().await;
        let replaced = report.nodes.disrupted.get("drifted").copied().unwrap_or(0);
        assert!(
            replaced >= u64::try_from(before).unwrap(),
            "{replaced} drifted away of {before}: {:?}",
            report.nodes.disrupted
        );
    });
}
