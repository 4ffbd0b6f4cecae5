//! Human durations (`"250ms"`, `"1h 30m"`, `"2 days"`) read without a panic on any input.
//!
//! Every duration field of every tripline configuration (breaker, registry, policies, shared
//! breaker, simulator scenarios and tuning spaces) is read through [`parse`], and through
//! [`serde`] where it is deserialized. The syntax is [humantime]'s: a sum of terms, each a
//! number (with an optional fraction) and a unit (`ns`, `us`/`µs`, `ms`, `s`/`sec`, `m`/`min`,
//! `h`/`hr`, `d`/`day`, `w`/`wk`, `M`/`month` (30.44 days), `y`/`yr` (365.25 days), and their
//! long forms).
//!
//! [`humantime::parse_duration`] itself panics on a sum that reaches 2^64 seconds by a carry
//! of exactly one second of nanoseconds (`"18446744073709551615s 1000000000ns"`: "overflow in
//! Duration::new"). [`parse`] first bounds the value from above term by term, and answers an
//! overflow error, as humantime does for the other sums it cannot hold, when the bound reaches
//! `u64::MAX` seconds; below that bound humantime cannot reach the carry, so its answer is
//! returned as it is.
//!
//! ```
//! use std::time::Duration;
//! use tripline::duration;
//!
//! assert_eq!(duration::parse("2h 37min").unwrap(), Duration::from_secs(9_420));
//! assert_eq!(duration::parse("1.5s").unwrap(), Duration::from_millis(1_500));
//! // humantime panics on this one; here it is an error.
//! let err = duration::parse("18446744073709551615s 1000000000ns").unwrap_err();
//! assert!(err.to_string().contains("too large"), "{err}");
//! assert!(duration::parse("5 parsecs").is_err());
//! ```

use std::fmt;
use std::time::Duration;

/// A text that is not a duration, or one too large to hold: what [`parse`] answers.
///
/// Its text is humantime's (`unknown time unit "parsecs", supported units: ...`, `number is
/// too large ...`).
///
/// ```
/// let err = tripline::duration::parse("10 fortnights").unwrap_err();
/// assert!(err.to_string().contains("unknown time unit"), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DurationError(humantime::DurationError);

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for DurationError {}

/// Reads a human duration, answering an error (never a panic) for any text.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(tripline::duration::parse("250ms").unwrap(), Duration::from_millis(250));
/// assert_eq!(tripline::duration::parse("0").unwrap(), Duration::ZERO);
/// assert!(tripline::duration::parse("").is_err());
/// ```
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    if upper_bound_secs(text) >= u128::from(u64::MAX) {
        return Err(DurationError(humantime::DurationError::NumberOverflow));
    }
    humantime::parse_duration(text).map_err(DurationError)
}

