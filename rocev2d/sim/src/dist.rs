//! Seeded random draws whose results are bit-identical on every machine.
//!
//! The generator is Xoshiro256++ (portable, fast, seeded from a `u64`). Floating point is used
//! only with the four basic IEEE operations, which are correctly rounded everywhere; the one
//! transcendental the workloads need, the natural logarithm for exponential inter-arrival
//! times, is computed here by a fixed series instead of the platform's libm, whose last bit may
//! differ between machines (STYLE.md §4.4).
//!
//! Deviations: none.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// The model's generator.
pub type SimRng = Xoshiro256PlusPlus;

/// A generator for stream `stream` of run `seed`: each consumer (switch marking, workload, link
/// faults) has its own stream so that adding draws to one does not shift the others.
pub fn rng(seed: u64, stream: u64) -> SimRng {
    // SplitMix-style mixing so that nearby (seed, stream) pairs give unrelated states.
    SimRng::seed_from_u64(mix64(
        seed ^ mix64(stream.wrapping_add(0x9e37_79b9_7f4a_7c15)),
    ))
}

/// A 64-bit finaliser (SplitMix64's): every input bit affects every output bit.
pub const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Uniform in `[0, 1)` with 53 random bits.
pub fn uniform(rng: &mut SimRng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Uniform integer in `[0, n)` (`n > 0`), by Lemire's multiply-shift (bias below 2^-32 for the
/// sizes used here).
pub fn below(rng: &mut SimRng, n: u64) -> u64 {
    ((rng.next_u64() as u128 * n as u128) >> 64) as u64
}

/// Exponentially distributed with the given mean.
pub fn exponential(rng: &mut SimRng, mean: f64) -> f64 {
    // 1 − u lies in (0, 1], so the logarithm is finite.
    -ln(1.0 - uniform(rng)) * mean
}

/// Natural logarithm of `x > 0` using only +, −, ×, ÷: `x = m · 2^e` with `m` in
/// `[√½, √2)`, then `ln m = 2·atanh(s)`, `s = (m − 1)/(m + 1)`, `|s| < 0.172`, summed to
/// `s^23` (truncation error below 1e-18). Returns −∞ for 0 and NaN for negative input.
pub fn ln(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x.is_infinite() {
        return x;
    }
    let (mut m, mut e) = frexp(x);
    if m < core::f64::consts::FRAC_1_SQRT_2 {
        m *= 2.0;
        e -= 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut term = s;
    let mut sum = 0.0;
    let mut k = 1.0;
    for _ in 0..12 {
        sum += term / k;
        term *= s2;
        k += 2.0;
    }
    e as f64 * core::f64::consts::LN_2 + 2.0 * sum
}

/// `x = m · 2^e` with `m` in `[0.5, 1)`, for finite positive `x`.
fn frexp(x: f64) -> (f64, i32) {
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if exp == 0 {
        // Subnormal: scale into the normal range first.
        let (m, e) = frexp(x * (1u64 << 54) as f64);
        return (m, e - 54);
    }
    let m = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (m, exp - 1022)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_matches_libm_closely() {
        for &x in &[
            1e-300, 1e-9, 0.001, 0.5, 0.7, 1.0, 1.5, 2.0, 10.0, 12345.678, 1e300,
        ] {
            let d = (ln(x) - x.ln()).abs();
            assert!(d <= 4.0 * f64::EPSILON * x.ln().abs().max(1.0), "{x}: {d}");
        }
        assert_eq!(ln(1.0), 0.0);
        assert!(ln(-1.0).is_nan());
    }

    #[test]
    fn exponential_mean_close() {
        let mut r = rng(7, 0);
        let n = 200_000;
        let mean: f64 = (0..n).map(|_| exponential(&mut r, 3.0)).sum::<f64>() / n as f64;
        // Standard error 3/sqrt(n) = 0.0067; allow 5 sigma.
        assert!((mean - 3.0).abs() < 0.034, "{mean}");
    }

    #[test]
    fn streams_differ_and_repeat() {
        let a: Vec<u64> = (0..4).map(|_| rng(1, 0).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(rng(1, 0).next_u64(), rng(1, 1).next_u64());
        assert_ne!(rng(1, 0).next_u64(), rng(2, 0).next_u64());
    }
}
