//! The daemon's Kubernetes clients: kube's default stack (TLS, auth, base URI) with our tower
//! layers on top.
//!
//! ```text
//! daemon client (actors' writes, watchers, probes):
//!   request -> RateLimit (KUBE_CLIENT_QPS / KUBE_CLIENT_BURST token bucket, waits in poll_ready)
//!           -> Gate (writes refused once the leadership gate closed)
//!           -> Deadline (headers within REQUEST_TIMEOUT; a non-watch body within it too)
//!           -> kube's stack (connect timeout CONNECT_TIMEOUT)
//! lease client (leader election only): Deadline -> kube's stack, no rate limit, no gate
//! ```
//!
//! As Karpenter does, leader election gets a client of its own that the rate limit does not
//! slow: a renewal queued behind a burst of actor writes could miss the renew deadline. A watch
//! passes the rate limit once, when it is opened; its events arrive on the open response and
//! pass no layer. Its body has no deadline: kube-runtime's watcher ends a watch that has been
//! silent for longer than its server-side timeout plus a margin, and the ingress's stale-cache
//! check reports one that keeps failing.
//!
//! The layers are kube-independent tower services, so tests drive them with paused tokio time.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use tokio::time::{Instant, Sleep};
use tower_layer::Layer;
use tower_service::Service;

use super::leader::{LeadershipGate, NotLeading};

/// How long a TCP and TLS connection to the API server may take (kube's default is 30 s; a
/// lease renewal must fit within the 10 s renew deadline, so a connection that takes longer is
/// better retried).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may wait for its response headers, and a non-watch request for its whole
/// body: a page of 500 objects or a write answers in well under a second on a healthy API
/// server; one that has not answered in 30 s is hung, and the caller's retry is better.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Failures of our layers, as the kube client reports them (`kube::Error::Service`).
#[derive(Debug, thiserror::Error)]
pub enum ClientLayerError {
    #[error("no response from the API server within {0:?}")]
    Timeout(Duration),
    #[error("write refused")]
    NotLeading(#[source] NotLeading),
}

impl ClientLayerError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Timeout(_) => "timeout",
            Self::NotLeading(error) => error.category(),
        }
    }
}

/// Whether a request opens a watch (`?watch=true`, `?watch=1`).
fn is_watch<B>(request: &Request<B>) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1"))
    })
}

/// Reads do not change the cluster: a standby keeps its cache warm with them.
fn is_read<B>(request: &Request<B>) -> bool {
    matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    )
}

// ---------------------------------------------------------------------------------------------
// Rate limit

/// A token bucket: `burst` tokens, refilled at `qps` a second; a request takes one, and when
/// none is left it reserves the next (the bucket goes negative) and waits for it, so waiting
/// requests are served in order at `qps` (client-go's `flowcontrol` token bucket).
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
    admitted: AtomicU64,
}

impl TokenBucket {
    /// A full bucket (`qps` and `burst` at least 1).
    #[must_use]
    pub fn new(qps: u32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: f64::from(qps.max(1)),
            burst,
            tokens: burst,
            last: Instant::now(),
            admitted: AtomicU64::new(0),
        }
    }

    /// Takes a token; returns how long to wait until it is due.
    pub fn reserve(&mut self) -> Duration {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        self.admitted.fetch_add(1, Ordering::Relaxed);
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }

    /// Requests admitted so far (each counted when it reserved its token).
    #[must_use]
    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }
}

/// The rate-limit layer; clones share one bucket.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl RateLimitLayer {
    #[must_use]
    pub fn new(qps: u32, burst: u32) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(TokenBucket::new(qps, burst))),
        }
    }

    /// Requests admitted so far.
    #[must_use]
    pub fn admitted(&self) -> u64 {
        self.bucket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admitted()
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            bucket: Arc::clone(&self.bucket),
            reserved: false,
            waiting: None,
        }
    }
}

/// A service that waits for its token in `poll_ready` (kube's client buffers requests in front
/// of it, so callers queue there in order).
#[derive(Debug)]
pub struct RateLimit<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    /// A token is reserved for the next call.
    reserved: bool,
    waiting: Option<Pin<Box<Sleep>>>,
}

impl<S, B> Service<Request<B>> for RateLimit<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.reserved {
            let wait = self
                .bucket
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .reserve();
            self.reserved = true;
            if !wait.is_zero() {
                self.waiting = Some(Box::pin(tokio::time::sleep(wait)));
            }
        }
        if let Some(sleep) = self.waiting.as_mut() {
            ready!(sleep.as_mut().poll(cx));
            self.waiting = None;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        self.reserved = false;
        self.inner.call(request)
    }
}

// ---------------------------------------------------------------------------------------------
// Leadership gate

