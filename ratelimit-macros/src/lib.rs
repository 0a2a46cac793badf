//! Attribute macros for [`ratelimit`](https://docs.rs/ratelimit): `#[rate_limit]`,
//! `#[throttle]` and `#[skip_throttle]`. Use them through the `ratelimit` crate, which
//! re-exports them and provides the runtime they expand to.
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![forbid(unsafe_code)]

use proc_macro::TokenStream;

mod attr;
mod expand;
mod future;
mod generate;
mod limit;
mod manifest;
mod path;
mod signature;

/// Rate-limits a fn (`async`, or sync returning a `Result`), a method, or the methods of an
/// `impl` block.
///
/// Each call first asks the running [`Module`] for a decision; a refused call returns
/// `Err(ratelimit::Error)` through the fn's own `Result<T, E>` (so `E: From<ratelimit::Error>`)
/// and its body does not run. Nothing is ever let through by accident: a call made before
/// `Module::init` (or after the module is shut down) is refused with
/// `Error::NotInitialized`, a dynamic tier that is not configured is refused, and a store that
/// cannot answer refuses.
///
/// # Arguments
///
/// | argument | value | meaning |
/// |---|---|---|
/// | `limit` | integer | calls per window (default: the tier's, else the module's default limit) |
/// | `window` | `"1m"`, `"500ms"`, `"1h30m"` | the window (default: the tier's, else the module's) |
/// | `key` | any expression over the arguments, `Display` | one budget per key (default: one budget for the fn) |
/// | `tier` | `"pro"`, or an expression giving `impl AsRef<str>` | a configured tier; a literal is checked at `init`, an expression per call |
/// | `strategy` | `"fixed-window"`, `"sliding-window"`, `"sliding-window-counter"`, `"token-bucket"` | the algorithm |
/// | `burst` | integer | extra calls on top of the limit |
/// | `cost` | `u64` expression | what a call spends (default 1) |
/// | `count` | `"err"`, `"ok"` or `"all"` | which outcomes count: the call spends before the body runs and is given back after it when its outcome does not (`"err"`: only calls returning `Err` count); needs a store that gives spends back (the memory store), else `init` fails |
/// | `block_for` | `"1h"` | once a call on a key is refused, the key stays refused that long whatever the limit says; needs a store that keeps blocks (the memory store), else `init` fails |
/// | `shadow` | `true` or `false` | a shadow limit: decided, spent and counted like an enforced one, but a call it would refuse runs (counted in `stats().shadowed`, logged); `init` logs each at warn level. To try a limit on real traffic before it refuses anyone |
/// | `queue` | `true` or `false` | over the limit, wait for capacity in the service's bounded queue (or never), whatever the module's `queue_enabled` says; never on unauthenticated entry points |
/// | `name` | `"budget"` | the budget's name (default: the fn's path, see [Budget names](#budget-names)); fns sharing a name share a budget |
/// | `limiter` | path of a `static` `ratelimit::Limiter` | a library's own limiter decides the fn (see [Libraries](#libraries-own-their-limits)); default: the application's `Module` |
/// | `crate` | `"path"` | where the `ratelimit` crate is, if renamed (see [Renamed crate](#renamed-crate)) |
///
/// With no arguments, the fn is limited by the module's default tier, else its default limit
/// (and `Module::init` fails if there is neither). Windows, strategies and numbers are checked
/// at compile time, with the same parser the runtime uses.
///
/// # Budget names
///
/// Budgets are counted in the store under the budget name followed by the key, so two fns
/// never share a key by accident. The default name is the fn's path, spelled out at compile
/// time from [`module_path!()`](core::module_path) and the names as written in the source
/// (never from `type_name`, whose spelling may change between compilers), so every build of
/// the same source counts in the same budgets of a shared store:
///
/// | the attribute is on | budget name |
/// |---|---|
/// | a free fn `charge` | `my_crate::billing::charge` |
/// | `impl Payments<T>`, method `charge` | `my_crate::billing::Payments::charge` |
/// | `impl Gateway<u8> for Payments<T>`, method `charge` | `my_crate::billing::<Payments as Gateway>::charge` |
/// | the method `charge` itself | `my_crate::billing::charge` |
///
/// Types and traits are written as in the `impl` line, without generic arguments or
/// lifetimes (`&'a mut Foo<T>` is `&mut Foo`). An attribute on a single method cannot see
/// the type it belongs to, so its budget is named after the module and the method only: put
/// the attribute on the `impl` block, or give a `name`, to tell two such methods apart.
/// Renaming a fn, its type or its module renames its budget.
///
/// # Example
///
/// ```
/// use ratelimit::{rate_limit, Error, Module, Tier};
///
/// struct Payments;
///
/// impl Payments {
///     /// Charges a user: at most 2 charges per user per minute.
///     #[rate_limit(limit = 2, window = "1m", key = user_id)]
///     async fn charge(&self, user_id: &str, cents: u64) -> Result<u64, Error> {
///         Ok(cents)
///     }
///
///     /// Reports, under the caller's plan (a tier chosen at run time).
///     #[rate_limit(tier = plan, key = user_id)]
///     async fn report(&self, user_id: u64, plan: &str) -> Result<(), Error> {
///         Ok(())
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let payments = Payments;
/// // Before `init`, calls are refused, not allowed.
/// assert!(matches!(
///     payments.charge("ann", 5).await,
///     Err(Error::NotInitialized { .. })
/// ));
///
/// let module = Module::builder()
///     .tier(Tier::new("free", 1).window("1h"))
///     .init()?;
/// assert_eq!(payments.charge("ann", 5).await?, 5);
/// assert_eq!(payments.charge("ann", 6).await?, 6);
/// let refused = payments.charge("ann", 7).await.unwrap_err();
/// assert!(refused.retry_after().is_some());
/// assert!(payments.charge("bob", 8).await.is_ok()); // another key, another budget
///
/// payments.report(1, "free").await?;
/// assert!(matches!(payments.report(1, "gold").await, Err(Error::UnknownTier { .. })));
/// drop(module);
/// # Ok::<(), Error>(())
/// # }).unwrap();
/// ```
///
/// # Sync fns
///
/// On a plain `fn` returning a `Result`, the call is decided at once by the memory store,
/// without an executor (for CLI tools and sync services): the same limits, budgets and
/// statistics as an `async fn`. A store that must be waited for (Redis, or any store given to
/// `RateLimitService::with_store`) cannot decide without blocking, so `Module::init` fails
/// naming each sync fn (`ProblemKind::SyncOnWaitingStore`) — never a hidden `block_on`, never
/// a pass — and a call that reaches such a store anyway is refused with
/// `Error::SyncOnWaitingStore`.
///
/// ```
/// use ratelimit::{throttle, Error, Module};
///
/// #[throttle(2, "minute")]
/// fn convert(path: &str) -> Result<usize, Error> {
///     Ok(path.len())
/// }
///
/// let _module = Module::builder().init()?;
/// assert_eq!(convert("a.png")?, 5);
/// convert("b.png")?;
/// assert!(matches!(convert("c.png"), Err(Error::Exceeded(_))));
/// # Ok::<(), Error>(())
/// ```
///
/// In tests, `TestModule::run` is the scope of sync fns (`scope` wraps futures).
///
/// # Libraries own their limits
///
/// A library that limits its own fns names a [`Limiter`] of its own with `limiter = path`,
/// builds it with its own configuration (tiers, default limit, store), and its fns are
/// checked when it is built. The application's `Module::init` neither decides, checks nor
/// requires them: an application with no tier `pro` links a library whose fns say
/// `tier = "pro"`. Until the library builds its limiter (and after its handle is dropped),
/// its fns are refused with `Error::NotInitialized`, naming the fn and so its crate.
///
/// ```
/// use ratelimit::{rate_limit, Error, Limiter, Module, Tier};
///
/// /// The library's limiter.
/// pub static LIMITS: Limiter = Limiter::new();
///
/// #[rate_limit(tier = "pro", key = user, limiter = LIMITS)]
/// pub async fn fetch(user: u32) -> Result<u32, Error> {
///     Ok(user)
/// }
///
/// # futures::executor::block_on(async {
/// let _app = Module::builder().init()?; // the app knows no tier `pro`
/// assert!(matches!(fetch(1).await, Err(Error::NotInitialized { .. })));
/// let _library = LIMITS.init(Module::builder().tier(Tier::new("pro", 1).window("1m")))?;
/// assert_eq!(fetch(1).await?, 1);
/// assert!(fetch(1).await.is_err());
/// # Ok::<(), Error>(())
/// # }).unwrap();
/// ```
///
/// One fn's stacked limits are decided by one limiter: its attributes name the same path or
/// leave it out. On an `impl` block, the block's `limiter` holds for its methods' own
/// attributes too, unless they name one.
///
/// # On an `impl` block
///
/// Every method of the block gets the limit, but for those whose signature shows they cannot
/// carry a refusal — a sync method that returns nothing or `Self` (`fn clear(&mut self)`,
/// `fn new() -> Self`) — and those marked [`#[skip_throttle]`](macro@skip_throttle); a
/// method's own `#[rate_limit]` or `#[throttle]` replaces the block's. The macro does not go by
/// the name of the return type, which an alias hides: a `Result` under any name
/// (`type ApiResult<T> = Result<T, Error>`, `pub use std::result::Result as Res`) is limited,
/// and any other return type — a getter's `&str`, `u32`, `Option<Self>`, or `io::Result<T>`
/// (`io::Error` has no `From<ratelimit::Error>`) — is a compile error on it: return a `Result`
/// whose error is `From<ratelimit::Error>`, or mark the method `#[skip_throttle]`. So a
/// method is limited, or its signature says why not. `Self` is a name too: in a trait impl
/// whose `Self` is a `Result` (`impl Make for Result<u8, Error>`, or for an alias of one), a
/// sync `fn make() -> Self` is a compile error on `Self` (give it a limit of its own, or
/// `#[skip_throttle]`), and in one for any type (`impl<T> Make for T`) it is limited.
///
/// ```
/// use ratelimit::{throttle, Error, Module};
///
/// type ApiResult<T> = Result<T, Error>;
///
/// struct Disk {
///     bytes: u64,
/// }
///
/// #[throttle(2, "minute")]
/// impl Disk {
///     fn new() -> Self {
///         Disk { bytes: 0 } // returns `Self`: not limited
///     }
///
///     fn clear(&mut self) {
///         self.bytes = 0; // returns nothing: not limited
///     }
///
///     fn write(&mut self, n: u64) -> ApiResult<u64> {
///         self.bytes += n; // limited: a `Result` by another name
///         Ok(self.bytes)
///     }
///
///     #[skip_throttle] // without it, a compile error: `u64` cannot carry a refusal
///     fn bytes(&self) -> u64 {
///         self.bytes
///     }
/// }
///
/// let mut disk = Disk::new();
/// assert!(matches!(disk.write(1), Err(Error::NotInitialized { .. })));
/// let _module = Module::builder().init()?;
/// disk.write(1)?;
/// disk.write(1)?;
/// assert!(matches!(disk.write(1), Err(Error::Exceeded(_))));
/// disk.clear();
/// assert_eq!(disk.bytes(), 0);
/// # Ok::<(), Error>(())
/// ```
///
/// A macro call among the block's items (`methods!();`) writes its methods after the block's
/// attribute has run, so the limit cannot reach them: it is a compile error, unless the call
/// is marked `#[skip_throttle]` (what it writes is exempt, or limits itself). A trait's provided
/// methods that the block does not write are not in it, and not limited by it: write them in
/// the block, or annotate them in the trait. A method's own limit is read under its own name:
/// one under a `use .. as` alias or behind `cfg_attr` is a compile error (it would be expanded
/// on a method the block has limited already), so annotate such a method in an `impl` block
/// without a limit.
///
/// A method that is not `async` but returns a future (its return type names `Future`,
/// `BoxFuture` or `LocalBoxFuture`: `impl Future<Output = ..>`, `Pin<Box<dyn Future<..>>>`,
/// ...) is a compile error rather than silently unlimited: make it an `async fn`, or exempt it
/// with `#[skip_throttle]`. This also works for impls of traits with native `async fn`.
///
/// With `#[async_trait]`, put the limit on the impl block **above** `#[async_trait]`, so it
/// sees the `async fn`s before they are rewritten:
///
/// ```
/// use ratelimit::{rate_limit, Error, Module};
///
/// #[async_trait::async_trait]
/// trait Service {
///     async fn call(&self) -> Result<(), Error>;
/// }
///
/// struct Api;
///
/// #[rate_limit(limit = 1, window = "1h")] // first: sees the `async fn`s
/// #[async_trait::async_trait] // then: boxes them
/// impl Service for Api {
///     async fn call(&self) -> Result<(), Error> {
///         Ok(())
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let _module = Module::builder().init()?;
/// let api: Box<dyn Service> = Box::new(Api);
/// api.call().await?;
/// assert!(api.call().await.is_err());
/// # Ok::<(), Error>(())
/// # }).unwrap();
/// ```
///
/// The other order does not compile: `#[async_trait]` turns the methods into plain fns
/// returning a boxed future before `#[rate_limit]` sees them, and the error on each method
/// says to swap the attributes (the same holds for a method's own `#[rate_limit]` under
/// `#[async_trait]`).
///
/// # Stacked limits
///
/// Several `#[rate_limit]` / `#[throttle]` attributes on one fn (or one method, or one `impl`
/// block: then on each of its methods) all apply,
/// decided as one: a call passes, and spends from every limit, only if every limit admits it,
/// atomically in memory and in one Redis script; a call refused by one limit spends nothing
/// from the others. The first attribute's budget is the fn's path, the next ones' the path
/// and their place (`app::export#2`), unless they are given a `name`.
///
/// ```
/// use ratelimit::{rate_limit, throttle, Error};
///
/// #[throttle(5)]                                     // against bursts
/// #[rate_limit(limit = 1_000, window = "1d", key = account)] // and per account per day
/// async fn export(account: u64) -> Result<(), Error> {
///     Ok(())
/// }
/// ```
///
/// # Renamed crate
///
/// The expansion names the runtime as `::ratelimit`. If your `Cargo.toml` depends on it under
/// another name (`limiter = { package = "ratelimit", .. }`) and on no dependency named
/// `ratelimit`, the attribute is a compile error saying to add `crate = "limiter"`. The check
/// reads `Cargo.toml` as text and stays quiet whenever it is unsure (a rename inherited from
/// the workspace, a manifest it cannot read); `crate = "..."` always skips it, so an
/// `extern crate limiter as ratelimit;` setup can say `crate = "ratelimit"`.
///
/// # Compile errors
///
/// A `const` fn, a sync fn that returns a future, an unknown or duplicate argument, a
/// `limiter` that is not the path of a `static` `Limiter` (or two on one fn), a bad window, a
/// negative or non-integer limit, an unknown strategy, or a return type that cannot carry the
/// refusal
/// (anything but `Result<_, E>` with `E: From<ratelimit::Error>`) is a compile error on the
/// offending token. So is, in an annotated `impl` block, a method not marked
/// `#[skip_throttle]` that returns a future without being `async` or returns something that
/// cannot carry the refusal (see [On an `impl` block](#on-an-impl-block)), and a renamed crate
/// without `crate = "..."`. On an error the item is still emitted, without the limit, so that
/// the rest of the crate (and an IDE) keeps working.
///
/// [`Module`]: https://docs.rs/ratelimit/latest/ratelimit/struct.Module.html
/// [`Limiter`]: https://docs.rs/ratelimit/latest/ratelimit/struct.Limiter.html
#[proc_macro_attribute]
pub fn rate_limit(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::entry(
        attr::Args::rate_limit(args.into()),
        item.into(),
        "`#[rate_limit]`",
    )
    .into()
}

