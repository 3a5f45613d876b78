//! Request batching, as Karpenter's `pkg/batcher` (reference 4.3): requests with equal keys that
//! arrive close together become one call. A bucket is executed when no request joined it for the
//! idle time, when the oldest waited the maximum time, or when it is full.
//!
//! One task owns the buckets; callers send (key, item) with a reply channel and await their own
//! output. The executor gets the key and the items in arrival order and returns one output per
//! item, in the same order. Timers are tokio's, so paused-time tests control the windows.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// When a bucket is executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchWindow {
    pub idle: Duration,
    pub max_wait: Duration,
    pub max_items: usize,
}

/// Karpenter's CreateFleet batcher: 35 ms idle, 1 s max, 1000 requests.
pub const CREATE_FLEET_WINDOW: BatchWindow = BatchWindow {
    idle: Duration::from_millis(35),
    max_wait: Duration::from_secs(1),
    max_items: 1000,
};
/// Karpenter's `DescribeInstances` batcher: 100 ms idle, 1 s max, 500 ids.
pub const DESCRIBE_INSTANCES_WINDOW: BatchWindow = BatchWindow {
    idle: Duration::from_millis(100),
    max_wait: Duration::from_secs(1),
    max_items: 500,
};
/// Karpenter's `TerminateInstances` batcher: 100 ms idle, 1 s max, 500 ids.
pub const TERMINATE_INSTANCES_WINDOW: BatchWindow = DESCRIBE_INSTANCES_WINDOW;

/// A boxed executor future.
pub type BatchFuture<O> = Pin<Box<dyn Future<Output = Vec<O>> + Send>>;
/// Runs one bucket.
pub type Executor<K, I, O> = Arc<dyn Fn(K, Vec<I>) -> BatchFuture<O> + Send + Sync>;

/// The batcher task went away, or the executor returned fewer outputs than items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("batch {name} dropped the request")]
pub struct BatchDropped {
    pub name: &'static str,
}

type Request<K, I, O> = (K, I, oneshot::Sender<O>);

struct Bucket<I, O> {
    items: Vec<(I, oneshot::Sender<O>)>,
    started: Instant,
    last: Instant,
    /// Opening order: buckets due together run in the order they opened, so a run is
    /// reproducible (the map's own order is random per process).
    opened: u64,
}

impl<I, O> Bucket<I, O> {
    fn deadline(&self, window: BatchWindow) -> Instant {
        (self.last + window.idle).min(self.started + window.max_wait)
    }
}

/// A batcher for one kind of call.
pub struct Batcher<K, I, O> {
    name: &'static str,
    requests: mpsc::UnboundedSender<Request<K, I, O>>,
}

impl<K, I, O> std::fmt::Debug for Batcher<K, I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<K, I, O> Batcher<K, I, O>
where
    K: Clone + Eq + Hash + Send + 'static,
    I: Send + 'static,
    O: Send + 'static,
{
    /// Starts the batcher task on the current tokio runtime; it ends when the batcher is dropped.
    #[must_use]
    pub fn spawn(name: &'static str, window: BatchWindow, executor: Executor<K, I, O>) -> Self {
        let (requests, receiver) = mpsc::unbounded_channel();
        tokio::spawn(run(name, window, executor, receiver));
        Batcher { name, requests }
    }

    /// Adds a request and waits for its output.
    pub async fn add(&self, key: K, item: I) -> Result<O, BatchDropped> {
        let (reply, output) = oneshot::channel();
        let dropped = BatchDropped { name: self.name };
        self.requests
            .send((key, item, reply))
            .map_err(|_| dropped)?;
        output.await.map_err(|_| dropped)
    }
}

