//! The injected error.

use std::fmt;

/// The error an injected [`Fault::Error`](super::Fault::Error) fails a call with. It plays
/// the dependency's own failure: a breaker counts it as a failure, a retry may retry it, and it
/// is never taken for a local refusal. Downcastable from a tower `BoxError`.
///
/// ```
/// use tripline_policies::chaos::InjectedFault;
/// assert_eq!(InjectedFault::new().to_string(), "injected fault");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InjectedFault {
    _private: (),
}

impl InjectedFault {
    /// The injected error.
    pub const fn new() -> Self {
        Self { _private: () }
    }
}

impl fmt::Display for InjectedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("injected fault")
    }
}

impl std::error::Error for InjectedFault {}
