//! Field paths in Kubernetes' notation: `spec.template.spec.requirements[2].values`,
//! `spec.template.metadata.labels[example.com/team]`.

use std::fmt;

/// A path from the document root to a field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldPath(String);

impl FieldPath {
    #[must_use]
    pub fn root() -> Self {
        Self::default()
    }

    /// The path of a named field below this one.
    #[must_use]
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Self(name.to_owned())
        } else {
            Self(format!("{}.{name}", self.0))
        }
    }

    /// The path of a list item.
    #[must_use]
    pub fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    /// The path of a map entry.
    #[must_use]
    pub fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        if self.0.is_empty() { "<root>" } else { &self.0 }
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One broken rule: where, and which rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub path: String,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Collects the violations of one document.
#[derive(Debug, Default)]
pub struct Violations(Vec<Violation>);

impl Violations {
    pub fn add(&mut self, path: &FieldPath, message: impl Into<String>) {
        self.0.push(Violation {
            path: path.as_str().to_owned(),
            message: message.into(),
        });
    }

    #[must_use]
    pub fn into_vec(self) -> Vec<Violation> {
        self.0
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
