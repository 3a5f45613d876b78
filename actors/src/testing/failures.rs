//! [`FailureRules`]: the injected failures of the in-memory fakes ([`super::FakeClusterApi`],
//! [`super::FakeCloudProvider`]). A rule matches calls with a predicate and fails the next N
//! of them (or every one until cleared) with a given error; the first matching rule decides.

/// A call predicate.
type Predicate<C> = Box<dyn Fn(&C) -> bool + Send + Sync>;

struct Rule<C, E> {
    matches: Predicate<C>,
    error: E,
    /// Calls still to fail; `None`: every call until cleared.
    remaining: Option<usize>,
}

/// Injected failures for calls of type `C`, failing with `E`.
pub(crate) struct FailureRules<C, E> {
    rules: Vec<Rule<C, E>>,
}

impl<C, E> Default for FailureRules<C, E> {
    fn default() -> Self {
        Self { rules: Vec::new() }
    }
}

impl<C, E: Clone> FailureRules<C, E> {
    /// Fails the next `times` calls `matches` accepts (every one when `None`) with `error`.
    pub(crate) fn add(
        &mut self,
        matches: impl Fn(&C) -> bool + Send + Sync + 'static,
        error: E,
        times: Option<usize>,
    ) {
        self.rules.push(Rule {
            matches: Box::new(matches),
            error,
            remaining: times,
        });
    }

    /// The injected failure for `call`, if a rule matches (counting it down).
    pub(crate) fn check(&mut self, call: &C) -> Result<(), E> {
        let Some(index) = self.rules.iter().position(|rule| (rule.matches)(call)) else {
            return Ok(());
        };
        let rule = &mut self.rules[index];
        let error = rule.error.clone();
        if let Some(remaining) = &mut rule.remaining {
            *remaining = remaining.saturating_sub(1);
            if *remaining == 0 {
                self.rules.remove(index);
            }
        }
        Err(error)
    }

    pub(crate) fn clear(&mut self) {
        self.rules.clear();
    }
}
