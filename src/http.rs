//! The daemon's HTTP endpoints: `/metrics` (the prometheus-client registry), `/healthz` and
//! `/readyz` (named checks), `/debug/actors` (the actor kit's registry snapshot as JSON), and
//! routes other parts add (e.g. `/debug/explain/<namespace>/<pod>`).
//!
//! Data flow: the command assembling the daemon builds a [`Routes`] table (exact paths and path
//! prefixes, each an async handler returning a [`Reply`]), fills [`HealthChecks`] with named
//! checks (closures reading state others keep current: the cache-synced flag, the leader
//! watch, the AWS connectivity result), and serves the table with [`serve`] on a port (hyper,
//! HTTP/1.1). `karpenter run` serves `/metrics` and `/debug/*` on `METRICS_PORT` and the probes
//! on `HEALTH_PROBE_PORT`, as Karpenter does; `karpenter simulate --serve` serves everything on
//! one address. [`get`] is the small client `karpenter actors` and the tests use.
//!
//! The probes answer like kube-apiserver's: `200 ok` or `500` with one line per check
//! (`[+]cache-synced ok`, `[-]crds failed: ...`); `?verbose` lists the lines on success too.

use karpenter_actors::summary::TextFamily;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt;
use std::fmt::Write as _;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use karpenter_actors::runtime::ActorKit;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinHandle;

/// The Prometheus text format served at `/metrics` (`OpenMetrics`, what prometheus-client writes).
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Path of the actor table.
pub const ACTORS_PATH: &str = "/debug/actors";
/// Path of the metrics.
pub const METRICS_PATH: &str = "/metrics";
/// Path of the liveness probe.
pub const HEALTHZ_PATH: &str = "/healthz";
/// Path of the readiness probe.
pub const READYZ_PATH: &str = "/readyz";

/// An answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: StatusCode,
    pub content_type: &'static str,
    /// `Content-Encoding` of `body`, when it is encoded (`gzip`).
    pub content_encoding: Option<&'static str>,
    pub body: Bytes,
}

impl Reply {
    /// `200` with a plain-text body.
    #[must_use]
    pub fn text(status: StatusCode, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            content_encoding: None,
            body: Bytes::from(body.into()),
        }
    }

    /// `200` with a JSON body (a serialization failure becomes a 500 naming it).
    #[must_use]
    pub fn json(value: &impl serde::Serialize) -> Self {
        match serde_json::to_vec_pretty(value) {
            Ok(body) => Self {
                status: StatusCode::OK,
                content_type: "application/json",
                content_encoding: None,
                body: Bytes::from(body),
            },
            Err(error) => Self::text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("serializing the answer: {error}"),
            ),
        }
    }
}

/// What a handler sees of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteRequest {
    /// The whole path (`/debug/explain/default/web-1`).
    pub path: String,
    /// The path after the route's prefix (`default/web-1`); empty for exact routes.
    pub rest: String,
    /// The query string without `?`, if any.
    pub query: Option<String>,
    /// Whether the client takes a gzip-encoded answer (its `Accept-Encoding`).
    pub accepts_gzip: bool,
}

type ReplyFuture = Pin<Box<dyn Future<Output = Reply> + Send>>;
/// An async request handler.
pub type Handler = Arc<dyn Fn(RouteRequest) -> ReplyFuture + Send + Sync>;

/// Wraps a closure returning a future as a [`Handler`].
pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(RouteRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    Arc::new(move |request| Box::pin(f(request)))
}

/// The routing table: exact paths first, then the longest matching prefix. Only GET and HEAD
/// are served.
#[derive(Clone, Default)]
pub struct Routes {
    exact: BTreeMap<String, Handler>,
    prefixes: Vec<(String, Handler)>,
}

