//! Who may read and who may press the buttons.
//!
//! Every request is answered for a [`Principal`]: the one the application's check returned, or
//! the anonymous one. Reading, seeing sensitive scopes and controlling are separate
//! [`Permissions`]; anonymous callers can never control, so the controls stay off until the
//! application configures a check ([`DashboardBuilder::bearer_token`] or
//! [`DashboardBuilder::authenticate`]).
//!
//! Bearer tokens are compared in constant time: the presented token and each configured one
//! are padded to the same fixed length and compared with `subtle`, lengths included, and every
//! configured token is compared whether or not an earlier one matched, so the time taken says
//! nothing about how much of a token was right, nor which one.
//!
//! [`DashboardBuilder::bearer_token`]: crate::DashboardBuilder::bearer_token
//! [`DashboardBuilder::authenticate`]: crate::DashboardBuilder::authenticate

use std::fmt;
use std::ops::BitOr;
use std::sync::Arc;

use axum::http::header::{AUTHORIZATION, COOKIE, HOST, ORIGIN};
use axum::http::request::Parts;
use subtle::ConstantTimeEq;
use tripline::ConfigError;

/// What a principal may do.
///
/// ```
/// use tripline_dashboard::Permissions;
///
/// let operator = Permissions::READ | Permissions::CONTROL;
/// assert!(operator.contains(Permissions::CONTROL));
/// assert!(!operator.contains(Permissions::SENSITIVE));
/// assert_eq!(format!("{operator:?}"), "Permissions(read | control)");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Permissions(u8);

impl Permissions {
    /// Nothing at all.
    pub const NONE: Self = Self(0);
    /// See every breaker: state, figures, transitions, and the operators' actions. The scope
    /// of a key the application marks sensitive stays hidden.
    pub const READ: Self = Self(1);
    /// See the scope of keys the application marks sensitive (with [`READ`](Self::READ)).
    pub const SENSITIVE: Self = Self(2);
    /// Force open, disable, metrics-only, reset and clear overrides.
    pub const CONTROL: Self = Self(4);
    /// Everything.
    pub const ALL: Self = Self(7);

    /// Both sets.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether every permission of `other` is in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The names of the permissions held (`read`, `sensitive`, `control`).
    pub fn names(self) -> Vec<&'static str> {
        [
            (Self::READ, "read"),
            (Self::SENSITIVE, "sensitive"),
            (Self::CONTROL, "control"),
        ]
        .into_iter()
        .filter(|(p, _)| self.contains(*p))
        .map(|(_, n)| n)
        .collect()
    }
}

impl BitOr for Permissions {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl fmt::Debug for Permissions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = self.names();
        if names.is_empty() {
            f.write_str("Permissions(none)")
        } else {
            write!(f, "Permissions({})", names.join(" | "))
        }
    }
}

/// Who made a request, and what they may do. The name is what audit events record.
///
/// ```
/// use tripline_dashboard::{Permissions, Principal};
///
/// let alice = Principal::new("alice", Permissions::READ | Permissions::CONTROL);
/// assert_eq!(alice.name(), "alice");
/// assert!(alice.may(Permissions::CONTROL));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Principal {
    name: Arc<str>,
    permissions: Permissions,
    anonymous: bool,
}

impl Principal {
    /// A principal called `name` with `permissions`.
    pub fn new(name: impl Into<Arc<str>>, permissions: Permissions) -> Self {
        Self {
            name: name.into(),
            permissions,
            anonymous: false,
        }
    }

    pub(crate) fn anonymous(permissions: Permissions) -> Self {
        Self {
            name: "anonymous".into(),
            permissions,
            anonymous: true,
        }
    }

    /// The name audit events carry.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the principal may do.
    pub fn permissions(&self) -> Permissions {
        self.permissions
    }

    /// Whether the principal holds every permission of `p`.
    pub fn may(&self, p: Permissions) -> bool {
        self.permissions.contains(p)
    }

    /// Whether no credentials came with the request.
    pub fn is_anonymous(&self) -> bool {
        self.anonymous
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Principal")
            .field("name", &self.name)
            .field("permissions", &self.permissions)
            .field("anonymous", &self.anonymous)
            .finish()
    }
}

/// Credentials came with the request but are not good; answered with 401 and this reason.
///
/// ```
/// use tripline_dashboard::Unauthenticated;
/// let e = Unauthenticated::new("the session expired");
/// assert_eq!(e.to_string(), "the session expired");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unauthenticated(String);

