//! helper-108's probes of the one rule of an answer's shape (`algorithm::in_shape`: an
//! admission has no `retry_after`, a refusal one, no more `remaining` than the `limit`; read
//! by `settle`'s admission check, `broken_answer` and the memory store's bare admission),
//! through a store of one's own (the public `Store` trait alone) that decides honestly (a
//! `MemoryStore` underneath) and rewrites the shape of its answers. Each entry point makes 3
//! calls on a fresh key under a limit of 2: where admissions are rewritten, none may be
//! admitted (each an error); where refusals are, the third may not be admitted (a shadow
//! limit's refusal out of shape is an error, never the marked admission it becomes in shape).

use std::sync::Arc;
use std::time::Duration;

use ratelimit::store::{Request, Stacked, Store};
use ratelimit::testing::TestModule;
use ratelimit::{
    rate_limit, Config, Decision, Error, MemoryStore, Module, Options, RateLimitService,
    StoreConfig,
};
use ratelimit_tests::clock;

/// The memory store's answers, each rewritten by `mangle`.
struct Mangling {
    store: MemoryStore,
    mangle: fn(&mut Decision),
}

impl Store for Mangling {
    async fn decide(&self, request: Request<'_>) -> Result<Decision, Error> {
        let mut decided = self.store.decide(request).await?;
        (self.mangle)(&mut decided);
        Ok(decided)
    }

    fn decide_now(&self, request: Request<'_>) -> Option<Result<Decision, Error>> {
        let decided = self.store.decide_now(request)?;
        Some(decided.map(|mut d| {
            (self.mangle)(&mut d);
            d
        }))
    }

    fn decides_at_once(&self) -> bool {
        true
    }

    async fn decide_all(&self, stacked: Stacked<'_>) -> Result<Vec<Decision>, Error> {
        let mut decided = self.store.decide_all(stacked).await?;
        decided.iter_mut().for_each(self.mangle);
        Ok(decided)
    }

    fn decide_all_now(&self, stacked: Stacked<'_>) -> Option<Result<Vec<Decision>, Error>> {
        let decided = self.store.decide_all_now(stacked)?;
        Some(decided.map(|mut all| {
            all.iter_mut().for_each(self.mangle);
            all
        }))
    }

    async fn reset(&self, key: &str) -> Result<bool, Error> {
        Store::reset(&self.store, key).await
    }
}

fn store(mangle: fn(&mut Decision)) -> StoreConfig {
    StoreConfig::custom(Mangling {
        store: MemoryStore::new(),
        mangle,
    })
}

/// Admissions with a wait.
fn admitted_with_retry_after(d: &mut Decision) {
    if d.allowed {
        d.retry_after = Some(Duration::from_secs(1));
    }
}

/// Admissions with more left than their limit.
fn admitted_with_more_remaining(d: &mut Decision) {
    if d.allowed {
        d.remaining = d.limit + 1;
    }
}

/// Admissions under a limit of 0 (nothing left): no quota admits anything under it.
fn admitted_under_a_limit_of_zero(d: &mut Decision) {
    if d.allowed {
        d.limit = 0;
        d.remaining = 0;
    }
}

/// Every answer under a window of a day (the quotas here count a minute).
fn under_another_window(d: &mut Decision) {
    d.window = Duration::from_secs(86_400);
}

/// Refusals without a wait.
fn refused_without_retry_after(d: &mut Decision) {
    if !d.allowed {
        d.retry_after = None;
    }
}

/// Refusals with a wait of zero.
fn refused_with_no_wait(d: &mut Decision) {
    if !d.allowed {
        d.retry_after = Some(Duration::ZERO);
    }
}

/// Refusals with more left than their limit.
fn refused_with_more_remaining(d: &mut Decision) {
    if !d.allowed {
        d.remaining = d.limit + 1;
    }
}

/// A limit of 2 a minute.
fn config(mangle: fn(&mut Decision)) -> ratelimit::ConfigBuilder {
    Config::builder()
        .default_limit(2)
        .default_window(Duration::from_secs(60))
        .store(store(mangle))
}

