//! Parsing and validating the arguments of `#[rate_limit(...)]` and `#[throttle(...)]`.
//!
//! Windows, strategies and rates are parsed here with `ratelimit-syntax`, the parsers the
//! runtime uses too, so the macro and the runtime never disagree on what `"1h30m"` means. Every
//! error is spanned on the offending token, and all of an attribute's errors are reported
//! together.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprUnary, Ident, Lit, LitInt, LitStr, Token, UnOp};

use ratelimit_syntax::{parse_window, Rate, Strategy};

/// The arguments `#[rate_limit]` accepts, in the order the error message lists them.
pub(crate) const VALID: &str =
    "`limit`, `window`, `key`, `tier`, `strategy`, `burst`, `cost`, `count`, `block_for`, `queue`, `shadow`, `name`, `limiter`, `crate`";

/// How the tier is chosen.
#[derive(Clone)]
pub(crate) enum Tier {
    Default,
    Static(LitStr),
    Dynamic(Expr),
}

/// How much a call costs.
#[derive(Clone)]
pub(crate) enum Cost {
    Fixed(u64),
    Dynamic(Expr),
}

/// Which outcomes count against the limit (`count = ..`): the call spends before its body
/// runs, and the spend is given back after it when its outcome does not count.
#[derive(Clone)]
pub(crate) enum Count {
    /// `"err"`: only calls returning `Err`.
    Errors(LitStr),
    /// `"ok"`: only calls returning `Ok`.
    Successes(LitStr),
}

impl Count {
    /// Whether errors are what counts.
    pub(crate) fn errors(&self) -> bool {
        matches!(self, Count::Errors(_))
    }

    /// The literal, for errors about it.
    pub(crate) fn span(&self) -> Span {
        match self {
            Count::Errors(lit) | Count::Successes(lit) => lit.span(),
        }
    }
}

/// Everything an attribute asked for, validated.
#[derive(Clone)]
pub(crate) struct Args {
    pub(crate) limit: Option<u64>,
    pub(crate) window: Option<Duration>,
    pub(crate) key: Option<Expr>,
    pub(crate) tier: Tier,
    pub(crate) strategy: Option<Strategy>,
    pub(crate) burst: Option<u64>,
    pub(crate) cost: Cost,
    /// `count = "err" | "ok"`: only those outcomes count; `"all"` or nothing: every call.
    pub(crate) count: Option<Count>,
    /// `block_for = "1h"`: the key refused that long once a call on it was refused.
    pub(crate) block_for: Option<Duration>,
    /// `queue = true | false`: wait for capacity (or not), over the module's `queue_enabled`.
    pub(crate) queue: Option<bool>,
    /// `shadow = true | false`: decided and counted, never refusing.
    pub(crate) shadow: bool,
    pub(crate) name: Option<LitStr>,
    /// `limiter = path::TO_STATIC`: a library's own `Limiter` decides the fn.
    pub(crate) limiter: Option<syn::Path>,
    pub(crate) krate: Option<syn::Path>,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            limit: None,
            window: None,
            key: None,
            tier: Tier::Default,
            strategy: None,
            burst: None,
            cost: Cost::Fixed(1),
            count: None,
            block_for: None,
            queue: None,
            shadow: false,
            name: None,
            limiter: None,
            krate: None,
        }
    }
}

/// One `name = value` pair, before validation.
struct Pair {
    name: Ident,
    value: Expr,
}

impl Parse for Pair {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let name = if input.peek(Token![crate]) {
            let token: Token![crate] = input.parse()?;
            Ident::new("crate", token.span)
        } else {
            input.parse::<Ident>().map_err(|e| {
                syn::Error::new(e.span(), format!("expected an argument: one of {VALID}"))
            })?
        };
        input.parse::<Token![=]>().map_err(|e| {
            syn::Error::new(
                e.span(),
                format!("expected `=` after `{name}` (arguments are written `{name} = ...`)"),
            )
        })?;
        Ok(Pair {
            name,
            value: input.parse()?,
        })
    }
}

/// Collects errors so that every problem of an attribute is reported at once.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        match self.0 {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

fn string(value: &Expr, what: &str, example: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s.clone()),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{what}` takes a string literal, like `{what} = {example}`"),
        )),
    }
}

/// A whole, non-negative number; `min` is the smallest accepted.
fn integer(value: &Expr, what: &str, min: u64) -> syn::Result<u64> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => {
            let n: u64 = i
                .base10_parse()
                .map_err(|_| syn::Error::new(i.span(), format!("`{what}` must fit in a u64")))?;
            if n < min {
                return Err(syn::Error::new(
                    i.span(),
                    format!("`{what}` must be at least {min}"),
                ));
            }
            Ok(n)
        }
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_), ..
        }) => Err(syn::Error::new_spanned(
            value,
            format!("`{what}` cannot be negative: it is a number of calls"),
        )),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{what}` takes a whole number literal, like `{what} = 10`"),
        )),
    }
}

