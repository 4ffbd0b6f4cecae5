//! Random configurations and sample histories for every algorithm: the limit never leaves
//! `[min_limit, max_limit]`, whatever the RTTs (1 ns to an hour), the in-flight counts and the
//! drops; and the slots follow it.
//!
//! `PROPTEST_CASES=20000 cargo test --release -p tripline-policies --test limiter_props` for a
//! long run.
#![cfg(feature = "limiter")]

use std::time::Duration;

use proptest::prelude::*;
use tripline_policies::limiter::{
    AimdConfig, FixedLimit, Gradient2Config, LimitAlgorithm, Limiter, LimiterConfig, VegasConfig,
};
use tripline_policies::shed::Priority;

fn bounds() -> impl Strategy<Value = (u32, u32, u32)> {
    (1u32..50, 0u32..200, 0u32..100).prop_map(|(min, span, at)| {
        let max = min + span;
        (min, min + at.min(span), max)
    })
}

fn algorithm() -> impl Strategy<Value = LimitAlgorithm> {
    prop_oneof![
        (bounds(), 0.5f64..0.99, 1u64..10_000).prop_map(|((min, init, max), backoff, ms)| {
            LimitAlgorithm::Aimd(
                AimdConfig::builder()
                    .min_limit(min)
                    .initial_limit(init)
                    .max_limit(max)
                    .backoff_ratio(backoff)
                    .timeout(Duration::from_millis(ms))
                    .build()
                    .unwrap(),
            )
        }),
        (bounds(), 1u32..10, 0u32..10, 0.01f64..=1.0, 1u32..100).prop_map(
            |((min, init, max), alpha, extra, smoothing, probe)| {
                LimitAlgorithm::Vegas(
                    VegasConfig::builder()
                        .min_limit(min)
                        .initial_limit(init)
                        .max_limit(max)
                        .alpha(alpha)
                        .beta(alpha + extra)
                        .smoothing(smoothing)
                        .probe_multiplier(probe)
                        .build()
                        .unwrap(),
                )
            }
        ),
        (bounds(), 0.01f64..=1.0, 0u32..50, 1u32..1000, 1.0f64..10.0).prop_map(
            |((min, init, max), smoothing, queue, window, tolerance)| {
                LimitAlgorithm::Gradient2(
                    Gradient2Config::builder()
                        .min_limit(min)
                        .initial_limit(init)
                        .max_limit(max)
                        .smoothing(smoothing)
                        .queue_size(queue)
                        .long_window(window)
                        .rtt_tolerance(tolerance)
                        .build()
                        .unwrap(),
                )
            }
        ),
        (1u32..500).prop_map(|n| LimitAlgorithm::Fixed(FixedLimit::new(n).unwrap())),
    ]
}

fn rtt() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (1u64..1_000).prop_map(Duration::from_nanos),
        (1u64..10_000).prop_map(Duration::from_millis),
        Just(Duration::from_secs(3600)),
        Just(Duration::ZERO),
    ]
}

proptest! {
    #[test]
    fn the_limit_stays_within_min_and_max(
        algorithm in algorithm(),
        seed in any::<u64>(),
        samples in prop::collection::vec((rtt(), 0u32..2000, any::<bool>()), 1..400),
    ) {
        let (min, max) = (algorithm.min_limit(), algorithm.max_limit());
        let l = Limiter::new(LimiterConfig::builder().algorithm(algorithm).seed(seed).build().unwrap());
        prop_assert_eq!(l.limit(), algorithm.initial_limit());
        for (i, (rtt, in_flight, dropped)) in samples.into_iter().enumerate() {
            l.sample(rtt, in_flight, dropped);
            let limit = l.limit();
            prop_assert!((min..=max).contains(&limit), "sample {}: {} not in [{}, {}]", i, limit, min, max);
            // The slots follow the limit: exactly `limit` calls get in.
            if i % 50 == 0 {
                let held: Vec<_> = (0..limit + 1).map_while(|_| l.try_acquire(Priority::CRITICAL).ok()).collect();
                prop_assert_eq!(held.len() as u32, limit);
            }
        }
    }
}
