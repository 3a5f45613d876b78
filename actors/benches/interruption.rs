//! Interruption handling, in process (reference section 3; Karpenter benchmarks 1k/5k/15k
//! messages):
//! - `parse_and_plan`: messages per second through parse and plan, the work per SQS message
//!   before acting. Aim: 100,000 messages/s.
//! - `actor_batch`: latency from a batch of 10 messages landing in the queue (kwok's SQS, the
//!   same port the AWS adapter implements) to the interruption actor's 10 NodeClaim deletion
//!   requests, through the whole actor: receive, index, parse, plan, delete, acknowledge.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use karpenter_core::domain::interruption::{NodeClaimRef, Parser, plan};

/// A realistic mix: mostly spot interruptions and rebalance recommendations, some state changes
/// and scheduled changes, some events for instances we do not own.
fn bodies(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let id = format!("i-{i:017x}");
            match i % 10 {
                0..=3 => format!(
                    r#"{{"version":"0","id":"e{i}","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2025-05-01T12:00:00Z","region":"us-west-2","resources":["arn:aws:ec2:us-west-2a:instance/{id}"],"detail":{{"instance-id":"{id}","instance-action":"terminate"}}}}"#
                ),
                4..=6 => format!(
                    r#"{{"version":"0","id":"e{i}","detail-type":"EC2 Instance Rebalance Recommendation","source":"aws.ec2","account":"123456789012","time":"2025-05-01T12:00:00Z","region":"us-west-2","resources":[],"detail":{{"instance-id":"{id}"}}}}"#
                ),
                7 | 8 => format!(
                    r#"{{"version":"0","id":"e{i}","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","account":"123456789012","time":"2025-05-01T12:00:00Z","region":"us-west-2","resources":[],"detail":{{"instance-id":"{id}","state":"stopping"}}}}"#
                ),
                _ => format!(
                    r#"{{"version":"0","id":"e{i}","detail-type":"AWS Health Event","source":"aws.health","account":"123456789012","time":"2025-05-01T12:00:00Z","region":"us-west-2","resources":[],"detail":{{"service":"EC2","eventTypeCategory":"scheduledChange","eventTypeCode":"AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED","affectedEntities":[{{"entityValue":"{id}"}}]}}}}"#
                ),
            }
        })
        .collect()
}

fn lookup(instance_id: &str) -> Option<NodeClaimRef> {
    // One in five instances belongs to another cluster.
    (instance_id.as_bytes().last() != Some(&b'4')).then(|| NodeClaimRef {
        name: format!("default-{instance_id}"),
        nodepool: Some("default".to_owned()),
        node_name: None,
        instance_type: Some("m5.large".to_owned()),
        zone: Some("us-west-2a".to_owned()),
        capacity_type: Some("spot".to_owned()),
        replace_on_rebalance: false,
        deleting: false,
    })
}

fn parse_and_plan(c: &mut Criterion) {
    let parser = Parser::default();
    let mut group = c.benchmark_group("interruption");
    for count in [1_000, 5_000, 15_000] {
        let input = bodies(count);
        group.throughput(Throughput::Elements(count as u64));
        group.bench_with_input(
            BenchmarkId::new("parse_and_plan", count),
            &input,
            |b, input| {
                b.iter(|| {
                    let mut commands = 0;
                    for body in input {
                        if let Ok(message) = parser.parse(black_box(body)) {
                            commands += plan(&message, lookup).len();
                        }
                    }
                    black_box(commands)
                });
            },
        );
    }
    group.finish();
}

fn actor_batch(c: &mut Criterion) {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use karpenter_actors::interruption::{
        InterruptionActor, InterruptionDeps, InterruptionMetrics,
    };
    use karpenter_actors::kwok::sqs::KwokSqs;
    use karpenter_actors::ports::clock::SystemClock;
    use karpenter_actors::ports::sqs::SqsApi;
    use karpenter_actors::providers::unavailable::UnavailableOfferings;
    use karpenter_actors::runtime::{ActorKit, GroupSpec, KitOptions};
    use karpenter_actors::testing::MemoryClusterView;
    use karpenter_actors::testing::{FakeClusterApi, Operation};
    use karpenter_core::apis::nodeclaim::{
        NodeClaim, NodeClaimSpec, NodeClaimStatus, NodeClassReference,
    };

    const BATCH: usize = 10;
    const NODECLAIMS: usize = 1_000;
    let system = actix::System::new();
    let sqs = Arc::new(KwokSqs::new("us-west-2"));
    let cluster = Arc::new(FakeClusterApi::new());
    let view = Arc::new(MemoryClusterView::new());
    for i in 0..NODECLAIMS {
        let mut claim = NodeClaim::new(
            &format!("default-{i}"),
            NodeClaimSpec {
                taints: vec![],
                startup_taints: vec![],
                requirements: karpenter_core::apis::nodeclaim::SharedRequirements::default(),
                resources: karpenter_core::apis::nodeclaim::ResourceRequirements::default(),
                node_class_ref: NodeClassReference::ec2("default"),
                termination_grace_period: None,
                expire_after: karpenter_core::apis::duration::NillableDuration("720h".into()),
            },
        );
        claim.status = Some(NodeClaimStatus {
            provider_id: Some(format!("aws:///us-west-2a/i-{:017x}", i * 10)),
            ..NodeClaimStatus::default()
        });
        view.put_nodeclaim(&claim);
    }
    let bodies = bodies(NODECLAIMS * 10);
    let url = system
        .block_on(sqs.create_queue("bench"))
        .unwrap_or_default();
    let metrics =
        InterruptionMetrics::unregistered(prometheus_client::metrics::family::Family::default());
    let _root = system.block_on(async {
        let mut registry = prometheus_client::registry::Registry::default();
        let kit = ActorKit::new(&mut registry, KitOptions::default());
        let root = kit.root(GroupSpec::one_for_one("bench")).ok()?;
        root.spawn::<InterruptionActor>(
            "interruption",
            InterruptionDeps {
                sqs: sqs.clone(),
                cluster: cluster.clone(),
                view,
                unavailable: Arc::new(UnavailableOfferings::new(Duration::from_mins(3))),
                clock: Arc::new(SystemClock),
                queue: "bench".into(),
                rebalance_replace: false,
                metrics: metrics.clone(),
            },
        )
        .ok()?;
        Some((kit, root))
    });
    let mut next = 0usize;
    c.bench_function("interruption/actor_batch_of_10_to_deletion_requests", |b| {
        b.iter_custom(|iterations| {
            system.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let before = metrics.deleted.get();
                    let start = Instant::now();
                    for _ in 0..BATCH {
                        // Only spot interruptions: each asks for one deletion.
                        let body = &bodies[(next * 10) % bodies.len()];
                        next += 1;
                        let _ = sqs.send_message(&url, body).await;
                    }
                    while metrics.deleted.get() < before + BATCH as u64 {
                        tokio::task::yield_now().await;
                    }
                    total += start.elapsed();
                }
                total
            })
        });
    });
    black_box(cluster.calls_of(Operation::DeleteNodeClaim).len());
}

criterion_group!(benches, parse_and_plan, actor_batch);
criterion_main!(benches);
