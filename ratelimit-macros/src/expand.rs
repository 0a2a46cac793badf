//! The attribute macros' entry points: a fn, an `impl` block (every async method, `skip`
//! honoured), stacked attributes, and the errors reported where they were found. The
//! rate-limited fn itself is generated in [`crate::generate`].

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::spanned::Spanned;
use syn::{Attribute, ImplItem, ItemFn, ItemImpl};

use crate::attr::{self, Args, Errors, Kind};
use crate::generate::body;
use crate::manifest;
use crate::path::Place;
use crate::signature;

/// The limits stacked below the one being expanded (`#[rate_limit]` / `#[throttle]`
/// attributes further down the fn), parsed, in attribute order; the attributes are removed.
/// A `#[skip_throttle]` beside a limit is an error.
fn stacked(attrs: &mut Vec<Attribute>, what: &str, errors: &mut Errors) -> Vec<Args> {
    let mut limits = Vec::new();
    let mut kept = Vec::with_capacity(attrs.len());
    for a in attrs.drain(..) {
        match attr::kind(&a) {
            Some(Kind::Skip) => errors.push(syn::Error::new_spanned(
                &a,
                format!("`#[skip_throttle]` exempts a fn from its impl block's limit; it cannot be combined with {what} on the same fn"),
            )),
            Some(kind) => match attr::parse_attr(&a, kind) {
                Ok(args) => limits.push(args),
                Err(e) => errors.push(e),
            },
            None => kept.push(a),
        }
    }
    *attrs = kept;
    limits
}

/// `#[rate_limit]` / `#[throttle]` on a fn (free, or a method annotated on its own).
pub(crate) fn function(args: syn::Result<Args>, mut item: ItemFn, what: &str) -> TokenStream {
    let mut errors = Errors::default();
    let args = args.map_err(|e| errors.push(e)).ok();
    if let Err(e) = signature::check(&item.sig, what, false) {
        errors.push(e);
    }
    let more = stacked(&mut item.attrs, what, &mut errors);
    if let (true, Some(args)) = (errors.is_empty(), args) {
        let all: Vec<Args> = std::iter::once(args).chain(more).collect();
        match body(&all, &Place::Alone, &item.sig, &item.block) {
            Ok(block) => {
                *item.block = block;
                return item.into_token_stream();
            }
            Err(e) => errors.push(e),
        }
    }
    // Our other attributes would only add secondary errors.
    item.attrs.retain(|a| attr::kind(a).is_none());
    with_errors(item.into_token_stream(), errors)
}

