//! Resource quantities as integers: Kubernetes `Quantity` strings parsed exactly, and
//! [`Resources`], a resource list with the four core resources as plain fields so the scheduler's
//! inner loop adds, subtracts and compares a few `i64`s instead of decimal strings.
//!
//! Units: `cpu` in millicores, `memory` and `ephemeral-storage` in bytes, `pods` and every other
//! resource (extended resources such as `nvidia.com/gpu`, `hugepages-2Mi`, `nodes`) as whole
//! units. Fractions round up, as Kubernetes' `MilliValue()` and `Value()` do, so a request never
//! shrinks in translation. A resource absent from a list counts as zero, which is how
//! Kubernetes and Karpenter compare resource lists.
//!
//! Data flow: pods and instance types are converted once ([`pod_requests`],
//! [`Resources::from_list`]); the scheduler works on [`Resources`]; plans are written back with
//! [`Resources::to_list`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::apis::shared::ResourceList;
use crate::apis::{SharedPodSpec, SlimContainer};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The CPU resource, counted in millicores.
pub const CPU: &str = "cpu";
/// The memory resource, counted in bytes.
pub const MEMORY: &str = "memory";
/// The pods resource: how many pods a node runs.
pub const PODS: &str = "pods";
/// Local ephemeral storage, counted in bytes.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// The `nodes` limit of a `NodePool` (one per node).
pub const NODES: &str = "nodes";

/// Millicores per core.
const MILLIS_PER_UNIT: i64 = 1000;
/// The largest power of ten a `u128` holds (10^38 < 2^128).
const MAX_POW10_U128: u32 = 38;
/// Significant digits kept from a mantissa; the rest only matter for rounding. 36 digits leave
/// room for a binary suffix (at most 2^60) inside a `u128` for any quantity an `i64` can hold.
const MAX_SIGNIFICANT_DIGITS: u32 = 36;

/// Why a quantity string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("quantity {value:?} is not a number ({rule})")]
    Malformed { value: String, rule: &'static str },
    #[error(
        "quantity {value:?} has unknown suffix {suffix:?}: use Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent such as e3"
    )]
    UnknownSuffix { value: String, suffix: String },
    #[error("quantity {value:?} is out of range for {unit}")]
    OutOfRange { value: String, unit: &'static str },
}

impl QuantityError {
    /// A short label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Malformed { .. } => "malformed_quantity",
            Self::UnknownSuffix { .. } => "unknown_quantity_suffix",
            Self::OutOfRange { .. } => "quantity_out_of_range",
        }
    }
}

/// A resource list entry that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    #[error("resource {resource:?}: {source}")]
    Quantity {
        resource: String,
        #[source]
        source: QuantityError,
    },
    #[error("resource {resource:?} of {field} must not be negative, got {value:?}")]
    Negative {
        field: String,
        resource: String,
        value: String,
    },
}

impl ResourceError {
    /// A short label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Quantity { source, .. } => source.category(),
            Self::Negative { .. } => "negative_quantity",
        }
    }
}

/// A quantity parsed exactly: `(-1)^negative * mantissa * 10^exp10 * 2^exp2`, plus whether
/// nonzero digits beyond `MAX_SIGNIFICANT_DIGITS` (36) were dropped (the value is then a little
/// larger in magnitude than the mantissa says, which only matters for rounding up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedQuantity {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
    inexact: bool,
}

