//! The gate's rejection.

use std::fmt;

/// One of the gate's three limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    /// `max_requests`: requests in flight.
    Requests,
    /// `max_pending`: requests waiting for a slot further down (a bulkhead's queue, a pool).
    Pending,
    /// `max_retries`, or the retry budget when one is set: retries in flight.
    Retries,
}

impl Limit {
    /// The name of the limit's overflow counter, as Envoy names it.
    ///
    /// ```
    /// use tripline_policies::gate::Limit;
    /// assert_eq!(Limit::Pending.overflow_counter(), "upstream_rq_pending_overflow");
    /// ```
    pub const fn overflow_counter(self) -> &'static str {
        match self {
            Limit::Requests => "upstream_rq_overflow",
            Limit::Pending => "upstream_rq_pending_overflow",
            Limit::Retries => "upstream_rq_retry_overflow",
        }
    }

    /// The configuration field of the limit.
    pub const fn field(self) -> &'static str {
        match self {
            Limit::Requests => "max_requests",
            Limit::Pending => "max_pending",
            Limit::Retries => "max_retries",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.field())
    }
}

/// A call the gate refused at once because a limit was reached: which limit, and its value at
/// the time (for retries under a budget, the budget's allowance then). Downcastable from a
/// tower `BoxError`.
///
/// ```
/// use tripline_policies::gate::{Gate, GateConfig, Limit};
///
/// let gate = Gate::new(GateConfig::builder().max_requests(1).build()?);
/// let _held = gate.try_request()?;
/// let overflow = gate.try_request().unwrap_err();
/// assert_eq!(overflow.limit(), Limit::Requests);
/// assert_eq!(overflow.to_string(), "concurrency gate refused the call: max_requests (1) reached");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateOverflow {
    pub(crate) limit: Limit,
    pub(crate) max: u32,
}

impl GateOverflow {
    /// The limit that was reached.
    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// The limit's value when the call was refused.
    pub fn max(&self) -> u32 {
        self.max
    }
}

impl fmt::Display for GateOverflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "concurrency gate refused the call: {} ({}) reached",
            self.limit, self.max
        )
    }
}

impl std::error::Error for GateOverflow {}
