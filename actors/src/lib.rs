//! The brain of karpenter.
pub mod apis;
pub mod domain;
pub mod ports;
pub mod runtime;
