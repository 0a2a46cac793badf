//! The store key: composed once, here, from (prefix, budget, tier, user key) and the quota's
//! identity, in an encoding in which no two different tuples give the same key.
//!
//! ```text
//! <prefix>:{<tag>}<identity>:<budget>:<tier>[:<user key>]
//! ```
//!
//! - `prefix`: the configured `key_prefix`, which has no `{` or `}`: the first `{` ends it.
//! - `{<tag>}`: the Redis Cluster hash tag, so that every key of one user lives in one slot.
//!   The user key itself when it has no braces (the common case, readable in Redis); for a
//!   user key with braces, `#` and a fixed 64-bit digest of it, and the key itself follows
//!   at the end; `{}` when the call has no user key (one budget for the whole fn).
//! - `identity`: the quota's strategy and window in milliseconds (`T60000`, `F500`), or in
//!   nanoseconds when it is not a whole number of them (`L1500ns`): two quotas that would read
//!   one state differently never share a key.
//! - `budget`, `tier`: `-` when absent, else `<byte length>:<text>`, so neither can run into
//!   the next part.
//!
//! Decoding is unambiguous: the prefix ends at the first `{`; a brace-free tag ends at the
//! first `}`; the identity has no `:`; budget and tier carry their lengths; what is left is
//! the user key that a digest tag stands for, and is there exactly when the tag is one.

use std::fmt::Write;

use arrayvec::ArrayString;

use crate::error::Error;
use crate::quota::Quota;

/// The longest user key accepted, in bytes. Keys are made by code, not typed by people;
/// anything longer is almost certainly a whole request body used by mistake.
pub const MAX_KEY_LEN: usize = 1024;

/// The longest key a store is handed: a user key, a budget name and a prefix, with room.
pub(crate) const MAX_STORE_KEY_LEN: usize = 4 * MAX_KEY_LEN;

/// A user key: 1 to [`MAX_KEY_LEN`] bytes.
#[inline]
pub(crate) fn check_user_key(key: &(impl AsRef<[u8]> + ?Sized)) -> Result<(), Error> {
    check_len(
        key.as_ref(),
        MAX_KEY_LEN,
        "the key is longer than 1024 bytes",
    )
}

/// A key handed to a store directly: 1 to 4096 bytes.
pub(crate) fn check_store_key(key: &(impl AsRef<[u8]> + ?Sized)) -> Result<(), Error> {
    check_len(
        key.as_ref(),
        MAX_STORE_KEY_LEN,
        "the key is longer than 4096 bytes",
    )
}

#[inline]
fn check_len(key: &[u8], max: usize, too_long: &'static str) -> Result<(), Error> {
    if key.is_empty() {
        return Err(Error::InvalidKey {
            reason: "the key is empty",
        });
    }
    if key.len() > max {
        return Err(Error::InvalidKey { reason: too_long });
    }
    Ok(())
}

/// Whether a user key holds a brace: it would end the store key's hash tag, so the store key
/// carries its digest instead (see [`write_around`]).
#[inline]
pub(crate) fn braced(key: &[u8]) -> bool {
    key.iter().any(|&b| b == b'{' || b == b'}')
}

/// What a store key is made of, before the quota's identity: the parts a configuration fixes
/// written once, when it is built ([`head`], [`name_part`]), not on every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyParts<'a> {
    /// `<prefix>:{` ([`head`]).
    pub(crate) head: &'a str,
    pub(crate) budget: Option<&'a str>,
    /// The tier's part, written ([`name_part`]); `None`: no tier (`:-`, a constant).
    pub(crate) tier: Option<&'a str>,
    pub(crate) key: Option<&'a str>,
    /// The quota's identity when it was written ahead (a tier's, the default limit's);
    /// `None` writes it from the quota.
    pub(crate) identity: Option<&'a str>,
}

/// What comes before the hash tag of every store key under `prefix`: `<prefix>:{`.
pub(crate) fn head(prefix: &str) -> Box<str> {
    let mut out = String::with_capacity(prefix.len() + 2);
    push(&mut out, prefix);
    push(&mut out, ":{");
    out.into()
}

