//! Regression tests for ways the Redis store failed open or broke (feature `redis`), each named
//! after the hole it closes. They go through the public API (`RateLimitService` over
//! `StoreConfig::Redis`) and plant state with a raw connection; the store's key format is not
//! assumed: a test makes one call, then finds the limiter's key with `SCAN`.

use std::time::{Duration, Instant};

use ratelimit::{Config, Error, Options, RateLimitService, RedisOptions, StoreConfig, Strategy};
use ratelimit_tests::redis_server::{is_horizon, prefix, RedisServer};
use ratelimit_tests::{redis_service, Captured};

/// Long enough that no window ends during a test.
const LONG: Duration = Duration::from_secs(20 * 24 * 3600);

/// A fresh prefix that is no other prefix's beginning (`…-1x` is not a prefix of `…-10x`), so
/// that `SCAN MATCH <prefix>*` finds this service's keys only.
fn fresh(name: &str) -> String {
    format!("{}x", prefix(name))
}

/// The one key the store wrote under `prefix`.
fn limiter_key(c: &mut redis::Connection, prefix: &str) -> String {
    let (_, keys): (u64, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("MATCH")
        .arg(format!("{prefix}*"))
        .arg("COUNT")
        .arg(1000)
        .query(c)
        .unwrap();
    let keys: Vec<String> = keys.into_iter().filter(|k| !is_horizon(k)).collect();
    assert_eq!(keys.len(), 1, "one key under {prefix}: {keys:?}");
    keys.into_iter().next().unwrap()
}

fn service(url: &str, prefix: &str) -> RateLimitService {
    redis_service(
        RedisOptions::new(url).timeout(Duration::from_secs(2)),
        prefix,
    )
}

#[test]
fn outside_a_tokio_runtime_the_store_refuses_instead_of_panicking() {
    let server = RedisServer::start();
    let service = service(&server.url(), &fresh("noruntime"));
    let opts = Options::new().limit(5).window(LONG);
    let results = [
        futures::executor::block_on(service.consume("k", &opts)).map(|_| ()),
        futures::executor::block_on(service.status("k", &opts)).map(|_| ()),
        futures::executor::block_on(service.reset("k", None)),
        futures::executor::block_on(service.redis_store().unwrap().connect()),
    ];
    for result in results {
        match result {
            Err(Error::Store { message }) => {
                assert!(message.contains("Tokio runtime"), "{message}")
            }
            other => panic!("refused with the store's error: {other:?}"),
        }
    }
}

/// In a Tokio runtime built without its timer or its IO driver, the store refuses with its
/// error (so the failure policy decides, as for a store that cannot answer) instead of
/// panicking in Tokio ("timers are disabled", "IO is disabled").
#[test]
fn a_runtime_without_its_timer_or_io_driver_is_refused_instead_of_panicking() {
    let server = RedisServer::start();
    let service = service(&server.url(), &fresh("nodriver"));
    let opts = Options::new().limit(5).window(LONG);
    let builder = tokio::runtime::Builder::new_current_thread;
    for (runtime, missing) in [
        (builder().enable_io().build().unwrap(), "enable_time"),
        (builder().enable_time().build().unwrap(), "enable_io"),
        (builder().build().unwrap(), "enable_time"),
    ] {
        let results = [
            runtime.block_on(service.consume("k", &opts)).map(|_| ()),
            runtime.block_on(service.reset("k", None)),
            runtime.block_on(service.redis_store().unwrap().connect()),
        ];
        for result in results {
            match result {
                Err(Error::Store { message }) => {
                    assert!(message.contains("Tokio runtime"), "{message}");
                    assert!(message.contains(missing), "{message}");
                }
                other => panic!("refused with the store's error: {other:?}"),
            }
        }
    }
    // The same store, in a runtime with both: decided.
    let full = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert!(full.block_on(service.consume("k", &opts)).unwrap().allowed);
}

#[tokio::test]
async fn percent_encoded_credentials_never_leak() {
    let socket = std::env::temp_dir().join(format!("{}.sock", fresh("sock")));
    let socket = socket.to_str().unwrap().to_owned();
    let server = RedisServer::start_with(&["--requirepass", "p@ss", "--unixsocket", &socket]);
    let port = server.port();
    // redis+unix URLs carry their credentials in the query.
    let unix = format!("redis+unix://{socket}?pass=p%40ss");
    let wrong_unix = format!("redis+unix://{socket}?db=0&pass=p%40sx");
    let good = format!("redis://:p%40ss@127.0.0.1:{port}");
    let wrong = format!("redis://:p%40sx@127.0.0.1:{port}");
    let user = format!("redis://default:p%40ss@127.0.0.1:{port}/0");
    let wrong_user = format!("redis://default:p%40sx@127.0.0.1:{port}/0");
    let raw = format!("redis://:p@sx@127.0.0.1:{port}");
    let opts = Options::new().limit(5).window(LONG);

    let mut texts = Vec::new();
    for url in [&good, &user, &unix] {
        let ok = service(url, &fresh("cred"));
        assert!(ok.consume("k", &opts).await.unwrap().allowed, "{url}");
        texts.push(format!("{ok:?}"));
        texts.push(format!("{:?}", ok.config()));
        texts.push(format!("{:?}", ok.redis_store().unwrap()));
    }
    for url in [&wrong, &wrong_user, &raw, &wrong_unix] {
        let refused = service(url, &fresh("cred"));
        let err = refused.consume("k", &opts).await.unwrap_err();
        assert!(matches!(err, Error::Store { .. }), "{err}");
        let connect = refused.redis_store().unwrap().connect().await.unwrap_err();
        texts.extend([
            format!("{refused:?}"),
            format!("{err}"),
            format!("{err:?}"),
            format!("{connect}"),
            format!("{connect:?}"),
        ]);
    }
    for url in [&good, &wrong, &user, &raw, &unix, &wrong_unix] {
        texts.push(format!("{:?}", RedisOptions::new(url)));
        texts.push(format!("{:?}", RedisOptions::cluster([url])));
    }
    // URLs refused when the configuration is built.
    for url in [
        "redis://:p%40ss@127.0.0.1:notaport".to_owned(),
        "redis://:p@ss@127.0.0.1:notaport".to_owned(),
        "redis://default:p%40ss@[::1/0".to_owned(),
        // A delimiter written raw in a password ends the authority early for a parser.
        format!("redis://:p#p@ss@127.0.0.1:{port}"),
        format!("redis://:p?p@ss@127.0.0.1:{port}"),
        format!("redis://:p/p@ss@127.0.0.1:{port}"),
    ] {
        let err = Config::builder()
            .store(StoreConfig::Redis(RedisOptions::new(url)))
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("store.url"), "{err}");
        texts.extend([format!("{err}"), format!("{err:?}")]);
    }
    for text in &texts {
        for secret in ["p@ss", "p%40ss", "p@sx", "p%40sx", "p%40", "40ss", "40sx"] {
            assert!(!text.contains(secret), "{secret:?} in {text}");
        }
    }
}

