//! Allocations and memory, with a counting global allocator around `System`:
//!
//! 1. allocations (and bytes) per call on the closed and open paths, every subject;
//! 2. bytes per breaker: allocator bytes live after building 10,000 breakers, divided by
//!    10,000, plus the inline size of the value a caller holds; and tripline's own
//!    `memory_bytes()` estimate;
//! 3. resident set (VmRSS) and live allocator bytes before and after two million state
//!    transitions, each subject in a fresh child process.
//!
//! `cargo bench -p tripline-bench --bench memory`. Under `cargo test --benches` it does a
//! quick smoke run with small counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tripline_bench::{ops, subjects};

/// `System`, counting allocations and bytes.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);
static FREED_BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counters are plain relaxed atomics that never allocate.
#[expect(
    unsafe_code,
    reason = "GlobalAlloc is an unsafe trait; every method forwards to System"
)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        ALLOC_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        ALLOC_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        FREED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        ALLOC_BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        FREED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The allocator's counters at one moment.
#[derive(Clone, Copy, Debug)]
struct Counts {
    allocs: u64,
    bytes: u64,
    live: i64,
}

fn counts() -> Counts {
    let bytes = ALLOC_BYTES.load(Ordering::SeqCst);
    Counts {
        allocs: ALLOCS.load(Ordering::SeqCst),
        bytes,
        live: bytes as i64 - FREED_BYTES.load(Ordering::SeqCst) as i64,
    }
}

/// Allocations and bytes allocated per call of `op`, after a warm-up.
fn per_call(name: &str, calls: u64, mut op: impl FnMut()) {
    for _ in 0..1000 {
        op();
    }
    let before = counts();
    for _ in 0..calls {
        op();
    }
    let after = counts();
    let allocs = (after.allocs - before.allocs) as f64 / calls as f64;
    let bytes = (after.bytes - before.bytes) as f64 / calls as f64;
    println!("| {name} | {allocs:.3} | {bytes:.1} |");
}

/// The allocation table's header, for a section that reports per-call figures.
fn per_call_header_once() {
    println!("\n| path | allocations/call | bytes/call |\n|---|---|---|");
}

/// Bytes and allocations per instance when `count` values from `make` are alive at once.
fn per_instance<T>(name: &str, count: usize, make: impl Fn() -> T, note: &str) -> f64 {
    let mut held: Vec<T> = Vec::with_capacity(count);
    let rss_before = rss_kib();
    let before = counts();
    let start = Instant::now();
    for _ in 0..count {
        held.push(make());
    }
    let took = start.elapsed();
    let after = counts();
    let rss_after = rss_kib();
    let heap = (after.live - before.live) as f64 / count as f64;
    let allocs = (after.allocs - before.allocs) as f64 / count as f64;
    let inline = std::mem::size_of::<T>();
    let rss = (rss_after - rss_before) as f64 * 1024.0 / count as f64;
    println!(
        "| {name} | {inline} | {heap:.1} | {total:.1} | {allocs:.2} | {rss:.0} | {ns:.0} | {note} |",
        total = heap + inline as f64,
        ns = took.as_nanos() as f64 / count as f64,
    );
    drop(black_box(held));
    heap + inline as f64
}

/// The process's resident set in KiB, from `/proc/self/status`.
fn rss_kib() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// The child side of the RSS check: runs `transitions` state transitions of `subject` and
/// prints one line: `RSS subject transitions rss_before_kib rss_after_kib live_before
/// live_after seconds`.
fn rss_child(subject: &str, transitions: u64) {
    let before_rss;
    let before;
    let start;
    let done: u64;
    match subject {
        "tripline-force-open-reset" | "tripline-trip-reset" => {
            let b = subjects::tripline_count(true);
            // One warm-up round, so lazily allocated buffers exist before the first reading.
            b.force_open();
            b.reset();
            let base = b.metrics().transitions;
            before_rss = rss_kib();
            before = counts();
            start = Instant::now();
            let force = subject == "tripline-force-open-reset";
            for _ in 0..transitions / 2 {
                if force {
                    b.force_open();
                } else {
                    b.trip();
                }
                b.reset();
            }
            done = b.metrics().transitions - base;
        }
        "recloser" => {
            // Closed -(2 failures)-> Open -(next call, wait 0)-> HalfOpen -(2nd success)->
            // Closed: 3 transitions per round with rings of 1.
            let r = subjects::recloser_cycling();
            let round = |r: &recloser::Recloser| {
                let _ = r.call(|| Err::<(), ()>(()));
                let _ = r.call(|| Err::<(), ()>(()));
                while let Err(recloser::Error::Rejected) = r.call(|| Ok::<(), ()>(())) {}
                r.call(|| Ok::<(), ()>(()))
                    .expect("half-open recloser admits");
            };
            round(&r);
            before_rss = rss_kib();
            before = counts();
            start = Instant::now();
            let rounds = transitions.div_ceil(3);
            for _ in 0..rounds {
                round(&r);
            }
            done = rounds * 3;
        }
        "failsafe" => {
            // Closed -(failure)-> Open -(next call, wait 0)-> HalfOpen -(success)-> Closed.
            use failsafe::CircuitBreaker as _;
            let cb = subjects::failsafe_cycling();
            let round = |cb: &dyn Fn(bool) -> bool| {
                cb(false);
                while !cb(true) {}
            };
            let call = |ok: bool| {
                !matches!(
                    cb.call(|| if ok { Ok(()) } else { Err(()) }),
                    Err(failsafe::Error::Rejected)
                )
            };
            round(&call);
            before_rss = rss_kib();
            before = counts();
            start = Instant::now();
            let rounds = transitions.div_ceil(3);
            for _ in 0..rounds {
                round(&call);
            }
            done = rounds * 3;
        }
        other => panic!("unknown RSS subject {other}"),
    }
    let secs = start.elapsed().as_secs_f64();
    let after = counts();
    println!(
        "RSS {subject} {done} {} {} {} {} {secs:.2}",
        before_rss,
        rss_kib(),
        before.live,
        after.live
    );
}

