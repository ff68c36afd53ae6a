//! Deterministic generators that reproduce the inputs of the original programs.

/// The POSIX `drand48` family: a 48-bit linear congruential generator,
/// `X(n+1) = (a X(n) + c) mod 2^48` with `a = 0x5DEECE66D` and `c = 0xB`
/// (POSIX.1-2017, `drand48`). `srand48(seed)` sets the high 32 bits of X to `seed` and the
/// low 16 bits to `0x330E`.
#[derive(Clone, Debug)]
pub struct Rand48 {
    x: u64,
}

impl Rand48 {
    const A: u64 = 0x5_DEEC_E66D;
    const C: u64 = 0xB;
    const MASK: u64 = (1 << 48) - 1;

    /// The state after `srand48(seed)`.
    pub fn srand48(seed: i64) -> Self {
        Rand48 {
            x: (((seed as u64) & 0xFFFF_FFFF) << 16) | 0x330E,
        }
    }

    fn step(&mut self) -> u64 {
        self.x = (Self::A.wrapping_mul(self.x).wrapping_add(Self::C)) & Self::MASK;
        self.x
    }

    /// `lrand48()`: a non-negative integer in `[0, 2^31)`, the high 31 bits of the state.
    pub fn lrand48(&mut self) -> i64 {
        (self.step() >> 17) as i64
    }

    /// `mrand48()`: a signed integer in `[-2^31, 2^31)`, the high 32 bits of the state.
    pub fn mrand48(&mut self) -> i64 {
        (self.step() >> 16) as u32 as i32 as i64
    }

    /// `drand48()`: a double in `[0, 1)`, the state divided by `2^48`.
    pub fn drand48(&mut self) -> f64 {
        self.step() as f64 / (1u64 << 48) as f64
    }
}

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
/// OOPSLA 2014): a small seeded generator for inputs that the originals do not fix.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A double in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An integer in `[0, n)`; `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0) has no valid result");
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rand48_matches_glibc() {
        // glibc: srand48(1); lrand48() x3 prints 89400484 976015093 1792756325.
        let mut r = Rand48::srand48(1);
        assert_eq!(
            [r.lrand48(), r.lrand48(), r.lrand48()],
            [89400484, 976015093, 1792756325]
        );
        // srand48(0); drand48() = 0.170828036106 (glibc).
        let mut r = Rand48::srand48(0);
        assert!((r.drand48() - 0.170828036106).abs() < 1e-12);
    }
}
