//! HTTP routes the actors answer, and the routes every daemon serves from them.
//!
//! The HTTP server's tasks cannot hold the actors' `Daemon` (it lives on the actix arbiter's
//! thread), so [`bridge`] turns [`DaemonRoutes`] into HTTP handlers that queue each request for
//! a task on the actors' thread, which answers with the running `Daemon` (503 while this replica
//! runs no actors):
//!
//! ```text
//! GET /debug/explain/pod/NS/NAME -> bridge handler --queue--> task on the actors' thread
//!   -> explain_answer(&Daemon) -> Provisioner (explain_pod) -> JSON -> reply
//! GET /debug/explain/node/NAME -> ... -> explain_node_answer(&Daemon) -> DisruptionActor
//!   (explain_node) -> JSON -> reply
//! ```
//!
//! The client side of the explain route is the `karpenter explain` command.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use karpenter_actors::daemon::Daemon;
use tokio::sync::{mpsc, oneshot};

use super::changes::DaemonSlot;
use crate::http::{Reply, RouteRequest, Routes, handler};

/// Where the daemon's HTTP server answers explain requests; the pod's namespace and name follow.
pub const EXPLAIN_ROUTE_PREFIX: &str = "/debug/explain/pod/";
/// Where it answers `explain node`; the node's name follows.
pub const EXPLAIN_NODE_ROUTE_PREFIX: &str = "/debug/explain/node/";

type AnswerFuture = Pin<Box<dyn Future<Output = Reply>>>;
/// An answer computed from the running actors, on their thread (so it may hold `&Daemon`).
pub type DaemonAnswer = Rc<dyn Fn(Rc<Daemon>, RouteRequest) -> AnswerFuture>;

/// HTTP routes answered by the actors (`/debug/explain/...`): path prefix and answer. Served
/// through [`bridge`], as the HTTP server's tasks cannot hold the actors' `Daemon`.
#[derive(Clone, Default)]
pub struct DaemonRoutes {
    routes: Vec<(String, DaemonAnswer)>,
}

impl std::fmt::Debug for DaemonRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.routes.iter().map(|(p, _)| p))
            .finish()
    }
}

impl DaemonRoutes {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers every path under `prefix` with `answer`.
    #[must_use]
    pub fn prefix<F, Fut>(mut self, prefix: &str, answer: F) -> Self
    where
        F: Fn(Rc<Daemon>, RouteRequest) -> Fut + 'static,
        Fut: Future<Output = Reply> + 'static,
    {
        let answer: DaemonAnswer =
            Rc::new(move |daemon, request| Box::pin(answer(daemon, request)));
        self.routes.push((prefix.to_owned(), answer));
        self
    }
}

fn json_reply(answer: Option<RouteAnswer>, path: &str) -> Reply {
    match answer {
        Some(found) => Reply {
            status: http::StatusCode::from_u16(found.status)
                .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR),
            content_type: "application/json",
            content_encoding: None,
            body: found.body.into(),
        },
        None => Reply::text(
            http::StatusCode::NOT_FOUND,
            format!("no route for {path}\n"),
        ),
    }
}

/// The routes every daemon serves from its actors (`karpenter run`): the Provisioner's and the
/// disruption actor's `karpenter explain` answers.
#[must_use]
pub fn daemon_routes() -> DaemonRoutes {
    DaemonRoutes::new()
        .prefix(EXPLAIN_ROUTE_PREFIX, |daemon, request| async move {
            json_reply(explain_answer(&daemon, &request.path).await, &request.path)
        })
        .prefix(EXPLAIN_NODE_ROUTE_PREFIX, |daemon, request| async move {
            json_reply(
                explain_node_answer(&daemon, &request.path).await,
                &request.path,
            )
        })
}

/// An HTTP answer of the explain route: status code and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteAnswer {
    pub status: u16,
    /// `application/json`.
    pub body: String,
}