impl ParsedQuantity {
    /// Parses Kubernetes' quantity grammar: a signed decimal number (`1`, `1.5`, `.5`, `5.`)
    /// followed by a binary suffix (`Ki` .. `Ei`), a decimal suffix (`n u m k M G T P E`), or an
    /// exponent (`e3`, `E-2`).
    pub fn parse(value: &str) -> Result<Self, QuantityError> {
        let malformed = |rule| QuantityError::Malformed {
            value: value.to_owned(),
            rule,
        };
        let bytes = value.as_bytes();
        let mut pos = 0;
        let mut negative = false;
        match bytes.first() {
            None => return Err(malformed("empty")),
            Some(b'+') => pos = 1,
            Some(b'-') => {
                negative = true;
                pos = 1;
            }
            Some(_) => {}
        }
        let mut mantissa: u128 = 0;
        let mut exp10: i32 = 0;
        let mut digits_kept: u32 = 0;
        let mut inexact = false;
        let mut any_digit = false;
        let mut in_fraction = false;
        while let Some(&byte) = bytes.get(pos) {
            match byte {
                b'0'..=b'9' => {
                    any_digit = true;
                    let digit = u128::from(byte - b'0');
                    if mantissa == 0 && digit == 0 {
                        // Leading zeros are not significant.
                        if in_fraction {
                            exp10 -= 1;
                        }
                    } else if digits_kept < MAX_SIGNIFICANT_DIGITS {
                        mantissa = mantissa * 10 + digit;
                        digits_kept += 1;
                        if in_fraction {
                            exp10 -= 1;
                        }
                    } else {
                        // Past the kept digits: an integer digit scales the value, a fraction
                        // digit only makes it inexact.
                        if !in_fraction {
                            exp10 += 1;
                        }
                        inexact |= digit != 0;
                    }
                }
                b'.' if !in_fraction => in_fraction = true,
                b'.' => return Err(malformed("more than one decimal point")),
                _ => break,
            }
            pos += 1;
        }
        if !any_digit {
            return Err(malformed("no digits"));
        }
        let suffix = value.get(pos..).unwrap_or("");
        let (suffix_exp10, exp2) = match suffix {
            "" => (0, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            _ => (parse_exponent(value, suffix)?, 0),
        };
        exp10 = exp10.saturating_add(suffix_exp10);
        if mantissa == 0 {
            return Ok(Self {
                negative: false,
                mantissa: 0,
                exp10: 0,
                exp2: 0,
                inexact,
            });
        }
        // Trailing zeros of the mantissa move into the exponent, so "1.000Ki" stays small.
        while !inexact && mantissa.is_multiple_of(10) {
            mantissa /= 10;
            exp10 = exp10.saturating_add(1);
        }
        Ok(Self {
            negative,
            mantissa,
            exp10,
            exp2,
            inexact,
        })
    }

    /// `ceil(value * 10^scale)` as an `i64`: scale 3 gives millis, scale 0 whole units.
    pub fn ceil_scaled(&self, scale: i32, original: &str) -> Result<i64, QuantityError> {
        let out_of_range = || QuantityError::OutOfRange {
            value: original.to_owned(),
            unit: if scale == 3 { "millis" } else { "units" },
        };
        if self.mantissa == 0 {
            return Ok(i64::from(self.inexact && !self.negative));
        }
        let scaled = self
            .mantissa
            .checked_mul(1u128 << self.exp2)
            .ok_or_else(out_of_range)?;
        let exponent = self.exp10.saturating_add(scale);
        // magnitude = floor(|value| * 10^scale), remainder = whether a fraction was cut off.
        let (magnitude, remainder) = if exponent >= 0 {
            let factor = pow10(exponent).ok_or_else(out_of_range)?;
            (
                scaled.checked_mul(factor).ok_or_else(out_of_range)?,
                self.inexact,
            )
        } else {
            match pow10(-exponent) {
                Some(divisor) => (scaled / divisor, scaled % divisor != 0 || self.inexact),
                None => (0, true),
            }
        };
        if self.negative {
            // ceil(-x) = -floor(x); the magnitude may be 2^63 (`i64::MIN`).
            let magnitude = i128::try_from(magnitude).map_err(|_| out_of_range())?;
            return i64::try_from(-magnitude).map_err(|_| out_of_range());
        }
        let magnitude = i64::try_from(magnitude).map_err(|_| out_of_range())?;
        if remainder {
            magnitude.checked_add(1).ok_or_else(out_of_range)
        } else {
            Ok(magnitude)
        }
    }
}

fn pow10(exponent: i32) -> Option<u128> {
    let exponent = u32::try_from(exponent).ok()?;
    (exponent <= MAX_POW10_U128).then(|| 10u128.pow(exponent))
}

/// The integer exponent of an `e`/`E` suffix.
fn parse_exponent(value: &str, suffix: &str) -> Result<i32, QuantityError> {
    let unknown = || QuantityError::UnknownSuffix {
        value: value.to_owned(),
        suffix: suffix.to_owned(),
    };
    let rest = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))
        .ok_or_else(unknown)?;
    let digits = rest
        .strip_prefix('+')
        .or_else(|| rest.strip_prefix('-'))
        .unwrap_or(rest);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(unknown());
    }
    rest.parse::<i32>().map_err(|_| QuantityError::OutOfRange {
        value: value.to_owned(),
        unit: "exponent",
    })
}