impl fmt::Debug for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Routes")
            .field("exact", &self.exact.keys().collect::<Vec<_>>())
            .field(
                "prefixes",
                &self.prefixes.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Routes {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `path` exactly (a later route for the same path replaces it).
    #[must_use]
    pub fn route(mut self, path: &str, handler: Handler) -> Self {
        self.exact.insert(path.to_owned(), handler);
        self
    }

    /// Serves every path under `prefix` (`/debug/explain/`); the handler gets the rest.
    #[must_use]
    pub fn prefix(mut self, prefix: &str, handler: Handler) -> Self {
        self.prefixes.retain(|(p, _)| p != prefix);
        self.prefixes.push((prefix.to_owned(), handler));
        // Longest first, so `/debug/explain/` wins over `/debug/`.
        self.prefixes
            .sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        self
    }

    /// Adds every route of `other` (its routes win on the same path).
    #[must_use]
    pub fn merge(mut self, other: Routes) -> Self {
        self.exact.extend(other.exact);
        for (prefix, handler) in other.prefixes {
            self = self.prefix(&prefix, handler);
        }
        self
    }

    /// The paths served, for the index at `/`.
    #[must_use]
    pub fn paths(&self) -> Vec<String> {
        self.exact
            .keys()
            .cloned()
            .chain(self.prefixes.iter().map(|(p, _)| format!("{p}...")))
            .collect()
    }

    /// Answers one request from a client that takes no encoded answer.
    pub async fn answer(&self, method: &Method, path: &str, query: Option<&str>) -> Reply {
        self.answer_accepting(method, path, query, false).await
    }

    /// Answers one request; `accepts_gzip` says whether the client takes a gzip-encoded answer.
    pub async fn answer_accepting(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        accepts_gzip: bool,
    ) -> Reply {
        if method != Method::GET && method != Method::HEAD {
            return Reply::text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n");
        }
        let request = |rest: &str| RouteRequest {
            path: path.to_owned(),
            rest: rest.to_owned(),
            query: query.map(str::to_owned),
            accepts_gzip,
        };
        if let Some(handler) = self.exact.get(path) {
            return handler(request("")).await;
        }
        if let Some((prefix, handler)) = self.prefixes.iter().find(|(p, _)| path.starts_with(p)) {
            return handler(request(&path[prefix.len()..])).await;
        }
        if path == "/" {
            let mut index = self.paths().join("\n");
            index.push('\n');
            return Reply::text(StatusCode::OK, index);
        }
        Reply::text(StatusCode::NOT_FOUND, format!("no route for {path}\n"))
    }
}

/// The result of one check: `Ok` or why not.
pub type CheckResult = Result<(), String>;
type Check = Arc<dyn Fn() -> CheckResult + Send + Sync>;

/// Named checks behind a probe; clones share the list, so parts of the daemon add their checks
/// as they start.
#[derive(Clone, Default)]
pub struct HealthChecks {
    checks: Arc<RwLock<Vec<(String, Check)>>>,
}

impl fmt::Debug for HealthChecks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl HealthChecks {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the check called `name`.
    pub fn add(&self, name: &str, check: impl Fn() -> CheckResult + Send + Sync + 'static) {
        let mut checks = self.checks.write().unwrap_or_else(PoisonError::into_inner);
        checks.retain(|(n, _)| n != name);
        checks.push((name.to_owned(), Arc::new(check)));
    }

    /// The check names, in the order they were added.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.checks
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Runs every check: `(name, result)` in order.
    #[must_use]
    pub fn run(&self) -> Vec<(String, CheckResult)> {
        let checks: Vec<(String, Check)> = self
            .checks
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        checks
            .into_iter()
            .map(|(name, check)| {
                let result = check();
                (name, result)
            })
            .collect()
    }

    /// The probe's answer: 200 when every check passes, else 500 listing them.
    #[must_use]
    pub fn reply(&self, verbose: bool) -> Reply {
        let results = self.run();
        let healthy = results.iter().all(|(_, r)| r.is_ok());
        let mut body = String::new();
        if verbose || !healthy {
            for (name, result) in &results {
                match result {
                    Ok(()) => {
                        let _ = writeln!(body, "[+]{name} ok");
                    }
                    Err(why) => {
                        let _ = writeln!(body, "[-]{name} failed: {why}");
                    }
                }
            }
        }
        if healthy {
            body.push_str("ok\n");
            Reply::text(StatusCode::OK, body)
        } else {
            body.push_str("not ok\n");
            Reply::text(StatusCode::INTERNAL_SERVER_ERROR, body)
        }
    }

    /// A handler serving this probe (`?verbose` lists every check).
    #[must_use]
    pub fn handler(&self) -> Handler {
        let checks = self.clone();
        handler(move |request: RouteRequest| {
            let verbose = request.query.as_deref().is_some_and(|q| {
                q.split('&')
                    .any(|p| p == "verbose" || p.starts_with("verbose="))
            });
            let reply = checks.reply(verbose);
            async move { reply }
        })
    }
}

/// The registries `/metrics` serves, in order: the one built at startup (the actor kit's) and
/// those added later (the actor families register theirs when this replica starts leading, as
/// a registry cannot take new metrics once it is shared), then the families written as text
/// (summaries, which `prometheus-client` lacks). Clones share the lists.
#[derive(Clone, Default)]
pub struct MetricsRegistries {
    registries: Arc<RwLock<Vec<Arc<Registry>>>>,
    texts: Arc<RwLock<Vec<Arc<dyn TextFamily>>>>,
    /// Run before each encoding: families computed from the cluster at scrape time.
    before_encode: Arc<RwLock<Vec<ScrapeHook>>>,
    /// The length of the last text encoded, the room the next one starts with: grown by
    /// doubling, the last step of an 80 MB text held 64 and 128 MB at once.
    last_len: Arc<AtomicUsize>,
}

/// Held through a scrape's hooks and its encoding: the families a hook writes are taken by the
/// encoding that follows, so two scrapes at once (a pair of Prometheus replicas) must not
/// interleave. One for the process: registries merged with [`MetricsRegistries::extend`]
/// share their hooks.
static SCRAPING: Mutex<()> = Mutex::new(());

/// Work `/metrics` does before it encodes (see [`MetricsRegistries::before_encode`]).
pub type ScrapeHook = Arc<dyn Fn() + Send + Sync>;

impl fmt::Debug for MetricsRegistries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsRegistries")
            .field(
                "registries",
                &self
                    .registries
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len(),
            )
            .field(
                "texts",
                &self
                    .texts
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len(),
            )
            .field(
                "before_encode",
                &self
                    .before_encode
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len(),
            )
            .field("last_len", &self.last_len.load(Ordering::Relaxed))
            .finish()
    }
}

