//! The bulkhead's, the gate's and the throttle's settings from a configuration file: each
//! with its builder's field names and defaults, single-field ranges checked as read (so a
//! TOML error points at the field's line), the rest when the whole is built.

#[cfg(feature = "bulkhead")]
mod bulkhead {
    use std::time::Duration;

    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer};
    use tripline::ConfigError;

    use crate::bulkhead::{BulkheadConfig, MAX_SLOTS, MAX_WAIT};
    use crate::de::{checked, within};

    checked! {
        max_concurrent: u32 = |v| within("max_concurrent", *v, 1, MAX_SLOTS);
        max_waiting: u32 = |v| within("max_waiting", *v, 0, MAX_SLOTS);
    }
    checked! {
        max_wait: dur = |v| if v > MAX_WAIT {
            Err(ConfigError::new("max_wait", format!("{v:?}"), format!("in [0ns, {MAX_WAIT:?}]")))
        } else {
            Ok(())
        };
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RawBulkhead {
        #[serde(default, deserialize_with = "max_concurrent")]
        max_concurrent: Option<u32>,
        #[serde(default, deserialize_with = "max_waiting")]
        max_waiting: Option<u32>,
        #[serde(default, deserialize_with = "max_wait")]
        max_wait: Option<Duration>,
    }

    /// `max_concurrent`, `max_waiting` and `max_wait` (feature `serde`); unset fields keep
    /// the defaults (resilience4j's: 25 concurrent, no waiting).
    ///
    /// ```toml
    /// max_concurrent = 20     # 25; [1, 1000000] calls in flight
    /// max_waiting = 10        # 0; [0, 1000000] calls waiting for a slot
    /// max_wait = "100ms"      # 0; (0, 1h] when max_waiting > 0: the longest wait
    /// ```
    impl<'de> Deserialize<'de> for BulkheadConfig {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let r = RawBulkhead::deserialize(d)?;
            let mut b = BulkheadConfig::builder();
            if let Some(n) = r.max_concurrent {
                b = b.max_concurrent(n);
            }
            if let Some(n) = r.max_waiting {
                b = b.max_waiting(n);
            }
            if let Some(w) = r.max_wait {
                b = b.max_wait(w);
            }
            b.build().map_err(D::Error::custom)
        }
    }
}

#[cfg(feature = "gate")]
mod gate {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer};

    use crate::de::{checked, within};
    use crate::gate::{GateConfig, MAX_LIMIT};

    checked! {
        max_requests: u32 = |v| within("max_requests", *v, 1, MAX_LIMIT);
        max_pending: u32 = |v| within("max_pending", *v, 0, MAX_LIMIT);
        max_retries: u32 = |v| within("max_retries", *v, 0, MAX_LIMIT);
        min_retry_concurrency: u32 = |v| within("retry_budget.min_retry_concurrency", *v, 0, MAX_LIMIT);
    }
    checked! {
        budget_percent: f64 = |v| within("retry_budget.budget_percent", *v, 0.0, 100.0);
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RawRetryBudget {
        #[serde(default, deserialize_with = "budget_percent")]
        budget_percent: Option<f64>,
        #[serde(default, deserialize_with = "min_retry_concurrency")]
        min_retry_concurrency: Option<u32>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RawGate {
        #[serde(default, deserialize_with = "max_requests")]
        max_requests: Option<u32>,
        #[serde(default, deserialize_with = "max_pending")]
        max_pending: Option<u32>,
        #[serde(default, deserialize_with = "max_retries")]
        max_retries: Option<u32>,
        #[serde(default)]
        retry_budget: Option<RawRetryBudget>,
    }

    /// Envoy's cluster thresholds (feature `serde`); unset fields keep Envoy's defaults.
    ///
    /// ```toml
    /// max_requests = 1024     # 1024; [1, 2^30] requests in flight
    /// max_pending = 1024      # 1024; [0, 2^30] requests waiting for a bulkhead's slot
    /// max_retries = 3         # 3; [0, 2^30] retries in flight (without a retry budget)
    /// # Instead of max_retries: max(min_retry_concurrency, budget_percent × (active + pending))
    /// retry_budget = { budget_percent = 20, min_retry_concurrency = 3 }   # Envoy's defaults
    /// ```
    impl<'de> Deserialize<'de> for GateConfig {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let r = RawGate::deserialize(d)?;
            let mut b = GateConfig::builder();
            if let Some(n) = r.max_requests {
                b = b.max_requests(n);
            }
            if let Some(n) = r.max_pending {
                b = b.max_pending(n);
            }
            if let Some(n) = r.max_retries {
                b = b.max_retries(n);
            }
            if let Some(rb) = r.retry_budget {
                b = b.retry_budget(
                    rb.budget_percent.unwrap_or(20.0),
                    rb.min_retry_concurrency.unwrap_or(3),
                );
            }
            b.build().map_err(D::Error::custom)
        }
    }
}

