//! AWS's EC2 request token buckets, as Karpenter's kwok defines them (reference 5.2): a call
//! takes a token from its bucket or fails with `RequestLimitExceeded`. Buckets refill on
//! tokio's clock, so paused-time tests control them.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::time::Instant;

/// Refill rate and capacity of one bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketSpec {
    pub per_second: f64,
    pub burst: f64,
}

/// Karpenter kwok's rates: non-mutating 20/s burst 100, mutating 5/s burst 50, RunInstances 2/s
/// burst 5, `TerminateInstances` 5/s burst 100, `CreateTags` 10/s burst 100 (CreateFleet is
/// mutating).
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimits {
    pub non_mutating: BucketSpec,
    pub mutating: BucketSpec,
    pub run_instances: BucketSpec,
    pub terminate_instances: BucketSpec,
    pub create_tags: BucketSpec,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            non_mutating: BucketSpec {
                per_second: 20.0,
                burst: 100.0,
            },
            mutating: BucketSpec {
                per_second: 5.0,
                burst: 50.0,
            },
            run_instances: BucketSpec {
                per_second: 2.0,
                burst: 5.0,
            },
            terminate_instances: BucketSpec {
                per_second: 5.0,
                burst: 100.0,
            },
            create_tags: BucketSpec {
                per_second: 10.0,
                burst: 100.0,
            },
        }
    }
}

impl RateLimits {
    fn spec(&self, operation: &str) -> (&'static str, BucketSpec) {
        match operation {
            "RunInstances" => ("run_instances", self.run_instances),
            "TerminateInstances" => ("terminate_instances", self.terminate_instances),
            "CreateTags" => ("create_tags", self.create_tags),
            op if op.starts_with("Describe") => ("non_mutating", self.non_mutating),
            _ => ("mutating", self.mutating),
        }
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// The buckets of one kwok EC2.
#[derive(Debug)]
pub struct RateLimiter {
    limits: RateLimits,
    buckets: Mutex<HashMap<&'static str, Bucket>>,
}

impl RateLimiter {
    #[must_use]
    pub fn new(limits: RateLimits) -> Self {
        RateLimiter {
            limits,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a token for `operation`; `false` when the bucket is empty.
    pub fn try_acquire(&self, operation: &str) -> bool {
        let (name, spec) = self.limits.spec(operation);
        let now = Instant::now();
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let bucket = buckets.entry(name).or_insert(Bucket {
            tokens: spec.burst,
            last: now,
        });
        let elapsed = now.duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * spec.per_second).min(spec.burst);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_empties_the_bucket_and_time_refills_it() {
        let limiter = RateLimiter::new(RateLimits::default());
        for _ in 0..5 {
            assert!(limiter.try_acquire("RunInstances"));
        }
        assert!(!limiter.try_acquire("RunInstances"));
        assert!(
            limiter.try_acquire("DescribeInstances"),
            "other buckets are separate"
        );
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(limiter.try_acquire("RunInstances"));
        assert!(!limiter.try_acquire("RunInstances"));
    }
}
