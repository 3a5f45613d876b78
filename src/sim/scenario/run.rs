//! Running a scenario to its end: `karpenter simulate` calls [`run`], which builds a
//! current-thread tokio runtime (paused for [`Pace::Fast`], so simulated time jumps from timer to
//! timer) inside an actix System, and [`simulate`] in it: start the [`Simulation`], serve it when
//! asked ([`super::serve`]), tick it to the end or until stopped, report.

use tokio::sync::oneshot;

use super::error::SimulationError;
use super::load::LoadedScenario;
use super::serve::{ServeOptions, serve};
use super::simulation::Simulation;
use crate::sim::report::Report;

/// How simulated time runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Paused tokio time: as fast as the CPU allows, deterministic for a seed.
    Fast,
    /// The wall clock (serving the cluster to kubectl as it runs).
    RealTime,
}

/// Where progress lines go.
pub type ProgressSink<'a> = Box<dyn FnMut(&str) + 'a>;

/// How to run.
pub struct RunOptions<'a> {
    pub pace: Pace,
    /// Where progress lines go (`None`: quiet).
    pub progress: Option<ProgressSink<'a>>,
    pub serve: Option<ServeOptions>,
    /// Ends the run early (Ctrl-C); the report covers what happened so far.
    pub stop: Option<oneshot::Receiver<()>>,
}

impl std::fmt::Debug for RunOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("pace", &self.pace)
            .field("progress", &self.progress.is_some())
            .field("serve", &self.serve)
            .finish_non_exhaustive()
    }
}

impl RunOptions<'_> {
    /// Fast and quiet (tests).
    #[must_use]
    pub fn quiet() -> Self {
        Self {
            pace: Pace::Fast,
            progress: None,
            serve: None,
            stop: None,
        }
    }
}

/// Runs the scenario to its end (or until stopped) on this thread; builds its own runtime, so
/// call it outside any.
pub fn run(loaded: LoadedScenario, options: RunOptions<'_>) -> Result<Report, SimulationError> {
    let pace = options.pace;
    on_runtime(pace, simulate(loaded, options))?
}

/// Runs `work` to its end inside an actix System on a current-thread tokio runtime (paused for
/// [`Pace::Fast`]), as a simulation needs; call it outside any runtime.
pub fn on_runtime<F: std::future::Future>(
    pace: Pace,
    work: F,
) -> Result<F::Output, SimulationError> {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    if pace == Pace::Fast {
        builder.start_paused(true);
    }
    let runtime = builder.build().map_err(SimulationError::Runtime)?;
    let system = actix::System::with_tokio_rt(move || runtime);
    Ok(system.block_on(work))
}

/// The run itself (inside the actix System of [`run`]).
pub async fn simulate(
    loaded: LoadedScenario,
    mut options: RunOptions<'_>,
) -> Result<Report, SimulationError> {
    let open_ended = loaded.open_ended;
    let title = loaded.scenario.to_string();
    let mut simulation = Simulation::start(loaded, options.progress.take()).await?;
    let servers = match options.serve.as_mut() {
        Some(serve_options) => {
            Some(serve(serve_options, simulation.emulator(), simulation.routes()).await?)
        }
        None => None,
    };
    simulation.say(&format!(
        "simulating {title}{}",
        if open_ended { " until stopped" } else { "" }
    ));
    simulation.run_to_end(options.stop.take()).await;
    let report = simulation.finish().await;
    if let Some((api, daemon)) = servers {
        api.shutdown().await;
        daemon.shutdown().await;
    }
    Ok(report)
}
