//! The fault switch with the operator's page: open the printed address, watch the `prices`
//! breaker trip while the switch goes failing or slow and close again once it is healthy,
//! watch catalog shards and tenants trip one at a time, and throw the kill switch with the
//! operator token.
//!
//! ```text
//! cargo run -p tripline-dashboard --example ops_page
//! cargo run -p tripline-dashboard --example ops_page -- --manual   # flip it yourself:
//! curl -X POST http://127.0.0.1:8080/switch/failing
//! ```

mod app;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use rand::{Rng, SeedableRng, TryRngCore};
use tripline::MonotonicClock;
use tripline::registry::{Key, Registry, ScopeKind};

use app::{Options, Priced};

/// The fault-switch application with the operator's page under /ops/.
#[derive(Parser)]
struct Args {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// The operator's bearer token (every permission); a random one when not given.
    #[arg(long)]
    token: Option<String>,
    /// A read-only bearer token; a random one when not given.
    #[arg(long)]
    read_token: Option<String>,
    /// How many catalog shards get a breaker.
    #[arg(long, default_value_t = 24)]
    shards: usize,
    /// Do not flip the switch on a schedule (use `POST /switch/{healthy,slow,failing}`).
    #[arg(long)]
    manual: bool,
}

fn random_token() -> String {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system's random generator");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Outcomes for the catalog's shards and the tenants: mostly healthy, one hot shard at a
/// time (it moves every 40 s) and, now and then, one tenant in trouble.
async fn keyed_traffic(registry: Arc<Registry>, shards: usize, tenants: Vec<String>) {
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(7);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let started = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        let t = started.elapsed().as_secs();
        let hot = (t / 40) as usize % shards.max(1);
        let hot_now = t % 40 < 20;
        let mut keys: Vec<(Key, f64)> = (0..shards)
            .filter_map(|s| {
                let p = if s == hot && hot_now { 0.8 } else { 0.02 };
                Key::scoped("catalog", ScopeKind::Shard, &s.to_string())
                    .ok()
                    .map(|k| (k, p))
            })
            .collect();
        for (i, tenant) in tenants.iter().enumerate() {
            let p = if i == 1 && t % 90 >= 60 { 0.7 } else { 0.01 };
            if let Ok(k) = Key::scoped("payments", ScopeKind::Tenant, tenant) {
                keys.push((k, p));
            }
        }
        for (key, p) in keys {
            let Ok(breaker) = registry.get(&key) else {
                continue;
            };
            for _ in 0..2 {
                let fail = rng.random_bool(p);
                let _ = breaker.call(|| if fail { Err(()) } else { Ok(()) });
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let operator_token = args.token.unwrap_or_else(random_token);
    let reader_token = args.read_token.unwrap_or_else(random_token);
    let tenants: Vec<String> = ["acme", "globex", "initech", "umbrella"]
        .into_iter()
        .map(String::from)
        .collect();
    let app = app::start(Options {
        clock: MonotonicClock::new(),
        operator_token: operator_token.clone(),
        reader_token: reader_token.clone(),
        shards: args.shards,
        tenants: tenants.clone(),
        addr: args.addr,
    })
    .await?;
    println!("operator's page: {}", app.page());
    println!("  operator token (may control): {operator_token}");
    println!("  read-only token:              {reader_token}");
    println!("  switch: curl -X POST http://{}/switch/failing", app.addr);

    tokio::spawn(keyed_traffic(app.registry.clone(), args.shards, tenants));
    // The last hour is kept while nobody looks at the page.
    let history = app.dashboard.clone();
    tokio::spawn(async move { history.run_history().await });

    let app = Arc::new(app);
    if !args.manual {
        let flipper = app.clone();
        tokio::spawn(async move {
            for mode in ["healthy", "failing", "healthy", "slow"]
                .into_iter()
                .cycle()
            {
                println!("switch: {mode}");
                if let Err(e) = flipper.flip(mode).await {
                    eprintln!("could not flip the switch: {e}");
                }
                tokio::time::sleep(Duration::from_secs(15)).await;
            }
        });
    }

    // The client: a price every 200 ms, through the breaker.
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut last = String::new();
    loop {
        tick.tick().await;
        let shown = match app.price().await {
            Priced::Fresh => "fresh price".to_string(),
            Priced::Failed(why) => format!("failed: {why}"),
            Priced::Rejected => "rejected by the breaker: cached price".to_string(),
        };
        if shown != last {
            println!(
                "prices: {shown} (server hits {})",
                app.switch.hits.load(std::sync::atomic::Ordering::SeqCst)
            );
            last = shown;
        }
    }
}