/// Refuses writes while the gate is closed; reads pass.
#[derive(Debug, Clone)]
pub struct GateLayer {
    gate: LeadershipGate,
}

impl GateLayer {
    #[must_use]
    pub fn new(gate: LeadershipGate) -> Self {
        Self { gate }
    }
}

impl<S> Layer<S> for GateLayer {
    type Service = Gate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Gate {
            inner,
            gate: self.gate.clone(),
        }
    }
}

/// See [`GateLayer`]. The check runs in `call`, after the rate limit's wait: a write that
/// waited past the renew deadline is refused.
#[derive(Debug)]
pub struct Gate<S> {
    inner: S,
    gate: LeadershipGate,
}

impl<S, B> Service<Request<B>> for Gate<S>
where
    S: Service<Request<B>>,
    S::Response: Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if !is_read(&request)
            && let Err(refused) = self.gate.check()
        {
            tracing::debug!(method = %request.method(), path = request.uri().path(), "write refused: not leading");
            return Box::pin(std::future::ready(Err(
                Box::new(ClientLayerError::NotLeading(refused)) as BoxError,
            )));
        }
        let response = self.inner.call(request);
        Box::pin(async move { response.await.map_err(Into::into) })
    }
}

// ---------------------------------------------------------------------------------------------
// Deadline

/// Bounds each request by `timeout`: its response headers, and a non-watch response's body.
#[derive(Debug, Clone, Copy)]
pub struct DeadlineLayer {
    timeout: Duration,
}

impl DeadlineLayer {
    #[must_use]
    pub fn new(timeout: Duration) -> Self {
        Self { timeout }
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Deadline {
            inner,
            timeout: self.timeout,
        }
    }
}

/// See [`DeadlineLayer`].
#[derive(Debug)]
pub struct Deadline<S> {
    inner: S,
    timeout: Duration,
}

impl<S, B, RB> Service<Request<B>> for Deadline<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = Response<DeadlineBody<RB>>;
    type Error = BoxError;
    type Future = BoxFuture<Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let timeout = self.timeout;
        let until = Instant::now() + timeout;
        let watch = is_watch(&request);
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = tokio::time::timeout_at(until, response)
                .await
                .map_err(|_| Box::new(ClientLayerError::Timeout(timeout)) as BoxError)?
                .map_err(Into::into)?;
            Ok(response.map(|body| DeadlineBody {
                inner: body,
                deadline: (!watch).then(|| (Box::pin(tokio::time::sleep_until(until)), timeout)),
            }))
        })
    }
}

/// A response body that fails once its deadline passes (none for a watch).
#[derive(Debug)]
pub struct DeadlineBody<B> {
    inner: B,
    deadline: Option<(Pin<Box<Sleep>>, Duration)>,
}

impl<B> http_body::Body for DeadlineBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if let Some((sleep, timeout)) = self.deadline.as_mut()
            && sleep.as_mut().poll(cx).is_ready()
        {
            let timeout = *timeout;
            return Poll::Ready(Some(Err(Box::new(ClientLayerError::Timeout(timeout)))));
        }
        Pin::new(&mut self.inner).poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

// ---------------------------------------------------------------------------------------------
// Clients

/// What the daemon's client is built with.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// `KUBE_CLIENT_QPS`.
    pub qps: u32,
    /// `KUBE_CLIENT_BURST`.
    pub burst: u32,
    /// Writes go out only while this is open.
    pub gate: LeadershipGate,
}

/// The two clients of `karpenter run`.
#[derive(Clone)]
pub struct DaemonClients {
    /// Rate-limited and gated: the actors, the watchers, the probes.
    pub daemon: kube::Client,
    /// Leader election alone: neither rate-limited nor gated.
    pub lease: kube::Client,
    /// The daemon client's rate limit (its admitted count is a metric of tests).
    pub rate_limit: RateLimitLayer,
}

impl std::fmt::Debug for DaemonClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonClients")
            .field("rate_limit", &self.rate_limit)
            .finish_non_exhaustive()
    }
}

/// Builds both clients from one configuration.
pub fn daemon_clients(
    mut config: kube::Config,
    options: &ClientOptions,
) -> Result<DaemonClients, kube::Error> {
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    let rate_limit = RateLimitLayer::new(options.qps, options.burst);
    let daemon = kube::client::ClientBuilder::try_from(config.clone())?
        .with_layer(&DeadlineLayer::new(REQUEST_TIMEOUT))
        .with_layer(&GateLayer::new(options.gate.clone()))
        .with_layer(&rate_limit)
        .build();
    let lease = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&DeadlineLayer::new(REQUEST_TIMEOUT))
        .build();
    Ok(DaemonClients {
        daemon,
        lease,
        rate_limit,
    })
}

