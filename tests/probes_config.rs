//! Probes of configuration: `Config::builder()` / `Module::builder()`, `Config::from_toml_str`,
//! `from_json_str` and `from_file`, `Tier` and its setters, per-call `Options` overrides, and a
//! live `reload`. Ways a configuration could limit less than it says without an error, an
//! error that does not name the field at fault, or a panic: every numeric field at its bounds,
//! window texts a reader could mistype, files with typos, duplicates and tables in the wrong
//! place, tier names outside the rule, settings given twice, overrides that make an invalid
//! quota at call time, a reload that does not validate, and one configuration written both
//! ways deciding alike. Exact counts, a hand-driven clock (a `ManualClock`), no sleeps.

use std::time::Duration;

use std::sync::Arc;

use ratelimit::store::{Request, Stacked, Store};
use ratelimit::{
    Config, Decision, Error, ManualClock, MemoryOptions, MemoryStore, Module, Options, Quota,
    QuotaError, RateLimitService, StoreConfig, Strategy, Tier, MAX_CAPACITY, MAX_WINDOW,
};
use ratelimit_tests::config_errors::{fields, invalid};
use ratelimit_tests::{now, serial, service, LikeMemory, Rng, START};

const MINUTE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// Helpers.

/// `text` as a TOML basic string, every control character escaped.
fn toml_str(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Calls admitted out of `calls` of `options` on `key`, at the clock's instant.
fn admitted(service: &RateLimitService, key: &str, options: &Options, calls: u64) -> u64 {
    (0..calls)
        .map(|_| u64::from(now(service.consume(key, options)).unwrap().allowed))
        .sum()
}

/// A file of its own under the system's temporary directory for one test, removed on drop.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, contents: &[u8]) -> TempFile {
        let path = std::env::temp_dir().join(format!(
            "ratelimit-probes-config-{}-{name}",
            std::process::id()
        ));
        std::fs::write(&path, contents).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

// ---------------------------------------------------------------------------------------------
// Numeric fields at their bounds.

/// A tier limit of 0, 1 and `MAX_CAPACITY` is the limit written: 0 refuses the first call with
/// a retry after one window, 1 admits one, the largest holds all of its capacity.
#[test]
fn tier_limits_at_zero_one_and_max_capacity_are_exactly_the_limit_written() {
    let config = Config::builder()
        .tier(Tier::new("none", 0).window("1m"))
        .tier(Tier::new("one", 1).window("1m"))
        .tier(Tier::new("max", MAX_CAPACITY).window("1m"))
        .build()
        .unwrap();
    assert_eq!(config.tier("max").unwrap().quota.capacity(), MAX_CAPACITY);
    let (service, clock) = service(config);

    let none = Options::new().tier("none");
    let refused = now(service.consume("k", &none)).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, Some(MINUTE));
    assert_eq!(admitted(&service, "k", &Options::new().tier("one"), 3), 1);

    let max = Options::new().tier("max");
    let first = now(service.consume("k", &max)).unwrap();
    assert!(first.allowed);
    assert_eq!(
        (first.limit, first.remaining),
        (MAX_CAPACITY, MAX_CAPACITY - 1)
    );
    clock.advance(MINUTE);
    assert_eq!(admitted(&service, "k", &Options::new().tier("one"), 3), 1);
    assert!(!now(service.consume("k", &none)).unwrap().allowed);
}

/// `limit + burst` past `MAX_CAPACITY`, or past `u64::MAX`, is an error naming the tier's
/// field, from the builder and from a file; never a capacity that wrapped or was cut down.
#[test]
fn a_tier_limit_and_burst_past_max_capacity_is_an_error_naming_the_tier() {
    let e = invalid(
        Config::builder()
            .tier(Tier::new("limit", MAX_CAPACITY + 1))
            .tier(Tier::new("sum", MAX_CAPACITY).burst(1))
            .tier(Tier::new("burst", 1).burst(u64::MAX))
            .tier(Tier::new("wraps", u64::MAX).burst(u64::MAX))
            .tier(Tier::new("fits", MAX_CAPACITY - 7).burst(7))
            .build(),
    );
    for tier in ["limit", "sum", "burst", "wraps"] {
        let problem = e
            .problems
            .iter()
            .find(|(f, _)| f.starts_with(&format!("tiers.{tier}.")))
            .unwrap_or_else(|| panic!("tier {tier} not named: {e}"));
        assert!(problem.1.contains("limit + burst"), "{e}");
    }
    assert_eq!(e.problems.len(), 4, "{e}");

    let toml = |limit: &str, burst: &str| {
        Config::from_toml_str(&format!("[tiers.t]\nlimit = {limit}\nburst = {burst}\n"))
    };
    let e = invalid(toml("4294967296", "0"));
    assert_eq!(fields(&e), ["tiers.t.limit"]);
    let e = invalid(toml("1", "9223372036854775807"));
    assert!(e.problems[0].0.starts_with("tiers.t."), "{e}");
    // Past what TOML's integers hold: the text's own error, by its field.
    let e = invalid(toml("18446744073709551615", "0"));
    assert!(
        e.to_string().contains("limit = 18446744073709551615"),
        "{e}"
    );
    let fits = toml("4294967294", "1").unwrap();
    assert_eq!(fits.tier("t").unwrap().quota.capacity(), MAX_CAPACITY);
}

/// The module's `burst_limit` past what any limit can hold is reported as `burst_limit`: the
/// one field at fault, which the user set, not `default_limit` and every tier's `limit`,
/// which they did not touch.
#[test]
fn a_module_burst_past_max_capacity_is_an_error_naming_burst_limit() {
    let e = invalid(
        Config::builder()
            .burst_limit(MAX_CAPACITY)
            .tier(Tier::new("pro", 10))
            .build(),
    );
    assert!(
        e.has("burst_limit") || e.to_string().contains("burst_limit"),
        "{e}"
    );
}

/// `default_limit` past `MAX_CAPACITY` is an error naming `default_limit`, in code and in a
/// file; `MAX_CAPACITY` itself is the limit.
#[test]
fn a_default_limit_past_max_capacity_is_an_error_naming_default_limit() {
    let e = invalid(Config::builder().default_limit(MAX_CAPACITY + 1).build());
    assert_eq!(fields(&e), ["default_limit"]);
    let e = invalid(Config::from_toml_str("default_limit = 4294967296"));
    assert_eq!(fields(&e), ["default_limit"]);
    let e = invalid(Config::from_toml_str("default_limit = -1"));
    assert_eq!(fields(&e), ["default_limit"]);
    let max = Config::builder()
        .default_limit(MAX_CAPACITY)
        .build()
        .unwrap();
    assert_eq!(max.default_quota().unwrap().capacity(), MAX_CAPACITY);
}

