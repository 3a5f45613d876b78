//! One module per subcommand. Each takes its inputs and two writers (report, diagnostics) and
//! returns a [`Status`], so tests run commands in-process and read what they print.

pub mod actors;
pub mod crds;
pub mod explain;
pub mod interruption;
pub mod run;
pub mod settings;
#[cfg(feature = "simulate")]
pub mod simulate;
pub mod validate;

/// An error with its sources, one after the other (`reading x: permission denied`).
#[must_use]
/// A current-thread tokio runtime for a command; on failure says so on `err` (the caller picks
/// the exit status).
pub(crate) fn current_thread_runtime(
    err: &mut impl std::io::Write,
) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => Some(runtime),
        Err(error) => {
            let _ = writeln!(err, "error: starting the async runtime: {error}");
            None
        }
    }
}

/// How a command ended; the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Everything checked out.
    Success,
    /// The command ran and found problems (invalid manifests, invalid settings).
    Problems,
    /// The command could not read its input.
    BadInput,
}

impl Status {
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Problems => 1,
            Self::BadInput => 2,
        }
    }
}
