//! actix-web's request as the neutral [`RequestHead`].

use std::any::Any;
use std::borrow::Cow;
use std::net::SocketAddr;

use actix_web::dev::ServiceRequest;

use crate::http::RequestHead;

/// The peer is the connection's; the route, the pattern of the resource the request's path
/// routes to.
impl RequestHead for ServiceRequest {
    fn peer(&self) -> Option<SocketAddr> {
        self.peer_addr()
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers().get(name).map(|value| value.as_bytes())
    }

    fn header_lines(&self, name: &str, each: &mut dyn FnMut(&[u8])) {
        for value in self.headers().get_all(name) {
            each(value.as_bytes());
        }
    }

    fn method(&self) -> &str {
        ServiceRequest::method(self).as_str()
    }

    fn path(&self) -> &str {
        ServiceRequest::path(self)
    }

    fn route(&self) -> Option<Cow<'_, str>> {
        // The path actix routes on is the whole path as its `Url` decodes it (`/%6Cogin` runs
        // `/login`). `match_pattern()` looks up the raw path while the middleware runs before
        // routing (on the App or a scope), which names another route than the one that runs
        // (`unmatched` for `/%6Cogin`): a budget a client could step around.
        let path = self.match_info().as_str();
        self.resource_map().match_pattern(path).map(Cow::Owned)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
