//! Narrow ports: one trait per outside system, listing only the calls the actors make, each
//! with an in-memory fake that records calls and fails on demand.

pub mod cluster;
pub mod cluster_view;
