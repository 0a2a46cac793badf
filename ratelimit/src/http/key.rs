//! Key extractors: what a request is counted under. Read [`KeyExtractor`]'s warning first.

use std::fmt;
use std::marker::PhantomData;

use super::head::RequestHead;
use crate::__private::KeyText;
use crate::Error;

/// What a request is counted under: `Ok(Some(key))` counts it under `key`, `Ok(None)` skips
/// the limit for it, `Err` refuses it (the layer answers with its error response, never
/// passes the request on).
///
/// **A key must be something the client cannot choose.** A header, a cookie or a token the
/// server has not verified is whatever the client sends, and a new value each time is a new,
/// empty budget each time. Count by the connection's address ([`ClientIp::peer`](super::ClientIp::peer)), by the
/// address your own proxies report ([`ClientIp::x_forwarded_for`](super::ClientIp::x_forwarded_for), [`ClientIp::forwarded`](super::ClientIp::forwarded)),
/// or by what your authentication has verified ([`Principal`], [`ApiKey`] with a lookup).
///
/// **`None` skips the limit.** Base an exemption on something the client cannot send (its
/// address, a verified principal), never on a header such as `x-internal` that any client can
/// add; and beware that a closure like `|parts| Some(header(parts)?)` skips the limit for
/// every client that simply leaves the header out.
///
/// ```
/// use ratelimit::http::{key_fn, ClientIp, KeyExtractor, RequestHead};
///
/// // Loopback clients (by their address, not by anything they send) are not limited.
/// let ip = ClientIp::peer();
/// let key = key_fn(move |head: &dyn RequestHead| match ip.address(head) {
///     Ok(addr) if addr.is_loopback() => None,
///     // The extractor's own key, not `addr.to_string()`: it counts an IPv6 host by its /64,
///     // where the full address is a fresh budget for each address the host rotates to.
///     Ok(_) => ip.extract(head).ok().flatten(),
///     Err(_) => Some("no-address".to_owned()), // one shared budget, never a pass
/// });
/// ```
///
/// (A closure cannot report an error; one that must refuse requests without an address is a
/// type implementing this trait, returning `Err`, as [`ClientIp`](super::ClientIp) does.)
///
/// Implemented by [`ClientIp`](super::ClientIp), [`ApiKey`], [`Principal`], closures on any
/// framework's head through [`key_fn`], and (feature `tower`) every closure
/// `Fn(&http::request::Parts) -> Option<String>` (in another framework's adapter such a
/// closure has no `Parts` to read: the request is refused with [`Error::InvalidKey`]).
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key of the request whose head is `head`.
    fn extract(&self, head: &dyn RequestHead) -> Result<Option<String>, Error>;

    /// [`extract`](Self::extract)'s key as the layer counts it: in place when it is short
    /// (an address), so that a request allocates nothing for it. Implement `extract` only;
    /// this is overridden by the extractors of this crate.
    #[doc(hidden)]
    fn extract_text(&self, head: &dyn RequestHead) -> Result<Option<KeyText>, Error> {
        Ok(self.extract(head)?.map(KeyText::from))
    }
}

/// A key extractor from a closure on the neutral [`RequestHead`], for every adapter (see
/// [`KeyExtractor`]'s warnings: `None` skips the limit).
pub fn key_fn<F>(key: F) -> KeyFn<F>
where
    F: Fn(&dyn RequestHead) -> Option<String> + Send + Sync + 'static,
{
    KeyFn(key)
}

/// A closure on the [`RequestHead`] as a [`KeyExtractor`]: made by [`key_fn`].
#[derive(Clone)]
pub struct KeyFn<F>(F);

impl<F> fmt::Debug for KeyFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyFn").finish_non_exhaustive()
    }
}

impl<F> KeyExtractor for KeyFn<F>
where
    F: Fn(&dyn RequestHead) -> Option<String> + Send + Sync + 'static,
{
    fn extract(&self, head: &dyn RequestHead) -> Result<Option<String>, Error> {
        Ok((self.0)(head))
    }
}

#[cfg(feature = "tower")]
impl<F> KeyExtractor for F
where
    F: Fn(&http::request::Parts) -> Option<String> + Send + Sync + 'static,
{
    fn extract(&self, head: &dyn RequestHead) -> Result<Option<String>, Error> {
        match head.as_any().downcast_ref::<http::request::Parts>() {
            Some(parts) => Ok(self(parts)),
            None => Err(Error::InvalidKey {
                reason: "a key closure on `http::request::Parts` used by another framework's \
                         adapter: write it on the `RequestHead` with `ratelimit::http::key_fn`",
            }),
        }
    }
}

/// Maps a raw API key to the account it belongs to, or `None`.
type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

/// The key is an API key from a request header, **verified** by your `lookup` (the account it
/// belongs to, or a hash of a key you know); a request without the header, or with a key the
/// lookup does not recognise, is counted by `fallback` (e.g. [`ClientIp::peer`](super::ClientIp::peer)).
///
/// A header is whatever the client sends: counted as it comes, a client sending a new value
/// each time would get a new, empty budget each time. So there is no way to build this
/// without a lookup; return `None` from it for keys you do not know. Keys are counted as
/// `api-key:<what the lookup returned>`, apart from any address.
///
/// ```
/// use ratelimit::http::{ApiKey, ClientIp};
/// use std::collections::HashMap;
///
/// let accounts: HashMap<String, u64> = HashMap::from([("k-123".to_string(), 42)]);
/// let key = ApiKey::new(
///     "x-api-key",
///     move |raw| accounts.get(raw).map(|account| account.to_string()),
///     ClientIp::peer(),
/// );
/// ```
pub struct ApiKey {
    /// Lowercase.
    header: String,
    lookup: Box<Lookup>,
    fallback: Box<dyn KeyExtractor>,
}

