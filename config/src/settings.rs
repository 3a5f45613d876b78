//! The daemon's settings: one field per Karpenter v1.5 setting (core and AWS
//! `pkg/operator/options/options.go`), each with Karpenter's `--flag`, env var and default, plus a
//! few of our own (`--aws-region`, `--aws-endpoint-url`, `--interruption-rebalance-replace`,
//! `--metrics-bind-address`, `--health-probe-bind-address`).
//!
//! The binary flattens [`Settings`] into its `run` and `simulate` subcommands; clap reads the flag,
//! else the env var, else the default, and runs the typed value parsers, so a bad value is reported
//! as `invalid value '<v>' for '--flag <ENV_NAME>': <rule>` (the value name is the env var name).
//! Cross-field rules are in `validation.rs`.
//!
//! Where Karpenter's default is the empty string (meaning unset), the field is an `Option` and an
//! empty value, from a flag or an env var, is `None`. Those fields are written
//! `std::option::Option<T>` so that clap's derive does not treat them as optional arguments: the
//! value parser maps `""` (the hidden default) to `None` itself. Numbers, durations and choices
//! reject an empty value (Karpenter silently used the default for an empty or malformed env value).

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use clap::{ArgAction, Args, Command, FromArgMatches as _};

use crate::choices::{LogLevel, LogLevelParser, PreferencePolicy};
use crate::duration::parse_go_duration;
use crate::feature_gates::{FeatureGates, parse_feature_gates};
use crate::url::{HttpUrl, parse_optional_http_url};
use crate::values::{
    parse_go_bool, parse_memory_limit, parse_non_negative_fraction, parse_optional_text,
    parse_positive_u32,
};

// Karpenter v1.5 defaults (reference section 7). The clap attributes below repeat the durations as
// strings; `defaults_match_karpenter` and `default_equals_parsing_nothing` keep the two in step.
const DEFAULT_METRICS_PORT: u16 = 8080;
const DEFAULT_HEALTH_PROBE_PORT: u16 = 8081;
/// Every IPv4 interface: the kubelet probes and Prometheus scrapes the pod's IP.
const DEFAULT_BIND_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
const DEFAULT_KUBE_CLIENT_QPS: u32 = 200;
const DEFAULT_KUBE_CLIENT_BURST: u32 = 300;
const DEFAULT_LEADER_ELECTION_NAME: &str = "karpenter-leader-election";
/// Bytes; -1 means no limit (the chart passes the container's memory limit).
const DEFAULT_MEMORY_LIMIT: i64 = -1;
/// Millicores: one CPU (the chart passes the container's CPU request).
const DEFAULT_CPU_REQUESTS: u32 = 1000;
/// The value Karpenter's chart sets; Karpenter itself does not read it.
const DEFAULT_KUBERNETES_MIN_VERSION: &str = "1.19.0-0";
const DEFAULT_LOG_OUTPUT_PATHS: &str = "stdout";
const DEFAULT_LOG_ERROR_OUTPUT_PATHS: &str = "stderr";
const DEFAULT_BATCH_MAX_DURATION: Duration = Duration::from_secs(10);
const DEFAULT_BATCH_IDLE_DURATION: Duration = Duration::from_secs(1);
/// 7.5 % of an instance type's memory is assumed taken by the hypervisor until measured.
const DEFAULT_VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;
const DEFAULT_RESERVED_ENIS: u32 = 0;

/// Name shown in usage lines of [`Settings::command`] and [`Settings::from_args_and_env`].
const COMMAND_NAME: &str = "karpenter";

const CONTROLLER: &str = "Controller";
const LOGGING: &str = "Logging";
const PROVISIONING: &str = "Provisioning";
const AWS: &str = "AWS";

