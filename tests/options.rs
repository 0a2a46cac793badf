//! The service's public API as a program uses it: owned [`Options`] (stored, reused across
//! tasks, `const`), windows given as text in every builder, a bad window refused at run time,
//! and the times on a [`Decision`].

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use ratelimit::{
    Config, Error, Module, Name, Options, Overrides, QuotaError, RateLimitService, Strategy, Tier,
    Window,
};
use ratelimit_tests::{now, service, START};

/// A client a program builds once: its service and the options every call goes with.
#[derive(Clone)]
struct Client {
    service: RateLimitService,
    options: Options,
}

fn tiers() -> Config {
    Config::builder()
        .tier(Tier::new("free", 2).window("1m"))
        .tier(Tier::new("pro", 40).window("1m"))
        .build()
        .unwrap()
}

#[test]
fn options_stored_in_a_struct_are_reused_across_spawned_tasks() {
    let (service, clock) = service(tiers());
    // One literal tier, one made at run time: both owned, both `'static`.
    let pro = Client {
        service: service.clone(),
        options: Options::new().tier("pro"),
    };
    let plan = String::from("free");
    let free = Client {
        service,
        options: Options::new().tier(plan),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let run = |client: &Client, key: &'static str| {
        rt.block_on(async {
            let tasks: Vec<_> = (0..16)
                .map(|_| {
                    let client = client.clone();
                    tokio::spawn(async move {
                        let mut admitted = 0u32;
                        for _ in 0..5 {
                            let d = client.service.consume(key, &client.options).await.unwrap();
                            admitted += u32::from(d.allowed);
                        }
                        admitted
                    })
                })
                .collect();
            let each = futures::future::join_all(tasks).await;
            each.into_iter().map(Result::unwrap).sum::<u32>()
        })
    };
    assert_eq!(run(&pro, "user:1"), 40);
    assert_eq!(run(&free, "user:2"), 2);
    // The same stored options, a window later: the budgets are full again.
    clock.advance(Duration::from_secs(60));
    assert_eq!(run(&pro, "user:1"), 40);
    assert_eq!(run(&free, "user:2"), 2);
    let stats = pro.service.stats();
    assert_eq!(stats.by_tier["pro"].allowed, 80);
    assert_eq!(stats.by_tier["free"].allowed, 4);
    assert_eq!(stats.by_tier["free"].denied, 156);
}

/// `let f = service.consume(key, &Options::new().tier("pro")); f.await` was E0716 while
/// `Options` borrowed its tier: the temporary options are dropped before the future runs.
#[test]
fn options_built_in_the_call_may_be_dropped_before_the_future_is_awaited() {
    let (service, _clock) = service(tiers());
    let consumed = service.consume("k", &Options::new().tier("free"));
    let looked = service.status("k", &Options::new().tier(String::from("free")));
    let enforced = service.enforce("k", &Options::new().tier("free"));
    let checked = service.check("k", &Options::new().tier("free"));
    assert!(now(consumed).unwrap().allowed);
    assert_eq!(now(looked).unwrap().remaining, 1);
    assert!(now(enforced).is_ok());
    assert!(!now(checked).unwrap().allowed);
    let reset = service.reset_with("k", &Options::new().tier("free"));
    assert!(now(reset).unwrap());
    assert!(
        now(service.consume("k", &Options::new().tier("free")))
            .unwrap()
            .allowed
    );
}

/// The same for stacked limits: the futures of `consume_all` / `enforce_all` borrow the keys,
/// not the slice of limits or its options, so both may be temporaries.
#[test]
fn stacked_limits_built_in_the_call_may_be_dropped_before_the_future_is_awaited() {
    let (service, _clock) = service(tiers());
    let burst = || Options::new().tier("free").budget("burst");
    let consumed = service.consume_all(&[("k", &burst()), ("k", &Options::new().tier("free"))]);
    let enforced = service.enforce_all(&[("k", &burst()), ("k", &Options::new().tier("free"))]);
    assert!(now(consumed).unwrap().iter().all(|d| d.allowed));
    assert!(now(enforced).is_ok());
    // Two of each spent (free: 2 per window): the third call is refused as one.
    let refused = service.enforce_all(&[("k", &burst()), ("k", &Options::new().tier("free"))]);
    assert!(matches!(now(refused), Err(Error::Exceeded(_))));
    assert_eq!(now(service.status("k", &burst())).unwrap().remaining, 0);
}