impl Unauthenticated {
    /// A refusal saying `reason` (shown to the caller: say what is wrong, not what is right).
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

impl fmt::Display for Unauthenticated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unauthenticated {}

/// The application's authentication check.
///
/// It sees the request's head (method, URI, headers and extensions) and returns the principal
/// behind it, `Ok(None)` when the request carries no credentials it knows (the caller is then
/// anonymous), or an error when it carries credentials that are wrong. An application whose
/// check is asynchronous (a session store, an identity provider) runs it in its own middleware
/// in front of the dashboard and puts the result in the request's extensions, where this hook
/// reads it.
///
/// Implemented for closures:
///
/// ```
/// use axum::http::request::Parts;
/// use tripline_dashboard::{Dashboard, Permissions, Principal, Unauthenticated};
///
/// // The application's own middleware put a `Principal` in the extensions.
/// let dashboard = Dashboard::builder()
///     .authenticate(|parts: &Parts| -> Result<Option<Principal>, Unauthenticated> {
///         Ok(parts.extensions.get::<Principal>().cloned())
///     })
///     .build()?;
/// # drop(dashboard);
/// # Ok::<(), tripline::ConfigError>(())
/// ```
pub trait Authenticate: Send + Sync + 'static {
    /// Who made the request.
    fn authenticate(&self, request: &Parts) -> Result<Option<Principal>, Unauthenticated>;
}

impl<F> Authenticate for F
where
    F: Fn(&Parts) -> Result<Option<Principal>, Unauthenticated> + Send + Sync + 'static,
{
    fn authenticate(&self, request: &Parts) -> Result<Option<Principal>, Unauthenticated> {
        self(request)
    }
}

/// The longest bearer token accepted, in bytes.
pub(crate) const MAX_TOKEN: usize = 256;
/// The shortest bearer token accepted, in bytes.
pub(crate) const MIN_TOKEN: usize = 16;

/// A token padded to [`MAX_TOKEN`] bytes, with its length.
struct Padded {
    bytes: [u8; MAX_TOKEN],
    len: u16,
}

impl Padded {
    /// `None` when longer than [`MAX_TOKEN`].
    fn new(token: &[u8]) -> Option<Self> {
        let mut bytes = [0u8; MAX_TOKEN];
        bytes.get_mut(..token.len())?.copy_from_slice(token);
        Some(Self {
            bytes,
            len: u16::try_from(token.len()).ok()?,
        })
    }

    /// Constant time in the contents and in both lengths.
    fn matches(&self, other: &Padded) -> subtle::Choice {
        self.bytes.ct_eq(&other.bytes) & self.len.ct_eq(&other.len)
    }
}

/// The built-in check: `Authorization: Bearer <token>` against configured tokens.
pub(crate) struct BearerTokens {
    tokens: Vec<(Padded, Principal)>,
}

impl BearerTokens {
    pub(crate) fn new() -> Self {
        Self { tokens: Vec::new() }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Adds a token, checking its shape and that it is not already configured.
    pub(crate) fn add(&mut self, token: &str, principal: Principal) -> Result<(), ConfigError> {
        let ok = (MIN_TOKEN..=MAX_TOKEN).contains(&token.len())
            && token.bytes().all(|b| b.is_ascii_graphic());
        if !ok {
            // Never echo a secret: say how long it was, not what it was.
            return Err(ConfigError::new(
                "bearer_token",
                format!("a token of {} bytes", token.len()),
                format!("{MIN_TOKEN} to {MAX_TOKEN} printable ASCII characters without spaces"),
            ));
        }
        check_principal_name(principal.name())?;
        let padded = Padded::new(token.as_bytes()).expect("length checked above");
        if self
            .tokens
            .iter()
            .any(|(t, _)| bool::from(t.matches(&padded)))
        {
            return Err(ConfigError::new(
                "bearer_token",
                format!("the token given for {:?}", principal.name()),
                "a token not already given to another principal",
            ));
        }
        self.tokens.push((padded, principal));
        Ok(())
    }
}

pub(crate) fn check_principal_name(name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
        return Err(ConfigError::new(
            "principal",
            format!("{name:?}"),
            "1 to 128 bytes without control characters",
        ));
    }
    Ok(())
}

impl Authenticate for BearerTokens {
    fn authenticate(&self, request: &Parts) -> Result<Option<Principal>, Unauthenticated> {
        let Some(value) = request.headers.get(AUTHORIZATION) else {
            return Ok(None);
        };
        let value = value.as_bytes();
        let (scheme, token) = match value.iter().position(|&b| b == b' ') {
            Some(i) => (&value[..i], trim(&value[i + 1..])),
            None => (value, &[][..]),
        };
        if !scheme.eq_ignore_ascii_case(b"bearer") {
            return Err(Unauthenticated::new(
                "the Authorization header must be `Bearer <token>`",
            ));
        }
        let Some(presented) = Padded::new(token) else {
            return Err(Unauthenticated::new("the bearer token is not recognised"));
        };
        // Every token is compared, so the time taken does not depend on which one matched.
        let mut found: Option<&Principal> = None;
        for (t, p) in &self.tokens {
            if bool::from(t.matches(&presented)) {
                found = Some(p);
            }
        }
        found
            .cloned()
            .map(Some)
            .ok_or_else(|| Unauthenticated::new("the bearer token is not recognised"))
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| *c != b' ').unwrap_or(b.len());
    let end = b.iter().rposition(|c| *c != b' ').map_or(start, |i| i + 1);
    &b[start..end]
}

