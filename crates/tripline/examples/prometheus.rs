//! Keyed breakers exported to Prometheus: a tenant's dependency fails, its breaker opens, and
//! the scrape shows it. Run with `cargo run -p tripline --example prometheus --features metrics`.

use metrics_exporter_prometheus::PrometheusBuilder;
use tripline::BreakerConfig;
use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;

    let config = BreakerConfig::builder()
        .count_window(20)
        .minimum_calls(10)
        .build()?;
    let registry = Registry::new(RegistryConfig::default().with_config("default", config))?;
    for tenant in ["acme", "globex"] {
        let key = Key::scoped("payments", ScopeKind::Tenant, tenant)?;
        for _ in 0..12 {
            let breaker = registry.get(&key)?;
            // acme's shard is down; globex's is healthy.
            let _ = breaker.call(|| {
                if tenant == "acme" {
                    Err("503")
                } else {
                    Ok("ok")
                }
            });
        }
    }
    registry.export_metrics(); // on each scrape
    let scrape = handle.render();
    for line in scrape
        .lines()
        .filter(|l| l.starts_with("tripline_breaker_state") && l.ends_with(" 1"))
    {
        println!("{line}");
    }
    println!(
        "open payments breakers: {}",
        registry.open_count("payments")
    );
    Ok(())
}
