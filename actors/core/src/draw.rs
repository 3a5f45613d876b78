//! Seeded uniform draws: a fraction in [0, 1) from a seed and the identity of what is drawn for
//! (an actor's message, an AWS call, an API request). The same seed and identity give the same
//! fraction in every build and on every machine, so a chaos plan replays exactly.
//!
//! FNV-1a over the parts (each followed by a `0xff` separator, so `["ab", "c"]` and
//! `["a", "bc"]` differ), then splitmix64 with the seed to spread the bits. std's hashers are
//! not used: their output may change between Rust releases.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// A uniform fraction in [0, 1) for `parts` under `seed`.
#[must_use]
pub fn unit_draw(seed: u64, parts: &[&[u8]]) -> f64 {
    let mut hash = FNV_OFFSET;
    for part in parts {
        for byte in part.iter().chain(std::iter::once(&0xff)) {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(FNV_PRIME);
        }
    }
    let mixed = splitmix64(hash ^ splitmix64(seed));
    // The top 53 bits make an exactly representable fraction.
    #[allow(clippy::cast_precision_loss, reason = "53-bit value, exact in f64")]
    let fraction = (mixed >> 11) as f64 / (1u64 << 53) as f64;
    fraction
}

fn splitmix64(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_replay_differ_by_seed_and_part_and_stay_in_range() {
        let bits = |seed, parts: &[&[u8]]| unit_draw(seed, parts).to_bits();
        let a = bits(1, &[b"CreateFleet", &7u64.to_le_bytes()]);
        assert_eq!(a, bits(1, &[b"CreateFleet", &7u64.to_le_bytes()]));
        assert_ne!(a, bits(2, &[b"CreateFleet", &7u64.to_le_bytes()]));
        assert_ne!(bits(0, &[b"ab", b"c"]), bits(0, &[b"a", b"bc"]));
        let draws: Vec<f64> = (0u64..10_000)
            .map(|n| unit_draw(3, &[&n.to_le_bytes()]))
            .collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let below = draws.iter().filter(|d| **d < 0.2).count();
        assert!(
            (1_800..2_200).contains(&below),
            "{below} of 10000 below 0.2"
        );
    }
}