#[tokio::test]
async fn a_sliding_log_call_of_huge_cost_writes_one_entry() {
    let server = RedisServer::start();
    let p = fresh("cost");
    // Long enough for the old script (one member per unit) to finish and be measured.
    let service = redis_service(
        RedisOptions::new(server.url()).timeout(Duration::from_secs(30)),
        &p,
    );
    let opts = Options::new()
        .limit(2_000_000)
        .window(LONG)
        .strategy(Strategy::SlidingWindow);
    let started = Instant::now();
    let d = service
        .consume("k", &opts.clone().cost(1_000_000))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(d.allowed);
    assert_eq!(d.remaining, 1_000_000);
    let mut c = server.connection();
    let key = limiter_key(&mut c, &p);
    let entries: u64 = redis::cmd("LLEN").arg(&key).query(&mut c).unwrap();
    let bytes: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&key)
        .query(&mut c)
        .unwrap();
    eprintln!("cost 1000000: {took:?}, {entries} entries, MEMORY USAGE {bytes} bytes");
    assert!(took < Duration::from_millis(500), "{took:?}");
    assert_eq!(entries, 1);
    assert!(bytes < 1_024, "{bytes} bytes");

    // Still exact: 1 000 000 units are left, not one more.
    let over = service
        .consume("k", &opts.clone().cost(1_000_001))
        .await
        .unwrap();
    assert!(!over.allowed);
    assert_eq!(over.remaining, 1_000_000);
    // It fits once the first call leaves the window.
    let retry = over.retry_after.unwrap();
    assert!(retry <= d.reset_after && retry + Duration::from_secs(1) > d.reset_after);
    assert!(
        service
            .status("k", &opts.clone().cost(1_000_000))
            .await
            .unwrap()
            .allowed
    );
    let last = service
        .consume("k", &opts.clone().cost(1_000_000))
        .await
        .unwrap();
    assert!(last.allowed);
    assert_eq!(last.remaining, 0);
    assert!(!service.consume("k", &opts).await.unwrap().allowed);
    let entries: u64 = redis::cmd("LLEN").arg(&key).query(&mut c).unwrap();
    assert_eq!(entries, 2);
}

/// A key's value and absolute expiry, to check that nothing was written.
fn snapshot(c: &mut redis::Connection, key: &str) -> (String, Vec<u8>, i64) {
    let kind: String = redis::cmd("TYPE").arg(key).query(c).unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP").arg(key).query(c).unwrap();
    let expires: i64 = redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap();
    (kind, dump, expires)
}