impl MetricsRegistries {
    /// Serves `first`.
    #[must_use]
    pub fn new(first: Registry) -> Self {
        let registries = Self::default();
        registries.add(first);
        registries
    }

    /// Serves `registry` too, after the others.
    pub fn add(&self, registry: Registry) {
        self.registries
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::new(registry));
    }

    /// Serves `family` too, after the registries.
    pub fn add_text(&self, family: Arc<dyn TextFamily>) {
        self.texts
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(family);
    }

    /// Runs `hook` before every encoding: the families it writes are as fresh as the scrape,
    /// and cost nothing while nobody scrapes.
    pub fn before_encode(&self, hook: ScrapeHook) {
        self.before_encode
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(hook);
    }

    /// Serves every registry and text family of `other` too, after these.
    pub fn extend(&self, other: &MetricsRegistries) {
        let texts = other
            .texts
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        self.texts
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(texts);
        let theirs = other
            .registries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        self.registries
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(theirs);
        let hooks = other
            .before_encode
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        self.before_encode
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(hooks);
    }

    /// Every registry in the `OpenMetrics` text format, ending with one `# EOF`.
    pub fn encode(&self) -> Result<String, fmt::Error> {
        self.scrape(|| self.encode_as_they_stand())
    }

    /// [`Self::encode`], gzip-compressed as it is written: the whole text is never held (at
    /// 5,000 nodes and 50,000 pods it is about 78 MB; compressed, a twentieth of that).
    pub fn encode_gzip(&self) -> Result<Vec<u8>, fmt::Error> {
        self.scrape(|| {
            let mut out = GzipText::new();
            self.write_as_they_stand(&mut out)?;
            out.finish()
        })
    }

    /// Runs the scrape hooks, then `encode`, holding [`SCRAPING`] throughout.
    fn scrape<T>(&self, encode: impl FnOnce() -> T) -> T {
        let _scraping = SCRAPING.lock().unwrap_or_else(PoisonError::into_inner);
        let hooks = self
            .before_encode
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for hook in &hooks {
            hook();
        }
        encode()
    }

    /// Every registry as it stands, without the scrape hooks: the families computed from the
    /// cluster are empty (a scrape's encoding takes what its hooks wrote). For readers of the
    /// counters alone (the simulation's report), who need not build a series per pod and node.
    pub fn encode_as_they_stand(&self) -> Result<String, fmt::Error> {
        let last = self.last_len.load(Ordering::Relaxed);
        let mut text = String::with_capacity(last + last / 8);
        self.write_as_they_stand(&mut text)?;
        self.last_len.store(text.len(), Ordering::Relaxed);
        Ok(text)
    }

    fn write_as_they_stand(&self, out: &mut impl fmt::Write) -> fmt::Result {
        let registries = self
            .registries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for registry in &registries {
            prometheus_client::encoding::text::encode_registry(out, registry)?;
        }
        let texts = self
            .texts
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut text = String::new();
        for family in &texts {
            family.encode_text(&mut text)?;
        }
        out.write_str(&text)?;
        prometheus_client::encoding::text::encode_eof(out)
    }
}

