//! Platform-independent random variates.
//!
//! The generator must produce the same bytes for the same seed on every platform and
//! every toolchain. `ChaCha8Rng` gives a specified bit stream, but two further sources
//! of drift exist: the distribution code of `rand` (whose algorithms may change between
//! releases) and the platform `libm` behind `f64::ln`/`f64::exp` (whose last bit may
//! differ between systems, which can flip a rounding). So every variate here is built
//! from `next_u64` with IEEE-754 `+ - * /` only (exactly rounded everywhere), and `ln`
//! and `exp` are computed by short series of those operations.

use rand_chacha::rand_core::RngCore;
use rand_chacha::ChaCha8Rng;

const LN2: f64 = std::f64::consts::LN_2;
const SQRT2: f64 = std::f64::consts::SQRT_2;

/// Natural logarithm of a positive, finite, normal `x` (others yield a large negative or
/// NaN, which callers never pass). Relative error about 1e-15.
pub(crate) fn ln(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 {
        return f64::NAN;
    }
    let x = x.max(f64::MIN_POSITIVE);
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    if m > SQRT2 {
        m /= 2.0;
        e += 1;
    }
    // ln m = 2 atanh(s), s = (m-1)/(m+1), |s| <= 0.172: 11 odd terms reach 1e-17.
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let mut term = s;
    let mut sum = s;
    let mut k = 3.0;
    for _ in 0..10 {
        term *= s2;
        sum += term / k;
        k += 2.0;
    }
    2.0 * sum + e as f64 * LN2
}

/// `e^x` for `x` in about [-700, 700] (clamped outside). Relative error about 1e-15.
pub(crate) fn exp(x: f64) -> f64 {
    let x = x.clamp(-700.0, 700.0);
    let k = (x / LN2).round();
    let r = x - k * LN2; // |r| <= ln2/2
    let mut term = 1.0;
    let mut sum = 1.0;
    for i in 1..=17 {
        term *= r / f64::from(i);
        sum += term;
    }
    // k is in [-1010, 1010], so k + 1023 is a valid biased exponent.
    sum * f64::from_bits(((k as i64 + 1023) as u64) << 52)
}

/// The generator's random source: a ChaCha8 stream and the few variates it needs.
pub(crate) struct Random {
    rng: ChaCha8Rng,
}

impl Random {
    pub(crate) fn new(rng: ChaCha8Rng) -> Self {
        Self { rng }
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in [0, n) (n > 0); multiply-high, bias below 2^-40 for our n.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.rng.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.uniform() < p
    }

    /// Exponential with mean 1.
    pub(crate) fn exponential(&mut self) -> f64 {
        -ln(1.0 - self.uniform())
    }

    /// Geometric on {0, 1, 2, ...}: the number of successes of probability `q` before
    /// the first failure (mean q/(1-q)), capped at `max`.
    pub(crate) fn geometric(&mut self, q: f64, max: u32) -> u32 {
        let mut n = 0;
        while n < max && self.chance(q) {
            n += 1;
        }
        n
    }

    /// Approximately standard normal (Irwin–Hall: the sum of 12 uniforms minus 6).
    pub(crate) fn normal(&mut self) -> f64 {
        let mut s = 0.0;
        for _ in 0..12 {
            s += self.uniform();
        }
        s - 6.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_and_exp_agree_with_the_platform_to_1e_13() {
        for &x in &[
            1e-300, 1e-9, 0.001, 0.3, 0.5, 0.999, 1.0, 1.5, 2.0, 10.0, 12345.678, 1e300,
        ] {
            let got = ln(x);
            let want = f64::ln(x);
            assert!(
                (got - want).abs() <= 1e-13 * want.abs().max(1.0),
                "ln({x}) = {got}, want {want}"
            );
        }
        for &x in &[-700.0, -30.0, -1.0, -0.1, 0.0, 0.25, 1.0, 5.5, 100.0, 700.0] {
            let got = exp(x);
            let want = f64::exp(x);
            assert!(
                (got - want).abs() <= 1e-13 * want,
                "exp({x}) = {got}, want {want}"
            );
        }
        assert!(ln(0.0).is_nan() && ln(-1.0).is_nan());
    }
}
