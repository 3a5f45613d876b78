//! [`KarpenterJson`], the `tracing` layer writing Karpenter's JSON lines (see the
//! [module docs](super) for the line's shape and the field conventions).

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use super::LOGGER;
use super::render::{
    ErrorParts, EventVisitor, SpanVisitor, push_caller, push_json_str, push_key, push_time,
};
use super::sample::Sampler;
use super::sink::Sink;

/// Where a line's `time` (and the sampler's clock) comes from: the system clock in the daemon,
/// simulated time in `karpenter simulate`, a fixed instant in tests.
pub type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Karpenter's `level` names, by the index [`level_index`] gives.
const LEVEL_NAMES: [&str; 3] = ["DEBUG", "INFO", "ERROR"];

/// DEBUG 0, INFO 1, ERROR 2. Karpenter has no WARN: a dependency's warning is INFO (klog's
/// warnings reach logr as Info); TRACE, never enabled by the filter, would be DEBUG.
fn level_index(level: Level) -> usize {
    match level {
        Level::ERROR => 2,
        Level::WARN | Level::INFO => 1,
        Level::DEBUG | Level::TRACE => 0,
    }
}

/// The context fields of a span, rendered once when it is created (`,"k":v...`).
struct ContextFields {
    rendered: String,
    kind: Option<std::ops::Range<usize>>,
    namespaced: bool,
}

/// Room for a reconcile span's fields, so rendering them does not grow the string.
const CONTEXT_CAPACITY: usize = 256;

/// Per-thread buffers reused by every line.
#[derive(Default)]
struct Scratch {
    line: String,
    message: String,
    fields: String,
    value: String,
    error: ErrorParts,
}

impl Scratch {
    fn clear(&mut self) {
        self.line.clear();
        self.message.clear();
        self.fields.clear();
        self.error.clear();
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `work` with this thread's value buffer (a fresh one when it is in use).
fn with_scratch<R>(work: impl FnOnce(&mut String) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => work(&mut scratch.value),
        Err(_) => work(&mut String::new()),
    })
}

/// The layer (see the module docs). Build it with [`KarpenterJson::new`] and the setters, and
/// put it behind [`super::level_filter`].
pub struct KarpenterJson {
    /// `,"commit":"…"`, rendered once; empty when the build has no commit.
    commit: String,
    caller: bool,
    sampler: Option<Sampler>,
    outputs: Vec<Sink>,
    error_outputs: Vec<Sink>,
    clock: WallClock,
}

impl fmt::Debug for KarpenterJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KarpenterJson")
            .field("commit", &self.commit)
            .field("caller", &self.caller)
            .field("sampling", &self.sampler.is_some())
            .field("outputs", &self.outputs.len())
            .field("error_outputs", &self.error_outputs.len())
            .finish_non_exhaustive()
    }
}

impl KarpenterJson {
    /// Lines to `outputs`, sampled, without `caller` or `commit`, timed by the system clock;
    /// write failures reported on stderr.
    #[must_use]
    pub fn new(outputs: Vec<Sink>) -> Self {
        Self {
            commit: String::new(),
            caller: false,
            sampler: Some(Sampler::default()),
            outputs,
            error_outputs: vec![Sink::stderr()],
            clock: Arc::new(SystemTime::now),
        }
    }

    /// The build's commit, the first field after `message` on every line.
    #[must_use]
    pub fn commit(mut self, commit: Option<&str>) -> Self {
        self.commit.clear();
        if let Some(commit) = commit {
            push_key(&mut self.commit, "commit");
            push_json_str(&mut self.commit, commit);
        }
        self
    }

    /// Whether lines carry `caller` (Karpenter: only at `LOG_LEVEL=debug`).
    #[must_use]
    pub fn caller(mut self, caller: bool) -> Self {
        self.caller = caller;
        self
    }

    /// Whether the sampler runs (on by default, as in Karpenter).
    #[must_use]
    pub fn sampling(mut self, sampling: bool) -> Self {
        self.sampler = sampling.then(Sampler::default);
        self
    }

    /// Where failures to write a line are reported (`LOG_ERROR_OUTPUT_PATHS`).
    #[must_use]
    pub fn error_outputs(mut self, sinks: Vec<Sink>) -> Self {
        self.error_outputs = sinks;
        self
    }

    /// The clock of `time` and of the sampler.
    #[must_use]
    pub fn clock(mut self, clock: WallClock) -> Self {
        self.clock = clock;
        self
    }

    fn write_event<S>(&self, scratch: &mut Scratch, event: &Event<'_>, ctx: &Context<'_, S>)
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        scratch.clear();
        let metadata = event.metadata();
        let level = level_index(*metadata.level());
        let Scratch {
            line,
            message,
            fields,
            value,
            error,
        } = scratch;
        event.record(&mut EventVisitor {
            message_only: true,
            message,
            fields,
            error,
            scratch: value,
        });
        let now = (self.clock)();
        if let Some(sampler) = &self.sampler
            && !sampler.admit(level, message, now)
        {
            return;
        }
        event.record(&mut EventVisitor {
            message_only: false,
            message,
            fields,
            error,
            scratch: value,
        });
        line.push_str("{\"level\":\"");
        line.push_str(LEVEL_NAMES[level]);
        line.push_str("\",\"time\":\"");
        push_time(line, now);
        line.push_str("\",\"logger\":");
        push_json_str(line, LOGGER);
        if self.caller
            && let (Some(file), Some(number)) = (metadata.file(), metadata.line())
        {
            push_caller(line, file, number);
        }
        push_key(line, "message");
        push_json_str(line, message);
        line.push_str(&self.commit);
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(context) = span.extensions().get::<ContextFields>() {
                    line.push_str(&context.rendered);
                }
            }
        }
        line.push_str(fields);
        error.push_to(line);
        line.push_str("}\n");
        for sink in &self.outputs {
            if let Err(failure) = sink.write_line(line.as_bytes()) {
                self.report_write_error(&failure, now);
            }
        }
    }

    /// zap's `ErrorOutput` report: `<time> write error: <error>`.
    fn report_write_error(&self, failure: &std::io::Error, now: SystemTime) {
        let mut text = String::new();
        push_time(&mut text, now);
        text.push_str(" write error: ");
        text.push_str(&failure.to_string());
        text.push('\n');
        for sink in &self.error_outputs {
            // Nowhere left to report a failing error output.
            let _ = sink.write_line(text.as_bytes());
        }
    }
}

impl<S> Layer<S> for KarpenterJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut rendered = String::with_capacity(CONTEXT_CAPACITY);
        let (kind, namespaced) = with_scratch(|scratch| {
            let mut visitor = SpanVisitor {
                out: &mut rendered,
                kind: None,
                namespaced: false,
                scratch,
            };
            attrs.record(&mut visitor);
            (visitor.kind, visitor.namespaced)
        });
        span.extensions_mut().replace(ContextFields {
            rendered,
            kind,
            namespaced,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut extensions = span.extensions_mut();
        if let Some(context) = extensions.get_mut::<ContextFields>() {
            with_scratch(|scratch| {
                let mut visitor = SpanVisitor {
                    out: &mut context.rendered,
                    kind: context.kind.clone(),
                    namespaced: context.namespaced,
                    scratch,
                };
                values.record(&mut visitor);
            });
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        SCRATCH.with(|cell| {
            if let Ok(mut scratch) = cell.try_borrow_mut() {
                self.write_event(&mut scratch, event, &ctx);
            } else {
                // An event logged while this thread formats another (a Display impl that
                // logs): fresh buffers for it.
                self.write_event(&mut Scratch::default(), event, &ctx);
            }
        });
    }
}