fn service(builder: ratelimit::ConfigBuilder) -> RateLimitService {
    RateLimitService::with_clock(builder.build().unwrap(), Arc::new(clock())).unwrap()
}

#[rate_limit(limit = 2, window = "1m", key = user)]
async fn annotated_async(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

#[rate_limit(limit = 2, window = "1m", key = user)]
fn annotated_sync(user: &str) -> Result<(), Error> {
    let _ = user;
    Ok(())
}

/// An admission as a caller sees it: a decision that admits (a shadow limit's marked
/// admission too).
fn admits(decided: &Result<Decision, Error>) -> bool {
    matches!(decided, Ok(d) if d.allowed)
}

/// A stacked call's answer as one: its refusal, else its shadow limit's marked admission,
/// else its first admission.
fn of_all(decided: Result<Vec<Decision>, Error>) -> Result<Decision, Error> {
    let all = decided?;
    let telling = (all.iter().find(|d| !d.allowed)).or(all.iter().find(|d| d.shadowed));
    Ok(telling.unwrap_or(&all[0]).clone())
}

/// How many of 3 calls on a fresh key each entry point admitted, by name.
/// (name, plain admissions, admissions with a shadow limit's marked ones).
async fn admitted(mangle: fn(&mut Decision)) -> Vec<(&'static str, usize, usize)> {
    let plain = Options::new();
    let shadow = Options::new().shadow(true);
    let other = Options::new().budget("other");
    let mut out = Vec::new();
    let mut tally = |name: &'static str, decided: Vec<Result<Decision, Error>>| {
        let plainly = |d: &&Result<Decision, Error>| matches!(d, Ok(d) if !d.shadowed);
        let admitted = decided.iter().filter(|d| admits(d));
        out.push((
            name,
            admitted.clone().filter(plainly).count(),
            admitted.count(),
        ));
    };
    let mut fns = Vec::new();
    let s = service(config(mangle));
    let mut v = Vec::new();
    for _ in 0..3 {
        v.push(s.consume("consume", &plain).await);
    }
    tally("consume", v);
    let s = service(config(mangle));
    tally(
        "consume_now",
        (0..3)
            .map(|_| s.consume_now("now", &plain).unwrap())
            .collect(),
    );
    let s = service(config(mangle));
    let mut v = Vec::new();
    for _ in 0..3 {
        v.push(s.enforce("enforce", &plain).await);
    }
    tally("enforce", v);
    let s = service(config(mangle));
    let mut v = Vec::new();
    for _ in 0..3 {
        v.push(s.spend("spend", &plain).await.map(|s| s.into_decision()));
    }
    tally("spend", v);
    let s = service(config(mangle));
    let prepared = s.prepare(&plain).unwrap();
    let mut v = Vec::new();
    for _ in 0..3 {
        v.push(prepared.consume("prepared").await);
    }
    tally("prepared consume", v);
    let s = service(config(mangle));
    let prepared = s.prepare(&plain).unwrap();
    tally(
        "prepared consume_now",
        (0..3)
            .map(|_| prepared.consume_now("prepared now").unwrap())
            .collect(),
    );
    let s = service(config(mangle));
    let prepared = s.prepare(&plain).unwrap();
    let mut v = Vec::new();
    for _ in 0..3 {
        v.push(
            prepared
                .spend("prepared spend")
                .await
                .map(|s| s.into_decision()),
        );
    }
    tally("prepared spend", v);
    let s = service(config(mangle));
    let mut v = Vec::new();
    for _ in 0..3 {
        v.push(of_all(
            s.consume_all(&[("all", &plain), ("all", &other)]).await,
        ));
    }
    tally("consume_all", v);
    let s = service(config(mangle));
    let mut v = Vec::new();
    for _ in 0..3 {
        v.push(s.consume("shadow", &shadow).await);
    }
    tally("shadow consume", v);
    let s = service(config(mangle));
    let mut v = Vec::new();
    for _ in 0..3 {
        let loose = Options::new().budget("loose").limit(10);
        v.push(of_all(
            s.consume_all(&[("st", &loose), ("st", &shadow)]).await,
        ));
    }
    tally("consume_all with a shadow limit", v);
    let s = service(config(mangle).queue_enabled(true));
    let mut v = Vec::new();
    for _ in 0..3 {
        let queued = Options::new().queue(true);
        let decided = tokio::time::timeout(Duration::from_secs(3_600), s.consume("q", &queued));
        v.push(decided.await.expect("the queue ended its wait"));
    }
    tally("queue", v);
    let s = service(config(mangle));
    let mut v = Vec::new();
    for _ in 0..3 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        let decided = tokio::time::timeout(
            Duration::from_secs(3_600),
            s.until_ready("ready", &plain, deadline),
        );
        v.push(decided.await.expect("until_ready ended"));
    }
    tally("until_ready", v);
    // A moved limit: the old state decided with the call (`transition.rs`).
    let s = service(config(mangle));
    ratelimit_tests::reload_to(&s, config(mangle).default_limit(3));
    let mut v = Vec::new();
    for _ in 0..3 {
        v.push(s.consume("moved", &plain).await);
    }
    // The old limit of 2 holds the moved one's calls to 2 as well.
    tally("moved limit", v);
    let module = TestModule::new(Module::builder().clock(clock()).store(store(mangle))).unwrap();
    let mut v = 0;
    for _ in 0..3 {
        v += usize::from(module.scope(annotated_async("f")).await.is_ok());
    }
    fns.push(("annotated async", v, v));
    let v = (0..3)
        .filter(|_| module.run(|| annotated_sync("g")).is_ok())
        .count();
    fns.push(("annotated sync", v, v));
    out.extend(fns);
    out
}