// ---------------------------------------------------------------------------------------------
// Cross-site request forgery.

/// The cookie that carries the double-submit token.
pub(crate) const CSRF_COOKIE: &str = "tripline_csrf";
/// The header the page copies it into.
pub(crate) const CSRF_HEADER: &str = "x-tripline-csrf";

/// Whether the request came from a browser: browsers send `Origin` on every POST made by a
/// script and `Sec-Fetch-Site` on every request, and only browsers send cookies on their own.
pub(crate) fn from_browser(parts: &Parts) -> bool {
    let h = &parts.headers;
    h.contains_key(ORIGIN) || h.contains_key("sec-fetch-site") || h.contains_key(COOKIE)
}

/// Refuses a request that a browser says came from another site: `Sec-Fetch-Site` other than
/// `same-origin`, or an `Origin` that is neither this host nor one the application allowed.
pub(crate) fn same_origin(parts: &Parts, allowed: &[String]) -> Result<(), String> {
    if let Some(site) = parts.headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("");
        if site != "same-origin" {
            return Err(format!(
                "a control must come from the dashboard's own page (Sec-Fetch-Site is {site:?})"
            ));
        }
    }
    if let Some(origin) = parts.headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if allowed.iter().any(|a| a.eq_ignore_ascii_case(origin)) {
            return Ok(());
        }
        let host = parts
            .headers
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| parts.uri.authority().map(|a| a.as_str()))
            .unwrap_or("");
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        if authority.is_none_or(|a| host.is_empty() || !a.eq_ignore_ascii_case(host)) {
            return Err(format!(
                "a control must come from the dashboard's own page (Origin {origin:?} is not this host)"
            ));
        }
    }
    Ok(())
}

/// Whether `s` is a host with an optional port: letters, digits, `-`, `.`, `:`, `[`, `]`.
pub(crate) fn is_authority(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-.:[]".contains(c))
}

/// A host and its port, if any (`[::1]:8080` is `[::1]` and `8080`).
fn split_port(h: &str) -> (&str, Option<&str>) {
    if h.starts_with('[') {
        return match h.find(']') {
            Some(i) => (&h[..=i], h[i + 1..].strip_prefix(':')),
            None => (h, None),
        };
    }
    match h.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (h, None),
    }
}

/// Whether the request's `host` is one of `allowed` (lowercase): the same host and port, or
/// the same host where the allowed entry gives no port.
pub(crate) fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let host = host.to_ascii_lowercase();
    let (name, _) = split_port(&host);
    let name = name.strip_suffix('.').unwrap_or(name);
    allowed.iter().any(|a| {
        if *a == host {
            return true;
        }
        let (a_name, a_port) = split_port(a);
        a_port.is_none() && a_name == name
    })
}

/// The double-submit check: the token in the header equals the one in the cookie (constant
/// time), and it has the shape the dashboard issues.
pub(crate) fn double_submit(parts: &Parts) -> Result<(), String> {
    let header = parts
        .headers
        .get(CSRF_HEADER)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if header.is_empty() {
        return Err(format!(
            "the {CSRF_HEADER} header is missing: fetch a token from api/session and send it back"
        ));
    }
    let cookie = csrf_cookie(parts).unwrap_or_default();
    let well_formed = header.len() == CSRF_LEN && header.iter().all(u8::is_ascii_hexdigit);
    let equal =
        well_formed && cookie.len() == CSRF_LEN && bool::from(header.ct_eq(cookie.as_bytes()));
    if equal {
        Ok(())
    } else {
        Err(format!(
            "the {CSRF_HEADER} header does not match the {CSRF_COOKIE} cookie: reload the page"
        ))
    }
}

/// Hex characters in a CSRF token (32 random bytes).
pub(crate) const CSRF_LEN: usize = 64;

