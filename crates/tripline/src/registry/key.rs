//! Keys: a dependency and an optional scope, the selectors an operator aims at, and the
//! states an operator sets.

use std::fmt;
use std::sync::Arc;

use crate::error::ConfigError;

/// What part of a dependency a keyed breaker covers.
///
/// ```
/// use tripline::registry::ScopeKind;
/// assert_eq!(ScopeKind::Shard.as_str(), "shard");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScopeKind {
    /// One endpoint (route, RPC method) of the dependency.
    Endpoint,
    /// One host or instance.
    Host,
    /// One tenant or customer.
    Tenant,
    /// One shard or cell.
    Shard,
    /// One region or zone.
    Region,
}

impl ScopeKind {
    const ALL: [ScopeKind; 5] = [
        ScopeKind::Endpoint,
        ScopeKind::Host,
        ScopeKind::Tenant,
        ScopeKind::Shard,
        ScopeKind::Region,
    ];

    /// The lowercase name used in keys (`tenant`).
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Endpoint => "endpoint",
            ScopeKind::Host => "host",
            ScopeKind::Tenant => "tenant",
            ScopeKind::Shard => "shard",
            ScopeKind::Region => "region",
        }
    }
}

/// A breaker's key: a dependency and an optional scope. Written `payments` or
/// `payments/tenant=acme`.
///
/// ```
/// use tripline::registry::{Key, ScopeKind};
///
/// let k: Key = "catalog/shard=17".parse()?;
/// assert_eq!(k.dependency(), "catalog");
/// assert_eq!(k.scope(), Some((ScopeKind::Shard, "17")));
/// assert!(Key::new("").is_err());
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Key {
    dependency: Arc<str>,
    scope: Option<(ScopeKind, Arc<str>)>,
    /// The key's hash, computed once with a per-process random seed: a lookup hashes 8 bytes
    /// instead of the key's strings, and crafted tenant names cannot aim at one bucket.
    hash: u64,
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.dependency == other.dependency && self.scope == other.scope
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.dependency, &self.scope).cmp(&(&other.dependency, &other.scope))
    }
}

fn key_hash(dependency: &str, scope: Option<(ScopeKind, &str)>) -> u64 {
    use std::hash::BuildHasher;
    static SEED: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    SEED.get_or_init(std::hash::RandomState::new)
        .hash_one((dependency, scope))
}

pub(crate) fn check_name(field: &str, v: &str, max: usize) -> Result<(), ConfigError> {
    let ok = !v.is_empty()
        && v.len() <= max
        && v.chars()
            .all(|c| !c.is_control() && !c.is_whitespace() && !"/={}".contains(c));
    if !ok {
        return Err(ConfigError::new(
            field,
            format!("{v:?}"),
            format!(
                "1 to {max} bytes without whitespace, control characters, '/', '=', '{{' or '}}'"
            ),
        ));
    }
    // Two names that differ only by a character nobody sees (U+200B) or by a bidirectional
    // override (`shard=\u{202E}71` shows as `shard=17`) would look like one key in a log, a
    // metric label or an operator's page: such characters are refused.
    if let Some(c) = v.chars().find(|&c| invisible(c)) {
        return Err(ConfigError::new(
            field,
            format!(
                "{:?} (U+{:04X} at byte {})",
                v,
                u32::from(c),
                v.find(c).unwrap_or(0)
            ),
            "a name without invisible or bidirectional-control characters (Unicode's \
             Default_Ignorable_Code_Point: zero-width spaces and joiners, bidi embeddings, \
             overrides, isolates and marks, the byte-order mark, variation selectors, tags)",
        ));
    }
    Ok(())
}