#[cfg(feature = "throttle")]
mod throttle {
    use std::time::Duration;

    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer};
    use tripline::ConfigError;

    use crate::de::{checked, within};
    use crate::throttle::ThrottleConfig;

    checked! {
        k: f64 = |v| within("k", *v, 1.0, 100.0);
    }
    checked! {
        bucket: dur = |v| if v < Duration::from_millis(1) {
            Err(ConfigError::new("window.bucket", format!("{v:?}"), "in [1ms, window]"))
        } else {
            Ok(())
        };
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RawThrottle {
        #[serde(default, with = "tripline::duration::serde::option")]
        window: Option<Duration>,
        #[serde(default, deserialize_with = "bucket")]
        bucket: Option<Duration>,
        #[serde(default, deserialize_with = "k")]
        k: Option<f64>,
    }

    /// The Google SRE book's client-side throttling (feature `serde`); unset fields keep the
    /// defaults.
    ///
    /// ```toml
    /// window = "2m"           # 2m: a whole number (at most 3600) of buckets
    /// bucket = "1s"           # 1s; [1ms, window]
    /// k = 2.0                 # 2; [1, 100]: refuse once requests pass k × accepts
    /// ```
    impl<'de> Deserialize<'de> for ThrottleConfig {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let r = RawThrottle::deserialize(d)?;
            let mut b = ThrottleConfig::builder();
            if r.window.is_some() || r.bucket.is_some() {
                b = b.window(
                    r.window.unwrap_or(Duration::from_secs(120)),
                    r.bucket.unwrap_or(Duration::from_secs(1)),
                );
            }
            if let Some(k) = r.k {
                b = b.k(k);
            }
            b.build().map_err(D::Error::custom)
        }
    }
}

#[cfg(feature = "outlier")]
mod outlier {
    use std::time::Duration;

    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer};

    use crate::outlier::OutlierConfig;

    /// The detector's fields: durations as humans write them, the rest as Envoy's
    /// `OutlierDetection` names them; every one optional.
    macro_rules! outlier_fields {
        (dur: [$($d:ident),*], plain: [$($p:ident: $t:ty),*]) => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct RawOutlier {
                $(#[serde(default, with = "tripline::duration::serde::option")] $d: Option<Duration>,)*
                $(#[serde(default)] $p: Option<$t>,)*
            }

            impl RawOutlier {
                fn config(self) -> Result<OutlierConfig, tripline::ConfigError> {
                    let mut b = OutlierConfig::builder();
                    $(if let Some(v) = self.$d { b = b.$d(v); })*
                    $(if let Some(v) = self.$p { b = b.$p(v); })*
                    b.build()
                }
            }
        };
    }

    outlier_fields! {
        dur: [interval, base_ejection_time, max_ejection_time, max_ejection_time_jitter],
        plain: [
            max_ejection_percent: u32,
            always_eject_one_host: bool,
            consecutive_5xx: u32,
            enforcing_consecutive_5xx: u32,
            consecutive_gateway_failure: u32,
            enforcing_consecutive_gateway_failure: u32,
            split_external_local_origin_errors: bool,
            consecutive_local_origin_failure: u32,
            enforcing_consecutive_local_origin_failure: u32,
            success_rate_minimum_hosts: u32,
            success_rate_request_volume: u32,
            success_rate_stdev_factor: u32,
            enforcing_success_rate: u32,
            enforcing_local_origin_success_rate: u32,
            failure_percentage_threshold: u32,
            failure_percentage_minimum_hosts: u32,
            failure_percentage_request_volume: u32,
            enforcing_failure_percentage: u32,
            enforcing_failure_percentage_local_origin: u32,
            healthy_panic_threshold: f64,
            max_hosts: u32
        ]
    }

    /// Envoy's `OutlierDetection` fields by their names, with Envoy's defaults (feature
    /// `serde`); checked as the builder checks them when the table is read.
    ///
    /// ```toml
    /// interval = "10s"                  # 10s: how often the detector sweeps
    /// base_ejection_time = "30s"        # 30s, × the times ejected
    /// max_ejection_time = "300s"        # 300s
    /// max_ejection_percent = 10         # 10 (Envoy's); never the last host
    /// consecutive_5xx = 5               # 5
    /// enforcing_consecutive_5xx = 100   # 100 percent
    /// healthy_panic_threshold = 50.0    # below 50 % healthy, balance over every host
    /// ```
    impl<'de> Deserialize<'de> for OutlierConfig {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            RawOutlier::deserialize(d)?
                .config()
                .map_err(D::Error::custom)
        }
    }
}