/// Text written into a gzip stream, through a buffer (the encoders write a few bytes at a
/// time). Level 1: a scrape's text compresses about twentyfold at it.
struct GzipText {
    buffer: String,
    gzip: flate2::write::GzEncoder<Vec<u8>>,
}

/// Bytes [`GzipText`] gathers before compressing them.
const GZIP_CHUNK: usize = 64 * 1024;

impl GzipText {
    fn new() -> Self {
        Self {
            buffer: String::with_capacity(GZIP_CHUNK),
            gzip: flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()),
        }
    }

    fn flush_buffer(&mut self) -> fmt::Result {
        std::io::Write::write_all(&mut self.gzip, self.buffer.as_bytes())
            .map_err(|_| fmt::Error)?;
        self.buffer.clear();
        Ok(())
    }

    fn finish(mut self) -> Result<Vec<u8>, fmt::Error> {
        self.flush_buffer()?;
        self.gzip.finish().map_err(|_| fmt::Error)
    }
}

impl fmt::Write for GzipText {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.buffer.push_str(text);
        if self.buffer.len() >= GZIP_CHUNK {
            self.flush_buffer()?;
        }
        Ok(())
    }
}

/// `/metrics`: the registries in the `OpenMetrics` text format.
#[must_use]
pub fn metrics_handler(registries: MetricsRegistries) -> Handler {
    handler(move |request: RouteRequest| {
        let encoded = if request.accepts_gzip {
            registries
                .encode_gzip()
                .map(|gzip| (Bytes::from(gzip), Some("gzip")))
        } else {
            registries.encode().map(|text| (Bytes::from(text), None))
        };
        let reply = match encoded {
            Ok((body, content_encoding)) => Reply {
                status: StatusCode::OK,
                content_type: METRICS_CONTENT_TYPE,
                content_encoding,
                body,
            },
            Err(error) => Reply::text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("encoding metrics: {error}\n"),
            ),
        };
        async move { reply }
    })
}

/// `/debug/actors`: the kit's registry snapshot as JSON. Last errors are the kit's public
/// renderings: our context and an AWS error's structured fields, never the service's own text
/// (`karpenter_actors::logs::public_text`; the logs keep it).
#[must_use]
pub fn actors_handler(kit: ActorKit) -> Handler {
    handler(move |_| {
        let reply = Reply::json(&kit.snapshot());
        async move { reply }
    })
}

/// Failures starting or querying a server.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("listening on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{url} is not an http:// URL: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("requesting {url}")]
    Request {
        url: String,
        #[source]
        source: hyper_util::client::legacy::Error,
    },
    #[error("reading the answer of {url}")]
    Body {
        url: String,
        #[source]
        source: hyper::Error,
    },
    #[error("no answer from {url} within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
}

impl HttpError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Bind { .. } => "bind",
            Self::BadUrl { .. } => "bad_url",
            Self::Request { .. } => "request",
            Self::Body { .. } => "body",
            Self::Timeout { .. } => "timeout",
        }
    }
}

/// A running server; dropping it stops accepting connections.
#[derive(Debug)]
pub struct HttpServer {
    addr: SocketAddr,
    /// Connections closed at once because the server was at its cap.
    refused: Arc<AtomicU64>,
    accept: AcceptLoop,
}

