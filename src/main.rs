//! The `karpenter` binary: parses the command line and runs one command.

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser as _;
use karpenter::cli::{Cli, Command};
use karpenter::commands;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    let status = match cli.command {
        Command::Crds { output_dir } => {
            commands::crds::run(output_dir.as_deref(), &mut stdout, &mut stderr)
        }
        Command::Validate { files } => commands::validate::run(&files, &mut stdout, &mut stderr),
        Command::ShowSettings { for_run, settings } => {
            commands::settings::run(&settings, for_run, &mut stdout, &mut stderr)
        }
        #[cfg(feature = "simulate")]
        Command::Simulate(args) => commands::simulate::run(&args, &mut stdout, &mut stderr),
        Command::Explain(args) => commands::explain::run(&args, &mut stdout, &mut stderr),
        Command::Run(args) => commands::run::run(&args, &mut stdout, &mut stderr),
        Command::Actors(args) => commands::actors::run(&args, &mut stdout, &mut stderr),
        Command::Interruption { command } => {
            commands::interruption::run(&command, &mut stdout, &mut stderr)
        }
    };
    // A closed pipe (`karpenter crds | head`) is not an error worth reporting.
    let _ = stdout.flush();
    ExitCode::from(status.code())
}
