//! The Kubernetes version refresh over the emulator and kwok on paused time: a control-plane
//! upgrade (the emulator's `/version`) reaches the daemon within five minutes and its
//! EC2NodeClass re-resolves its `al2023@latest` alias for the new version at once; an
//! unsupported version and a failed read leave the version in use as it was.

use std::time::Duration;

use karpenter::emulator::{FaultRule, Verb};
use karpenter::sim::scenario::Simulation;
use karpenter_actors::ports::ec2::{Image, Tags};
use karpenter_core::apis::EC2NodeClass;
use karpenter_core::domain::version::KubernetesVersion;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::support::{in_simulation, small_without_consolidation};

/// The AL2023 x86-64 image kwok's SSM names for Kubernetes 1.31 only (every version's alias
/// names the same made-up image otherwise).
const IMAGE_1_31: &str = "ami-00000000000001031";
const AL2023_X86_1_31: &str =
    "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id";

fn v(text: &str) -> KubernetesVersion {
    KubernetesVersion::parse(text).unwrap()
}

/// The AMI ids in the `default` EC2NodeClass's status.
async fn status_amis(sim: &Simulation<'_>) -> Vec<String> {
    let class = Api::<EC2NodeClass>::all(sim.client())
        .get("default")
        .await
        .unwrap();
    class
        .status
        .map(|s| s.amis.into_iter().map(|ami| ami.id).collect())
        .unwrap_or_default()
}

/// Gives 1.31's AL2023 x86-64 alias an image of its own, in kwok's SSM and EC2.
fn publish_image_for_1_31(sim: &Simulation<'_>) {
    sim.world().ec2.add_image(Image {
        id: IMAGE_1_31.into(),
        name: "amazon-eks-node-al2023-x86_64-standard-1.31-v20250101".into(),
        architecture: "x86_64".into(),
        creation_date: "2025-01-01T00:00:00.000Z".into(),
        deprecation_time: None,
        owner_id: "amazon".into(),
        state: "available".into(),
        tags: Tags::new(),
    });
    sim.world().ssm.put(AL2023_X86_1_31, IMAGE_1_31);
}

#[test]
fn a_control_plane_upgrade_moves_the_version_and_the_alias_amis_within_five_minutes() {
    in_simulation(|| async {
        let mut sim = Simulation::start(small_without_consolidation(), None)
            .await
            .unwrap();
        assert!(sim.advance(Duration::from_mins(1)).await);
        assert_eq!(sim.kubernetes_version(), Some(v("1.33")));
        publish_image_for_1_31(&sim);
        let before = status_amis(&sim).await;
        assert!(!before.is_empty(), "the alias resolved for 1.33");
        assert!(!before.contains(&IMAGE_1_31.to_owned()), "{before:?}");

        // At 2:30 the class changes (a label), so its own requeues (every minute, for its
        // subnets) fall on the half minute from then on, and the control plane is upgraded.
        assert!(sim.advance(Duration::from_secs(90)).await);
        Api::<EC2NodeClass>::all(sim.client())
            .patch(
                "default",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {"phase": "shifted"}}})),
            )
            .await
            .unwrap();
        sim.emulator().set_kubernetes_version("1", "31");
        assert!(sim.advance(Duration::from_secs(140)).await);
        assert_eq!(
            sim.kubernetes_version(),
            Some(v("1.33")),
            "read again only five minutes after the last read"
        );
        assert!(!status_amis(&sim).await.contains(&IMAGE_1_31.to_owned()));

        // At 5:00 the daemon reads 1.31 and nudges the class, which resolves 1.31's aliases
        // before its own next requeue (5:30).
        assert!(sim.advance(Duration::from_secs(15)).await);
        assert_eq!(sim.kubernetes_version(), Some(v("1.31")));
        let after = status_amis(&sim).await;
        assert!(after.contains(&IMAGE_1_31.to_owned()), "{after:?}");
    });
}

#[test]
fn an_unsupported_version_or_a_failed_read_keeps_the_version_in_use() {
    in_simulation(|| async {
        let mut scenario = small_without_consolidation();
        // Four reads: at start, 5:00, 10:00 and 15:00.
        scenario.scenario.duration = Duration::from_mins(16);
        let mut sim = Simulation::start(scenario, None).await.unwrap();
        assert!(sim.advance(Duration::from_mins(1)).await);
        assert_eq!(sim.kubernetes_version(), Some(v("1.33")));

        // 1.20 is older than Karpenter v1.5 supports: read at 5:00, not applied.
        sim.emulator().set_kubernetes_version("1", "20");
        assert!(sim.advance(Duration::from_secs(250)).await);
        assert_eq!(sim.kubernetes_version(), Some(v("1.33")));
        assert!(
            sim.emulator()
                .requests()
                .iter()
                .filter(|r| r.path == "/version")
                .count()
                >= 2,
            "read at start and at 5:00"
        );

        // The next read (10:00) fails: the version stays although the server moved to 1.32.
        sim.emulator().set_kubernetes_version("1", "32");
        sim.emulator()
            .faults()
            .inject(FaultRule::fail(503).on(Verb::Discovery).times(1));
        assert!(sim.advance(Duration::from_mins(5)).await);
        assert_eq!(sim.kubernetes_version(), Some(v("1.33")));
        let failed = sim
            .emulator()
            .requests()
            .into_iter()
            .rfind(|r| r.path == "/version")
            .unwrap();
        assert_eq!(failed.code, 503, "the 10:00 read failed");

        // The one after (15:00) applies it.
        assert!(sim.advance(Duration::from_mins(5)).await);
        assert_eq!(sim.kubernetes_version(), Some(v("1.32")));
    });
}
