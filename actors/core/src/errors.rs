//! How errors are written out: one line with every cause, as logs, events and the CLI show them.

/// The message of `error` followed by each of its sources, joined by `": "`
/// (`launching nodeclaim default-x7k2p: CreateFleet: InsufficientInstanceCapacity`).
#[must_use]
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("inner")]
    struct Inner;

    #[test]
    fn every_source_follows_the_message() {
        assert_eq!(super::chain(&Outer(Inner)), "outer: inner");
        assert_eq!(super::chain(&Inner), "inner");
    }
}
