//! Three replicas share one breaker in a throwaway redis-server: the failures of all three
//! land in one window, so the fleet trips after ten failures in total (instead of ten each),
//! every replica then fails fast, and one probe decides recovery for everyone. The two
//! replicas that did not perform the trip each admit one more call from their view of the
//! state (at most `view_ttl` old); Redis discards those results as stale and the replies
//! tell them the breaker is open.
//!
//! `cargo run -p tripline-redis --example fleet --features server`

use std::time::Duration;

use tripline::{BreakerConfig, Outcome, State, WindowConfig};
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, SharedBreaker, SharedConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = RedisServer::start()?;
    let config = BreakerConfig::builder()
        .window(WindowConfig::Count { size: 20 })
        .minimum_calls(10)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_millis(300))
        .half_open_calls(1)
        .count_in_flight_as_slow(false)
        .build()?;
    let fleet = (1..=3)
        .map(|i| {
            SharedBreaker::new(
                "dep:exercise-catalog",
                config.clone(),
                SharedConfig::builder()
                    .replica_id(format!("replica-{i}"))
                    .build()?,
                Backend::single(&server.url())?,
            )
            .map_err(Into::into)
        })
        .collect::<Result<Vec<_>, Box<dyn std::error::Error>>>()?;

    // The vendor fails every call; the load balancer spreads calls over the replicas.
    let mut failed = 0;
    for call in 0.. {
        let replica = &fleet[call % fleet.len()];
        match replica.acquire().await {
            Ok(permit) => {
                failed += 1;
                permit.record(Outcome::Failure).await;
            }
            Err(rejected) => {
                println!(
                    "call {call}: {} rejects ({}); {failed} failed calls reached the vendor fleet-wide",
                    replica.replica(),
                    rejected
                );
                break;
            }
        }
    }
    for r in &fleet {
        let decision = r.acquire().await.map(|_| ()).map_err(|e| e.state());
        println!("{}: {decision:?}", r.replica());
    }

    // After the open wait, exactly one replica gets the probe; its success closes the
    // breaker for all three.
    tokio::time::sleep(Duration::from_millis(350)).await;
    let mut probe = None;
    for r in &fleet {
        match r.acquire().await {
            Ok(p) => {
                println!("{} holds the probe", r.replica());
                probe = Some(p);
            }
            Err(e) => println!("{}: {}", r.replica(), e),
        }
    }
    if let Some(p) = probe {
        p.record(Outcome::Success).await;
    }
    let snap = fleet[2].refresh().await?;
    assert_eq!(snap.state, State::Closed);
    println!("state {} at epoch {}", snap.state, snap.epoch);
    for e in fleet[0].fleet_events(10).await?.iter().rev() {
        println!(
            "event: {} -> {} ({}) by {}",
            e.from, e.to, e.reason, e.replica
        );
    }
    Ok(())
}
