//! kwok: in-memory implementations of the AWS ports, realistic enough to run a cluster on
//! (Karpenter's "AWS KWOK", done fully): a simulated EC2 ([`ec2::KwokEc2`]: the bundled real
//! catalogue, per-zone capacity pools, ICE, launch latency, token-bucket throttling, client
//! tokens), SQS, EventBridge (spot interruptions reach the interruption queue), IAM, SSM,
//! Pricing and EKS (`DescribeCluster`, for the daemon's cluster discovery). Every service records
//! its calls and takes injected faults ([`faults::Faults`]). Used by tests over the providers and
//! by `karpenter simulate`.

pub mod catalog;
pub mod cloud_provider;
pub mod ec2;
pub mod eks;
pub mod eventbridge;
pub mod faults;
pub mod iam;
pub mod pricing;
pub mod rate_limit;
pub mod sqs;
pub mod ssm;
