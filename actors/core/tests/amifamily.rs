//! AMI family facts: default block devices, ephemeral storage, feature flags, the SSM
//! parameters behind each alias, and which images become `status.amis`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use karpenter_core::apis::ec2nodeclass::{
    AmiFamily, AmiRequirement, BlockDevice, BlockDeviceMapping, InstanceStorePolicy, VolumeType,
};
use karpenter_core::domain::amifamily::{
    Alias, AliasError, AliasVersion, ImageCandidate, QueryImages, Variant,
    default_block_device_mappings, ephemeral_block_device, ephemeral_storage, feature_flags,
    known_requirements, requirement, select_amis, windows_build,
};

const K8S: &str = "1.33";

// ---- block devices and flags -----------------------------------------------------------------

fn devices(family: AmiFamily) -> Vec<(String, String)> {
    default_block_device_mappings(family)
        .into_iter()
        .map(|m| {
            let ebs = m.ebs.unwrap();
            assert_eq!(ebs.encrypted, Some(true));
            assert_eq!(ebs.volume_type, Some(VolumeType::Gp3));
            (m.device_name.unwrap(), ebs.volume_size.unwrap())
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[test]
fn each_family_has_karpenters_default_block_devices() {
    assert_eq!(devices(AmiFamily::AL2), pairs(&[("/dev/xvda", "20Gi")]));
    assert_eq!(devices(AmiFamily::AL2023), pairs(&[("/dev/xvda", "20Gi")]));
    assert_eq!(
        devices(AmiFamily::Bottlerocket),
        pairs(&[("/dev/xvda", "4Gi"), ("/dev/xvdb", "20Gi")])
    );
    assert_eq!(
        devices(AmiFamily::Windows2019),
        pairs(&[("/dev/sda1", "50Gi")])
    );
    assert_eq!(
        devices(AmiFamily::Windows2022),
        pairs(&[("/dev/sda1", "50Gi")])
    );
    assert!(default_block_device_mappings(AmiFamily::Custom).is_empty());
    assert_eq!(
        ephemeral_block_device(AmiFamily::Bottlerocket),
        Some("/dev/xvdb")
    );
    assert_eq!(ephemeral_block_device(AmiFamily::Custom), None);
}

fn mapping(device: &str, size: Option<&str>, root: bool) -> BlockDeviceMapping {
    BlockDeviceMapping {
        device_name: Some(device.to_owned()),
        ebs: Some(BlockDevice {
            volume_size: size.map(str::to_owned),
            ..BlockDevice::default()
        }),
        root_volume: root.then_some(true),
    }
}

#[test]
fn ephemeral_storage_follows_raid0_then_root_volume_then_the_family_device() {
    let raid0 = Some(InstanceStorePolicy::RAID0);
    assert_eq!(
        ephemeral_storage(AmiFamily::AL2, &[], raid0, Some(900)),
        "900G"
    );
    // RAID0 on an instance without instance storage falls back to volumes.
    assert_eq!(ephemeral_storage(AmiFamily::AL2, &[], raid0, None), "20Gi");
    assert_eq!(
        ephemeral_storage(AmiFamily::Bottlerocket, &[], None, None),
        "20Gi"
    );
    assert_eq!(
        ephemeral_storage(AmiFamily::Windows2022, &[], None, None),
        "50Gi"
    );
    assert_eq!(
        ephemeral_storage(AmiFamily::Custom, &[], None, None),
        "20Gi"
    );

    let root = [
        mapping("/dev/xvda", Some("30Gi"), false),
        mapping("/dev/xvdc", Some("200Gi"), true),
    ];
    assert_eq!(
        ephemeral_storage(AmiFamily::AL2023, &root, None, None),
        "200Gi"
    );

    let br = [
        mapping("/dev/xvda", Some("8Gi"), false),
        mapping("/dev/xvdb", Some("100Gi"), false),
    ];
    assert_eq!(
        ephemeral_storage(AmiFamily::Bottlerocket, &br, None, None),
        "100Gi"
    );
    // AL2's ephemeral device is /dev/xvda.
    assert_eq!(ephemeral_storage(AmiFamily::AL2, &br, None, None), "8Gi");
    // Custom AMIs use the last mapping, or 20Gi when it has no size.
    assert_eq!(
        ephemeral_storage(AmiFamily::Custom, &br, None, None),
        "100Gi"
    );
    let snapshot_only = [mapping("/dev/xvda", None, false)];
    assert_eq!(
        ephemeral_storage(AmiFamily::Custom, &snapshot_only, None, None),
        "20Gi"
    );
    // No mapping for the family's device: the family default.
    let other = [mapping("/dev/xvdz", Some("500Gi"), false)];
    assert_eq!(
        ephemeral_storage(AmiFamily::Windows2019, &other, None, None),
        "50Gi"
    );
}

#[test]
fn feature_flags_match_karpenters_families() {
    for family in [AmiFamily::AL2, AmiFamily::AL2023, AmiFamily::Custom] {
        let flags = feature_flags(family);
        assert!(flags.uses_eni_limited_memory_overhead && flags.pods_per_core_enabled);
        assert!(flags.eviction_soft_enabled && flags.supports_eni_limited_pod_density);
    }
    let br = feature_flags(AmiFamily::Bottlerocket);
    assert!(!br.uses_eni_limited_memory_overhead);
    assert!(!br.pods_per_core_enabled);
    assert!(
        !br.eviction_soft_enabled,
        "v1.5 still ignores evictionSoft in allocatable"
    );
    assert!(br.supports_eni_limited_pod_density);
    for family in [AmiFamily::Windows2019, AmiFamily::Windows2022] {
        let win = feature_flags(family);
        assert!(!win.uses_eni_limited_memory_overhead);
        assert!(win.pods_per_core_enabled && win.eviction_soft_enabled);
        assert!(!win.supports_eni_limited_pod_density);
    }
    assert_eq!(windows_build(AmiFamily::Windows2019), Some("10.0.17763"));
    assert_eq!(windows_build(AmiFamily::Windows2022), Some("10.0.20348"));
    assert_eq!(windows_build(AmiFamily::AL2), None);
}

// ---- aliases ---------------------------------------------------------------------------------

#[test]
fn aliases_parse_with_the_crd_rules() {
    assert_eq!(
        Alias::parse("al2023@latest").unwrap(),
        Alias {
            family: AmiFamily::AL2023,
            version: AliasVersion::Latest
        }
    );
    assert_eq!(
        Alias::parse("bottlerocket@v1.20.0").unwrap().version,
        AliasVersion::Pinned("v1.20.0".into())
    );
    assert!(matches!(
        Alias::parse("al2023"),
        Err(AliasError::Malformed { .. })
    ));
    assert!(matches!(
        Alias::parse("@latest"),
        Err(AliasError::Malformed { .. })
    ));
    assert!(matches!(
        Alias::parse("ubuntu@latest"),
        Err(AliasError::UnknownFamily { .. })
    ));
    assert!(matches!(
        Alias::parse("windows2022@v1"),
        Err(AliasError::WindowsVersionPinned { .. })
    ));
    assert!(matches!(
        Alias::parse("al2@../x"),
        Err(AliasError::InvalidVersion { .. })
    ));
}

fn paths(alias: &str) -> Vec<String> {
    Alias::parse(alias)
        .unwrap()
        .parameters(K8S)
        .into_iter()
        .map(|p| p.name)
        .collect()
}

#[test]
fn al2_aliases_read_the_standard_arm64_and_gpu_parameters() {
    assert_eq!(
        paths("al2@latest"),
        [
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2/recommended/image_id",
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2-arm64/recommended/image_id",
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2-gpu/recommended/image_id",
        ]
    );
    assert_eq!(
        paths("al2@v20240807"),
        [
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2/amazon-eks-node-1.33-v20240807/image_id",
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2-arm64/amazon-eks-arm64-node-1.33-v20240807/image_id",
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2-gpu/amazon-eks-gpu-node-1.33-v20240807/image_id",
        ]
    );
}

#[test]
fn al2023_aliases_read_each_architecture_and_variant() {
    assert_eq!(
        paths("al2023@latest"),
        [
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id",
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/nvidia/recommended/image_id",
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/neuron/recommended/image_id",
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/standard/recommended/image_id",
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/nvidia/recommended/image_id",
        ]
    );
    assert_eq!(
        paths("al2023@v20241213")[0],
        "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.33-v20241213/image_id"
    );
    assert_eq!(
        paths("al2023@v20241213")[4],
        "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/nvidia/amazon-eks-node-al2023-arm64-nvidia-1.33-v20241213/image_id"
    );
}

#[test]
fn bottlerocket_aliases_read_standard_and_nvidia_builds_without_the_v() {
    assert_eq!(
        paths("bottlerocket@latest"),
        [
            "/aws/service/bottlerocket/aws-k8s-1.33/x86_64/latest/image_id",
            "/aws/service/bottlerocket/aws-k8s-1.33/arm64/latest/image_id",
            "/aws/service/bottlerocket/aws-k8s-1.33-nvidia/x86_64/latest/image_id",
            "/aws/service/bottlerocket/aws-k8s-1.33-nvidia/arm64/latest/image_id",
        ]
    );
    assert_eq!(
        paths("bottlerocket@v1.20.0")[0],
        "/aws/service/bottlerocket/aws-k8s-1.33/x86_64/1.20.0/image_id"
    );
    assert_eq!(
        paths("bottlerocket@1.20.0")[3],
        "/aws/service/bottlerocket/aws-k8s-1.33-nvidia/arm64/1.20.0/image_id"
    );
}

#[test]
fn windows_aliases_read_the_core_eks_optimized_parameter() {
    assert_eq!(
        paths("windows2019@latest"),
        [
            "/aws/service/ami-windows-latest/Windows_Server-2019-English-Core-EKS_Optimized-1.33/image_id"
        ]
    );
    assert_eq!(
        paths("windows2022@latest"),
        [
            "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.33/image_id"
        ]
    );
}

#[test]
fn latest_parameters_are_mutable_and_pinned_ones_are_not() {
    let latest = Alias::parse("al2023@latest").unwrap().parameters(K8S);
    assert!(latest.iter().all(|p| p.mutable));
    let pinned = Alias::parse("al2023@v20241213").unwrap().parameters(K8S);
    assert!(pinned.iter().all(|p| !p.mutable));
    let windows = Alias::parse("windows2019@latest").unwrap().parameters(K8S);
    assert!(windows[0].mutable);
}

#[test]
fn each_parameter_carries_the_requirements_of_its_variants() {
    let al2 = Alias::parse("al2@latest").unwrap().parameters(K8S);
    assert_eq!(al2[0].requirement_sets, [Variant::Standard.requirements()]);
    assert_eq!(
        al2[2].requirement_sets,
        [
            Variant::Neuron.requirements(),
            Variant::Nvidia.requirements()
        ]
    );
    let br = Alias::parse("bottlerocket@latest").unwrap().parameters(K8S);
    assert_eq!(
        br[0].requirement_sets,
        [
            Variant::Standard.requirements(),
            Variant::Neuron.requirements()
        ]
    );
    assert_eq!(br[3].requirement_sets, [Variant::Nvidia.requirements()]);
    let windows = Alias::parse("windows2022@latest").unwrap().parameters(K8S);
    assert_eq!(
        windows[0].requirement_sets,
        [vec![
            requirement("kubernetes.io/os", "In", &["windows"]),
            requirement("node.kubernetes.io/windows-build", "In", &["10.0.20348"]),
        ]]
    );
    assert_eq!(
        Variant::Standard.requirements(),
        [
            requirement(
                "karpenter.k8s.aws/instance-accelerator-count",
                "DoesNotExist",
                &[]
            ),
            requirement("karpenter.k8s.aws/instance-gpu-count", "DoesNotExist", &[]),
        ]
    );
}

// ---- AMI selection ---------------------------------------------------------------------------

fn now() -> Timestamp {
    "2025-06-01T00:00:00Z".parse().unwrap()
}

fn image(id: &str, name: &str, arch: &str, created: &str) -> ImageCandidate {
    ImageCandidate {
        id: id.into(),
        name: name.into(),
        architecture: arch.into(),
        creation_date: Some(created.into()),
        deprecation_time: None,
    }
}

fn deprecated(mut image: ImageCandidate) -> ImageCandidate {
    image.deprecation_time = Some("2025-01-01T00:00:00.000Z".into());
    image
}

fn query(images: Vec<ImageCandidate>) -> QueryImages {
    QueryImages {
        known_requirements: BTreeMap::new(),
        images,
    }
}

fn ids(amis: &[karpenter_core::apis::ec2nodeclass::Ami]) -> Vec<&str> {
    amis.iter().map(|a| a.id.as_str()).collect()
}

#[test]
fn the_newest_image_per_architecture_wins() {
    let amis = select_amis(
        &[query(vec![
            image("ami-old", "a", "x86_64", "2024-01-01T00:00:00.000Z"),
            image("ami-new", "a", "x86_64", "2024-06-01T00:00:00.000Z"),
            image("ami-arm", "a", "arm64", "2024-03-01T00:00:00.000Z"),
            image("ami-mac", "a", "x86_64_mac", "2025-01-01T00:00:00.000Z"),
        ])],
        now(),
    );
    assert_eq!(ids(&amis), ["ami-new", "ami-arm"]);
    assert_eq!(
        amis[1].requirements,
        [requirement("kubernetes.io/arch", "In", &["arm64"])]
    );
    assert_eq!(amis[0].deprecated, None);
    assert_eq!(amis[0].name.as_deref(), Some("a"));
}

#[test]
fn a_deprecated_image_loses_to_an_older_current_one() {
    let amis = select_amis(
        &[query(vec![
            deprecated(image(
                "ami-newer",
                "a",
                "x86_64",
                "2024-06-01T00:00:00.000Z",
            )),
            image("ami-older", "a", "x86_64", "2024-01-01T00:00:00.000Z"),
        ])],
        now(),
    );
    assert_eq!(ids(&amis), ["ami-older"]);
}

#[test]
fn a_deprecated_image_is_used_when_nothing_else_serves_and_is_marked() {
    let amis = select_amis(
        &[query(vec![deprecated(image(
            "ami-only",
            "a",
            "arm64",
            "2024-06-01T00:00:00.000Z",
        ))])],
        now(),
    );
    assert_eq!(ids(&amis), ["ami-only"]);
    assert_eq!(amis[0].deprecated, Some(true));
    // A deprecation time still in the future does not count.
    let mut future = image("ami-later", "a", "arm64", "2024-06-01T00:00:00.000Z");
    future.deprecation_time = Some("2026-01-01T00:00:00Z".into());
    assert_eq!(
        select_amis(&[query(vec![future])], now())[0].deprecated,
        None
    );
}

#[test]
fn same_creation_second_is_broken_by_the_greater_name_then_the_smaller_id() {
    let created = "2024-06-01T00:00:00.000Z";
    let amis = select_amis(
        &[query(vec![
            image("ami-1", "eks-node-a", "x86_64", created),
            image("ami-2", "eks-node-b", "x86_64", "2024-06-01T00:00:00.900Z"),
        ])],
        now(),
    );
    assert_eq!(ids(&amis), ["ami-2"], "same second, greater name");
    let forward = [
        image("ami-b", "same", "x86_64", created),
        image("ami-a", "same", "x86_64", created),
    ];
    let backward = [forward[1].clone(), forward[0].clone()];
    assert_eq!(
        ids(&select_amis(&[query(forward.to_vec())], now())),
        ["ami-a"]
    );
    assert_eq!(
        ids(&select_amis(&[query(backward.to_vec())], now())),
        ["ami-a"]
    );
}

#[test]
fn status_lists_newest_first_then_by_id() {
    let amis = select_amis(
        &[
            query(vec![image("ami-c", "a", "x86_64", "2024-01-01T00:00:00Z")]),
            query(vec![
                image("ami-b", "a", "arm64", "2024-06-01T00:00:00Z"),
                ImageCandidate {
                    creation_date: None,
                    ..image("ami-undated", "a", "x86_64", "")
                },
            ]),
        ],
        now(),
    );
    // ami-c and ami-undated serve the same requirement set; the dated one wins.
    assert_eq!(ids(&amis), ["ami-b", "ami-c"]);
}

#[test]
fn alias_images_serve_each_variant_of_their_parameter() {
    let parameters = Alias::parse("al2@latest").unwrap().parameters(K8S);
    let resolved = [
        (&parameters[0], "ami-std"),
        (&parameters[1], "ami-arm"),
        (&parameters[2], "ami-gpu"),
    ];
    let known = known_requirements(resolved);
    let amis = select_amis(
        &[QueryImages {
            known_requirements: known,
            images: vec![
                image(
                    "ami-std",
                    "amazon-eks-node",
                    "x86_64",
                    "2024-06-01T00:00:00Z",
                ),
                image(
                    "ami-arm",
                    "amazon-eks-arm64-node",
                    "arm64",
                    "2024-06-01T00:00:00Z",
                ),
                image(
                    "ami-gpu",
                    "amazon-eks-gpu-node",
                    "x86_64",
                    "2024-06-01T00:00:00Z",
                ),
            ],
        }],
        now(),
    );
    assert_eq!(ids(&amis), ["ami-arm", "ami-gpu", "ami-gpu", "ami-std"]);
    let gpu: Vec<&Vec<AmiRequirement>> = amis
        .iter()
        .filter(|a| a.id == "ami-gpu")
        .map(|a| &a.requirements)
        .collect();
    assert_eq!(
        gpu,
        [
            &vec![
                requirement("kubernetes.io/arch", "In", &["amd64"]),
                requirement(
                    "karpenter.k8s.aws/instance-accelerator-count",
                    "Exists",
                    &[]
                ),
            ],
            &vec![
                requirement("kubernetes.io/arch", "In", &["amd64"]),
                requirement("karpenter.k8s.aws/instance-gpu-count", "Exists", &[]),
            ],
        ]
    );
    let std = &amis
        .iter()
        .find(|a| a.id == "ami-std")
        .unwrap()
        .requirements;
    assert_eq!(
        std,
        &vec![
            requirement("kubernetes.io/arch", "In", &["amd64"]),
            requirement("karpenter.k8s.aws/instance-gpu-count", "DoesNotExist", &[]),
            requirement(
                "karpenter.k8s.aws/instance-accelerator-count",
                "DoesNotExist",
                &[]
            ),
        ],
        "sorted by key length, then key"
    );
}

#[test]
fn selection_does_not_depend_on_input_order() {
    let images = vec![
        image("ami-1", "n1", "x86_64", "2024-01-01T00:00:00Z"),
        deprecated(image("ami-2", "n2", "x86_64", "2024-09-01T00:00:00Z")),
        image("ami-3", "n3", "arm64", "2024-02-01T00:00:00Z"),
        image("ami-4", "n4", "arm64", "2024-02-01T00:00:00Z"),
        image("ami-5", "n5", "x86_64", "2024-01-01T00:00:00Z"),
    ];
    let expected = select_amis(&[query(images.clone())], now());
    assert_eq!(ids(&expected), ["ami-4", "ami-5"]);
    let mut reversed = images;
    reversed.reverse();
    assert_eq!(select_amis(&[query(reversed)], now()), expected);
}
