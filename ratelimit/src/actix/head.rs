//! actix-web's request as the neutral [`RequestHead`].

use std::any::Any;
use std::borrow::Cow;
use std::net::SocketAddr;

use actix_web::dev::ServiceRequest;

use crate::http::RequestHead;

/// The peer is the connection's; the route, the resource's `match_pattern`.
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
        self.match_pattern().map(Cow::Owned)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
