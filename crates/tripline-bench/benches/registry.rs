//! Keyed breakers: a registry lookup, then acquire and record, over 100,000 keys visited in a
//! scattered order (divan). `cargo bench -p tripline-bench --bench registry`.

use std::hint::black_box;

use divan::Bencher;
use tripline::Outcome;
use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
use tripline_bench::subjects;

fn main() {
    divan::Divan::default()
        .sample_count(500)
        .sample_size(2000)
        .config_with_args()
        .main();
}

fn setup(n: usize) -> (Registry, Vec<Key>) {
    let keys: Vec<Key> = (0..n)
        .map(|i| Key::scoped("catalog", ScopeKind::Tenant, &format!("t{i}")).unwrap())
        .collect();
    let config = RegistryConfig::default()
        .with_config("default", subjects::count_config(true))
        .with_max_breakers(n * 2);
    let registry = Registry::new(config).unwrap();
    for k in &keys {
        registry.get(k).unwrap();
    }
    (registry, keys)
}

/// Lookup + acquire + record on one of `n` existing keys.
#[divan::bench(args = [1, 1_000, 100_000])]
fn lookup_acquire_record(bencher: Bencher, n: usize) {
    let (registry, keys) = setup(n);
    let mut i = 0usize;
    bencher.bench_local(|| {
        i = (i + 7919) % n;
        let b = registry.get(black_box(&keys[i])).unwrap();
        if let Ok(p) = b.try_acquire() {
            p.record(Outcome::Success);
        }
    });
}

/// The lookup alone.
#[divan::bench(args = [100_000])]
fn lookup(bencher: Bencher, n: usize) {
    let (registry, keys) = setup(n);
    let mut i = 0usize;
    bencher.bench_local(|| {
        i = (i + 7919) % n;
        black_box(registry.get(black_box(&keys[i])).unwrap());
    });
}
