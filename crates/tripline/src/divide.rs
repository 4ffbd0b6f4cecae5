//! Division by a divisor fixed at construction, as a multiplication: the window's bucket and
//! the in-flight cohort of every call divide a time by a constant width, and a 64-bit `div`
//! costs tens of cycles where a multiply-high costs a few.

/// `n / d` and `n % d` for a fixed `d`.
///
/// With `inv = ⌊(2⁶⁴ − 1) / d⌋`, the high half of `n · inv` is `⌊n / d⌋` or one less
/// (`n · inv / 2⁶⁴ > n / d − 1`), so one comparison corrects it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Divisor {
    d: u64,
    inv: u64,
}

impl Divisor {
    /// A divisor of `d` (at least 1).
    pub(crate) fn new(d: u64) -> Self {
        let d = d.max(1);
        Self {
            d,
            inv: u64::MAX / d,
        }
    }

    /// The divisor.
    #[inline]
    pub(crate) fn get(self) -> u64 {
        self.d
    }

    /// `(n / d, n % d)`.
    #[inline]
    pub(crate) fn div_rem(self, n: u64) -> (u64, u64) {
        let q = ((u128::from(n) * u128::from(self.inv)) >> 64) as u64;
        let r = n - q * self.d;
        if r >= self.d {
            (q + 1, r - self.d)
        } else {
            (q, r)
        }
    }

    /// `n / d`.
    #[inline]
    pub(crate) fn div(self, n: u64) -> u64 {
        self.div_rem(n).0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Divisor;
    use proptest::prelude::*;

    #[test]
    fn edges() {
        for d in [
            1,
            2,
            3,
            7,
            1 << 20,
            1_000_000,
            999_999_937,
            u64::MAX / 3,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let v = Divisor::new(d);
            for n in [
                0,
                1,
                d - 1,
                d,
                d.saturating_add(1),
                u64::MAX - 1,
                u64::MAX,
                u64::MAX / 2,
            ] {
                assert_eq!(v.div_rem(n), (n / d, n % d), "{n} / {d}");
            }
        }
    }

    proptest! {
        #[test]
        fn matches_the_division(n: u64, d in 1u64..) {
            prop_assert_eq!(Divisor::new(d).div_rem(n), (n / d, n % d));
        }

        #[test]
        fn matches_for_time_like_values(n in 0u64..(1 << 50), d in 1u64..10_000_000_000) {
            prop_assert_eq!(Divisor::new(d).div_rem(n), (n / d, n % d));
        }
    }
}
