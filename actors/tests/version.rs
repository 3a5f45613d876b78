//! The `VersionActor` over a fake version source on tokio's paused clock: it reads the version
//! when it starts and then every five minutes exactly, applies a change and has the classes
//! nudged only then, and keeps the version in use when a read fails or finds an unsupported
//! version (logging each once, in Karpenter's `providers.version` context).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use karpenter_actors::deps::ClusterVersion;
use karpenter_actors::logs::{KarpenterJson, LogLine, MemorySink, level_filter};
use karpenter_actors::runtime::{ActorKit, GroupSpec, KitOptions, RootGroup};
use karpenter_actors::testing::{FakeVersionSource, on_paused_clock};
use karpenter_actors::version::{VERSION_KEY, VERSION_REFRESH, VersionActor, VersionDeps};
use karpenter_config::LogLevel;
use karpenter_core::domain::version::KubernetesVersion;
use prometheus_client::registry::Registry;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{Layer as _, Registry as Subscribers};

/// Karpenter's `providers.version` period.
const FIVE_MINUTES: Duration = Duration::from_mins(5);

fn v(text: &str) -> KubernetesVersion {
    KubernetesVersion::parse(text).unwrap()
}

/// A `VersionActor` over `source`, its version starting at `start`; returns the version it
/// keeps, the versions it announced (what the daemon would nudge the classes for) and its kit.
struct Running {
    version: ClusterVersion,
    announced: Arc<Mutex<Vec<KubernetesVersion>>>,
    kit: ActorKit,
    _root: RootGroup,
}

fn start(source: &Arc<FakeVersionSource>, start: &str, minimum: Option<&str>) -> Running {
    let mut registry = Registry::default();
    let kit = ActorKit::new(&mut registry, KitOptions::default());
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let version = ClusterVersion::new(v(start));
    let announced = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&announced);
    root.spawn::<VersionActor>(
        VERSION_KEY,
        VersionDeps {
            source: Arc::clone(source) as _,
            version: version.clone(),
            minimum: minimum.map(v),
            on_change: Arc::new(move |version| recorded.lock().unwrap().push(version)),
        },
    )
    .unwrap();
    Running {
        version,
        announced,
        kit,
        _root: root,
    }
}

impl Running {
    fn announced(&self) -> Vec<KubernetesVersion> {
        self.announced.lock().unwrap().clone()
    }

    fn errors(&self) -> u64 {
        self.kit
            .snapshot()
            .actor("VersionActor", VERSION_KEY)
            .unwrap()
            .errors
    }
}

#[test]
fn the_version_is_read_at_start_then_every_five_minutes_and_a_change_nudges_once() {
    on_paused_clock(read_every_five_minutes).unwrap();
}

async fn read_every_five_minutes() {
    assert_eq!(VERSION_REFRESH, FIVE_MINUTES, "Karpenter's period");
    let source = Arc::new(FakeVersionSource::new(v("1.32")));
    let running = start(&source, "1.32", None);

    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(source.reads().len(), 1, "read when it starts");
    assert!(running.announced().is_empty(), "unchanged: no nudge");

    tokio::time::sleep(FIVE_MINUTES.checked_sub(Duration::from_secs(2)).unwrap()).await;
    assert_eq!(source.reads().len(), 1, "nothing before five minutes");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(source.reads().len(), 2);
    assert!(running.announced().is_empty());

    // The control plane is upgraded: the next read applies it and announces it once.
    source.set(v("1.33"));
    tokio::time::sleep(FIVE_MINUTES).await;
    assert_eq!(source.reads().len(), 3);
    assert_eq!(running.version.get(), v("1.33"));
    assert_eq!(running.announced(), [v("1.33")]);
    tokio::time::sleep(FIVE_MINUTES * 2).await;
    assert_eq!(source.reads().len(), 5);
    assert_eq!(
        running.announced(),
        [v("1.33")],
        "the same version again: no nudge"
    );

    let reads = source.reads();
    for pair in reads.windows(2) {
        assert_eq!(pair[1] - pair[0], FIVE_MINUTES, "{reads:?}");
    }
    assert_eq!(running.errors(), 0);
}

/// Installs Karpenter's JSON layer for this thread (the actix system runs every actor on it).
fn capture() -> (MemorySink, tracing::subscriber::DefaultGuard) {
    let memory = MemorySink::new();
    let subscriber = Subscribers::default().with(
        KarpenterJson::new(vec![memory.sink()])
            .sampling(false)
            .with_filter(level_filter(LogLevel::Info)),
    );
    (memory, tracing::subscriber::set_default(subscriber))
}

fn with_message<'a>(lines: &'a [LogLine], message: &str) -> Vec<&'a LogLine> {
    lines
        .iter()
        .filter(|l| l.str("message") == Some(message))
        .collect()
}

#[actix::test]
async fn a_failed_read_or_an_unsupported_version_keeps_the_version_in_use() {
    tokio::time::pause();
    let (memory, _logs) = capture();
    let source = Arc::new(FakeVersionSource::new(v("1.31")));
    source.fail_next();
    source.then([Ok(v("1.20")), Ok(v("1.20")), Ok(v("1.29"))]);
    let running = start(&source, "1.32", Some("1.30"));

    // A failed read: an error line, the version stays; the next tick reads again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(running.version.get(), v("1.32"));
    assert_eq!(running.errors(), 1);
    let errors = with_message(&memory.lines(), "Reconciler error")
        .into_iter()
        .map(|l| l.str("error").unwrap().to_owned())
        .collect::<Vec<_>>();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("getting kubernetes version from the kubernetes api"),
        "{errors:?}"
    );

    // 1.20 is below Karpenter's minimum: refused, and logged once however often it is read.
    tokio::time::sleep(VERSION_REFRESH * 2).await;
    assert_eq!(source.reads().len(), 3);
    assert_eq!(running.version.get(), v("1.32"));
    // 1.29 is supported by Karpenter but below KUBERNETES_MIN_VERSION.
    tokio::time::sleep(VERSION_REFRESH).await;
    assert_eq!(running.version.get(), v("1.32"));
    // Then a supported version is applied.
    tokio::time::sleep(VERSION_REFRESH).await;
    assert_eq!(source.reads().len(), 5);
    assert_eq!(running.version.get(), v("1.31"));
    assert_eq!(running.announced(), [v("1.31")]);

    let lines = memory.lines();
    let errors = with_message(&lines, "Reconciler error");
    assert_eq!(errors.len(), 3, "{lines:#?}");
    let refused = errors[1].str("error").unwrap();
    assert!(
        refused.starts_with("validating kubernetes version"),
        "{refused}"
    );
    assert!(
        refused.contains("kubernetes 1.20 is not supported"),
        "{refused}"
    );
    let below_floor = errors[2].str("error").unwrap();
    assert!(below_floor.contains("1.30 or newer"), "{below_floor}");
    for line in &errors {
        assert_eq!(line.str("level"), Some("ERROR"));
        assert_eq!(line.str("controller"), Some("providers.version"));
    }
    let discovered = with_message(&lines, "discovered kubernetes version");
    assert_eq!(discovered.len(), 1, "{lines:#?}");
    assert_eq!(discovered[0].str("level"), Some("INFO"));
    assert_eq!(discovered[0].str("version"), Some("1.31"));
    assert_eq!(discovered[0].str("controller"), Some("providers.version"));
    assert_eq!(running.errors(), 3);
}