/// Formats a duration as [`parse`] reads it back (`"1h 30m"`, `"250ms"`).
///
/// ```
/// use std::time::Duration;
/// use tripline::duration;
/// let d = Duration::from_millis(5_400_250);
/// assert_eq!(duration::format(d), "1h 30m 250ms");
/// assert_eq!(duration::parse(&duration::format(d)).unwrap(), d);
/// ```
pub fn format(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// Whole seconds that one unit adds at most, counting any fraction of a second as one; and
/// for the units below a second, how many of them make a second.
fn unit_weight(unit: &str) -> (u128, u128) {
    match unit {
        "nanos" | "nsec" | "ns" => (1, 1_000_000_000),
        "usec" | "us" | "µs" => (1, 1_000_000),
        "millis" | "msec" | "ms" => (1, 1_000),
        "seconds" | "second" | "secs" | "sec" | "s" => (1, 1),
        "minutes" | "minute" | "min" | "mins" | "m" => (60, 1),
        "hours" | "hour" | "hr" | "hrs" | "h" => (3_600, 1),
        "days" | "day" | "d" => (86_400, 1),
        "weeks" | "week" | "wk" | "wks" | "w" => (604_800, 1),
        "months" | "month" | "M" => (2_630_016, 1),
        // Years, and any unit humantime does not know (it refuses those, but the terms before
        // one are summed first): the largest weight.
        _ => (31_557_600, 1),
    }
}

/// An upper bound, in seconds, of every partial sum humantime forms while it reads `text`
/// (saturating far above `u64::MAX`).
///
/// The scan follows humantime's reading loosely but never under-counts: whitespace inside a
/// number is skipped as humantime skips it, every digit after a `.` counts as a fraction worth
/// at most one whole unit, a run of letters is the unit of the number before it, and any other
/// character ends a term (humantime stops there with an error, after summing the terms before).
fn upper_bound_secs(text: &str) -> u128 {
    const CAP: u128 = 1 << 100;
    let mut total: u128 = 0;
    let mut number: u128 = 0;
    let mut fraction = false;
    let mut pending = false;
    let mut unit = String::new();
    let mut in_unit = false;

    let mut close = |number: &mut u128, fraction: &mut bool, unit: &mut String| {
        let (secs, per) = unit_weight(unit);
        let term = if per == 1 {
            number.saturating_mul(secs)
        } else {
            *number / per + 1
        };
        let term = term.saturating_add(if *fraction { secs } else { 0 });
        total = total.saturating_add(term).min(CAP);
        *number = 0;
        *fraction = false;
        unit.clear();
    };

    for c in text.chars() {
        match c {
            '0'..='9' => {
                if in_unit {
                    close(&mut number, &mut fraction, &mut unit);
                    in_unit = false;
                }
                pending = true;
                if !fraction {
                    number = (number * 10 + u128::from(c as u8 - b'0')).min(CAP);
                }
            }
            '.' if !in_unit => {
                fraction = true;
                pending = true;
            }
            'a'..='z' | 'A'..='Z' | 'µ' => {
                in_unit = true;
                pending = true;
                if unit.len() < 16 {
                    unit.push(c);
                } else {
                    // No unit is this long: weigh it as the largest.
                    unit.replace_range(.., "?");
                }
            }
            c if c.is_whitespace() && !in_unit => {}
            _ => {
                if pending {
                    close(&mut number, &mut fraction, &mut unit);
                }
                pending = false;
                in_unit = false;
            }
        }
    }
    if pending {
        close(&mut number, &mut fraction, &mut unit);
    }
    total
}

/// `#[serde(with = "tripline::duration::serde")]`: a [`Duration`] as a human duration text,
/// read with [`parse`] and written with [`format`](fn@format).
///
/// ```
/// use std::time::Duration;
///
/// #[derive(serde::Deserialize, serde::Serialize)]
/// struct Settings {
///     #[serde(with = "tripline::duration::serde")]
///     timeout: Duration,
///     #[serde(default, with = "tripline::duration::serde::option")]
///     grace: Option<Duration>,
/// }
///
/// let s: Settings = toml::from_str("timeout = \"1.5s\"").unwrap();
/// assert_eq!(s.timeout, Duration::from_millis(1_500));
/// assert_eq!(s.grace, None);
/// let err = toml::from_str::<Settings>("timeout = \"18446744073709551615s 1000000000ns\"")
///     .err()
///     .unwrap();
/// assert!(err.to_string().contains("too large"), "{err}");
/// ```
#[cfg(feature = "serde")]
pub mod serde {
    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    struct Human;

    impl Visitor<'_> for Human {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration such as \"250ms\" or \"1h 30m\"")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            super::parse(v).map_err(|e| E::custom(format_args!("{e} (in {v:?})")))
        }
    }

    /// Reads a human duration text.
    ///
    /// ```
    /// use std::time::Duration;
    /// #[derive(serde::Deserialize)]
    /// struct S {
    ///     #[serde(deserialize_with = "tripline::duration::serde::deserialize")]
    ///     d: Duration,
    /// }
    /// let s: S = toml::from_str("d = \"2m\"").unwrap();
    /// assert_eq!(s.d, Duration::from_secs(120));
    /// ```
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_str(Human)
    }

    /// Writes a human duration text.
    ///
    /// ```
    /// use std::time::Duration;
    /// #[derive(serde::Serialize)]
    /// struct S {
    ///     #[serde(serialize_with = "tripline::duration::serde::serialize")]
    ///     d: Duration,
    /// }
    /// let text = toml::to_string(&S { d: Duration::from_millis(1_500) }).unwrap();
    /// assert_eq!(text.trim(), "d = \"1s 500ms\"");
    /// ```
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    /// `#[serde(default, with = "tripline::duration::serde::option")]`: an optional human
    /// duration.
    ///
    /// ```
    /// use std::time::Duration;
    /// #[derive(serde::Deserialize, serde::Serialize)]
    /// struct S {
    ///     #[serde(default, with = "tripline::duration::serde::option")]
    ///     d: Option<Duration>,
    /// }
    /// let s: S = toml::from_str("d = \"3s\"").unwrap();
    /// assert_eq!(s.d, Some(Duration::from_secs(3)));
    /// assert_eq!(toml::from_str::<S>("").unwrap().d, None);
    /// ```
    pub mod option {
        use std::fmt;
        use std::time::Duration;

        use serde::de::{self, Visitor};
        use serde::{Deserializer, Serializer};

        struct MaybeHuman;

        impl<'de> Visitor<'de> for MaybeHuman {
            type Value = Option<Duration>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"250ms\" or \"1h 30m\", or nothing")
            }

            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }

            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }

            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                super::deserialize(d).map(Some)
            }
        }

        /// Reads an optional human duration text.
        ///
        /// ```
        /// use std::time::Duration;
        /// #[derive(serde::Deserialize)]
        /// struct S {
        ///     #[serde(default, deserialize_with = "tripline::duration::serde::option::deserialize")]
        ///     d: Option<Duration>,
        /// }
        /// assert_eq!(toml::from_str::<S>("d = \"1ms\"").unwrap().d, Some(Duration::from_millis(1)));
        /// ```
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            d.deserialize_option(MaybeHuman)
        }

        /// Writes an optional human duration text (`None` as nothing).
        ///
        /// ```
        /// use std::time::Duration;
        /// #[derive(serde::Serialize)]
        /// struct S {
        ///     #[serde(serialize_with = "tripline::duration::serde::option::serialize")]
        ///     d: Option<Duration>,
        /// }
        /// let text = serde_json::to_string(&S { d: Some(Duration::from_secs(2)) }).unwrap();
        /// assert_eq!(text, r#"{"d":"2s"}"#);
        /// ```
        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => s.serialize_some(&humantime::format_duration(*d).to_string()),
                None => s.serialize_none(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_carry_that_panics_humantime_is_an_overflow_error() {
        for text in [
            "18446744073709551615s 1000000000ns",
            "18446744073709551615s1000000000ns",
            "18446744073709551615 s 1000000 us",
            "18446744073709551614s 2000000000ns",
            "18446744073709551615s 1000ms",
        ] {
            assert_eq!(
                parse(text),
                Err(DurationError(humantime::DurationError::NumberOverflow)),
                "{text}"
            );
        }
    }

    #[test]
    fn big_sub_second_counts_are_still_read() {
        assert_eq!(
            parse("18446744073709551615ns").unwrap(),
            Duration::new(18_446_744_073, 709_551_615)
        );
        assert_eq!(
            parse("1000000000000ns").unwrap(),
            Duration::from_secs(1_000)
        );
    }
}
