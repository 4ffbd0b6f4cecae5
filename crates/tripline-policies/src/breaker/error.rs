//! The breaker's rejection: the core's [`Rejected`], re-exported.
//!
//! A call refused by an open breaker fails with a `tripline::Rejected` boxed into the tower
//! `BoxError`, so `err.downcast_ref::<Rejected>()` finds it: which breaker, in which state, and
//! how long until the next probe.

pub use tripline::Rejected;
