//! [`FakeVersionSource`]: a programmable `KubernetesVersionSource` that records when it was read.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use karpenter_core::domain::version::KubernetesVersion;
use tokio::time::Instant;

use crate::ports::version::{KubernetesVersionSource, VersionSourceError};

#[derive(Debug)]
struct State {
    /// Answered once the script is used up.
    current: KubernetesVersion,
    /// Answers of the next reads, in order.
    script: VecDeque<Result<KubernetesVersion, VersionSourceError>>,
    /// When each read happened (tokio time, so paused in tests).
    reads: Vec<Instant>,
}

/// A version source answering a script of versions and failures, then a current version.
#[derive(Debug)]
pub struct FakeVersionSource {
    state: Mutex<State>,
}

impl FakeVersionSource {
    /// A source answering `version` until told otherwise.
    #[must_use]
    pub fn new(version: KubernetesVersion) -> Self {
        Self {
            state: Mutex::new(State {
                current: version,
                script: VecDeque::new(),
                reads: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers `version` from now on (after the scripted answers).
    pub fn set(&self, version: KubernetesVersion) {
        self.lock().current = version;
    }

    /// Answers the next reads with `answers`, in order, before the current version.
    pub fn then(
        &self,
        answers: impl IntoIterator<Item = Result<KubernetesVersion, VersionSourceError>>,
    ) {
        self.lock().script.extend(answers);
    }

    /// Fails the next read with an API server error.
    pub fn fail_next(&self) {
        self.then([Err(VersionSourceError::ApiServer {
            message: "injected failure".to_owned(),
        })]);
    }

    /// When each read happened.
    #[must_use]
    pub fn reads(&self) -> Vec<Instant> {
        self.lock().reads.clone()
    }
}

#[async_trait]
impl KubernetesVersionSource for FakeVersionSource {
    async fn version(&self) -> Result<KubernetesVersion, VersionSourceError> {
        let mut state = self.lock();
        state.reads.push(Instant::now());
        match state.script.pop_front() {
            Some(answer) => answer,
            None => Ok(state.current),
        }
    }
}
