//! The refusal event. Alone in its own test binary: tracing caches each callsite's interest
//! process-wide, and a refusal on another test thread (no subscriber there) racing with this
//! test's scoped subscriber could leave the callsite switched off for it.

use ratelimit::{Config, Options, Tier};
use ratelimit_tests::{now, service, Captured};

#[test]
fn refusals_emit_a_debug_event_without_the_key() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let config = Config::builder()
        .burst_limit(2)
        .tier(Tier::new("free", 3).window("1m"))
        .build()
        .unwrap();
    let (service, _) = service(config);
    tracing::subscriber::with_default(subscriber, || {
        let opts = Options::new().tier("free").budget("billing::charge");
        for _ in 0..6 {
            now(service.consume("secret-user-7", &opts)).unwrap();
        }
    });
    let text = captured.text();
    assert_eq!(text.matches("rate limit exceeded").count(), 1, "{text}");
    for field in [
        "budget=\"billing::charge\"",
        "tier=\"free\"",
        "limit=5",
        "retry_after_ms=60000",
        "key=#",
    ] {
        assert!(text.contains(field), "{field} missing: {text}");
    }
    assert!(!text.contains("secret-user-7"), "{text}");
    assert_eq!(service.stats().by_method["billing::charge"].denied, 1);
}
