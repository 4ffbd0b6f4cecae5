//! The detector's rules as small pure functions over counts and times, so that each can be
//! read (and tested) in one screen. The detector calls them under its lock; the simulator and
//! the tests call the detector.

/// Whether one more ejection is allowed with `active` hosts ejected out of `hosts`:
///
/// * never the last host: at least one host always stays in (`active + 1 < hosts`), whatever
///   the cap, so a balancer on the detector always has a host to pick;
/// * then Envoy's cap: `(active + 1) / hosts ≤ max_percent / 100`, in integers;
/// * or, with `always_eject_one_host`, the first ejection whatever the cap.
///
/// ```text
/// cap_allows(0, 10, 10, false) == true    1 of 10 is 10 %
/// cap_allows(1, 10, 10, false) == false   2 of 10 is 20 %
/// cap_allows(0, 5, 10, false)  == false   1 of 5 is 20 %
/// cap_allows(0, 5, 10, true)   == true    always one
/// cap_allows(9, 10, 100, false) == false  never the last
/// ```
pub(crate) fn cap_allows(active: u32, hosts: u32, max_percent: u32, always_one: bool) -> bool {
    let (active, hosts) = (u64::from(active), u64::from(hosts));
    if active + 1 >= hosts {
        return false;
    }
    (active + 1) * 100 <= u64::from(max_percent) * hosts || (always_one && active == 0)
}

/// Whether the balancer is in panic: fewer than `threshold_ppm` parts per million of the hosts
/// are healthy (not ejected), or none is. Then it balances over every host.
pub(crate) fn in_panic(healthy: u32, hosts: u32, threshold_ppm: u64) -> bool {
    healthy == 0 || u64::from(healthy) * 1_000_000 < threshold_ppm * u64::from(hosts)
}

/// How long an ejection with `multiplier` lasts, in nanoseconds: `min(base × multiplier, max)`
/// (Envoy), saturating.
pub(crate) fn ejection_nanos(base: u64, max: u64, multiplier: u32) -> u64 {
    base.saturating_mul(u64::from(multiplier)).min(max)
}

/// The multiplier after one more ejection: it grows by one while `multiplier × base < max +
/// base` (Envoy), so that the ejection time reaches `max` and stops there.
pub(crate) fn next_multiplier(base: u64, max: u64, multiplier: u32) -> u32 {
    if base.saturating_mul(u64::from(multiplier)) < max.saturating_add(base) {
        multiplier.saturating_add(1)
    } else {
        multiplier
    }
}

/// A host's success rate in percent over one interval.
pub(crate) fn success_rate(total: u64, failures: u64) -> f64 {
    (total - failures.min(total)) as f64 * 100.0 / total as f64
}

/// Envoy's success-rate ejection threshold over the hosts' success rates (percent): the mean
/// minus `factor_milli / 1000` population standard deviations. Returns `(mean, threshold)`.
/// `rates` must not be empty.
///
/// Envoy's own example: rates `[50, 100, 100, 100, 100]`, factor 1900: mean 90, stdev 20,
/// threshold 52.
pub(crate) fn success_rate_threshold(rates: &[f64], factor_milli: u32) -> (f64, f64) {
    let n = rates.len() as f64;
    let mean = rates.iter().sum::<f64>() / n;
    let variance = rates.iter().map(|r| (r - mean) * (r - mean)).sum::<f64>() / n;
    (
        mean,
        mean - f64::from(factor_milli) / 1000.0 * variance.sqrt(),
    )
}

/// Whether a host with `failures` of `total` requests reaches the failure-percentage threshold
/// (`failures / total ≥ threshold / 100`), in integers.
pub(crate) fn failure_percentage_reached(total: u64, failures: u64, threshold: u32) -> bool {
    u128::from(failures) * 100 >= u128::from(threshold) * u128::from(total)
}

/// How many of Envoy's sweeps a lazy sweep at `now` stands for. Envoy's timer fires every
/// `interval`; the detector runs the sweeps when the first call (or tick) after one is due
/// comes: the sweeps due at `due`, `due + interval`, ... up to `now`, the last of them run at
/// `now`. Zero when `now < due`. `interval` is at least 1.
pub(crate) fn ticks_due(due: u64, interval: u64, now: u64) -> u64 {
    if now < due {
        0
    } else {
        ((now - due) / interval.max(1)).saturating_add(1)
    }
}