/// Every setting of the daemon, typed, with Karpenter's flags, env vars and defaults.
///
/// Build it once in the binary (clap, via `#[command(flatten)]`), check it with
/// [`Settings::validate_for_run`] or [`Settings::validate`], and pass it (or the parts a component
/// needs) explicitly. [`Settings::default`] gives Karpenter's defaults without reading the
/// environment; [`Settings::from_args_and_env`] parses from explicit arguments and env pairs.
#[derive(Debug, Clone, PartialEq, Args)]
// Clap turns a struct's doc comment into the command's `about`, which would replace the `run` or
// `simulate` description of a subcommand without a doc comment of its own.
#[command(about = None, long_about = None)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "one field per boolean setting of Karpenter's, kept flat like its flags"
)]
pub struct Settings {
    /// Name of the Kubernetes Service in front of Karpenter (the chart sets it). Unset by default.
    #[arg(
        long = "karpenter-service",
        env = "KARPENTER_SERVICE",
        value_parser = parse_optional_text,
        default_value = "",
        hide_default_value = true,
        help_heading = CONTROLLER
    )]
    pub karpenter_service: std::option::Option<String>,

    /// Port of the Prometheus metrics endpoint (and the profiling handlers).
    #[arg(
        long = "metrics-port",
        env = "METRICS_PORT",
        default_value_t = DEFAULT_METRICS_PORT,
        help_heading = CONTROLLER
    )]
    pub metrics_port: u16,

    /// Port of the health probe endpoints (`/healthz`, `/readyz`).
    #[arg(
        long = "health-probe-port",
        env = "HEALTH_PROBE_PORT",
        default_value_t = DEFAULT_HEALTH_PROBE_PORT,
        help_heading = CONTROLLER
    )]
    pub health_probe_port: u16,

    /// Address the metrics endpoint listens on (ours; Karpenter binds every interface). The
    /// default, every IPv4 interface, is what a pod needs; tests and `simulate --serve` use
    /// loopback.
    #[arg(
        long = "metrics-bind-address",
        env = "METRICS_BIND_ADDRESS",
        default_value_t = DEFAULT_BIND_ADDRESS,
        help_heading = CONTROLLER
    )]
    pub metrics_bind_address: IpAddr,

    /// Address the health probe endpoints listen on (ours, as `--metrics-bind-address`).
    #[arg(
        long = "health-probe-bind-address",
        env = "HEALTH_PROBE_BIND_ADDRESS",
        default_value_t = DEFAULT_BIND_ADDRESS,
        help_heading = CONTROLLER
    )]
    pub health_probe_bind_address: IpAddr,

    /// Smoothed rate of queries per second to the kube-apiserver (greater than 0).
    #[arg(
        long = "kube-client-qps",
        env = "KUBE_CLIENT_QPS",
        value_parser = parse_positive_u32,
        default_value_t = DEFAULT_KUBE_CLIENT_QPS,
        help_heading = CONTROLLER
    )]
    pub kube_client_qps: u32,

    /// Maximum burst of queries to the kube-apiserver (greater than 0).
    #[arg(
        long = "kube-client-burst",
        env = "KUBE_CLIENT_BURST",
        value_parser = parse_positive_u32,
        default_value_t = DEFAULT_KUBE_CLIENT_BURST,
        help_heading = CONTROLLER
    )]
    pub kube_client_burst: u32,

    /// Serve profiling handlers on the metrics port (true or false; the bare flag means true).
    #[arg(
        long = "enable-profiling",
        env = "ENABLE_PROFILING",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value_t = false,
        default_missing_value = "true",
        value_parser = parse_go_bool,
        help_heading = CONTROLLER
    )]
    pub enable_profiling: bool,

    /// Run without leader election, e.g. a single replica (true or false; the bare flag means true).
    #[arg(
        long = "disable-leader-election",
        env = "DISABLE_LEADER_ELECTION",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value_t = false,
        default_missing_value = "true",
        value_parser = parse_go_bool,
        help_heading = CONTROLLER
    )]
    pub disable_leader_election: bool,

    /// Name of the leader election Lease.
    #[arg(
        long = "leader-election-name",
        env = "LEADER_ELECTION_NAME",
        default_value = DEFAULT_LEADER_ELECTION_NAME,
        help_heading = CONTROLLER
    )]
    pub leader_election_name: String,

    /// Namespace of the leader election Lease. Unset by default: the namespace the daemon runs in.
    #[arg(
        long = "leader-election-namespace",
        env = "LEADER_ELECTION_NAMESPACE",
        value_parser = parse_optional_text,
        default_value = "",
        hide_default_value = true,
        help_heading = CONTROLLER
    )]
    pub leader_election_namespace: std::option::Option<String>,

    /// Memory limit of the daemon's container in bytes, or -1 for none. The chart passes the
    /// container's limit; memory use is kept below 90 % of it.
    #[arg(
        long = "memory-limit",
        env = "MEMORY_LIMIT",
        value_parser = parse_memory_limit,
        default_value_t = DEFAULT_MEMORY_LIMIT,
        allow_negative_numbers = true,
        help_heading = CONTROLLER
    )]
    pub memory_limit: i64,

    /// CPU request of the daemon's container in millicores (greater than 0); sizes the scheduler's
    /// worker pool (one worker per started CPU).
    #[arg(
        long = "cpu-requests",
        env = "CPU_REQUESTS",
        value_parser = parse_positive_u32,
        default_value_t = DEFAULT_CPU_REQUESTS,
        help_heading = CONTROLLER
    )]
    pub cpu_requests: u32,

    /// Namespace the daemon runs in (the chart sets the pod's namespace). Unset by default.
    #[arg(
        long = "system-namespace",
        env = "SYSTEM_NAMESPACE",
        value_parser = parse_optional_text,
        default_value = "",
        hide_default_value = true,
        help_heading = CONTROLLER
    )]
    pub system_namespace: std::option::Option<String>,

    /// Oldest Kubernetes version supported (the chart's value is the default).
    #[arg(
        long = "kubernetes-min-version",
        env = "KUBERNETES_MIN_VERSION",
        default_value = DEFAULT_KUBERNETES_MIN_VERSION,
        help_heading = CONTROLLER
    )]
    pub kubernetes_min_version: String,

    /// Log verbosity.
    #[arg(
        long = "log-level",
        env = "LOG_LEVEL",
        value_parser = LogLevelParser,
        default_value_t = LogLevel::Info,
        help_heading = LOGGING
    )]
    pub log_level: LogLevel,

    /// Comma-separated paths to write logs to (`stdout`, `stderr` or files).
    #[arg(
        long = "log-output-paths",
        env = "LOG_OUTPUT_PATHS",
        default_value = DEFAULT_LOG_OUTPUT_PATHS,
        help_heading = LOGGING
    )]
    pub log_output_paths: String,

    /// Comma-separated paths to write error logs to (`stdout`, `stderr` or files).
    #[arg(
        long = "log-error-output-paths",
        env = "LOG_ERROR_OUTPUT_PATHS",
        default_value = DEFAULT_LOG_ERROR_OUTPUT_PATHS,
        help_heading = LOGGING
    )]
    pub log_error_output_paths: String,

    /// Longest provisioning batch window (Go duration, e.g. 10s, 1m30s). Longer windows consider
    /// more pods at once, which usually gives fewer, larger nodes.
    #[arg(
        long = "batch-max-duration",
        env = "BATCH_MAX_DURATION",
        value_parser = parse_go_duration,
        default_value = "10s",
        help_heading = PROVISIONING
    )]
    pub batch_max_duration: Duration,

    /// Time without a new pending pod that closes the batch window (Go duration, e.g. 1s, 500ms);
    /// must not exceed --batch-max-duration.
    #[arg(
        long = "batch-idle-duration",
        env = "BATCH_IDLE_DURATION",
        value_parser = parse_go_duration,
        default_value = "1s",
        help_heading = PROVISIONING
    )]
    pub batch_idle_duration: Duration,

    /// How the scheduler treats preferred affinities and `ScheduleAnyway` topology spread
    /// constraints: Respect (relax them one by one when a pod does not fit) or Ignore.
    #[arg(
        long = "preference-policy",
        env = "PREFERENCE_POLICY",
        value_enum,
        default_value_t = PreferencePolicy::Respect,
        help_heading = PROVISIONING
    )]
    pub preference_policy: PreferencePolicy,

    /// Alpha features, as `Gate=true|false` items separated by commas, any subset in any order.
    /// Gates: `NodeRepair`, `ReservedCapacity`, `SpotToSpotConsolidation`.
    #[arg(
        long = "feature-gates",
        env = "FEATURE_GATES",
        value_parser = parse_feature_gates,
        default_value_t = FeatureGates::default(),
        help_heading = PROVISIONING
    )]
    pub feature_gates: FeatureGates,

    /// Name of the EKS cluster, for resource discovery and tagging. Required by `run`.
    #[arg(
        long = "cluster-name",
        env = "CLUSTER_NAME",
        value_parser = parse_optional_text,
        default_value = "",
        hide_default_value = true,
        help_heading = AWS
    )]
    pub cluster_name: std::option::Option<String>,

    /// API server URL (http or https) that new nodes join. Unset by default: discovered with
    /// `eks:DescribeCluster`.
    #[arg(
        long = "cluster-endpoint",
        env = "CLUSTER_ENDPOINT",
        value_parser = parse_optional_http_url,
        default_value = "",
        hide_default_value = true,
        help_heading = AWS
    )]
    pub cluster_endpoint: std::option::Option<HttpUrl>,

    /// Base64 CA bundle nodes use to trust the API server. Unset by default: taken from the
    /// daemon's own Kubernetes client configuration.
    #[arg(
        long = "cluster-ca-bundle",
        env = "CLUSTER_CA_BUNDLE",
        value_parser = parse_optional_text,
        default_value = "",
        hide_default_value = true,
        hide_env_values = true,
        help_heading = AWS
    )]
    pub cluster_ca_bundle: std::option::Option<String>,

    /// The cluster has no route to AWS services without VPC endpoints: skip the pricing API and use
    /// built-in on-demand prices (true or false; the bare flag means true).
    #[arg(
        long = "isolated-vpc",
        env = "ISOLATED_VPC",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value_t = false,
        default_missing_value = "true",
        value_parser = parse_go_bool,
        help_heading = AWS
    )]
    pub isolated_vpc: bool,

    /// The control plane is EKS: discover cluster details (e.g. the version) with
    /// `eks:DescribeCluster` (true or false; the bare flag means true).
    #[arg(
        long = "eks-control-plane",
        env = "EKS_CONTROL_PLANE",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value_t = false,
        default_missing_value = "true",
        value_parser = parse_go_bool,
        help_heading = AWS
    )]
    pub eks_control_plane: bool,

    /// Fraction of an instance type's memory assumed taken by the hypervisor until measured
    /// (0.075 = 7.5 %; finite, at least 0).
    #[arg(
        long = "vm-memory-overhead-percent",
        env = "VM_MEMORY_OVERHEAD_PERCENT",
        value_parser = parse_non_negative_fraction,
        default_value_t = DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
        help_heading = AWS
    )]
    pub vm_memory_overhead_percent: f64,

    /// Name of the SQS queue with EC2 interruption events. Unset by default: interruption handling
    /// is off.
    #[arg(
        long = "interruption-queue",
        env = "INTERRUPTION_QUEUE",
        value_parser = parse_optional_text,
        default_value = "",
        hide_default_value = true,
        help_heading = AWS
    )]
    pub interruption_queue: std::option::Option<String>,

    /// Network interfaces per node left out of the max-pods and kube-reserved calculations (VPC CNI
    /// custom networking).
    #[arg(
        long = "reserved-enis",
        env = "RESERVED_ENIS",
        default_value_t = DEFAULT_RESERVED_ENIS,
        help_heading = AWS
    )]
    pub reserved_enis: u32,

    /// AWS region. Unset by default: the AWS SDK's own resolution (profile, instance metadata).
    #[arg(
        long = "aws-region",
        env = "AWS_REGION",
        value_parser = parse_optional_text,
        default_value = "",
        hide_default_value = true,
        help_heading = AWS
    )]
    pub aws_region: std::option::Option<String>,

    /// Endpoint URL (http or https) for every AWS service call, e.g. an emulator at
    /// `http://localhost:4566`. Unset by default: the real AWS endpoints.
    #[arg(
        long = "aws-endpoint-url",
        env = "AWS_ENDPOINT_URL",
        value_parser = parse_optional_http_url,
        default_value = "",
        hide_default_value = true,
        help_heading = AWS
    )]
    pub aws_endpoint_url: std::option::Option<HttpUrl>,

    /// Replace a node proactively when EC2 sends a rebalance recommendation for it; needs
    /// --interruption-queue (true or false; the bare flag means true). Not in Karpenter.
    #[arg(
        long = "interruption-rebalance-replace",
        env = "INTERRUPTION_REBALANCE_REPLACE",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value_t = false,
        default_missing_value = "true",
        value_parser = parse_go_bool,
        help_heading = AWS
    )]
    pub interruption_rebalance_replace: bool,

    /// Consolidate by repacking: replace nodes by two or more cheaper ones when no single node
    /// can take their pods (true or false; the bare flag means true). Every such command
    /// strictly lowers the cluster's price, so rounds cannot oscillate. Not in Karpenter, which
    /// only replaces nodes by one.
    #[arg(
        long = "consolidation-repack",
        env = "CONSOLIDATION_REPACK",
        action = ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_value_t = true,
        default_missing_value = "true",
        value_parser = parse_go_bool
    )]
    pub consolidation_repack: bool,
}

