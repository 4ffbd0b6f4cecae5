//! Configuration files: every policy's settings from TOML (or JSON, YAML...), the way
//! resilience4j's `application.yml` configures each instance (feature `serde`).
//!
//! Each policy's configuration deserializes on its own, with its builder's field names and
//! defaults, durations written like `"250ms"`:
//!
//! | table | type | |
//! |---|---|---|
//! | breaker | [`tripline::BreakerConfig`] | every field in [`tripline::config`] |
//! | retry | [`RetryConfig`](crate::retry::RetryConfig) | attempts, backoff, jitter, and a [`BudgetConfig`](crate::retry::BudgetConfig) |
//! | bulkhead | [`BulkheadConfig`](crate::bulkhead::BulkheadConfig) | |
//! | gate | [`GateConfig`](crate::gate::GateConfig) | |
//! | throttle | [`ThrottleConfig`](crate::throttle::ThrottleConfig) | |
//! | shed, limiter, partial, chaos | [`ShedConfig`](crate::shed::ShedConfig), [`LimiterConfig`](crate::limiter::LimiterConfig), [`PartialConfig`](crate::partial::PartialConfig), [`ChaosConfig`](crate::chaos::ChaosConfig) | |
//! | outlier | [`OutlierConfig`](crate::outlier::OutlierConfig) | |
//! | a whole pipeline | [`PipelineConfig`](crate::pipeline::PipelineConfig) | one table per stage, and `timeout` |
//! | a service's file | [`ResilienceConfig`] | a registry's breakers and a pipeline per dependency |
//!
//! Every value is checked as it is read: a bad one is refused with the field, the value and
//! what is allowed (`max_attempts must be in [1, 100], got 0`), at the line of the field; a
//! rule that relates two fields (a minimum larger than the window, a retry cost above the
//! bucket's capacity) points at the table that holds them. Unknown fields are errors.

//!
//! # One block per policy
//!
//! Each block is a policy's table with every field at its default (a test reads each into
//! its type and compares it with the default); the breaker's is in [`tripline::config`], a
//! whole pipeline's at [`PipelineConfig`](crate::pipeline::PipelineConfig).
//!
//! ## Retry: [`RetryConfig`](crate::retry::RetryConfig)
//!
//! ```toml
#![doc = include_str!("../../docs/policies/retry.toml")]
//! ```
//!
//! ## A retry budget: [`BudgetConfig`](crate::retry::BudgetConfig)
//!
//! ```toml
#![doc = include_str!("../../docs/policies/budget.toml")]
//! ```
//!
//! ## Bulkhead: [`BulkheadConfig`](crate::bulkhead::BulkheadConfig)
//!
//! ```toml
#![doc = include_str!("../../docs/policies/bulkhead.toml")]
//! ```
//!
//! ## Gate: [`GateConfig`](crate::gate::GateConfig)
//!
//! ```toml
#![doc = include_str!("../../docs/policies/gate.toml")]
//! ```
//!
//! ## Throttle: [`ThrottleConfig`](crate::throttle::ThrottleConfig)
//!
//! ```toml
#![doc = include_str!("../../docs/policies/throttle.toml")]
//! ```
//!
//! ## Shedder: [`ShedConfig`](crate::shed::ShedConfig)
//!
//! ```toml
#![doc = include_str!("../../docs/policies/shed.toml")]
//! ```
//!
//! ## Adaptive limit: [`LimiterConfig`](crate::limiter::LimiterConfig)
//!
//! ```toml
#![doc = include_str!("../../docs/policies/limiter.toml")]
//! ```
//!
//! ## Partial opening: [`PartialConfig`](crate::partial::PartialConfig)
//!
//! ```toml
#![doc = include_str!("../../docs/policies/partial.toml")]
//! ```
//!
//! ## Fault injection: [`ChaosConfig`](crate::chaos::ChaosConfig)
//!
//! ```toml
#![doc = include_str!("../../docs/policies/chaos.toml")]
//! ```
//!
//! ## Outlier detection: [`OutlierConfig`](crate::outlier::OutlierConfig)
//!
//! ```toml
#![doc = include_str!("../../docs/policies/outlier.toml")]
//! ```

#[cfg(feature = "pipeline")]
mod file;
mod stages;

#[cfg(feature = "pipeline")]
pub use file::ResilienceConfig;
