//! The README's quick start: a breaker around a vendor that is down, answering from a
//! fallback, and open after ten failures of ten. `cargo run -p tripline --example quick_start`.

use std::time::Duration;
use tripline::{BreakerConfig, CallError, CircuitBreaker};

#[derive(Debug)]
struct VendorError;

// The dependency's call (here, a vendor that is down) and the fallback's answer.
fn fetch_from_vendor() -> Result<String, VendorError> {
    Err(VendorError)
}
fn cached_card() -> String {
    "yesterday's card".to_string()
}

fn main() -> Result<(), tripline::ConfigError> {
    let breaker = CircuitBreaker::new(
        "exercise-catalog",
        BreakerConfig::builder()
            .count_window(20) // the last 20 outcomes
            .minimum_calls(10) // 1 of 1 failing is not 100 %
            .failure_rate_threshold(50.0) // trip on 50 % errors...
            .slow_call_rate_threshold(30.0) // ...or 30 % of calls slower than 2 s
            .slow_call_duration(Duration::from_secs(2))
            .open_duration(Duration::from_secs(15))
            .open_jitter(Duration::from_secs(5)) // replicas do not probe in lockstep
            .half_open_calls(3) // 3 probes decide recovery
            .build()?,
    );

    for i in 1..=12 {
        let card = breaker.call_or_else(
            fetch_from_vendor, // Ok = success, Err = failure
            |err: CallError<VendorError>| {
                println!("call {i:>2}: {err:?}, answered from the cache");
                cached_card()
            },
        );
        assert_eq!(card, "yesterday's card");
    }
    assert_eq!(breaker.state(), tripline::State::Open); // 10 failures of 10: open
    println!("the breaker is {:?}", breaker.state());
    Ok(())
}