/// A tier's own burst of 0 is a burst: the module's `burst_limit` does not replace it. In code
/// and in a file, the tier admits its limit and not one call more.
#[test]
fn a_tiers_own_burst_of_zero_is_not_replaced_by_the_module_burst() {
    let code = Config::builder()
        .burst_limit(5)
        .tier(Tier::new("strict", 2).window("1m").burst(0))
        .tier(Tier::new("loose", 2).window("1m"))
        .build()
        .unwrap();
    let file = Config::from_toml_str(
        "burst_limit = 5\n[tiers.strict]\nlimit = 2\nwindow = \"1m\"\nburst = 0\n\
         [tiers.loose]\nlimit = 2\nwindow = \"1m\"\n",
    )
    .unwrap();
    assert_eq!(code, file);
    let (service, _clock) = service(file);
    assert_eq!(
        admitted(&service, "k", &Options::new().tier("strict"), 10),
        2
    );
    assert_eq!(
        admitted(&service, "k", &Options::new().tier("loose"), 10),
        7
    );
}

/// README: "A limit of `0` refuses every call". A tier written with a limit of 0 (a plan for
/// suspended users, say) refuses every call, whatever burst the module gives other limits.
#[test]
fn a_tier_limit_of_zero_refuses_every_call_even_under_a_module_burst() {
    let config = Config::builder()
        .burst_limit(5)
        .tier(Tier::new("suspended", 0).window("1m"))
        .build()
        .unwrap();
    let (service, _clock) = service(config);
    assert_eq!(
        admitted(&service, "k", &Options::new().tier("suspended"), 10),
        0
    );
}

/// Queue priorities at `i32::MIN` and `i32::MAX` are kept as written; one past them in a file
/// is an error naming the tier's `priority`.
#[test]
fn priorities_at_the_bounds_are_kept_and_past_them_are_named() {
    let config = Config::from_toml_str(
        "[tiers.low]\nlimit = 1\npriority = -2147483648\n[tiers.high]\nlimit = 1\npriority = 2147483647\n",
    )
    .unwrap();
    assert_eq!(config.tier("low").unwrap().priority, i32::MIN);
    assert_eq!(config.tier("high").unwrap().priority, i32::MAX);
    let code = Config::builder()
        .tier(Tier::new("low", 1).priority(i32::MIN))
        .tier(Tier::new("high", 1).priority(i32::MAX))
        .build()
        .unwrap();
    assert_eq!(code, config);
    for past in ["2147483648", "-2147483649", "1.5", "\"10\""] {
        let e = invalid(Config::from_toml_str(&format!(
            "[tiers.t]\nlimit = 1\npriority = {past}\n"
        )));
        assert_eq!(fields(&e), ["tiers.t.priority"], "{past}");
    }
}

/// The queue's size and timeout: 0 is an error naming the field, 1 and the largest values are
/// kept exactly; a timeout past the longest window, or given as a bare number, is named.
#[test]
fn queue_size_and_timeout_at_their_bounds_are_kept_or_named() {
    let one = Config::builder()
        .max_queue_size(1)
        .queue_timeout(Duration::from_nanos(1))
        .build()
        .unwrap();
    assert_eq!(
        (one.max_queue_size(), one.queue_timeout()),
        (1, Duration::from_nanos(1))
    );
    let max = Config::builder()
        .max_queue_size(usize::MAX)
        .queue_timeout(MAX_WINDOW)
        .build()
        .unwrap();
    assert_eq!(
        (max.max_queue_size(), max.queue_timeout()),
        (usize::MAX, MAX_WINDOW)
    );
    for timeout in [
        Duration::ZERO,
        MAX_WINDOW + Duration::from_nanos(1),
        Duration::MAX,
    ] {
        let e = invalid(Config::builder().queue_timeout(timeout).build());
        assert_eq!(fields(&e), ["queue_timeout"], "{timeout:?}");
    }
    for (text, field) in [
        ("max_queue_size = 0", "max_queue_size"),
        ("max_queue_size = 1.0", "max_queue_size"),
        ("max_queue_size = \"10\"", "max_queue_size"),
        ("queue_timeout = 5", "queue_timeout"),
        ("queue_timeout = \"5\"", "queue_timeout"),
        ("queue_enabled = \"true\"", "queue_enabled"),
    ] {
        assert_eq!(
            fields(&invalid(Config::from_toml_str(text))),
            [field],
            "{text}"
        );
    }
}

/// A value of the wrong type in the `[store]` table is refused naming its key, and a key of the
/// other store's is refused by name (the table was an enum tagged by `type`, which lost the
/// path inside it: `max_keys = -1`, `"10"` and `sweep_interval = 5` were all reported on
/// `store`, never naming the key).
#[test]
fn a_wrong_type_in_the_store_table_is_refused_naming_its_key() {
    for (text, field) in [
        (
            "[store]\ntype = \"memory\"\nmax_keys = -1\n",
            "store.max_keys",
        ),
        (
            "[store]\ntype = \"memory\"\nmax_keys = \"10\"\n",
            "store.max_keys",
        ),
        (
            "[store]\ntype = \"memory\"\nsweep_interval = 5\n",
            "store.sweep_interval",
        ),
        (
            "[store]\ntype = \"memory\"\nurl = \"redis://h\"\n",
            "store.url",
        ),
        ("[store]\ntype = \"memory\"\npods = 2\n", "store.pods"),
        (
            "[store]\ntype = \"redis\"\nmax_keys = 5\n",
            "store.max_keys",
        ),
        (
            "[store]\ntype = \"redis\"\ncluster = \"yes\"\n",
            "store.cluster",
        ),
    ] {
        let e = invalid(Config::from_toml_str(text));
        assert!(e.has(field), "{text}: {e}");
    }
}

/// The memory store's cap: `max_keys = 1` from a file holds one key and refuses a second with
/// `StoreFull`, never admitting it untracked; 0 keys, a zero sweep and a bad sweep text are
/// errors naming their field.
#[test]
fn memory_store_bounds_from_a_file_are_exact_or_named() {
    let config = Config::from_toml_str("[store]\ntype = \"memory\"\nmax_keys = 1\n").unwrap();
    let (service, _clock) = service(config);
    assert!(now(service.consume("a", &Options::new())).unwrap().allowed);
    match now(service.consume("b", &Options::new())) {
        Err(Error::StoreFull { max_keys: 1 }) => {}
        other => panic!("a second key past max_keys = 1: {other:?}"),
    }
    assert!(now(service.consume("a", &Options::new())).unwrap().allowed);
    assert_eq!(service.stats().total.allowed, 2);

    for (text, field) in [
        (
            "[store]\ntype = \"memory\"\nmax_keys = 0\n",
            "store.max_keys",
        ),
        (
            "[store]\ntype = \"memory\"\nsweep_interval = \"0s\"\n",
            "store.sweep_interval",
        ),
        (
            "[store]\ntype = \"memory\"\nsweep_interval = \"10\"\n",
            "store.sweep_interval",
        ),
    ] {
        let e = invalid(Config::from_toml_str(text));
        assert_eq!(fields(&e), [field], "{text}: {e}");
    }
    let e = invalid(
        Config::builder()
            .store(StoreConfig::Memory(
                MemoryOptions::default().sweep_interval(Duration::ZERO),
            ))
            .build(),
    );
    assert_eq!(fields(&e), ["store.sweep_interval"]);
}