/// Replaces `key` with what `plant` names, expiring in an hour.
fn plant(c: &mut redis::Connection, key: &str, plant: &str) {
    let mut words = plant.split(' ');
    let command = words.next().unwrap();
    redis::cmd("DEL").arg(key).exec(c).unwrap();
    let mut cmd = redis::cmd(command);
    cmd.arg(key);
    for word in words {
        cmd.arg(word);
    }
    cmd.exec(c).unwrap();
    redis::cmd("PEXPIRE")
        .arg(key)
        .arg(3_600_000)
        .exec(c)
        .unwrap();
}

#[tokio::test]
async fn garbage_on_a_limiter_key_is_refused_not_read_as_a_fresh_key() {
    let server = RedisServer::start();
    let mut c = server.connection();
    // Every type, and strings in every strategy's encoding but the right one, or in none.
    // The fixed window under a window of whole milliseconds keeps a bare count; its
    // string format (that of earlier versions, and of other windows) is the wrong shape there.
    let fixed = "SET F1700000000000000:60000000:1";
    let count = "SET 12";
    // A counter: window number 28333333 (any number will do), count 1.
    let counter = "HSET 28333333 1";
    let bucket = "SET T1700000000000000";
    // A log: one entry at that time, total 1, the oldest live entry itself (age 0), 1 unit.
    let log = "LPUSH 1700000000000000:1:0:1";
    let others = [
        // The sliding log of earlier versions, a sorted set: refused, not read as empty.
        "ZADD 1700000000000000 0000000000000001:1",
        // Log entries of another shape: too few fields, the five-field entry of earlier
        // versions, no unit in the window, more units in the window than the total, the
        // oldest live entry after the entry itself (a negative age).
        "LPUSH 1700000000000000:1:1",
        "LPUSH 1700000000000000:1:1:1700000000000000:0",
        "LPUSH 1700000000000000:1:0:0",
        "LPUSH 1700000000000000:1:0:2",
        "LPUSH 1700000000000000:1:-1:1",
        // The counter of earlier versions, a string; counter hashes with a count or a field
        // that is not a number, a count of 0 in the recorded window, or a count of 0 in a
        // window that is not the one before it.
        "SET C1700000000000000:60000000:0:1",
        "HSET 28333333 x",
        "HSET 28333333 0",
        "HSET 28333331 0 28333333 1",
        "HSET 28333333 -1",
        "HSET x 1",
        "RPUSH a b",
        "HSET f v",
        "SADD a b",
        "SET garbage",
        "SET F1:2:3:4",
        "SET F1:2:x",
        "SET T-5",
        "ZADD 1 garbage",
        "ZADD 1700000000000000 1700000000000000-1",
        "ZADD 1700000000000000 1:1",
        "ZADD 1700000000000000 0000000000000001:0",
    ];
    for strategy in Strategy::ALL {
        let own = match strategy {
            Strategy::FixedWindow => count,
            Strategy::SlidingWindow => log,
            Strategy::SlidingWindowCounter => counter,
            _ => bucket,
        };
        let p = fresh("garbage");
        let service = service(&server.url(), &p);
        let opts = Options::new().limit(5).window(LONG).strategy(strategy);
        assert!(service.consume("k", &opts).await.unwrap().allowed);
        let key = limiter_key(&mut c, &p);
        for planted in [fixed, count, counter, bucket, log]
            .into_iter()
            .filter(|&s| s != own)
            .chain(others)
        {
            refused_untouched_once(&service, &mut c, &key, &opts, planted).await;
        }
    }
}

/// Plants each of `plants` on `key` in turn (see [`plant`]): a call, a look and a call of
/// cost 5 under `opts` (limit 5) are each `UnexpectedState`, and the key is left as it was.
async fn refused_untouched(
    service: &RateLimitService,
    c: &mut redis::Connection,
    key: &str,
    opts: &Options,
    plants: impl IntoIterator<Item = impl AsRef<str>>,
) {
    for planted in plants {
        refused_untouched_once(service, c, key, opts, planted.as_ref()).await;
    }
}

async fn refused_untouched_once(
    service: &RateLimitService,
    c: &mut redis::Connection,
    key: &str,
    opts: &Options,
    planted: &str,
) {
    plant(c, key, planted);
    let before = snapshot(c, key);
    for result in [
        service.consume("k", opts).await,
        service.status("k", opts).await,
        service.consume("k", &opts.clone().cost(5)).await,
    ] {
        match result {
            Err(e @ Error::UnexpectedState { .. }) => {
                let expected = format!(
                    "state of an unexpected shape under a limiter key: refused \
                     (the limiter key holds a {} that is not a",
                    before.0
                );
                assert!(e.to_string().starts_with(&expected), "{e}");
            }
            other => panic!("{planted:?}: refused, not {other:?}"),
        }
    }
    assert_eq!(snapshot(c, key), before, "{planted:?}");
}

