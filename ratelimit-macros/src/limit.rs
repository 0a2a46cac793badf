//! One limit of a rate-limited fn: its declaration (the static, its spec and its registration)
//! and the statements that evaluate its key, tier and cost before the body
//! (`generate.rs` puts them around the body).

use proc_macro2::{Literal, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::Signature;

use ratelimit_syntax::Strategy;

use crate::attr::{Args, Cost, Tier};

/// The strategy as a path to its variant. The name is the variant's own (the derived `Debug`
/// of a variant without fields), so a strategy added to `ratelimit-syntax` needs nothing here.
fn strategy_tokens(strategy: Strategy, krate: &TokenStream) -> syn::Result<TokenStream> {
    let variant = syn::Ident::new(&format!("{strategy:?}"), Span::call_site());
    Ok(quote!(#krate::__private::Strategy::#variant))
}

/// The spec a limit's `Args` describe, as a const expression.
fn spec_tokens(args: &Args, k: &TokenStream) -> syn::Result<TokenStream> {
    let mut spec = quote!(#k::__private::Spec::new());
    if let Some(limit) = args.limit {
        let limit = Literal::u64_suffixed(limit);
        spec = quote!(#spec.with_limit(#limit));
    }
    if let Some(window) = args.window {
        let nanos = Literal::u64_suffixed(window.as_nanos() as u64);
        spec = quote!(#spec.with_window_nanos(#nanos));
    }
    if let Some(burst) = args.burst {
        let burst = Literal::u64_suffixed(burst);
        spec = quote!(#spec.with_burst(#burst));
    }
    if let Some(block) = args.block_for {
        let nanos = Literal::u64_suffixed(block.as_nanos() as u64);
        spec = quote!(#spec.with_block_nanos(#nanos));
    }
    if let Some(strategy) = args.strategy {
        let strategy = strategy_tokens(strategy, k)?;
        spec = quote!(#spec.with_strategy(#strategy));
    }
    match &args.tier {
        Tier::Default => {}
        Tier::Static(name) => spec = quote!(#spec.with_static_tier(#name)),
        Tier::Dynamic(_) => spec = quote!(#spec.with_dynamic_tier()),
    }
    if args.key.is_some() {
        spec = quote!(#spec.with_key());
    }
    match &args.cost {
        Cost::Fixed(cost) => {
            let cost = Literal::u64_suffixed(*cost);
            spec = quote!(#spec.with_fixed_cost(#cost));
        }
        Cost::Dynamic(_) => spec = quote!(#spec.with_dynamic_cost()),
    }
    if args.shadow {
        spec = quote!(#spec.with_shadow(true));
    }
    if let Some(queue) = args.queue {
        spec = quote!(#spec.with_queue(#queue));
    }
    Ok(spec)
}

/// The name of a limit's declaration static, numbered by the limit's place:
/// `generate::limited_already` looks for it.
pub(crate) const DECLARATION: &str = "__RATELIMIT_DECLARATION_";

/// One limit of a fn: its declaration (a static and its registration) and the statements
/// that evaluate its key, tier and cost; `index` numbers the limits of one fn from 0.
pub(crate) struct Limit {
    pub(crate) items: TokenStream,
    pub(crate) setup: TokenStream,
    /// The key's statements for a call decided at once: written into a `KeySlot` (an
    /// integer read where it was formatted), lent as `Option<&str>`.
    pub(crate) key_slot: TokenStream,
    /// The tier's statement, then the cost's.
    pub(crate) tier: TokenStream,
    pub(crate) cost: TokenStream,
    /// `&DECLARATION, key, tier, cost`, as `acquire_all` and `acquire_spent` take them (the
    /// key as `&str`).
    pub(crate) call: TokenStream,
    /// The same, as `acquire_spent_now` takes them (the key as `&KeyText`).
    pub(crate) call_here: TokenStream,
    /// The same as the key's statement left the key: owned (`Option<KeyText>`, after `setup`),
    /// as `acquire_tier` takes it, moved into its future so that the fn's own future does not
    /// hold it across the wait; lent (`Option<&str>`, after `key_slot`), as `acquire_now`
    /// takes it.
    pub(crate) call_direct: TokenStream,
    /// `&DECLARATION, key, cost` after `key_slot`, as `acquire_here` takes them.
    pub(crate) call_at_once: TokenStream,
    /// The declaration's static.
    pub(crate) decl: syn::Ident,
    /// The tier is chosen per call (`tier = expr`).
    pub(crate) tier_per_call: bool,
}

pub(crate) fn limit(
    args: &Args,
    index: usize,
    function: &TokenStream,
    sig: &Signature,
    k: &TokenStream,
) -> syn::Result<Limit> {
    let mixed = Span::mixed_site();
    let var = |name: &str| syn::Ident::new(&format!("__ratelimit_{name}_{index}"), mixed);
    let decl = syn::Ident::new(&format!("{DECLARATION}{index}"), mixed);
    let spec = spec_tokens(args, k)?;
    // The first limit's budget is the fn's path; a stacked one's, the path and its place in
    // attribute order (`app::f#2`), so that one fn's limits never share a budget.
    let name = match (&args.name, index) {
        (Some(name), _) => quote!(::core::option::Option::Some(#name)),
        (None, 0) => quote!(::core::option::Option::None),
        (None, i) => {
            let suffix = format!("#{}", i + 1);
            quote!(::core::option::Option::Some(
                ::core::concat!(#function, #suffix)
            ))
        }
    };
    let location = sig.ident.span();
    let file = quote_spanned!(location=> ::core::file!());
    let line = quote_spanned!(location=> ::core::line!());
    // The declaration takes the limiter's address, so a path to anything but a `static`
    // `Limiter` is a type error spanned on the path.
    let mut declaration = quote!(#k::__private::Declaration::new(
        #function, #name, #file, #line, #spec,
    ));
    if let Some(path) = &args.limiter {
        declaration = quote_spanned!(path.span()=> #declaration.with_limiter(&#path));
    }
    if sig.asyncness.is_none() {
        declaration = quote!(#declaration.with_sync());
    }
    if args.count.is_some() {
        declaration = quote!(#declaration.with_refunds());
    }
    let (key_var, tier_value, tier_var, cost_var) =
        (var("key"), var("tier_value"), var("tier"), var("cost"));
    let key = match &args.key {
        // `KeyArg` carries the key by its type (integers and strings are written directly)
        // and as `dyn Display`: a key that is not `Display` is an error spanned on it.
        Some(expr) => {
            // The same binding, located at the key: the coercion's error points there.
            let shown = syn::Ident::new(&key_var.to_string(), mixed.located_at(expr.span()));
            // The text is written where it stays (`Option::insert`), not returned and moved:
            // the move read back the bytes just written, a store-forwarding stall on every
            // keyed call.
            let text = var("key_text");
            quote_spanned! {expr.span()=>
                let mut #key_var: ::core::option::Option<#k::__private::KeyText> =
                    ::core::option::Option::None;
                {
                    #[allow(unused_imports)]
                    use #k::__private::{KeyDirect as _, KeyDisplayed as _};
                    let #text = ::core::option::Option::insert(
                        &mut #key_var,
                        #k::__private::KeyText::new(),
                    );
                    match &(#expr) {
                        #key_var => (&#k::__private::KeyArg(#key_var, #shown)).write_key_text(#text),
                    }
                }
            }
        }
        None => quote! {
            let #key_var: ::core::option::Option<#k::__private::KeyText> = ::core::option::Option::None;
        },
    };
    // The same key written into a slot and lent: an integer is read where `itoa` wrote it.
    let key_slot = match &args.key {
        Some(expr) => {
            let shown = syn::Ident::new(&key_var.to_string(), mixed.located_at(expr.span()));
            let slot = var("key_slot");
            quote_spanned! {expr.span()=>
                let mut #slot = #k::__private::KeySlot::new();
                let #key_var: ::core::option::Option<&::core::primitive::str> = {
                    #[allow(unused_imports)]
                    use #k::__private::{KeyDirect as _, KeyDisplayed as _};
                    ::core::option::Option::Some(match &(#expr) {
                        #key_var => (&#k::__private::KeyArg(#key_var, #shown)).key_str(&mut #slot),
                    })
                };
            }
        }
        None => quote! {
            let #key_var: ::core::option::Option<&::core::primitive::str> = ::core::option::Option::None;
        },
    };
    let tier = match &args.tier {
        Tier::Dynamic(expr) => quote_spanned! {expr.span()=>
            let #tier_value = &(#expr);
            let #tier_var: ::core::option::Option<&::core::primitive::str> =
                ::core::option::Option::Some(
                    ::core::convert::AsRef::<::core::primitive::str>::as_ref(#tier_value),
                );
        },
        _ => quote! {
            let #tier_var: ::core::option::Option<&::core::primitive::str> =
                ::core::option::Option::None;
        },
    };
    let cost = match &args.cost {
        Cost::Dynamic(expr) => {
            quote_spanned!(expr.span()=> let #cost_var: ::core::primitive::u64 = #expr;)
        }
        Cost::Fixed(n) => {
            let n = Literal::u64_suffixed(*n);
            quote!(let #cost_var: ::core::primitive::u64 = #n;)
        }
    };
    Ok(Limit {
        // Lints of the user's crate (`unused_qualifications` on the absolute paths, clippy's
        // style lints) have nothing to say about the generated items.
        items: quote! {
            #[allow(unused_qualifications, clippy::all, clippy::pedantic, clippy::nursery)]
            static #decl: #k::__private::Declaration = #declaration;
            #[allow(unused_qualifications, clippy::all, clippy::pedantic, clippy::nursery)]
            const _: () = {
                #k::__private::inventory::submit! {
                    #k::__private::Registered(&#decl)
                }
            };
        },
        setup: quote!(#key #tier #cost),
        key_slot,
        tier,
        cost,
        call: quote! {
            &#decl, ::core::option::Option::as_deref(&#key_var), #tier_var, #cost_var
        },
        call_here: quote! {
            &#decl, ::core::option::Option::as_ref(&#key_var), #tier_var, #cost_var
        },
        call_direct: quote!(&#decl, #key_var, #tier_var, #cost_var),
        call_at_once: quote!(&#decl, #key_var, #cost_var),
        tier_per_call: matches!(args.tier, Tier::Dynamic(_)),
        decl,
    })
}
