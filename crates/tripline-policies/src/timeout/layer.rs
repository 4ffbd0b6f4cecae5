//! The timeout's layer.

use std::time::Duration;

use tower_layer::Layer;
use tripline::ConfigError;

use super::Timeout;

/// Applies a timeout to every call of a service; see the [module docs](super) for where it
/// belongs in a stack.
///
/// ```
/// use std::time::Duration;
/// use tripline_policies::timeout::TimeoutLayer;
///
/// let layer = TimeoutLayer::new(Duration::from_millis(2500))?;
/// assert_eq!(layer.timeout(), Duration::from_millis(2500));
/// assert_eq!(
///     TimeoutLayer::new(Duration::ZERO).unwrap_err().field(),
///     "timeout",
/// );
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TimeoutLayer {
    timeout: Duration,
}

impl TimeoutLayer {
    /// A layer timing calls out after `timeout`, which must be in `(0, 1d]`.
    pub fn new(timeout: Duration) -> Result<Self, ConfigError> {
        Ok(Self {
            timeout: super::check("timeout", timeout)?,
        })
    }

    /// The timeout.
    pub const fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Timeout::new(inner, self.timeout)
    }
}
