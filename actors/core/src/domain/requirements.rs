//! Karpenter's requirements algebra over label keys (core `pkg/scheduling/requirement(s).go`).
//!
//! A [`Requirement`] is the set of values a label key may take: a finite set (`In`), the
//! complement of one (`NotIn`, `Exists`), the empty set (`DoesNotExist`), optionally bounded by
//! integer limits (`Gt`, `Lt`, which act as `Exists` with bounds). [`Requirements`] maps label
//! keys (normalized through [`labels::normalize`], so `beta.kubernetes.io/arch` means
//! `kubernetes.io/arch`) to requirements, and adding a requirement for a key already present
//! intersects the two. `minValues` travels with a requirement and takes the larger bound.
//!
//! Compatibility follows Karpenter: [`Requirements::compatible`] first refuses incoming keys
//! this side does not define (unless the incoming operator is `NotIn`/`DoesNotExist`, or the key
//! is well-known and [`AllowUndefined::WellKnown`] is asked for, as for NodeClaims not yet
//! launched), then [`Requirements::intersects`] demands a common value for every key both sides
//! define, except when both sides only exclude values.
//!
//! Representation: keys and values are shared strings (`Arc<str>`), value sets sorted vectors,
//! requirements a vector sorted by key. Sets are small (a handful of zones, capacity types,
//! label values), so sorted vectors beat hash sets, and two requirement lists are compared in
//! one merge walk without allocating. Requirements hash and compare by content so the
//! scheduler can intern them and cache compatibility per pair.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};

use crate::apis::labels;
pub use crate::apis::requirements::Operator;
use crate::apis::requirements::{NodeClaimRequirement, Requirement as ApiRequirement};

/// How many values a requirement prints before summarising the rest (Karpenter prints five).
const PRINTED_VALUES: usize = 5;

/// A requirement that could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error("requirement on {key:?}: unknown operator {operator:?}")]
    UnknownOperator { key: String, operator: String },
    #[error(
        "requirement on {key:?}: operator {operator} needs exactly one integer value, got {values:?}"
    )]
    NotAnInteger {
        key: String,
        operator: &'static str,
        values: Vec<String>,
    },
    #[error("requirement on {key:?}: minValues must be at least 1, got {min_values}")]
    MinValues { key: String, min_values: i64 },
}

impl RequirementError {
    /// A short label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::UnknownOperator { .. } => "unknown_operator",
            Self::NotAnInteger { .. } => "not_an_integer",
            Self::MinValues { .. } => "invalid_min_values",
        }
    }
}

/// The values one label key may take.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: Arc<str>,
    /// `true`: every value except `values`; `false`: exactly `values`.
    complement: bool,
    /// Sorted, without duplicates.
    values: Vec<Arc<str>>,
    greater_than: Option<i64>,
    less_than: Option<i64>,
    min_values: Option<u32>,
}

impl Requirement {
    /// Builds a requirement from an operator and its values, normalizing the key.
    pub fn new<S: AsRef<str>>(
        key: &str,
        operator: Operator,
        values: &[S],
    ) -> Result<Self, RequirementError> {
        let key: Arc<str> = Arc::from(labels::normalize(key));
        let mut requirement = Self {
            key,
            complement: true,
            values: Vec::new(),
            greater_than: None,
            less_than: None,
            min_values: None,
        };
        match operator {
            Operator::In => {
                requirement.complement = false;
                requirement.values = sorted_values(values);
            }
            Operator::NotIn => requirement.values = sorted_values(values),
            Operator::Exists => {}
            Operator::DoesNotExist => requirement.complement = false,
            Operator::Gt | Operator::Lt => {
                let bound = match values {
                    [single] => single.as_ref().parse::<i64>().ok(),
                    _ => None,
                };
                let Some(bound) = bound else {
                    return Err(RequirementError::NotAnInteger {
                        key: requirement.key.to_string(),
                        operator: operator.as_str(),
                        values: values.iter().map(|v| v.as_ref().to_owned()).collect(),
                    });
                };
                if operator == Operator::Gt {
                    requirement.greater_than = Some(bound);
                } else {
                    requirement.less_than = Some(bound);
                }
            }
        }
        Ok(requirement)
    }