impl ApiKey {
    /// The key in `header`, verified by `lookup`, else `fallback`'s key.
    ///
    /// # Panics
    ///
    /// When `header` is not a valid header name (a token: letters, digits and
    /// ``!#$%&'*+-.^_`|~``).
    pub fn new<F>(header: &str, lookup: F, fallback: impl KeyExtractor) -> Self
    where
        F: Fn(&str) -> Option<String> + Send + Sync + 'static,
    {
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        assert!(
            !header.is_empty() && header.bytes().all(token),
            "{header:?} is not a valid header name"
        );
        ApiKey {
            header: header.to_ascii_lowercase(),
            lookup: Box::new(lookup),
            fallback: Box::new(fallback),
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl ApiKey {
    /// What the lookup made of the request's API key, if it has one the lookup knows.
    fn verified(&self, head: &dyn RequestHead) -> Option<String> {
        head.header(&self.header)
            .and_then(visible_ascii)
            .and_then(|raw| (self.lookup)(raw.trim()))
    }
}

impl KeyExtractor for ApiKey {
    fn extract(&self, head: &dyn RequestHead) -> Result<Option<String>, Error> {
        text_to_string(self.extract_text(head))
    }

    fn extract_text(&self, head: &dyn RequestHead) -> Result<Option<KeyText>, Error> {
        match self.verified(head) {
            Some(account) => Ok(Some(KeyText::from(format!("api-key:{account}")))),
            None => self.fallback.extract_text(head),
        }
    }
}

/// The key is an authenticated principal of type `T` that your authentication middleware
/// inserted into the request's extensions (so the limiter must run after it: with axum, add
/// the limiter layer first, the auth layer after, as axum runs the last-added layer first;
/// with actix-web, `wrap` the limiter before the auth middleware, for the same reason).
/// Counted as `principal:<T's Display>`. The extensions are `http::request::Parts`' (feature
/// `tower`) or actix-web's request extensions (feature `actix`).
///
/// Without the extension the request is answered with the layer's error response
/// ([`Error::InvalidKey`], 500), or counted by the fallback given with [`or`](Self::or).
///
/// ```
/// use ratelimit::http::{ClientIp, Principal};
///
/// #[derive(Clone)]
/// struct UserId(u64);
/// impl std::fmt::Display for UserId {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         write!(f, "{}", self.0)
///     }
/// }
///
/// let signed_in_only = Principal::<UserId>::new();
/// let anyone = Principal::<UserId>::new().or(ClientIp::peer());
/// ```
pub struct Principal<T> {
    fallback: Option<Box<dyn KeyExtractor>>,
    principal: PhantomData<fn() -> T>,
}

impl<T> Principal<T>
where
    T: fmt::Display + Send + Sync + 'static,
{
    /// The principal, required.
    pub fn new() -> Self {
        Principal {
            fallback: None,
            principal: PhantomData,
        }
    }

    /// Counts requests without a principal by `fallback`.
    pub fn or(mut self, fallback: impl KeyExtractor) -> Self {
        self.fallback = Some(Box::new(fallback));
        self
    }
}

impl<T> Default for Principal<T>
where
    T: fmt::Display + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for Principal<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Principal")
            .field("type", &std::any::type_name::<T>())
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

impl<T> KeyExtractor for Principal<T>
where
    T: fmt::Display + Send + Sync + 'static,
{
    fn extract(&self, head: &dyn RequestHead) -> Result<Option<String>, Error> {
        text_to_string(self.extract_text(head))
    }

    fn extract_text(&self, head: &dyn RequestHead) -> Result<Option<KeyText>, Error> {
        match (principal_of::<T>(head), &self.fallback) {
            (Some(principal), _) => Ok(Some(principal)),
            (None, Some(fallback)) => fallback.extract_text(head),
            (None, None) => Err(no_principal()),
        }
    }
}

/// The key of the principal `T` in the framework's request extensions, if there.
fn principal_of<T>(head: &dyn RequestHead) -> Option<KeyText>
where
    T: fmt::Display + Send + Sync + 'static,
{
    let key = |principal: &T| KeyText::from(format!("principal:{principal}"));
    let any = head.as_any();
    #[cfg(feature = "tower")]
    if let Some(parts) = any.downcast_ref::<http::request::Parts>() {
        return parts.extensions.get::<T>().map(key);
    }
    #[cfg(feature = "actix")]
    if let Some(request) = any.downcast_ref::<actix_web::dev::ServiceRequest>() {
        use actix_web::HttpMessage;
        return request.extensions().get::<T>().map(key);
    }
    let _ = (any, key);
    None
}

/// A header value as text, if it is visible ASCII (what `HeaderValue::to_str` accepts).
pub(super) fn visible_ascii(value: &[u8]) -> Option<&str> {
    value
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
}

/// [`KeyExtractor::extract_text`]'s answer as `extract`'s, for the extractors that write
/// their key as text.
pub(super) fn text_to_string(
    text: Result<Option<KeyText>, Error>,
) -> Result<Option<String>, Error> {
    text.map(|key| key.map(KeyText::into_string))
}

fn no_principal() -> Error {
    Error::InvalidKey {
        reason: "the request carries no principal: run the authentication middleware before \
                 the limiter, or give the extractor a fallback",
    }
}