#[test]
fn futures_decide_nothing_until_polled() {
    let (service, _clock) = service(tiers());
    let free = Options::new().tier("free");
    drop(service.consume("k", &free));
    drop(service.consume("k", &free));
    assert_eq!(now(service.status("k", &free)).unwrap().remaining, 2);
}

const SEARCH: Options = Options::for_tier("pro").cost(4).burst(2);
const PLAIN: Options = Options::new()
    .limit(3)
    .strategy(Strategy::FixedWindow)
    .refill(1)
    .consume(true);
static TIER: Name = Name::new("pro");

#[test]
fn const_options_name_a_static_tier() {
    assert_eq!(SEARCH.tier.as_deref(), Some("pro"));
    assert_eq!(SEARCH, Options::new().tier(TIER.clone()).cost(4).burst(2));
    let (service, _clock) = service(tiers());
    // 40 + burst 2, 4 at a time: ten calls fit, the eleventh does not.
    for _ in 0..10 {
        assert!(now(service.consume("k", &SEARCH)).unwrap().allowed);
    }
    let refused = now(service.consume("k", &SEARCH)).unwrap();
    assert!(!refused.allowed);
    assert_eq!((refused.limit, refused.remaining), (42, 2));
    assert_eq!(PLAIN.overrides.limit, Some(3));
}

#[test]
fn names_are_equal_by_their_text() {
    let shared: Arc<str> = Arc::from("pro");
    let names = [
        Name::new("pro"),
        Name::from("pro"),
        Name::from(String::from("pro")),
        Name::from(shared),
        Name::from(Box::<str>::from("pro")),
    ];
    for name in &names {
        assert_eq!(name, &names[0]);
        assert_eq!(name.as_str(), "pro");
        assert_eq!(format!("{name}/{name:?}"), "pro/\"pro\"");
    }
}

// ---------------------------------------------------------------------------------------
// Windows.

#[test]
fn windows_as_text_in_every_builder() {
    let text = Config::builder()
        .default_window("90s")
        .tier(Tier::new("t", 5).window("1h30m"))
        .build()
        .unwrap();
    let durations = Config::builder()
        .default_window(Duration::from_secs(90))
        .tier(Tier::new("t", 5).window(Duration::from_secs(5_400)))
        .build()
        .unwrap();
    assert_eq!(text.default_window(), Duration::from_secs(90));
    assert_eq!(text.tiers(), durations.tiers());
    assert_eq!(text.tiers()[0].quota.window(), Duration::from_secs(5_400));

    // A window given as a `String`, as read from somewhere.
    let from_env = String::from("2m");
    let tier = Tier::new("env", 1)
        .window(&from_env)
        .window(from_env.clone());
    let config = Config::builder().tier(tier).build().unwrap();
    assert_eq!(config.tiers()[0].quota.window(), Duration::from_secs(120));

    assert_eq!(
        Overrides::new().window("500ms"),
        Overrides::new().window(Duration::from_millis(500))
    );
    assert_eq!(
        Options::new().limit(1).window("10s"),
        Options::new().limit(1).window(Duration::from_secs(10))
    );
    assert_eq!(Window::from("1m"), Window::from(Duration::from_secs(60)));

    let (service, clock) = service(Config::default());
    let opts = Options::new().limit(1).window("10s");
    let first = now(service.consume("k", &opts)).unwrap();
    assert_eq!(first.window, Duration::from_secs(10));
    assert!(!now(service.consume("k", &opts)).unwrap().allowed);
    clock.advance(Duration::from_secs(10));
    assert!(now(service.consume("k", &opts)).unwrap().allowed);
}

#[test]
fn the_module_builder_takes_a_window_as_text() {
    let module = Module::builder()
        .default_window("15s")
        .tier(Tier::new("t", 1).window("2s"))
        .init()
        .unwrap();
    assert_eq!(
        module.service().config().default_window(),
        Duration::from_secs(15)
    );
    assert_eq!(
        module.service().config().tiers()[0].quota.window(),
        Duration::from_secs(2)
    );
}

#[test]
fn a_bad_window_in_a_configuration_is_an_error_naming_its_field() {
    let Err(Error::InvalidConfig(e)) = Config::builder()
        .default_window("soon")
        .tier(Tier::new("pro", 1).window("1x"))
        .tier(Tier::new("zero", 1).window(Duration::ZERO))
        .build()
    else {
        panic!("a bad window was accepted");
    };
    assert!(e.has("default_window"), "{e}");
    assert!(e.has("tiers.pro.window"), "{e}");
    assert!(e.has("tiers.zero.window"), "{e}");
    assert!(e.to_string().contains("\"1x\""), "{e}");
    assert!(e.to_string().contains("\"soon\""), "{e}");
}

