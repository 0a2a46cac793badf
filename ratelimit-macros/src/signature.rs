//! Which fns can be rate limited, by their signature: `async` or sync, not `const`,
//! returning something that can carry a refusal, and no future handed back by a sync fn.

use syn::{ReturnType, Signature};

use crate::future;

/// Checks that `sig` can be rate limited: a non-const fn returning something, `async` or
/// sync; a sync fn that hands back a future is async in all but name, and its calls would run
/// unlimited (`in_block`: it is a method of an annotated impl block, which may exempt it).
pub(crate) fn check(sig: &Signature, what: &str, in_block: bool) -> syn::Result<()> {
    // In a block, the method may be exempted instead.
    let skip = if in_block {
        "; or mark it `#[skip_throttle]` to exempt it from the impl block's limit"
    } else {
        ""
    };
    if let Some(token) = &sig.constness {
        return Err(syn::Error::new(
            token.span,
            format!(
                "{what} cannot be used on a `const fn`: a rate limit is decided at run time{skip}"
            ),
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
                 so that a refused call can say so: add `-> Result<(), ratelimit::Error>`{skip}"
            ),
        ));
    }
    Ok(())
}

/// Whether a method of an annotated impl block is exempt by its signature alone: a sync
/// method that returns nothing or `Self` (a constructor) cannot carry a refusal, and a reader
/// sees so at the method. Every other method is limited, whatever its return type is called
/// (the macro cannot see through an alias): one that cannot carry the refusal does not
/// compile, and is exempted with `#[skip_throttle]`.
pub(crate) fn exempt_in_block(sig: &Signature) -> bool {
    if sig.asyncness.is_some() {
        return false;
    }
    match &sig.output {
        ReturnType::Default => true,
        ReturnType::Type(_, ty) => match &**ty {
            syn::Type::Path(p) => p.qself.is_none() && p.path.is_ident("Self"),
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sync_methods_returning_nothing_or_self_are_exempt() {
        let sig = |s: &str| syn::parse_str::<Signature>(s).unwrap();
        for exempt in ["fn new() -> Self", "fn set(&mut self, v: u8)"] {
            assert!(exempt_in_block(&sig(exempt)), "{exempt}");
        }
        for limited in [
            "async fn new() -> Self",
            "async fn ping(&self)",
            "fn f(&self) -> Result<u8, E>",
            "fn f(&self) -> ApiResult<u8>",
            "fn f(&self) -> io::Result<u8>",
            "fn f(&self) -> Res<u8, E>",
            "fn name(&self) -> &str",
            "fn f(&self) -> u32",
            "fn f() -> Option<Self>",
            "fn f() -> Result<Self, E>",
            "fn f() -> Self::Output",
            "fn f() -> <Self as T>::Output",
        ] {
            assert!(!exempt_in_block(&sig(limited)), "{limited}");
        }
    }
}
