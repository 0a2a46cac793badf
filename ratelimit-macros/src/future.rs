//! Spotting a method that hands back a future without being `async`: in an annotated `impl`
//! block it would otherwise be skipped as a sync fn and run unlimited.
//!
//! The usual way to get one is `#[async_trait]` placed above the limit: it runs first and turns
//! every `async fn` into `fn f(..) -> Pin<Box<dyn Future<Output = ..> + Send + 'async_trait>>`.

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::{ReturnType, Signature};

/// Whether a non-`async` fn returning `output` hands back a future: its type mentions a path
/// segment `Future`, `BoxFuture` or `LocalBoxFuture` (which covers `impl Future<..>`,
/// `Pin<Box<dyn Future<..> + Send>>` as `#[async_trait]` writes it, and the `futures` aliases).
pub(crate) fn returns_future(output: &ReturnType) -> bool {
    match output {
        ReturnType::Default => false,
        ReturnType::Type(_, ty) => mentions_future(ty.to_token_stream()),
    }
}

/// The error for a non-`async` fn that returns a future, spanned on its return type, naming
/// the ways out (`in_block`: a method of an annotated impl block, which `#[skip_throttle]`
/// may exempt).
pub(crate) fn not_async(sig: &Signature, what: &str, in_block: bool) -> syn::Error {
    let skip = if in_block {
        ";\n= help: or mark it `#[skip_throttle]` to exempt it from the limit"
    } else {
        ""
    };
    let message = format!(
        "{what} cannot limit `{name}`: it returns a future without being an `async fn` (as \
         `#[async_trait]` leaves every method when it runs first), so its calls would run \
         unlimited\n\
         = help: make it an `async fn`;\n\
         = help: or put {what} above `#[async_trait]`, so that it sees the `async fn`s{skip}",
        name = sig.ident,
    );
    match &sig.output {
        ReturnType::Type(_, ty) if written_by_hand(ty.to_token_stream()) => {
            syn::Error::new_spanned(ty, message)
        }
        // `#[async_trait]` spans the return type it writes on its own attribute, but keeps
        // the `fn` token of the method.
        _ => syn::Error::new(sig.fn_token.span, message),
    }
}

/// Whether `tokens` start with a token whose span shows that very token in the source (not
/// another macro's attribute).
fn written_by_hand(tokens: TokenStream) -> bool {
    let Some(first) = tokens.into_iter().next() else {
        return false;
    };
    let text = match &first {
        TokenTree::Group(_) => return false,
        other => other.to_string(),
    };
    first
        .span()
        .source_text()
        .is_some_and(|source| source == text)
}

fn mentions_future(tokens: TokenStream) -> bool {
    let mut after_quote = false;
    for token in tokens {
        let found = match &token {
            // `'Future` is a lifetime, not a path segment.
            TokenTree::Ident(i) if !after_quote => {
                i == "Future" || i == "BoxFuture" || i == "LocalBoxFuture"
            }
            TokenTree::Group(g) => mentions_future(g.stream()),
            _ => false,
        };
        if found {
            return true;
        }
        after_quote = matches!(&token, TokenTree::Punct(p) if p.as_char() == '\'');
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn futures_are_found_in_return_types() {
        let output = |s: &str| syn::parse_str::<ReturnType>(s).unwrap();
        for returns in [
            "-> impl Future<Output = u8>",
            "-> impl ::core::future::Future<Output = Result<(), E>> + Send + 'a",
            "-> ::core::pin::Pin<Box<dyn ::core::future::Future<Output = u8> + Send + 'async_trait>>",
            "-> BoxFuture<'static, u8>",
            "-> futures::future::LocalBoxFuture<'_, u8>",
            "-> (u8, impl Future<Output = ()>)",
        ] {
            assert!(returns_future(&output(returns)), "{returns}");
        }
        for returns in [
            "",
            "-> u8",
            "-> Result<Futures, E>",
            "-> &'Future str",
            "-> FutureLike",
        ] {
            assert!(!returns_future(&output(returns)), "{returns}");
        }
    }
}