fn boolean(value: &Expr, what: &str) -> syn::Result<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(b), ..
        }) => Ok(b.value),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{what}` takes `true` or `false`, like `{what} = true`"),
        )),
    }
}

fn window(value: &Expr) -> syn::Result<Duration> {
    let lit = string(value, "window", "\"1m\"")?;
    parse_window(&lit.value()).map_err(|e| syn::Error::new(lit.span(), e.to_string()))
}

fn tier_name(lit: &LitStr) -> syn::Result<()> {
    if !ratelimit_syntax::valid_tier_name(&lit.value()) {
        return Err(syn::Error::new(
            lit.span(),
            ratelimit_syntax::TIER_NAME_RULE,
        ));
    }
    Ok(())
}

fn budget_name(lit: &LitStr) -> syn::Result<()> {
    let name = lit.value();
    if name.is_empty()
        || name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '#')
    {
        return Err(syn::Error::new(
            lit.span(),
            "a budget name is not empty and has no whitespace, control characters or `#`",
        ));
    }
    Ok(())
}

/// `limiter = path`: the path of a `static` (its type is checked where the expansion takes
/// its address, spanned on the path).
fn limiter(value: Expr) -> syn::Result<syn::Path> {
    match value {
        Expr::Path(syn::ExprPath {
            qself: None,
            path,
            attrs,
        }) if attrs.is_empty() => Ok(path),
        other => Err(syn::Error::new_spanned(
            other,
            "`limiter` takes the path of a `static` `ratelimit::Limiter`, like \
             `limiter = crate::LIMITS`",
        )),
    }
}

impl Args {
    /// Applies one `name = value` pair, rejecting unknown names and duplicates.
    fn apply(&mut self, pair: Pair, seen: &mut Vec<String>) -> syn::Result<()> {
        let Pair { name, value } = pair;
        let key = name.to_string();
        if seen.contains(&key) {
            return Err(syn::Error::new(
                name.span(),
                format!("duplicate argument `{key}`"),
            ));
        }
        seen.push(key.clone());
        match key.as_str() {
            "limit" => self.limit = Some(integer(&value, "limit", 0)?),
            "window" => self.window = Some(window(&value)?),
            "key" => self.key = Some(value),
            "tier" => {
                self.tier = match value {
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(s), ..
                    }) => {
                        tier_name(&s)?;
                        Tier::Static(s)
                    }
                    other => Tier::Dynamic(other),
                }
            }
            "strategy" => {
                let lit = string(&value, "strategy", "\"token-bucket\"")?;
                let parsed = lit
                    .value()
                    .parse::<Strategy>()
                    .map_err(|e| syn::Error::new(lit.span(), e.to_string()))?;
                self.strategy = Some(parsed);
            }
            "burst" => self.burst = Some(integer(&value, "burst", 0)?),
            "cost" => {
                self.cost = match &value {
                    Expr::Lit(_)
                    | Expr::Unary(ExprUnary {
                        op: UnOp::Neg(_), ..
                    }) => Cost::Fixed(integer(&value, "cost", 1)?),
                    _ => Cost::Dynamic(value),
                }
            }
            "count" => {
                let lit = string(&value, "count", "\"err\"")?;
                self.count = match lit.value().as_str() {
                    "err" => Some(Count::Errors(lit)),
                    "ok" => Some(Count::Successes(lit)),
                    "all" => None,
                    other => {
                        return Err(syn::Error::new(
                            lit.span(),
                            format!(
                                "unknown `count` {other:?}: expected \"err\" (only calls returning \
                                 `Err` count), \"ok\" (only `Ok`) or \"all\""
                            ),
                        ))
                    }
                }
            }
            "block_for" => {
                let lit = string(&value, "block_for", "\"1h\"")?;
                let block = parse_window(&lit.value())
                    .map_err(|e| syn::Error::new(lit.span(), e.to_string()))?;
                self.block_for = Some(block);
            }
            "queue" => self.queue = Some(boolean(&value, "queue")?),
            "shadow" => self.shadow = boolean(&value, "shadow")?,
            "name" => {
                let lit = string(&value, "name", "\"payments\"")?;
                budget_name(&lit)?;
                self.name = Some(lit);
            }
            "limiter" => self.limiter = Some(limiter(value)?),
            "crate" => {
                let lit = string(&value, "crate", "\"ratelimit\"")?;
                self.krate = Some(lit.parse().map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        "`crate` takes a path, like `crate = \"ratelimit\"`",
                    )
                })?);
            }
            _ => {
                return Err(syn::Error::new(
                    name.span(),
                    format!("unknown argument `{key}`: expected one of {VALID}"),
                ))
            }
        }
        Ok(())
    }

    /// `#[rate_limit(...)]`.
    pub(crate) fn rate_limit(tokens: TokenStream) -> syn::Result<Args> {
        let pairs =
            syn::parse::Parser::parse2(Punctuated::<Pair, Token![,]>::parse_terminated, tokens)?;
        let mut args = Args::default();
        let mut seen = Vec::new();
        let mut errors = Errors::default();
        for pair in pairs {
            if let Err(e) = args.apply(pair, &mut seen) {
                errors.push(e);
            }
        }
        errors.finish()?;
        Ok(args)
    }

    /// `#[throttle(n)]`, `#[throttle(n, "minute")]`, optionally followed by `name = value`
    /// pairs other than `limit` and `window`.
    pub(crate) fn throttle(tokens: TokenStream) -> syn::Result<Args> {
        syn::parse::Parser::parse2(
            |input: ParseStream<'_>| {
                if input.is_empty() {
                    return Err(syn::Error::new(
                        Span::call_site(),
                        "`#[throttle]` needs a number of calls per second, like `#[throttle(5)]` or `#[throttle(5, \"minute\")]`",
                    ));
                }
                let mut args = Args::default();
                let mut errors = Errors::default();
                let n: LitInt = input.parse().map_err(|e| {
                    syn::Error::new(
                        e.span(),
                        "`#[throttle]` takes a whole number of calls first, like `#[throttle(5)]`",
                    )
                })?;
                match n.base10_parse::<u64>() {
                    Ok(0) => errors.push(syn::Error::new(
                        n.span(),
                        "`#[throttle(0)]` would refuse every call: the number of calls must be at least 1",
                    )),
                    Ok(v) => args.limit = Some(v),
                    Err(_) => errors.push(syn::Error::new(n.span(), "the number of calls must fit in a u64")),
                }
                args.window = Some(Duration::from_secs(1));
                if input.peek(Token![,]) && input.peek2(LitStr) {
                    input.parse::<Token![,]>()?;
                    let unit: LitStr = input.parse()?;
                    match Rate::unit_window(&unit.value()) {
                        Some(w) => args.window = Some(w),
                        None => errors.push(syn::Error::new(
                            unit.span(),
                            format!(
                                "unknown unit {:?}: expected \"second\", \"minute\", \"hour\" or \"day\"",
                                unit.value()
                            ),
                        )),
                    }
                }
                let mut seen = vec!["limit".to_owned(), "window".to_owned()];
                while !input.is_empty() {
                    input.parse::<Token![,]>()?;
                    if input.is_empty() {
                        break;
                    }
                    let pair: Pair = input.parse()?;
                    if pair.name == "limit" || pair.name == "window" {
                        errors.push(syn::Error::new(
                            pair.name.span(),
                            format!("`#[throttle]` sets `{}` itself; use `#[rate_limit]` to set it by name", pair.name),
                        ));
                        continue;
                    }
                    if let Err(e) = args.apply(pair, &mut seen) {
                        errors.push(e);
                    }
                }
                errors.finish()?;
                Ok(args)
            },
            tokens,
        )
    }

    /// The path of the facade in generated code.
    pub(crate) fn krate(&self) -> TokenStream {
        match &self.krate {
            Some(path) => path.to_token_stream(),
            None => quote::quote!(::ratelimit),
        }
    }
}

