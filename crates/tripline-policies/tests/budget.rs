//! Retry budgets against their references: tower's / Finagle's `TpsBudget`, the AWS SDKs'
//! standard-mode token bucket, and the error-rate rule.
#![cfg(feature = "retry")]

use std::time::Duration;

use tripline::{ManualClock, Outcome};
use tripline_policies::retry::budget::{
    ErrorRateBudget, RetryBudget, RetryCause, TokenBucketBudget, TpsBudget,
};

const E: RetryCause = RetryCause::Error;

fn withdraw_all(b: &impl RetryBudget, cause: RetryCause) -> usize {
    (0..100_000).take_while(|_| b.withdraw(cause)).count()
}

#[test]
fn tps_budget_with_no_traffic_grants_exactly_min_per_sec_times_ttl() {
    for (ttl, min_per_sec) in [(10, 10), (1, 1), (60, 3), (5, 0)] {
        let clock = ManualClock::new();
        let budget = TpsBudget::builder()
            .ttl(Duration::from_secs(ttl))
            .min_per_sec(min_per_sec)
            .build_with_clock(clock.clone())
            .unwrap();
        let expected = (ttl * u64::from(min_per_sec)) as usize;
        assert_eq!(
            withdraw_all(&budget, E),
            expected,
            "ttl {ttl}s, {min_per_sec}/s"
        );
        assert!(!budget.withdraw(E));
    }
}

#[test]
fn tps_budget_withdrawals_expire_after_the_ttl() {
    let clock = ManualClock::new();
    let budget = TpsBudget::builder()
        .build_with_clock(clock.clone())
        .unwrap();
    assert_eq!(withdraw_all(&budget, E), 100);
    clock.advance(Duration::from_secs(9));
    assert!(!budget.withdraw(E), "still within the ttl");
    clock.advance(Duration::from_secs(2));
    assert_eq!(withdraw_all(&budget, E), 100);
}

#[test]
fn tps_budget_grants_the_ratio_of_requests() {
    let clock = ManualClock::new();
    let budget = TpsBudget::builder()
        .min_per_sec(0)
        .build_with_clock(clock.clone())
        .unwrap();
    assert!(!budget.withdraw(E));
    for _ in 0..100 {
        budget.on_request();
    }
    assert_eq!(withdraw_all(&budget, E), 20); // 20% of 100
    // Deposits expire with the ttl too.
    for _ in 0..50 {
        budget.on_request();
    }
    clock.advance(Duration::from_secs(11));
    assert_eq!(budget.remaining(), 0);
}

#[test]
fn tps_budget_honours_ratios_that_are_not_whole_divisors() {
    // tower's integer divisor turns 0.3 into "one retry per 3 requests" (33%); here it is 30%.
    let budget = TpsBudget::builder()
        .min_per_sec(0)
        .retry_ratio(0.3)
        .build_with_clock(ManualClock::new())
        .unwrap();
    for _ in 0..1000 {
        budget.on_request();
    }
    assert_eq!(withdraw_all(&budget, E), 300);
    // Above 1: two retries per request.
    let budget = TpsBudget::builder()
        .min_per_sec(0)
        .retry_ratio(2.0)
        .build_with_clock(ManualClock::new())
        .unwrap();
    for _ in 0..10 {
        budget.on_request();
    }
    assert_eq!(withdraw_all(&budget, E), 20);
}

/// The retries `n` requests earn at `ratio`, with no reserve.
fn earned(ratio: f64, n: u32) -> usize {
    let budget = TpsBudget::builder()
        .min_per_sec(0)
        .retry_ratio(ratio)
        .build_with_clock(ManualClock::new())
        .unwrap();
    for _ in 0..n {
        budget.on_request();
    }
    withdraw_all(&budget, E)
}

#[test]
fn tps_budget_is_exact_for_ratios_with_three_decimals() {
    // A withdrawal weighing round(1000 / ratio) deposits would make 0.6 × 10 five retries and
    // 0.7 × 10 six.
    assert_eq!(earned(0.6, 10), 6);
    assert_eq!(earned(0.7, 10), 7);
    for k in 1..=1000u32 {
        for n in [1, 3, 7, 10, 100, 1000] {
            let ratio = f64::from(k) / 1000.0;
            let exact = (u64::from(k) * u64::from(n) / 1000) as usize;
            assert_eq!(earned(ratio, n), exact, "ratio {ratio} × {n} requests");
        }
    }
    for (ratio, n, exact) in [(1.5, 10, 15), (2.001, 1000, 2001), (1000.0, 3, 3000)] {
        assert_eq!(earned(ratio, n), exact, "ratio {ratio} × {n} requests");
    }
}

