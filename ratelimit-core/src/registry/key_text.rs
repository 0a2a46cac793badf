//! The user key of a keyed call as text, written by the code the macros generate: integers
//! and strings directly (`itoa`, a copy), anything else through its `Display`.

use std::fmt;
use std::fmt::Write as _;

use crate::key::Text;

/// A keyed call's user key as text, written by [`KeyArg`]: up to [`KeyText::INLINE`] bytes in
/// place, so a call with a short key (an id, an address) allocates nothing. Derefs to `str`
/// (with no second UTF-8 check: only whole `str`s are written).
/// The budget is a part of the store key of its own (see `key.rs`), so it is not repeated here.
#[doc(hidden)]
pub struct KeyText(Text<{ KeyText::INLINE }>);

impl KeyText {
    /// The longest key kept in place.
    pub const INLINE: usize = 46;

    /// No text yet.
    #[inline]
    pub fn new() -> Self {
        KeyText(Text::new())
    }

    /// Appends `s`.
    #[inline]
    fn push(&mut self, s: &str) {
        let _ = self.0.write_str(s); // never fails
    }
}

impl From<String> for KeyText {
    /// A key written already, kept where it is.
    #[inline]
    fn from(text: String) -> Self {
        KeyText(Text::Heap(text))
    }
}

impl KeyText {
    /// Whether the text is kept in place (nothing allocated for it).
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Text::Inline(_))
    }

    /// The text as a `String`: moved when on the heap, copied when in place.
    pub fn into_string(self) -> String {
        match self.0 {
            Text::Heap(heap) => heap,
            Text::Inline(inline) => inline.as_str().to_owned(),
        }
    }
}

impl Default for KeyText {
    #[inline]
    fn default() -> Self {
        KeyText::new()
    }
}

impl fmt::Write for KeyText {
    #[inline]
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.write_str(s)
    }
}

impl std::ops::Deref for KeyText {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for KeyText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys are user data: never printed.
        f.write_str("KeyText(..)")
    }
}

/// Where an annotated fn's call writes its user key's text before deciding at once
/// ([`acquire_here`](super::runtime::acquire_here), [`acquire_now`](super::runtime::acquire_now)),
/// lent as `&str` ([`KeyDirect::key_str`], [`KeyDisplayed::key_str`]): an integer formatted in
/// place (read where `itoa` wrote it, not copied into a [`KeyText`] after), anything else
/// written into a [`KeyText`]. A call that must await its store copies the text it holds.
#[doc(hidden)]
pub struct KeySlot {
    number: itoa::Buffer,
    text: KeyText,
}

impl KeySlot {
    /// Nothing written yet.
    #[inline]
    pub fn new() -> Self {
        KeySlot {
            number: itoa::Buffer::new(),
            text: KeyText::new(),
        }
    }

    /// Writes into the slot's [`KeyText`], lending what it holds.
    #[inline]
    fn text(&mut self, write: impl FnOnce(&mut KeyText)) -> &str {
        write(&mut self.text);
        &self.text
    }
}

impl Default for KeySlot {
    #[inline]
    fn default() -> Self {
        KeySlot::new()
    }
}

impl From<&str> for KeyText {
    /// A copy of `text`, in place when short.
    #[inline]
    fn from(text: &str) -> Self {
        let mut out = KeyText::new();
        out.push(text);
        out
    }
}

/// A keyed call's user key, as the generated code hands it over: by its own type (`0`), and
/// as `dyn Display` (`1`, the same value). The macros call `(&KeyArg(k, k)).write_key_text(out)`
/// with both traits in scope: a key whose type is a [`KeyPart`] is written directly by
/// [`KeyDirect`]; any other goes through [`KeyDisplayed`] (method resolution tries
/// `KeyArg<T>` before `&KeyArg<T>`, so the direct way wins where it applies). Both write the
/// text `Display` writes: a key is the same whichever way it took.
#[doc(hidden)]
pub struct KeyArg<'a, T: ?Sized>(pub &'a T, pub &'a dyn fmt::Display);

/// A key type written without the formatting machinery, exactly as its `Display` writes it.
#[doc(hidden)]
pub trait KeyPart {
    /// Appends the key's text to `out`.
    fn write_key(&self, out: &mut KeyText);

    /// The key's text, written into `slot` (see [`KeySlot`]).
    #[inline]
    fn key_str<'s>(&self, slot: &'s mut KeySlot) -> &'s str {
        slot.text(|out| self.write_key(out))
    }
}

macro_rules! integer_keys {
    ($($t:ty)*) => {$(
        impl KeyPart for $t {
            #[inline]
            fn write_key(&self, out: &mut KeyText) {
                out.push(itoa::Buffer::new().format(*self));
            }

            #[inline]
            fn key_str<'s>(&self, slot: &'s mut KeySlot) -> &'s str {
                slot.number.format(*self)
            }
        }
    )*};
}

