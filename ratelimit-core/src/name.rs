//! [`Name`]: an owned tier or budget name that costs nothing to clone when it is a literal.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// A tier's or a budget's name, owned, so that [`Options`](crate::Options) holding it can be
/// kept in a struct, a `static` or a `const` and moved into spawned tasks.
///
/// A name known at compile time (`"pro"`, an annotated fn's path) is kept as a
/// `&'static str`: cloning it copies two words, with no reference count to touch. A name made
/// at run time (a `String`, an `Arc<str>`) is shared behind an [`Arc`], so clones share one
/// allocation. Either way it reads as a `&str` ([`as_str`](Self::as_str), `Deref`), and two
/// names are equal when their text is.
///
/// ```
/// use ratelimit_core::Name;
/// use std::sync::Arc;
///
/// const PRO: Name = Name::new("pro");
/// let from_config: Name = String::from("pro").into();
/// let shared: Name = Arc::<str>::from("pro").into();
/// assert_eq!(PRO, from_config);
/// assert_eq!(shared.as_str(), "pro");
/// assert_eq!(&*PRO, "pro");
/// ```
#[derive(Clone)]
pub struct Name(Repr);

#[derive(Clone)]
enum Repr {
    Static(&'static str),
    Shared(Arc<str>),
}

impl Name {
    /// A name known at compile time; usable in a `const`.
    pub const fn new(name: &'static str) -> Self {
        Name(Repr::Static(name))
    }

    /// The text.
    #[inline]
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Static(s) => s,
            Repr::Shared(s) => s,
        }
    }
}

impl Deref for Name {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&'static str> for Name {
    fn from(name: &'static str) -> Self {
        Name::new(name)
    }
}

impl From<String> for Name {
    fn from(name: String) -> Self {
        Name(Repr::Shared(name.into()))
    }
}

impl From<Arc<str>> for Name {
    fn from(name: Arc<str>) -> Self {
        Name(Repr::Shared(name))
    }
}

impl From<Box<str>> for Name {
    fn from(name: Box<str>) -> Self {
        Name(Repr::Shared(name.into()))
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Name {}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Hash for Name {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_literal_is_kept_without_a_reference_count() {
        let name = Name::from("pro");
        assert!(matches!(name.clone().0, Repr::Static("pro")));
        let shared = Arc::<str>::from("pro");
        let made = Name::from(Arc::clone(&shared));
        let copy = made.clone();
        assert_eq!(Arc::strong_count(&shared), 3, "clones share one allocation");
        assert_eq!(copy, name);
    }

    #[test]
    fn equal_names_hash_alike_whatever_they_were_made_from() {
        use std::collections::HashSet;
        let set: HashSet<Name> = [Name::new("a"), Name::from(String::from("a"))].into();
        assert_eq!(set.len(), 1);
        assert!(set.contains("a"));
    }
}