/// Whether `c` is a Unicode `Default_Ignorable_Code_Point` (DerivedCoreProperties.txt,
/// Unicode 15.1): characters a renderer shows as nothing, the bidirectional controls among
/// them.
fn invisible(c: char) -> bool {
    matches!(
        u32::from(c),
        0x00AD
            | 0x034F
            | 0x061C
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF0..=0xFFF8
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

impl Key {
    /// The key of a whole dependency.
    pub fn new(dependency: &str) -> Result<Self, ConfigError> {
        check_name("key.dependency", dependency, 128)?;
        Ok(Self {
            dependency: dependency.into(),
            scope: None,
            hash: key_hash(dependency, None),
        })
    }

    /// The key of one part of a dependency.
    pub fn scoped(dependency: &str, kind: ScopeKind, value: &str) -> Result<Self, ConfigError> {
        check_name("key.dependency", dependency, 128)?;
        check_name("key.scope", value, 256)?;
        Ok(Self {
            dependency: dependency.into(),
            scope: Some((kind, value.into())),
            hash: key_hash(dependency, Some((kind, value))),
        })
    }

    /// The dependency.
    pub fn dependency(&self) -> &str {
        &self.dependency
    }

    /// The scope, if any.
    pub fn scope(&self) -> Option<(ScopeKind, &str)> {
        self.scope.as_ref().map(|(k, v)| (*k, &**v))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dependency)?;
        if let Some((kind, v)) = &self.scope {
            write!(f, "/{}={v}", kind.as_str())?;
        }
        Ok(())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({self})")
    }
}

impl std::str::FromStr for Key {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s.split_once('/') {
            None => Key::new(s),
            Some((dep, scope)) => {
                let Some((kind, value)) = scope.split_once('=') else {
                    return Err(ConfigError::new(
                        "key",
                        format!("{s:?}"),
                        "`dependency` or `dependency/kind=value`",
                    ));
                };
                let kind = ScopeKind::ALL
                    .into_iter()
                    .find(|k| k.as_str() == kind)
                    .ok_or_else(|| {
                        ConfigError::new(
                            "key.scope kind",
                            format!("{kind:?}"),
                            "one of endpoint, host, tenant, shard, region",
                        )
                    })?;
                Key::scoped(dep, kind, value)
            }
        }
    }
}

/// An operator's setting for a key or a whole dependency.
///
/// ```
/// use tripline::registry::OperatorState;
/// assert_eq!(OperatorState::default(), OperatorState::Auto);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum OperatorState {
    /// No override: the rules decide (a breaker left in an operator state is reset to Closed).
    #[default]
    Auto,
    /// Kill switch: reject everything.
    ForcedOpen,
    /// Permit everything, record nothing.
    Disabled,
    /// Shadow mode: record, report would-trip, never trip.
    MetricsOnly,
}

impl OperatorState {
    /// The state the override holds a breaker in (`None` for `Auto`: the rules decide).
    pub(crate) fn held(self) -> Option<crate::State> {
        match self {
            OperatorState::Auto => None,
            OperatorState::ForcedOpen => Some(crate::State::ForcedOpen),
            OperatorState::Disabled => Some(crate::State::Disabled),
            OperatorState::MetricsOnly => Some(crate::State::MetricsOnly),
        }
    }
}

/// Which breakers an operator action targets.
///
/// ```
/// use tripline::registry::{Key, Selector};
/// let one = Selector::Key(Key::new("payments")?);
/// let all = Selector::Dependency("payments".into());
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Selector {
    /// Exactly this key.
    Key(Key),
    /// Every key of this dependency, scoped or not, now and later.
    Dependency(String),
}

impl Selector {
    /// Whether the action targets `key`.
    ///
    /// ```
    /// use tripline::registry::{Key, ScopeKind, Selector};
    /// let key = Key::scoped("payments", ScopeKind::Tenant, "acme")?;
    /// assert!(Selector::Dependency("payments".into()).selects(&key));
    /// assert!(!Selector::Key(Key::new("payments")?).selects(&key));
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn selects(&self, key: &Key) -> bool {
        match self {
            Selector::Key(k) => k == key,
            Selector::Dependency(d) => key.dependency() == d,
        }
    }
}
