//! The hot path allocates nothing: acquire and record in Closed, rejection in Open.

use std::time::Duration;

use tripline::{BreakerConfig, CircuitBreaker, MonotonicClock, Outcome};

fn allocations(f: impl FnOnce()) -> u64 {
    allocation_counter::measure(f).count_total
}

#[test]
fn hot_paths_do_not_allocate() {
    for config in [
        BreakerConfig::builder().count_window(100).build().unwrap(),
        BreakerConfig::builder()
            .time_window(Duration::from_secs(10), Duration::from_secs(1))
            .stripes(4)
            .build()
            .unwrap(),
    ] {
        let breaker = CircuitBreaker::with_clock("dep", config, MonotonicClock::new());
        // Warm up (the thread-local stripe index, quanta's calibration).
        for _ in 0..10 {
            let _ = breaker.try_acquire().unwrap().record(Outcome::Success);
        }
        let n = allocations(|| {
            for i in 0..10_000 {
                let p = breaker.try_acquire().unwrap();
                let _ = p.record(if i % 10 == 0 {
                    Outcome::Failure
                } else {
                    Outcome::Success
                });
            }
        });
        assert_eq!(n, 0, "closed acquire + record allocated");
        let n = allocations(|| {
            for _ in 0..10_000 {
                let _ = breaker
                    .try_acquire_owned()
                    .unwrap()
                    .record(Outcome::Success);
            }
        });
        assert_eq!(n, 0, "owned acquire + record allocated");
        breaker.force_open();
        let _ = breaker.try_acquire();
        let n = allocations(|| {
            for _ in 0..10_000 {
                assert!(breaker.try_acquire().is_err());
            }
        });
        assert_eq!(n, 0, "open rejection allocated");
    }
}