    /// `key In [values]`.
    #[must_use]
    pub fn in_values<S: AsRef<str>>(key: &str, values: &[S]) -> Self {
        Self {
            key: Arc::from(labels::normalize(key)),
            complement: false,
            values: sorted_values(values),
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    /// `key In [values]` from values already shared.
    #[must_use]
    pub fn in_shared(key: Arc<str>, values: impl IntoIterator<Item = Arc<str>>) -> Self {
        let mut values: Vec<Arc<str>> = values.into_iter().collect();
        values.sort_unstable();
        values.dedup();
        Self {
            key,
            complement: false,
            values,
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    /// `key Exists`: any value.
    #[must_use]
    pub fn exists(key: &str) -> Self {
        Self::exists_shared(Arc::from(labels::normalize(key)))
    }

    /// `key Exists` for a key already shared and normalized.
    #[must_use]
    pub fn exists_shared(key: Arc<str>) -> Self {
        Self {
            key,
            complement: true,
            values: Vec::new(),
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    /// `key DoesNotExist`: no value.
    #[must_use]
    pub fn does_not_exist(key: &str) -> Self {
        Self {
            complement: false,
            ..Self::exists(key)
        }
    }

    /// Sets `minValues`.
    #[must_use]
    pub fn with_min_values(mut self, min_values: Option<u32>) -> Self {
        self.min_values = min_values;
        self
    }

    /// The (normalized) label key.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The listed values: allowed ones for `In`, excluded ones for `NotIn`; sorted.
    #[must_use]
    pub fn values(&self) -> &[Arc<str>] {
        &self.values
    }

    /// Whether this is a complement set (`NotIn`, `Exists`, `Gt`, `Lt`).
    #[must_use]
    pub fn is_complement(&self) -> bool {
        self.complement
    }

    /// The exclusive lower bound of `Gt`.
    #[must_use]
    pub fn greater_than(&self) -> Option<i64> {
        self.greater_than
    }

    /// The exclusive upper bound of `Lt`.
    #[must_use]
    pub fn less_than(&self) -> Option<i64> {
        self.less_than
    }

    /// `minValues`: how many distinct values the launch must be able to choose from.
    #[must_use]
    pub fn min_values(&self) -> Option<u32> {
        self.min_values
    }

    /// The operator this requirement reads as (bounds read as `Exists` or `NotIn`).
    #[must_use]
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (true, false) => Operator::NotIn,
            (true, true) => Operator::Exists,
            (false, false) => Operator::In,
            (false, true) => Operator::DoesNotExist,
        }
    }

    /// Whether the operator only excludes (`NotIn`, `DoesNotExist`).
    #[must_use]
    pub fn only_excludes(&self) -> bool {
        matches!(self.operator(), Operator::NotIn | Operator::DoesNotExist)
    }

    /// How many values are allowed; `None` for a complement (unbounded).
    #[must_use]
    pub fn len(&self) -> Option<usize> {
        (!self.complement).then_some(self.values.len())
    }

    /// Whether no value is allowed (`DoesNotExist`, or an empty `In`).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// The only allowed value, when exactly one is.
    #[must_use]
    pub fn single_value(&self) -> Option<&str> {
        match (self.complement, self.values.as_slice()) {
            (false, [only]) => Some(only),
            _ => None,
        }
    }

    /// Whether `value` is allowed.
    #[must_use]
    pub fn has(&self, value: &str) -> bool {
        let listed = self.values.binary_search_by(|v| (**v).cmp(value)).is_ok();
        listed != self.complement && within_bounds(value, self.greater_than, self.less_than)
    }

    /// The values both allow, Karpenter's `Intersection`. Bounds that leave nothing make
    /// `DoesNotExist`; a finite result drops its bounds after filtering by them.
    #[must_use]
    pub fn intersection(&self, other: &Self) -> Self {
        let complement = self.complement && other.complement;
        let greater_than = max_option(self.greater_than, other.greater_than);
        let less_than = min_option(self.less_than, other.less_than);
        let min_values = max_option(self.min_values, other.min_values);
        if let (Some(gt), Some(lt)) = (greater_than, less_than)
            && gt >= lt
        {
            return Self {
                key: self.key.clone(),
                complement: false,
                values: Vec::new(),
                greater_than: None,
                less_than: None,
                min_values,
            };
        }
        let mut values = match (self.complement, other.complement) {
            (true, true) => union(&self.values, &other.values),
            (true, false) => difference(&other.values, &self.values),
            (false, true) => difference(&self.values, &other.values),
            (false, false) => intersection(&self.values, &other.values),
        };
        if greater_than.is_some() || less_than.is_some() {
            values.retain(|v| within_bounds(v, greater_than, less_than));
        }
        let (greater_than, less_than) = if complement {
            (greater_than, less_than)
        } else {
            (None, None)
        };
        Self {
            key: self.key.clone(),
            complement,
            values,
            greater_than,
            less_than,
            min_values,
        }
    }

    /// Whether some value is allowed by both, without building the intersection.
    #[must_use]
    pub fn has_intersection(&self, other: &Self) -> bool {
        let greater_than = max_option(self.greater_than, other.greater_than);
        let less_than = min_option(self.less_than, other.less_than);
        if let (Some(gt), Some(lt)) = (greater_than, less_than)
            && gt >= lt
        {
            return false;
        }
        let ok = |v: &str| within_bounds(v, greater_than, less_than);
        match (self.complement, other.complement) {
            (true, true) => true,
            (true, false) => other
                .values
                .iter()
                .any(|v| ok(v) && self.values.binary_search(v).is_err()),
            (false, true) => self
                .values
                .iter()
                .any(|v| ok(v) && other.values.binary_search(v).is_err()),
            (false, false) => any_common(&self.values, &other.values, ok),
        }
    }

    /// The requirement as CRD requirements: one entry, or two when both bounds are set.
    #[must_use]
    pub fn to_api(&self) -> Vec<ApiRequirement> {
        let min_values = self.min_values.map(i64::from);
        let entry = |operator: Operator, values: Vec<String>| ApiRequirement {
            key: self.key.to_string(),
            operator,
            values,
            min_values,
        };
        let listed: Vec<String> = self.values.iter().map(ToString::to_string).collect();
        let mut out = Vec::new();
        if self.greater_than.is_none() && self.less_than.is_none() || !listed.is_empty() {
            out.push(entry(self.operator(), listed));
        }
        if let Some(gt) = self.greater_than {
            out.push(entry(Operator::Gt, vec![gt.to_string()]));
        }
        if let Some(lt) = self.less_than {
            out.push(entry(Operator::Lt, vec![lt.to_string()]));
        }
        out
    }
}

impl fmt::Display for Requirement {
    /// Karpenter's rendering: `key In [a b c]`, at most five values, then bounds and
    /// `minValues`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let operator = self.operator();
        write!(f, "{} {}", self.key, operator.as_str())?;
        if matches!(operator, Operator::In | Operator::NotIn) {
            f.write_str(" [")?;
            for (i, value) in self.values.iter().take(PRINTED_VALUES).enumerate() {
                if i > 0 {
                    f.write_str(" ")?;
                }
                f.write_str(value)?;
            }
            if self.values.len() > PRINTED_VALUES {
                write!(f, " and {} others", self.values.len() - PRINTED_VALUES)?;
            }
            f.write_str("]")?;
        }
        if let Some(gt) = self.greater_than {
            write!(f, " >{gt}")?;
        }
        if let Some(lt) = self.less_than {
            write!(f, " <{lt}")?;
        }
        if let Some(min) = self.min_values {
            write!(f, " minValues {min}")?;
        }
        Ok(())
    }
}

fn sorted_values<S: AsRef<str>>(values: &[S]) -> Vec<Arc<str>> {
    let mut out: Vec<Arc<str>> = values.iter().map(|v| Arc::from(v.as_ref())).collect();
    out.sort_unstable();
    out.dedup();
    out
}

fn within_bounds(value: &str, greater_than: Option<i64>, less_than: Option<i64>) -> bool {
    if greater_than.is_none() && less_than.is_none() {
        return true;
    }
    let Ok(number) = value.parse::<i64>() else {
        return false;
    };
    greater_than.is_none_or(|gt| number > gt) && less_than.is_none_or(|lt| number < lt)
}

fn max_option<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_option<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn union(a: &[Arc<str>], b: &[Arc<str>]) -> Vec<Arc<str>> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            Ordering::Less => {
                out.push(a[i].clone());
                i += 1;
            }
            Ordering::Greater => {
                out.push(b[j].clone());
                j += 1;
            }
            Ordering::Equal => {
                out.push(a[i].clone());
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

fn intersection(a: &[Arc<str>], b: &[Arc<str>]) -> Vec<Arc<str>> {
    let mut out = Vec::with_capacity(a.len().min(b.len()));
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
            Ordering::Equal => {
                out.push(a[i].clone());
                i += 1;
                j += 1;
            }
        }
    }
    out
}

fn difference(a: &[Arc<str>], b: &[Arc<str>]) -> Vec<Arc<str>> {
    a.iter()
        .filter(|v| b.binary_search(v).is_err())
        .cloned()
        .collect()
}

fn any_common(a: &[Arc<str>], b: &[Arc<str>], ok: impl Fn(&str) -> bool) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if Arc::ptr_eq(&a[i], &b[j]) {
            if ok(&a[i]) {
                return true;
            }
            i += 1;
            j += 1;
            continue;
        }
        match a[i].cmp(&b[j]) {
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
            Ordering::Equal => {
                if ok(&a[i]) {
                    return true;
                }
                i += 1;
                j += 1;
            }
        }
    }
    false
}

