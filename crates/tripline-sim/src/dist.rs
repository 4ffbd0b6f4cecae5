//! Values a scenario file holds: latency distributions and rates.
//!
//! Both parse from forms people write: a latency is a duration string (`"300ms"`, a fixed
//! value) or a table with a `kind`; a rate is a fraction (`0.4`) or a percentage string
//! (`"40%"`). Each value is checked as it is read, so a bad one is reported with the line and
//! column it sits on.

use std::fmt;
use std::time::Duration;

use rand::Rng;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// The longest latency or local work a distribution may produce; samples are capped here.
pub const MAX_LATENCY: Duration = Duration::from_secs(3600);

/// A latency (or local work time) distribution.
///
/// In a scenario file: a duration string for a fixed value, or a table.
///
/// ```
/// use tripline_sim::Dist;
/// use std::time::Duration;
///
/// #[derive(serde::Deserialize)]
/// struct T { a: Dist, b: Dist, c: Dist, d: Dist, e: Dist }
/// let t: T = toml::from_str(r#"
///     a = "300ms"
///     b = { kind = "fixed", value = "0ms" }
///     c = { kind = "uniform", min = "8s", max = "12s" }
///     d = { kind = "lognormal", median = "300ms", p99 = "900ms" }
///     e = { kind = "normal", mean = "10ms", sd = "2ms" }
/// "#).unwrap();
/// assert_eq!(t.a, Dist::Fixed(Duration::from_millis(300)));
/// assert_eq!(t.c.mean(), Duration::from_secs(10));
/// assert_eq!(t.e, Dist::Normal { mean: Duration::from_millis(10), sd: Duration::from_millis(2) });
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    /// Always this value.
    Fixed(Duration),
    /// Uniform between `min` and `max`.
    Uniform {
        /// The shortest value.
        min: Duration,
        /// The longest value.
        max: Duration,
    },
    /// Log-normal with this median and 99th percentile.
    LogNormal {
        /// The median (50th percentile).
        median: Duration,
        /// The 99th percentile, at least the median.
        p99: Duration,
    },
    /// Normal with this mean and standard deviation, folded at zero (a negative draw counts
    /// as its absolute value): the network delay of the AWS backoff simulator
    /// (aws-samples/aws-arch-backoff-simulator, `abs(random.normalvariate(mean, sd))`).
    Normal {
        /// The mean of the normal before folding.
        mean: Duration,
        /// Its standard deviation.
        sd: Duration,
    },
}

/// z of the standard normal's 99th percentile.
const Z99: f64 = 2.326_347_874_040_841;

impl Dist {
    /// A fixed value of `ms` milliseconds.
    pub fn fixed_ms(ms: u64) -> Self {
        Dist::Fixed(Duration::from_millis(ms))
    }

