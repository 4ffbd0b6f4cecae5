//! One call through each breaker, single-threaded, every subject side by side (divan):
//!
//! * `closed`: permit + success. Tripline reads the clock at acquire and at record (the
//!   call's duration, for the slow-call rule) — the coarse clock `CircuitBreaker::new` picks for
//!   these configurations, or the precise one in the `_precise` case — except judged by the
//!   failure rate alone (`failure_rate_only`), which reads none; recloser and failsafe take no
//!   duration.
//! * `open`: the rejection of an open breaker. The first default tripline breaker starts the
//!   coarse clock's upkeep thread, so the open cases read the coarse clock too.
//! * `baseline`: clock reads and single atomic operations, for scale.
//!
//! `cargo bench -p tripline-bench --bench hot_path`

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use divan::Bencher;
use tripline_bench::{ops, subjects};

fn main() {
    // A fixed sample size: divan's automatic one is fooled by a slow first call.
    // `--sample-count` and `--sample-size` on the command line still override these.
    divan::Divan::default()
        .sample_count(1000)
        .sample_size(4000)
        .config_with_args()
        .main();
}

#[divan::bench_group]
mod closed {
    use super::*;

    #[divan::bench]
    fn tripline_count_in_flight_on(bencher: Bencher) {
        let b = subjects::tripline_count(true);
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_count_in_flight_off(bencher: Bencher) {
        let b = subjects::tripline_count(false);
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_count_owned_permit(bencher: Bencher) {
        let b = subjects::tripline_count(true);
        let op = || ops::tripline_owned_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_count_call(bencher: Bencher) {
        let b = subjects::tripline_count(true);
        let op = || ops::tripline_call(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_count_call_durations(bencher: Bencher) {
        let b = subjects::tripline_count_durations(false);
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_count_explicit_duration(bencher: Bencher) {
        let b = subjects::tripline_count(true);
        let op = || ops::tripline_permit_success_timed(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_count_manual_clock(bencher: Bencher) {
        let b = subjects::tripline_count_manual(true);
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_count_manual_clock_in_flight_off(bencher: Bencher) {
        let b = subjects::tripline_count_manual(false);
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_count_precise(bencher: Bencher) {
        let b = subjects::tripline_count_precise(true);
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_count_failure_rate_only(bencher: Bencher) {
        let b = subjects::tripline_count_failure_rate_only();
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_count_held_quanta_clock(bencher: Bencher) {
        let b = subjects::tripline_count_held(true);
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_time_in_flight_on(bencher: Bencher) {
        let b = subjects::tripline_time(1, true);
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_time_in_flight_off(bencher: Bencher) {
        let b = subjects::tripline_time(1, false);
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_time_stripes_4(bencher: Bencher) {
        let b = subjects::tripline_time(4, true);
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn recloser(bencher: Bencher) {
        let r = subjects::recloser_closed();
        let op = || ops::recloser_success(&r);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn failsafe(bencher: Bencher) {
        let cb = subjects::failsafe_closed();
        let op = || ops::failsafe_success(&cb);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }
}

#[divan::bench_group]
mod open {
    use super::*;

    #[divan::bench]
    fn tripline_tripped(bencher: Bencher) {
        let b = subjects::tripline_open();
        let op = || ops::tripline_reject(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_tripped_owned_name(bencher: Bencher) {
        let b = subjects::tripline_open_owned_name();
        let op = || ops::tripline_reject(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_forced_open(bencher: Bencher) {
        let b = subjects::tripline_forced_open();
        let op = || ops::tripline_reject(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn recloser(bencher: Bencher) {
        let r = subjects::recloser_open();
        let op = || ops::recloser_reject(&r);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn failsafe(bencher: Bencher) {
        let cb = subjects::failsafe_open();
        let op = || ops::failsafe_reject(&cb);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }
}

#[divan::bench_group]
mod baseline {
    use super::*;
    use tripline::Clock;

    #[divan::bench]
    fn std_instant_now(bencher: Bencher) {
        let op = std::time::Instant::now;
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn quanta_instant_now(bencher: Bencher) {
        let op = quanta::Instant::now;
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn quanta_instant_recent_no_upkeep(bencher: Bencher) {
        let op = quanta::Instant::recent;
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn quanta_clock_now(bencher: Bencher) {
        let clock = quanta::Clock::new();
        let op = || clock.now();
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn quanta_clock_raw(bencher: Bencher) {
        let clock = quanta::Clock::new();
        let op = || clock.raw();
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_monotonic_clock_now(bencher: Bencher) {
        let clock = tripline::MonotonicClock::new();
        let op = || clock.now();
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn atomic_fetch_add(bencher: Bencher) {
        let a = AtomicU64::new(0);
        let op = || a.fetch_add(1, Ordering::Relaxed);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn atomic_compare_exchange(bencher: Bencher) {
        let a = AtomicU64::new(0);
        let op = || {
            let v = a.load(Ordering::Relaxed);
            black_box(a.compare_exchange(v, v + 1, Ordering::Relaxed, Ordering::Relaxed))
        };
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }
}
