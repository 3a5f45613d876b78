//! The brain of karpenter.
pub mod apis;