/// A server, a raw connection, a service under a fresh prefix, `k`'s options (limit 5) under
/// `strategy` and `window`, and `k`'s key after one admitted call.
async fn planted_key(
    strategy: Strategy,
    window: Duration,
) -> (
    RedisServer,
    redis::Connection,
    RateLimitService,
    Options,
    String,
) {
    let server = RedisServer::start();
    let mut c = server.connection();
    let p = fresh("shape");
    let service = service(&server.url(), &p);
    let opts = Options::new().limit(5).window(window).strategy(strategy);
    assert!(service.consume("k", &opts).await.unwrap().allowed);
    let key = limiter_key(&mut c, &p);
    (server, c, service, opts, key)
}

/// A window of whole microseconds but not of whole milliseconds: the fixed window's string
/// state, `F<start>:<window>:<count>`.
const ODD: Duration = LONG.saturating_add(Duration::from_micros(1));

/// The key names the window, so a start off its boundaries was never written there; the
/// script read it as an old window's, a fresh budget.
#[tokio::test]
async fn a_fixed_window_string_starting_off_its_boundaries_is_refused_not_a_fresh_window() {
    let (_server, mut c, service, opts, key) = planted_key(Strategy::FixedWindow, ODD).await;
    let w = ODD.as_micros() as u64;
    let start = redis_now(&mut c) / w * w;
    let plants = [1, w / 2, w - 1].map(|off| format!("SET F{}:{w}:5", start + off));
    refused_untouched(&service, &mut c, &key, &opts, plants).await;
}

/// Fields a fixed window's string never holds: another window than the key's, a count above
/// the largest capacity or of 0, a start past the last time decided or beyond what a Lua
/// number holds exactly, a number with a leading zero. Each was read (some as a fresh budget).
#[tokio::test]
async fn a_fixed_window_string_of_another_window_or_out_of_range_is_refused() {
    let (_server, mut c, service, opts, key) = planted_key(Strategy::FixedWindow, ODD).await;
    let w = ODD.as_micros() as u64;
    let start = redis_now(&mut c) / w * w;
    let plants = [
        format!("SET F{start}:{}:5", w + 1),
        format!("SET F{start}:{}:5", 2 * w),
        format!("SET F{start}:0{w}:5"),
        format!("SET F{start}:{w}:4294967296"),
        // (A count of 0 beside a start is a window whose calls were all given back, a state
        // a store writes since refunds: `FixedWindow::refund`.)
        format!("SET F{start}:{w}:05"),
        format!("SET F0{start}:{w}:5"),
        format!("SET F{}:{w}:1", 8_070_450_532_247_929 / w * w + w),
        format!("SET F{}:{w}:1", u64::MAX / w * w),
        format!("SET F{start}0000000000000000000:{w}:1"),
    ];
    refused_untouched(&service, &mut c, &key, &opts, plants).await;
}

/// The integer count of a window of whole milliseconds: above the largest capacity (no quota
/// counts there) it was refused or Redis' own overflow error, with a leading zero read by a
/// look as if it had none.
#[tokio::test]
async fn a_fixed_window_count_above_the_largest_capacity_is_refused_not_counted() {
    let (_server, mut c, service, opts, key) = planted_key(Strategy::FixedWindow, LONG).await;
    let plants = ["SET 4294967296", "SET 9223372036854775807", "SET 07"];
    refused_untouched(&service, &mut c, &key, &opts, plants).await;
}

/// A window number with a leading zero names the window decided in only when read as a
/// number: the script counted on it, then wrote the count of the window's own field, which
/// the next call read alone (9 admitted under a limit of 5).
#[tokio::test]
async fn a_sliding_counter_field_with_a_leading_zero_is_refused_not_a_smaller_count() {
    let strategy = Strategy::SlidingWindowCounter;
    let (_server, mut c, service, opts, key) = planted_key(strategy, LONG).await;
    let n = redis_now(&mut c) / LONG.as_micros() as u64;
    let plants = [format!("HSET 0{n} 4"), format!("HSET {} 0 0{n} 4", n - 1)];
    refused_untouched(&service, &mut c, &key, &opts, plants).await;
}

/// Counter hashes no store writes: a count above the largest capacity, or whose product with
/// the window is past what a Lua number holds exactly (2^51, as `supports` requires of any
/// quota of this window), a count with a leading zero, a window past the last time decided
/// (it was decided in, as a window not begun yet), and a field beside the recorded window's
/// and the one before.
#[tokio::test]
async fn a_sliding_counter_count_or_window_out_of_range_is_refused() {
    let strategy = Strategy::SlidingWindowCounter;
    let (_server, mut c, service, opts, key) = planted_key(strategy, LONG).await;
    let w = LONG.as_micros() as u64;
    let n = redis_now(&mut c) / w;
    let most = (1u64 << 51) / w;
    let plants = [
        format!("HSET {n} 4294967296"),
        format!("HSET {n} {}", most + 1),
        format!("HSET {} {} {n} 1", n - 1, most + 1),
        format!("HSET {n} 01"),
        format!("HSET {} 02 {n} 1", n - 1),
        format!("HSET {} 1", 8_070_450_532_247_929 / w + 1),
        format!("HSET {} 1 {n} 1", n - 3),
    ];
    refused_untouched(&service, &mut c, &key, &opts, plants).await;
}

