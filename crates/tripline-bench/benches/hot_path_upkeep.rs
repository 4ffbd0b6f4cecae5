//! The open paths of `hot_path` with a `quanta::Upkeep` thread refreshing the coarse clock
//! every millisecond, as a service that wants the cheapest rejections would run (divan).
//! The closed count window is repeated as a control (it reads the precise clock, so the
//! upkeep thread should not change it), next to the same breaker on a coarse clock
//! (`MonotonicClock::coarse()`), which shows what the closed path would cost if it read
//! `recent()` instead of `now()`.
//!
//! `cargo bench -p tripline-bench --bench hot_path_upkeep`

use std::time::Duration;

use divan::Bencher;
use tripline_bench::{ops, subjects};

fn main() {
    // The process-wide upkeep thread the coarse clock starts (a second `quanta::Upkeep` could
    // not start beside it, and the coarse clock would fall back to precise readings).
    let _ = tripline::MonotonicClock::coarse();
    assert!(quanta::Instant::recent() > quanta::Instant::now() - Duration::from_secs(1));
    // A fixed sample size: divan's automatic one is fooled by a slow first call.
    // `--sample-count` and `--sample-size` on the command line still override these.
    divan::Divan::default()
        .sample_count(1000)
        .sample_size(4000)
        .config_with_args()
        .main();
}

#[divan::bench_group]
mod open_upkeep {
    use super::*;

    #[divan::bench]
    fn tripline_tripped(bencher: Bencher) {
        let b = subjects::tripline_open();
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

    #[divan::bench]
    fn quanta_instant_recent(bencher: Bencher) {
        let op = quanta::Instant::recent;
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }
}

#[divan::bench_group]
mod closed_control {
    use super::*;

    #[divan::bench]
    fn tripline_count_in_flight_on(bencher: Bencher) {
        let b = subjects::tripline_count(true);
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_count_coarse_clock_in_flight_on(bencher: Bencher) {
        let b = subjects::tripline_count_coarse(true);
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }

    #[divan::bench]
    fn tripline_count_coarse_clock_in_flight_off(bencher: Bencher) {
        let b = subjects::tripline_count_coarse(false);
        let op = || ops::tripline_permit_success(&b);
        tripline_bench::warm_up(op);
        bencher.bench(op);
    }
}