/// The server side of `karpenter explain`: answers `GET /debug/explain/pod/{namespace}/{name}`
/// with the Provisioner's explanation (`Daemon::explain_pod`) as JSON; `None` when `path` is not
/// this route, so a server can try its other routes.
pub async fn explain_answer(daemon: &Daemon, path: &str) -> Option<RouteAnswer> {
    let rest = path.strip_prefix(EXPLAIN_ROUTE_PREFIX)?;
    let error = |status: u16, message: String| RouteAnswer {
        status,
        body: serde_json::json!({ "error": message }).to_string(),
    };
    let Some((namespace, name)) = rest
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
    else {
        return Some(error(
            400,
            format!("expected {EXPLAIN_ROUTE_PREFIX}<namespace>/<name>, got {path}"),
        ));
    };
    Some(match daemon.explain_pod(namespace, name).await {
        Ok(explanation) => RouteAnswer {
            status: 200,
            body: serde_json::to_string(&explanation).unwrap_or_default(),
        },
        Err(send) => error(503, format!("the provisioner did not answer: {send}")),
    })
}

/// The server side of `karpenter explain node`: answers `GET /debug/explain/node/{name}` with
/// the disruption actor's explanation (`Daemon::explain_node`) as JSON; `None` when `path` is
/// not this route.
pub async fn explain_node_answer(daemon: &Daemon, path: &str) -> Option<RouteAnswer> {
    let name = path.strip_prefix(EXPLAIN_NODE_ROUTE_PREFIX)?;
    if name.is_empty() || name.contains('/') {
        return Some(RouteAnswer {
            status: 400,
            body: serde_json::json!({
                "error": format!("expected {EXPLAIN_NODE_ROUTE_PREFIX}<name>, got {path}")
            })
            .to_string(),
        });
    }
    Some(match daemon.explain_node(name).await {
        Ok(explanation) => RouteAnswer {
            status: 200,
            body: serde_json::to_string(&explanation).unwrap_or_default(),
        },
        Err(send) => RouteAnswer {
            status: 503,
            body: serde_json::json!({ "error": format!("the disruption actor did not answer: {send}") })
                .to_string(),
        },
    })
}

/// Requests of bridged routes waiting for the actors' thread, at most this many at once (a
/// debugging client, not traffic).
const BRIDGE_QUEUE: usize = 64;
/// How long a bridged request waits for its answer.
const BRIDGE_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `routes` from the actors in `slot`: HTTP handlers that hand each request to a task
/// on this (the actors') thread, which answers with the running `Daemon`, or 503 while this
/// replica runs no actors (a standby). Returns the HTTP routes and the task.
#[must_use]
pub fn bridge(slot: DaemonSlot, routes: &DaemonRoutes) -> (Routes, tokio::task::JoinHandle<()>) {
    type Asked = (usize, RouteRequest, oneshot::Sender<Reply>);
    let (queue, mut asked) = mpsc::channel::<Asked>(BRIDGE_QUEUE);
    let answers: Vec<DaemonAnswer> = routes.routes.iter().map(|(_, a)| Rc::clone(a)).collect();
    let task = tokio::task::spawn_local(async move {
        while let Some((index, request, reply)) = asked.recv().await {
            let answer = match (slot.get(), answers.get(index)) {
                (Some(started), Some(answer)) => answer(started.daemon, request).await,
                _ => Reply::text(
                    http::StatusCode::SERVICE_UNAVAILABLE,
                    "this replica runs no actors (not the leader)\n",
                ),
            };
            let _ = reply.send(answer);
        }
    });
    let mut http_routes = Routes::new();
    for (index, (prefix, _)) in routes.routes.iter().enumerate() {
        let queue = queue.clone();
        http_routes = http_routes.prefix(
            prefix,
            handler(move |request: RouteRequest| {
                let queue = queue.clone();
                async move {
                    let (reply, answered) = oneshot::channel();
                    if queue.send((index, request, reply)).await.is_err() {
                        return Reply::text(
                            http::StatusCode::SERVICE_UNAVAILABLE,
                            "the daemon is stopping\n",
                        );
                    }
                    match tokio::time::timeout(BRIDGE_TIMEOUT, answered).await {
                        Ok(Ok(answer)) => answer,
                        _ => Reply::text(
                            http::StatusCode::GATEWAY_TIMEOUT,
                            "the actors did not answer\n",
                        ),
                    }
                }
            }),
        );
    }
    (http_routes, task)
}
