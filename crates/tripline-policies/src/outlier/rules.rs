//! The detector's rules as small pure functions over counts, so that each can be read (and
//! tested) in one screen. The detector calls them under its lock; the simulator and the tests
//! call the detector.

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

    #[test]
    fn failure_percentage_is_compared_in_integers() {
        assert!(failure_percentage_reached(100, 85, 85));
        assert!(!failure_percentage_reached(100, 84, 85));
        assert!(failure_percentage_reached(3, 3, 100));
        assert!(failure_percentage_reached(7, 0, 0));
        assert_eq!(success_rate(4, 1), 75.0);
    }
}
