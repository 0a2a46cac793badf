//! The request head every rule is written against: which client a request is, which budget it
//! spends. Each framework's adapter implements it once on its own request type.

use std::any::Any;
use std::borrow::Cow;
use std::net::SocketAddr;

/// What the limiter reads of a request, in no framework's types: the connection's peer, the
/// header fields, the method and the route. Key extractors ([`ClientIp`](super::ClientIp),
/// [`ApiKey`](super::ApiKey), [`Principal`](super::Principal), [`key_fn`](super::key_fn)
/// closures) and per-route budgets ([`route_of`](super::route_of)) are written against it
/// once, and so work in every adapter.
///
/// Implemented for `http::request::Parts` (feature `tower`: tower, hyper and axum) and for
/// actix-web's `ServiceRequest` (feature `actix`). A new adapter implements it on its own
/// request type.
pub trait RequestHead {
    /// The address of the connection's peer, if the server passed it on.
    fn peer(&self) -> Option<SocketAddr>;

    /// The value of the first `name` header line (`name` lowercase), as sent.
    fn header(&self, name: &str) -> Option<&[u8]>;

    /// Calls `each` with every `name` header line, in the order they came.
    fn header_lines(&self, name: &str, each: &mut dyn FnMut(&[u8]));

    /// The method, as sent (`GET`).
    fn method(&self) -> &str;

    /// The request path, without the query.
    fn path(&self) -> &str;

    /// The template of the route the request was routed to (`/orders/{id}`), or the RPC
    /// method (`/package.Service/Method`); `None` when the framework knows none.
    fn route(&self) -> Option<Cow<'_, str>>;

    /// The framework's own request, for extractors that read what only it has (an
    /// authenticated principal in its extensions: [`Principal`](super::Principal)).
    fn as_any(&self) -> &dyn Any;
}

#[cfg(feature = "tower")]
mod parts {
    use std::any::Any;
    use std::borrow::Cow;
    use std::net::SocketAddr;

    use http::request::Parts;

    use super::RequestHead;

    /// The head of an `http` request: tower services, hyper, axum.
    ///
    /// The peer is axum's `ConnectInfo<SocketAddr>` (feature `axum`: serve the router with
    /// `into_make_service_with_connect_info::<SocketAddr>()`), tonic's `TcpConnectInfo`
    /// (feature `tonic`: a tonic server sets it), else a `SocketAddr` in the request's
    /// extensions (with hyper, insert the accepted connection's address into each request). The route is axum's `MatchedPath` (feature `axum`).
    impl RequestHead for Parts {
        fn peer(&self) -> Option<SocketAddr> {
            #[cfg(feature = "axum")]
            if let Some(axum::extract::ConnectInfo(addr)) =
                self.extensions
                    .get::<axum::extract::ConnectInfo<SocketAddr>>()
            {
                return Some(*addr);
            }
            #[cfg(feature = "tonic")]
            if let Some(addr) = self
                .extensions
                .get::<tonic::transport::server::TcpConnectInfo>()
                .and_then(|info| info.remote_addr())
            {
                return Some(addr);
            }
            self.extensions.get::<SocketAddr>().copied()
        }

        fn header(&self, name: &str) -> Option<&[u8]> {
            self.headers.get(name).map(|value| value.as_bytes())
        }

        fn header_lines(&self, name: &str, each: &mut dyn FnMut(&[u8])) {
            for value in self.headers.get_all(name) {
                each(value.as_bytes());
            }
        }

        fn method(&self) -> &str {
            self.method.as_str()
        }

        fn path(&self) -> &str {
            self.uri.path()
        }

        fn route(&self) -> Option<Cow<'_, str>> {
            #[cfg(feature = "axum")]
            if let Some(path) = self.extensions.get::<axum::extract::MatchedPath>() {
                return Some(Cow::Borrowed(path.as_str()));
            }
            None
        }

        fn as_any(&self) -> &dyn Any {
            self
        }
    }
}
