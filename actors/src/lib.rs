//! The brain of karpenter.
pub mod apis;
pub mod aws;
pub mod daemon;
pub mod domain;
pub mod interruption;
pub mod kwok;
pub mod metrics;
pub mod ports;
pub mod runtime;
