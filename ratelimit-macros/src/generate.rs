//! Generating the rate-limited fn: its declaration and the checks before its body.
//!
//! Input:
//!
//! ```text
//! #[rate_limit(limit = 10, window = "1m", key = user.id)]
//! pub async fn charge(&self, user: &User) -> Result<Receipt, AppError> { BODY }
//! ```
//!
//! Output for a method of `impl Payments` (paths shortened: every one is absolute in the real
//! expansion, `::ratelimit::__private::...` or `::core::...`; the `_0` suffix numbers the fn's
//! limits):
//!
//! ```text
//! pub async fn charge(&self, user: &User) -> Result<Receipt, AppError> {
//!     #[allow(unused_qualifications, clippy::all, clippy::pedantic, clippy::nursery)]
//!     static __RATELIMIT_DECLARATION_0: Declaration = Declaration::new(
//!         concat!(module_path!(), "::", "Payments", "::", "charge"), None, file!(), line!(),
//!         Spec::new().with_limit(10u64).with_window_nanos(60000000000u64).with_key()
//!             .with_fixed_cost(1u64),
//!     );
//!     #[allow(unused_qualifications, clippy::all, clippy::pedantic, clippy::nursery)]
//!     const _: () = { inventory::submit! { Registered(&__RATELIMIT_DECLARATION_0) } };
//!     #[allow(unused_qualifications)]
//!     {
//!         // The scrutinee's block ends (its key slot with it) before any wait.
//!         if let Err(__ratelimit_error) = match {
//!             // The key's text written into a slot and lent: an integer is read where `itoa`
//!             // wrote it, a string or a `Display` written into the slot's `KeyText`.
//!             let mut __ratelimit_key_slot_0 = KeySlot::new();
//!             let __ratelimit_key_0: Option<&str> = {
//!                 use __private::{KeyDirect as _, KeyDisplayed as _};
//!                 Some(match &(user.id) {
//!                     __ratelimit_key_0 => (&KeyArg(__ratelimit_key_0, __ratelimit_key_0))
//!                         .key_str(&mut __ratelimit_key_slot_0),
//!                 })
//!             };
//!             let __ratelimit_cost_0: u64 = 1u64;
//!             acquire_here(&__RATELIMIT_DECLARATION_0, __ratelimit_key_0, __ratelimit_cost_0)
//!         } {
//!             Here::Admitted => Ok(()),
//!             Here::Refused(__ratelimit_decided) => Err(*__ratelimit_decided),
//!             // Not decided at once: awaited, on the store key `acquire_here` composed; the
//!             // key's text, copied, the cost and the site are in `Later`, which moves into
//!             // `acquire`'s (boxed) future.
//!             Here::Later(__ratelimit_later) => {
//!                 acquire(__ratelimit_later, &__RATELIMIT_DECLARATION_0).await
//!             }
//!         } {
//!             return <Result<Receipt, AppError> as Refusal>::refused(__ratelimit_error);
//!         }
//!     }
//!     { BODY }
//! }
//! ```
//!
//! (See [`crate::path`] for the fn's path in every place: free fn, inherent or trait impl.)
//!
//! A sync fn writes its key into a slot the same way, then its tier and cost, and matches on
//! `acquire_now(..)` (no `.await`: decided at once; `Ok` or a boxed `Err`, unboxed as
//! `Here::Refused`'s); its declaration says `.with_sync()`. An async fn with a tier chosen per
//! call (`tier = expr`) writes its key into an owned `Option<KeyText>` (then its tier and
//! cost, as the fn's own statements) and awaits `acquire_tier(..)`, which owns the key;
//! `count = ..` and stacked limits write it the same way;
//! stacked limits declare one static each and call `acquire_all(&[..]).await` (sync:
//! `acquire_all_now`); `limiter = PATH` adds
//! `.with_limiter(&PATH)`, so a library's fn is decided and checked by the library's limiter; a
//! return type that names `impl Trait` refuses through `refuse(..)` rather than `Refusal`.
//!
//! The signature is re-emitted untouched and the body stays inside the same fn, so `self`,
//! `Self`, generics, where-clauses and lifetimes keep working. The key, tier and cost
//! expressions are evaluated (by reference) before the body, which may move the arguments.
//! The body is its own block: a `use` inside it cannot shadow the paths used here.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{Block, ReturnType, Signature};

use crate::attr::{self, Args};
use crate::limit::{limit, Limit, DECLARATION};
use crate::path::Place;

fn contains_impl(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|t| match t {
        TokenTree::Ident(i) => i == "impl",
        TokenTree::Group(g) => contains_impl(g.stream()),
        _ => false,
    })
}

/// Whether `block` is the body of a fn our expansion has limited already: it declares a limit.
/// An attribute reads the limits of its fn (or of an `impl` block's methods) by their names, so
/// one written under another name (`use ratelimit::rate_limit as limit`) or behind `cfg_attr`
/// is expanded afterwards, on the limited fn: the call would spend from two budgets, one after
/// the other (not as one), and a method's own limit would not replace its block's.
fn limited_already(block: &Block) -> bool {
    block.stmts.iter().any(|s| {
        matches!(s, syn::Stmt::Item(syn::Item::Static(item))
            if item.ident.to_string().starts_with(DECLARATION))
    })
}