/// A running accept loop: a stop signal and its task. Dropping it stops the loop;
/// [`AcceptLoop::shutdown`] also waits for it. Shared by this server and the emulator's.
#[derive(Debug)]
pub(crate) struct AcceptLoop {
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl AcceptLoop {
    pub(crate) fn new(shutdown: oneshot::Sender<()>, task: JoinHandle<()>) -> Self {
        Self {
            shutdown: Some(shutdown),
            task: Some(task),
        }
    }

    /// Stops accepting connections and waits for the accept loop to end.
    pub(crate) async fn shutdown(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for AcceptLoop {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

impl HttpServer {
    /// The address it listens on (the real port when asked for port 0).
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections refused so far because the server was at [`ServeLimits::max_connections`].
    #[must_use]
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// `http://ADDR`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting connections and waits for the accept loop to end.
    pub async fn shutdown(self) {
        self.accept.shutdown().await;
    }
}

async fn respond(routes: &Routes, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let accepts_gzip = request
        .headers()
        .get(header::ACCEPT_ENCODING)
        .and_then(|value| value.to_str().ok())
        .is_some_and(accepts_gzip);
    let reply = routes
        .answer_accepting(
            request.method(),
            request.uri().path(),
            request.uri().query(),
            accepts_gzip,
        )
        .await;
    let body = if request.method() == Method::HEAD {
        Bytes::new()
    } else {
        reply.body
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = reply.status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(reply.content_type),
    );
    if let Some(encoding) = reply.content_encoding {
        response.headers_mut().insert(
            header::CONTENT_ENCODING,
            http::HeaderValue::from_static(encoding),
        );
    }
    response
}

/// Whether an `Accept-Encoding` value takes gzip: `gzip` (or `x-gzip`, or `*`) listed without
/// `q=0`.
fn accepts_gzip(accept_encoding: &str) -> bool {
    accept_encoding.split(',').any(|coding| {
        let mut parts = coding.split(';').map(str::trim);
        let name = parts.next().unwrap_or_default();
        let refused = parts.any(|parameter| {
            parameter
                .strip_prefix("q=")
                .and_then(|q| q.parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        ["gzip", "x-gzip", "*"]
            .iter()
            .any(|accepted| name.eq_ignore_ascii_case(accepted))
            && !refused
    })
}

/// How long a client may take to send a request's headers before its connection is closed: a
/// kubelet probe or a Prometheus scrape sends them in one packet; a client that trickles them
/// only holds a connection (and one of [`MAX_CONNECTIONS`]).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections one server serves at once; more are closed as soon as they are accepted. The
/// probes, a scraper or two and a debugging client need a handful; 64 leaves room while
/// bounding the memory and tasks a flood of connections can take.
pub const MAX_CONNECTIONS: usize = 64;

/// The limits a server holds its clients to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: HEADER_READ_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// Serves `routes` on `addr` (port 0 picks one) until the server is shut down or dropped, with
/// the default [`ServeLimits`].
pub async fn serve(addr: SocketAddr, routes: Routes) -> Result<HttpServer, HttpError> {
    serve_with(addr, routes, ServeLimits::default()).await
}

/// [`serve`] with other limits.
pub async fn serve_with(
    addr: SocketAddr,
    routes: Routes,
    limits: ServeLimits,
) -> Result<HttpServer, HttpError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| HttpError::Bind { addr, source })?;
    let routes = Arc::new(routes);
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let refused = Arc::new(AtomicU64::new(0));
    let refusals = Arc::clone(&refused);
    let (shutdown, mut stop) = oneshot::channel();
    let task = tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = &mut stop => break,
            };
            let Ok((stream, _)) = accepted else {
                continue;
            };
            // At the cap: close at once (the client sees a reset or EOF and may retry) rather
            // than queue behind connections that may never finish.
            let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                refusals.fetch_add(1, Ordering::Relaxed);
                drop(stream);
                continue;
            };
            let routes = Arc::clone(&routes);
            tokio::spawn(async move {
                let _permit = permit;
                let service = service_fn(move |request: Request<Incoming>| {
                    let routes = Arc::clone(&routes);
                    async move { Ok::<_, Infallible>(respond(&routes, &request).await) }
                });
                // A client that hangs up mid-request, or sends its headers too slowly, is not
                // the server's problem.
                let _ = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.header_read_timeout)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(HttpServer {
        addr,
        refused,
        accept: AcceptLoop::new(shutdown, task),
    })
}

/// GETs `url` (plain HTTP) and returns the status and body.
pub async fn get(url: &str, timeout: Duration) -> Result<(StatusCode, Bytes), HttpError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| HttpError::BadUrl {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
    if uri.scheme_str() != Some("http") {
        return Err(HttpError::BadUrl {
            url: url.to_owned(),
            reason: "only http:// is supported (the daemon serves plain HTTP)".to_owned(),
        });
    }
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let fetch = async {
        let response = client.get(uri).await.map_err(|source| HttpError::Request {
            url: url.to_owned(),
            source,
        })?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|source| HttpError::Body {
                url: url.to_owned(),
                source,
            })?
            .to_bytes();
        Ok((status, body))
    };
    tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| HttpError::Timeout {
            url: url.to_owned(),
            timeout,
        })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrape_hooks_write_their_families_before_each_encoding() {
        use prometheus_client::metrics::gauge::Gauge;
        let gauge: Gauge = Gauge::default();
        let mut registry = Registry::default();
        registry.register("scraped", "Set by the hook", gauge.clone());
        let registries = MetricsRegistries::new(registry);
        let scrapes = Arc::new(std::sync::atomic::AtomicI64::new(0));
        registries.before_encode(Arc::new({
            let scrapes = Arc::clone(&scrapes);
            move || {
                let n = scrapes.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                gauge.set(n);
            }
        }));
        let merged = MetricsRegistries::default();
        merged.extend(&registries);
        assert!(registries.encode().unwrap().contains("scraped 1\n"));
        assert!(
            merged.encode().unwrap().contains("scraped 2\n"),
            "extend keeps the hooks"
        );
        let standing = registries.encode_as_they_stand().unwrap();
        assert!(
            standing.contains("scraped 2\n"),
            "read as the last scrape left it, the hook not run again: {standing}"
        );
        assert_eq!(scrapes.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn the_longest_prefix_wins_and_unknown_paths_are_404() {
        let routes = Routes::new()
            .prefix(
                "/debug/",
                handler(|r: RouteRequest| async move { Reply::text(StatusCode::OK, r.rest) }),
            )
            .prefix(
                "/debug/explain/",
                handler(|r: RouteRequest| async move {
                    Reply::text(StatusCode::OK, format!("explain {}", r.rest))
                }),
            );
        let reply = routes
            .answer(&Method::GET, "/debug/explain/default/web-1", None)
            .await;
        assert_eq!(reply.body, Bytes::from("explain default/web-1"));
        let reply = routes.answer(&Method::GET, "/debug/other", None).await;
        assert_eq!(reply.body, Bytes::from("other"));
        let reply = routes.answer(&Method::GET, "/nope", None).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND);
        let reply = routes.answer(&Method::POST, "/debug/x", None).await;
        assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    }

    #[test]
    fn a_failing_check_makes_the_probe_fail_and_names_itself() {
        let checks = HealthChecks::new();
        checks.add("cache-synced", || Ok(()));
        checks.add("crds", || {
            Err("nodepools.karpenter.sh is missing".to_owned())
        });
        let reply = checks.reply(false);
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        let body = String::from_utf8_lossy(&reply.body).to_string();
        assert!(body.contains("[+]cache-synced ok"), "{body}");
        assert!(
            body.contains("[-]crds failed: nodepools.karpenter.sh is missing"),
            "{body}"
        );
        checks.add("crds", || Ok(()));
        let reply = checks.reply(false);
        assert_eq!(
            (reply.status, reply.body),
            (StatusCode::OK, Bytes::from("ok\n"))
        );
    }

    /// Reads until the server closes the connection; the bytes it sent.
    async fn read_to_close(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
        use tokio::io::AsyncReadExt as _;
        let mut received = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut received))
            .await
            .expect("the server never closed the connection")
            .ok();
        received
    }

    fn ok_routes() -> Routes {
        Routes::new().route(
            "/ok",
            handler(|_| async { Reply::text(StatusCode::OK, "ok\n") }),
        )
    }

    #[test]
    fn accept_encoding_takes_gzip_when_listed_and_not_refused() {
        for (header, takes) in [
            ("gzip", true),
            ("deflate, gzip;q=1.0, *;q=0.5", true),
            ("identity, GZip", true),
            ("x-gzip", true),
            ("*", true),
            ("gzip;q=0", false),
            ("gzip; q=0.0, identity", false),
            ("identity", false),
            ("br, deflate", false),
            ("", false),
        ] {
            assert_eq!(accepts_gzip(header), takes, "{header:?}");
        }
    }

    /// A registry with one counter per `n` (their names long enough for the text to span
    /// several of [`GzipText`]'s chunks).
    fn counters(n: usize) -> MetricsRegistries {
        use prometheus_client::metrics::counter::Counter;
        let mut registry = Registry::default();
        for i in 0..n {
            let counter: Counter = Counter::default();
            counter.inc_by(u64::try_from(i).unwrap());
            registry.register(
                format!("a_counter_with_a_long_name_to_fill_the_text_{i}"),
                "One of many",
                counter,
            );
        }
        MetricsRegistries::new(registry)
    }

    fn gunzip(body: &[u8]) -> String {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(body), &mut text).unwrap();
        text
    }

