//! Watches: resume from a resourceVersion, 410 Gone and the watcher's re-list, bookmarks,
//! selector transitions, streaming lists.

use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use karpenter::emulator::{EmulatorConfig, Verb};
use kube::api::{Patch, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use kube::{Api, ResourceExt as _};
use serde_json::json;

use crate::support::{cluster, cluster_with, create_pod};

/// The next `n` events of a watch.
async fn next_events(
    stream: &mut (impl futures::Stream<Item = Result<WatchEvent<Pod>, kube::Error>> + Unpin),
    n: usize,
) -> Vec<WatchEvent<Pod>> {
    let mut out = Vec::new();
    while out.len() < n {
        out.push(
            stream
                .try_next()
                .await
                .unwrap()
                .expect("the watch ended early"),
        );
    }
    out
}

fn describe(event: &WatchEvent<Pod>) -> String {
    match event {
        WatchEvent::Added(p) => format!("ADDED {}", p.name_any()),
        WatchEvent::Modified(p) => format!("MODIFIED {}", p.name_any()),
        WatchEvent::Deleted(p) => format!("DELETED {}", p.name_any()),
        WatchEvent::Bookmark(b) => format!("BOOKMARK {}", b.metadata.resource_version),
        WatchEvent::Error(e) => format!("ERROR {}", e.code),
    }
}

#[tokio::test]
async fn a_watch_resumes_after_the_given_resource_version() {
    let (_emulator, client) = cluster();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let a = create_pod(&client, "a", json!({})).await;
    create_pod(&client, "b", json!({})).await;
    pods.patch(
        "a",
        &kube::api::PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { "x": "y" } } })),
    )
    .await
    .unwrap();
    let mut stream = pods
        .watch(&WatchParams::default(), &a.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    let events: Vec<String> = next_events(&mut stream, 2)
        .await
        .iter()
        .map(describe)
        .collect();
    assert_eq!(events, ["ADDED b", "MODIFIED a"]);
    pods.delete("b", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let events: Vec<String> = next_events(&mut stream, 1)
        .await
        .iter()
        .map(describe)
        .collect();
    assert_eq!(events, ["DELETED b"]);
}

#[tokio::test]
async fn a_watch_from_a_compacted_resource_version_gets_410_gone() {
    let config = EmulatorConfig {
        history_limit: 2,
        ..EmulatorConfig::default()
    };
    let (_emulator, client) = cluster_with(config);
    let first = create_pod(&client, "p0", json!({})).await;
    for i in 1..5 {
        create_pod(&client, &format!("p{i}"), json!({})).await;
    }
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut stream = pods
        .watch(&WatchParams::default(), &first.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    let events = next_events(&mut stream, 1).await;
    assert!(
        matches!(&events[0], WatchEvent::Error(e) if e.code == 410),
        "{}",
        describe(&events[0])
    );
}

#[tokio::test]
async fn an_open_watch_keeps_the_history_it_has_yet_to_read_and_releases_it_when_closed() {
    let config = EmulatorConfig {
        history_limit: 100,
        history_read_limit: 1,
        ..EmulatorConfig::default()
    };
    let (_emulator, client) = cluster_with(config);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let first = create_pod(&client, "p0", json!({})).await;
    let from = first.resource_version().unwrap();
    let unread = pods.watch(&WatchParams::default(), &from).await.unwrap();
    for i in 1..5 {
        create_pod(&client, &format!("p{i}"), json!({})).await;
    }
    // Nobody read p1..p4 yet, so a second watch from the same point still gets them all.
    let mut second = pods
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    let events: Vec<String> = next_events(&mut second, 4)
        .await
        .iter()
        .map(describe)
        .collect();
    assert_eq!(events, ["ADDED p1", "ADDED p2", "ADDED p3", "ADDED p4"]);
    drop((unread, second));
    // Closed, they hold nothing: the next write trims the history to its last event.
    let mut gone = false;
    for i in 5..100 {
        create_pod(&client, &format!("p{i}"), json!({})).await;
        let mut stream = pods
            .watch(&WatchParams::default(), &from)
            .await
            .unwrap()
            .boxed();
        if matches!(&next_events(&mut stream, 1).await[0], WatchEvent::Error(e) if e.code == 410) {
            gone = true;
            break;
        }
        // The server side of a dropped watch ends when the connection notices.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "the closed watches still hold the history");
}

/// Drives a reflector stream until the watcher finishes a (re-)list.
async fn until_listed<S>(stream: &mut S)
where
    S: futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Unpin,
{
    let listed = async {
        while let Some(event) = stream.next().await {
            if matches!(event, Ok(watcher::Event::InitDone)) {
                return;
            }
        }
        panic!("the watcher ended");
    };
    // A guard against a hang, not a timing assertion.
    tokio::time::timeout(Duration::from_secs(30), listed)
        .await
        .expect("no re-list");
}

#[tokio::test]
async fn the_watcher_relists_after_410_and_its_store_catches_up() {
    let (emulator, client) = cluster();
    create_pod(&client, "before", json!({})).await;
    let (store, writer) = reflector::store::<Pod>();
    let api: Api<Pod> = Api::all(client.clone());
    let mut stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    )
    .boxed();
    until_listed(&mut stream).await;
    assert_eq!(store.len(), 1);
    // The stream is lazy: the watcher resumes from its list's resourceVersion only when polled
    // again, after a write and a compaction moved the history past it. Resuming fails with 410
    // and the watcher lists again.
    create_pod(&client, "after", json!({})).await;
    emulator.compact();
    until_listed(&mut stream).await;
    let mut names: Vec<String> = store.state().iter().map(|p| p.name_any()).collect();
    names.sort();
    assert_eq!(names, ["after", "before"]);
    let lists = emulator
        .requests()
        .iter()
        .filter(|r| r.verb == Verb::List && r.resource.as_deref() == Some("pods"))
        .count();
    assert_eq!(lists, 2);
}

#[tokio::test(start_paused = true)]
async fn an_idle_watch_with_bookmarks_gets_one_with_the_latest_resource_version() {
    let (emulator, client) = cluster();
    let pod = create_pod(&client, "a", json!({})).await;
    create_pod(&client, "b", json!({})).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut stream = pods
        .watch(&WatchParams::default(), &pod.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    let events = next_events(&mut stream, 2).await;
    assert_eq!(describe(&events[0]), "ADDED b");
    let WatchEvent::Bookmark(bookmark) = &events[1] else {
        panic!("expected a bookmark, got {}", describe(&events[1]));
    };
    assert_eq!(
        bookmark.metadata.resource_version,
        emulator.resource_version().to_string()
    );
}

#[tokio::test]
async fn a_filtered_watch_sees_objects_leave_and_enter_its_selection() {
    let (_emulator, client) = cluster();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let start = create_pod(&client, "web", json!({ "app": "web" })).await;
    let mut stream = pods
        .watch(
            &WatchParams::default().labels("app in (web)"),
            &start.resource_version().unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    let relabel = |app: &str| Patch::Merge(json!({ "metadata": { "labels": { "app": app } } }));
    pods.patch("web", &kube::api::PatchParams::default(), &relabel("db"))
        .await
        .unwrap();
    pods.patch("web", &kube::api::PatchParams::default(), &relabel("web"))
        .await
        .unwrap();
    let events: Vec<String> = next_events(&mut stream, 2)
        .await
        .iter()
        .map(describe)
        .collect();
    assert_eq!(events, ["DELETED web", "ADDED web"]);
}

#[tokio::test]
async fn a_streaming_list_watcher_fills_its_store() {
    let (_emulator, client) = cluster();
    create_pod(&client, "a", json!({})).await;
    create_pod(&client, "b", json!({})).await;
    let (store, writer) = reflector::store::<Pod>();
    let api: Api<Pod> = Api::all(client.clone());
    let mut stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default().streaming_lists()),
    )
    .boxed();
    until_listed(&mut stream).await;
    assert_eq!(store.len(), 2);
}