/// Which keys [`Requirements::compatible`] lets the other side leave undefined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllowUndefined {
    /// Every key the incoming side requires must be defined here (existing nodes).
    #[default]
    None,
    /// Well-known labels may be undefined: the cloud provider will pick their values at
    /// launch (NodeClaims not yet launched; Karpenter's `AllowUndefinedWellKnownLabels`).
    WellKnown,
}

impl AllowUndefined {
    fn allows(self, key: &str) -> bool {
        self == Self::WellKnown && labels::is_well_known(key)
    }
}

/// Why two requirement lists are incompatible.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Incompatibility {
    /// The incoming side requires a value for a label this side never sets.
    #[error("label {key:?} does not have known values{}", hint.as_ref().map(|h| format!(" (typo of {h:?}?)")).unwrap_or_default())]
    UndefinedLabel { key: String, hint: Option<String> },
    /// Both sides define the key but allow no common value.
    #[error("key {key}, {incoming} not in {existing}")]
    NoCommonValue {
        key: String,
        incoming: String,
        existing: String,
    },
}

/// Requirements by label key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    /// Sorted by key, one entry per key.
    entries: Vec<Requirement>,
}

impl Requirements {
    /// No requirements.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Requirements built by adding each of `requirements` in turn, held without spare room
    /// (an instance type's 25 grew to room for 32; a catalogue holds hundreds of types).
    #[must_use]
    pub fn from_requirements(requirements: impl IntoIterator<Item = Requirement>) -> Self {
        let requirements = requirements.into_iter();
        let mut out = Self {
            entries: Vec::with_capacity(requirements.size_hint().0),
        };
        for requirement in requirements {
            out.add(requirement);
        }
        out.entries.shrink_to_fit();
        out
    }