/// `#[throttle(n)]`: at most `n` calls per second; `#[throttle(n, "minute")]` per minute
/// (`"second"`, `"minute"`, `"hour"`, `"day"`).
///
/// The same as `#[rate_limit(limit = n, window = "1s")]`, and usable in the same places (fns,
/// methods, `impl` blocks). Other `#[rate_limit]` arguments may follow:
/// `#[throttle(5, "minute", key = user_id)]`.
///
/// ```
/// use ratelimit::{throttle, Error, Module};
///
/// #[throttle(2, "minute")]
/// async fn ping() -> Result<&'static str, Error> {
///     Ok("pong")
/// }
///
/// # futures::executor::block_on(async {
/// let _module = Module::builder().init()?;
/// assert_eq!(ping().await?, "pong");
/// assert_eq!(ping().await?, "pong");
/// assert!(matches!(ping().await, Err(Error::Exceeded(_))));
/// # Ok::<(), Error>(())
/// # }).unwrap();
/// ```
#[proc_macro_attribute]
pub fn throttle(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::entry(
        attr::Args::throttle(args.into()),
        item.into(),
        "`#[throttle]`",
    )
    .into()
}

/// Exempts one method of an `impl` block annotated with `#[rate_limit]` or `#[throttle]`.
///
/// The impl block's attribute removes it, so it needs no `use` (importing it would be an unused
/// import). Anywhere else (a free fn, a method of a block without a limit, or next to a limit on the
/// same fn) it is a compile error: it never silently does nothing.
///
/// ```
/// use ratelimit::{throttle, Error, Module};
///
/// struct Api;
///
/// #[throttle(1, "hour")]
/// impl Api {
///     async fn search(&self) -> Result<(), Error> {
///         Ok(())
///     }
///
///     #[skip_throttle]
///     async fn health(&self) -> Result<(), Error> {
///         Ok(())
///     }
/// }
///
/// # futures::executor::block_on(async {
/// let _module = Module::builder().init()?;
/// Api.search().await?;
/// assert!(Api.search().await.is_err());
/// for _ in 0..10 {
///     Api.health().await?; // never limited, works without a module too
/// }
/// # Ok::<(), Error>(())
/// # }).unwrap();
/// ```
#[proc_macro_attribute]
pub fn skip_throttle(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::skip(args.into(), item.into()).into()
}