/// Karpenter v1.5's defaults, without reading the environment.
impl Default for Settings {
    fn default() -> Self {
        Self {
            karpenter_service: None,
            metrics_port: DEFAULT_METRICS_PORT,
            health_probe_port: DEFAULT_HEALTH_PROBE_PORT,
            metrics_bind_address: DEFAULT_BIND_ADDRESS,
            health_probe_bind_address: DEFAULT_BIND_ADDRESS,
            kube_client_qps: DEFAULT_KUBE_CLIENT_QPS,
            kube_client_burst: DEFAULT_KUBE_CLIENT_BURST,
            enable_profiling: false,
            disable_leader_election: false,
            leader_election_name: DEFAULT_LEADER_ELECTION_NAME.to_owned(),
            leader_election_namespace: None,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            cpu_requests: DEFAULT_CPU_REQUESTS,
            system_namespace: None,
            kubernetes_min_version: DEFAULT_KUBERNETES_MIN_VERSION.to_owned(),
            log_level: LogLevel::Info,
            log_output_paths: DEFAULT_LOG_OUTPUT_PATHS.to_owned(),
            log_error_output_paths: DEFAULT_LOG_ERROR_OUTPUT_PATHS.to_owned(),
            batch_max_duration: DEFAULT_BATCH_MAX_DURATION,
            batch_idle_duration: DEFAULT_BATCH_IDLE_DURATION,
            preference_policy: PreferencePolicy::Respect,
            feature_gates: FeatureGates::default(),
            cluster_name: None,
            cluster_endpoint: None,
            cluster_ca_bundle: None,
            isolated_vpc: false,
            eks_control_plane: false,
            vm_memory_overhead_percent: DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
            interruption_queue: None,
            reserved_enis: DEFAULT_RESERVED_ENIS,
            aws_region: None,
            aws_endpoint_url: None,
            interruption_rebalance_replace: false,
            consolidation_repack: true,
        }
    }
}