    /// `key In [value]` for each label.
    #[must_use]
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        Self::from_requirements(
            labels
                .into_iter()
                .map(|(key, value)| Requirement::in_values(key, &[value])),
        )
    }

    /// A node selector term's `matchExpressions` (`matchFields` are ignored, as Karpenter does).
    pub fn from_node_selector_term(term: &NodeSelectorTerm) -> Result<Self, RequirementError> {
        Self::from_node_selector_requirements(term.match_expressions.iter().flatten())
    }

    /// Node selector requirements (`corev1.NodeSelectorRequirement`).
    pub fn from_node_selector_requirements<'a>(
        requirements: impl IntoIterator<Item = &'a NodeSelectorRequirement>,
    ) -> Result<Self, RequirementError> {
        let mut out = Self::new();
        for requirement in requirements {
            out.add(from_node_selector_requirement(requirement)?);
        }
        Ok(out)
    }

    /// `NodePool`/`NodeClaim` requirements with `minValues`.
    pub fn from_api<'a>(
        requirements: impl IntoIterator<Item = &'a ApiRequirement>,
    ) -> Result<Self, RequirementError> {
        let mut out = Self::new();
        for requirement in requirements {
            let min_values = match requirement.min_values {
                None => None,
                Some(min) => {
                    Some(u32::try_from(min).ok().filter(|m| *m >= 1).ok_or_else(|| {
                        RequirementError::MinValues {
                            key: requirement.key.clone(),
                            min_values: min,
                        }
                    })?)
                }
            };
            out.add(
                Requirement::new(&requirement.key, requirement.operator, &requirement.values)?
                    .with_min_values(min_values),
            );
        }
        Ok(out)
    }

    /// Adds a requirement, intersecting it with the one already present for its key.
    pub fn add(&mut self, requirement: Requirement) {
        match self
            .entries
            .binary_search_by(|r| (*r.key).cmp(&*requirement.key))
        {
            Ok(i) => {
                let merged = requirement.intersection(&self.entries[i]);
                self.entries[i] = merged;
            }
            Err(i) => self.entries.insert(i, requirement),
        }
    }

    /// Adds every requirement of `other`.
    pub fn add_all(&mut self, other: &Self) {
        for requirement in &other.entries {
            self.add(requirement.clone());
        }
    }

    /// Replaces the requirement for a key (no intersection).
    pub fn set(&mut self, requirement: Requirement) {
        match self
            .entries
            .binary_search_by(|r| (*r.key).cmp(&*requirement.key))
        {
            Ok(i) => self.entries[i] = requirement,
            Err(i) => self.entries.insert(i, requirement),
        }
    }

    /// Removes the requirement for a key.
    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.entries
            .binary_search_by(|r| (*r.key).cmp(key))
            .ok()
            .map(|i| self.entries.remove(i))
    }

    /// The requirement for a key, if defined.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.entries
            .binary_search_by(|r| (*r.key).cmp(key))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// Whether a key is defined.
    #[must_use]
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The requirements, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = &Requirement> + '_ {
        self.entries.iter()
    }

    /// The defined keys, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.entries.iter().map(Requirement::key)
    }

    /// How many keys are defined.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is defined.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether some requirement carries `minValues`.
    #[must_use]
    pub fn has_min_values(&self) -> bool {
        self.entries.iter().any(|r| r.min_values.is_some())
    }

    /// Whether `incoming` can be met together with these requirements (see the module docs).
    /// Allocation-free; use [`Requirements::compatible`] for the reason.
    #[must_use]
    pub fn is_compatible(&self, incoming: &Self, allow: AllowUndefined) -> bool {
        self.first_undefined(incoming, allow).is_none() && self.first_disjoint(incoming).is_none()
    }

    /// Karpenter's `Compatible`: undefined keys first, then [`Requirements::intersects`].
    pub fn compatible(
        &self,
        incoming: &Self,
        allow: AllowUndefined,
    ) -> Result<(), Incompatibility> {
        if let Some(key) = self.first_undefined(incoming, allow) {
            return Err(Incompatibility::UndefinedLabel {
                key: key.to_owned(),
                hint: self.label_hint(key, allow),
            });
        }
        self.intersects(incoming)
    }

    /// Karpenter's `Intersects`: every key both define has a common value, unless both sides
    /// only exclude values. Keys defined on one side only are fine.
    pub fn intersects(&self, incoming: &Self) -> Result<(), Incompatibility> {
        match self.first_disjoint(incoming) {
            None => Ok(()),
            Some((existing, incoming)) => Err(Incompatibility::NoCommonValue {
                key: existing.key.to_string(),
                incoming: incoming.to_string(),
                existing: existing.to_string(),
            }),
        }
    }

    /// Whether [`Requirements::intersects`] holds, without allocating.
    #[must_use]
    pub fn intersects_ok(&self, incoming: &Self) -> bool {
        self.first_disjoint(incoming).is_none()
    }

    fn first_undefined<'a>(&self, incoming: &'a Self, allow: AllowUndefined) -> Option<&'a str> {
        let mut mine = self.entries.iter().peekable();
        for requirement in &incoming.entries {
            while mine.peek().is_some_and(|r| *r.key < *requirement.key) {
                mine.next();
            }
            let defined = mine.peek().is_some_and(|r| r.key == requirement.key);
            if !defined && !requirement.only_excludes() && !allow.allows(&requirement.key) {
                return Some(&requirement.key);
            }
        }
        None
    }

    fn first_disjoint<'a>(
        &'a self,
        incoming: &'a Self,
    ) -> Option<(&'a Requirement, &'a Requirement)> {
        let (mut i, mut j) = (0, 0);
        while i < self.entries.len() && j < incoming.entries.len() {
            let existing = &self.entries[i];
            let other = &incoming.entries[j];
            match existing.key.cmp(&other.key) {
                Ordering::Less => i += 1,
                Ordering::Greater => j += 1,
                Ordering::Equal => {
                    let both_exclude = other.only_excludes() && existing.only_excludes();
                    if !both_exclude && !existing.has_intersection(other) {
                        return Some((existing, other));
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        None
    }

    /// A likely intended key for a typo, as Karpenter suggests: a well-known label (when
    /// allowed undefined) or a defined key that contains the key or ends with its name part.
    fn label_hint(&self, key: &str, allow: AllowUndefined) -> Option<String> {
        let name = key.split_once('/').map_or(key, |(_, name)| name);
        let matches = |candidate: &str| candidate.contains(key) || candidate.ends_with(name);
        let well_known = labels::CORE_WELL_KNOWN_LABELS
            .iter()
            .chain(labels::AWS_WELL_KNOWN_LABELS)
            .copied()
            .filter(|_| allow == AllowUndefined::WellKnown);
        well_known
            .chain(self.keys())
            .find(|candidate| *candidate != key && matches(candidate))
            .map(str::to_owned)
    }

    /// The requirements as CRD requirements (`NodeClaim.spec.requirements`).
    #[must_use]
    pub fn to_api(&self) -> Vec<NodeClaimRequirement> {
        self.entries
            .iter()
            .flat_map(Requirement::to_api)
            .map(NodeClaimRequirement::from)
            .collect()
    }

    /// Node labels implied by the requirements, as Karpenter stamps them on a NodeClaim: one
    /// value per key outside the restricted domains. A finite set contributes its first value;
    /// an open set (`Exists`, `NotIn`, bounds) an integer that `seed` chooses within the bounds
    /// (Karpenter picks a random one).
    #[must_use]
    pub fn labels(&self, seed: u64) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for requirement in &self.entries {
            if is_restricted_node_label(&requirement.key) {
                continue;
            }
            let value = if requirement.complement {
                let low = requirement
                    .greater_than
                    .map_or(0, |gt| gt.saturating_add(1));
                let high = requirement.less_than.unwrap_or(i64::MAX);
                let span = u64::try_from(high.saturating_sub(low)).unwrap_or(0);
                if span == 0 {
                    continue;
                }
                let mut candidate = low.saturating_add_unsigned(seed % span);
                // Skip excluded values (a NotIn list is short).
                for _ in 0..=requirement.values.len() {
                    if requirement.has(&candidate.to_string()) {
                        break;
                    }
                    candidate = candidate.saturating_add(1);
                }
                candidate.to_string()
            } else {
                match requirement.values.first() {
                    Some(first) => first.to_string(),
                    None => continue,
                }
            };
            out.insert(requirement.key.to_string(), value);
        }
        out
    }
}

/// Karpenter's `IsRestrictedNodeLabel`: labels the kubelet or Karpenter set themselves.
#[must_use]
pub fn is_restricted_node_label(key: &str) -> bool {
    if labels::CORE_WELL_KNOWN_LABELS.contains(&key) || labels::AWS_WELL_KNOWN_LABELS.contains(&key)
    {
        return true;
    }
    let domain = labels::domain(key).unwrap_or("");
    if [
        "kops.k8s.io",
        "node.kubernetes.io",
        "node-restriction.kubernetes.io",
    ]
    .iter()
    .any(|exception| domain.ends_with(exception))
    {
        return false;
    }
    ["kubernetes.io", "k8s.io", labels::CORE_GROUP]
        .iter()
        .any(|restricted| domain.ends_with(restricted))
        || key == labels::HOSTNAME
}

impl fmt::Display for Requirements {
    /// Karpenter's rendering: requirements joined by `, `, the hostname left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for requirement in self.entries.iter().filter(|r| &*r.key != labels::HOSTNAME) {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

/// One `corev1.NodeSelectorRequirement`.
pub fn from_node_selector_requirement(
    requirement: &NodeSelectorRequirement,
) -> Result<Requirement, RequirementError> {
    let operator = match requirement.operator.as_str() {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::Gt,
        "Lt" => Operator::Lt,
        other => {
            return Err(RequirementError::UnknownOperator {
                key: requirement.key.clone(),
                operator: other.to_owned(),
            });
        }
    };
    let values: &[String] = requirement.values.as_deref().unwrap_or(&[]);
    Requirement::new(&requirement.key, operator, values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::labels::{ARCH, CAPACITY_TYPE, INSTANCE_TYPE, ZONE};

    fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement::new(key, operator, values).expect("valid requirement")
    }

    fn reqs(list: &[(&str, Operator, &[&str])]) -> Requirements {
        Requirements::from_requirements(list.iter().map(|(k, o, v)| req(k, *o, v)))
    }

    use Operator::{DoesNotExist, Exists, Gt, In, Lt, NotIn};

    #[test]
    fn built_requirements_hold_no_spare_room() {
        let keys: Vec<String> = (0..25).map(|i| format!("example.com/key-{i}")).collect();
        let built = Requirements::from_requirements(
            keys.iter()
                .map(|k| req(k, Exists, &[]))
                .chain([req("example.com/key-0", Exists, &[])]),
        );
        assert_eq!(built.entries.len(), 25, "a repeated key merges");
        assert_eq!(built.entries.capacity(), 25);
    }

    #[test]
    fn intersections_follow_karpenter_table() {
        let a = || req("k", In, &["a", "b"]);
        let cases = [
            (a(), req("k", In, &["b", "c"]), "k In [b]"),
            (a(), req("k", NotIn, &["a"]), "k In [b]"),
            (
                req("k", NotIn, &["a"]),
                req("k", NotIn, &["b"]),
                "k NotIn [a b]",
            ),
            (req("k", Exists, &[]), a(), "k In [a b]"),
            (req("k", DoesNotExist, &[]), a(), "k DoesNotExist"),
            (
                req("k", DoesNotExist, &[]),
                req("k", Exists, &[]),
                "k DoesNotExist",
            ),
            (req("k", Gt, &["1"]), req("k", Lt, &["5"]), "k Exists >1 <5"),
            (req("k", Gt, &["5"]), req("k", Lt, &["5"]), "k DoesNotExist"),
            (
                req("k", Gt, &["1"]),
                req("k", In, &["1", "2", "x", "9"]),
                "k In [2 9]",
            ),
            (
                req("k", Gt, &["1"]),
                req("k", NotIn, &["0", "3"]),
                "k NotIn [3] >1",
            ),
        ];
        for (left, right, expected) in cases {
            assert_eq!(
                left.intersection(&right).to_string(),
                expected,
                "{left} ∩ {right}"
            );
            assert_eq!(
                right.intersection(&left).to_string(),
                expected,
                "{right} ∩ {left}"
            );
            assert_eq!(
                left.has_intersection(&right),
                !left.intersection(&right).is_empty(),
                "{left} has_intersection {right}"
            );
        }
    }

    #[test]
    fn membership_respects_bounds_and_complements() {
        assert!(req("k", NotIn, &["a"]).has("b"));
        assert!(!req("k", NotIn, &["a"]).has("a"));
        assert!(req("k", Gt, &["3"]).has("4"));
        assert!(!req("k", Gt, &["3"]).has("3"));
        assert!(!req("k", Gt, &["3"]).has("four"));
        assert!(req("k", Lt, &["3"]).has("-1"));
        assert!(!req("k", DoesNotExist, &[]).has(""));
    }

    #[test]
    fn deprecated_keys_are_normalized() {
        let r = req("beta.kubernetes.io/arch", In, &["arm64"]);
        assert_eq!(r.key(), ARCH);
        let node = Requirements::from_labels(&BTreeMap::from([(
            "failure-domain.beta.kubernetes.io/zone".to_owned(),
            "z1".to_owned(),
        )]));
        assert_eq!(
            node.get(ZONE).and_then(Requirement::single_value),
            Some("z1")
        );
    }

    #[test]
    fn gt_and_lt_need_one_integer() {
        assert!(matches!(
            Requirement::new("k", Gt, &["x"]),
            Err(RequirementError::NotAnInteger { .. })
        ));
        assert!(Requirement::new("k", Lt, &["1", "2"]).is_err());
        let error = from_node_selector_requirement(&NodeSelectorRequirement {
            key: "k".to_owned(),
            operator: "Near".to_owned(),
            values: None,
        });
        assert!(matches!(
            error,
            Err(RequirementError::UnknownOperator { .. })
        ));
    }

    #[test]
    fn adding_intersects_and_min_values_take_the_larger() {
        let mut r = Requirements::new();
        r.add(req(INSTANCE_TYPE, In, &["a", "b", "c"]).with_min_values(Some(2)));
        r.add(req(INSTANCE_TYPE, NotIn, &["c"]).with_min_values(Some(3)));
        let merged = r.get(INSTANCE_TYPE).expect("defined");
        assert_eq!(merged.values().len(), 2);
        assert_eq!(merged.min_values(), Some(3));
        assert!(r.has_min_values());
    }

    #[test]
    fn compatibility_refuses_undefined_custom_labels() {
        let nodepool = reqs(&[(CAPACITY_TYPE, In, &["spot"])]);
        let pod = reqs(&[("team", In, &["a"])]);
        assert!(matches!(
            nodepool.compatible(&pod, AllowUndefined::WellKnown),
            Err(Incompatibility::UndefinedLabel { .. })
        ));
        // NotIn and DoesNotExist of an undefined key are fine.
        let pod = reqs(&[("team", NotIn, &["a"]), ("gpu", DoesNotExist, &[])]);
        assert_eq!(nodepool.compatible(&pod, AllowUndefined::None), Ok(()));
    }

    #[test]
    fn compatibility_allows_undefined_well_known_labels_only_when_asked() {
        let nodepool = reqs(&[(CAPACITY_TYPE, In, &["spot"])]);
        let pod = reqs(&[(ZONE, In, &["z1"])]);
        assert_eq!(nodepool.compatible(&pod, AllowUndefined::WellKnown), Ok(()));
        assert!(nodepool.compatible(&pod, AllowUndefined::None).is_err());
        assert!(nodepool.is_compatible(&pod, AllowUndefined::WellKnown));
    }

    #[test]
    fn compatibility_needs_common_values_unless_both_exclude() {
        let node = reqs(&[(ZONE, In, &["z1"]), ("gpu", DoesNotExist, &[])]);
        let wants_z2 = reqs(&[(ZONE, In, &["z2"])]);
        assert_eq!(
            node.compatible(&wants_z2, AllowUndefined::None),
            Err(Incompatibility::NoCommonValue {
                key: ZONE.to_owned(),
                incoming: "topology.kubernetes.io/zone In [z2]".to_owned(),
                existing: "topology.kubernetes.io/zone In [z1]".to_owned(),
            })
        );
        let no_gpu = reqs(&[("gpu", DoesNotExist, &[])]);
        assert!(node.is_compatible(&no_gpu, AllowUndefined::None));
        let wants_gpu = reqs(&[("gpu", Exists, &[])]);
        assert!(!node.is_compatible(&wants_gpu, AllowUndefined::None));
    }

    #[test]
    fn undefined_label_errors_hint_at_typos() {
        let nodepool = reqs(&[("example.com/team", In, &["a"])]);
        let pod = reqs(&[("team", In, &["a"])]);
        let error = nodepool
            .compatible(&pod, AllowUndefined::None)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some("label \"team\" does not have known values (typo of \"example.com/team\"?)")
        );
    }

    #[test]
    fn api_round_trip_keeps_operators_and_min_values() {
        let original = reqs(&[
            (ZONE, In, &["z1", "z2"]),
            ("team", NotIn, &["x"]),
            ("gpu", DoesNotExist, &[]),
            ("special", Exists, &[]),
            ("cpu", Gt, &["4"]),
        ]);
        let api: Vec<ApiRequirement> = original
            .to_api()
            .into_iter()
            .map(ApiRequirement::from)
            .collect();
        let back = Requirements::from_api(&api).expect("valid");
        assert_eq!(back, original);
    }

    #[test]
    fn labels_pick_values_and_skip_restricted_keys() {
        let r = reqs(&[
            ("team", In, &["b", "a"]),
            ("slot", Gt, &["10"]),
            (ZONE, In, &["z1"]),
            ("kubernetes.io/hostname", In, &["h"]),
        ]);
        let labels = r.labels(7);
        assert_eq!(labels.get("team").map(String::as_str), Some("a"));
        let slot: i64 = labels.get("slot").and_then(|v| v.parse().ok()).unwrap_or(0);
        assert!(slot > 10);
        assert!(!labels.contains_key(ZONE));
        assert!(!labels.contains_key("kubernetes.io/hostname"));
    }
}
