//! Where lines go: zap's sinks for `LOG_OUTPUT_PATHS` and `LOG_ERROR_OUTPUT_PATHS` (a comma
//! list of `stdout`, `stderr`, file paths or `file://` URLs; files are created if missing and
//! appended to), and an in-memory sink for tests.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

/// Why a sink could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("opening log output {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{setting} names no log output")]
    Empty { setting: &'static str },
}

impl SinkError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Open { .. } => "log_output",
            Self::Empty { .. } => "invalid_settings",
        }
    }
}

/// One output: a writer taking whole lines.
#[derive(Clone)]
pub struct Sink {
    writer: Arc<Mutex<dyn Write + Send>>,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink").finish_non_exhaustive()
    }
}

impl Sink {
    /// A sink over any writer.
    pub fn writer(writer: impl Write + Send + 'static) -> Self {
        Self {
            writer: Arc::new(Mutex::new(writer)),
        }
    }

    #[must_use]
    pub fn stdout() -> Self {
        Self::writer(io::stdout())
    }

    #[must_use]
    pub fn stderr() -> Self {
        Self::writer(io::stderr())
    }

    /// A file, created if missing, appended to.
    pub fn file(path: impl Into<PathBuf>) -> Result<Self, SinkError> {
        let path = path.into();
        let file: File = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| SinkError::Open { path, source })?;
        Ok(Self::writer(file))
    }

    /// One zap sink name: `stdout`, `stderr`, `file:///path` or a path.
    pub fn open(spec: &str) -> Result<Self, SinkError> {
        match spec {
            "stdout" => Ok(Self::stdout()),
            "stderr" => Ok(Self::stderr()),
            _ => Self::file(spec.strip_prefix("file://").unwrap_or(spec)),
        }
    }

    /// Every sink of a comma-separated list (`LOG_OUTPUT_PATHS`); blanks around names are
    /// ignored. `setting` names the list in the error when it holds no sink.
    pub fn open_all(list: &str, setting: &'static str) -> Result<Vec<Self>, SinkError> {
        let sinks = list
            .split(',')
            .map(str::trim)
            .filter(|spec| !spec.is_empty())
            .map(Self::open)
            .collect::<Result<Vec<_>, _>>()?;
        if sinks.is_empty() {
            return Err(SinkError::Empty { setting });
        }
        Ok(sinks)
    }

    /// Writes one line (with its newline) in a single call.
    pub fn write_line(&self, line: &[u8]) -> io::Result<()> {
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        writer.write_all(line)?;
        writer.flush()
    }
}

/// Lines kept in memory, for tests; clones share the buffer.
#[derive(Debug, Clone, Default)]
pub struct MemorySink {
    buffer: Arc<Mutex<Vec<u8>>>,
}

impl MemorySink {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A [`Sink`] writing into this buffer.
    #[must_use]
    pub fn sink(&self) -> Sink {
        Sink::writer(self.clone())
    }

    /// Everything written so far.
    #[must_use]
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap_or_else(PoisonError::into_inner))
            .into_owned()
    }

    /// Every line written so far, parsed as JSON with its keys in order (lines that do not
    /// parse are left out).
    #[must_use]
    pub fn lines(&self) -> Vec<LogLine> {
        self.text()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

/// One JSON line with its top-level keys in the order written (`serde_json`'s own map sorts
/// them).
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine(pub Vec<(String, serde_json::Value)>);

impl LogLine {
    /// The value of the first `key`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&serde_json::Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The string value of `key`.
    #[must_use]
    pub fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(serde_json::Value::as_str)
    }

    /// The keys, in order.
    #[must_use]
    pub fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_str()).collect()
    }
}

impl<'de> serde::Deserialize<'de> for LogLine {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = LogLine;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<LogLine, M::Error> {
                let mut fields = Vec::new();
                while let Some(entry) = map.next_entry::<String, serde_json::Value>()? {
                    fields.push(entry);
                }
                Ok(LogLine(fields))
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

impl Write for MemorySink {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buffer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
