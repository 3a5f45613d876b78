//! Parsing and validating `Settings` through clap, as the binary does, but without the process
//! environment: every test passes its flags and env pairs explicitly to
//! `Settings::from_args_and_env`.

use std::time::Duration;

use karpenter_config::{
    FeatureGates, HttpUrl, LogLevel, PreferencePolicy, Settings, SettingsError,
};

fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Settings, clap::Error> {
    Settings::from_args_and_env(args.iter().copied(), env.iter().copied())
}

#[expect(clippy::panic, reason = "test helper: a failed parse fails the test")]
fn parse_ok(args: &[&str], env: &[(&str, &str)]) -> Settings {
    parse(args, env).unwrap_or_else(|err| panic!("{args:?} {env:?} should parse: {err}"))
}

/// The rendered clap error for a rejected command line.
#[expect(
    clippy::panic,
    reason = "test helper: a successful parse fails the test"
)]
fn parse_err(args: &[&str]) -> String {
    match parse(args, &[]) {
        Ok(settings) => panic!("{args:?} should be rejected, parsed {settings:?}"),
        Err(err) => err.to_string(),
    }
}

fn expect_rejected(args: &[&str], expected: &[&str]) {
    let message = parse_err(args);
    for part in expected {
        assert!(
            message.contains(part),
            "error for {args:?} should contain {part:?}:\n{message}"
        );
    }
}

fn with_cluster_name() -> Settings {
    Settings {
        cluster_name: Some("test-cluster".to_owned()),
        ..Settings::default()
    }
}

#[test]
fn defaults_match_karpenter() {
    let defaults = Settings::default();
    let Settings {
        karpenter_service,
        metrics_port,
        health_probe_port,
        metrics_bind_address,
        health_probe_bind_address,
        kube_client_qps,
        kube_client_burst,
        enable_profiling,
        disable_leader_election,
        leader_election_name,
        leader_election_namespace,
        memory_limit,
        cpu_requests,
        system_namespace,
        kubernetes_min_version,
        log_level,
        log_output_paths,
        log_error_output_paths,
        batch_max_duration,
        batch_idle_duration,
        preference_policy,
        feature_gates,
        cluster_name,
        cluster_endpoint,
        cluster_ca_bundle,
        isolated_vpc,
        eks_control_plane,
        vm_memory_overhead_percent,
        interruption_queue,
        reserved_enis,
        aws_region,
        aws_endpoint_url,
        interruption_rebalance_replace,
        consolidation_repack,
    } = defaults;

    // Karpenter's "" defaults are `None` here.
    assert_eq!(karpenter_service, None);
    assert_eq!(metrics_port, 8080);
    assert_eq!(health_probe_port, 8081);
    assert_eq!(
        metrics_bind_address.to_string(),
        "0.0.0.0",
        "every interface"
    );
    assert_eq!(health_probe_bind_address.to_string(), "0.0.0.0");
    assert_eq!(kube_client_qps, 200);
    assert_eq!(kube_client_burst, 300);
    assert!(!enable_profiling);
    assert!(!disable_leader_election);
    assert_eq!(leader_election_name, "karpenter-leader-election");
    assert_eq!(leader_election_namespace, None);
    assert_eq!(memory_limit, -1);
    assert_eq!(cpu_requests, 1000);
    assert_eq!(system_namespace, None);
    assert_eq!(kubernetes_min_version, "1.19.0-0");
    assert_eq!(log_level, LogLevel::Info);
    assert_eq!(log_output_paths, "stdout");
    assert_eq!(log_error_output_paths, "stderr");
    assert_eq!(batch_max_duration, Duration::from_secs(10));
    assert_eq!(batch_idle_duration, Duration::from_secs(1));
    assert_eq!(preference_policy, PreferencePolicy::Respect);
    assert_eq!(
        feature_gates,
        FeatureGates {
            node_repair: false,
            reserved_capacity: false,
            spot_to_spot_consolidation: false,
        }
    );
    assert_eq!(cluster_name, None);
    assert_eq!(cluster_endpoint, None);
    assert_eq!(cluster_ca_bundle, None);
    assert!(!isolated_vpc);
    assert!(!eks_control_plane);
    assert!((vm_memory_overhead_percent - 0.075).abs() < f64::EPSILON);
    assert_eq!(interruption_queue, None);
    assert_eq!(reserved_enis, 0);
    assert_eq!(aws_region, None);
    assert_eq!(aws_endpoint_url, None);
    assert!(!interruption_rebalance_replace);
    assert!(consolidation_repack);
}