/// A budget's or tier's part of a store key, written ([`write_name`]).
pub(crate) fn name_part(name: Option<&str>) -> Box<str> {
    let mut out = String::new();
    write_name(&mut out, name);
    out.into()
}

/// Appends a budget's or tier's part of a store key: `:-` when absent, else
/// `:<byte length>:<text>`, so that neither can run into the next part.
#[inline]
fn write_name(out: &mut impl Write, name: Option<&str>) {
    write_name_head(out, name);
    if let Some(text) = name {
        push(out, text);
    }
}

/// What [`write_name`] writes before the name's text: all of it (`:-`) when there is none.
#[inline(always)]
fn write_name_head(out: &mut impl Write, name: Option<&str>) {
    match name {
        None => push(out, ":-"),
        Some(text) => write_len(out, text.len()),
    }
}

/// Appends `:<n>:`: a name's length, a byte at a time while it is short (a name's usually
/// is: each byte a store in place, where the digits written and then copied were a call to
/// format them and one to copy them, measurably more a key under cachegrind).
#[inline(always)]
fn write_len(out: &mut impl Write, n: usize) {
    let digit = |d: usize| char::from(b'0' + (d % 10) as u8);
    match n {
        0..10 => {
            let _ = out.write_char(':');
            let _ = out.write_char(digit(n));
        }
        10..100 => {
            let _ = out.write_char(':');
            let _ = out.write_char(digit(n / 10));
            let _ = out.write_char(digit(n));
        }
        _ => {
            push(out, ":");
            push(out, itoa::Buffer::new().format(n));
        }
    }
    let _ = out.write_char(':');
}

/// Writes the store key of `parts` under `quota` into `out`, the user key checked first.
#[cfg(test)]
pub(crate) fn compose(out: &mut String, parts: &KeyParts<'_>, quota: &Quota) -> Result<(), Error> {
    if let Some(key) = parts.key {
        check_user_key(key)?;
    }
    write_around(out, parts, |out| write_suffix(out, parts, quota));
    Ok(())
}

/// Appends `s` to a key being written: into a `String` or a [`KeyBuf`], which never fail.
#[inline(always)]
fn push(out: &mut impl Write, s: &str) {
    let _ = out.write_str(s);
}

/// Appends the store key of `parts` to `out` (empty), for a user key already checked
/// ([`check_user_key`]), with what follows the hash tag written by `suffix`:
/// [`write_suffix`]'s text for the same parts and quota.
#[inline]
pub(crate) fn write_around<W: Write>(
    out: &mut W,
    parts: &KeyParts<'_>,
    suffix: impl FnOnce(&mut W),
) {
    push(out, parts.head);
    write_tagged(out, parts.key, |out| {
        push(out, "}");
        suffix(out);
    });
}

/// Appends the hash tag's content for user key `key`, then `tail` (which closes the tag and
/// writes the suffix), then a braced user key itself.
#[inline(always)]
fn write_tagged<W: Write>(out: &mut W, key: Option<&str>, tail: impl FnOnce(&mut W)) {
    match key {
        Some(key) if braced(key.as_bytes()) => {
            push(out, "#");
            push_hex(out, fnv1a(key.as_bytes()));
            tail(out);
            push(out, ":");
            push(out, key);
        }
        Some(key) => {
            push(out, key);
            tail(out);
        }
        None => tail(out),
    }
}

/// A call site's store key around its user key, written once (a prepared site holds it):
/// `<prefix>:{` before the user key's tag, `}<identity>:<budget>:<tier>` after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Around {
    head: String,
    tail: String,
    /// The store key of a call without a user key (`head` then `tail`), written once: such
    /// a call's key is fixed, so it is never composed again.
    whole: String,
}

