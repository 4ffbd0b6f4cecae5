//! Deserialization helpers: fields checked as they are read, so that a TOML error for an
//! out-of-range value points at the field's line (the deserializer attaches the position of
//! the value being read to an error raised while reading it). Rules that relate two fields
//! are checked when the whole configuration is built, and point at its table.

use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use tripline::ConfigError;

/// Reads a `T` and checks it; a refusal is raised where the value is.
pub(crate) fn check<'de, D, T>(
    d: D,
    ok: impl FnOnce(&T) -> Result<(), ConfigError>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let v = T::deserialize(d)?;
    ok(&v).map_err(D::Error::custom)?;
    Ok(v)
}

/// Reads a human duration (`"250ms"`) and checks it.
pub(crate) fn check_dur<'de, D: Deserializer<'de>>(
    d: D,
    ok: impl FnOnce(Duration) -> Result<(), ConfigError>,
) -> Result<Duration, D::Error> {
    let v: Duration = tripline::duration::serde::deserialize(d)?;
    ok(v).map_err(D::Error::custom)?;
    Ok(v)
}

/// `v` in `[lo, hi]`, or an error naming `field`.
pub(crate) fn within<T: PartialOrd + std::fmt::Display>(
    field: &str,
    v: T,
    lo: T,
    hi: T,
) -> Result<(), ConfigError> {
    if v >= lo && v <= hi {
        Ok(())
    } else {
        Err(ConfigError::new(field, &v, format!("in [{lo}, {hi}]")))
    }
}

/// One checked reader per field, each reading an `Option` (for `#[serde(default,
/// deserialize_with = "...")]`): `name: Type = |v| check;`, or `name: dur = |v| check;` for a
/// human duration.
macro_rules! checked {
    ($($name:ident: dur = |$v:ident| $ok:expr;)*) => {$(
        fn $name<'de, D: serde::Deserializer<'de>>(
            d: D,
        ) -> Result<Option<std::time::Duration>, D::Error> {
            $crate::de::check_dur(d, |$v: std::time::Duration| $ok).map(Some)
        }
    )*};
    ($($name:ident: $t:ty = |$v:ident| $ok:expr;)*) => {$(
        fn $name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<$t>, D::Error> {
            $crate::de::check(d, |$v: &$t| $ok).map(Some)
        }
    )*};
}
pub(crate) use checked;