#[test]
fn default_equals_parsing_nothing() {
    assert_eq!(parse_ok(&[], &[]), Settings::default());
}

#[test]
fn every_setting_has_karpenters_flag_and_env_var() {
    let expected = [
        "KARPENTER_SERVICE",
        "METRICS_PORT",
        "HEALTH_PROBE_PORT",
        "METRICS_BIND_ADDRESS",
        "HEALTH_PROBE_BIND_ADDRESS",
        "KUBE_CLIENT_QPS",
        "KUBE_CLIENT_BURST",
        "ENABLE_PROFILING",
        "DISABLE_LEADER_ELECTION",
        "LEADER_ELECTION_NAME",
        "LEADER_ELECTION_NAMESPACE",
        "MEMORY_LIMIT",
        "CPU_REQUESTS",
        "SYSTEM_NAMESPACE",
        "KUBERNETES_MIN_VERSION",
        "LOG_LEVEL",
        "LOG_OUTPUT_PATHS",
        "LOG_ERROR_OUTPUT_PATHS",
        "BATCH_MAX_DURATION",
        "BATCH_IDLE_DURATION",
        "PREFERENCE_POLICY",
        "FEATURE_GATES",
        "CLUSTER_NAME",
        "CLUSTER_ENDPOINT",
        "CLUSTER_CA_BUNDLE",
        "ISOLATED_VPC",
        "EKS_CONTROL_PLANE",
        "VM_MEMORY_OVERHEAD_PERCENT",
        "INTERRUPTION_QUEUE",
        "RESERVED_ENIS",
        "AWS_REGION",
        "AWS_ENDPOINT_URL",
        "INTERRUPTION_REBALANCE_REPLACE",
        "CONSOLIDATION_REPACK",
    ];
    let command = Settings::command();
    let mut envs = Vec::new();
    for arg in command.get_arguments() {
        let long = arg.get_long().expect("every setting has a long flag");
        let env = arg
            .get_env()
            .and_then(|env| env.to_str())
            .expect("every setting has an env var");
        // Karpenter's rule: the flag is the kebab-case of the env var.
        assert_eq!(long, env.to_lowercase().replace('_', "-"));
        // The value name is the env var, so clap's errors name both.
        let value_name = arg.get_value_names().expect("value name")[0].as_str();
        assert_eq!(value_name, env);
        envs.push(env.to_owned());
    }
    assert_eq!(envs, expected);
}

#[test]
fn command_definition_passes_clap_debug_asserts() {
    Settings::command().debug_assert();
}

#[test]
fn help_shows_env_var_and_default() {
    let mut command = Settings::command();
    let short = command.render_help().to_string();
    let long = command.render_long_help().to_string();
    for part in [
        "--batch-max-duration <BATCH_MAX_DURATION>",
        "[env: BATCH_MAX_DURATION=",
        "[default: 10s]",
        "[default: NodeRepair=false,ReservedCapacity=false,SpotToSpotConsolidation=false]",
        "[default: Respect]",
        "--enable-profiling[=<ENABLE_PROFILING>]",
        "Longest provisioning batch window",
    ] {
        assert!(
            short.contains(part),
            "help should contain {part:?}:\n{short}"
        );
        assert!(
            long.contains(part),
            "long help should contain {part:?}:\n{long}"
        );
    }
    assert!(
        short.contains("[possible values: debug, info, error]"),
        "{short}"
    );
    assert!(long.contains("- debug:"), "{long}");
}