/// Runs the RSS check of `subject` in a child process and prints its table row.
fn rss_row(subject: &str, transitions: u64) {
    let exe = std::env::current_exe().expect("own executable");
    let out = Command::new(exe)
        .args(["rss-child", subject, &transitions.to_string()])
        .output()
        .expect("run the RSS child");
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(line) = text.lines().find(|l| l.starts_with("RSS ")) else {
        println!(
            "| {subject} | child failed: {} |",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return;
    };
    let f: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| f[i].parse::<f64>().unwrap_or(f64::NAN);
    let (done, rss0, rss1, live0, live1, secs) = (num(2), num(3), num(4), num(5), num(6), num(7));
    println!(
        "| {subject} | {done:.0} | {:.1} | {:.1} | {:+.1} | {:+.1} | {:.1} | {secs:.2} |",
        rss0 / 1024.0,
        rss1 / 1024.0,
        (rss1 - rss0) / 1024.0,
        (live1 - live0) / 1_048_576.0,
        (live1 - live0) / done,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("rss-child") {
        let transitions = args
            .get(3)
            .and_then(|s| s.parse().ok())
            .unwrap_or(2_000_000);
        rss_child(&args[2], transitions);
        return;
    }
    let bench = tripline_bench::bench_mode();
    let (calls, instances, transitions) = if bench {
        (1_000_000, 10_000, 2_000_000)
    } else {
        (1_000, 100, 2_000)
    };

    println!("## Allocations per call ({calls} calls after 1,000 warm-up calls)\n");
    println!("| path | allocations/call | bytes/call |\n|---|---|---|");
    {
        let b = subjects::tripline_count(true);
        per_call("tripline closed, count 100, in-flight on", calls, || {
            ops::tripline_permit_success(&b)
        });
        let b = subjects::tripline_count(false);
        per_call("tripline closed, count 100, in-flight off", calls, || {
            ops::tripline_permit_success(&b)
        });
        let b = subjects::tripline_count(true);
        per_call("tripline closed, count 100, `call`", calls, || {
            ops::tripline_call(&b)
        });
        let b = subjects::tripline_count(true);
        per_call("tripline closed, count 100, owned permit", calls, || {
            ops::tripline_owned_permit_success(&b)
        });
        let b = subjects::tripline_time(1, true);
        per_call("tripline closed, time 10×1 s", calls, || {
            ops::tripline_permit_success(&b)
        });
        let b = subjects::tripline_time(4, true);
        per_call("tripline closed, time 10×1 s, 4 stripes", calls, || {
            ops::tripline_permit_success(&b)
        });
        let b = subjects::tripline_open();
        per_call("tripline open (tripped): rejection", calls, || {
            ops::tripline_reject(&b)
        });
        let b = subjects::tripline_open_owned_name();
        per_call("tripline open, String name: rejection", calls, || {
            ops::tripline_reject(&b)
        });
        let b = subjects::tripline_forced_open();
        per_call("tripline forced open: rejection", calls, || {
            ops::tripline_reject(&b)
        });
        let r = subjects::recloser_closed();
        per_call("recloser closed", calls, || ops::recloser_success(&r));
        let r = subjects::recloser_open();
        per_call("recloser open: rejection", calls, || {
            ops::recloser_reject(&r)
        });
        let cb = subjects::failsafe_closed();
        per_call("failsafe closed", calls, || ops::failsafe_success(&cb));
        let cb = subjects::failsafe_open();
        per_call("failsafe open: rejection", calls, || {
            ops::failsafe_reject(&cb)
        });
    }

    println!("\n## Keyed breakers (`tripline::registry`)\n");
    {
        use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
        let keys_n = if bench { 100_000 } else { 1_000 };
        let keys: Vec<Key> = (0..keys_n)
            .map(|i| Key::scoped("catalog", ScopeKind::Tenant, &format!("t{i}")).unwrap())
            .collect();
        let config = RegistryConfig::default()
            .with_config("default", subjects::count_config(true))
            .with_max_breakers(keys_n * 2);
        let registry = Registry::new(config).unwrap();
        let before = counts();
        for k in &keys {
            drop(registry.get(k).unwrap());
        }
        let after = counts();
        println!(
            "{keys_n} idle keys: {:.0} heap bytes per key (breaker with a count window of 100, key, map entry), {:.1} allocations per key",
            (after.live - before.live) as f64 / keys_n as f64,
            (after.allocs - before.allocs) as f64 / keys_n as f64,
        );
        let mut i = 0usize;
        per_call_header_once();
        per_call(
            "registry lookup + acquire + record (existing key)",
            calls,
            || {
                i = (i + 7919) % keys_n;
                let b = registry.get(&keys[i]).unwrap();
                let _ = b
                    .try_acquire()
                    .map(|p| p.record(tripline::Outcome::Success));
            },
        );
        drop(black_box(registry));
    }

    println!("\n## Bytes per breaker ({instances} breakers alive at once)\n");
    println!(
        "| breaker | inline bytes (size_of) | heap bytes (allocator) | total bytes | allocations | RSS bytes | build ns | note |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    {
        let count = subjects::count_config(true);
        let time1 = subjects::time_config(1, true);
        let time4 = subjects::time_config(4, true);
        per_instance(
            "tripline count 100",
            instances,
            || subjects::tripline_with(count.clone(), subjects::monotonic()),
            &format!(
                "memory_bytes() = {}",
                subjects::tripline_with(count.clone(), subjects::monotonic()).memory_bytes()
            ),
        );
        let shared = std::sync::Arc::new(count.clone());
        per_instance(
            "tripline count 100, one shared `Arc<BreakerConfig>`",
            instances,
            || subjects::tripline_with(shared.clone(), subjects::monotonic()),
            &format!(
                "memory_bytes() = {}; as a registry's keys share their configuration",
                subjects::tripline_with(shared.clone(), subjects::monotonic()).memory_bytes()
            ),
        );
        let tripped = subjects::tripline_with(shared.clone(), subjects::monotonic());
        tripped.trip();
        tripped.reset();
        per_instance(
            "tripline count 100, shared configuration, after one trip and reset",
            instances,
            || {
                let b = subjects::tripline_with(shared.clone(), subjects::monotonic());
                b.trip();
                b.reset();
                b
            },
            &format!(
                "memory_bytes() = {}; the transition part is allocated on first use",
                tripped.memory_bytes()
            ),
        );
        let seeded = count
            .to_builder()
            .seed(1)
            .build()
            .expect("valid seeded configuration");
        per_instance(
            "tripline count 100, `.seed(1)`",
            instances,
            || subjects::tripline_with(seeded.clone(), subjects::monotonic()),
            "no OS entropy read at construction",
        );
        per_instance(
            "tripline time 10×1 s",
            instances,
            || subjects::tripline_with(time1.clone(), subjects::monotonic()),
            &format!(
                "memory_bytes() = {}",
                subjects::tripline_with(time1.clone(), subjects::monotonic()).memory_bytes()
            ),
        );
        per_instance(
            "tripline time 10×1 s, 4 stripes",
            instances,
            || subjects::tripline_with(time4.clone(), subjects::monotonic()),
            &format!(
                "memory_bytes() = {}",
                subjects::tripline_with(time4.clone(), subjects::monotonic()).memory_bytes()
            ),
        );
        per_instance(
            "recloser (ring 100)",
            instances,
            subjects::recloser_closed,
            "",
        );
        per_instance(
            "failsafe (default policy)",
            instances,
            subjects::failsafe_closed,
            "",
        );
    }

    println!(
        "\nsize_of (bytes): BreakerConfig {}, Event {}, BreakerName {}, Rejected {}, Permit {}, \
         Result<Permit, Rejected> {}, std Mutex<()> {}",
        std::mem::size_of::<tripline::BreakerConfig>(),
        std::mem::size_of::<tripline::Event>(),
        std::mem::size_of::<tripline::BreakerName>(),
        std::mem::size_of::<tripline::Rejected>(),
        std::mem::size_of::<tripline::Permit<'static>>(),
        std::mem::size_of::<Result<tripline::Permit<'static>, tripline::Rejected>>(),
        std::mem::size_of::<std::sync::Mutex<()>>(),
    );

    println!("\n## Resident set over {transitions} transitions (fresh process each)\n");
    println!(
        "| subject | transitions | RSS before MiB | RSS after MiB | RSS change MiB | live heap change MiB | live heap bytes/transition | seconds |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for subject in [
        "tripline-force-open-reset",
        "tripline-trip-reset",
        "recloser",
        "failsafe",
    ] {
        rss_row(subject, transitions);
    }
}