proptest::proptest! {
    #[test]
    fn tps_budget_never_grants_more_than_the_ratio_of_requests(
        ratio in 0.0f64..=1000.0,
        n in 0u32..100,
    ) {
        let granted = earned(ratio, n) as f64;
        // Allow for the ratio being a binary fraction a hair below its decimal value.
        proptest::prop_assert!(
            granted <= ratio * f64::from(n) * (1.0 + 1e-9),
            "ratio {} × {} requests granted {}", ratio, n, granted
        );
        // And within one millionth of the ratio per request of it (plus the last retry).
        proptest::prop_assert!(granted + 1.0 >= (ratio - 1e-6) * f64::from(n));
    }
}

#[test]
fn tps_budget_keeps_its_reserve_at_tiny_ratios() {
    // A ratio validation accepts must neither overflow the reserve (a panic in debug) nor
    // shrink it (in release): the reserve is min_per_sec × ttl retries whatever the ratio.
    for ratio in [1e-15, 1e-9, 6e-9, 1e-7, f64::MIN_POSITIVE] {
        let budget = TpsBudget::builder()
            .retry_ratio(ratio)
            .build_with_clock(ManualClock::new())
            .unwrap();
        assert_eq!(budget.remaining(), 100, "ratio {ratio}");
        assert_eq!(withdraw_all(&budget, E), 100, "ratio {ratio}");
        let budget = TpsBudget::builder()
            .min_per_sec(1_000_000)
            .ttl(Duration::from_secs(60))
            .retry_ratio(ratio)
            .build_with_clock(ManualClock::new())
            .unwrap();
        assert_eq!(budget.remaining(), 60_000_000, "ratio {ratio}");
        assert!(budget.withdraw(E));
        budget.on_request();
        assert_eq!(budget.remaining(), 59_999_999, "ratio {ratio}");
    }
}

#[test]
fn tps_budget_rejects_bad_configuration() {
    let cases = [
        (
            TpsBudget::builder()
                .ttl(Duration::ZERO)
                .build()
                .unwrap_err(),
            "ttl must be in [1s, 60s], got 0ns",
        ),
        (
            TpsBudget::builder()
                .ttl(Duration::from_secs(61))
                .build()
                .unwrap_err(),
            "ttl must be in [1s, 60s], got 61s",
        ),
        (
            TpsBudget::builder().retry_ratio(-1.0).build().unwrap_err(),
            "retry_ratio must be in [0, 1000], got -1",
        ),
        (
            TpsBudget::builder()
                .retry_ratio(f64::NAN)
                .build()
                .unwrap_err(),
            "retry_ratio must be in [0, 1000], got NaN",
        ),
        (
            TpsBudget::builder()
                .min_per_sec(2_000_000)
                .build()
                .unwrap_err(),
            "min_per_sec must be in [0, 1000000], got 2000000",
        ),
    ];
    for (err, msg) in cases {
        assert_eq!(err.to_string(), msg);
    }
}

#[test]
fn token_bucket_matches_the_aws_standard_mode() {
    let bucket = TokenBucketBudget::default();
    assert_eq!((bucket.capacity(), bucket.tokens()), (500, 500));
    // 500 / 5 retries of errors.
    assert_eq!(withdraw_all(&bucket, E), 100);
    assert_eq!(bucket.refused(), 1);
    // A first-try success adds 1; a retried success refunds its retry's cost.
    bucket.on_outcome(Outcome::Success, None);
    assert_eq!(bucket.tokens(), 1);
    bucket.on_outcome(Outcome::Success, Some(RetryCause::Timeout));
    assert_eq!(bucket.tokens(), 11);
    // Failures and ignored results add nothing.
    bucket.on_outcome(Outcome::Failure, None);
    bucket.on_outcome(Outcome::Ignored, Some(RetryCause::Error));
    assert_eq!(bucket.tokens(), 11);

    // 500 / 10 retries of timeouts.
    let bucket = TokenBucketBudget::default();
    assert_eq!(withdraw_all(&bucket, RetryCause::Timeout), 50);
}