    #[tokio::test]
    async fn metrics_are_gzipped_for_a_client_that_takes_gzip_and_plain_otherwise() {
        let registries = counters(2_000);
        let plain = registries.encode().unwrap();
        assert!(plain.len() > 2 * GZIP_CHUNK, "{} bytes", plain.len());
        let routes = Routes::new().route(METRICS_PATH, metrics_handler(registries));

        let gzipped = routes
            .answer_accepting(&Method::GET, METRICS_PATH, None, true)
            .await;
        assert_eq!(gzipped.status, StatusCode::OK);
        assert_eq!(gzipped.content_encoding, Some("gzip"));
        assert!(
            gzipped.body.len() * 5 < plain.len(),
            "{} bytes",
            gzipped.body.len()
        );
        assert_eq!(gunzip(&gzipped.body), plain);

        let answer = routes.answer(&Method::GET, METRICS_PATH, None).await;
        assert_eq!(answer.content_encoding, None);
        assert_eq!(answer.body, Bytes::from(plain));
    }

    #[tokio::test]
    async fn the_server_sends_content_encoding_when_the_request_accepts_gzip() {
        use tokio::io::AsyncWriteExt as _;
        let registries = counters(3);
        let server = serve(
            "127.0.0.1:0".parse().unwrap(),
            Routes::new().route(METRICS_PATH, metrics_handler(registries.clone())),
        )
        .await
        .unwrap();
        let mut client = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        client
            .write_all(
                b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
            )
            .await
            .unwrap();
        let answer = read_to_close(&mut client).await;
        let split = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&answer[..split]).to_lowercase();
        assert!(head.starts_with("http/1.1 200 ok"), "{head}");
        assert!(head.contains("content-encoding: gzip"), "{head}");
        let text = gunzip(&answer[split + 4..]);
        assert!(
            text.contains("a_counter_with_a_long_name_to_fill_the_text_2_total 2"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        // Without the header: the text as it is.
        let (status, body) = get(
            &format!("{}{METRICS_PATH}", server.url()),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(String::from_utf8_lossy(&body), registries.encode().unwrap());
        server.shutdown().await;
    }

    #[tokio::test]
    async fn a_client_that_sends_half_a_header_is_dropped_at_the_header_timeout() {
        use tokio::io::AsyncWriteExt as _;
        let timeout = Duration::from_millis(300);
        let server = serve_with(
            "127.0.0.1:0".parse().unwrap(),
            ok_routes(),
            ServeLimits {
                header_read_timeout: timeout,
                max_connections: 4,
            },
        )
        .await
        .unwrap();
        let mut slow = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        let started = std::time::Instant::now();
        slow.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let answer = read_to_close(&mut slow).await;
        let waited = started.elapsed();
        assert!(waited >= timeout, "closed after {waited:?}");
        assert!(
            !String::from_utf8_lossy(&answer).contains("200 OK"),
            "{answer:?}"
        );
        // A whole request is still served.
        let (status, body) = get(&format!("{}/ok", server.url()), Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!((status, body), (StatusCode::OK, Bytes::from("ok\n")));
        server.shutdown().await;
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed_at_once() {
        let server = serve_with(
            "127.0.0.1:0".parse().unwrap(),
            ok_routes(),
            ServeLimits {
                header_read_timeout: Duration::from_mins(1),
                max_connections: 2,
            },
        )
        .await
        .unwrap();
        // Two clients hold their connections open without a request.
        let first = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        let _second = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        let mut third = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        let answer = read_to_close(&mut third).await;
        assert!(answer.is_empty(), "{answer:?}");
        assert_eq!(server.refused(), 1);
        // One leaves: a request gets through again (once the server has seen it go).
        drop(first);
        let got_through = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Ok((StatusCode::OK, _)) =
                    get(&format!("{}/ok", server.url()), Duration::from_secs(5)).await
                {
                    return;
                }
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(
            got_through.is_ok(),
            "no request got through after a slot freed"
        );
        server.shutdown().await;
    }
}
