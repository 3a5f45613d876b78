//! Interruption messages per second through parse and plan, in process: the work the
//! interruption actor does per SQS message before acting (reference section 3; Karpenter
//! benchmarks 1k/5k/15k messages). Aim: 100,000 messages/s.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use karpenter_actors::domain::interruption::{NodeClaimRef, Parser, plan};

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

criterion_group!(benches, parse_and_plan);
criterion_main!(benches);
