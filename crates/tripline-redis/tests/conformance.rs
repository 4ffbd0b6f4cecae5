//! The core's conformance vectors against the Redis store: the same decisions, verdicts,
//! states, windows and transitions as the in-process breaker, asking Redis on every acquire
//! and deciding from the last answer.

mod common;
use common::RedisSubject;

use std::time::Duration;

use tripline::conformance::{self};
use tripline_redis::server::RedisServer;

fn run_all(view_ttl: Duration, mode: &str) {
    let server = RedisServer::start().expect("redis-server");
    let mut failures = Vec::new();
    for v in conformance::builtin() {
        let subject = RedisSubject::single(
            &server.url(),
            v.config.clone(),
            &format!("{mode}:{}", v.name),
            view_ttl,
        );
        if let Err(e) = conformance::run(&v, &subject) {
            failures.push(e.to_string());
        }
        assert_eq!(subject.breaker.metrics().redis_errors, 0, "{}", v.name);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_vector_passes_asking_redis_on_every_acquire() {
    run_all(Duration::ZERO, "exact");
}

#[test]
fn every_vector_passes_deciding_from_the_last_answer() {
    run_all(Duration::from_secs(3600), "view");
}
