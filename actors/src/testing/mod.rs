//! Test doubles of the ports, for the actors' tests, the binary's tests and the benches; compiled
//! only for this crate's own unit tests and with the `testing` feature, which the workspace's
//! test builds turn on (never the daemon's release build).
//!
//! - [`FakeClusterApi`]: Kubernetes writes kept in memory, every call recorded, failures on
//!   demand; [`MirroredClusterApi`] also copies each write into a [`MemoryClusterView`] and
//!   reports it as a cluster change, as the watch does in production.
//! - [`MemoryClusterView`]: a `ClusterView` to put objects in by hand.
//! - [`FakeCloudProvider`]: a recording `CloudProvider` with instance types and injected failures.
//! - [`AwsTestKit`]: the AWS group on a kit of its own, for tests that build providers by hand.
//! - [`FakeVersionSource`]: a `KubernetesVersionSource` answering a script of versions.
//! - [`on_paused_clock`]: an actix System on tokio's clock paused from its start.

mod aws;
mod cloud_provider;
mod cluster_api;
mod cluster_view;
mod failures;
mod mirror;
mod paused;
mod version;

pub use aws::AwsTestKit;
pub use cloud_provider::*;
pub use cluster_api::*;
pub use cluster_view::MemoryClusterView;
pub use mirror::MirroredClusterApi;
pub use paused::on_paused_clock;
pub use version::FakeVersionSource;