    /// Draws one value in nanoseconds, capped at [`MAX_LATENCY`].
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        let cap = MAX_LATENCY.as_nanos() as u64;
        match *self {
            Dist::Fixed(v) => nanos(v).min(cap),
            Dist::Uniform { min, max } => {
                let (lo, hi) = (nanos(min), nanos(max));
                if hi <= lo {
                    lo.min(cap)
                } else {
                    rng.random_range(lo..=hi).min(cap)
                }
            }
            Dist::LogNormal { median, .. } => {
                let m = nanos(median) as f64;
                let sigma = self.sigma();
                let z: f64 = rng.sample(rand_distr::StandardNormal);
                let v = m * (sigma * z).exp();
                if v.is_finite() && v < cap as f64 {
                    v.max(0.0) as u64
                } else {
                    cap
                }
            }
            Dist::Normal { mean, sd } => {
                let z: f64 = rng.sample(rand_distr::StandardNormal);
                let v = (nanos(mean) as f64 + nanos(sd) as f64 * z).abs();
                if v.is_finite() && v < cap as f64 {
                    v as u64
                } else {
                    cap
                }
            }
        }
    }

    /// The longest value a sample can take: the maximum of a fixed or uniform distribution,
    /// and [`MAX_LATENCY`] for a log-normal one whose 99th percentile is above its median
    /// (its samples are capped there).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline_sim::{Dist, MAX_LATENCY};
    ///
    /// let uniform = Dist::Uniform { min: Duration::from_secs(8), max: Duration::from_secs(12) };
    /// assert_eq!(uniform.max(), Duration::from_secs(12));
    /// let ms = Duration::from_millis;
    /// assert_eq!(Dist::LogNormal { median: ms(300), p99: ms(900) }.max(), MAX_LATENCY);
    /// assert_eq!(Dist::LogNormal { median: ms(300), p99: ms(300) }.max(), ms(300));
    /// ```
    pub fn max(&self) -> Duration {
        match *self {
            Dist::Fixed(v) => v.min(MAX_LATENCY),
            Dist::Uniform { min, max } => max.max(min).min(MAX_LATENCY),
            Dist::LogNormal { median, .. } if self.sigma() == 0.0 => median.min(MAX_LATENCY),
            Dist::LogNormal { .. } => MAX_LATENCY,
            Dist::Normal { mean, sd } if sd.is_zero() => mean.min(MAX_LATENCY),
            Dist::Normal { .. } => MAX_LATENCY,
        }
    }

    fn sigma(&self) -> f64 {
        match *self {
            Dist::LogNormal { median, p99 } if !median.is_zero() && p99 > median => {
                (p99.as_secs_f64() / median.as_secs_f64()).ln() / Z99
            }
            _ => 0.0,
        }
    }

    /// The distribution's mean.
    pub fn mean(&self) -> Duration {
        match *self {
            Dist::Fixed(v) => v,
            Dist::Uniform { min, max } => (min + max) / 2,
            Dist::LogNormal { median, .. } => {
                let s = self.sigma();
                Duration::from_secs_f64(
                    (median.as_secs_f64() * (s * s / 2.0).exp()).min(MAX_LATENCY.as_secs_f64()),
                )
            }
            Dist::Normal { mean, sd } => {
                // The folded normal's mean: σ √(2/π) e^(−μ²/2σ²) + μ (1 − 2 Φ(−μ/σ)).
                let (m, s) = (mean.as_secs_f64(), sd.as_secs_f64());
                if s == 0.0 {
                    return mean;
                }
                let r = m / s;
                let folded = s * (2.0 / std::f64::consts::PI).sqrt() * (-r * r / 2.0).exp()
                    + m * erf(r / std::f64::consts::SQRT_2);
                Duration::from_secs_f64(folded.clamp(0.0, MAX_LATENCY.as_secs_f64()))
            }
        }
    }

    fn check(self) -> Result<Self, String> {
        let over = |d: Duration| d > MAX_LATENCY;
        match self {
            Dist::Fixed(v) if over(v) => {
                Err(format!("a latency must be at most 1h, got {}", fmt_d(v)))
            }
            Dist::Uniform { min, max } if min > max || over(max) => Err(format!(
                "a uniform latency needs min <= max <= 1h, got min = {}, max = {}",
                fmt_d(min),
                fmt_d(max)
            )),
            Dist::LogNormal { median, p99 } if median.is_zero() || p99 < median || over(p99) => {
                Err(format!(
                    "a log-normal latency needs 0 < median <= p99 <= 1h, got median = {}, p99 = {}",
                    fmt_d(median),
                    fmt_d(p99)
                ))
            }
            Dist::Normal { mean, sd } if over(mean) || over(sd) => Err(format!(
                "a normal latency needs a mean and a standard deviation of at most 1h, got mean = {}, sd = {}",
                fmt_d(mean),
                fmt_d(sd)
            )),
            ok => Ok(ok),
        }
    }
}

/// The error function, to 1.5e-7 (Abramowitz and Stegun, 7.1.26).
fn erf(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let y = 1.0 - poly * (-x * x).exp();
    if x < 0.0 { -y } else { y }
}

