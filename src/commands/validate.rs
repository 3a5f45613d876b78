//! `karpenter validate -f FILE...`: checks NodePool, NodeClaim and EC2NodeClass manifests.
//!
//! Each input (a file, every `.yaml`/`.yml`/`.json` file of a directory, or `-` for stdin) is
//! split into YAML documents; each document goes through
//! [`karpenter_core::apis::validation::Validator`], and every problem is printed as
//! `<source>[<document index>] <Kind>/<name>: <field path>: <rule>`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use karpenter_core::apis::validation::{Outcome, Validator, Violation};
use karpenter_core::yaml;
use serde_json::Value;

use super::Status;

/// Largest input read, so a runaway file cannot exhaust memory.
const MAX_INPUT_BYTES: u64 = 64 * 1024 * 1024;

/// What became of one document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocumentReport {
    Valid {
        kind: &'static str,
        name: String,
    },
    Invalid {
        kind: &'static str,
        name: String,
        violations: Vec<Violation>,
    },
    Skipped {
        reason: String,
    },
}

/// What became of one input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceReport {
    pub source: String,
    /// Documents in order; empty documents are left out but keep their index.
    pub documents: Vec<(usize, DocumentReport)>,
    /// Set when the input could not be read or parsed; documents before the error are kept.
    pub error: Option<String>,
}

impl SourceReport {
    fn status(&self) -> Status {
        if self.error.is_some() {
            Status::BadInput
        } else if self
            .documents
            .iter()
            .any(|(_, d)| matches!(d, DocumentReport::Invalid { .. }))
        {
            Status::Problems
        } else {
            Status::Success
        }
    }
}

/// Validates every document of a YAML text. Never panics, whatever the text.
#[must_use]
pub fn validate_text(source: &str, text: &str, validator: &Validator) -> SourceReport {
    let mut report = SourceReport {
        source: source.to_owned(),
        documents: Vec::new(),
        error: None,
    };
    for (index, document) in yaml::documents::<Value>(text).into_iter().enumerate() {
        let value = match document {
            Ok(value) => value,
            Err(error) => {
                report.error = Some(format!("document {index}: {error}"));
                break;
            }
        };
        if value.is_null() {
            continue;
        }
        let outcome = match validator.validate(&value) {
            Outcome::Checked {
                kind,
                name,
                violations,
            } if violations.is_empty() => DocumentReport::Valid {
                kind: kind.as_str(),
                name,
            },
            Outcome::Checked {
                kind,
                name,
                violations,
            } => DocumentReport::Invalid {
                kind: kind.as_str(),
                name,
                violations,
            },
            Outcome::Skipped { reason } => DocumentReport::Skipped { reason },
        };
        report.documents.push((index, outcome));
    }
    report
}

/// Runs the command over `inputs` and prints the report.
pub fn run(inputs: &[PathBuf], out: &mut impl Write, err: &mut impl Write) -> Status {
    let validator = match Validator::new() {
        Ok(validator) => validator,
        Err(error) => {
            let _ = writeln!(err, "error: {error}");
            return Status::Problems;
        }
    };
    let mut status = Status::Success;
    let (mut valid, mut invalid) = (0usize, 0usize);
    for input in inputs {
        for report in reports_for(input, &validator) {
            status = worse(status, report.status());
            for (index, document) in &report.documents {
                let at = format!("{}[{index}]", report.source);
                let _ = match document {
                    DocumentReport::Valid { kind, name } => {
                        valid += 1;
                        writeln!(out, "{at} {kind}/{name}: valid")
                    }
                    DocumentReport::Invalid {
                        kind,
                        name,
                        violations,
                    } => {
                        invalid += 1;
                        violations.iter().try_for_each(|violation| {
                            writeln!(out, "{at} {kind}/{name}: {violation}")
                        })
                    }
                    DocumentReport::Skipped { reason } => writeln!(out, "{at}: skipped: {reason}"),
                };
            }
            if let Some(error) = &report.error {
                let _ = writeln!(err, "error: {}: {error}", report.source);
            }
        }
    }
    let _ = writeln!(out, "{valid} valid, {invalid} invalid");
    status
}

fn worse(a: Status, b: Status) -> Status {
    if a.code() >= b.code() { a } else { b }
}

/// Reports for one command-line input: stdin, a file, or each manifest file of a directory.
fn reports_for(input: &Path, validator: &Validator) -> Vec<SourceReport> {
    if input.as_os_str() == "-" {
        let mut text = String::new();
        let read = std::io::stdin()
            .take(MAX_INPUT_BYTES)
            .read_to_string(&mut text);
        return vec![match read {
            Ok(_) => validate_text("<stdin>", &text, validator),
            Err(error) => unreadable("<stdin>", &error.to_string()),
        }];
    }
    if input.is_dir() {
        let mut files: Vec<PathBuf> = match std::fs::read_dir(input) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| {
                    path.extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
                })
                .collect(),
            Err(error) => {
                return vec![unreadable(&input.display().to_string(), &error.to_string())];
            }
        };
        files.sort();
        return files
            .iter()
            .map(|file| report_for_file(file, validator))
            .collect();
    }
    vec![report_for_file(input, validator)]
}

fn report_for_file(path: &Path, validator: &Validator) -> SourceReport {
    let source = path.display().to_string();
    let mut text = String::new();
    let read = std::fs::File::open(path)
        .and_then(|file| file.take(MAX_INPUT_BYTES).read_to_string(&mut text));
    match read {
        Ok(_) => validate_text(&source, &text, validator),
        Err(error) => unreadable(&source, &error.to_string()),
    }
}

fn unreadable(source: &str, error: &str) -> SourceReport {
    SourceReport {
        source: source.to_owned(),
        documents: Vec::new(),
        error: Some(error.to_owned()),
    }
}