/// A token bucket's time beyond what a Lua number holds exactly (2^53 microseconds), or with
/// a leading zero, was read (a refusal rounded, or as if the zero were not there).
#[tokio::test]
async fn a_token_bucket_time_past_what_a_lua_number_holds_is_refused_not_read() {
    let strategy = Strategy::TokenBucket;
    let (_server, mut c, service, opts, key) = planted_key(strategy, LONG).await;
    let now = redis_now(&mut c);
    let plants = [
        "SET T9007199254740992".to_owned(),
        "SET T9007199254740993".to_owned(),
        "SET T99999999999999999999999".to_owned(),
        format!("SET T0{now}"),
    ];
    refused_untouched(&service, &mut c, &key, &opts, plants).await;
}

/// Log entries no store writes: a time past the last one decided, more units in the window
/// than the largest capacity, a running total beyond what a Lua number holds exactly, an
/// oldest live entry a window or more before the entry, a number with a leading zero; and
/// the window an entry names (sliding_log.lua): 0, none after its slash, a leading zero, past
/// `MAX_WINDOW`, or one its oldest live entry is that window or more before.
#[tokio::test]
async fn a_sliding_log_entry_out_of_range_is_refused() {
    let strategy = Strategy::SlidingWindow;
    let (_server, mut c, service, opts, key) = planted_key(strategy, LONG).await;
    let t = redis_now(&mut c);
    let w = LONG.as_micros() as u64;
    let plants = [
        "LPUSH 8070450532247929:1:0:1".to_owned(),
        format!("LPUSH {t}:4294967296:0:4294967296"),
        format!("LPUSH {t}:9007199254740993:0:1"),
        format!("LPUSH {}:1:0:1 {t}:2:{w}:1", t - w),
        format!("LPUSH {t}:01:0:1"),
        format!("LPUSH 0{t}:1:0:1"),
        // Each field read without a second pattern since (`digits`, prelude.lua).
        format!("LPUSH {t}:2:00:1"),
        format!("LPUSH {t}:2:0:01"),
        format!("LPUSH {t}:1:0:1/0"),
        format!("LPUSH {t}:1:0:1/"),
        format!("LPUSH {t}:1:0:1/0{w}"),
        format!("LPUSH {t}:1:0:1/31622400000001"),
        format!("LPUSH {}:1:0:1/1000 {t}:2:1000:1/1000", t - 1_000),
    ];
    refused_untouched(&service, &mut c, &key, &opts, plants).await;
}

/// `calls` consumes of `k` at `cost`: how many were admitted, refused, and answered with
/// `Error::UnexpectedState`, in that order; anything else fails the test.
async fn tally(service: &RateLimitService, opts: &Options, calls: u64) -> [u64; 3] {
    let mut seen = [0; 3];
    for _ in 0..calls {
        match service.consume("k", opts).await {
            Ok(d) if d.allowed => seen[0] += 1,
            Ok(_) => seen[1] += 1,
            Err(Error::UnexpectedState { .. }) => seen[2] += 1,
            Err(e) => panic!("admitted, refused or the wrong shape, not {e:?}"),
        }
    }
    seen
}

/// The value of `key`, and its absolute expiry (-1: none).
fn count_and_expiry(c: &mut redis::Connection, key: &str) -> (String, i64) {
    let value: String = redis::cmd("GET").arg(key).query(c).unwrap();
    let expires: i64 = redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap();
    (value, expires)
}

/// A fixed window of whole milliseconds (the integer state) that no test outlives, limit 5.
fn fixed() -> Options {
    Options::new()
        .limit(5)
        .window(LONG)
        .strategy(Strategy::FixedWindow)
}

/// A server, a raw connection to it, a service under a fresh prefix named `name`, and the key
/// of `k` under [`fixed`] after one admitted call.
async fn fixed_key(name: &str) -> (RedisServer, redis::Connection, RateLimitService, String) {
    let server = RedisServer::start();
    let mut c = server.connection();
    let p = fresh(name);
    let service = service(&server.url(), &p);
    assert!(service.consume("k", &fixed()).await.unwrap().allowed);
    let key = limiter_key(&mut c, &p);
    (server, c, service, key)
}

