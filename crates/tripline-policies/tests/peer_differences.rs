//! Where the policies decide differently from the peers they port (Envoy's outlier detection,
//! Netflix concurrency-limits, Shopify Semian), each difference pinned by a test named after
//! it. The porting guide (`docs/porting.md`, "The policies") lists them.

use std::time::Duration;

use tripline::ManualClock;

#[cfg(feature = "outlier")]
mod envoy {
    use super::*;
    use tripline_policies::outlier::{Balance, HostOutcome, OutlierConfig, OutlierDetector};

    fn detector(balance: Balance, hosts: u32) -> (OutlierDetector<u32, ManualClock>, ManualClock) {
        let clock = ManualClock::new();
        let d = OutlierDetector::builder(OutlierConfig::default())
            .clock(clock.clone())
            .balance(balance)
            .seed(9)
            .build(0..hosts)
            .unwrap();
        (d, clock)
    }

    /// Envoy reports a host's success rate as −1 until it has `success_rate_request_volume`
    /// requests in the interval; `host_status` reports the rate of any interval with a
    /// request (and `None` for one without), whether or not it took part in the rule.
    #[test]
    fn a_success_rate_below_the_request_volume_is_reported_where_envoy_says_minus_one() {
        let (d, clock) = detector(Balance::RoundRobin, 10);
        for i in 0..10 {
            let outcome = if i == 0 {
                HostOutcome::Status(500)
            } else {
                HostOutcome::Success
            };
            d.record_host(&0, outcome);
        }
        clock.advance(Duration::from_secs(10));
        assert!(d.tick());
        // 10 requests, below the volume of 100: Envoy's −1, the rate here.
        assert_eq!(d.host_status(&0).unwrap().success_rate, Some(90.0));
        assert_eq!(d.host_status(&1).unwrap().success_rate, None);
        assert_eq!(d.config().success_rate_request_volume(), 100);
    }

    /// Envoy's least-request balancer with two choices draws both hosts with replacement, so
    /// it may draw the same host twice (with two hosts, one pick in four has no choice); the
    /// detector's power of two choices draws two distinct hosts, so it always compares two.
    #[test]
    fn power_of_two_choices_draws_two_distinct_hosts_where_envoy_draws_with_replacement() {
        let (d, _) = detector(Balance::PowerOfTwoChoices, 2);
        let busy = d.pick(); // one call in flight on one host, none on the other
        let idle = 1 - *busy.host();
        for _ in 0..1000 {
            let p = d.pick();
            assert_eq!(*p.host(), idle, "the busier host was picked");
        }
    }
}

#[cfg(feature = "limiter")]
mod concurrency_limits {
    use super::*;
    use tripline_policies::limiter::{LimitAlgorithm, Limiter, LimiterConfig, VegasConfig};

    /// concurrency-limits' `VegasLimit.Builder.alpha(int)` and `beta(int)` replace the
    /// log10-scaled thresholds with fixed ones; here `alpha` and `beta` are always multiples
    /// of `log10(limit)` (3 and 6 by default, as the Java defaults' functions). At a limit of
    /// 1000 (log10 = 3) a queue of 5 is below alpha here (9: the limit grows by 3) and between
    /// Java's fixed alpha(3) and beta(6) (the limit holds). For Java's fixed thresholds at a
    /// known limit, divide them by log10 of that limit.
    #[test]
    fn vegas_alpha_and_beta_scale_with_log10_of_the_limit_where_javas_int_setters_fix_them() {
        let vegas = VegasConfig::builder()
            .initial_limit(1000)
            .max_limit(2000)
            .alpha(3)
            .beta(6)
            .build()
            .unwrap();
        let config = LimiterConfig::builder()
            .algorithm(LimitAlgorithm::Vegas(vegas))
            .seed(1)
            .build()
            .unwrap();
        let limiter = Limiter::with_clock(config, ManualClock::new());
        limiter.sample(Duration::from_nanos(10_000), 1000, false); // the no-load RTT
        assert_eq!(limiter.limit(), 1000);
        // queue = ceil(1000 × (1 − 10000 / 10050)) = 5
        limiter.sample(Duration::from_nanos(10_050), 1000, false);
        assert_eq!(limiter.limit(), 1003);
    }
}

#[cfg(feature = "partial")]
mod semian {
    use super::*;
    use rand::SeedableRng;
    use tripline::Outcome;
    use tripline_policies::partial::{PartialBreaker, PartialConfig};

    /// Semian's adaptive breaker keeps at most 2,000 timestamps per outcome in its window, so
    /// above 2,000 calls of one kind per window its error rate is measured over the capped
    /// counts; the partial breaker counts every call in its window. 5,000 errors and 1,000
    /// successes in one window: 5/6 here, 2,000 / 3,000 = 2/3 in Semian.
    #[test]
    fn the_error_rate_counts_every_call_in_the_window_where_semian_keeps_2000_per_outcome() {
        let clock = ManualClock::new();
        let breaker = PartialBreaker::with_clock_and_rng(
            PartialConfig::default(),
            clock.clone(),
            rand_pcg::Pcg64Mcg::seed_from_u64(1),
        );
        for i in 0..6000 {
            let permit = breaker.try_acquire().unwrap();
            permit.record(if i < 5000 {
                Outcome::Failure
            } else {
                Outcome::Success
            });
        }
        clock.advance(Duration::from_secs(1));
        breaker.tick();
        let s = breaker.snapshot();
        assert_eq!(s.updates, 1);
        assert!((s.error_rate - 5.0 / 6.0).abs() < 1e-12, "{}", s.error_rate);
    }
}