/// Parses a quantity into millis (`cpu`), rounding up.
pub fn parse_millis(value: &str) -> Result<i64, QuantityError> {
    ParsedQuantity::parse(value)?.ceil_scaled(3, value)
}

/// Parses a quantity into whole units (bytes, pods, devices), rounding up.
pub fn parse_units(value: &str) -> Result<i64, QuantityError> {
    ParsedQuantity::parse(value)?.ceil_scaled(0, value)
}

/// Parses the quantity of the named resource in that resource's unit: millicores for `cpu`,
/// whole units for everything else.
pub fn parse_resource(resource: &str, value: &str) -> Result<i64, QuantityError> {
    if resource == CPU {
        parse_millis(value)
    } else {
        parse_units(value)
    }
}

/// Writes an amount of the named resource as a Kubernetes quantity string: `1500m` or `2` for
/// cpu, `4Gi`/`512Mi`/`1Ki` or plain bytes for memory and storage, integers otherwise.
#[must_use]
pub fn format_resource(resource: &str, amount: i64) -> String {
    if resource == CPU {
        if amount % MILLIS_PER_UNIT == 0 {
            return (amount / MILLIS_PER_UNIT).to_string();
        }
        return format!("{amount}m");
    }
    if amount != 0 && (resource == MEMORY || resource == EPHEMERAL_STORAGE) {
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let unit = 1i64 << shift;
            if amount % unit == 0 {
                return format!("{}{suffix}", amount / unit);
            }
        }
    }
    amount.to_string()
}

/// An amount as a float, for prices and ratios. Amounts are far below 2^52 units (a petabyte
/// of memory is 2^50 bytes), so nothing is lost in practice.
#[must_use]
#[expect(
    clippy::cast_precision_loss,
    reason = "resource amounts stay far below 2^52; used only for prices and ratios"
)]
pub fn approx_f64(amount: i64) -> f64 {
    amount as f64
}

/// A resource name other than the four core ones, shared cheaply between lists.
pub type ResourceName = Arc<str>;

/// A resource list in integer units (see the module docs). Absent resources are zero.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    /// Millicores.
    pub cpu: i64,
    /// Bytes.
    pub memory: i64,
    /// Pod count.
    pub pods: i64,
    /// Bytes.
    pub ephemeral_storage: i64,
    /// Every other resource, sorted by name, without zero entries.
    extended: Vec<(ResourceName, i64)>,
}

impl Resources {
    /// An empty list (all zero).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The core resources; `cpu` in millicores, `memory` in bytes.
    #[must_use]
    pub fn core(cpu_millis: i64, memory_bytes: i64, pods: i64) -> Self {
        Self {
            cpu: cpu_millis,
            memory: memory_bytes,
            pods,
            ..Self::default()
        }
    }

    /// Reads a Kubernetes resource list (`corev1.ResourceList`).
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Result<Self, ResourceError> {
        Self::read(list, false)
    }

    /// A status' resource list as a figure: a list missing or unreadable counts as nothing.
    #[must_use]
    pub fn from_list_or_zero(list: Option<&ResourceList>) -> Self {
        list.and_then(|l| Self::from_list(l).ok())
            .unwrap_or_default()
    }

    /// Requests as a fit compares them: like [`Resources::from_list`], but a positive quantity
    /// too large for the unit's `i64` (`1E` cores is 10^21 millicores) is the largest amount,
    /// which fits no capacity, instead of an error (Kubernetes' quantities hold it, and Karpenter
    /// finds no instance type for it).
    pub fn from_requests(list: &BTreeMap<String, Quantity>) -> Result<Self, ResourceError> {
        Self::read(list, true)
    }

