//! Which fns can be rate limited, by their signature: `async` or sync, not `const`,
//! returning something that can carry a refusal, and no future handed back by a sync fn.

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::spanned::Spanned;
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

/// Whether the impl's type is one of its own type parameters (`impl<T> Make for T`): its
/// `Self` is whatever type a caller picks, a `Result` too, and no check in the generic body
/// can tell (a parameter implements only the traits its bounds say). There, `-> Self` is no
/// sign of a constructor: the method is limited, or marked `#[skip_throttle]`.
pub(crate) fn self_is_a_parameter(item: &syn::ItemImpl) -> bool {
    let syn::Type::Path(path) = &*item.self_ty else {
        return false;
    };
    path.qself.is_none()
        && item
            .generics
            .type_params()
            .any(|p| path.path.is_ident(&p.ident))
}

/// For a method [`exempt_in_block`] exempts for returning `Self`, in a trait impl: a statement
/// that fails to compile when `Self` can carry a refusal (`impl Make for Result<u8, Error>`, or
/// for an alias of a `Result`), where the exemption would leave a `Result` by another name
/// unlimited (a `Self` that is a type parameter: see [`self_is_a_parameter`]). An inherent impl's `Self` is a type of the crate's
/// own, never a `Result`: `None` there, and for every other method.
///
/// The check is the ambiguity of two impls of a local trait: one for every type, one for the
/// types that are a [`Refusal`](https://docs.rs/ratelimit); a `Self` in the second is
/// ambiguous ("type annotations needed", spanned on the `Self` of the signature).
pub(crate) fn self_is_no_refusal(
    sig: &Signature,
    trait_impl: bool,
    k: &TokenStream,
) -> Option<TokenStream> {
    let ReturnType::Type(_, ty) = &sig.output else {
        return None;
    };
    if !trait_impl || !exempt_in_block(sig) {
        return None;
    }
    let span = ty.span();
    let check = syn::Ident::new(
        "__ratelimit_Self_is_a_Result_here_so_give_this_method_a_limit_or_skip_throttle",
        span,
    );
    let each = syn::Ident::new("__ratelimit_any_type", Span::mixed_site());
    let refusal = syn::Ident::new("__ratelimit_a_result", Span::mixed_site());
    Some(quote_spanned! {span=>
        #[allow(unused_qualifications, non_camel_case_types, dead_code, clippy::all)]
        {
            trait #check<Which> {
                const CHECKED: () = ();
            }
            struct #each;
            struct #refusal;
            impl<T: ?::core::marker::Sized> #check<#each> for T {}
            impl<T: #k::__private::Refusal> #check<#refusal> for T {}
            let () = <Self as #check<_>>::CHECKED;
        }
    })
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

    #[test]
    fn a_self_type_that_is_a_parameter_of_the_impl_is_found() {
        let item = |s: &str| syn::parse_str::<syn::ItemImpl>(s).unwrap();
        assert!(self_is_a_parameter(&item("impl<T: Default> Make for T {}")));
        assert!(self_is_a_parameter(&item("impl<'a, U> Make for U {}")));
        for not in [
            "impl<T> Make for Vec<T> {}",
            "impl<T> Make for (T, u8) {}",
            "impl Make for T {}",
            "impl<T> Make for crate::T {}",
        ] {
            assert!(!self_is_a_parameter(&item(not)), "{not}");
        }
    }
}