/// The CSRF cookie's value, if the request carries a well-formed one.
pub(crate) fn csrf_cookie(parts: &Parts) -> Option<&str> {
    parts
        .headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == CSRF_COOKIE)
        .map(|(_, value)| value.trim_matches('"'))
        .filter(|v| v.len() == CSRF_LEN && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A fresh CSRF token: 32 bytes from the operating system's generator, in hex.
pub(crate) fn new_csrf_token() -> String {
    use rand::TryRngCore;
    let mut bytes = [0u8; CSRF_LEN / 2];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system's random generator failed");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn parts(headers: &[(&str, &str)]) -> Parts {
        let mut b = Request::builder().uri("/api/control");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn bearer_tokens_match_only_the_exact_token() {
        let mut t = BearerTokens::new();
        t.add(
            "s3cret-operator-token",
            Principal::new("op", Permissions::ALL),
        )
        .unwrap();
        t.add(
            "s3cret-reader-token!!",
            Principal::new("rd", Permissions::READ),
        )
        .unwrap();
        let who = |h: &str| t.authenticate(&parts(&[("authorization", h)]));
        assert_eq!(
            who("Bearer s3cret-operator-token").unwrap().unwrap().name(),
            "op"
        );
        assert_eq!(
            who("bearer  s3cret-reader-token!! ")
                .unwrap()
                .unwrap()
                .name(),
            "rd"
        );
        // A prefix, an extension, a different case, another scheme, an empty token.
        for bad in [
            "Bearer s3cret-operator-toke",
            "Bearer s3cret-operator-tokenX",
            "Bearer S3CRET-OPERATOR-TOKEN",
            "Basic s3cret-operator-token",
            "Bearer",
            "Bearer ",
        ] {
            assert!(who(bad).is_err(), "{bad:?} was accepted");
        }
        let long = format!("Bearer {}", "x".repeat(MAX_TOKEN + 1));
        assert!(who(&long).is_err());
        assert_eq!(t.authenticate(&parts(&[])).unwrap(), None);
    }

    #[test]
    fn token_shape_is_checked_without_echoing_it() {
        let mut t = BearerTokens::new();
        let err = t
            .add("short", Principal::new("op", Permissions::ALL))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "bearer_token must be 16 to 256 printable ASCII characters without spaces, got a token of 5 bytes"
        );
        assert!(
            t.add(
                "has a space in it ok",
                Principal::new("op", Permissions::ALL)
            )
            .is_err()
        );
        t.add("0123456789abcdef", Principal::new("a", Permissions::READ))
            .unwrap();
        let dup = t
            .add("0123456789abcdef", Principal::new("b", Permissions::READ))
            .unwrap_err();
        assert!(!dup.to_string().contains("0123456789abcdef"), "{dup}");
    }

    #[test]
    fn origin_checks() {
        let ok = parts(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert!(same_origin(&ok, &[]).is_ok());
        let cross = parts(&[("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")]);
        assert!(same_origin(&cross, &[]).is_err());
        let other = parts(&[("host", "127.0.0.1:8080"), ("origin", "http://evil.test")]);
        assert!(same_origin(&other, &[]).is_err());
        assert!(same_origin(&other, &["http://evil.test".into()]).is_ok());
        let null = parts(&[("host", "127.0.0.1:8080"), ("origin", "null")]);
        assert!(same_origin(&null, &[]).is_err());
        // No browser headers at all: nothing to check here (the caller is not a browser).
        assert!(same_origin(&parts(&[]), &[]).is_ok());
    }

    #[test]
    fn hosts_match_with_and_without_ports() {
        let allowed = [
            "127.0.0.1:8080".to_string(),
            "ops.example.com".into(),
            "[::1]:9000".into(),
        ];
        for ok in [
            "127.0.0.1:8080",
            "OPS.example.com",
            "ops.example.com:443",
            "ops.example.com.",
            "[::1]:9000",
        ] {
            assert!(host_allowed(ok, &allowed), "{ok}");
        }
        for bad in [
            "127.0.0.1:8081",
            "127.0.0.1",
            "evil.test",
            "",
            "ops.example.com.evil.test",
            "[::1]:9001",
            "[::1]",
        ] {
            assert!(!host_allowed(bad, &allowed), "{bad}");
        }
    }

    #[test]
    fn double_submit_needs_equal_well_formed_tokens() {
        let token = new_csrf_token();
        assert_eq!(token.len(), CSRF_LEN);
        assert_ne!(token, new_csrf_token());
        let cookie = format!("a=b; {CSRF_COOKIE}={token}");
        assert!(double_submit(&parts(&[("cookie", &cookie), (CSRF_HEADER, &token)])).is_ok());
        let other = new_csrf_token();
        assert!(double_submit(&parts(&[("cookie", &cookie), (CSRF_HEADER, &other)])).is_err());
        assert!(double_submit(&parts(&[(CSRF_HEADER, &token)])).is_err());
        assert!(double_submit(&parts(&[("cookie", &cookie)])).is_err());
        let short = format!("{CSRF_COOKIE}=abc");
        assert!(double_submit(&parts(&[("cookie", &short), (CSRF_HEADER, "abc")])).is_err());
    }
}
