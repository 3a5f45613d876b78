//! `karpenter explain pod NAMESPACE/NAME`: why a pod is pending, from the Provisioner of a
//! running daemon, with a reason per NodePool; `karpenter explain node NAME`: why a node is or is
//! not being disrupted, from the disruption actor's last round.
//!
//! Data flow: the command sends `GET <url>/debug/explain/pod/<namespace>/<name>` (or
//! `/debug/explain/node/<name>`) to the daemon's HTTP server, which answers with the
//! Provisioner's [`PodExplanation`] (or the disruption actor's [`NodeExplanation`]) as JSON (the
//! server side is [`crate::daemon::explain_answer`] and [`crate::daemon::explain_node_answer`],
//! beside the daemon's other routes); the command prints it as text, or as JSON with `-o json`.

use std::io::Write;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, Subcommand, ValueEnum};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use karpenter_actors::disruption::{NodeExplanation, explain::render as render_node};
use karpenter_actors::provisioner::{PodExplanation, render};
use serde::de::DeserializeOwned;

use super::Status;
use crate::daemon::{EXPLAIN_NODE_ROUTE_PREFIX, EXPLAIN_ROUTE_PREFIX};
/// The daemon's HTTP address when `--url` is not given (its metrics port on loopback, e.g.
/// through `kubectl port-forward`).
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";
/// How long the command waits for the daemon.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Options of `karpenter explain`.
#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    #[command(subcommand)]
    pub what: ExplainWhat,
}

/// What to explain.
#[derive(Debug, Clone, Subcommand)]
pub enum ExplainWhat {
    /// Why a pod is pending: the Provisioner's last decision, with a reason per NodePool.
    Pod(ExplainPodArgs),
    /// Why a node is or is not being disrupted: budgets, blocking pods and PDBs, the
    /// consolidation clock, the cheapest replacement considered, commands in flight.
    Node(ExplainNodeArgs),
}

/// Options of `karpenter explain node`.
#[derive(Debug, Clone, Args)]
pub struct ExplainNodeArgs {
    /// The node's name (or, before it registers, its NodeClaim's).
    #[arg(value_name = "NAME")]
    pub node: String,
    /// The daemon's HTTP address (plain http).
    #[arg(long, default_value = DEFAULT_URL)]
    pub url: String,
    /// How to print the answer.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// Options of `karpenter explain pod`.
#[derive(Debug, Clone, Args)]
pub struct ExplainPodArgs {
    /// The pod as NAMESPACE/NAME; NAME alone means the `default` namespace.
    #[arg(value_name = "NAMESPACE/NAME")]
    pub pod: String,
    /// The daemon's HTTP address (plain http).
    #[arg(long, default_value = DEFAULT_URL)]
    pub url: String,
    /// How to print the answer.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// One fact per line.
    Text,
    /// The daemon's answer, as JSON.
    Json,
}

/// Why the daemon's answer could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("pod {pod:?}: expected NAMESPACE/NAME or NAME")]
    InvalidPod { pod: String },
    #[error("node {node:?}: expected a node name")]
    InvalidNode { node: String },
    #[error("--url {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("connecting to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("asking {url}: {message}")]
    Http { url: String, message: String },
    #[error("asking {url}: no answer within {REQUEST_TIMEOUT:?}")]
    Timeout { url: String },
    #[error("{url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error(
        "{url} does not serve explanations: the daemon serves its debug endpoints only with \
         ENABLE_PROFILING=true (--enable-profiling; the chart's settings.enableProfiling)"
    )]
    ProfilingDisabled { url: String },
    #[error("reading the answer of {url}: {source}")]
    Decode {
        url: String,
        #[source]
        source: serde_json::Error,
    },
}

impl ExplainError {
    /// A short label for logs.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidPod { .. } => "invalid_pod",
            Self::InvalidNode { .. } => "invalid_node",
            Self::InvalidUrl { .. } => "invalid_url",
            Self::Connect { .. } => "connect",
            Self::Http { .. } => "http",
            Self::Timeout { .. } => "timeout",
            Self::Status { .. } => "status",
            Self::ProfilingDisabled { .. } => "profiling_disabled",
            Self::Decode { .. } => "decode",
        }
    }
}

/// Splits `NAMESPACE/NAME` (or `NAME`, in `default`).
pub fn parse_pod(pod: &str) -> Result<(String, String), ExplainError> {
    let invalid = || ExplainError::InvalidPod {
        pod: pod.to_owned(),
    };
    let (namespace, name) = pod.split_once('/').unwrap_or(("default", pod));
    if namespace.is_empty() || name.is_empty() || name.contains('/') {
        return Err(invalid());
    }
    Ok((namespace.to_owned(), name.to_owned()))
}

/// Asks the daemon at `url` about a pod.
pub async fn fetch(url: &str, namespace: &str, name: &str) -> Result<PodExplanation, ExplainError> {
    fetch_route(url, &format!("{EXPLAIN_ROUTE_PREFIX}{namespace}/{name}")).await
}

/// Asks the daemon at `url` about a node.
pub async fn fetch_node(url: &str, node: &str) -> Result<NodeExplanation, ExplainError> {
    fetch_route(url, &format!("{EXPLAIN_NODE_ROUTE_PREFIX}{node}")).await
}

