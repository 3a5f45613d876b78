//! What the NodeClaim benches share (`lifecycle`, `drift`): the sizes, criterion's time budget
//! per size, waiting for every NodeClaim to reach a state on paused time, the thread's CPU time
//! and the per-NodeClaim figure of the summary lines.

use std::time::Duration;

use karpenter_actors::ports::cluster_view::ClusterView as _;

use super::support::Harness;

/// The NodeClaim counts measured: up to 20,000, the size the per-NodeClaim cost must stay flat
/// to (issue 20).
pub const SIZES: [usize; 6] = [100, 1_000, 2_000, 5_000, 10_000, 20_000];

/// Criterion's time budget per size: a 5,000-NodeClaim run takes seconds, so the big sizes
/// get the minimum of samples and `--quick` stops after one run.
pub fn measurement_time(count: usize) -> Duration {
    if count <= 100 {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(1)
    }
}

/// Waits (on the paused clock, looking every `step`) until `done` holds for every NodeClaim of
/// `names`; each NodeClaim is checked until it is done and then never again, so the waiting
/// costs O(N) in all rather than O(N) per look.
pub async fn wait_for_each(
    h: &Harness,
    names: &[String],
    limit: Duration,
    step: Duration,
    done: impl Fn(&Harness, &str) -> bool,
) -> bool {
    let mut pending: Vec<&str> = names.iter().map(String::as_str).collect();
    h.wait_for(limit, step, |h| {
        pending.retain(|name| !done(h, name));
        pending.is_empty()
    })
    .await
}

pub fn launched(h: &Harness, name: &str) -> bool {
    h.view.nodeclaim(name).is_some_and(|claim| {
        claim
            .status
            .as_ref()
            .is_some_and(|s| s.provider_id.is_some())
    })
}

/// CPU time of this thread so far (Linux's `schedstat`), reported beside the wall time since
/// the machine may be shared; `None` elsewhere.
pub fn thread_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos: u64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

pub fn per_nodeclaim_micros(total: Duration, runs: u32, count: usize) -> f64 {
    let count = f64::from(u32::try_from(count).unwrap_or(u32::MAX));
    total.as_secs_f64() * 1e6 / f64::from(runs) / count
}
