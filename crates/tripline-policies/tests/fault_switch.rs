//! The `fault_switch` example's game day, end to end on loopback and on real time: a 5 s stall
//! injected into every call opens the breaker, the open breaker answers locally, and once the
//! stall is lifted the breaker probes and closes on its own.
//!
//! Real time is used because that is the point of a game day; nothing here sleeps to wait for
//! a state (the example polls with a deadline), and the only duration asserted is a generous
//! bound: an answer from the open breaker comes long before the stall would have ended.
#![cfg(all(feature = "reqwest", feature = "pipeline"))]

#[path = "../examples/fault_switch.rs"]
mod fault_switch;

use std::time::Duration;

use tripline::State;

#[tokio::test(flavor = "current_thread")]
async fn an_injected_stall_opens_the_breaker_and_lifting_it_closes_it() {
    let client = fault_switch::start().await.unwrap();
    let day = fault_switch::game_day(&client, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(
        (2..=4).contains(&day.calls_to_open),
        "50 % of the last 4 calls: {day:?}"
    );
    assert_eq!(
        day.answered_while_open, 3,
        "every call answered by the open breaker"
    );
    assert_eq!(day.hits_while_open, 0, "the server saw none of them");
    assert!(day.slowest_while_open < Duration::from_secs(5), "{day:?}");
    assert!(day.fresh_after, "{day:?}");
    let t = client.transitions.lock().unwrap().clone();
    assert_eq!(t.first(), Some(&(State::Closed, State::Open)), "{t:?}");
    assert_eq!(t.last(), Some(&(State::HalfOpen, State::Closed)), "{t:?}");
    assert!(!client.chaos.is_enabled());
    assert_eq!(client.state(), State::Closed);
}
