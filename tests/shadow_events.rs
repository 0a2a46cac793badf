//! Shadow limits' events. Alone in their own test binary, as `events.rs` is: tracing caches
//! each callsite's interest process-wide.

use ratelimit::testing::TestModule;
use ratelimit::{rate_limit, Error, Module, Tier};
use ratelimit_tests::Captured;

#[rate_limit(limit = 1, window = "1m", key = user, shadow = true)]
async fn trial_search(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

// Its own limit, under a shadow tier: a shadow limit too, and named as one at start.
#[rate_limit(tier = "beta", limit = 3, window = "1m")]
async fn beta_export() -> Result<(), Error> {
    Ok(())
}

/// Building the module names every shadow limit and shadow tier at warn level; each call a
/// shadow limit would have refused is an info event naming the budget, never the key.
#[test]
fn shadow_limits_are_named_at_start_and_each_would_be_refusal_logged() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let builder = Module::builder().tier(Tier::new("beta", 5).window("1m").shadow());
        let module = TestModule::new(builder).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(module.scope(async {
            for _ in 0..4 {
                trial_search("secret-user-9").await.unwrap();
                // Over its own limit of 3 on the fourth call: shadowed by its tier, it runs.
                beta_export().await.unwrap();
            }
        }));
    });
    let text = captured.text();
    let warns: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    assert!(
        warns
            .iter()
            .any(|l| l.contains("shadow tier") && l.contains("tier=\"beta\"")),
        "{text}"
    );
    assert!(
        warns
            .iter()
            .any(|l| l.contains("shadow limit") && l.contains("shadow_events::trial_search")),
        "{text}"
    );
    assert!(
        warns.iter().any(|l| l.contains("shadow limit")
            && l.contains("shadow_events::beta_export")
            && l.contains("tier=\"beta\"")),
        "{text}"
    );
    let infos: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("INFO") && l.contains("shadow rate limit would have refused"))
        .collect();
    // trial_search's 3 would-be refusals, and beta_export's one.
    assert_eq!(infos.len(), 4, "{text}");
    assert!(
        infos[0].contains("budget=\"shadow_events::trial_search\""),
        "{text}"
    );
    assert!(infos[0].contains("key=#"), "{text}");
    assert!(!text.contains("secret-user-9"), "{text}");
}
