//! [`on_paused_clock`]: an actix System on a tokio clock paused from its start, as `karpenter
//! simulate` runs the daemon.

use std::future::Future;

/// Runs `body` in an actix System on a current-thread tokio runtime whose clock is paused from
/// its start (as `karpenter simulate` runs): pausing a running clock leaves it off the timer
/// wheel's millisecond grid, and every timer then fires a millisecond late. Fails only when
/// the runtime cannot be built.
pub fn on_paused_clock<F: Future>(body: impl FnOnce() -> F) -> std::io::Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    Ok(actix::System::with_tokio_rt(move || runtime).block_on(body()))
}