integer_keys!(u8 u16 u32 u64 u128 usize i8 i16 i32 i64 i128 isize);

impl KeyPart for str {
    #[inline]
    fn write_key(&self, out: &mut KeyText) {
        out.push(self);
    }
}

impl KeyPart for String {
    #[inline]
    fn write_key(&self, out: &mut KeyText) {
        out.push(self);
    }
}

impl<T: KeyPart + ?Sized> KeyPart for &T {
    #[inline]
    fn write_key(&self, out: &mut KeyText) {
        (**self).write_key(out);
    }

    #[inline]
    fn key_str<'s>(&self, slot: &'s mut KeySlot) -> &'s str {
        (**self).key_str(slot)
    }
}

/// The direct way of [`KeyArg`]: a [`KeyPart`].
#[doc(hidden)]
pub trait KeyDirect {
    /// Appends the key's text to `out` (the macros write into a fresh [`KeyText`] in place,
    /// rather than moving a returned one: the move read back bytes just written, a
    /// store-forwarding stall the profile found on every keyed call).
    fn write_key_text(&self, out: &mut KeyText);

    /// The key's text, written into `slot` (see [`KeySlot`]).
    fn key_str<'s>(&self, slot: &'s mut KeySlot) -> &'s str;
}

impl<T: KeyPart + ?Sized> KeyDirect for KeyArg<'_, T> {
    #[inline]
    fn write_key_text(&self, out: &mut KeyText) {
        self.0.write_key(out);
    }

    #[inline]
    fn key_str<'s>(&self, slot: &'s mut KeySlot) -> &'s str {
        self.0.key_str(slot)
    }
}

/// The general way of [`KeyArg`]: `Display`.
#[doc(hidden)]
pub trait KeyDisplayed {
    /// Appends the key's text to `out` (see [`KeyDirect::write_key_text`]).
    fn write_key_text(&self, out: &mut KeyText);

    /// The key's text, written into `slot` (see [`KeySlot`]).
    fn key_str<'s>(&self, slot: &'s mut KeySlot) -> &'s str;
}

impl<T: ?Sized> KeyDisplayed for &KeyArg<'_, T> {
    #[inline]
    fn key_str<'s>(&self, slot: &'s mut KeySlot) -> &'s str {
        slot.text(|out| KeyDisplayed::write_key_text(self, out))
    }

    #[inline]
    fn write_key_text(&self, out: &mut KeyText) {
        // `KeyText`'s `write_str` never fails, so an error is the `Display`'s own: what it
        // wrote before failing is not the key (every value failing after the same prefix
        // would share one budget), so nothing is kept, and the empty key is refused.
        if write!(out, "{}", self.1).is_err() {
            *out = KeyText::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way a key takes writes what its `Display` writes.
    #[test]
    // `(&KeyArg(..)).write_key_text(out)` as the macros write it: the borrow picks the way.
    #[allow(clippy::needless_borrow)]
    fn direct_keys_are_their_display() {
        #[allow(unused_imports)]
        use super::{KeyDirect as _, KeyDisplayed as _};
        struct Shown;
        impl fmt::Display for Shown {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("shown")
            }
        }
        let long = "k".repeat(KeyText::INLINE + 5);
        let written = |arg: &dyn Fn(&mut KeyText)| -> KeyText {
            let mut out = KeyText::new();
            arg(&mut out);
            out
        };
        let text = |k: &KeyText| -> String {
            assert_eq!(k.as_bytes(), (**k).as_bytes());
            (**k).to_owned()
        };
        assert_eq!(
            text(&written(
                &|o| (&KeyArg(&u64::MAX, &u64::MAX)).write_key_text(o)
            )),
            u64::MAX.to_string()
        );
        assert_eq!(
            text(&written(
                &|o| (&KeyArg(&i64::MIN, &i64::MIN)).write_key_text(o)
            )),
            i64::MIN.to_string()
        );
        assert_eq!(
            text(&written(&|o| (&KeyArg(&0u8, &0u8)).write_key_text(o))),
            "0"
        );
        let s: &str = "user:1";
        assert_eq!(
            text(&written(&|o| (&KeyArg(&s, &s)).write_key_text(o))),
            "user:1"
        );
        assert_eq!(
            text(&written(&|o| (&KeyArg(&long, &long)).write_key_text(o))),
            long
        );
        assert_eq!(
            text(&written(&|o| (&KeyArg(&Shown, &Shown)).write_key_text(o))),
            "shown"
        );
        assert!(written(&|o| (&KeyArg(&long, &long)).write_key_text(o))
            .0
            .is_heap());
    }
}