impl Around {
    /// The store key of `parts` (whatever their user key) under `quota`, around the user key.
    pub(crate) fn new(parts: &KeyParts<'_>, quota: &Quota) -> Self {
        let head = String::from(parts.head);
        let mut tail = String::from("}");
        write_suffix(&mut tail, parts, quota);
        let mut around = Around {
            head,
            tail,
            whole: String::new(),
        };
        let mut whole = String::new();
        around.write(&mut whole, None);
        around.whole = whole;
        around
    }

    /// The store key of a call without a user key: what [`write`](Self::write) writes for
    /// `None`.
    #[inline]
    pub(crate) fn whole(&self) -> &str {
        &self.whole
    }

    /// Appends the store key of user key `key` (checked: [`check_user_key`]) to `out`
    /// (empty): what [`write_around`] writes for the same parts.
    #[inline(always)]
    pub(crate) fn write(&self, out: &mut impl Write, key: Option<&str>) {
        push(out, &self.head);
        write_tagged(
            out,
            key,
            #[inline(always)]
            |out| push(out, &self.tail),
        );
    }
}

/// The part of a store key between the hash tag and a braced user key: the quota's identity,
/// the budget and the tier. Appended to `out`.
///
/// The pieces the call's own options make (the identity of a quota they resolve, the
/// budget's length) are written in place first and appended as one: each append to the
/// store key's buffer is a check and a copy of its own, and a call with overrides made nine.
pub(crate) fn write_suffix(out: &mut impl Write, parts: &KeyParts<'_>, quota: &Quota) {
    // At most 45 bytes: a strategy, 20 digits and `ns`; `:`, 20 digits and `:`.
    let mut piece = ArrayString::<64>::new();
    match parts.identity {
        Some(identity) => push(out, identity),
        None => quota.identity(&mut piece),
    }
    write_name_head(&mut piece, parts.budget);
    push(out, &piece);
    if let Some(budget) = parts.budget {
        push(out, budget);
    }
    match parts.tier {
        Some(tier) => push(out, tier),
        None => push(out, ":-"),
    }
}

/// Text being written, in place up to `N` bytes and on the heap past that: the store key of
/// a call decided at once ([`KeyBuf`]), an annotated fn's user key. Nothing is allocated or
/// kept between calls for a short text, and it derefs to `str` unchecked (only whole `str`s
/// are written).
pub(crate) enum Text<const N: usize> {
    Inline(ArrayString<N>),
    Heap(String),
}

/// A store key composed on the stack: long enough for a short user key under a fn's path.
pub(crate) type KeyBuf = Text<184>;

impl<const N: usize> Text<N> {
    #[inline]
    pub(crate) const fn new() -> Self {
        Text::Inline(ArrayString::new_const())
    }

    /// Moves the text to the heap, `s` appended.
    #[cold]
    #[inline(never)]
    fn spill(&mut self, s: &str) {
        let mut heap = String::with_capacity(self.len() + s.len() + 64);
        heap.push_str(self);
        heap.push_str(s);
        *self = Text::Heap(heap);
    }

    /// Whether the text moved to the heap.
    #[cfg(test)]
    pub(crate) fn is_heap(&self) -> bool {
        matches!(self, Text::Heap(_))
    }
}

impl<const N: usize> Write for Text<N> {
    #[inline(always)]
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        match self {
            Text::Inline(inline) => {
                if inline.try_push_str(s).is_err() {
                    self.spill(s);
                }
            }
            Text::Heap(heap) => heap.push_str(s),
        }
        Ok(())
    }
}

impl<const N: usize> std::ops::Deref for Text<N> {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        match self {
            Text::Inline(inline) => inline,
            Text::Heap(heap) => heap,
        }
    }
}

/// FNV-1a, 64 bits: a fixed function, so every process of a fleet puts a user in one slot.
/// Only placement depends on it: the key itself is stored in full beside it.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn push_hex(out: &mut impl Write, n: u64) {
    for shift in (0..16).rev() {
        let digit = ((n >> (shift * 4)) & 0xf) as u32;
        let _ = out.write_char(char::from_digit(digit, 16).unwrap_or('0'));
    }
}

#[cfg(test)]
mod tests;
