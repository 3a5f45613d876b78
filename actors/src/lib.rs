//! The brain of karpenter.
pub mod apis;
pub mod aws;
pub mod kwok;
pub mod ports;