/// The entry points that admitted more than `most` of their 3 calls: plainly, where
/// admissions are rewritten (a shadow limit's third call is an honest refusal, its marked
/// admission in shape); a shadow limit's marked admissions too, where refusals are.
async fn over(mangle: fn(&mut Decision), most: usize) -> Vec<(&'static str, usize, usize)> {
    let all = admitted(mangle).await;
    assert_eq!(all.len(), 15, "every entry point ran");
    let counted = |(_, plainly, marked): &(&str, usize, usize)| match most {
        0 => *plainly,
        _ => *marked,
    };
    all.into_iter().filter(|e| counted(e) > most).collect()
}

#[tokio::test(start_paused = true)]
async fn an_admission_with_a_retry_after_is_admitted_by_no_entry_point() {
    assert_eq!(over(admitted_with_retry_after, 0).await, []);
}

#[tokio::test(start_paused = true)]
async fn an_admission_with_more_remaining_than_its_limit_is_admitted_by_no_entry_point() {
    assert_eq!(over(admitted_with_more_remaining, 0).await, []);
}

#[tokio::test(start_paused = true)]
async fn an_admission_under_a_limit_of_zero_is_admitted_by_no_entry_point() {
    assert_eq!(over(admitted_under_a_limit_of_zero, 0).await, []);
}

#[tokio::test(start_paused = true)]
async fn an_answer_under_another_window_is_admitted_by_no_entry_point() {
    assert_eq!(over(under_another_window, 0).await, []);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_without_a_retry_after_is_admitted_by_no_entry_point() {
    assert_eq!(over(refused_without_retry_after, 2).await, []);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_with_a_wait_of_zero_is_admitted_by_no_entry_point() {
    assert_eq!(over(refused_with_no_wait, 2).await, []);
}

#[tokio::test(start_paused = true)]
async fn a_refusal_with_more_remaining_than_its_limit_is_admitted_by_no_entry_point() {
    assert_eq!(over(refused_with_more_remaining, 2).await, []);
}

/// The honest store (nothing rewritten): every entry point admits exactly its 2, a shadow
/// limit all 3 (the probes above can fail: each entry point admits here).
#[tokio::test(start_paused = true)]
async fn the_honest_store_admits_two_of_three_on_every_entry_point() {
    fn honest(_: &mut Decision) {}
    let all = admitted(honest).await;
    let wrong: Vec<_> = (all.iter())
        .filter(|(name, plainly, marked)| {
            *plainly != 2 || *marked != if name.contains("shadow") { 3 } else { 2 }
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:?}");
}
