//! Ports: one narrow trait per outside system, listing only the calls the actors make, with our
//! own request and response types. Real adapters live in the `karpenter` crate (`src/aws`,
//! `src/kube`); in-memory ones in [`crate::kwok`] and next to each trait (fakes that record
//! calls and fail on demand). Providers and actors depend only on these traits.

pub mod aws_error;
pub mod clock;
pub mod cloud_provider;
pub mod cluster;
pub mod cluster_view;
pub mod ec2;
pub mod eks;
pub mod eventbridge;
pub mod iam;
pub mod pricing;
pub mod sqs;
pub mod ssm;
pub mod version;
