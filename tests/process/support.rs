//! The world of a process-level test: moto through `scripts/moto_launcher.py` (seeded as an EKS
//! account Karpenter is installed in), the cluster-only server (`karpenter simulate --serve
//! 127.0.0.1:0 --cluster-only`) and `karpenter run` daemons, each a child process whose output
//! goes to a file the test shows when it fails.
//!
//! Every wait polls with a deadline ([`until`]); every child is killed when its handle drops.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use aws_sdk_eks::types::{KubernetesNetworkConfigRequest, VpcConfigRequest};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter::commands::Status;
use karpenter::commands::interruption::{SetupArgs, setup_with};
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool};
use kube::api::{ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::moto::Moto;

pub const CLUSTER: &str = "process-cluster";
pub const REGION: &str = "us-west-2";
/// The service CIDR the EKS cluster is created with in moto: EKS's default, which holds the
/// cluster-only server's kube-dns address, and not moto's default (`172.20.0.0/16`), so finding
/// it in the user data proves it was discovered.
pub const SERVICE_CIDR: &str = "10.100.0.0/16";
/// Where the daemon's Lease lives (`karpenter run`'s default).
pub const LEASE_NAMESPACE: &str = "kube-system";
pub const LEASE_NAME: &str = "karpenter-leader-election";
/// The instance type every test NodePool allows: 2 vCPUs, so a pod asking for
/// [`ONE_PER_NODE_CPU`] needs a node of its own.
pub const INSTANCE_TYPE: &str = "m5.large";
pub const ONE_PER_NODE_CPU: &str = "1200m";

/// Kubernetes' default termination grace: a SIGTERM'd daemon must be gone within it.
pub const TERMINATION_GRACE: Duration = Duration::from_secs(30);
/// Start-up of a daemon against moto: the catalogue (about 1,400 instance types) loads first.
pub const STARTUP: Duration = Duration::from_mins(1);
/// Pending pods to bound pods: batching (1 s idle), launch, registration, Ready, binding.
pub const SCALE_UP: Duration = Duration::from_secs(90);

const POLL: Duration = Duration::from_millis(200);

/// Polls `check` until it gives a value or `within` passes; then fails naming `what`, with
/// `context()` (the processes' output).
pub async fn until<T, F, Fut>(
    what: &str,
    within: Duration,
    context: impl Fn() -> String,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}\n{}",
            context()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Where [`free_ports`] looks: below Linux's ephemeral range (32768-60999 by default), from which
/// the kernel takes the local port of every outgoing connection of the tests running beside this
/// one. A port picked from that range and released could become such a local port before the
/// daemon binds it (`Address already in use`: seen in a full test run).
const PORTS: std::ops::Range<u32> = 20_000..32_000;

/// `N` distinct ports free on every interface (all bound at once, read, released), below the
/// ephemeral range ([`PORTS`]); each process starts its search at its own place in the range.
pub fn free_ports<const N: usize>() -> [u16; N] {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let span = PORTS.end - PORTS.start;
    let start = std::process::id().wrapping_mul(7_919) % span;
    let mut listeners = Vec::with_capacity(N);
    while listeners.len() < N {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(offset < span, "no free port in {PORTS:?}");
        let port = u16::try_from(PORTS.start + (start + offset) % span).unwrap();
        if let Ok(listener) = std::net::TcpListener::bind(("0.0.0.0", port)) {
            listeners.push(listener);
        }
    }
    std::array::from_fn(|i| listeners[i].local_addr().unwrap().port())
}

/// This test's scratch directory, removed when the test passes.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "karpenter-process-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // KARPENTER_KEEP_PROCESS_LOGS=1 keeps them after a pass too (to read the daemon's logs).
        if std::thread::panicking() || std::env::var_os("KARPENTER_KEEP_PROCESS_LOGS").is_some() {
            eprintln!("process test files kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A child process; killed (SIGKILL, by its handle) when dropped. Its stdout and stderr go to
/// files in the scratch directory.
#[derive(Debug)]
pub struct Proc {
    pub name: String,
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
    exited: Option<ExitStatus>,
}

impl Proc {
    pub fn spawn(name: &str, mut command: Command, scratch: &Scratch) -> Self {
        let stdout = scratch.path(&format!("{name}.stdout"));
        let stderr = scratch.path(&format!("{name}.stderr"));
        let child = command
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Self {
            name: name.to_owned(),
            child,
            stdout,
            stderr,
            exited: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it printed on stdout.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// Everything it printed on stderr.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The last lines of its output, for failure messages.
    pub fn tail(&self) -> String {
        let mut text = format!("--- {} (pid {}) ---\n", self.name, self.pid());
        for (stream, content) in [("stdout", self.stdout()), ("stderr", self.stderr())] {
            let lines: Vec<&str> = content.lines().collect();
            let from = lines.len().saturating_sub(40);
            let _ = writeln!(text, "[{stream}, last {} lines]", lines.len() - from);
            for line in &lines[from..] {
                let _ = writeln!(text, "{line}");
            }
        }
        text
    }

    /// Sends SIGTERM (through kill(1): the tests have no libc binding).
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM {}", self.pid());
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        self.exited = self.child.wait().ok();
    }

    /// Its exit status once it has exited.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// Waits up to `within` for it to exit.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.exit_status() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited.is_none() {
            self.kill();
        }
        if std::thread::panicking() {
            eprintln!("{}", self.tail());
        }
    }
}

fn karpenter() -> Command {
    Command::new(env!("CARGO_BIN_EXE_karpenter"))
}

/// A `karpenter run` process with its own metrics and probe ports.
#[derive(Debug)]
pub struct Daemon {
    pub proc: Proc,
    pub metrics: String,
    pub health: String,
}

impl Daemon {
    /// The name this process holds the Lease under (`karpenter run`: host name and pid).
    pub fn identity(&self) -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default();
        let host = if host.is_empty() {
            "karpenter".to_owned()
        } else {
            host
        };
        format!("{host}_{}", self.proc.pid())
    }

    /// GET on one of its servers; `None` while it does not answer.
    pub async fn get(base: &str, path: &str) -> Option<(u16, String)> {
        let url = format!("{base}{path}");
        let (status, body) = karpenter::http::get(&url, Duration::from_secs(5))
            .await
            .ok()?;
        Some((status.as_u16(), String::from_utf8_lossy(&body).into_owned()))
    }

    pub async fn metrics_text(&self) -> Option<String> {
        match Self::get(&self.metrics, "/metrics").await {
            Some((200, body)) => Some(body),
            _ => None,
        }
    }

    /// `/metrics` as Prometheus asks for it (`Accept-Encoding: gzip`), over a plain TCP
    /// connection: the `Content-Encoding` the daemon answered with, and the text, gunzipped
    /// when it says gzip.
    pub async fn metrics_gzip(&self) -> Option<(Option<String>, String)> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let addr = self.metrics.strip_prefix("http://")?;
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(
                b"GET /metrics HTTP/1.1\r\nHost: karpenter\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
            )
            .await
            .ok()?;
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
            .await
            .ok()?
            .ok()?;
        let split = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&answer[..split]).to_lowercase();
        if !head.starts_with("http/1.1 200") {
            return None;
        }
        let encoding = head
            .lines()
            .find_map(|l| l.strip_prefix("content-encoding:"))
            .map(|v| v.trim().to_owned());
        let body = &answer[split + 4..];
        let text = if encoding.as_deref() == Some("gzip") {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(body), &mut text)
                .ok()?;
            text
        } else {
            String::from_utf8_lossy(body).into_owned()
        };
        Some((encoding, text))
    }

    pub async fn readyz(&self) -> Option<(u16, String)> {
        Self::get(&self.health, "/readyz?verbose").await
    }

    /// The sum over every sample of the metric `name` (all label sets), or 0.
    pub async fn metric_sum(&self, name: &str) -> f64 {
        self.metrics_text().await.map_or(0.0, |text| {
            text.lines()
                .filter(|line| !line.starts_with('#'))
                .filter_map(|line| {
                    let (sample, value) = line.rsplit_once(' ')?;
                    let metric = sample.split('{').next()?;
                    (metric == name).then(|| value.parse::<f64>().ok())?
                })
                .sum()
        })
    }

    /// The value of one sample of `/metrics` (name with its labels, as exposed), or 0.
    pub async fn metric(&self, sample: &str) -> f64 {
        self.metrics_text()
            .await
            .and_then(|text| {
                text.lines().find_map(|line| {
                    let (name, value) = line.rsplit_once(' ')?;
                    (name == sample).then(|| value.parse().ok())?
                })
            })
            .unwrap_or(0.0)
    }
}

