//! The `karpenter` binary: parses the command line, installs the command's log subscriber
//! (`karpenter::logging`: Karpenter's JSON lines for `run`, compact lines on stderr for the
//! others) and runs one command.

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser as _;
use karpenter::cli::{Cli, Command};
use karpenter::commands::{self, Status};
use karpenter::logging;
use karpenter_config::LogLevel;

/// jemalloc: the daemon allocates and frees small objects from many threads (watch events,
/// conversions, actor messages); glibc's malloc spent a third of the scale run's CPU on it and
/// kept freed memory in per-thread arenas, and mimalloc held 7% more resident memory at the
/// 5,000-node scale run's peak.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Installs the subscriber for `command`.
fn install_logging(command: &Command) -> Result<(), logging::LoggingError> {
    match command {
        Command::Run(args) => logging::install_daemon(&args.settings),
        #[cfg(feature = "simulate")]
        Command::Simulate(args) => logging::install_simulation(args.logs()),
        _ => logging::install_cli(LogLevel::Info),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(error) = install_logging(&cli.command) {
        // The daemon's case has already been written as a JSON line on stderr.
        if !matches!(cli.command, Command::Run(_)) {
            eprintln!("error: {}", karpenter_core::errors::chain(&error));
        }
        return ExitCode::from(Status::BadInput.code());
    }
    // Not locked for the whole command: log lines from other threads (actix arbiters, the
    // served simulation's thread) write to these streams too.
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
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