/// The fixed window's hot path reads no TTL on an admitted call: a count another client SET
/// without an expiry is counted on, never read as a fresh window, and once it reaches the
/// limit every call is the wrong shape (its key never expires, so the limit is never passed).
#[tokio::test]
async fn a_fixed_window_count_set_without_an_expiry_never_admits_past_the_limit() {
    let (_server, mut c, service, key) = fixed_key("bare").await;
    let opts = fixed();
    redis::cmd("SET").arg(&key).arg("3").exec(&mut c).unwrap();
    assert_eq!(tally(&service, &opts, 10).await, [2, 0, 8]);
    assert_eq!(count_and_expiry(&mut c, &key), ("5".to_owned(), -1));
    for opts in [opts.clone().cost(2), opts.clone().cost(5)] {
        assert_eq!(tally(&service, &opts, 3).await, [0, 0, 3]);
    }
    assert!(matches!(
        service.status("k", &opts).await,
        Err(Error::UnexpectedState { .. })
    ));
    assert_eq!(count_and_expiry(&mut c, &key), ("5".to_owned(), -1));
}

/// A count below zero would admit more than the limit: the first call's count is below its
/// cost, the wrong shape, and the key is left as it was.
#[tokio::test]
async fn a_fixed_window_count_below_zero_is_refused() {
    let (_server, mut c, service, key) = fixed_key("negative").await;
    let opts = fixed();
    for expiry in [None, Some(3_600_000)] {
        redis::cmd("SET").arg(&key).arg("-3").exec(&mut c).unwrap();
        if let Some(ms) = expiry {
            redis::cmd("PEXPIRE")
                .arg(&key)
                .arg(ms)
                .exec(&mut c)
                .unwrap();
        }
        let before = snapshot(&mut c, &key);
        for cost in [1, 3, 5] {
            let opts = opts.clone().cost(cost);
            assert_eq!(tally(&service, &opts, 3).await, [0, 0, 3], "{expiry:?}");
        }
        assert!(matches!(
            service.status("k", &opts).await,
            Err(Error::UnexpectedState { .. })
        ));
        assert_eq!(snapshot(&mut c, &key), before, "{expiry:?}: left as it was");
    }
}

/// An expiry taken off a live count (PERSIST) after the window's first hit: the count keeps
/// growing past its window, and the limit is never passed.
#[tokio::test]
async fn a_fixed_window_count_persisted_after_its_first_hit_never_admits_past_the_limit() {
    let (_server, mut c, service, key) = fixed_key("persist").await;
    let opts = fixed();
    redis::cmd("PERSIST").arg(&key).exec(&mut c).unwrap();
    assert_eq!(tally(&service, &opts.clone().cost(2), 1).await, [1, 0, 0]);
    assert_eq!(tally(&service, &opts, 10).await, [2, 0, 8]);
    assert_eq!(count_and_expiry(&mut c, &key), ("5".to_owned(), -1));
}

/// Redis' own time, in microseconds since the epoch.
fn redis_now(c: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(c).unwrap();
    secs * 1_000_000 + micros
}

#[tokio::test]
async fn time_going_backwards_does_not_reopen_a_window() {
    let server = RedisServer::start();
    let mut c = server.connection();
    let w = LONG.as_micros() as u64;
    // What a Redis whose clock ran a window ahead wrote, in each script's own encoding: the
    // next window already full (limit 5).
    let now = redis_now(&mut c);
    let next = (now / w + 1) * w;
    let ahead = [
        // A whole-millisecond window: the bare count, its expiry telling the window.
        (
            Strategy::FixedWindow,
            vec!["SET".to_owned(), "5".to_owned()],
        ),
        (
            Strategy::SlidingWindowCounter,
            vec!["HSET".to_owned(), (next / w).to_string(), "5".to_owned()],
        ),
        (
            Strategy::TokenBucket,
            vec!["SET".to_owned(), format!("T{}", next + 2 * w)],
        ),
    ];
    for (strategy, state) in ahead {
        let p = fresh("backwards");
        let service = service(&server.url(), &p);
        let opts = Options::new().limit(5).window(LONG).strategy(strategy);
        assert!(service.consume("k", &opts).await.unwrap().allowed);
        let key = limiter_key(&mut c, &p);
        redis::cmd("DEL").arg(&key).exec(&mut c).unwrap();
        redis::cmd(&state[0])
            .arg(&key)
            .arg(&state[1..])
            .exec(&mut c)
            .unwrap();
        redis::cmd("PEXPIREAT")
            .arg(&key)
            .arg((next + 3 * w) / 1_000)
            .exec(&mut c)
            .unwrap();
        let before = snapshot(&mut c, &key);
        for _ in 0..3 {
            let d = service.consume("k", &opts).await.unwrap();
            assert!(!d.allowed, "{strategy}: {d:?}");
            // Not before the window the state was written in is over.
            assert!(micros(d.reset_at()) >= next + w, "{strategy}: {d:?}");
        }
        assert_eq!(snapshot(&mut c, &key), before, "{strategy}");
    }

    // The log: a hit stamped a minute ahead keeps counting until a window after that minute,
    // though the window (300 ms) ends long before it.
    let window = Duration::from_millis(300);
    let p = fresh("backwards");
    let service = service(&server.url(), &p);
    let opts = Options::new()
        .limit(2)
        .window(window)
        .strategy(Strategy::SlidingWindow);
    assert!(service.consume("k", &opts).await.unwrap().allowed);
    let key = limiter_key(&mut c, &p);
    let ahead = redis_now(&mut c) + 60_000_000;
    redis::cmd("DEL").arg(&key).exec(&mut c).unwrap();
    redis::cmd("LPUSH")
        .arg(&key)
        .arg(format!("{ahead}:1:0:1"))
        .exec(&mut c)
        .unwrap();
    redis::cmd("PEXPIREAT")
        .arg(&key)
        .arg((ahead + 300_000) / 1_000 + 1)
        .exec(&mut c)
        .unwrap();
    let admitted = service.consume("k", &opts).await.unwrap();
    assert!(admitted.allowed);
    assert!(
        micros(admitted.reset_at()) >= ahead + 300_000,
        "stamped at the newest hit, not before: {admitted:?}"
    );
    assert!(!service.consume("k", &opts).await.unwrap().allowed);
    // Real time passes a window: the log is still full until the minute ahead has passed.
    tokio::time::sleep(window + Duration::from_millis(100)).await;
    let d = service.consume("k", &opts).await.unwrap();
    assert!(!d.allowed, "{d:?}");
    assert!(d.retry_after.unwrap() > Duration::from_secs(50), "{d:?}");
}