/// The daemon client's layers over another service (the emulator's, in tests): what
/// [`daemon_clients`] puts over kube's own stack.
pub fn layered_client<S, RB>(service: S, options: &ClientOptions) -> (kube::Client, RateLimitLayer)
where
    S: Service<Request<kube::client::Body>, Response = Response<RB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    RB: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    RB::Error: Into<BoxError>,
{
    let rate_limit = RateLimitLayer::new(options.qps, options.burst);
    let client = kube::client::ClientBuilder::new(service, "default")
        .with_layer(&DeadlineLayer::new(REQUEST_TIMEOUT))
        .with_layer(&GateLayer::new(options.gate.clone()))
        .with_layer(&rate_limit)
        .build();
    (client, rate_limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    /// A service that answers at once and records when each request reached it.
    #[derive(Debug, Clone, Default)]
    struct Recorder {
        seen: Arc<Mutex<Vec<(Method, Duration)>>>,
        start: Option<Instant>,
    }

    impl Service<Request<()>> for Recorder {
        type Response = Response<http_body_util::Empty<Bytes>>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<()>) -> Self::Future {
            let at = self.start.map_or(Duration::ZERO, |s| s.elapsed());
            self.seen
                .lock()
                .unwrap()
                .push((request.method().clone(), at));
            std::future::ready(Ok(Response::new(http_body_util::Empty::new())))
        }
    }

    fn get(path: &str) -> Request<()> {
        Request::get(path).body(()).unwrap()
    }

    async fn send<S: Service<Request<()>>>(service: &mut S, request: Request<()>) -> S::Response
    where
        S::Error: std::fmt::Debug,
    {
        std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .unwrap();
        service.call(request).await.unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_limit_lets_a_burst_through_then_spaces_requests_at_the_qps() {
        let recorder = Recorder {
            start: Some(Instant::now()),
            ..Recorder::default()
        };
        let seen = Arc::clone(&recorder.seen);
        let layer = RateLimitLayer::new(2, 3);
        let mut service = layer.layer(recorder);
        for _ in 0..6 {
            send(&mut service, get("/api/v1/pods")).await;
        }
        let at: Vec<u128> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|(_, d)| d.as_millis())
            .collect();
        assert_eq!(
            at,
            [0, 0, 0, 500, 1000, 1500],
            "burst of 3, then 2 a second"
        );
        assert_eq!(layer.admitted(), 6);
        // Idle for long enough: the bucket is full again, but never above the burst.
        tokio::time::sleep(Duration::from_mins(1)).await;
        seen.lock().unwrap().clear();
        let start = Instant::now();
        for _ in 0..4 {
            send(&mut service, get("/api/v1/pods")).await;
        }
        let waited = start.elapsed();
        assert_eq!(
            waited,
            Duration::from_millis(500),
            "three free, the fourth waits"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_gate_refuses_writes_when_closed_and_lets_reads_through() {
        let gate = LeadershipGate::new();
        let recorder = Recorder::default();
        let seen = Arc::clone(&recorder.seen);
        let mut service = GateLayer::new(gate.clone()).layer(recorder);
        let post = || {
            Request::post("/api/v1/namespaces/default/events")
                .body(())
                .unwrap()
        };
        std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .unwrap();
        let refused = service.call(post()).await.unwrap_err();
        assert!(refused.to_string().contains("write refused"), "{refused}");
        send(&mut service, get("/api/v1/pods")).await;
        gate.open_until(Instant::now() + Duration::from_secs(10));
        send(&mut service, post()).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .unwrap();
        assert!(
            service.call(post()).await.is_err(),
            "closed at the deadline"
        );
        let methods: Vec<Method> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|(m, _)| m.clone())
            .collect();
        assert_eq!(methods, [Method::GET, Method::POST]);
    }

    /// A service that never answers.
    #[derive(Debug, Clone)]
    struct Hung;

    impl Service<Request<()>> for Hung {
        type Response = Response<http_body_util::Empty<Bytes>>;
        type Error = Infallible;
        type Future = std::future::Pending<Result<Self::Response, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            std::future::pending()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_without_an_answer_fails_at_the_deadline() {
        let mut service = DeadlineLayer::new(Duration::from_secs(30)).layer(Hung);
        let start = Instant::now();
        std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .unwrap();
        let error = service.call(get("/api/v1/pods")).await.unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_secs(30));
        assert!(error.to_string().contains("30s"), "{error}");
    }

    #[test]
    fn watches_are_told_apart_by_their_query() {
        assert!(is_watch(&get("/api/v1/pods?watch=true&resourceVersion=5")));
        assert!(is_watch(&get(
            "/api/v1/pods?allowWatchBookmarks=true&watch=1"
        )));
        assert!(!is_watch(&get("/api/v1/pods?limit=500")));
        assert!(!is_watch(&get("/api/v1/pods")));
    }
}
