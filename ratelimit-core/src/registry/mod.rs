//! The registry behind the attribute macros: every annotated fn's [`Declaration`], the one
//! process-wide service installed by [`Module`], and the per-call entry point the generated code
//! goes through.
//!
//! Fail closed throughout: no module (never initialised, or shut down), an unknown tier, a store
//! that cannot answer — each refuses the call. Nothing here admits a call because something is
//! missing.

mod check;
mod declaration;
mod key_text;
mod limiter;
mod module;
mod runtime;
mod spec;
mod stacked;
#[cfg(feature = "notify")]
mod watch;

pub use check::check_declarations;
pub use declaration::{declarations, Declaration, Registered};
pub use key_text::{KeyArg, KeyDirect, KeyDisplayed, KeyPart, KeySlot, KeyText};
pub use limiter::Limiter;
pub use module::{Module, ModuleBuilder};
pub(crate) use runtime::replace_scoped;
pub use runtime::{
    acquire, acquire_here, acquire_now, acquire_spent, acquire_spent_now, acquire_tier, counts,
    refuse, settle, settle_now, Here, Later, Outcome, Refusal, RefusalError,
};
pub use spec::{Spec, TierSpec};
pub use stacked::{acquire_all, acquire_all_now, acquire_all_spent, acquire_all_spent_now};
#[cfg(feature = "notify")]
pub use watch::FileWatch;