impl Settings {
    /// A standalone clap command with only these settings, named `karpenter`: for `--help` text,
    /// docs and tests. Env var fallbacks read the process environment, as in the binary.
    #[must_use]
    pub fn command() -> Command {
        Self::augment_args(Command::new(COMMAND_NAME))
    }

    /// Parses settings from explicit arguments (flags, without a program name) and an explicit
    /// environment, ignoring the process environment. For tests and the simulator, which must not
    /// depend on ambient env vars (and must not call `std::env::set_var`, which is unsafe in
    /// edition 2024 and races with other threads).
    ///
    /// How: clap captures env vars when the command is built and offers no way to inject them, so
    /// this builds the command, removes every env fallback, and turns each `(NAME, value)` pair
    /// whose name is a setting's env var into `--flag=value` placed before `args`. Later
    /// occurrences win, so `args` override `env` and the defaults apply last, the same precedence
    /// as in the binary. Pairs with other names are ignored, as a real environment's would be.
    /// Errors are clap's, naming the flag (and, as the value name, the env var).
    pub fn from_args_and_env<A, S, E, K, V>(args: A, env: E) -> Result<Self, clap::Error>
    where
        A: IntoIterator<Item = S>,
        S: Into<OsString>,
        E: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let command = Self::command();
        let flags_by_env: Vec<(String, String)> = command
            .get_arguments()
            .filter_map(|arg| {
                let env = arg.get_env()?.to_str()?;
                Some((env.to_owned(), arg.get_long()?.to_owned()))
            })
            .collect();
        let command = command
            .mut_args(|arg| arg.env(None))
            .args_override_self(true);

        let env_flags: Vec<OsString> = env
            .into_iter()
            .filter_map(|(name, value)| {
                flags_by_env
                    .iter()
                    .find(|(env, _)| env == name.as_ref())
                    .map(|(_, long)| OsString::from(format!("--{long}={}", value.as_ref())))
            })
            .collect();
        let command_line = std::iter::once(OsString::from(COMMAND_NAME))
            .chain(env_flags)
            .chain(args.into_iter().map(Into::into));
        let matches = command.try_get_matches_from(command_line)?;
        Self::from_arg_matches(&matches)
    }

    /// The memory limit in bytes, or `None` when `MEMORY_LIMIT` is -1 (or 0).
    #[must_use]
    pub fn memory_limit_bytes(&self) -> Option<u64> {
        u64::try_from(self.memory_limit)
            .ok()
            .filter(|&bytes| bytes > 0)
    }
}
