//! What must hold for every scenario and tuning-space file, beyond "it does not panic".
//! Driven by proptest in `tests/hostile.rs` (stable, every CI run) and by libFuzzer in
//! `fuzz/` (which includes this file).

use tripline::BreakerConfig;
use tripline_sim::Scenario;
use tripline_sim::scenario::{MAX_BREAKERS, MAX_RUN};
use tripline_sim::tune::{self, Space};

/// The most heap parsing may hold at once: this many bytes per byte of input, plus 4 MiB.
const PER_BYTE: u64 = 256;

fn within_memory<T>(what: &str, input: usize, f: impl FnOnce() -> T) -> T {
    let mut out = None;
    let info = allocation_counter::measure(|| out = Some(f()));
    let bound = PER_BYTE * input as u64 + (4 << 20);
    assert!(
        info.bytes_max <= bound,
        "{what}: {} bytes at the peak for {input} bytes of input (bound {bound})",
        info.bytes_max
    );
    out.expect("the closure ran")
}

/// The built-in scenarios, as seeds.
pub(crate) fn scenario_seeds() -> Vec<String> {
    [
        "fowler",
        "gymfolks",
        "fraud-checkout",
        "metastable",
        "retry-storm",
        "hot-shard",
        "mercari",
        "backoff-contention",
        "slow-recovery",
        "gymfolks-cascade",
        "sustained-errors",
    ]
    .iter()
    .filter_map(|n| tripline_sim::scenario::builtin(n))
    .map(str::to_string)
    .collect()
}

/// Words a scenario gives meaning to.
pub(crate) const SCENARIO_WORDS: &[&str] = &[
    "constant",
    "poisson",
    "burst",
    "round-robin",
    "least-loaded",
    "random",
    "shared",
    "local",
    "dependency",
    "shard",
    "fixed",
    "uniform",
    "lognormal",
    "count",
    "time",
    "all-probes",
    "consecutive",
    "reject",
    "queue",
    "errors",
    "latency",
    "down",
    "minimum_calls",
    "dependency.latency",
    "protection.breaker.minimum_calls",
];

/// A scenario: an accepted one keeps the bounds the simulator promises (runs of at most
/// [`MAX_RUN`], at most [`MAX_BREAKERS`] breakers), every breaker configuration in it
/// round-trips through the tuner's TOML, and so does every point of its sweep; a refused one
/// is an error that says what is wrong.
pub(crate) fn scenario(text: &str) {
    let s = match within_memory("Scenario", text.len(), || Scenario::from_toml(text)) {
        Ok(s) => s,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    accepted(&s);
    if let Some(sweep) = &s.sweep {
        for (_, point) in sweep.points(&s) {
            accepted(&point);
        }
    }
}

fn accepted(s: &Scenario) {
    assert!(s.longest_run() <= MAX_RUN, "a run of {:?}", s.longest_run());
    for p in &s.protection {
        assert!(
            s.breaker_count(p) <= MAX_BREAKERS,
            "{} breakers",
            s.breaker_count(p)
        );
        let _ = p.policies();
        tuned(&p.breaker);
    }
    let _ = s.incident();
}

/// The tuner's TOML of a configuration reads back as the same configuration.
pub(crate) fn tuned(c: &BreakerConfig) {
    let text = tune::to_toml(c);
    let back: BreakerConfig = toml::from_str(&text)
        .unwrap_or_else(|e| panic!("{e}: the tuner wrote\n{text}\nwhich does not read back"));
    assert_eq!(&back, c, "{text}");
}

/// Seeds for the tuning space: the defaults as `--show-space` prints them, and small ones.
pub(crate) fn space_seeds() -> Vec<String> {
    vec![
        Space::default().to_toml(),
        "count_windows = [20, 50]\nopen_duration = [\"5s\", \"30s\"]\n".into(),
        "count_windows = []\ntime_windows = [\"10s\"]\npolicies = [\"consecutive\"]\n".into(),
    ]
}

/// A tuning space: an accepted one round-trips through `to_toml` (what `tripline tune
/// --show-space` prints reads back as the same space).
pub(crate) fn space(text: &str) {
    let s = match within_memory("Space", text.len(), || Space::from_toml(text)) {
        Ok(s) => s,
        Err(e) => {
            assert!(!e.is_empty());
            return;
        }
    };
    let again = s.to_toml();
    let back = Space::from_toml(&again)
        .unwrap_or_else(|e| panic!("{e}: written as\n{again}\nit does not read back"));
    assert_eq!(back, s, "{again}");
}
