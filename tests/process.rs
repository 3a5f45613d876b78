//! Process-level tests: `karpenter run` as a child process, as a user deploys it, against the
//! cluster-only server (`karpenter simulate --serve 127.0.0.1:0 --cluster-only`: the API emulator,
//! the fake kube-scheduler and kubelet, no daemon, no kwok) and moto (EC2, EKS, SQS,
//! EventBridge, IAM, SSM through `scripts/moto_launcher.py`), with a kubeconfig and
//! `AWS_ENDPOINT_URL` and nothing injected: the daemon discovers the cluster as it would in EKS.
//!
//! Checked as a user would: pending pods become moto instances, Ready nodes and bound pods;
//! interruption messages are handled and deleted, malformed ones deleted and counted; SIGTERM
//! stops the daemon in time and releases its Lease; `kill -9` during a scale-up and a restart
//! leave one instance per NodeClaim; two daemons never both act; every log line is JSON;
//! `/metrics` parses as Prometheus text and `/readyz?verbose` names its checks.
//!
//! Each test starts its own world (a moto, a cluster server, its daemons) and kills it when it
//! ends. Without the project venv a test prints why and passes, unless `KARPENTER_REQUIRE_MOTO=1`
//! (set by `scripts/test.sh`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    reason = "integration test helpers: a failed unwrap is a failed test; each test walks one \
              scenario through its processes, which take seconds to start"
)]

#[path = "aws_moto/moto.rs"]
#[allow(
    dead_code,
    reason = "shared with tests/aws_moto; this suite uses part of it"
)]
mod moto;

#[path = "process/endpoints.rs"]
mod endpoints;
#[path = "process/exposition.rs"]
mod exposition;
#[path = "process/interruption.rs"]
mod interruption;
#[path = "process/lifecycle.rs"]
mod lifecycle;
#[path = "process/logs.rs"]
mod logs;
#[path = "process/scale_up.rs"]
mod scale_up;
#[path = "process/support.rs"]
mod support;