/// A fn's limits are decided as one, by one limiter: the `limiter` any of them names (the
/// others may repeat it or leave it out), else the application's. Two different paths are an
/// error on the second.
pub(crate) fn one_limiter(all: &[Args]) -> syn::Result<Vec<Args>> {
    let mut named: Option<&syn::Path> = None;
    for path in all.iter().filter_map(|a| a.limiter.as_ref()) {
        match named {
            None => named = Some(path),
            Some(first)
                if first.to_token_stream().to_string() == path.to_token_stream().to_string() => {}
            Some(first) => {
                return Err(syn::Error::new_spanned(
                    path,
                    format!(
                        "the limits of one fn are decided as one, by one limiter: this one names \
                         `{}` and another `{}` (write the same path, or leave it out)",
                        path.to_token_stream(),
                        first.to_token_stream(),
                    ),
                ))
            }
        }
    }
    Ok(all
        .iter()
        .cloned()
        .map(|mut a| {
            a.limiter = named.cloned();
            a
        })
        .collect())
}

/// Which of our attributes an attribute is, if any (by its last path segment, so
/// `#[ratelimit::throttle(..)]` counts too).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    RateLimit,
    Throttle,
    Skip,
}

pub(crate) fn kind(attr: &syn::Attribute) -> Option<Kind> {
    let last = attr.path().segments.last()?;
    match last.ident.to_string().as_str() {
        "rate_limit" => Some(Kind::RateLimit),
        "throttle" => Some(Kind::Throttle),
        "skip_throttle" => Some(Kind::Skip),
        _ => None,
    }
}

/// The arguments of a method-level `#[rate_limit(..)]` / `#[throttle(..)]` attribute.
pub(crate) fn parse_attr(attr: &syn::Attribute, kind: Kind) -> syn::Result<Args> {
    let tokens = match &attr.meta {
        syn::Meta::Path(_) => TokenStream::new(),
        syn::Meta::List(list) => list.tokens.clone(),
        syn::Meta::NameValue(nv) => {
            return Err(syn::Error::new(
                nv.eq_token.span(),
                "write the arguments in parentheses: `#[rate_limit(limit = 10)]`",
            ))
        }
    };
    match kind {
        Kind::Throttle if tokens.is_empty() => Err(syn::Error::new(
            attr.span(),
            "`#[throttle]` needs a number of calls per second, like `#[throttle(5)]`",
        )),
        Kind::Throttle => Args::throttle(tokens),
        _ => Args::rate_limit(tokens),
    }
}
