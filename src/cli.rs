//! The command line: `karpenter <command>`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use karpenter_config::Settings;

/// A Kubernetes node autoscaler for AWS, compatible with Karpenter v1.5.
#[derive(Debug, Parser)]
#[command(name = "karpenter", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the CustomResourceDefinitions (NodePool, NodeClaim, EC2NodeClass) as YAML.
    Crds {
        /// Write one file per CRD into this directory instead of printing them.
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
    },
    /// Check NodePool, NodeClaim and EC2NodeClass manifests as the API server would.
    ///
    /// Exits 0 when every document is valid, 1 when any has a problem, 2 when an input cannot
    /// be read or parsed. Documents of other kinds are skipped with a note.
    Validate {
        /// Files or directories of YAML (multi-document) to check; `-` reads standard input.
        #[arg(short = 'f', long = "filename", value_name = "FILE", required = true, num_args = 1..)]
        files: Vec<PathBuf>,
    },
    /// Print the effective settings (flags, then environment, then defaults) and check them.
    #[command(name = "settings")]
    ShowSettings {
        /// Also apply the checks `run` makes (`CLUSTER_NAME` required).
        #[arg(long)]
        for_run: bool,
        #[command(flatten)]
        settings: Box<Settings>,
    },
    /// Run the daemon: watch the cluster, lead through the Lease, provision and manage nodes
    /// (the chart's entry point). Settings come from flags or Karpenter's environment variables.
    Run(crate::commands::run::RunArgs),
    /// Show the live actors of a running daemon (from its /debug/actors).
    Actors(crate::commands::actors::ActorsArgs),
    /// Run the whole daemon against an embedded cluster (Kubernetes API emulator, kwok's AWS, a
    /// fake kubelet and kube-scheduler) through a scenario on simulated time, and report.
    ///
    /// `--serve ADDR` serves the emulator to kubectl while it runs (at wall-clock pace).
    // Only in builds with the `simulate` feature (the default), not in the controller image.
    #[cfg(feature = "simulate")]
    Simulate(crate::commands::simulate::SimulateArgs),
    /// Ask a running daemon why a pod is pending: the Provisioner's last decision, with a
    /// reason per NodePool (`karpenter explain pod NAMESPACE/NAME`).
    Explain(crate::commands::explain::ExplainArgs),
    /// Set up or check the SQS interruption queue and its EventBridge rules.
    Interruption {
        #[command(subcommand)]
        command: crate::commands::interruption::InterruptionCommand,
    },
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::Cli;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