/// `d` in nanoseconds, saturating.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

pub(crate) fn fmt_d(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
enum DistTable {
    Fixed {
        #[serde(with = "tripline::duration::serde")]
        value: Duration,
    },
    Uniform {
        #[serde(with = "tripline::duration::serde")]
        min: Duration,
        #[serde(with = "tripline::duration::serde")]
        max: Duration,
    },
    Lognormal {
        #[serde(with = "tripline::duration::serde")]
        median: Duration,
        #[serde(with = "tripline::duration::serde")]
        p99: Duration,
    },
    Normal {
        #[serde(with = "tripline::duration::serde")]
        mean: Duration,
        #[serde(with = "tripline::duration::serde")]
        sd: Duration,
    },
}

impl<'de> Deserialize<'de> for Dist {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Dist;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a duration such as \"300ms\", or a table with kind = \"fixed\", \"uniform\", \"lognormal\" or \"normal\"",
                )
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Dist, E> {
                let v = tripline::duration::parse(s).map_err(|e| {
                    E::custom(format!(
                        "invalid duration {s:?} ({e}); write it like \"300ms\" or \"2.5s\""
                    ))
                })?;
                Dist::Fixed(v).check().map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Dist, A::Error> {
                let t = DistTable::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let d = match t {
                    DistTable::Fixed { value } => Dist::Fixed(value),
                    DistTable::Uniform { min, max } => Dist::Uniform { min, max },
                    DistTable::Lognormal { median, p99 } => Dist::LogNormal { median, p99 },
                    DistTable::Normal { mean, sd } => Dist::Normal { mean, sd },
                };
                d.check().map_err(de::Error::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Dist {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        match *self {
            Dist::Fixed(v) => {
                m.serialize_entry("kind", "fixed")?;
                m.serialize_entry("value", &fmt_d(v))?;
            }
            Dist::Uniform { min, max } => {
                m.serialize_entry("kind", "uniform")?;
                m.serialize_entry("min", &fmt_d(min))?;
                m.serialize_entry("max", &fmt_d(max))?;
            }
            Dist::LogNormal { median, p99 } => {
                m.serialize_entry("kind", "lognormal")?;
                m.serialize_entry("median", &fmt_d(median))?;
                m.serialize_entry("p99", &fmt_d(p99))?;
            }
            Dist::Normal { mean, sd } => {
                m.serialize_entry("kind", "normal")?;
                m.serialize_entry("mean", &fmt_d(mean))?;
                m.serialize_entry("sd", &fmt_d(sd))?;
            }
        }
        m.end()
    }
}

/// A probability: written as a fraction in `[0, 1]` (`0.4`) or a percentage string (`"40%"`).
///
/// ```
/// use tripline_sim::Rate;
/// #[derive(serde::Deserialize)]
/// struct T { a: Rate, b: Rate }
/// let t: T = toml::from_str(r#"a = 0.4
/// b = "40%""#).unwrap();
/// assert_eq!(t.a, t.b);
/// assert!(toml::from_str::<T>("a = -0.5\nb = 0").is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct Rate(f64);

impl Rate {
    /// A rate from a fraction; `None` outside `[0, 1]`.
    pub fn new(fraction: f64) -> Option<Self> {
        (fraction.is_finite() && (0.0..=1.0).contains(&fraction)).then_some(Rate(fraction))
    }

    /// The fraction, in `[0, 1]`.
    pub fn fraction(self) -> f64 {
        self.0
    }

    /// Draws whether the event happens.
    pub fn happens(self, rng: &mut impl Rng) -> bool {
        self.0 > 0.0 && (self.0 >= 1.0 || rng.random::<f64>() < self.0)
    }
}

const RATE_ALLOWED: &str = "a fraction in [0, 1] (0.4) or a percentage string (\"40%\")";

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Rate;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(RATE_ALLOWED)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Rate, E> {
                Rate::new(v).ok_or_else(|| E::custom(format!("must be {RATE_ALLOWED}, got {v}")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Rate, E> {
                Rate::new(v as f64)
                    .ok_or_else(|| E::custom(format!("must be {RATE_ALLOWED}, got {v}")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Rate, E> {
                Rate::new(v as f64)
                    .ok_or_else(|| E::custom(format!("must be {RATE_ALLOWED}, got {v}")))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Rate, E> {
                let bad = || E::custom(format!("must be {RATE_ALLOWED}, got {s:?}"));
                let pct = s.trim().strip_suffix('%').ok_or_else(bad)?;
                let v: f64 = pct.trim().parse().map_err(|_| bad())?;
                Rate::new(v / 100.0).ok_or_else(bad)
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    #[test]
    fn lognormal_matches_its_median_and_p99() {
        let d = Dist::LogNormal {
            median: Duration::from_millis(300),
            p99: Duration::from_millis(900),
        };
        let mut rng = Pcg64Mcg::seed_from_u64(1);
        let mut v: Vec<u64> = (0..100_000).map(|_| d.sample(&mut rng)).collect();
        v.sort_unstable();
        let med = v[50_000] as f64 / 1e6;
        let p99 = v[99_000] as f64 / 1e6;
        assert!((med - 300.0).abs() < 6.0, "median {med}");
        assert!((p99 - 900.0).abs() < 40.0, "p99 {p99}");
    }

    #[test]
    fn normal_is_folded_at_zero_and_matches_its_moments() {
        let d = Dist::Normal {
            mean: Duration::from_millis(10),
            sd: Duration::from_millis(2),
        };
        let mut rng = Pcg64Mcg::seed_from_u64(3);
        let v: Vec<f64> = (0..100_000)
            .map(|_| d.sample(&mut rng) as f64 / 1e6)
            .collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
        assert!(
            (mean - 10.0).abs() < 0.05 && (sd - 2.0).abs() < 0.05,
            "{mean} {sd}"
        );
        assert!((d.mean().as_secs_f64() * 1e3 - 10.0).abs() < 1e-6);
        // Around zero, draws fold: none is negative, and the mean is the folded one.
        let z = Dist::Normal {
            mean: Duration::ZERO,
            sd: Duration::from_millis(10),
        };
        let m = (0..100_000).map(|_| z.sample(&mut rng) as f64).sum::<f64>() / 1e5 / 1e6;
        let expected = 10.0 * (2.0 / std::f64::consts::PI).sqrt();
        assert!((m - expected).abs() < 0.1, "{m} {expected}");
        assert!((z.mean().as_secs_f64() * 1e3 - expected).abs() < 1e-3);
        assert_eq!(z.max(), MAX_LATENCY);
    }

    #[test]
    fn uniform_stays_in_range() {
        let d = Dist::Uniform {
            min: Duration::from_secs(8),
            max: Duration::from_secs(12),
        };
        let mut rng = Pcg64Mcg::seed_from_u64(2);
        for _ in 0..1000 {
            let v = d.sample(&mut rng);
            assert!((8_000_000_000..=12_000_000_000).contains(&v));
        }
    }

    #[test]
    fn rates_parse_as_fraction_or_percent() {
        #[derive(Deserialize)]
        struct T {
            r: Rate,
        }
        let p = |s: &str| toml::from_str::<T>(s).map(|t| t.r.fraction());
        assert_eq!(p("r = 1").unwrap(), 1.0);
        assert_eq!(p("r = 0").unwrap(), 0.0);
        assert_eq!(p("r = \"12.5%\"").unwrap(), 0.125);
        for bad in [
            "r = 40",
            "r = -0.1",
            "r = \"140%\"",
            "r = \"x\"",
            "r = nan",
            "r = true",
        ] {
            let e = p(bad).unwrap_err().to_string();
            assert!(e.contains("fraction in [0, 1]"), "{bad}: {e}");
        }
    }
}
