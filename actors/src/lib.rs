//! The brain of karpenter.
pub mod apis;
pub mod domain;
