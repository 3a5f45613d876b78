//! The brain of karpenter.
pub mod apis;
pub mod aws;
pub mod ports;