/// A refill of 0 tokens, or of more than one token a nanosecond, is an error naming the
/// refill's field: the tier's `refill`, the module's `token_refill_rate`.
#[test]
fn refills_of_zero_or_past_one_token_a_nanosecond_name_their_field() {
    let e = invalid(
        Config::builder()
            .strategy(Strategy::TokenBucket)
            .tier(Tier::new("zero", 1).refill(0))
            .tier(Tier::new("fast", 1).window("1s").refill(1_000_000_001))
            .build(),
    );
    assert_eq!(
        fields(&e),
        ["tiers.zero.refill", "tiers.fast.refill"],
        "{e}"
    );
    let e = invalid(Config::builder().token_refill_rate(u64::MAX).build());
    assert_eq!(fields(&e), ["token_refill_rate"]);
    let e = invalid(Config::from_toml_str("[tiers.t]\nlimit = 1\nrefill = 0\n"));
    assert_eq!(fields(&e), ["tiers.t.refill"]);
}

/// A limit whose window is too short for it (more than one call a nanosecond) is refused, and
/// the error names what the user wrote: the window (or the limit), not a refill they never set.
#[test]
fn a_window_too_short_for_its_limit_is_an_error_naming_the_window() {
    let e = invalid(
        Config::builder()
            .tier(Tier::new("t", 2).window(Duration::from_nanos(1)))
            .build(),
    );
    assert!(e.has("tiers.t.window") || e.has("tiers.t.limit"), "{e}");
    let e = invalid(
        Config::builder()
            .default_window(Duration::from_nanos(1))
            .build(),
    );
    assert!(e.has("default_window") || e.has("default_limit"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Windows.

/// A window field of a file: its name, a document setting it to a TOML string, and its value
/// in the configuration built.
type FieldReader = (&'static str, fn(&str) -> String, fn(&Config) -> Duration);

/// A configuration with one window field set to a duration in code.
type DurationBuilder = fn(Duration) -> Result<Config, Error>;

/// Every window field of a file reads the same texts: each is exactly the duration written or
/// an error naming that field alone. Zero, other units (`ns`, `us`, `M`, `H`), signs,
/// decimals, spaces inside, bare numbers, non-ASCII digits, units out of order or repeated,
/// NUL, past 366 days.
#[test]
fn window_texts_in_every_field_of_a_file_are_exact_or_an_error_naming_the_field() {
    let cases: &[(&str, Option<Duration>)] = &[
        ("1m", Some(MINUTE)),
        (" 2h ", Some(Duration::from_secs(7_200))),
        ("1m\n", Some(MINUTE)),
        ("1h30m", Some(Duration::from_secs(5_400))),
        ("0h1m", Some(MINUTE)),
        ("1m30s500ms", Some(Duration::from_millis(90_500))),
        ("1ms", Some(Duration::from_millis(1))),
        ("366d", Some(MAX_WINDOW)),
        ("8784h", Some(MAX_WINDOW)),
        (
            "365d23h59m59s999ms",
            Some(MAX_WINDOW - Duration::from_millis(1)),
        ),
        ("0s", None),
        ("0ms", None),
        ("0h0m", None),
        ("1ns", None),
        ("1us", None),
        ("1µs", None),
        ("-1m", None),
        ("+1m", None),
        ("1.5m", None),
        ("1,5m", None),
        ("1 m", None),
        ("1\u{2009}m", None),
        ("1M", None),
        ("1H", None),
        ("1Ms", None),
        ("1min", None),
        ("60", None),
        ("m", None),
        ("", None),
        ("   ", None),
        ("\u{0661}m", None),
        ("\u{FF11}m", None),
        ("1m\0", None),
        ("\u{0}1m", None),
        ("1m1m", None),
        ("1s1m", None),
        ("367d", None),
        ("366d1ms", None),
        ("99999999999999999999s", None),
        ("18446744073709551615ms", None),
        ("18446744073709551615d", None),
    ];
    let read: [FieldReader; 5] = [
        (
            "default_window",
            |w| format!("default_window = {w}\n"),
            |c| c.default_window(),
        ),
        (
            "tiers.t.window",
            |w| format!("[tiers.t]\nlimit = 1\nwindow = {w}\n"),
            |c| c.tier("t").unwrap().quota.window(),
        ),
        (
            "tiers.t.block_for",
            |w| format!("[tiers.t]\nlimit = 1\nblock_for = {w}\n"),
            |c| c.tier("t").unwrap().quota.block().unwrap(),
        ),
        (
            "queue_timeout",
            |w| format!("queue_timeout = {w}\n"),
            |c| c.queue_timeout(),
        ),
        (
            "store.sweep_interval",
            |w| format!("[store]\ntype = \"memory\"\nsweep_interval = {w}\n"),
            |c| match c.store() {
                StoreConfig::Memory(m) => m.sweep_interval,
                other => panic!("{other:?}"),
            },
        ),
    ];
    for (field, write, get) in read {
        for &(text, want) in cases {
            // The default limit (100) over a 1 ms default window is 100 calls a millisecond:
            // valid, and kept out of the way with a limit of 1.
            let doc = format!("default_limit = 1\n{}", write(&toml_str(text)));
            match (Config::from_toml_str(&doc), want) {
                (Ok(config), Some(want)) => assert_eq!(get(&config), want, "{field} {text:?}"),
                (Err(Error::InvalidConfig(e)), None) => {
                    assert_eq!(fields(&e), [field], "{field} {text:?}: {e}")
                }
                (other, want) => panic!("{field} {text:?}: {other:?}, wanted {want:?}"),
            }
        }
    }
}

/// Windows given as durations in code: zero, past 366 days and `Duration::MAX` are errors
/// naming the field; 1 ns and exactly 366 days are the window written.
#[test]
fn window_durations_in_code_are_exact_or_an_error_naming_the_field() {
    let builders: [(&str, DurationBuilder); 3] = [
        ("default_window", |d| {
            Config::builder().default_limit(1).default_window(d).build()
        }),
        ("tiers.t.window", |d| {
            Config::builder().tier(Tier::new("t", 1).window(d)).build()
        }),
        ("tiers.t.block_for", |d| {
            Config::builder()
                .tier(Tier::new("t", 1).block_for(d))
                .build()
        }),
    ];
    for (field, build) in builders {
        for d in [Duration::from_nanos(1), MAX_WINDOW] {
            let config = build(d).unwrap_or_else(|e| panic!("{field} {d:?}: {e}"));
            let got = match field {
                "default_window" => config.default_quota().unwrap().window(),
                "tiers.t.window" => config.tier("t").unwrap().quota.window(),
                _ => config.tier("t").unwrap().quota.block().unwrap(),
            };
            assert_eq!(got, d, "{field}");
        }
        for d in [
            Duration::ZERO,
            MAX_WINDOW + Duration::from_nanos(1),
            Duration::MAX,
        ] {
            assert_eq!(fields(&invalid(build(d))), [field], "{field} {d:?}");
        }
    }
}

/// A window shorter than a millisecond, given as a duration, is decided at that window: not
/// rounded up to a millisecond (tighter) or down to zero (refused or unlimited).
#[test]
fn a_window_under_a_millisecond_is_decided_exactly_as_written() {
    let window = Duration::from_micros(1_500);
    for strategy in Strategy::ALL {
        let config = Config::builder()
            .tier(Tier::new("t", 2).window(window).strategy(strategy))
            .build()
            .unwrap();
        assert_eq!(config.tier("t").unwrap().quota.window(), window);
        let (service, clock) = service(config);
        // Start on a window's boundary, for the fixed window's sake.
        let since = START.as_nanos() % window.as_nanos();
        clock.advance(window - Duration::from_nanos(since as u64));
        let t = Options::new().tier("t");
        assert_eq!(admitted(&service, "k", &t, 5), 2, "{strategy}");
        clock.advance(window * 2);
        assert_eq!(admitted(&service, "k", &t, 5), 2, "{strategy}");
    }
}

// ---------------------------------------------------------------------------------------------
// Files.

/// A typo in a key, at any depth, is refused with the key in the message and the path to it
/// as the field; never ignored, leaving the default in its place.
#[test]
fn a_misspelt_key_anywhere_in_a_file_is_refused_by_name() {
    for (text, field, word) in [
        ("default_limt = 1", "default_limt", "default_limt"),
        ("burst_limt = 1", "burst_limt", "burst_limt"),
        ("Enabled = false", "Enabled", "Enabled"),
        ("[tiers.pro]\nlimt = 5\n", "tiers.pro.limt", "limt"),
        (
            "[tiers.pro]\nlimit = 5\nwindw = \"1h\"\n",
            "tiers.pro.windw",
            "windw",
        ),
        (
            "[tiers.pro]\nlimit = 5\nBurst = 1\n",
            "tiers.pro.Burst",
            "Burst",
        ),
        (
            "[tiers.pro]\nlimit = 5\nblock-for = \"1h\"\n",
            "tiers.pro.block-for",
            "block-for",
        ),
        (
            "[store]\ntype = \"memory\"\nmaxkeys = 1\n",
            "store.maxkeys",
            "maxkeys",
        ),
        ("[tier.pro]\nlimit = 5\n", "tier", "tier"),
    ] {
        let e = invalid(Config::from_toml_str(text));
        assert_eq!(fields(&e), [field], "{text}: {e}");
        assert!(e.to_string().contains(word), "{text}: {e}");
    }
    let e = invalid(Config::from_json_str(
        r#"{"tiers": {"pro": {"limit": 5, "limt": 1}}}"#,
    ));
    assert_eq!(fields(&e), ["tiers.pro.limt"]);
}

/// A value of the wrong type, or a table where a value belongs (and the reverse), is refused
/// naming where it is; never read as a default.
#[test]
fn wrong_types_and_tables_in_the_wrong_place_are_refused_by_field() {
    for (text, field) in [
        ("enabled = \"false\"", "enabled"),
        ("enabled = 0", "enabled"),
        ("strategy = 1", "strategy"),
        ("default_window = 60", "default_window"),
        ("tiers = \"pro\"", "tiers"),
        ("[[tiers]]\nlimit = 5\n", "tiers"),
        ("[tiers]\nlimit = 5\n", "tiers.limit"),
        ("[tiers.pro]\nlimit = 1.5\n", "tiers.pro.limit"),
        ("[tiers.pro]\nlimit = 1e3\n", "tiers.pro.limit"),
        ("[tiers.pro]\nlimit = true\n", "tiers.pro.limit"),
        ("[tiers.pro]\nwindow = \"1m\"\n", "tiers.pro"),
        ("[tiers.pro]\nlimit = 5\nwindow = 60\n", "tiers.pro.window"),
        (
            "[tiers.pro]\nlimit = 5\n[tiers.pro.window]\nsize = \"1m\"\n",
            "tiers.pro.window",
        ),
        (
            "[tiers.pro]\nlimit = 5\nshadow = \"yes\"\n",
            "tiers.pro.shadow",
        ),
        (
            "[tiers.pro]\nlimit = 5\nstrategy = \"Token-Bucket\"\n",
            "tiers.pro.strategy",
        ),
        ("[tiers.pro]\nlimit = 5\nburst = -1\n", "tiers.pro.burst"),
        ("[pro]\nlimit = 5\n", "pro"),
        ("default_tier = 1", "default_tier"),
        ("[default_tier]\nname = \"pro\"\n", "default_tier"),
        ("store = \"memory\"", "store"),
        ("[store]\nmax_keys = 5\n", "store"),
        ("[store]\ntype = \"Memory\"\n", "store.type"),
        ("[store]\ntype = \"disk\"\n", "store.type"),
    ] {
        let e = invalid(Config::from_toml_str(text));
        assert_eq!(fields(&e), [field], "{text}: {e}");
    }
}

/// A tier given twice in one JSON object, or a field given twice in a tier or at the top, is
/// refused: a plain map keeps the last, so a second, looser definition would replace the
/// first unseen. (TOML refuses a repeated table by itself.)
#[test]
fn a_tier_or_a_field_given_twice_in_a_file_is_refused() {
    for text in [
        r#"{"tiers": {"pro": {"limit": 5}, "pro": {"limit": 5000}}}"#,
        r#"{"tiers": {"pro": {"limit": 5, "limit": 5000}}}"#,
        r#"{"default_limit": 5, "default_limit": 5000}"#,
        r#"{"tiers": {"pro": {"limit": 5}}, "tiers": {"pro": {"limit": 5000}}}"#,
    ] {
        let e = invalid(Config::from_json_str(text));
        assert!(
            e.to_string().contains("twice") || e.to_string().contains("duplicate"),
            "{text}: {e}"
        );
    }
    for text in [
        "[tiers.pro]\nlimit = 5\n[tiers.pro]\nlimit = 5000\n",
        "[tiers.pro]\nlimit = 5\nlimit = 5000\n",
        "default_limit = 5\ndefault_limit = 5000\n",
    ] {
        invalid(Config::from_toml_str(text));
    }
}

/// Tier names outside `A-Z a-z 0-9 - _ .` (empty, spaces, NUL, a newline, non-ASCII letters,
/// braces) or past 1024 bytes are refused naming the tier; names inside the rule, however
/// odd (`-`, `.`), are tiers that limit.
#[test]
fn tier_names_outside_the_rule_are_refused_and_odd_ones_inside_it_limit() {
    for name in [
        "", " ", "a b", "a\0b", "pro\n", "é", "pro™", "{pro}", "a:b", "a/b",
    ] {
        let e = invalid(Config::builder().tier(Tier::new(name, 1)).build());
        assert_eq!(fields(&e), [format!("tiers.{name:?}")], "{name:?}");
        let e = invalid(Config::from_toml_str(&format!(
            "[tiers.{}]\nlimit = 1\n",
            toml_str(name)
        )));
        assert_eq!(fields(&e), [format!("tiers.{name:?}")], "{name:?}");
    }
    let long = "a".repeat(1025);
    let e = invalid(Config::builder().tier(Tier::new(long, 1)).build());
    assert_eq!(fields(&e), ["tiers"]);
    let longest = "a".repeat(1024);

    let config = Config::from_toml_str(
        "[tiers.\"-\"]\nlimit = 1\n[tiers.\".\"]\nlimit = 2\n[tiers.\"a.b\"]\nlimit = 3\n",
    )
    .unwrap();
    let code = Config::builder()
        .tier(Tier::new(longest.clone(), 4))
        .tier(Tier::new("-", 1))
        .tier(Tier::new(".", 2))
        .tier(Tier::new("a.b", 3))
        .build()
        .unwrap();
    assert_eq!(code.tiers()[1..], config.tiers()[..]);
    let config = code;
    let (service, _clock) = service(config);
    for (name, limit) in [("-", 1), (".", 2), ("a.b", 3), (longest.as_str(), 4)] {
        let opts = Options::new().tier(name.to_owned());
        assert_eq!(admitted(&service, "k", &opts, 6), limit, "{name}");
    }
}

/// A default tier that is not a tier (absent, empty, in another case, or itself refused for
/// its name) is an error naming `default_tier`, never "no default tier".
#[test]
fn a_default_tier_that_is_not_a_tier_is_an_error_naming_default_tier() {
    for (builder, also) in [
        (Config::builder().default_tier(""), None),
        (
            Config::builder()
                .tier(Tier::new("pro", 1))
                .default_tier("Pro"),
            None,
        ),
        (
            Config::builder()
                .tier(Tier::new("bad name", 1))
                .default_tier("bad name"),
            Some("tiers.\"bad name\""),
        ),
        (
            Config::builder()
                .tier(Tier::new("pro", 1).window("1x"))
                .default_tier("pro"),
            Some("tiers.pro.window"),
        ),
    ] {
        let e = invalid(builder.build());
        assert!(
            e.has("default_tier") || also.is_some_and(|f| e.has(f)),
            "{e}"
        );
        if let Some(field) = also {
            assert!(e.has(field), "{e}");
        }
    }
    let e = invalid(Config::from_toml_str("default_tier = \"gold\"\n"));
    assert_eq!(fields(&e), ["default_tier"]);
}

/// Tiers whose names differ only in case are two tiers with two budgets; a call naming a
/// third spelling is refused as an unknown tier, spending from neither.
#[test]
fn tiers_differing_only_in_case_are_distinct_and_another_case_is_unknown() {
    let config = Config::from_toml_str(
        "[tiers.pro]\nlimit = 1\nwindow = \"1m\"\n[tiers.Pro]\nlimit = 2\nwindow = \"1m\"\n",
    )
    .unwrap();
    let (service, _clock) = service(config);
    match now(service.consume("k", &Options::new().tier("PRO"))) {
        Err(Error::UnknownTier { tier, .. }) => assert_eq!(tier, "PRO"),
        other => panic!("{other:?}"),
    }
    assert_eq!(admitted(&service, "k", &Options::new().tier("pro"), 4), 1);
    assert_eq!(admitted(&service, "k", &Options::new().tier("Pro"), 4), 2);
    assert_eq!(service.stats().total.allowed, 3);
}

/// `from_file`: a path that does not exist, a directory, an extension in another case or none,
/// bytes that are not UTF-8 and an empty file are each refused naming the path; a JSON text
/// in a `.toml` file is refused as TOML.
#[test]
fn files_that_cannot_be_read_as_their_extension_are_refused_naming_the_path() {
    let missing = std::env::temp_dir().join("ratelimit-probes-config-does-not-exist.toml");
    let dir = std::env::temp_dir();
    let upper = TempFile::new("upper.TOML", b"default_limit = 5\n");
    let none = TempFile::new("noext", b"default_limit = 5\n");
    let binary = TempFile::new("binary.toml", b"default_limit = \xff\xfe\n");
    let empty = TempFile::new("empty.json", b"\n\t \n");
    for path in [&missing, &dir, &upper.0, &none.0, &binary.0, &empty.0] {
        let e = invalid(Config::from_file(path));
        assert_eq!(
            fields(&e),
            [format!("file {}", path.display())],
            "{}",
            path.display()
        );
    }
    let json_in_toml = TempFile::new("json.toml", br#"{"default_limit": 5}"#);
    let e = invalid(Config::from_file(&json_in_toml.0));
    assert_eq!(fields(&e), ["toml"]);
    let good = TempFile::new("good.json", br#"{"default_limit": 5}"#);
    assert_eq!(Config::from_file(&good.0).unwrap().default_limit(), Some(5));
}

/// A text with no options (empty, or only comments) is the documented defaults: 100 calls a
/// minute on the sliding window for a call naming nothing, not "unlimited"; a file reduced to
/// its comments is either refused like an empty one or read as those same defaults.
#[test]
fn a_configuration_without_options_is_the_documented_defaults_never_unlimited() {
    for config in [
        Config::from_toml_str("").unwrap(),
        Config::from_toml_str("# limits\n\n").unwrap(),
        Config::from_json_str("{}").unwrap(),
    ] {
        assert!(config.enabled());
        let quota = config.default_quota().unwrap();
        assert_eq!(
            (quota.capacity(), quota.window(), quota.strategy()),
            (100, MINUTE, Strategy::SlidingWindow)
        );
        let (service, _clock) = service(config);
        assert_eq!(admitted(&service, "k", &Options::new(), 150), 100);
    }
    let comments = TempFile::new("comments.toml", b"# rate limits, see the wiki\n");
    match Config::from_file(&comments.0) {
        Err(Error::InvalidConfig(_)) => {}
        Ok(config) => assert_eq!(config, Config::default()),
        Err(other) => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The builder.

/// `enabled(false)` is the one way to admit everything, and even then every field is checked:
/// a disabled configuration with a bad field does not build (a reload switching it on could
/// not otherwise be trusted). In a file only the boolean `false` switches limiting off.
#[test]
fn a_disabled_configuration_admits_everything_and_still_checks_every_field() {
    let off = Config::builder()
        .enabled(false)
        .tier(Tier::new("t", 1).window("1m"))
        .build()
        .unwrap();
    let (service, _clock) = service(off);
    assert_eq!(admitted(&service, "k", &Options::new().tier("t"), 50), 50);
    let e = invalid(
        Config::builder()
            .enabled(false)
            .tier(Tier::new("t", 1).window("1x"))
            .default_limit(MAX_CAPACITY + 1)
            .build(),
    );
    assert_eq!(fields(&e), ["tiers.t.window", "default_limit"], "{e}");
    for text in ["enabled = \"false\"", "enabled = \"no\"", "enabled = 0"] {
        assert_eq!(fields(&invalid(Config::from_toml_str(text))), ["enabled"]);
    }
    assert!(Config::from_toml_str("enabled = true").unwrap().enabled());
}

/// A setting given twice keeps the last, exactly: a bad window replaced by a good one is the
/// good one (and the reverse is refused); a burst, a default limit and its absence likewise.
#[test]
fn a_setting_given_twice_keeps_the_last_exactly() {
    let config = Config::builder()
        .default_limit(5)
        .no_default_limit()
        .tier(
            Tier::new("t", 3)
                .window("1x")
                .window("1m")
                .burst(5)
                .burst(0)
                .strategy(Strategy::TokenBucket)
                .strategy(Strategy::FixedWindow),
        )
        .build()
        .unwrap();
    let t = config.tier("t").unwrap().quota;
    assert_eq!(
        (t.capacity(), t.window(), t.strategy()),
        (3, MINUTE, Strategy::FixedWindow)
    );
    assert_eq!(config.default_limit(), None);
    let (service, _clock) = service(config);
    assert!(matches!(
        now(service.consume("k", &Options::new())),
        Err(Error::NoLimit)
    ));
    let e = invalid(
        Config::builder()
            .tier(Tier::new("t", 3).window("1m").window("1x"))
            .build(),
    );
    assert_eq!(fields(&e), ["tiers.t.window"]);
    let back = Config::builder()
        .no_default_limit()
        .default_limit(2)
        .build()
        .unwrap();
    assert_eq!(back.default_limit(), Some(2));
}

/// The same tier added twice through the builder is refused as defined twice, whichever of
/// the two is looser; never the first or the last silently.
#[test]
fn the_same_tier_added_twice_through_the_module_builder_is_refused() {
    for (first, second) in [(5, 5_000), (5_000, 5), (5, 5)] {
        let e = invalid(
            Module::builder()
                .tier(Tier::new("pro", first))
                .tier(Tier::new("pro", second))
                .build(),
        );
        assert_eq!(fields(&e), ["tiers.pro"], "{first} then {second}");
        assert!(e.to_string().contains("defined twice"), "{e}");
    }
}

/// `Module::builder().init()` with a bad field is `InvalidConfig` naming it, and installs
/// nothing.
#[test]
fn module_init_with_a_bad_field_names_it_and_installs_nothing() {
    let _serial = serial();
    let err = Module::builder()
        .clock(ManualClock::new(START))
        .tier(Tier::new("pro", 10).window("10 minutes"))
        .queue_timeout("0s")
        .init()
        .map(drop)
        .unwrap_err();
    let Error::InvalidConfig(e) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(fields(e), ["queue_timeout", "tiers.pro.window"], "{e}");
    assert!(!Module::is_initialized());
}

/// A refill on a strategy that does not refill (a token-bucket setting on the sliding window)
/// is either refused naming the refill or honoured: a tier of 60 an hour refilling 1 an hour,
/// once drained, admits 1 call in the next hour, not 60.
#[test]
fn a_refill_on_a_strategy_that_does_not_refill_is_refused_or_honoured() {
    let built = Config::builder()
        .tier(Tier::new("metered", 60).window("1h").refill(1))
        .build();
    let config = match built {
        Err(Error::InvalidConfig(e)) => {
            assert!(e.has("tiers.metered.refill"), "{e}");
            return;
        }
        other => other.unwrap(),
    };
    let (service, clock) = service(config);
    let metered = Options::new().tier("metered");
    assert_eq!(admitted(&service, "k", &metered, 60), 60);
    clock.advance(Duration::from_secs(3_600));
    assert_eq!(admitted(&service, "k", &metered, 60), 1);
}

/// A store of one's own that keeps no blocks and does not enforce them: the memory store's
/// decisions on the quota without its block.
struct NoBlocks(MemoryStore);

impl Store for NoBlocks {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        let q = request.quota();
        let unblocked = Quota::from_parts(
            q.limit(),
            q.window(),
            q.burst(),
            q.strategy(),
            Some(q.refill_per_window()),
        )
        .expect("the quota was valid with its block");
        let plain = Request::new(
            request.key(),
            &unblocked,
            request.cost(),
            request.now(),
            request.mode(),
        )?;
        Store::decide(&self.0, plain).await
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        Store::decide_all(&self.0, stacked).await
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&self.0, key).await
    }
}

/// `block_for` on a store that keeps no blocks cannot be enforced: a configuration with a
/// tier that blocks is refused when it is built for such a store (naming the tier, and
/// `block_for` in the problem), as it is by a reload; and a call asking for a block on such a
/// store is a typed error that spends nothing.
#[test]
fn a_block_on_a_store_that_keeps_no_blocks_is_refused_naming_block_for() {
    let blocking = || Tier::new("t", 2).window("1m").block_for("1h");
    for e in [
        invalid(
            Module::builder()
                .store(StoreConfig::custom(NoBlocks(MemoryStore::new())))
                .tier(blocking())
                .build(),
        ),
        invalid(
            Config::builder()
                .store(StoreConfig::custom(LikeMemory::without_refunds()))
                .tier(blocking())
                .build(),
        ),
    ] {
        assert_eq!(e.problems.len(), 1, "{e}");
        assert!(e.problems[0].0.starts_with("tiers.t."), "{e}");
        assert!(e.problems[0].1.contains("block_for"), "{e}");
    }

    let clock = Arc::new(ManualClock::new(START));
    let service =
        RateLimitService::with_store(Config::default(), NoBlocks(MemoryStore::new()), clock)
            .unwrap();
    let e = match service.reload(Config::builder().tier(blocking()).build().unwrap()) {
        Err(Error::InvalidConfig(e)) => e,
        other => panic!("{other:?}"),
    };
    assert!(e.problems[0].1.contains("block_for"), "{e}");
    assert_eq!(service.stats().generation, 0);
    let blocking = Options::new()
        .limit(1)
        .block_for(Duration::from_secs(3_600));
    for _ in 0..3 {
        assert!(matches!(
            now(service.consume("k", &blocking)),
            Err(Error::InvalidQuota(QuotaError::Unsupported { .. }))
        ));
    }
    assert_eq!(service.stats().total.allowed, 0);
    assert_eq!(
        now(service.status("k", &Options::new().limit(1)))
            .unwrap()
            .remaining,
        1
    );
}

/// `RateLimitService::with_store` checks a configuration's quotas against the store as
/// `build` and `reload` do: a tier with `block_for` on a store that keeps no blocks is
/// refused, never run without its block. (Else: 2 calls, a refusal that should block the key
/// for an hour, and a minute later 2 more admitted.)
#[test]
fn with_store_refuses_a_tier_block_on_a_store_that_keeps_no_blocks() {
    let config = Config::builder()
        .tier(Tier::new("t", 2).window("1m").block_for("1h"))
        .build()
        .unwrap();
    let clock = ManualClock::new(START);
    let service = match RateLimitService::with_store(
        config,
        NoBlocks(MemoryStore::new()),
        Arc::new(clock.clone()),
    ) {
        Err(Error::InvalidConfig(e)) => {
            assert!(e.to_string().contains("block_for"), "{e}");
            return;
        }
        other => other.unwrap(),
    };
    let t = Options::new().tier("t");
    assert_eq!(admitted(&service, "k", &t, 3), 2);
    clock.advance(MINUTE);
    assert_eq!(
        admitted(&service, "k", &t, 3),
        0,
        "the key is blocked for an hour"
    );
}

/// A key prefix at 128 bytes (in one- or two-byte characters) is kept; one byte more, an
/// empty one, or one holding any whitespace (a tab, a no-break space) or a brace is an error
/// naming `key_prefix`.
#[test]
fn key_prefixes_at_their_bounds_are_kept_or_named() {
    for prefix in ["a".repeat(128), "é".repeat(64), "a:b".into()] {
        let config = Config::builder()
            .key_prefix(prefix.clone())
            .build()
            .unwrap();
        assert_eq!(config.key_prefix(), prefix);
    }
    for prefix in [
        "a".repeat(129),
        "é".repeat(65),
        String::new(),
        "a\tb".into(),
        "a\u{a0}b".into(),
        "a}".into(),
        "a\0".into(),
    ] {
        let e = invalid(Config::builder().key_prefix(prefix.clone()).build());
        assert!(
            fields(&e).iter().all(|f| *f == "key_prefix") && !e.problems.is_empty(),
            "{prefix:?}: {e}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Per-call overrides.

/// Overrides that make a quota no store can enforce (a capacity past the maximum or past
/// `u64::MAX`, a refill of 0 or faster than a token a nanosecond, a window of zero or past 366
/// days as a duration, a block past 366 days) are each `InvalidQuota` with the rule broken, at
/// every entry point, and spend nothing from the tier they are laid over.
#[test]
fn call_overrides_that_make_an_invalid_quota_are_typed_errors_that_spend_nothing() {
    let config = Config::builder()
        .tier(Tier::new("pro", 3).window("1m").burst(1))
        .build()
        .unwrap();
    let (service, _clock) = service(config);
    let pro = || Options::new().tier("pro");
    for (opts, rule) in [
        (pro().limit(MAX_CAPACITY), QuotaError::CapacityTooLarge),
        (pro().burst(MAX_CAPACITY), QuotaError::CapacityTooLarge),
        (pro().burst(u64::MAX), QuotaError::CapacityTooLarge),
        (
            pro().limit(u64::MAX).burst(u64::MAX),
            QuotaError::CapacityTooLarge,
        ),
        (pro().refill(0), QuotaError::ZeroRefill),
        (
            pro().window(Duration::from_nanos(1)),
            QuotaError::RefillTooFast,
        ),
        (pro().window(Duration::ZERO), QuotaError::ZeroWindow),
        (pro().window(Duration::MAX), QuotaError::WindowTooLong),
        (
            pro().block_for(MAX_WINDOW + Duration::from_nanos(1)),
            QuotaError::BlockTooLong,
        ),
    ] {
        let refused = |r: Result<(), Error>| match r {
            Err(Error::InvalidQuota(e)) => assert_eq!(e, rule, "{opts:?}"),
            other => panic!("{opts:?}: {other:?}"),
        };
        refused(now(service.consume("k", &opts)).map(drop));
        refused(now(service.check("k", &opts)).map(drop));
        refused(now(service.enforce("k", &opts)).map(drop));
        refused(now(service.status("k", &opts)).map(drop));
        refused(service.prepare(&opts).map(drop));
        refused(now(service.consume_all(&[("k", &pro()), ("k", &opts)])).map(drop));
    }
    assert_eq!(service.stats().total.allowed, 0);
    assert_eq!(now(service.status("k", &pro())).unwrap().remaining, 4);
}

/// A cost of 0 or above the capacity, and a tier that does not exist (empty, another case),
/// are typed errors at the call, never admissions.
#[test]
fn costs_and_tiers_a_call_cannot_have_are_typed_errors_never_admissions() {
    let config = Config::builder()
        .tier(Tier::new("pro", 3).window("1m"))
        .build()
        .unwrap();
    let (service, _clock) = service(config);
    assert!(matches!(
        now(service.consume("k", &Options::new().tier("pro").cost(0))),
        Err(Error::ZeroCost)
    ));
    assert!(matches!(
        now(service.consume("k", &Options::new().tier("pro").cost(4))),
        Err(Error::CostAboveCapacity {
            cost: 4,
            capacity: 3
        })
    ));
    assert!(matches!(
        now(service.consume("k", &Options::new().tier("pro").cost(u64::MAX))),
        Err(Error::CostAboveCapacity { .. })
    ));
    for tier in ["", "PRO", "pro ", "pro\0"] {
        assert!(
            matches!(
                now(service.consume("k", &Options::new().tier(tier.to_owned()))),
                Err(Error::UnknownTier { .. })
            ),
            "{tier:?}"
        );
    }
    assert_eq!(service.stats().total.allowed, 0);
    assert_eq!(
        admitted(&service, "k", &Options::new().tier("pro").cost(3), 2),
        1
    );
}

/// An override of one setting keeps the tier's others: a call giving only a limit is counted
/// over the tier's window (not the module's default), and one giving only a burst of 0 drops
/// the tier's burst, not its limit.
#[test]
fn an_override_of_one_setting_keeps_the_tiers_other_settings() {
    let config = Config::builder()
        .default_window("1s")
        .tier(Tier::new("pro", 10).window("1h").burst(5))
        .build()
        .unwrap();
    let (service, clock) = service(config);
    let limit = Options::new().tier("pro").limit(2);
    let (quota, tier) = service.quota_for(&limit).unwrap();
    assert_eq!(tier.as_deref(), Some("pro"));
    assert_eq!(
        (quota.limit(), quota.burst(), quota.window()),
        (2, 5, Duration::from_secs(3_600))
    );
    let no_burst = Options::new().tier("pro").burst(0);
    assert_eq!(admitted(&service, "a", &no_burst, 20), 10);
    clock.advance(Duration::from_secs(2));
    assert_eq!(admitted(&service, "a", &no_burst, 20), 0);
}

// ---------------------------------------------------------------------------------------------
// Reload.

/// A reload with problems (a capacity past the maximum, a window that is not one, a default
/// tier that is not a tier) is refused naming every one, and the running configuration goes
/// on counting exactly: what was spent stays spent, then the window ends as before.
#[test]
fn a_reload_that_does_not_validate_leaves_the_running_limits_counting() {
    let running = || Config::builder().tier(Tier::new("pro", 3).window("1m"));
    let (service, clock) = service(running().build().unwrap());
    let pro = Options::new().tier("pro");
    assert_eq!(admitted(&service, "k", &pro, 2), 2);

    let bad = Config::builder()
        .tier(Tier::new("pro", MAX_CAPACITY + 1).window("1m"))
        .tier(Tier::new("free", 1).window("one minute"))
        .default_tier("gold")
        .build();
    let e = invalid(bad);
    assert_eq!(
        fields(&e),
        ["tiers.free.window", "default_tier", "tiers.pro.limit"],
        "{e}"
    );
    // A valid configuration the store cannot carry (another memory store): refused too.
    let other_store = running()
        .tier(Tier::new("free", 100))
        .store(StoreConfig::Memory(MemoryOptions::default().max_keys(3)))
        .build()
        .unwrap();
    assert!(matches!(
        service.reload(other_store),
        Err(Error::InvalidConfig(_))
    ));
    assert_eq!(service.stats().generation, 0);
    assert_eq!(admitted(&service, "k", &pro, 5), 1);
    assert!(matches!(
        now(service.consume("k", &Options::new().tier("free"))),
        Err(Error::UnknownTier { .. })
    ));
    clock.advance(MINUTE);
    assert_eq!(admitted(&service, "k", &pro, 5), 3);
}

/// `Module::reload` with a builder whose fields do not validate is refused naming them; the
/// module keeps deciding under its configuration with its counts.
#[test]
fn a_module_reload_with_a_bad_field_changes_nothing() {
    let _serial = serial();
    let clock = ManualClock::new(START);
    let module = Module::builder()
        .clock(clock.clone())
        .tier(Tier::new("pro", 2).window("1m"))
        .init()
        .unwrap();
    let pro = Options::new().tier("pro");
    assert_eq!(admitted(module.service(), "k", &pro, 1), 1);
    let err = module
        .reload(
            Module::builder()
                .tier(Tier::new("pro", 1_000).window("1m").burst(u64::MAX))
                .burst_limit(3)
                .key_prefix(""),
        )
        .unwrap_err();
    let Error::InvalidConfig(e) = &err else {
        panic!("{err:?}")
    };
    assert!(e.has("key_prefix"), "{e}");
    assert!(fields(e).iter().any(|f| f.starts_with("tiers.pro.")), "{e}");
    assert_eq!(module.stats().generation, 0);
    assert_eq!(admitted(module.service(), "k", &pro, 5), 1);
    assert_eq!(
        module
            .service()
            .config()
            .tier("pro")
            .unwrap()
            .quota
            .capacity(),
        2
    );
    clock.advance(MINUTE);
    assert_eq!(admitted(module.service(), "k", &pro, 5), 2);
}

// ---------------------------------------------------------------------------------------------
// One configuration, two ways.

const BOTH_WAYS: &str = r#"
    default_window = "10s"
    default_limit = 4
    burst_limit = 1
    default_tier = "free"
    [tiers.free]
    limit = 2
    [tiers.pro]
    limit = 3
    window = "1m"
    burst = 2
    [tiers.slow]
    limit = 4
    window = "1h"
    strategy = "token-bucket"
    refill = 2
    [tiers.fixed]
    limit = 5
    window = "30s"
    strategy = "fixed-window"
    burst = 0
"#;

fn both_ways_builder(strategy: Strategy) -> ratelimit::ConfigBuilder {
    Config::builder()
        .strategy(strategy)
        .default_window(Duration::from_secs(10))
        .default_limit(4)
        .burst_limit(1)
        .tier(Tier::new("free", 2))
        .tier(Tier::new("pro", 3).window("1m").burst(2))
        .tier(
            Tier::new("slow", 4)
                .window("1h")
                .strategy(Strategy::TokenBucket)
                .refill(2),
        )
        .tier(
            Tier::new("fixed", 5)
                .window(Duration::from_secs(30))
                .strategy(Strategy::FixedWindow)
                .burst(0),
        )
        .default_tier("free")
}

/// One configuration written with the builder and in TOML (and JSON) decides every call alike
/// under every module strategy: the same admissions, remaining counts and retry-afters over a
/// random history of keys, tiers, costs and clock steps.
#[test]
fn the_same_limits_from_the_builder_and_from_a_file_decide_alike() {
    for strategy in Strategy::ALL {
        let text = format!("strategy = \"{strategy}\"\n{BOTH_WAYS}");
        let file = Config::from_toml_str(&text).unwrap();
        let code = both_ways_builder(strategy).build().unwrap();
        assert_eq!(code, file, "{strategy}");
        let (a, clock_a) = service(code);
        let (b, clock_b) = service(file);
        let options = [
            Options::new(),
            Options::new().tier("pro"),
            Options::new().tier("slow"),
            Options::new().tier("fixed").cost(2),
            Options::new().tier("free").limit(3),
        ];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut allowed, mut refused) = (0, 0);
        for step in 0..600 {
            let key = ["a", "b", "c"][rng.below(3) as usize];
            let opts = &options[rng.below(options.len() as u64) as usize];
            let left = now(a.consume(key, opts)).unwrap();
            let right = now(b.consume(key, opts)).unwrap();
            assert_eq!(
                (left.allowed, left.remaining, left.limit, left.retry_after),
                (
                    right.allowed,
                    right.remaining,
                    right.limit,
                    right.retry_after
                ),
                "{strategy} step {step}: {key} {opts:?}"
            );
            if left.allowed {
                allowed += 1;
            } else {
                refused += 1;
            }
            let step = Duration::from_millis(rng.below(4_000));
            clock_a.advance(step);
            clock_b.advance(step);
        }
        assert!(
            allowed > 50 && refused > 50,
            "{strategy}: {allowed}/{refused}"
        );
    }
}