/// The binary's shape: settings flattened into subcommands.
#[derive(Debug, clap::Parser)]
struct Cli {
    #[command(subcommand)]
    command: Subcommand,
}

#[derive(Debug, clap::Subcommand)]
enum Subcommand {
    /// Run the daemon.
    Run {
        #[command(flatten)]
        settings: Settings,
    },
    Simulate {
        #[command(flatten)]
        settings: Settings,
    },
}

#[test]
fn flattening_into_subcommands_keeps_their_descriptions() {
    use clap::CommandFactory as _;
    let command = Cli::command();
    command.clone().debug_assert();
    let run = command.find_subcommand("run").expect("run");
    assert_eq!(
        run.get_about().map(ToString::to_string).as_deref(),
        Some("Run the daemon")
    );
    assert!(
        run.get_arguments()
            .any(|arg| arg.get_long() == Some("cluster-name"))
    );
    let simulate = command.find_subcommand("simulate").expect("simulate");
    assert_eq!(simulate.get_about(), None);
}

#[test]
fn flags_override_every_default() {
    let settings = parse_ok(
        &[
            "--karpenter-service=karpenter",
            "--metrics-port=9000",
            "--health-probe-port=9001",
            "--kube-client-qps=50",
            "--kube-client-burst=100",
            "--enable-profiling",
            "--metrics-bind-address=127.0.0.1",
            "--health-probe-bind-address=::1",
            "--disable-leader-election=true",
            "--leader-election-name=lease",
            "--leader-election-namespace=kube-system",
            "--memory-limit",
            "1073741824",
            "--cpu-requests=2500",
            "--system-namespace=karpenter",
            "--kubernetes-min-version=1.26.0-0",
            "--log-level=debug",
            "--log-output-paths=stdout,/var/log/k.log",
            "--log-error-output-paths=stdout",
            "--batch-max-duration=1m30s",
            "--batch-idle-duration=500ms",
            "--preference-policy=Ignore",
            "--feature-gates=SpotToSpotConsolidation=true,NodeRepair=true",
            "--cluster-name=prod",
            "--cluster-endpoint=https://ABC.gr7.us-west-2.eks.amazonaws.com",
            "--cluster-ca-bundle=LS0tLS1CRUdJTg==",
            "--isolated-vpc",
            "--eks-control-plane=true",
            "--vm-memory-overhead-percent=0.1",
            "--interruption-queue=prod-interruptions",
            "--reserved-enis=1",
            "--aws-region=eu-west-1",
            "--aws-endpoint-url=http://localhost:4566",
            "--interruption-rebalance-replace",
            "--consolidation-repack=false",
        ],
        &[],
    );
    let expected = Settings {
        karpenter_service: Some("karpenter".to_owned()),
        metrics_port: 9000,
        health_probe_port: 9001,
        metrics_bind_address: "127.0.0.1".parse().unwrap(),
        health_probe_bind_address: "::1".parse().unwrap(),
        kube_client_qps: 50,
        kube_client_burst: 100,
        enable_profiling: true,
        disable_leader_election: true,
        leader_election_name: "lease".to_owned(),
        leader_election_namespace: Some("kube-system".to_owned()),
        memory_limit: 1 << 30,
        cpu_requests: 2500,
        system_namespace: Some("karpenter".to_owned()),
        kubernetes_min_version: "1.26.0-0".to_owned(),
        log_level: LogLevel::Debug,
        log_output_paths: "stdout,/var/log/k.log".to_owned(),
        log_error_output_paths: "stdout".to_owned(),
        batch_max_duration: Duration::from_secs(90),
        batch_idle_duration: Duration::from_millis(500),
        preference_policy: PreferencePolicy::Ignore,
        feature_gates: FeatureGates {
            node_repair: true,
            reserved_capacity: false,
            spot_to_spot_consolidation: true,
        },
        cluster_name: Some("prod".to_owned()),
        cluster_endpoint: Some(
            HttpUrl::parse("https://ABC.gr7.us-west-2.eks.amazonaws.com").unwrap(),
        ),
        cluster_ca_bundle: Some("LS0tLS1CRUdJTg==".to_owned()),
        isolated_vpc: true,
        eks_control_plane: true,
        vm_memory_overhead_percent: 0.1,
        interruption_queue: Some("prod-interruptions".to_owned()),
        reserved_enis: 1,
        aws_region: Some("eu-west-1".to_owned()),
        aws_endpoint_url: Some(HttpUrl::parse("http://localhost:4566").unwrap()),
        interruption_rebalance_replace: true,
        consolidation_repack: false,
    };
    assert_eq!(settings, expected);
    assert_eq!(settings.validate_for_run(), Ok(()));
}