/// What the `ticks` sweeps a lazy sweep stands for (see [`ticks_due`]) do to one host, in
/// Envoy's order at each sweep: returns, then the rate rules, then the decay (a host that is in
/// and has been back for an interval loses one step of its multiplier). The sweeps are at
/// `due + j × interval` for `j < ticks − 1`, and at `now` for the last one; the rate rules run
/// at the last one only, over the calls counted since the sweep before.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CatchUp {
    /// The host was ejected and its time is over: the time of the sweep it returns at.
    pub(crate) returns_at: Option<u64>,
    /// The steps it loses at the sweeps before the last (before the rate rules run).
    pub(crate) decays_before: u64,
    /// Whether it loses one at the last sweep too, if the rate rules leave it in.
    pub(crate) decays_now: bool,
}

/// [`CatchUp`] for a host ejected until `ejection_end` (`None`: not ejected) that last came back
/// at `returned`. `ticks` is at least 1.
pub(crate) fn catch_up(
    ejection_end: Option<u64>,
    returned: Option<u64>,
    due: u64,
    interval: u64,
    ticks: u64,
    now: u64,
) -> CatchUp {
    let interval = interval.max(1);
    let last = ticks.max(1) - 1;
    let at = |j: u64| {
        if j < last {
            due.saturating_add(j.saturating_mul(interval))
        } else {
            now
        }
    };
    // The first sweep at or after `t` (the last one, at `now`, if none before it is).
    let first_from = |t: u64| {
        if t <= due {
            0
        } else {
            ((t - due).div_ceil(interval)).min(last)
        }
    };
    match (ejection_end, returned) {
        (Some(end), _) if end <= now => {
            let j = first_from(end);
            CatchUp {
                returns_at: Some(at(j)),
                decays_before: last.saturating_sub(j + 1),
                decays_now: j < last,
            }
        }
        (Some(_), _) | (None, None) => CatchUp::default(),
        (None, Some(r)) => {
            let from = r.saturating_add(interval);
            let decays_before = if from <= due {
                last
            } else {
                last.saturating_sub((from - due).div_ceil(interval))
            };
            CatchUp {
                returns_at: None,
                decays_before,
                decays_now: now.saturating_sub(r) >= interval,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_follows_envoy_and_never_ejects_the_last_host() {
        assert!(cap_allows(0, 10, 10, false));
        assert!(!cap_allows(1, 10, 10, false));
        assert!(!cap_allows(0, 5, 10, false));
        assert!(cap_allows(0, 5, 10, true));
        assert!(!cap_allows(1, 5, 10, true));
        assert!(cap_allows(8, 10, 100, false));
        assert!(!cap_allows(9, 10, 100, false));
        assert!(!cap_allows(0, 1, 100, true));
        assert!(!cap_allows(0, 10, 0, false));
        assert!(cap_allows(u32::MAX - 2, u32::MAX, 100, false));
    }

    #[test]
    fn panic_below_the_healthy_share() {
        assert!(!in_panic(5, 10, 500_000));
        assert!(in_panic(4, 10, 500_000));
        assert!(!in_panic(1, 10, 0));
        assert!(in_panic(0, 10, 0));
        assert!(!in_panic(10, 10, 1_000_000));
        assert!(in_panic(9, 10, 1_000_000));
    }

    #[test]
    fn ejection_time_grows_to_the_max_and_stops() {
        let (base, max) = (30, 300);
        let mut m = 0;
        let mut times = Vec::new();
        for _ in 0..14 {
            m = next_multiplier(base, max, m);
            times.push(ejection_nanos(base, max, m));
        }
        assert_eq!(
            times,
            [
                30, 60, 90, 120, 150, 180, 210, 240, 270, 300, 300, 300, 300, 300
            ]
        );
        assert_eq!(m, 11);
        assert_eq!(ejection_nanos(u64::MAX, u64::MAX, 3), u64::MAX);
    }

    #[test]
    fn success_rate_threshold_is_envoys_example() {
        let (mean, threshold) = success_rate_threshold(&[50.0, 100.0, 100.0, 100.0, 100.0], 1900);
        assert_eq!(mean, 90.0);
        assert!((threshold - 52.0).abs() < 1e-9, "{threshold}");
    }

    /// Envoy's timer, sweep by sweep: the reference [`catch_up`] must agree with.
    fn catch_up_by_each_sweep(
        ejection_end: Option<u64>,
        returned: Option<u64>,
        due: u64,
        interval: u64,
        ticks: u64,
        now: u64,
    ) -> CatchUp {
        let mut out = CatchUp::default();
        let mut ejected = ejection_end;
        let mut back = returned;
        for j in 0..ticks {
            let t = if j + 1 < ticks {
                due + j * interval
            } else {
                now
            };
            if ejected.is_some_and(|end| end <= t) {
                ejected = None;
                back = Some(t);
                out.returns_at = Some(t);
            }
            let decays = ejected.is_none()
                && back.is_some_and(|r| t.checked_sub(r).is_some_and(|d| d >= interval));
            if j + 1 < ticks {
                out.decays_before += u64::from(decays);
            } else {
                out.decays_now = decays;
            }
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn catching_up_equals_running_each_sweep(
            due in 0..1000u64,
            interval in 1..50u64,
            late in 0..2000u64,
            end in proptest::option::of(0..4000u64),
            back in proptest::option::of(0..3000u64),
        ) {
            let now = due + late;
            let ticks = ticks_due(due, interval, now);
            // A host came back at or before now (after `due` too: a shrinking set returns
            // hosts early, between sweeps).
            let returned = back.map(|b| b.min(now));
            proptest::prop_assert_eq!(
                catch_up(end, returned, due, interval, ticks, now),
                catch_up_by_each_sweep(end, returned, due, interval, ticks, now)
            );
        }
    }

    #[test]
    fn sweeps_due_follow_envoys_timer() {
        assert_eq!(ticks_due(10, 10, 9), 0);
        assert_eq!(ticks_due(10, 10, 10), 1);
        assert_eq!(ticks_due(10, 10, 19), 1);
        assert_eq!(ticks_due(10, 10, 20), 2);
        assert_eq!(ticks_due(10, 10, 610), 61);
        assert_eq!(ticks_due(0, 1, u64::MAX), u64::MAX);
        // Three ejections, then 600 s of silence: 60 sweeps find the host in and back for an
        // interval, far more than the 3 steps it has to lose.
        let c = catch_up(None, Some(0), 10, 10, ticks_due(10, 10, 600), 600);
        assert_eq!((c.decays_before, c.decays_now), (59, true));
        // Ejected until 30 s, swept only at 100 s: back as of the sweep at 30 s, a step lost at
        // each of the six from 40 s to 90 s, and one more now.
        let c = catch_up(Some(30), Some(0), 10, 10, ticks_due(10, 10, 100), 100);
        assert_eq!(
            c,
            CatchUp {
                returns_at: Some(30),
                decays_before: 6,
                decays_now: true
            }
        );
        // On time: back now, no decay yet.
        assert_eq!(catch_up(Some(10), None, 10, 10, 1, 10).returns_at, Some(10));
        assert!(!catch_up(Some(10), None, 10, 10, 1, 10).decays_now);
        // Still out: nothing.
        assert_eq!(
            catch_up(Some(101), None, 10, 10, 10, 100),
            CatchUp::default()
        );
        // Far from the origin, nothing overflows.
        let far = u64::MAX - 5;
        let c = catch_up(Some(far), None, far - 20, 10, 3, u64::MAX);
        assert_eq!(c.returns_at, Some(u64::MAX));
    }

    #[test]
    fn failure_percentage_is_compared_in_integers() {
        assert!(failure_percentage_reached(100, 85, 85));
        assert!(!failure_percentage_reached(100, 84, 85));
        assert!(failure_percentage_reached(3, 3, 100));
        assert!(failure_percentage_reached(7, 0, 0));
        assert_eq!(success_rate(4, 1), 75.0);
    }
}