    fn read(list: &BTreeMap<String, Quantity>, saturate: bool) -> Result<Self, ResourceError> {
        let mut out = Self::default();
        for (name, quantity) in list {
            let amount = match parse_resource(name, &quantity.0) {
                Ok(amount) => amount,
                Err(QuantityError::OutOfRange { .. })
                    if saturate && !quantity.0.starts_with('-') =>
                {
                    i64::MAX
                }
                Err(source) => {
                    return Err(ResourceError::Quantity {
                        resource: name.clone(),
                        source,
                    });
                }
            };
            out.set(name, amount);
        }
        Ok(out)
    }

    /// Like [`Resources::from_list`], refusing negative quantities (requests, capacities).
    pub fn from_list_non_negative(
        list: &BTreeMap<String, Quantity>,
        field: &str,
    ) -> Result<Self, ResourceError> {
        let out = Self::from_list(list)?;
        if let Some((name, value)) = out.iter().find(|(_, value)| *value < 0) {
            return Err(ResourceError::Negative {
                field: field.to_owned(),
                resource: name.to_owned(),
                value: format_resource(name, value),
            });
        }
        Ok(out)
    }

    /// Writes the non-zero resources as a Kubernetes resource list.
    #[must_use]
    pub fn to_list(&self) -> BTreeMap<String, Quantity> {
        self.iter()
            .filter(|(_, amount)| *amount != 0)
            .map(|(name, amount)| (name.to_owned(), Quantity(format_resource(name, amount))))
            .collect()
    }

    /// The amount of a resource, zero when absent.
    #[must_use]
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.cpu,
            MEMORY => self.memory,
            PODS => self.pods,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            _ => self
                .extended
                .binary_search_by(|(n, _)| (**n).cmp(name))
                .map_or(0, |i| self.extended[i].1),
        }
    }

    /// Sets the amount of a resource.
    pub fn set(&mut self, name: &str, amount: i64) {
        match name {
            CPU => self.cpu = amount,
            MEMORY => self.memory = amount,
            PODS => self.pods = amount,
            EPHEMERAL_STORAGE => self.ephemeral_storage = amount,
            _ => match self.extended.binary_search_by(|(n, _)| (**n).cmp(name)) {
                Ok(i) if amount == 0 => {
                    self.extended.remove(i);
                }
                Ok(i) => self.extended[i].1 = amount,
                Err(_) if amount == 0 => {}
                Err(i) => self.extended.insert(i, (Arc::from(name), amount)),
            },
        }
    }

    /// Every resource with its amount, core resources first (including zeros), then extended
    /// resources by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> + '_ {
        [
            (CPU, self.cpu),
            (MEMORY, self.memory),
            (PODS, self.pods),
            (EPHEMERAL_STORAGE, self.ephemeral_storage),
        ]
        .into_iter()
        .chain(
            self.extended
                .iter()
                .map(|(name, amount)| (&**name, *amount)),
        )
    }

    /// The extended (non-core) resources, sorted by name.
    #[must_use]
    pub fn extended(&self) -> &[(ResourceName, i64)] {
        &self.extended
    }

    /// Whether every resource is zero.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        self.cpu == 0
            && self.memory == 0
            && self.pods == 0
            && self.ephemeral_storage == 0
            && self.extended.is_empty()
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Self) {
        self.cpu = self.cpu.saturating_add(other.cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.pods = self.pods.saturating_add(other.pods);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        if !other.extended.is_empty() {
            self.merge_extended(&other.extended, i64::saturating_add);
        }
    }

    /// Subtracts `other` from `self` (results may go negative).
    pub fn sub(&mut self, other: &Self) {
        self.cpu = self.cpu.saturating_sub(other.cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.pods = self.pods.saturating_sub(other.pods);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        if !other.extended.is_empty() {
            self.merge_extended(&other.extended, i64::saturating_sub);
        }
    }

    /// `self + other` as a new list.
    #[must_use]
    pub fn plus(&self, other: &Self) -> Self {
        let mut out = self.clone();
        out.add(other);
        out
    }

    /// `self - other` as a new list.
    #[must_use]
    pub fn minus(&self, other: &Self) -> Self {
        let mut out = self.clone();
        out.sub(other);
        out
    }

    /// Raises each resource of `self` to at least the amount in `other`.
    pub fn max_with(&mut self, other: &Self) {
        self.cpu = self.cpu.max(other.cpu);
        self.memory = self.memory.max(other.memory);
        self.pods = self.pods.max(other.pods);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        if !other.extended.is_empty() {
            self.merge_extended(&other.extended, i64::max);
        }
    }

    /// Clamps negative amounts to zero.
    pub fn clamp_negative_to_zero(&mut self) {
        self.cpu = self.cpu.max(0);
        self.memory = self.memory.max(0);
        self.pods = self.pods.max(0);
        self.ephemeral_storage = self.ephemeral_storage.max(0);
        self.extended.retain(|(_, amount)| *amount > 0);
    }

    fn merge_extended(&mut self, other: &[(ResourceName, i64)], op: fn(i64, i64) -> i64) {
        for (name, amount) in other {
            let current = self.get(name);
            self.set(name, op(current, *amount));
        }
    }

    /// Karpenter's `resources.Fits`: `self` (a request) fits into `total` when no resource of
    /// `total` is negative and every requested amount is at most the total's.
    #[must_use]
    #[inline]
    pub fn fits_in(&self, total: &Self) -> bool {
        self.first_not_fitting(total).is_none()
    }

    /// The first resource that does not fit into `total` (see [`Resources::fits_in`]), naming a
    /// negative total first.
    #[must_use]
    pub fn first_not_fitting<'a>(&'a self, total: &'a Self) -> Option<&'a str> {
        if total.cpu < 0 {
            return Some(CPU);
        }
        if total.memory < 0 {
            return Some(MEMORY);
        }
        if total.pods < 0 {
            return Some(PODS);
        }
        if total.ephemeral_storage < 0 {
            return Some(EPHEMERAL_STORAGE);
        }
        if let Some((name, _)) = total.extended.iter().find(|(_, amount)| *amount < 0) {
            return Some(name);
        }
        if self.cpu > total.cpu {
            return Some(CPU);
        }
        if self.memory > total.memory {
            return Some(MEMORY);
        }
        if self.pods > total.pods {
            return Some(PODS);
        }
        if self.ephemeral_storage > total.ephemeral_storage {
            return Some(EPHEMERAL_STORAGE);
        }
        self.extended
            .iter()
            .find(|(name, amount)| *amount > total.get(name))
            .map(|(name, _)| &**name)
    }
}

impl fmt::Display for Resources {
    /// `{"cpu":"1500m","memory":"4Gi","pods":"1"}`, zeros left out, like Karpenter's log form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        let mut first = true;
        for (name, amount) in self.iter().filter(|(_, amount)| *amount != 0) {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "\"{name}\":\"{}\"", format_resource(name, amount))?;
        }
        f.write_str("}")
    }
}