#[test]
fn env_vars_set_values_and_flags_override_them() {
    let env = [
        ("BATCH_MAX_DURATION", "20s"),
        ("BATCH_IDLE_DURATION", "2s"),
        ("CLUSTER_NAME", "from-env"),
        ("ISOLATED_VPC", "True"),
        ("MEMORY_LIMIT", "-1"),
        ("FEATURE_GATES", "ReservedCapacity=true"),
        ("PATH", "/usr/bin"),
    ];
    let from_env = parse_ok(&[], &env);
    assert_eq!(from_env.batch_max_duration, Duration::from_secs(20));
    assert_eq!(from_env.batch_idle_duration, Duration::from_secs(2));
    assert_eq!(from_env.cluster_name.as_deref(), Some("from-env"));
    assert!(from_env.isolated_vpc);
    assert_eq!(from_env.memory_limit_bytes(), None);
    assert!(from_env.feature_gates.reserved_capacity);

    let overridden = parse_ok(
        &[
            "--batch-max-duration=30s",
            "--cluster-name=from-flag",
            "--isolated-vpc=false",
        ],
        &env,
    );
    assert_eq!(overridden.batch_max_duration, Duration::from_secs(30));
    assert_eq!(overridden.batch_idle_duration, Duration::from_secs(2));
    assert_eq!(overridden.cluster_name.as_deref(), Some("from-flag"));
    assert!(!overridden.isolated_vpc);
}

#[test]
fn empty_values_mean_unset_for_settings_whose_default_is_empty() {
    let settings = parse_ok(
        &["--cluster-name="],
        &[
            ("CLUSTER_ENDPOINT", ""),
            ("AWS_ENDPOINT_URL", ""),
            ("INTERRUPTION_QUEUE", ""),
            ("AWS_REGION", ""),
        ],
    );
    assert_eq!(settings, Settings::default());
}

#[test]
fn boolean_settings_take_go_spellings_and_reject_others() {
    assert!(parse_ok(&["--enable-profiling"], &[]).enable_profiling);
    assert!(!parse_ok(&["--enable-profiling=false"], &[]).enable_profiling);
    assert!(parse_ok(&[], &[("ENABLE_PROFILING", "1")]).enable_profiling);
    expect_rejected(
        &["--eks-control-plane=yes"],
        &[
            "--eks-control-plane",
            "EKS_CONTROL_PLANE",
            r#"invalid boolean "yes" (expected true or false)"#,
        ],
    );
}

