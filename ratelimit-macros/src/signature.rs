//! Which fns can be rate limited, by their signature: `async` or sync, not `const`,
//! returning something that can carry a refusal, and no future handed back by a sync fn.

use syn::{ReturnType, Signature};

use crate::future;

/// Checks that `sig` can be rate limited: a non-const fn returning something, `async` or
/// sync; a sync fn that hands back a future is async in all but name, and its calls would run
/// unlimited (`in_block`: it is a method of an annotated impl block, which may exempt it).
pub(crate) fn check(sig: &Signature, what: &str, in_block: bool) -> syn::Result<()> {
    if let Some(token) = &sig.constness {
        return Err(syn::Error::new(
            token.span,
            format!("{what} cannot be used on a `const fn`: a rate limit is decided at run time"),
        ));
    }
    if sig.asyncness.is_none() && future::returns_future(&sig.output) {
        return Err(future::not_async(sig, what, in_block));
    }
    if let ReturnType::Default = sig.output {
        return Err(syn::Error::new(
            sig.paren_token.span.close(),
            format!(
                "{what} needs the fn to return `Result<_, E>` where `E: From<ratelimit::Error>`, \
                 so that a refused call can say so: add `-> Result<(), ratelimit::Error>`"
            ),
        ));
    }
    Ok(())
}

/// Whether a sync method's return type is written as a `Result` (`Result<..>`,
/// `io::Result<..>`, ...): in an annotated impl block those are limited; other sync methods
/// (constructors, getters) cannot carry a refusal and are left alone.
pub(crate) fn returns_result(output: &ReturnType) -> bool {
    let ReturnType::Type(_, ty) = output else {
        return false;
    };
    match &**ty {
        syn::Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Result"),
        _ => false,
    }
}