/// The original item plus the errors, so the rest of the crate (and IDEs) still see the fn.
pub(crate) fn with_errors(item: TokenStream, errors: Errors) -> TokenStream {
    let errors = errors.finish().err().map(|e| e.to_compile_error());
    quote!(#item #errors)
}

/// `#[rate_limit]` / `#[throttle]` on an `impl` block: every method gets `args` but a sync
/// one returning nothing or `Self`; a method's own attribute overrides it, `#[skip_throttle]`
/// exempts a method.
pub(crate) fn impl_block(args: syn::Result<Args>, mut item: ItemImpl, what: &str) -> TokenStream {
    let mut errors = Errors::default();
    let args = args.map_err(|e| errors.push(e)).ok();
    // Limits stacked on the block stack on each of its methods (expanded later, each would
    // limit the methods this one has limited, one check after the other).
    let more = stacked(&mut item.attrs, what, &mut errors);
    let block: Option<Vec<Args>> = args
        .as_ref()
        .map(|args| std::iter::once(args.clone()).chain(more).collect());
    let place = Place::of_impl(&item);
    let (trait_impl, self_is_a_parameter) =
        (item.trait_.is_some(), signature::self_is_a_parameter(&item));
    for impl_item in &mut item.items {
        let method = match impl_item {
            ImplItem::Fn(method) => method,
            ImplItem::Macro(call) => {
                unseen_methods(&mut call.attrs, &call.mac.path, what, &mut errors);
                continue;
            }
            ImplItem::Verbatim(tokens) if writes_fn(tokens) => {
                errors.push(syn::Error::new_spanned(
                    &*tokens,
                    format!(
                        "{what} cannot read this item of the `impl` block, so it cannot tell \
                         whether it is a method to limit: write it as a fn with a body, or move it \
                         to an `impl` block without a limit"
                    ),
                ));
                continue;
            }
            _ => continue,
        };
        let mut own: Vec<(Kind, Attribute)> = Vec::new();
        let mut skip: Option<Attribute> = None;
        let mut kept = Vec::with_capacity(method.attrs.len());
        for a in method.attrs.drain(..) {
            match attr::kind(&a) {
                Some(Kind::Skip) if skip.is_none() => skip = Some(a),
                Some(Kind::Skip) => errors.push(syn::Error::new_spanned(
                    &a,
                    "`#[skip_throttle]` is given twice",
                )),
                Some(kind) => own.push((kind, a)),
                None => kept.push(a),
            }
        }
        method.attrs = kept;
        let method_args: Vec<Args> = match (own.as_slice(), &skip) {
            ([_, ..], Some(skip)) => {
                errors.push(syn::Error::new_spanned(
                    skip,
                    "`#[skip_throttle]` exempts a fn from its impl block's limit; it cannot be combined with a limit on the same fn",
                ));
                continue;
            }
            ([], Some(_)) => continue,
            ([(kind, _), ..], None) => {
                // The method's own limits (several stack) replace the block's.
                let own_what = match kind {
                    Kind::Throttle => "`#[throttle]`",
                    _ => "`#[rate_limit]`",
                };
                if let Err(e) = signature::check(&method.sig, own_what, true) {
                    errors.push(e);
                    continue;
                }
                let mut parsed = Vec::with_capacity(own.len());
                for (kind, a) in &own {
                    match attr::parse_attr(a, *kind) {
                        Ok(mut limit) => {
                            // The block's crate path and limiter hold for its methods' own
                            // limits: a library's method keeps to the library's limiter.
                            if limit.krate.is_none() {
                                limit.krate = args.as_ref().and_then(|a| a.krate.clone());
                            }
                            if limit.limiter.is_none() {
                                limit.limiter = args.as_ref().and_then(|a| a.limiter.clone());
                            }
                            parsed.push(limit);
                        }
                        Err(e) => errors.push(e),
                    }
                }
                if parsed.len() < own.len() {
                    continue;
                }
                parsed
            }
            ([], None) => {
                // Limited unless its signature shows it cannot carry a refusal (no return
                // type, `-> Self`): a return type the macro cannot read (an alias of `Result`,
                // a getter's `&str`) is limited, and one that cannot carry the refusal fails
                // to compile, saying to return a `Result` or add `#[skip_throttle]`.
                // `-> Self` is no sign of a constructor where `Self` is whatever type a
                // caller picks (`impl<T> Make for T`), and in a trait impl `Self` may be a
                // `Result` by another name: a compile-time check says it is not.
                if signature::exempt_in_block(&method.sig) && !self_is_a_parameter {
                    let k = block.as_ref().map(|b| b[0].krate());
                    if let Some(check) =
                        k.and_then(|k| signature::self_is_no_refusal(&method.sig, trait_impl, &k))
                    {
                        match syn::parse2::<syn::Stmt>(check) {
                            Ok(stmt) => method.block.stmts.insert(0, stmt),
                            Err(e) => errors.push(e),
                        }
                    }
                    continue;
                }
                if let Err(e) = signature::check(&method.sig, what, true) {
                    errors.push(e);
                    continue;
                }
                match &block {
                    Some(block) => block.clone(),
                    None => continue,
                }
            }
        };
        if args.is_none() {
            // The block's own attribute failed (bad argument, renamed crate...): its methods'
            // attributes are checked, but rewriting them would only add secondary errors.
            continue;
        }
        match body(&method_args, &place, &method.sig, &method.block) {
            Ok(block) => method.block = block,
            Err(e) => errors.push(e),
        }
    }
    with_errors(item.into_token_stream(), errors)
}

/// A macro call among the items of an annotated `impl` block (`methods!();`): the methods it
/// writes are expanded after the block's attribute has run, so the block's limit never reaches
/// them and they would run unlimited. An error, unless the call is marked `#[skip_throttle]`
/// (what it writes needs no limit from the block, or limits itself); the mark is removed.
fn unseen_methods(attrs: &mut Vec<Attribute>, path: &syn::Path, what: &str, errors: &mut Errors) {
    let (mut skipped, mut limited) = (false, false);
    let mut kept = Vec::with_capacity(attrs.len());
    for a in attrs.drain(..) {
        match attr::kind(&a) {
            Some(Kind::Skip) if !skipped => skipped = true,
            Some(Kind::Skip) => errors.push(syn::Error::new_spanned(
                &a,
                "`#[skip_throttle]` is given twice",
            )),
            Some(_) => {
                limited = true;
                errors.push(syn::Error::new_spanned(
                    &a,
                    "a limit cannot be put on a macro call: put it on the fns the macro writes",
                ));
            }
            None => kept.push(a),
        }
    }
    *attrs = kept;
    if !skipped && !limited {
        errors.push(syn::Error::new_spanned(
            path,
            format!(
                "{what} cannot see the methods this macro call writes (they are written after \
                 the `impl` block's attribute has run), so they would run unlimited\n\
                 = help: move the macro call to an `impl` block without a limit, and limit the \
                 fns it writes with their own attribute;\n\
                 = help: or mark it `#[skip_throttle]` to exempt what it writes from the impl \
                 block's limit"
            ),
        ));
    }
}

/// Whether the tokens of an item syn could not read have a `fn` of their own (not inside a
/// group): a method the block's attribute cannot rewrite.
fn writes_fn(tokens: &TokenStream) -> bool {
    tokens
        .clone()
        .into_iter()
        .any(|t| matches!(&t, proc_macro2::TokenTree::Ident(i) if i == "fn"))
}

/// Fails when the `ratelimit` crate is known under another name and `crate = "..."` does not
/// say which: the expansion's `::ratelimit` paths would not resolve.
fn check_crate_name(args: Args) -> syn::Result<Args> {
    if args.krate.is_some() {
        return Ok(args);
    }
    match manifest::renamed_dependency() {
        None => Ok(args),
        Some(name) => Err(syn::Error::new(
            Span::call_site(),
            format!(
                "`ratelimit` is a dependency under the name `{name}`: add `crate = \"{name}\"` \
                 to the attribute"
            ),
        )),
    }
}

/// Any item given to `#[rate_limit]` / `#[throttle]`.
pub(crate) fn entry(args: syn::Result<Args>, item: TokenStream, what: &str) -> TokenStream {
    let args = args.and_then(check_crate_name);
    match syn::parse2::<syn::Item>(item.clone()) {
        Ok(syn::Item::Fn(f)) => function(args, f, what),
        Ok(syn::Item::Impl(i)) => impl_block(args, i, what),
        Ok(other) => {
            let span = match &other {
                syn::Item::Struct(s) => s.struct_token.span,
                syn::Item::Enum(e) => e.enum_token.span,
                syn::Item::Trait(t) => t.trait_token.span,
                syn::Item::Mod(m) => m.mod_token.span,
                syn::Item::Const(c) => c.const_token.span,
                syn::Item::Static(s) => s.static_token.span,
                other => other.span(),
            };
            let mut errors = Errors::default();
            errors.push(syn::Error::new(
                span,
                format!("{what} applies to a fn (`async`, or sync returning a `Result`; free or a method, with a body) or to an `impl` block"),
            ));
            with_errors(item, errors)
        }
        Err(e) => {
            let mut errors = Errors::default();
            errors.push(e);
            with_errors(item, errors)
        }
    }
}

/// `#[skip_throttle]` outside an impl block that has a limit: always an error, since the impl
/// block's attribute removes it before it would run.
pub(crate) fn skip(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    if !args.is_empty() {
        errors.push(syn::Error::new_spanned(
            &args,
            "`#[skip_throttle]` takes no arguments",
        ));
    }
    let combined = syn::parse2::<ItemFn>(item.clone())
        .map(|f| {
            f.attrs
                .iter()
                .any(|a| matches!(attr::kind(a), Some(Kind::RateLimit | Kind::Throttle)))
        })
        .unwrap_or(false);
    errors.push(syn::Error::new(
        Span::call_site(),
        if combined {
            "`#[skip_throttle]` exempts a fn from its impl block's limit; it cannot be combined with a limit on the same fn"
        } else {
            "`#[skip_throttle]` has no limit to skip: it only applies to methods of an `impl` block \
             annotated with `#[rate_limit]` or `#[throttle]`"
        },
    ));
    with_errors(item, errors)
}