fn execute<K, I, O>(name: &'static str, executor: &Executor<K, I, O>, key: K, bucket: Bucket<I, O>)
where
    K: Send + 'static,
    I: Send + 'static,
    O: Send + 'static,
{
    let (items, replies): (Vec<I>, Vec<oneshot::Sender<O>>) = bucket.items.into_iter().unzip();
    tracing::debug!(batcher = name, batch_size = items.len(), "executing batch");
    let run = executor(key, items);
    tokio::spawn(async move {
        for (reply, output) in replies.into_iter().zip(run.await) {
            // The caller may have given up waiting; nothing else needs the output.
            let _ = reply.send(output);
        }
    });
}

async fn run<K, I, O>(
    name: &'static str,
    window: BatchWindow,
    executor: Executor<K, I, O>,
    mut receiver: mpsc::UnboundedReceiver<Request<K, I, O>>,
) where
    K: Clone + Eq + Hash + Send + 'static,
    I: Send + 'static,
    O: Send + 'static,
{
    let mut buckets: HashMap<K, Bucket<I, O>> = HashMap::new();
    let mut opened: u64 = 0;
    loop {
        let next = buckets.values().map(|b| b.deadline(window)).min();
        tokio::select! {
            request = receiver.recv() => {
                let Some((key, item, reply)) = request else {
                    let mut left: Vec<(K, Bucket<I, O>)> = buckets.drain().collect();
                    left.sort_by_key(|(_, b)| b.opened);
                    for (key, bucket) in left {
                        execute(name, &executor, key, bucket);
                    }
                    return;
                };
                let now = Instant::now();
                let bucket = buckets.entry(key.clone()).or_insert_with(|| {
                    opened += 1;
                    Bucket {
                        items: Vec::new(),
                        started: now,
                        last: now,
                        opened,
                    }
                });
                bucket.items.push((item, reply));
                bucket.last = now;
                if bucket.items.len() >= window.max_items
                    && let Some(full) = buckets.remove(&key)
                {
                    execute(name, &executor, key, full);
                }
            }
            () = async { tokio::time::sleep_until(next.unwrap_or_else(Instant::now)).await }, if next.is_some() => {
                let now = Instant::now();
                let mut due: Vec<(u64, K)> = buckets
                    .iter()
                    .filter(|(_, b)| b.deadline(window) <= now)
                    .map(|(k, b)| (b.opened, k.clone()))
                    .collect();
                due.sort_by_key(|(opened, _)| *opened);
                for (_, key) in due {
                    if let Some(bucket) = buckets.remove(&key) {
                        execute(name, &executor, key, bucket);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    type Calls = Arc<Mutex<Vec<Vec<u32>>>>;

    fn recording() -> (Executor<u8, u32, u32>, Calls) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&calls);
        let executor: Executor<u8, u32, u32> = Arc::new(move |_key, items: Vec<u32>| {
            seen.lock().unwrap().push(items.clone());
            Box::pin(async move { items.into_iter().map(|i| i * 10).collect() })
        });
        (executor, calls)
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_with_one_key_become_one_call() {
        let (executor, calls) = recording();
        let batcher = Arc::new(Batcher::spawn("test", CREATE_FLEET_WINDOW, executor));
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let b = Arc::clone(&batcher);
                tokio::spawn(async move { b.add(1, i).await })
            })
            .collect();
        for (i, handle) in handles.into_iter().enumerate() {
            assert_eq!(handle.await.unwrap(), Ok(u32::try_from(i).unwrap() * 10));
        }
        assert_eq!(calls.lock().unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn different_keys_and_idle_gaps_split_batches() {
        let (executor, calls) = recording();
        let batcher = Arc::new(Batcher::spawn("test", CREATE_FLEET_WINDOW, executor));
        let (a, b) = tokio::join!(batcher.add(1, 1), batcher.add(2, 2));
        assert_eq!((a, b), (Ok(10), Ok(20)));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(batcher.add(1, 3).await, Ok(30));
        assert_eq!(calls.lock().unwrap().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_is_cut_at_the_maximum_wait() {
        let (executor, calls) = recording();
        let batcher = Arc::new(Batcher::spawn("test", CREATE_FLEET_WINDOW, executor));
        let mut handles = Vec::new();
        // One request every 20 ms for 1.5 s: never idle for 35 ms, so the 1 s cap splits it.
        for i in 0..75 {
            let b = Arc::clone(&batcher);
            handles.push(tokio::spawn(async move { b.add(1, i).await }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for handle in handles {
            assert!(handle.await.unwrap().is_ok());
        }
        assert_eq!(calls.lock().unwrap().len(), 2);
    }
}
