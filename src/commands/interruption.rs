//! `karpenter interruption setup --queue NAME --cluster NAME [--check]`: creates or verifies the
//! interruption queue (300 s retention, SSE, a policy allowing EventBridge) and the four
//! EventBridge rules targeting it (spot interruption, rebalance, state change, scheduled
//! change). Idempotent; `--check` changes nothing and exits 1 when something is missing or
//! different.

use std::io::Write;

use clap::{Args, Subcommand};
use karpenter_actors::interruption::setup;
use karpenter_actors::ports::eventbridge::EventBridgeApi;
use karpenter_actors::ports::sqs::SqsApi;

use super::Status;
use crate::aws::{AwsClients, Connection};

/// `karpenter interruption ...`
#[derive(Debug, Subcommand)]
pub enum InterruptionCommand {
    /// Create or verify the interruption queue and its EventBridge rules.
    Setup(SetupArgs),
}

/// Arguments of `karpenter interruption setup`.
#[derive(Debug, Clone, Args)]
pub struct SetupArgs {
    /// The SQS queue name (Karpenter's `INTERRUPTION_QUEUE`; usually the cluster name).
    #[arg(long, value_name = "NAME")]
    pub queue: String,
    /// The cluster name; rules are named `Karpenter-<cluster>-<kind>`.
    #[arg(long, value_name = "NAME")]
    pub cluster: String,
    /// Report what is missing or different and change nothing; exit 1 when anything is.
    #[arg(long)]
    pub check: bool,
    /// AWS region; the standard chain (`AWS_REGION`, profile, IMDS) when unset.
    #[arg(long, env = "AWS_REGION", value_name = "REGION")]
    pub region: Option<String>,
    /// Endpoint of an AWS emulator (moto, `LocalStack`).
    #[arg(long, env = "AWS_ENDPOINT_URL", value_name = "URL")]
    pub endpoint_url: Option<String>,
}

/// Runs an `interruption` subcommand.
pub fn run(command: &InterruptionCommand, out: &mut impl Write, err: &mut impl Write) -> Status {
    let InterruptionCommand::Setup(args) = command;
    let Some(runtime) = super::current_thread_runtime(err) else {
        return Status::BadInput;
    };
    let connection = Connection {
        region: args.region.clone(),
        endpoint_url: args.endpoint_url.clone(),
        ..Connection::default()
    };
    runtime.block_on(async {
        let clients = AwsClients::connect(&connection).await;
        setup_with(
            clients.sqs.as_ref(),
            clients.eventbridge.as_ref(),
            args,
            out,
            err,
        )
        .await
    })
}

/// The command over any SQS and EventBridge (tests pass kwok or moto-backed adapters).
pub async fn setup_with(
    sqs: &dyn SqsApi,
    eventbridge: &dyn EventBridgeApi,
    args: &SetupArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Status {
    if args.check {
        return match setup::check(sqs, eventbridge, &args.queue, &args.cluster).await {
            Ok(problems) if problems.is_empty() => {
                let _ = writeln!(
                    out,
                    "interruption queue {} and its 4 rules are set up",
                    args.queue
                );
                Status::Success
            }
            Ok(problems) => {
                for problem in problems {
                    let _ = writeln!(out, "missing or different: {problem}");
                }
                Status::Problems
            }
            Err(error) => {
                let _ = writeln!(err, "error: checking the interruption queue: {error}");
                Status::BadInput
            }
        };
    }
    match setup::ensure(sqs, eventbridge, &args.queue, &args.cluster).await {
        Ok(applied) if applied.changes.is_empty() => {
            let _ = writeln!(
                out,
                "interruption queue {} and its 4 rules were already set up",
                args.queue
            );
            Status::Success
        }
        Ok(applied) => {
            for change in &applied.changes {
                let _ = writeln!(out, "{change}");
            }
            let _ = writeln!(
                out,
                "set INTERRUPTION_QUEUE={} (chart: settings.interruptionQueue)",
                args.queue
            );
            Status::Success
        }
        Err(error) => {
            let _ = writeln!(err, "error: setting up the interruption queue: {error}");
            Status::BadInput
        }
    }
}