#[tokio::test]
async fn an_evicting_redis_is_warned_about_and_refused_when_noeviction_is_required() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    // A current-thread runtime: every call, and so every log line, is on this thread.
    let _guard = tracing::subscriber::set_default(subscriber);
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let opts = Options::new().limit(5).window(LONG);

    let warned = service(&server.url(), &fresh("evict"));
    assert!(warned.consume("k", &opts).await.unwrap().allowed);
    let text = logs.text();
    assert!(
        text.contains("WARN") && text.contains("allkeys-lru") && text.contains("noeviction"),
        "{text}"
    );

    let p = fresh("evict");
    let strict = redis_service(
        RedisOptions::new(server.url())
            .timeout(Duration::from_secs(2))
            .require_noeviction(true),
        &p,
    );
    for _ in 0..3 {
        for result in [
            strict.consume("k", &opts).await,
            strict.status("k", &opts).await,
        ] {
            match result {
                Err(Error::Store { message }) => {
                    assert!(message.contains("allkeys-lru"), "{message}")
                }
                other => panic!("refused: {other:?}"),
            }
        }
    }
    match strict.redis_store().unwrap().connect().await {
        Err(Error::Store { message }) => assert!(message.contains("allkeys-lru"), "{message}"),
        other => panic!("connect refuses too: {other:?}"),
    }
    let mut c = server.connection();
    let (_, keys): (u64, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("MATCH")
        .arg(format!("{p}*"))
        .query(&mut c)
        .unwrap();
    assert!(keys.is_empty(), "nothing written: {keys:?}");

    // Where Redis does not evict, the same options decide.
    let keeping = RedisServer::start();
    let strict = redis_service(
        RedisOptions::new(keeping.url()).require_noeviction(true),
        &fresh("evict"),
    );
    assert!(strict.consume("k", &opts).await.unwrap().allowed);
}

/// Found by `tests/redis_faults.rs`: Redis checks `maxmemory` only before a script's first
/// write, and the sliding log's first write was `ZREMRANGEBYSCORE` (which may not grow
/// memory), so its `ZADD` went through on a full `noeviction` server: the limiter kept
/// growing Redis past its limit while every other write was refused.
#[tokio::test]
async fn a_full_redis_refuses_sliding_log_writes_instead_of_growing_past_maxmemory() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let p = fresh("oomlog");
    let service = service(&server.url(), &p);
    let mut c = server.connection();
    for strategy in Strategy::ALL {
        let opts = Options::new().limit(100).window(LONG).strategy(strategy);
        assert!(service.consume("old", &opts).await.unwrap().allowed);
    }
    let stored = |c: &mut redis::Connection| -> Vec<(String, Vec<u8>)> {
        let mut keys: Vec<String> = redis::cmd("KEYS").arg(format!("{p}*")).query(c).unwrap();
        keys.sort();
        // The prefix's reload horizon, raised by the first call of each own quota: no state.
        keys.into_iter()
            .filter(|k| !is_horizon(k))
            .map(|k| {
                let dump: Vec<u8> = redis::cmd("DUMP").arg(&k).query(c).unwrap();
                (k, dump)
            })
            .collect()
    };
    let before = stored(&mut c);
    assert_eq!(before.len(), 4);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query(&mut c)
        .unwrap();
    for strategy in Strategy::ALL {
        let opts = Options::new().limit(100).window(LONG).strategy(strategy);
        for key in ["old", "new"] {
            match service.consume(key, &opts).await {
                Err(Error::Store { message }) => assert!(message.contains("OOM"), "{message}"),
                other => panic!("{strategy} on {key}: a full Redis refuses the write: {other:?}"),
            }
        }
    }
    assert_eq!(stored(&mut c), before, "nothing was written");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query(&mut c)
        .unwrap();
}

