//! Kubernetes resource quantities (`100Mi`, `500m`, `1.5Gi`, `2e3`) as integer milli-units, and
//! the resource lists of instance types.
//!
//! Every value of a [`Resources`] map is in milli-units of its resource (cpu `1000` = one core,
//! memory `1024000` = 1 KiB), like `Quantity.MilliValue()` in Kubernetes, so all arithmetic is on
//! integers. Intermediate until the scheduler's `domain::resources` lands.

use std::collections::BTreeMap;

/// Resource name to quantity in milli-units.
pub type Resources = BTreeMap<String, i64>;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const PODS: &str = "pods";
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
pub const AMD_GPU: &str = "amd.com/gpu";
pub const AWS_NEURON: &str = "aws.amazon.com/neuron";
pub const AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
pub const HABANA_GAUDI: &str = "habana.ai/gaudi";
pub const EFA: &str = "vpc.amazonaws.com/efa";
pub const POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
pub const PRIVATE_IPV4_ADDRESS: &str = "vpc.amazonaws.com/PrivateIPv4Address";

/// Milli-units per unit.
pub const MILLI: i64 = 1000;
pub const MIB: i64 = 1024 * 1024;
pub const GIB: i64 = 1024 * MIB;

/// Why a quantity string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {input:?}: {rule}")]
pub struct QuantityError {
    pub input: String,
    pub rule: &'static str,
}

impl QuantityError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        "invalid_quantity"
    }
}

/// Parses a Kubernetes quantity into milli-units, rounding up as Kubernetes does.
pub fn parse_quantity(input: &str) -> Result<i64, QuantityError> {
    let error = |rule| QuantityError {
        input: input.to_owned(),
        rule,
    };
    let s = input.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(error("expected a decimal number"));
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits: String = format!("{whole}{fraction}");
    let mantissa: i128 = digits
        .parse()
        .map_err(|_| error("number has too many digits"))?;
    let fraction_digits = i32::try_from(fraction.len()).map_err(|_| error("number too long"))?;
    // value = mantissa * 10^(exp10 - fraction_digits) * 2^exp2, in units; times 1000 for milli.
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        other => {
            let exponent = other
                .strip_prefix(['e', 'E'])
                .and_then(|e| e.parse::<i32>().ok())
                .ok_or_else(|| error("unknown suffix; expected one of n u m k M G T P E Ki Mi Gi Ti Pi Ei or an exponent"))?;
            (exponent, 0)
        }
    };
    let scale = exp10 + 3 - fraction_digits;
    let overflow = || error("quantity out of range");
    let mut value = mantissa
        .checked_mul(1_i128.checked_shl(exp2).ok_or_else(overflow)?)
        .ok_or_else(overflow)?;
    if scale >= 0 {
        let factor = 10_i128
            .checked_pow(scale.unsigned_abs())
            .ok_or_else(overflow)?;
        value = value.checked_mul(factor).ok_or_else(overflow)?;
    } else {
        let divisor = 10_i128
            .checked_pow(scale.unsigned_abs())
            .ok_or_else(overflow)?;
        value = (value + divisor - 1) / divisor;
    }
    let value = i64::try_from(value).map_err(|_| overflow())?;
    Ok(if negative { -value } else { value })
}

/// Formats milli-units as a Kubernetes quantity string (`4`, `250m`, `7Gi`, `1536Mi`).
#[must_use]
pub fn format_quantity(milli: i64) -> String {
    if milli % MILLI != 0 {
        return format!("{milli}m");
    }
    let units = milli / MILLI;
    for (suffix, size) in [("Gi", GIB), ("Mi", MIB), ("Ki", 1024)] {
        if units != 0 && units % size == 0 && units.abs() >= size {
            return format!("{}{suffix}", units / size);
        }
    }
    units.to_string()
}

/// `a - b` per resource, never below zero; resources only in `b` are ignored.
#[must_use]
pub fn subtract(a: &Resources, b: &Resources) -> Resources {
    a.iter()
        .map(|(name, value)| {
            let used = b.get(name).copied().unwrap_or(0);
            (name.clone(), value.saturating_sub(used).max(0))
        })
        .collect()
}

/// Sum of several lists.
#[must_use]
pub fn merge_sum<'a>(lists: impl IntoIterator<Item = &'a Resources>) -> Resources {
    let mut out = Resources::new();
    for list in lists {
        for (name, value) in list {
            *out.entry(name.clone()).or_insert(0) += value;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_quantities_parse_to_milli_units() {
        assert_eq!(parse_quantity("1"), Ok(1000));
        assert_eq!(parse_quantity("250m"), Ok(250));
        assert_eq!(parse_quantity("1.5"), Ok(1500));
        assert_eq!(parse_quantity("100Mi"), Ok(100 * MIB * 1000));
        assert_eq!(parse_quantity("1Gi"), Ok(GIB * 1000));
        assert_eq!(parse_quantity("2G"), Ok(2_000_000_000_000));
        assert_eq!(parse_quantity("1e3"), Ok(1_000_000));
        assert_eq!(parse_quantity("0.5Gi"), Ok(GIB / 2 * 1000));
        assert_eq!(parse_quantity("1n"), Ok(1));
    }

    #[test]
    fn bad_quantities_name_the_rule() {
        let error = parse_quantity("12Q");
        assert!(
            matches!(error, Err(QuantityError { rule, .. }) if rule.starts_with("unknown suffix"))
        );
        assert!(parse_quantity("abc").is_err());
        assert!(parse_quantity("1.2.3").is_err());
    }

    #[test]
    fn quantities_format_with_binary_suffixes_when_exact() {
        assert_eq!(format_quantity(4000), "4");
        assert_eq!(format_quantity(250), "250m");
        assert_eq!(format_quantity(7 * GIB * 1000), "7Gi");
        assert_eq!(format_quantity(1536 * MIB * 1000), "1536Mi");
    }
}