#[test]
fn token_bucket_never_fills_past_its_capacity() {
    let bucket = TokenBucketBudget::default();
    for _ in 0..10 {
        bucket.on_outcome(Outcome::Success, None);
    }
    assert_eq!(bucket.tokens(), 500);
    assert!(bucket.withdraw(E));
    bucket.on_outcome(Outcome::Success, Some(RetryCause::Timeout)); // refund 10, capped
    assert_eq!(bucket.tokens(), 500);
}

#[test]
fn token_bucket_rejects_bad_configuration() {
    let cases = [
        (
            TokenBucketBudget::builder()
                .capacity(0)
                .build()
                .unwrap_err(),
            "capacity must be in [1, 1000000], got 0",
        ),
        (
            TokenBucketBudget::builder()
                .capacity(4)
                .build()
                .unwrap_err(),
            "retry_cost must be in [1, capacity = 4], got 5",
        ),
        (
            TokenBucketBudget::builder()
                .timeout_retry_cost(0)
                .build()
                .unwrap_err(),
            "timeout_retry_cost must be in [1, capacity = 500], got 0",
        ),
        (
            TokenBucketBudget::builder()
                .success_reward(501)
                .build()
                .unwrap_err(),
            "success_reward must be in [0, capacity = 500], got 501",
        ),
    ];
    for (err, msg) in cases {
        assert_eq!(err.to_string(), msg);
    }
}

#[test]
fn error_rate_rule_turns_retries_off_above_the_level() {
    let clock = ManualClock::new();
    let rule = ErrorRateBudget::builder()
        .build_with_clock(clock.clone())
        .unwrap();
    // Below the minimum of 20 calls, even 100% failures leave retries on.
    for _ in 0..19 {
        rule.on_outcome(Outcome::Failure, None);
    }
    assert!(rule.withdraw(E));
    // 20 calls, all failures: off.
    rule.on_outcome(Outcome::Failure, None);
    assert!(!rule.withdraw(E));
    assert_eq!(rule.counts(), (20, 20));
    // Ignored results do not count.
    for _ in 0..100 {
        rule.on_outcome(Outcome::Ignored, None);
    }
    assert_eq!(rule.counts(), (20, 20));
    // The window slides: 10 s later the failures are gone.
    clock.advance(Duration::from_secs(10));
    assert_eq!(rule.counts(), (0, 0));
    assert!(rule.withdraw(E));
}

#[test]
fn error_rate_rule_compares_exactly_at_the_level() {
    let rule = ErrorRateBudget::builder()
        .threshold_percent(10.0)
        .minimum_calls(10)
        .build_with_clock(ManualClock::new())
        .unwrap();
    rule.on_outcome(Outcome::Failure, None);
    for _ in 0..9 {
        rule.on_outcome(Outcome::Success, None);
    }
    assert!(rule.allows_retries(), "1 in 10 is 10%, not above");
    rule.on_outcome(Outcome::Failure, None);
    assert!(!rule.allows_retries(), "2 in 11 is above 10%");
}

#[test]
fn error_rate_rule_rejects_bad_configuration() {
    let cases = [
        (
            ErrorRateBudget::builder()
                .threshold_percent(101.0)
                .build()
                .unwrap_err(),
            "threshold_percent must be in [0, 100], got 101",
        ),
        (
            ErrorRateBudget::builder()
                .minimum_calls(0)
                .build()
                .unwrap_err(),
            "minimum_calls must be in [1, 1000000], got 0",
        ),
        (
            ErrorRateBudget::builder()
                .window(Duration::from_secs(10), Duration::ZERO)
                .build()
                .unwrap_err(),
            "window.bucket must be in [1ms, window = 10s], got 0ns",
        ),
        (
            ErrorRateBudget::builder()
                .window(Duration::from_millis(10_500), Duration::from_secs(1))
                .build()
                .unwrap_err(),
            "window must be a whole number (1 to 3600) of buckets of 1s, got 10.5s",
        ),
    ];
    for (err, msg) in cases {
        assert_eq!(err.to_string(), msg);
    }
}

#[test]
fn combined_budgets_refund_the_first_when_the_second_refuses() {
    let clock = ManualClock::new();
    let tps = TpsBudget::builder()
        .build_with_clock(clock.clone())
        .unwrap();
    let rule = ErrorRateBudget::builder()
        .build_with_clock(clock.clone())
        .unwrap();
    let both = tps.and(rule);
    for _ in 0..20 {
        both.on_outcome(Outcome::Failure, None);
    }
    assert!(!both.withdraw(E));
    assert_eq!(both.0.remaining(), 100, "the ratio budget was refunded");
}