/// Upper bounds on some resources (a `NodePool`'s `limits`, or what remains of them). Only the
/// named resources are bounded; a missing one is unlimited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceLimits {
    bounded: Vec<(ResourceName, i64)>,
}

impl ResourceLimits {
    /// No bounds.
    #[must_use]
    pub fn unlimited() -> Self {
        Self::default()
    }

    /// Reads a `NodePool`'s `spec.limits`.
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Result<Self, ResourceError> {
        let mut bounded = Vec::with_capacity(list.len());
        for (name, quantity) in list {
            let amount =
                parse_resource(name, &quantity.0).map_err(|source| ResourceError::Quantity {
                    resource: name.clone(),
                    source,
                })?;
            bounded.push((Arc::from(name.as_str()), amount));
        }
        Ok(Self { bounded })
    }

    /// Bounds one resource.
    #[must_use]
    pub fn with(mut self, name: &str, amount: i64) -> Self {
        match self.bounded.iter_mut().find(|(n, _)| &**n == name) {
            Some(entry) => entry.1 = amount,
            None => self.bounded.push((Arc::from(name), amount)),
        }
        self
    }

    /// Whether no resource is bounded.
    #[must_use]
    pub fn is_unlimited(&self) -> bool {
        self.bounded.is_empty()
    }