/// Every way through the service with options whose window text is not one: an error, and
/// nothing spent.
#[test]
fn a_bad_window_at_run_time_is_refused_with_a_typed_error() {
    let (service, _clock) = service(tiers());
    for (opts, rule) in [
        (Options::new().window("1x"), QuotaError::InvalidWindowText),
        (Options::new().window(""), QuotaError::InvalidWindowText),
        (
            Options::new().tier("free").window("later"),
            QuotaError::InvalidWindowText,
        ),
        (Options::new().limit(5).window("0s"), QuotaError::ZeroWindow),
        (
            Options::new().limit(5).window("400d"),
            QuotaError::WindowTooLong,
        ),
    ] {
        assert_eq!(opts.overrides.problem(), Some(rule));
        let refused = |r: Result<_, Error>| match r {
            Err(Error::InvalidQuota(e)) => assert_eq!(e, rule, "{opts:?}"),
            other => panic!("{opts:?}: {other:?}"),
        };
        refused(now(service.consume("k", &opts)).map(drop));
        refused(now(service.check("k", &opts)).map(drop));
        refused(now(service.enforce("k", &opts)).map(drop));
        refused(now(service.status("k", &opts)).map(drop));
        refused(now(service.reset_with("k", &opts)).map(drop));
        refused(service.quota_for(&opts).map(drop));
        let good = Options::new().limit(5).budget("other");
        refused(now(service.consume_all(&[("k", &good), ("k", &opts)])).map(drop));
        refused(now(service.enforce_all(&[("k", &good), ("k", &opts)])).map(drop));
        assert_eq!(
            now(service.status("k", &good)).unwrap().remaining,
            5,
            "a stacked call refused for a bad window spent nothing"
        );
    }
    assert_eq!(service.stats().total.allowed, 0);
}

/// Overrides that hold only a bad window are not "no overrides": the call must not fall
/// through to the default limit's quota, resolved ahead for calls that override nothing.
#[test]
fn a_bad_window_alone_is_not_decided_under_the_default_limit() {
    let (service, _clock) = service(Config::default());
    let opts = Options::new().window("1x");
    assert!(!opts.overrides.is_empty());
    assert!(matches!(
        now(service.consume("k", &opts)),
        Err(Error::InvalidQuota(QuotaError::InvalidWindowText))
    ));
    // A later good window replaces the bad one.
    let fixed = opts.window("1m");
    assert_eq!(fixed.overrides.problem(), None);
    assert!(now(service.consume("k", &fixed)).unwrap().allowed);
}

/// A bad window in a layer's or an annotated fn's options would be refused the same way:
/// they reach the service through the same resolution.
#[test]
fn a_good_window_then_a_bad_one_is_bad() {
    let opts = Options::new().limit(3).window("1m").window("one minute");
    assert_eq!(opts.overrides.window, None);
    assert_eq!(
        opts.overrides.problem(),
        Some(QuotaError::InvalidWindowText)
    );
    assert!(opts.overrides.to_string().contains("invalid window"));
}

// ---------------------------------------------------------------------------------------
// Times on a decision.

#[test]
fn reset_at_is_a_time_and_agrees_with_reset_after_and_the_header() {
    let (service, clock) = service(tiers());
    let free = Options::new().tier("free");
    clock.advance(Duration::from_millis(250));
    let d = now(service.consume("k", &free)).unwrap();
    let at = START + Duration::from_millis(250);
    assert_eq!(d.reset_after, Duration::from_secs(60));
    assert_eq!(d.reset_at(), UNIX_EPOCH + at + d.reset_after);
    let headers: std::collections::HashMap<_, _> = d.headers().into_iter().collect();
    // Unix seconds, rounded up.
    assert_eq!(
        headers["x-ratelimit-reset"],
        (at.as_secs() + 61).to_string()
    );

    // A sub-millisecond reset is rounded up to the next millisecond, like `reset_after`.
    let (service, clock) = ratelimit_tests::service(Config::default());
    clock.advance(Duration::from_nanos(1));
    let opts = Options::new().limit(1).window(Duration::from_millis(3));
    let d = now(service.consume("k", &opts)).unwrap();
    assert_eq!(d.reset_after, Duration::from_millis(3));
    assert_eq!(d.reset_at(), UNIX_EPOCH + START + Duration::from_millis(4));
    let refused = now(service.consume("k", &opts)).unwrap();
    assert_eq!(refused.reset_at(), d.reset_at());
    assert_eq!(refused.retry_after, Some(Duration::from_millis(3)));
}
