//! Ports: one narrow trait per outside system, listing only the calls we make, with our own
//! request and response types. Real adapters live in the `karpenter` crate (`src/aws`),
//! in-memory ones in [`crate::kwok`]. Providers and actors depend only on these traits.

pub mod aws_error;
pub mod clock;
pub mod cloud_provider;
pub mod ec2;
pub mod eventbridge;
pub mod iam;
pub mod pricing;
pub mod sqs;
pub mod ssm;
