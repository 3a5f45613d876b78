//! Starts `scripts/moto_launcher.py` from the project venv and connects the adapters to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use karpenter::aws::{AwsClients, Connection, RetryPolicy};

/// Environment variable that makes a missing venv a failure (set by `scripts/test.sh`).
const REQUIRE_MOTO: &str = "KARPENTER_REQUIRE_MOTO";
const REGION: &str = "us-west-2";

/// One moto server, stopped when dropped.
#[derive(Debug)]
pub struct Moto {
    child: Child,
    port: u16,
    /// Adapters with a fast retry policy.
    pub clients: AwsClients,
}

/// A request fault: the next `count` calls of `action` fail with `code` and `status`.
pub struct Fault {
    action: &'static str,
    code: &'static str,
    status: u16,
    count: u32,
}

impl Fault {
    pub fn new(action: &'static str, code: &'static str, status: u16, count: u32) -> Self {
        Fault {
            action,
            code,
            status,
            count,
        }
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl Moto {
    /// Starts moto, or returns `None` (after saying why) when the venv is missing and the run
    /// does not require it.
    pub async fn start() -> Option<Moto> {
        Self::start_logging_to(None).await
    }

    /// [`Moto::start`], with moto's request log in `log` instead of the test's stderr.
    pub async fn start_logging_to(log: Option<&std::path::Path>) -> Option<Moto> {
        let python = root().join(".venv/bin/python");
        if !python.exists() {
            let message = format!(
                "moto tests skipped: {} is missing; run scripts/venv.sh (scripts/test.sh does)",
                python.display()
            );
            assert!(std::env::var_os(REQUIRE_MOTO).is_none(), "{message}");
            eprintln!("{message}");
            return None;
        }
        let mut child = Command::new(python)
            .arg(root().join("scripts/moto_launcher.py"))
            .args(["--region", REGION])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(match log {
                Some(path) => Stdio::from(std::fs::File::create(path).expect("moto log file")),
                None => Stdio::inherit(),
            })
            .spawn()
            .expect("moto launcher starts");
        let stdout = child.stdout.take().expect("launcher stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("launcher prints its port");
        let port: u16 = line
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected launcher output {line:?}"));
        let clients = AwsClients::connect(&connection(port, RetryPolicy::fast())).await;
        Some(Moto {
            child,
            port,
            clients,
        })
    }

    /// Adapters with another retry policy.
    pub async fn clients_with(&self, retry: RetryPolicy) -> AwsClients {
        AwsClients::connect(&connection(self.port, retry)).await
    }

    /// A raw EC2 client for setup the ports do not offer (VPCs, subnets).
    pub async fn raw_ec2(&self) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::new(
            &connection(self.port, RetryPolicy::none())
                .sdk_config()
                .await,
        )
    }

    /// The server's URL, for `AWS_ENDPOINT_URL`.
    #[allow(
        dead_code,
        reason = "used by tests/process, which shares this file; not by every suite"
    )]
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A raw EKS client for setup (clusters).
    pub async fn raw_eks(&self) -> aws_sdk_eks::Client {
        aws_sdk_eks::Client::new(
            &connection(self.port, RetryPolicy::none())
                .sdk_config()
                .await,
        )
    }

    /// A raw IAM client for setup (roles).
    pub async fn raw_iam(&self) -> aws_sdk_iam::Client {
        aws_sdk_iam::Client::new(
            &connection(self.port, RetryPolicy::none())
                .sdk_config()
                .await,
        )
    }

    /// Replaces the launcher's faults.
    pub async fn set_faults(&self, ice_instance_types: &[&str], fail: &[Fault]) {
        let body = serde_json::json!({
            "ice_instance_types": ice_instance_types,
            "fail": fail.iter().map(|f| serde_json::json!({
                "action": f.action, "code": f.code, "status": f.status, "count": f.count,
            })).collect::<Vec<_>>(),
        })
        .to_string();
        let port = self.port;
        tokio::task::spawn_blocking(move || post(port, "/_launcher/faults", &body))
            .await
            .expect("fault request");
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        // Our own child, by handle; closing its stdin would also stop it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn connection(port: u16, retry: RetryPolicy) -> Connection {
    Connection {
        region: Some(REGION.into()),
        endpoint_url: Some(format!("http://127.0.0.1:{port}")),
        static_credentials: Some(("testing".into(), "testing".into())),
        retry,
        ..Connection::default()
    }
}

fn post(port: u16, path: &str, body: &str) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("launcher reachable");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("request written");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response read");
    assert!(
        response.starts_with("HTTP/1.1 200") || response.starts_with("HTTP/1.0 200"),
        "{response}"
    );
}
