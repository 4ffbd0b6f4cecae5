//! The registry under racing operators and lookups: an override is never lost to a racing
//! reset, a full registry serves every lookup while some breaker may go, and `idle_after` is
//! honoured to within a sixty-fourth of itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tripline::registry::{Key, OperatorState, Registry, RegistryConfig, ScopeKind, Selector};
use tripline::{Clock, ManualClock, State};

/// A manual clock that, once armed for one thread, stops that thread at its next reading
/// until released: it holds an operation at the moment it reads the time.
#[derive(Clone)]
struct GateClock {
    time: ManualClock,
    gate: Arc<Gate>,
}

struct Gate {
    armed: Mutex<Option<std::thread::ThreadId>>,
    stopped: Mutex<Sender<()>>,
    go: Mutex<Receiver<()>>,
}

impl Clock for GateClock {
    fn now(&self) -> u64 {
        let me = std::thread::current().id();
        let stop = {
            let mut armed = self.gate.armed.lock().unwrap();
            if *armed == Some(me) {
                *armed = None;
                true
            } else {
                false
            }
        };
        if stop {
            self.gate.stopped.lock().unwrap().send(()).unwrap();
            self.gate.go.lock().unwrap().recv().unwrap();
        }
        self.time.now()
    }
}

/// `Registry::reset` stopped when it reads the clock, a kill switch thrown meanwhile, then the
/// reset let go: the breaker ends under the kill switch, whichever reached it first.
#[test]
fn a_reset_racing_a_kill_switch_never_leaves_the_breaker_closed() {
    let (stopped_tx, stopped_rx) = channel();
    let (go_tx, go_rx) = channel();
    let clock = GateClock {
        time: ManualClock::new(),
        gate: Arc::new(Gate {
            armed: Mutex::new(None),
            stopped: Mutex::new(stopped_tx),
            go: Mutex::new(go_rx),
        }),
    };
    let r = Arc::new(Registry::with_clock(RegistryConfig::default(), clock.clone()).unwrap());
    let key = Key::new("payments").unwrap();
    let sel = Selector::Key(key.clone());
    let held_handle = r.get(&key).unwrap();
    let resetting = {
        let (r, sel, gate) = (r.clone(), sel.clone(), clock.gate.clone());
        std::thread::spawn(move || {
            *gate.armed.lock().unwrap() = Some(std::thread::current().id());
            r.reset(&sel);
        })
    };
    // Wait (boundedly) for the reset to read the clock; a reset that reads none is not held.
    let held = stopped_rx.recv_timeout(Duration::from_secs(10)).is_ok();
    let (tx, rx) = channel();
    {
        let (r, sel) = (r.clone(), sel.clone());
        std::thread::spawn(move || {
            tx.send(r.set_operator(&sel, OperatorState::ForcedOpen))
                .unwrap()
        });
    }
    rx.recv_timeout(Duration::from_secs(10))
        .expect("set_operator waited for the held reset: a clock read under a lock");
    if held {
        go_tx.send(()).unwrap();
    }
    resetting.join().unwrap();
    assert_eq!(r.operator_for(&key), OperatorState::ForcedOpen);
    // Seen through the handle a caller already holds, and without a lookup that re-applies.
    assert_eq!(
        held_handle.state(),
        State::ForcedOpen,
        "the kill switch is in force but the breaker admits calls"
    );
    assert_eq!(r.peek(&key).unwrap().state(), State::ForcedOpen);
}

/// The same race with real threads, many times: resets and kill switches on one key.
#[test]
fn resets_racing_kill_switches_leave_every_breaker_as_its_override_says() {
    for round in 0..300 {
        let r =
            Arc::new(Registry::with_clock(RegistryConfig::default(), ManualClock::new()).unwrap());
        let key = Key::new("payments").unwrap();
        let sel = Selector::Key(key.clone());
        let held = r.get(&key).unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let resetter = {
            let (r, sel, barrier) = (r.clone(), sel.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..20 {
                    r.reset(&sel);
                }
            })
        };
        barrier.wait();
        r.set_operator(&sel, OperatorState::ForcedOpen);
        resetter.join().unwrap();
        assert_eq!(held.state(), State::ForcedOpen, "round {round}");
    }
}

/// 64 breakers at most, four threads looking up keys from a space twenty times larger, each
/// holding one breaker at a time: at most four are ever in use, so every lookup can be served.
#[test]
fn a_full_registry_serves_every_lookup_while_breakers_can_go() {
    let r = Arc::new(
        Registry::with_clock(
            RegistryConfig::default().with_max_breakers(64),
            ManualClock::new(),
        )
        .unwrap(),
    );
    let refused = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (r, refused) = (r.clone(), refused.clone());
            std::thread::spawn(move || {
                for i in 0..5_000u32 {
                    let k =
                        Key::scoped("dep", ScopeKind::Host, &format!("{t}-{}", i % 320)).unwrap();
                    match r.get(&k) {
                        Ok(b) => {
                            let _ = b.call(|| Ok::<_, ()>(()));
                        }
                        Err(_) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        refused.load(Ordering::Relaxed),
        0,
        "lookups refused as Full"
    );
    assert!(r.len() <= 64);
}

/// `idle_after = 100ms`: a breaker used 50 ms ago is not idle; one unused for well past
/// 100 ms is.
#[test]
fn idle_after_counts_from_the_last_use() {
    let clock = ManualClock::new();
    let r = Registry::with_clock(
        RegistryConfig::default().with_idle_after(Duration::from_millis(100)),
        clock.clone(),
    )
    .unwrap();
    let key = Key::new("catalog").unwrap();
    r.get(&key).unwrap();
    clock.advance(Duration::from_millis(60));
    r.get(&key).unwrap(); // used at 60 ms
    clock.advance(Duration::from_millis(50)); // 110 ms: last used 50 ms ago
    assert_eq!(r.evict_idle(), 0, "a breaker used 50 ms ago was evicted");
    assert!(r.peek(&key).is_some());
    clock.advance(Duration::from_millis(100)); // 210 ms: unused for 150 ms
    assert_eq!(r.evict_idle(), 1, "a breaker unused for 150 ms was kept");
}