/// Microseconds since the epoch, as Redis' `TIME` counts them.
fn micros(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64
}

/// How many times `costly`'s body ran.
static COSTLY_RAN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[ratelimit::rate_limit(limit = 3, window = "20d", cost = units)]
async fn costly(units: u64) -> Result<(), Error> {
    COSTLY_RAN.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// A call that spends with a cost of 0 was a look on Redis (allowed every time, nothing
/// spent, the fn's body run), where the memory store refuses it with `ZeroCost`. Every path
/// that spends refuses it the same way, with leases on or off; only `status` looks.
#[tokio::test]
async fn cost_zero_on_redis_is_an_error_not_a_free_pass() {
    let server = RedisServer::start();
    for leases in [false, true] {
        let mut options = RedisOptions::new(server.url()).timeout(Duration::from_secs(2));
        if leases {
            options = options.leases(ratelimit::LeaseOptions::new(4));
        }
        let p = fresh(&format!("cost0-{leases}"));
        let service = redis_service(options.clone(), &p);
        for strategy in [
            Strategy::FixedWindow,
            Strategy::SlidingWindow,
            Strategy::SlidingWindowCounter,
            Strategy::TokenBucket,
        ] {
            let opts = Options::new()
                .limit(2)
                .window(LONG)
                .strategy(strategy)
                .cost(0);
            for _ in 0..3 {
                let consumed = service.consume("k", &opts).await;
                assert!(matches!(consumed, Err(Error::ZeroCost)), "{consumed:?}");
                let enforced = service.enforce("k", &opts).await;
                assert!(matches!(enforced, Err(Error::ZeroCost)), "{enforced:?}");
                let checked = service.check("k", &opts).await;
                assert!(matches!(checked, Err(Error::ZeroCost)), "{checked:?}");
                let now = service.consume_now("k", &opts);
                assert!(
                    matches!(now, None | Some(Err(Error::ZeroCost))),
                    "{strategy}: {now:?}"
                );
            }
            // Nothing was spent: the whole budget is there.
            let level = service.status("k", &opts).await.unwrap();
            assert_eq!(level.remaining, 2, "{strategy}");
        }

        let module = ratelimit::testing::TestModule::new(
            ratelimit::Module::builder()
                .key_prefix(fresh(&format!("cost0-fn-{leases}")))
                .store(StoreConfig::Redis(options)),
        )
        .unwrap();
        let before = COSTLY_RAN.load(std::sync::atomic::Ordering::SeqCst);
        for _ in 0..5 {
            let refused = module.scope(costly(0)).await;
            assert!(matches!(refused, Err(Error::ZeroCost)), "{refused:?}");
        }
        assert_eq!(COSTLY_RAN.load(std::sync::atomic::Ordering::SeqCst), before);
        module.scope(costly(3)).await.unwrap();
        assert!(
            module.scope(costly(1)).await.is_err(),
            "the budget was whole"
        );
    }
}

/// The fixed window's hot path gave a window's first hit its expiry with `PEXPIREAT` at the
/// window's last millisecond: when that hit came in that very millisecond, Redis deleted the
/// count at once, and every other call in the millisecond was admitted as the window's first
/// (over the limit; found by the in-process stand-in). Called raw under windows of 1 ms
/// (every call is in its window's last millisecond), four calls in one pipeline between two
/// `TIME`s: whenever the four ran in one millisecond, one of them is admitted.
#[test]
fn a_first_hit_in_a_windows_last_millisecond_keeps_its_count() {
    let server = RedisServer::start();
    let mut c = server.connection();
    let script = redis::Script::new(&format!(
        "local capacity, window, cost = 1, 1, 1\n\
         local count = redis.pcall('INCR', KEYS[1])\n{}",
        include_str!("../ratelimit-core/lua/fixed_window_hot.lua"),
    ));
    let _: redis::Value = script.key("warm").invoke(&mut c).unwrap();
    let ms = |t: &(u64, u64)| t.0 * 1_000 + t.1 / 1_000;
    let mut within_one_ms = 0;
    for i in 0..400 {
        let key = format!("last-ms:{i}");
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        for _ in 0..4 {
            pipe.invoke_script(&script.key(&key));
        }
        pipe.cmd("TIME");
        let (before, a, b, c2, d, after): ((u64, u64), i64, i64, i64, i64, (u64, u64)) =
            pipe.query(&mut c).unwrap();
        if ms(&before) != ms(&after) {
            continue;
        }
        within_one_ms += 1;
        let admitted = [a, b, c2, d].iter().filter(|&&r| r == 1).count();
        assert_eq!(
            admitted, 1,
            "four calls in one millisecond: {a}, {b}, {c2}, {d}"
        );
    }
    assert!(
        within_one_ms > 20,
        "only {within_one_ms} pipelines ran within one millisecond"
    );
}