/// The new body of a rate-limited fn at `place`: a declaration per limit, the check, then the
/// original body. Several limits (stacked attributes) are decided as one: the call passes,
/// and spends from each, only if every one admits it.
pub(crate) fn body(
    all: &[Args],
    place: &Place,
    sig: &Signature,
    block: &Block,
) -> syn::Result<Block> {
    if limited_already(block) {
        return Err(syn::Error::new(
            Span::call_site(),
            "this fn is limited already, by an attribute that ran before this one without \
             seeing it (an `impl` block's limit, or a limit above this one): it reads limits \
             written `#[rate_limit(..)]` or `#[throttle(..)]`, not under a `use .. as` alias or \
             behind `cfg_attr`, and the call would spend from both limits, one after the other\n\
             = help: write this limit as `#[rate_limit(..)]` or `#[throttle(..)]`, directly on \
             the fn;\n\
             = help: for a limit under a `cfg`, annotate the method on its own, in an `impl` \
             block without a limit",
        ));
    }
    let all = &attr::one_limiter(all)?;
    let k = all[0].krate();
    let function = place.function(&sig.ident);
    let count = counted(all, sig)?;
    let limits = all
        .iter()
        .enumerate()
        .map(|(i, args)| limit(args, i, &function, sig, &k))
        .collect::<syn::Result<Vec<Limit>>>()?;
    let items = limits.iter().map(|l| &l.items);
    let setup = limits.iter().map(|l| &l.setup);
    let setup = quote!(#(#setup)*);
    let decided = syn::Ident::new("__ratelimit_decided", Span::mixed_site());
    // A sync fn is decided at once (the memory store; any other store refuses it).
    let (setup, check) = match (limits.as_slice(), sig.asyncness.is_some()) {
        // A tier chosen per call: decided on a site worked out for the call.
        ([one], true) if one.tier_per_call => {
            let call = &one.call_direct;
            (setup, quote!(#k::__private::acquire_tier(#call).await))
        }
        // Decided at the call site when it can be (see `acquire_here`), without building
        // `acquire`'s future; otherwise awaited, from where `acquire_here` got to. The key's
        // slot is the scrutinee's own: it ends before the wait.
        ([one], true) => {
            let (key, cost, here, decl) = (&one.key_slot, &one.cost, &one.call_at_once, &one.decl);
            let later = syn::Ident::new("__ratelimit_later", Span::mixed_site());
            let check = quote!(match { #key #cost #k::__private::acquire_here(#here) } {
                #k::__private::Here::Admitted => ::core::result::Result::Ok(()),
                #k::__private::Here::Refused(#decided) => ::core::result::Result::Err(*#decided),
                #k::__private::Here::Later(#later) => #k::__private::acquire(#later, &#decl).await,
            });
            (TokenStream::new(), check)
        }
        // Answered in one word (see `acquire_now`), the refusal unboxed where it is returned.
        ([one], false) => {
            let (key, tier, cost, here) = (&one.key_slot, &one.tier, &one.cost, &one.call_direct);
            let check = quote!(match #k::__private::acquire_now(#here) {
                ::core::result::Result::Ok(()) => ::core::result::Result::Ok(()),
                ::core::result::Result::Err(#decided) => ::core::result::Result::Err(*#decided),
            });
            (quote!(#key #tier #cost), check)
        }
        (many, true) => {
            let calls = many.iter().map(|l| &l.call);
            (
                setup,
                quote!(#k::__private::acquire_all(&[#((#calls)),*]).await),
            )
        }
        (many, false) => {
            let calls = many.iter().map(|l| &l.call);
            (
                setup,
                quote!(#k::__private::acquire_all_now(&[#((#calls)),*])),
            )
        }
    };
    let error_var = syn::Ident::new("__ratelimit_error", Span::mixed_site());
    // Through a trait, so that `Result` under any name (an alias, a re-export) carries the
    // refusal, and anything else is a type error spanned on the return type.
    let refusal = match &sig.output {
        ReturnType::Type(_, ty) if !contains_impl(ty.to_token_stream()) => {
            let span = ty.span();
            let refusal = quote_spanned!(span=> #k::__private::Refusal);
            quote_spanned!(span=> <#ty as #refusal>::refused(#error_var))
        }
        ReturnType::Type(_, ty) => {
            quote_spanned!(ty.span()=> #k::__private::refuse(#error_var))
        }
        ReturnType::Default => unreachable!("refused by signature::check"),
    };
    let stmts = &block.stmts;
    if let Some(errors) = count {
        let tokens = counted_body(&k, &limits, sig, &refusal, &error_var, stmts, errors);
        return Ok(Block {
            brace_token: block.brace_token,
            stmts: syn::parse::Parser::parse2(Block::parse_within, tokens)?,
        });
    }
    // The check keeps its lint guard narrow: it holds the user's key, tier and cost
    // expressions.
    let tokens = quote! {
        #(#items)*
        #[allow(unused_qualifications)]
        {
            #setup
            if let ::core::result::Result::Err(#error_var) = #check {
                return #refusal;
            }
        }
        { #(#stmts)* }
    };
    // Keep the original braces: a body whose braces come from the macro makes the compiler
    // treat the fn as generated and skip lints such as `dead_code` on it.
    Ok(Block {
        brace_token: block.brace_token,
        stmts: syn::parse::Parser::parse2(Block::parse_within, tokens)?,
    })
}

/// `count = ..` of a fn's limits: `Some(true)` when only errors count, `Some(false)` when only
/// successes, `None` when every call does. A call has one outcome, so stacked limits that say
/// `count` say the same (one saying it is enough: a refund gives back to every limit or to
/// none). An error on a return type the expansion cannot write (`impl Trait`).
fn counted(all: &[Args], sig: &Signature) -> syn::Result<Option<bool>> {
    let mut counts = all.iter().filter_map(|a| a.count.as_ref());
    let Some(count) = counts.next() else {
        return Ok(None);
    };
    if let Some(other) = counts.find(|c| c.errors() != count.errors()) {
        return Err(syn::Error::new(
            other.span(),
            "a call has one outcome: the limits of one fn count the same outcomes (write \
             `count` on one of them, or the same on each)",
        ));
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        if contains_impl(ty.to_token_stream()) {
            return Err(syn::Error::new(
                count.span(),
                "`count` needs the fn's return type written out (`Result<T, E>`), not `impl ..`",
            ));
        }
    }
    Ok(Some(count.errors()))
}

/// The body of a fn with one limit that counts only some outcomes: the call spends before the
/// body runs (so no more bodies run at once than the limit allows), the body runs as a block
/// of its own (its `return`s and `?`s end the block, not the fn), and the spend is given back
/// when the outcome does not count. A body cancelled midway keeps its spend.
fn counted_body(
    k: &TokenStream,
    limits: &[Limit],
    sig: &Signature,
    refusal: &TokenStream,
    error_var: &syn::Ident,
    stmts: &[syn::Stmt],
    errors: bool,
) -> TokenStream {
    let items = limits.iter().map(|l| &l.items);
    let setup = limits.iter().map(|l| &l.setup);
    let spent = syn::Ident::new("__ratelimit_spent", Span::mixed_site());
    let outcome = syn::Ident::new("__ratelimit_outcome", Span::mixed_site());
    let never = syn::Ident::new("__ratelimit_never", Span::mixed_site());
    let (ty, span) = match &sig.output {
        ReturnType::Type(_, ty) => (ty.to_token_stream(), ty.span()),
        ReturnType::Default => (quote!(()), sig.span()),
    };
    // Spanned on the return type: a type with no success or failure is an error there.
    let counts = quote_spanned!(span=> #k::__private::counts(&#outcome, #errors));
    // Pins the block's type to the fn's, so that `?` in the body converts as it does in the
    // fn.
    let pin = quote! {
        #[allow(unreachable_code, clippy::all, clippy::pedantic, clippy::nursery)]
        if false {
            let #never: #ty = ::core::unreachable!();
            return #never;
        }
    };
    let (acquire, run, settle) = match (limits, sig.asyncness.is_some()) {
        ([one], true) => {
            let call = &one.call;
            (
                quote!(#k::__private::acquire_spent(#call).await),
                quote!(async { #pin #(#stmts)* }.await),
                quote!(#k::__private::settle(#spent, #counts).await),
            )
        }
        ([one], false) => {
            let here = &one.call_here;
            (
                quote!(#k::__private::acquire_spent_now(#here)),
                quote!((|| { #pin #(#stmts)* })()),
                quote!(#k::__private::settle_now(#spent, #counts)),
            )
        }
        (many, true) => {
            let calls = many.iter().map(|l| &l.call);
            (
                quote!(#k::__private::acquire_all_spent(&[#((#calls)),*]).await),
                quote!(async { #pin #(#stmts)* }.await),
                quote!(#k::__private::settle(#spent, #counts).await),
            )
        }
        (many, false) => {
            let calls = many.iter().map(|l| &l.call);
            (
                quote!(#k::__private::acquire_all_spent_now(&[#((#calls)),*])),
                quote!((|| { #pin #(#stmts)* })()),
                quote!(#k::__private::settle_now(#spent, #counts)),
            )
        }
    };
    quote! {
        #(#items)*
        #[allow(unused_qualifications)]
        let #spent = {
            #(#setup)*
            match #acquire {
                ::core::result::Result::Ok(#spent) => #spent,
                ::core::result::Result::Err(#error_var) => return #refusal,
            }
        };
        #[allow(unused_qualifications)]
        let #outcome = #run;
        #[allow(unused_qualifications)]
        #settle;
        #outcome
    }
}