/// moto seeded as the AWS account of an EKS cluster, and the cluster-only server.
pub struct World {
    pub scratch: Scratch,
    pub moto: Moto,
    pub cluster: Proc,
    pub kubeconfig: PathBuf,
    pub client: Client,
    /// The endpoint moto's EKS reports for the cluster.
    pub eks_endpoint: String,
    pub queue_url: String,
    daemons: AtomicU32,
}

fn tag_spec(resource: ResourceType, key: &str, value: &str) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .tags(Tag::builder().key(key).value(value).build())
        .build()
}

/// A VPC with two subnets and a security group tagged for discovery, the node role, the EKS
/// cluster, and the interruption queue with its EventBridge rules (`karpenter interruption
/// setup`). Returns the cluster's endpoint and the queue URL.
async fn seed_account(moto: &Moto) -> (String, String) {
    let ec2 = moto.raw_ec2().await;
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.30.0.0/16")
        .send()
        .await
        .unwrap();
    let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_owned();
    let mut subnets = Vec::new();
    for (cidr, zone) in [
        ("10.30.1.0/24", "us-west-2a"),
        ("10.30.2.0/24", "us-west-2b"),
    ] {
        let subnet = ec2
            .create_subnet()
            .vpc_id(&vpc_id)
            .cidr_block(cidr)
            .availability_zone(zone)
            .tag_specifications(tag_spec(
                ResourceType::Subnet,
                "karpenter.sh/discovery",
                CLUSTER,
            ))
            .send()
            .await
            .unwrap();
        subnets.push(subnet.subnet().unwrap().subnet_id().unwrap().to_owned());
    }
    ec2.create_security_group()
        .group_name(format!("{CLUSTER}-nodes"))
        .description("nodes")
        .vpc_id(&vpc_id)
        .tag_specifications(tag_spec(
            ResourceType::SecurityGroup,
            "karpenter.sh/discovery",
            CLUSTER,
        ))
        .send()
        .await
        .unwrap();
    moto.raw_iam()
        .await
        .create_role()
        .role_name(format!("KarpenterNodeRole-{CLUSTER}"))
        .assume_role_policy_document("{}")
        .send()
        .await
        .unwrap();
    let eks = moto.raw_eks().await;
    let created = eks
        .create_cluster()
        .name(CLUSTER)
        .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
        .resources_vpc_config(
            VpcConfigRequest::builder()
                .set_subnet_ids(Some(subnets))
                .build(),
        )
        .kubernetes_network_config(
            KubernetesNetworkConfigRequest::builder()
                .service_ipv4_cidr(SERVICE_CIDR)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let endpoint = created
        .cluster()
        .and_then(|c| c.endpoint())
        .unwrap()
        .to_owned();
    let args = SetupArgs {
        queue: CLUSTER.into(),
        cluster: CLUSTER.into(),
        check: false,
        region: None,
        endpoint_url: None,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = setup_with(
        moto.clients.sqs.as_ref(),
        moto.clients.eventbridge.as_ref(),
        &args,
        &mut out,
        &mut err,
    )
    .await;
    assert_eq!(status, Status::Success, "{}", String::from_utf8_lossy(&err));
    let queue_url =
        karpenter_actors::ports::sqs::SqsApi::get_queue_url(moto.clients.sqs.as_ref(), CLUSTER)
            .await
            .unwrap();
    (endpoint, queue_url)
}

impl World {
    /// Starts moto (seeded) and the cluster-only server, or `None` (after saying why) when the
    /// venv is missing and the run does not require it.
    pub async fn start(name: &str) -> Option<World> {
        let scratch = Scratch::new(name);
        let moto = Moto::start_logging_to(Some(&scratch.path("moto.log"))).await?;
        let (eks_endpoint, queue_url) = seed_account(&moto).await;
        let kubeconfig = scratch.path("kubeconfig");
        let mut command = karpenter();
        command
            .args(["simulate", "--serve", "127.0.0.1:0", "--cluster-only"])
            .arg("--kubeconfig")
            .arg(&kubeconfig);
        let cluster = Proc::spawn("cluster", command, &scratch);
        let written = kubeconfig.clone();
        let shown = cluster.tail();
        until(
            "the cluster-only server's kubeconfig",
            Duration::from_secs(30),
            || shown.clone(),
            || {
                let ready = written.exists();
                async move { ready.then_some(()) }
            },
        )
        .await;
        let client = client_for(&kubeconfig).await;
        Some(World {
            scratch,
            moto,
            cluster,
            kubeconfig,
            client,
            eks_endpoint,
            queue_url,
            daemons: AtomicU32::new(0),
        })
    }

    /// Starts a `karpenter run` as a user would configure it against this world: the kubeconfig,
    /// `CLUSTER_NAME`, moto as `AWS_ENDPOINT_URL`, the interruption queue, free ports, and no
    /// `CLUSTER_ENDPOINT` (discovered). `extra` adds or overrides variables.
    pub fn daemon(&self, extra: &[(&str, &str)]) -> Daemon {
        let index = self.daemons.fetch_add(1, Ordering::Relaxed);
        let [metrics, health] = free_ports();
        let mut command = karpenter();
        command
            .arg("run")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("RUST_BACKTRACE", "1")
            .env("CLUSTER_NAME", CLUSTER)
            .env("AWS_REGION", REGION)
            .env("AWS_ENDPOINT_URL", self.moto.endpoint())
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("INTERRUPTION_QUEUE", CLUSTER)
            // moto has no Pricing API: the bundled prices, as in an isolated VPC.
            .env("ISOLATED_VPC", "true")
            .env("METRICS_PORT", metrics.to_string())
            .env("HEALTH_PROBE_PORT", health.to_string());
        for (key, value) in extra {
            command.env(key, value);
        }
        Daemon {
            proc: Proc::spawn(&format!("daemon-{index}"), command, &self.scratch),
            metrics: format!("http://127.0.0.1:{metrics}"),
            health: format!("http://127.0.0.1:{health}"),
        }
    }

    /// The tails of the cluster server and `daemons`, for failure messages.
    pub fn context(&self, daemons: &[&Daemon]) -> String {
        let mut text = self.cluster.tail();
        for daemon in daemons {
            text.push_str(&daemon.proc.tail());
        }
        text
    }

    /// Waits until `daemon` holds the Lease and answers `/readyz` with 200.
    pub async fn until_leading_and_ready(&self, daemon: &Daemon) {
        let identity = daemon.identity();
        until(
            "the daemon to hold the Lease and be ready",
            STARTUP,
            || self.context(&[daemon]),
            || async {
                let holder = self.lease_holder().await;
                let ready = daemon.readyz().await.is_some_and(|(code, _)| code == 200);
                (holder.as_deref() == Some(identity.as_str()) && ready).then_some(())
            },
        )
        .await;
    }

    /// Who holds the daemon's Lease now (`None`: nobody, or no Lease yet).
    pub async fn lease_holder(&self) -> Option<String> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), LEASE_NAMESPACE);
        leases
            .get_opt(LEASE_NAME)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
    }

    /// An AL2023 EC2NodeClass and a NodePool of on-demand [`INSTANCE_TYPE`]s, as the README
    /// shows them.
    pub async fn apply_nodepool(&self) {
        let class: EC2NodeClass = serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "role": format!("KarpenterNodeRole-{CLUSTER}"),
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            },
        }))
        .unwrap();
        Api::<EC2NodeClass>::all(self.client.clone())
            .create(&PostParams::default(), &class)
            .await
            .unwrap();
        let pool: NodePool = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [INSTANCE_TYPE]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    ],
                }},
                // The tests count nodes: nothing is consolidated away under them, and nothing is
                // replaced for drift: moto's CreateFleet ignores the launch template's
                // `SecurityGroupIds` (it reads `GroupSet`), so its instances carry other groups
                // than the class selects and every node would be `SecurityGroupDrift` (real EC2
                // applies the template's groups; drift is tested over kwok and the simulation).
                "disruption": {
                    "consolidationPolicy": "WhenEmpty",
                    "consolidateAfter": "Never",
                    "budgets": [{"nodes": "0", "reasons": ["Drifted"]}],
                },
            },
        }))
        .unwrap();
        Api::<NodePool>::all(self.client.clone())
            .create(&PostParams::default(), &pool)
            .await
            .unwrap();
    }

    /// `count` pods named `{prefix}-{i}`, each asking for [`ONE_PER_NODE_CPU`].
    pub async fn create_pods(&self, prefix: &str, count: usize) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        for i in 0..count {
            let pod: Pod = serde_json::from_value(json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": format!("{prefix}-{i}"), "labels": {"app": prefix}},
                "spec": {"containers": [{
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": ONE_PER_NODE_CPU, "memory": "128Mi"}},
                }]},
            }))
            .unwrap();
            pods.create(&PostParams::default(), &pod).await.unwrap();
        }
    }

    pub async fn pods(&self) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), "default")
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    pub async fn nodes(&self) -> Vec<Node> {
        Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    pub async fn nodeclaims(&self) -> Vec<NodeClaim> {
        Api::<NodeClaim>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// moto's instances launched for the cluster (tagged with a NodePool), pending or running:
    /// (instance id, NodeClaim tag).
    pub async fn instances(&self) -> Vec<(String, Option<String>)> {
        let ec2 = self.moto.raw_ec2().await;
        let out = ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name("tag-key")
                    .values("karpenter.sh/nodepool")
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .values("pending")
                    .values("running")
                    .build(),
            )
            .send()
            .await
            .unwrap();
        let mut found: Vec<(String, Option<String>)> = out
            .reservations()
            .iter()
            .flat_map(aws_sdk_ec2::types::Reservation::instances)
            .map(|i| {
                let claim = i
                    .tags()
                    .iter()
                    .find(|t| t.key() == Some("karpenter.sh/nodeclaim"))
                    .and_then(|t| t.value())
                    .map(str::to_owned);
                (i.instance_id().unwrap_or_default().to_owned(), claim)
            })
            .collect();
        found.sort();
        found
    }

    /// Waits until every pod with `prefix` is bound to a Ready node and Running; returns the
    /// nodes they run on.
    pub async fn until_pods_run(&self, prefix: &str, count: usize, daemons: &[&Daemon]) {
        until(
            &format!("{count} {prefix} pods bound to Ready nodes and Running"),
            SCALE_UP,
            || self.context(daemons),
            || async {
                let nodes = self.nodes().await;
                let ready: Vec<String> = nodes
                    .iter()
                    .filter(|n| is_ready(n))
                    .map(ResourceExt::name_any)
                    .collect();
                let running = self
                    .pods()
                    .await
                    .iter()
                    .filter(|p| p.name_any().starts_with(&format!("{prefix}-")))
                    .filter(|p| {
                        p.spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_ref())
                            .is_some_and(|n| ready.contains(n))
                            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                    .count();
                (running == count).then_some(())
            },
        )
        .await;
    }
}

/// Whether a node reports `Ready=True`.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The instance id of a NodeClaim (from its provider id).
pub fn instance_of(claim: &NodeClaim) -> Option<String> {
    let provider_id = claim.status.as_ref()?.provider_id.as_deref()?;
    provider_id.rsplit_once('/').map(|(_, id)| id.to_owned())
}

/// A kube client from a kubeconfig file.
pub async fn client_for(path: &Path) -> Client {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(path).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    Client::try_from(config).unwrap()
}
