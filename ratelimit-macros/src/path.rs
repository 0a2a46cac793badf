//! The annotated fn's path, the default budget name: spelled out at compile time from
//! `module_path!()` and the names as written, so that every build of the same source (whatever
//! the compiler) counts in the same budgets of a shared store.
//!
//! | annotated | path |
//! |---|---|
//! | free fn `f` | `module::f` |
//! | method `m` of an annotated `impl Foo<T>` | `module::Foo::m` |
//! | method `m` of an annotated `impl Tr<U> for a::Foo<T>` | `module::<a::Foo as Tr>::m` |
//! | method `m` annotated on its own | `module::m` (the attribute cannot see the type) |

use proc_macro2::TokenStream;
use quote::{quote, ToTokens};
use syn::ext::IdentExt;
use syn::{Ident, ItemImpl, Path, Type, TypeParamBound};

/// Where an annotated fn is, as far as its attribute can see.
pub(crate) enum Place {
    /// A free fn, or a method annotated on its own.
    Alone,
    /// A method of an annotated inherent impl: the self type, generics stripped.
    Inherent(String),
    /// A method of an annotated trait impl: the self type and the trait, generics stripped.
    TraitImpl(String, String),
}

impl Place {
    /// The place of the methods of `item`.
    pub(crate) fn of_impl(item: &ItemImpl) -> Place {
        let self_ty = type_text(&item.self_ty);
        match &item.trait_ {
            Some((path, _)) => Place::TraitImpl(self_ty, path_text(path)),
            None => Place::Inherent(self_ty),
        }
    }

    /// The fn's path, as a `&'static str` expression evaluated where the fn is.
    pub(crate) fn function(&self, ident: &Ident) -> TokenStream {
        let name = ident.unraw().to_string();
        let parts: Vec<String> = match self {
            Place::Alone => vec!["::".into(), name],
            Place::Inherent(ty) => vec!["::".into(), ty.clone(), "::".into(), name],
            Place::TraitImpl(ty, tr) => vec![
                "::<".into(),
                ty.clone(),
                " as ".into(),
                tr.clone(),
                ">::".into(),
                name,
            ],
        };
        quote!(::core::concat!(::core::module_path!(), #(#parts),*))
    }

    /// The path as it reads once `module_path!()` is `module` (for tests).
    #[cfg(test)]
    fn text(&self, module: &str, ident: &str) -> String {
        let ident: Ident = syn::parse_str(ident).unwrap();
        let tokens = self.function(&ident);
        let mut out = module.to_owned();
        for token in tokens.into_iter() {
            if let proc_macro2::TokenTree::Group(g) = token {
                for t in g.stream() {
                    if let proc_macro2::TokenTree::Literal(l) = t {
                        let s: syn::LitStr = syn::parse2(l.into_token_stream()).unwrap();
                        out.push_str(&s.value());
                    }
                }
            }
        }
        out
    }
}

/// A path as written, without generic arguments, spaces or a leading `::` (which would read
/// `module::::x::Foo` after the module): `crate::a::Foo<'a, T>` -> `crate::a::Foo`,
/// `Fn(u8) -> u8` -> `Fn`.
fn path_text(path: &Path) -> String {
    let segments: Vec<String> = path
        .segments
        .iter()
        .map(|s| s.ident.unraw().to_string())
        .collect();
    segments.join("::")
}

/// A self type as written, with generic arguments and lifetimes stripped where the type's
/// shape is simple, and otherwise its tokens without spaces around `::`.
fn type_text(ty: &Type) -> String {
    match ty {
        Type::Path(p) => match &p.qself {
            None => path_text(&p.path),
            Some(q) => {
                let names: Vec<String> = p
                    .path
                    .segments
                    .iter()
                    .map(|s| s.ident.unraw().to_string())
                    .collect();
                let (tr, rest) = names.split_at(q.position.min(names.len()));
                let self_ty = type_text(&q.ty);
                match q.as_token {
                    Some(_) => format!("<{self_ty} as {}>::{}", tr.join("::"), rest.join("::")),
                    None => format!("<{self_ty}>::{}", rest.join("::")),
                }
            }
        },
        Type::Reference(r) => {
            let mutability = if r.mutability.is_some() { "mut " } else { "" };
            format!("&{mutability}{}", type_text(&r.elem))
        }
        Type::Ptr(p) => {
            let kind = match p.mutability {
                syn::PointerMutability::Mut(_) => "*mut ",
                syn::PointerMutability::Const(_) => "*const ",
            };
            format!("{kind}{}", type_text(&p.elem))
        }
        Type::Slice(s) => format!("[{}]", type_text(&s.elem)),
        Type::Array(a) => format!("[{}; {}]", type_text(&a.elem), tokens_text(&a.len)),
        Type::Tuple(t) => {
            let elems: Vec<String> = t.elems.iter().map(type_text).collect();
            match elems.len() {
                1 => format!("({},)", elems[0]),
                _ => format!("({})", elems.join(", ")),
            }
        }
        Type::Paren(p) => type_text(&p.elem),
        Type::Group(g) => type_text(&g.elem),
        Type::TraitObject(t) => {
            let bounds: Vec<String> = t
                .bounds
                .iter()
                .filter_map(|b| match b {
                    TypeParamBound::Trait(t) => Some(path_text(&t.path)),
                    _ => None,
                })
                .collect();
            format!("dyn {}", bounds.join(" + "))
        }
        other => tokens_text(other),
    }
}

/// Tokens as text, without the spaces `TokenStream`'s `Display` puts around `::`.
fn tokens_text(tokens: &impl ToTokens) -> String {
    tokens
        .to_token_stream()
        .to_string()
        .replace(" :: ", "::")
        .replace(":: ", "::")
        .replace(" ::", "::")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(item: &str) -> Place {
        Place::of_impl(&syn::parse_str::<ItemImpl>(item).unwrap())
    }

    #[test]
    fn paths_follow_the_source() {
        let cases = [
            (Place::Alone, "app::m::charge"),
            (place("impl Foo {}"), "app::m::Foo::charge"),
            (place("impl<T: Send> Foo<T> {}"), "app::m::Foo::charge"),
            (
                place("impl<'a> crate::a::Foo<'a> {}"),
                "app::m::crate::a::Foo::charge",
            ),
            (place("impl ::x::Foo<u8> {}"), "app::m::x::Foo::charge"),
            (place("impl Tr for Foo {}"), "app::m::<Foo as Tr>::charge"),
            (
                place("impl<T> a::Tr<T, u8> for b::Foo<Vec<T>> {}"),
                "app::m::<b::Foo as a::Tr>::charge",
            ),
            (
                place("impl<'a> Tr for &'a mut Foo<'a> {}"),
                "app::m::<&mut Foo as Tr>::charge",
            ),
            (
                place("impl<T> Tr for [T] {}"),
                "app::m::<[T] as Tr>::charge",
            ),
            (
                place("impl Tr for (a::A<u8>, B) {}"),
                "app::m::<(a::A, B) as Tr>::charge",
            ),
            (
                place("impl Tr for [u8; 4] {}"),
                "app::m::<[u8; 4] as Tr>::charge",
            ),
            (
                place("impl Tr for dyn a::Other<u8> + Send {}"),
                "app::m::<dyn a::Other + Send as Tr>::charge",
            ),
            (
                place("impl Tr for <T as a::B>::C {}"),
                "app::m::<<T as a::B>::C as Tr>::charge",
            ),
        ];
        for (place, want) in cases {
            assert_eq!(place.text("app::m", "charge"), want);
        }
        assert_eq!(Place::Alone.text("m", "r#type"), "m::type");
    }
}
