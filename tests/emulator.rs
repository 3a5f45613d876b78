//! Conformance of the Kubernetes API emulator (`karpenter::emulator`), driven through kube-rs `Api`
//! and `watcher` in-process: each module covers one rule of the real API server that our code
//! can tell apart (conflicts, watches, selectors, finalizers, subresources, patches, CRD
//! validation), plus the loopback server and a kubectl smoke test (skipped without kubectl).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

#[path = "emulator/support.rs"]
mod support;

#[path = "emulator/crd_validation.rs"]
mod crd_validation;
#[path = "emulator/crud.rs"]
mod crud;
#[path = "emulator/faults.rs"]
mod faults;
#[path = "emulator/finalizers.rs"]
mod finalizers;
// `karpenter simulate --serve` needs the command.
#[cfg(feature = "simulate")]
#[path = "emulator/loopback.rs"]
mod loopback;
#[path = "emulator/patches.rs"]
mod patches;
// Protobuf bodies need the emulator's decoder.
#[cfg(feature = "emulator-protobuf")]
#[path = "emulator/protobuf.rs"]
mod protobuf;
#[path = "emulator/selectors.rs"]
mod selectors;
#[path = "emulator/subresources.rs"]
mod subresources;
#[path = "emulator/watches.rs"]
mod watches;