    /// The bounded resources with their remaining amounts.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> + '_ {
        self.bounded.iter().map(|(name, amount)| (&**name, *amount))
    }

    /// The first bounded resource whose remaining amount is below what `capacity` needs; a
    /// node counts one against `nodes`.
    #[must_use]
    pub fn first_exceeded_by(&self, capacity: &Resources) -> Option<&str> {
        self.bounded
            .iter()
            .find(|(name, remaining)| amount_for_limit(capacity, name) > *remaining)
            .map(|(name, _)| &**name)
    }

    /// Subtracts the capacity of one node.
    pub fn subtract(&mut self, capacity: &Resources) {
        for (name, remaining) in &mut self.bounded {
            *remaining = remaining.saturating_sub(amount_for_limit(capacity, name));
        }
    }

    /// Gives back capacity previously subtracted (a node's possible instance types shrank).
    pub fn give_back(&mut self, capacity: &Resources) {
        for (name, remaining) in &mut self.bounded {
            if &**name != NODES {
                *remaining = remaining.saturating_add(capacity.get(name));
            }
        }
    }
}

fn amount_for_limit(capacity: &Resources, name: &str) -> i64 {
    if name == NODES { 1 } else { capacity.get(name) }
}

/// A container's requests with its limits filling in resources it requests nothing for
/// (Kubernetes defaults requests to limits).
fn container_requests(container: &SlimContainer, field: &str) -> Result<Resources, ResourceError> {
    let Some(resources) = &container.resources else {
        return Ok(Resources::default());
    };
    let mut out = match &resources.requests {
        Some(requests) => Resources::from_list_non_negative(requests, field)?,
        None => Resources::default(),
    };
    if let Some(limits) = &resources.limits {
        for (name, quantity) in limits {
            let requested = resources
                .requests
                .as_ref()
                .is_some_and(|requests| requests.contains_key(name));
            if !requested {
                let amount = parse_resource(name, &quantity.0).map_err(|source| {
                    ResourceError::Quantity {
                        resource: name.clone(),
                        source,
                    }
                })?;
                if amount < 0 {
                    return Err(ResourceError::Negative {
                        field: field.to_owned(),
                        resource: name.clone(),
                        value: quantity.0.clone(),
                    });
                }
                out.set(name, amount);
            }
        }
    }
    Ok(out)
}

/// Whether an init container is a native sidecar (`restartPolicy: Always`).
#[must_use]
pub fn is_sidecar(container: &SlimContainer) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// What one pod needs on a node, with Kubernetes' semantics: the larger of (all containers plus
/// all sidecars) and, for each plain init container, that container plus the sidecars started
/// before it; then the pod overhead; and one `pods`.
pub fn pod_requests(spec: &SharedPodSpec) -> Result<Resources, ResourceError> {
    let mut requests = pod_total(spec, container_requests)?;
    requests.pods = requests.pods.saturating_add(1);
    Ok(requests)
}

/// The pod's limits, combined as [`pod_requests`] combines requests (without the `pods` count):
/// what Karpenter's node metrics report as a pod's limits.
pub fn pod_limits(spec: &SharedPodSpec) -> Result<Resources, ResourceError> {
    pod_total(spec, container_limits)
}

/// A container's limits.
fn container_limits(container: &SlimContainer, field: &str) -> Result<Resources, ResourceError> {
    match container.resources.as_ref().and_then(|r| r.limits.as_ref()) {
        Some(limits) => Resources::from_list_non_negative(limits, field),
        None => Ok(Resources::default()),
    }
}

