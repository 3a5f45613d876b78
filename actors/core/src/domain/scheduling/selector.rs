//! Label selectors (`metav1.LabelSelector`) in a compact, hashable form, with Kubernetes'
//! semantics: a missing selector or an invalid one selects nothing, an empty one everything.
//! Topology spread constraints and pod (anti-)affinity terms select the pods they count with
//! these; namespace selectors select namespaces by their labels.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as ApiLabelSelector;

/// How a selector term compares a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One condition on one label key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SelectorTerm {
    pub key: String,
    pub operator: SelectorOperator,
    /// Sorted, without duplicates.
    pub values: Vec<String>,
}

impl SelectorTerm {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.binary_search(v).is_ok()),
            SelectorOperator::NotIn => value.is_none_or(|v| self.values.binary_search(v).is_err()),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// A label selector: the conjunction of its terms, or nothing at all.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LabelSelector {
    /// Selects no object (a missing or invalid selector).
    Nothing,
    /// Selects objects meeting every term (no terms: everything). Terms are sorted.
    Terms(Vec<SelectorTerm>),
}

impl LabelSelector {
    /// Everything.
    #[must_use]
    pub fn everything() -> Self {
        Self::Terms(Vec::new())
    }

    /// `key=value` for each pair.
    #[must_use]
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Self {
        Self::Terms(
            labels
                .iter()
                .map(|(key, value)| SelectorTerm {
                    key: key.clone(),
                    operator: SelectorOperator::In,
                    values: vec![value.clone()],
                })
                .collect(),
        )
    }

    /// Kubernetes' `LabelSelectorAsSelector`: `None` and invalid selectors select nothing.
    #[must_use]
    pub fn from_api(selector: Option<&ApiLabelSelector>) -> Self {
        let Some(selector) = selector else {
            return Self::Nothing;
        };
        let mut terms = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            terms.push(SelectorTerm {
                key: key.clone(),
                operator: SelectorOperator::In,
                values: vec![value.clone()],
            });
        }
        for expression in selector.match_expressions.iter().flatten() {
            let mut values: Vec<String> = expression.values.clone().unwrap_or_default();
            values.sort_unstable();
            values.dedup();
            let operator = match expression.operator.as_str() {
                "In" => SelectorOperator::In,
                "NotIn" => SelectorOperator::NotIn,
                "Exists" => SelectorOperator::Exists,
                "DoesNotExist" => SelectorOperator::DoesNotExist,
                _ => return Self::Nothing,
            };
            let needs_values = matches!(operator, SelectorOperator::In | SelectorOperator::NotIn);
            if needs_values == values.is_empty() {
                return Self::Nothing;
            }
            terms.push(SelectorTerm {
                key: expression.key.clone(),
                operator,
                values,
            });
        }
        terms.sort();
        terms.dedup();
        Self::Terms(terms)
    }

    /// Adds `key In [value]` for each of `keys` the labels carry (`matchLabelKeys`).
    #[must_use]
    pub fn with_label_keys(self, keys: &[String], labels: &BTreeMap<String, String>) -> Self {
        let Self::Terms(mut terms) = self else {
            return Self::Nothing;
        };
        for key in keys {
            if let Some(value) = labels.get(key) {
                terms.push(SelectorTerm {
                    key: key.clone(),
                    operator: SelectorOperator::In,
                    values: vec![value.clone()],
                });
            }
        }
        terms.sort();
        terms.dedup();
        Self::Terms(terms)
    }

    /// Whether an object with these labels is selected.
    #[must_use]
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Self::Nothing => false,
            Self::Terms(terms) => terms.iter().all(|term| term.matches(labels)),
        }
    }
}

impl fmt::Display for LabelSelector {
    /// The `kubectl -l` form: `app=web,tier in (a,b),!legacy`; `<none>` for nothing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self::Terms(terms) = self else {
            return f.write_str("<none>");
        };
        if terms.is_empty() {
            return f.write_str("<all>");
        }
        for (i, term) in terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match (term.operator, term.values.as_slice()) {
                (SelectorOperator::In, [only]) => write!(f, "{}={only}", term.key)?,
                (SelectorOperator::In, values) => {
                    write!(f, "{} in ({})", term.key, values.join(","))?;
                }
                (SelectorOperator::NotIn, values) => {
                    write!(f, "{} notin ({})", term.key, values.join(","))?;
                }
                (SelectorOperator::Exists, _) => f.write_str(&term.key)?,
                (SelectorOperator::DoesNotExist, _) => write!(f, "!{}", term.key)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    #[test]
    fn missing_selectors_select_nothing_and_empty_ones_everything() {
        assert!(!LabelSelector::from_api(None).matches(&labels(&[])));
        let empty = ApiLabelSelector::default();
        assert!(LabelSelector::from_api(Some(&empty)).matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn expressions_follow_kubernetes_semantics() {
        let selector = LabelSelector::from_api(Some(&ApiLabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![
                expression("tier", "In", &["a", "b"]),
                expression("legacy", "DoesNotExist", &[]),
                expression("zone", "NotIn", &["z9"]),
            ]),
        }));
        assert!(selector.matches(&labels(&[("app", "web"), ("tier", "a")])));
        assert!(!selector.matches(&labels(&[("app", "web"), ("tier", "c")])));
        assert!(!selector.matches(&labels(&[("app", "web"), ("tier", "a"), ("legacy", "1")])));
        assert!(!selector.matches(&labels(&[("app", "web"), ("tier", "a"), ("zone", "z9")])));
        assert_eq!(
            selector.to_string(),
            "app=web,!legacy,tier in (a,b),zone notin (z9)"
        );
    }

    #[test]
    fn invalid_selectors_select_nothing() {
        for bad in [
            expression("a", "In", &[]),
            expression("a", "Exists", &["x"]),
            expression("a", "Near", &["x"]),
        ] {
            let selector = LabelSelector::from_api(Some(&ApiLabelSelector {
                match_labels: None,
                match_expressions: Some(vec![bad]),
            }));
            assert_eq!(selector, LabelSelector::Nothing);
        }
    }

    #[test]
    fn match_label_keys_narrow_to_the_pods_own_values() {
        let selector = LabelSelector::from_labels(&labels(&[("app", "web")]))
            .with_label_keys(&["version".to_owned()], &labels(&[("version", "v2")]));
        assert!(selector.matches(&labels(&[("app", "web"), ("version", "v2")])));
        assert!(!selector.matches(&labels(&[("app", "web"), ("version", "v1")])));
    }
}