/// `GET <url><route>`, decoded from JSON.
async fn fetch_route<T: DeserializeOwned>(url: &str, route: &str) -> Result<T, ExplainError> {
    let invalid = |reason: &str| ExplainError::InvalidUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| invalid(&e.to_string()))?;
    if uri.scheme_str() != Some("http") {
        return Err(invalid("only http:// addresses are supported"));
    }
    let authority = uri
        .authority()
        .ok_or_else(|| invalid("missing host"))?
        .clone();
    let address = format!(
        "{}:{}",
        authority.host(),
        authority.port_u16().unwrap_or(80)
    );
    let base = uri.path().trim_end_matches('/');
    let path = format!("{base}{route}");
    let ask = async {
        let stream = tokio::net::TcpStream::connect(&address)
            .await
            .map_err(|source| ExplainError::Connect {
                url: url.to_owned(),
                source,
            })?;
        let http_error = |e: &dyn std::fmt::Display| ExplainError::Http {
            url: url.to_owned(),
            message: e.to_string(),
        };
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| http_error(&e))?;
        tokio::spawn(async move {
            // The connection ends with the response; an error here is reported by the request.
            let _ = connection.await;
        });
        let request = http::Request::get(&path)
            .header(http::header::HOST, authority.as_str())
            .header(http::header::ACCEPT, "application/json")
            .body(Empty::<Bytes>::new())
            .map_err(|e| http_error(&e))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| http_error(&e))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| http_error(&e))?
            .to_bytes();
        Ok::<_, ExplainError>((status, body))
    };
    let (status, body) = tokio::time::timeout(REQUEST_TIMEOUT, ask)
        .await
        .map_err(|_| ExplainError::Timeout {
            url: url.to_owned(),
        })??;
    // The daemon's own 404s for a bad path carry a JSON body; a plain 404 means no such route.
    if status == ::http::StatusCode::NOT_FOUND && !body.starts_with(b"{") {
        return Err(ExplainError::ProfilingDisabled {
            url: url.to_owned(),
        });
    }
    if !status.is_success() {
        return Err(ExplainError::Status {
            url: url.to_owned(),
            status: status.as_u16(),
            body: String::from_utf8_lossy(&body).into_owned(),
        });
    }
    serde_json::from_slice(&body).map_err(|source| ExplainError::Decode {
        url: url.to_owned(),
        source,
    })
}

/// Runs `karpenter explain`.
pub fn run(args: &ExplainArgs, out: &mut impl Write, err: &mut impl Write) -> Status {
    match &args.what {
        ExplainWhat::Pod(args) => {
            let (namespace, name) = match parse_pod(&args.pod) {
                Ok(parsed) => parsed,
                Err(error) => {
                    let _ = writeln!(err, "error: {error}");
                    return Status::BadInput;
                }
            };
            answer(
                fetch(&args.url, &namespace, &name),
                args.output,
                render,
                out,
                err,
            )
        }
        ExplainWhat::Node(args) => {
            if args.node.is_empty() || args.node.contains('/') {
                let error = ExplainError::InvalidNode {
                    node: args.node.clone(),
                };
                let _ = writeln!(err, "error: {error}");
                return Status::BadInput;
            }
            answer(
                fetch_node(&args.url, &args.node),
                args.output,
                render_node,
                out,
                err,
            )
        }
    }
}

/// Waits for the daemon's answer and prints it.
fn answer<T: serde::Serialize>(
    ask: impl std::future::Future<Output = Result<T, ExplainError>>,
    output: Output,
    text: fn(&T) -> String,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Status {
    let Some(runtime) = super::current_thread_runtime(err) else {
        return Status::Problems;
    };
    match runtime.block_on(ask) {
        Ok(explanation) => {
            match output {
                Output::Text => {
                    let _ = write!(out, "{}", text(&explanation));
                }
                Output::Json => {
                    let json = serde_json::to_string_pretty(&explanation).unwrap_or_default();
                    let _ = writeln!(out, "{json}");
                }
            }
            Status::Success
        }
        Err(error @ ExplainError::InvalidUrl { .. }) => {
            let _ = writeln!(err, "error: {error}");
            Status::BadInput
        }
        Err(error) => {
            let _ = writeln!(err, "error: {error}");
            Status::Problems
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_namespace_slash_name_or_a_name_in_default() {
        assert_eq!(
            parse_pod("kube-system/coredns").ok(),
            Some(("kube-system".to_owned(), "coredns".to_owned()))
        );
        assert_eq!(
            parse_pod("web").ok(),
            Some(("default".to_owned(), "web".to_owned()))
        );
        assert!(parse_pod("a/b/c").is_err());
        assert!(parse_pod("/x").is_err());
    }

    #[test]
    fn a_daemon_that_is_not_there_is_reported_with_its_address() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let url = format!("http://127.0.0.1:{port}");
        let args = ExplainArgs {
            what: ExplainWhat::Pod(ExplainPodArgs {
                pod: "web".to_owned(),
                url: url.clone(),
                output: Output::Json,
            }),
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(run(&args, &mut out, &mut err), Status::Problems);
        let err = String::from_utf8_lossy(&err);
        assert!(
            err.starts_with(&format!("error: connecting to {url}")),
            "{err}"
        );
    }

    #[test]
    fn an_https_url_is_refused_with_the_flag_named() {
        let args = ExplainArgs {
            what: ExplainWhat::Pod(ExplainPodArgs {
                pod: "default/web".to_owned(),
                url: "https://karpenter:8080".to_owned(),
                output: Output::Text,
            }),
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(run(&args, &mut out, &mut err), Status::BadInput);
        let err = String::from_utf8_lossy(&err);
        assert!(err.contains("--url \"https://karpenter:8080\""), "{err}");
    }
}