/// `per_container` over the pod's containers with Kubernetes' sidecar and init-container
/// semantics, plus the pod overhead.
fn pod_total(
    spec: &SharedPodSpec,
    per_container: fn(&SlimContainer, &str) -> Result<Resources, ResourceError>,
) -> Result<Resources, ResourceError> {
    let mut total = Resources::default();
    for (i, container) in spec.containers.iter().enumerate() {
        total.add(&per_container(
            container,
            &format!("spec.containers[{i}].resources"),
        )?);
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for (i, container) in spec.init_containers.iter().flatten().enumerate() {
        let own = per_container(container, &format!("spec.initContainers[{i}].resources"))?;
        if is_sidecar(container) {
            total.add(&own);
            sidecars.add(&own);
            init_peak.max_with(&sidecars);
        } else {
            init_peak.max_with(&own.plus(&sidecars));
        }
    }
    total.max_with(&init_peak);
    if let Some(overhead) = &spec.overhead {
        total.add(&Resources::from_list_non_negative(
            overhead,
            "spec.overhead",
        )?);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;

    const GI: i64 = 1 << 30;
    const MI: i64 = 1 << 20;

    #[test]
    fn quantities_parse_exactly_in_their_unit() {
        let cases: &[(&str, &str, i64)] = &[
            (CPU, "1", 1000),
            (CPU, "100m", 100),
            (CPU, "1.5", 1500),
            (CPU, "0.1", 100),
            (CPU, ".5", 500),
            (CPU, "5.", 5000),
            (CPU, "+2", 2000),
            (CPU, "1500000n", 2),
            (CPU, "250u", 1),
            (CPU, "1e3", 1_000_000),
            (CPU, "1E-3", 1),
            (CPU, "2k", 2_000_000),
            (MEMORY, "1Ki", 1024),
            (MEMORY, "1.5Gi", 3 * GI / 2),
            (MEMORY, "100Mi", 100 * MI),
            (MEMORY, "1Ei", 1 << 60),
            (MEMORY, "1M", 1_000_000),
            (MEMORY, "1G", 1_000_000_000),
            (MEMORY, "1T", 1_000_000_000_000),
            (MEMORY, "1P", 1_000_000_000_000_000),
            (MEMORY, "1E", 1_000_000_000_000_000_000),
            (MEMORY, "100m", 1),
            (MEMORY, "0.5", 1),
            (MEMORY, "-0.5", 0),
            (MEMORY, "-1Ki", -1024),
            (MEMORY, "12e+2", 1200),
            (MEMORY, "0", 0),
            (MEMORY, "0.0000000000000000000000000000000000000000001", 1),
            (MEMORY, "1.000000000000000000000000000000000000000000000", 1),
            (PODS, "110", 110),
        ];
        for (resource, value, expected) in cases {
            assert_eq!(
                parse_resource(resource, value),
                Ok(*expected),
                "{resource}={value}"
            );
        }
    }

    #[test]
    fn malformed_quantities_are_refused_with_the_rule() {
        for value in [
            "", "abc", "1.2.3", "--1", "1Kb", "1e", "1e+", "Gi", "1 Gi", "1ki", ".",
        ] {
            assert!(parse_units(value).is_err(), "{value:?} should be refused");
        }
        assert!(matches!(
            parse_units("1Kb"),
            Err(QuantityError::UnknownSuffix { .. })
        ));
        assert!(matches!(
            parse_units("1e30"),
            Err(QuantityError::OutOfRange { .. })
        ));
        assert!(matches!(
            parse_millis("10E"),
            Err(QuantityError::OutOfRange { .. })
        ));
        let message = parse_units("1Kb").map_err(|e| e.to_string()).err();
        assert!(message.is_some_and(|m| m.contains("Ki, Mi, Gi")));
    }

    #[test]
    fn formatting_round_trips_through_parsing() {
        for (resource, amount, text) in [
            (CPU, 1500, "1500m"),
            (CPU, 2000, "2"),
            (MEMORY, 4 * GI, "4Gi"),
            (MEMORY, 512 * MI, "512Mi"),
            (MEMORY, 1000, "1000"),
            ("nvidia.com/gpu", 2, "2"),
        ] {
            assert_eq!(format_resource(resource, amount), text);
            assert_eq!(parse_resource(resource, text), Ok(amount));
        }
    }

    #[test]
    fn resources_add_subtract_and_compare_extended_resources() {
        let mut a = Resources::core(1000, GI, 1);
        a.set("nvidia.com/gpu", 1);
        let mut b = Resources::core(500, GI, 1);
        b.set("nvidia.com/gpu", 1);
        b.set("example.com/fpga", 2);
        let sum = a.plus(&b);
        assert_eq!(sum.cpu, 1500);
        assert_eq!(sum.get("nvidia.com/gpu"), 2);
        assert_eq!(sum.get("example.com/fpga"), 2);
        assert_eq!(sum.minus(&b), a);
        assert!(a.fits_in(&sum));
        assert!(!sum.fits_in(&a));
        assert_eq!(sum.first_not_fitting(&a), Some(CPU));
        let mut no_gpu = Resources::core(10_000, 10 * GI, 10);
        assert_eq!(a.first_not_fitting(&no_gpu), Some("nvidia.com/gpu"));
        no_gpu.memory = -1;
        assert_eq!(
            Resources::default().first_not_fitting(&no_gpu),
            Some(MEMORY)
        );
    }

    #[test]
    fn zero_extended_resources_disappear() {
        let mut a = Resources::default();
        a.set("nvidia.com/gpu", 1);
        a.set("nvidia.com/gpu", 0);
        assert!(a.is_zero());
        assert_eq!(a, Resources::default());
    }

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> SlimContainer {
        let list = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| {
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                    .collect()
            })
        };
        SlimContainer {
            name: "c".to_owned(),
            resources: Some(ResourceRequirements {
                requests: list(requests),
                limits: list(limits),
                ..ResourceRequirements::default()
            }),
            ..SlimContainer::default()
        }
    }

    fn sidecar(requests: &[(&str, &str)]) -> SlimContainer {
        SlimContainer {
            restart_policy: Some("Always".to_owned()),
            ..container(requests, &[])
        }
    }

    #[test]
    fn pod_requests_follow_kubernetes_init_and_sidecar_semantics() {
        // containers 1 cpu + sidecar 0.5 = 1.5; init peak: plain init 2 cpu after the sidecar
        // = 2.5 beats it; memory from the limit of a container that requests none.
        let spec = SharedPodSpec {
            containers: vec![container(&[(CPU, "1")], &[(MEMORY, "1Gi")])],
            init_containers: Some(vec![
                container(&[(CPU, "1")], &[]),
                sidecar(&[(CPU, "500m")]),
                container(&[(CPU, "2")], &[]),
            ]),
            overhead: Some([(CPU.to_owned(), Quantity("100m".to_owned()))].into()),
            ..SharedPodSpec::default()
        };
        let requests = pod_requests(&spec);
        assert_eq!(
            requests,
            Ok(Resources {
                cpu: 2600,
                memory: GI,
                pods: 1,
                ..Resources::default()
            })
        );
    }

    #[test]
    fn pod_requests_use_the_sum_when_init_containers_are_small() {
        let spec = SharedPodSpec {
            containers: vec![
                container(&[(CPU, "1"), (MEMORY, "1Gi")], &[]),
                container(&[(CPU, "1")], &[]),
            ],
            init_containers: Some(vec![container(&[(CPU, "1500m"), (MEMORY, "2Gi")], &[])]),
            ..SharedPodSpec::default()
        };
        let requests = pod_requests(&spec).map(|r| (r.cpu, r.memory));
        assert_eq!(requests, Ok((2000, 2 * GI)));
    }

    #[test]
    fn negative_requests_name_the_field() {
        let spec = SharedPodSpec {
            containers: vec![container(&[(CPU, "-1")], &[])],
            ..SharedPodSpec::default()
        };
        let error = pod_requests(&spec).err().map(|e| e.to_string());
        assert!(
            error.is_some_and(|e| e.contains("spec.containers[0].resources")),
            "names the field"
        );
    }

    #[test]
    fn limits_bound_only_named_resources_and_count_nodes() {
        let mut limits = ResourceLimits::unlimited().with(CPU, 4000).with(NODES, 1);
        let node = Resources::core(4000, 8 * GI, 110);
        assert_eq!(limits.first_exceeded_by(&node), None);
        limits.subtract(&node);
        assert_eq!(limits.first_exceeded_by(&node), Some(CPU));
        limits.give_back(&node);
        assert_eq!(limits.first_exceeded_by(&node), Some(NODES));
    }

    #[test]
    fn requests_too_large_for_an_i64_saturate_and_fit_nothing() {
        let list: BTreeMap<String, Quantity> = [
            ("cpu".to_owned(), Quantity("1E".to_owned())),
            ("memory".to_owned(), Quantity("1Gi".to_owned())),
        ]
        .into();
        assert!(Resources::from_list(&list).is_err());
        let requests = Resources::from_requests(&list).unwrap();
        assert_eq!(requests.get("cpu"), i64::MAX);
        assert_eq!(requests.get("memory"), 1 << 30);
        assert!(!requests.fits_in(&Resources::core(i64::MAX - 1, i64::MAX, 110)));
        let negative: BTreeMap<String, Quantity> =
            [("cpu".to_owned(), Quantity("-1E".to_owned()))].into();
        assert!(Resources::from_requests(&negative).is_err());
    }
}