#[test]
fn bad_duration_is_rejected_naming_the_flag_and_rule() {
    expect_rejected(
        &["--batch-idle-duration=10"],
        &[
            r#"invalid value '10' for '--batch-idle-duration <BATCH_IDLE_DURATION>': invalid duration "10": missing unit (expected ns, us, ms, s, m or h)"#,
        ],
    );
    expect_rejected(
        &["--batch-max-duration=abc"],
        &[
            "'--batch-max-duration <BATCH_MAX_DURATION>'",
            r#"invalid duration "abc""#,
        ],
    );
    expect_rejected(
        &["--batch-max-duration=10d"],
        &[r#"unknown unit "d" (expected ns, us, ms, s, m or h)"#],
    );
    expect_rejected(&["--batch-max-duration=-1s"], &["a sign is not allowed"]);
}

#[test]
fn unknown_feature_gate_is_rejected_naming_the_gate_and_item() {
    expect_rejected(
        &["--feature-gates=NodeRepair=true,Drift=true"],
        &[
            "'--feature-gates <FEATURE_GATES>'",
            r#"unknown feature gate "Drift" in item "Drift=true""#,
            "known gates: NodeRepair, ReservedCapacity, SpotToSpotConsolidation",
        ],
    );
    expect_rejected(
        &["--feature-gates=NodeRepair"],
        &[r#"missing "=" in feature gate item "NodeRepair""#],
    );
}

#[test]
fn feature_gate_with_a_bad_bool_is_rejected_naming_the_gate_and_item() {
    expect_rejected(
        &["--feature-gates=NodeRepair=maybe"],
        &[
            "'--feature-gates <FEATURE_GATES>'",
            r#"invalid value "maybe" for feature gate NodeRepair in item "NodeRepair=maybe" (expected true or false)"#,
        ],
    );
}

#[test]
fn negative_vm_memory_overhead_is_rejected() {
    expect_rejected(
        &["--vm-memory-overhead-percent=-0.1"],
        &[
            "'--vm-memory-overhead-percent <VM_MEMORY_OVERHEAD_PERCENT>'",
            "expected a finite number of at least 0",
        ],
    );
    expect_rejected(
        &["--vm-memory-overhead-percent=NaN"],
        &["expected a finite number of at least 0"],
    );
}

#[test]
fn bad_urls_are_rejected() {
    expect_rejected(
        &["--cluster-endpoint=ABC.eks.amazonaws.com"],
        &[
            "'--cluster-endpoint <CLUSTER_ENDPOINT>'",
            "must start with http:// or https://",
        ],
    );
    expect_rejected(
        &["--aws-endpoint-url=http://"],
        &["'--aws-endpoint-url <AWS_ENDPOINT_URL>'", "invalid URL"],
    );
}

#[test]
fn bad_log_level_is_rejected_listing_karpenters_levels() {
    expect_rejected(
        &["--log-level=warn"],
        &[
            "'--log-level <LOG_LEVEL>'",
            "[possible values: debug, info, error]",
        ],
    );
    // Case-sensitive, like Karpenter.
    expect_rejected(&["--log-level=INFO"], &["'--log-level <LOG_LEVEL>'"]);
}

#[test]
fn an_empty_log_level_is_karpenters_default() {
    let settings = parse(&[], &[("LOG_LEVEL", "")]).unwrap();
    assert_eq!(settings.log_level, LogLevel::Info);
    let settings = parse(&[], &[("LOG_LEVEL", "debug")]).unwrap();
    assert_eq!(settings.log_level, LogLevel::Debug);
}

#[test]
fn bad_preference_policy_is_rejected_listing_the_policies() {
    expect_rejected(
        &["--preference-policy=respect"],
        &[
            "'--preference-policy <PREFERENCE_POLICY>'",
            "[possible values: Respect, Ignore]",
        ],
    );
}

#[test]
fn zero_cpu_requests_is_rejected() {
    expect_rejected(
        &["--cpu-requests=0"],
        &[
            "'--cpu-requests <CPU_REQUESTS>'",
            "expected a whole number greater than 0",
        ],
    );
}

#[test]
fn out_of_range_numbers_are_rejected() {
    expect_rejected(
        &["--kube-client-qps=0"],
        &["'--kube-client-qps <KUBE_CLIENT_QPS>'"],
    );
    expect_rejected(
        &["--metrics-port=70000"],
        &["'--metrics-port <METRICS_PORT>'"],
    );
    expect_rejected(
        &["--reserved-enis=-1"],
        &["'--reserved-enis <RESERVED_ENIS>'"],
    );
    expect_rejected(
        &["--memory-limit=-2"],
        &["'--memory-limit <MEMORY_LIMIT>'", "or -1 for no limit"],
    );
}

#[test]
fn validate_for_run_fails_without_a_cluster_name() {
    let err = Settings::default().validate_for_run().unwrap_err();
    assert_eq!(err, SettingsError::MissingClusterName);
    assert!(err.to_string().contains("CLUSTER_NAME"));
    assert!(err.to_string().contains("--cluster-name"));
    assert_eq!(err.category(), "missing_setting");
    // Settings without a cluster name are still valid for `simulate`.
    assert_eq!(Settings::default().validate(), Ok(()));
}

#[test]
fn validate_for_run_passes_with_a_cluster_name() {
    assert_eq!(with_cluster_name().validate_for_run(), Ok(()));
    let parsed = parse_ok(&[], &[("CLUSTER_NAME", "prod")]);
    assert_eq!(parsed.validate_for_run(), Ok(()));
}

#[test]
fn batch_idle_duration_must_not_exceed_batch_max_duration() {
    let settings = parse_ok(
        &["--batch-idle-duration=20s", "--batch-max-duration=10s"],
        &[("CLUSTER_NAME", "prod")],
    );
    let err = settings.validate_for_run().unwrap_err();
    assert_eq!(
        err,
        SettingsError::BatchIdleExceedsMax {
            idle: Duration::from_secs(20),
            max: Duration::from_secs(10),
        }
    );
    assert_eq!(
        err.to_string(),
        "batch idle duration 20s exceeds batch max duration 10s: BATCH_IDLE_DURATION \
         (--batch-idle-duration) must not exceed BATCH_MAX_DURATION (--batch-max-duration)"
    );
    assert_eq!(err.category(), "conflicting_settings");

    let equal = Settings {
        batch_idle_duration: Duration::from_secs(10),
        ..with_cluster_name()
    };
    assert_eq!(equal.validate_for_run(), Ok(()));
}

#[test]
fn metrics_and_health_probe_ports_must_differ_unless_ephemeral() {
    let same = parse_ok(&["--metrics-port=8080", "--health-probe-port=8080"], &[]);
    assert_eq!(
        same.validate(),
        Err(SettingsError::PortsCollide { port: 8080 })
    );
    let ephemeral = parse_ok(&["--metrics-port=0", "--health-probe-port=0"], &[]);
    assert_eq!(ephemeral.validate(), Ok(()));
}

#[test]
fn rebalance_replacement_needs_an_interruption_queue() {
    let without_queue = parse_ok(&["--interruption-rebalance-replace"], &[]);
    assert_eq!(
        without_queue.validate(),
        Err(SettingsError::RebalanceReplaceWithoutQueue)
    );
    let with_queue = parse_ok(
        &["--interruption-rebalance-replace", "--interruption-queue=q"],
        &[],
    );
    assert_eq!(with_queue.validate(), Ok(()));
}

#[test]
fn settings_built_in_code_are_range_checked() {
    let cases = [
        Settings {
            cpu_requests: 0,
            ..with_cluster_name()
        },
        Settings {
            kube_client_qps: 0,
            ..with_cluster_name()
        },
        Settings {
            kube_client_burst: 0,
            ..with_cluster_name()
        },
        Settings {
            memory_limit: -2,
            ..with_cluster_name()
        },
        Settings {
            vm_memory_overhead_percent: f64::INFINITY,
            ..with_cluster_name()
        },
        Settings {
            vm_memory_overhead_percent: -0.5,
            ..with_cluster_name()
        },
    ];
    for settings in cases {
        let err = settings.validate_for_run().unwrap_err();
        assert!(
            matches!(err, SettingsError::OutOfRange { .. }),
            "{settings:?}: {err}"
        );
        assert_eq!(err.category(), "invalid_setting");
    }
}

#[test]
fn memory_limit_bytes_is_none_without_a_limit() {
    assert_eq!(Settings::default().memory_limit_bytes(), None);
    let limited = parse_ok(&[], &[("MEMORY_LIMIT", "1073741824")]);
    assert_eq!(limited.memory_limit_bytes(), Some(1 << 30));
}
