//! Keys by client address: the peer, or the client behind your trusted proxies.

use std::fmt::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use super::cidr::{canonical, Cidr, CidrError};
use super::head::RequestHead;
use super::key::{text_to_string, visible_ascii, KeyExtractor};
use crate::__private::KeyText;
use crate::Error;

/// The key is the client's IP address: the connection's peer, or the client behind your
/// trusted proxies. IPv4-mapped IPv6 addresses (`::ffff:203.0.113.7`, what a dual-stack
/// listener reports for IPv4 clients) count as the IPv4 address; IPv6 clients count per
/// network prefix (a /64 by default: one host usually holds a whole /64, and would otherwise
/// get a fresh budget per address).
///
/// The peer address is the head's [`peer`](RequestHead::peer): with axum, serve the router
/// with `into_make_service_with_connect_info::<SocketAddr>()`; with hyper, put the
/// connection's `SocketAddr` in each request's extensions; actix-web always knows it (its
/// `ConnectionInfo::realip_remote_addr` is not used: it believes any client's
/// `Forwarded` header). Without it, every request is answered with the error response
/// ([`Error::InvalidKey`], 500), never let through.
///
/// ```
/// use ratelimit::http::{ClientIp, TrustedProxies};
///
/// let direct = ClientIp::peer();
/// let behind_one_proxy = ClientIp::x_forwarded_for(TrustedProxies::count(1));
/// let behind_our_network = ClientIp::forwarded(TrustedProxies::cidrs(["10.0.0.0/8", "fd00::/8"])?)
///     .ipv6_prefix(56);
/// # Ok::<(), ratelimit::http::CidrError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClientIp {
    source: Source,
    ipv6_prefix: u8,
}

#[derive(Debug, Clone)]
enum Source {
    Peer,
    Proxied {
        header: ProxyHeader,
        trusted: TrustedProxies,
    },
}

#[derive(Debug, Clone, Copy)]
enum ProxyHeader {
    XForwardedFor,
    Forwarded,
}

/// Which proxies in front of the server are yours, so their reports of the client address
/// are believed and nothing to their left is.
#[derive(Debug, Clone)]
pub struct TrustedProxies(Trust);

#[derive(Debug, Clone)]
enum Trust {
    Count(usize),
    Cidrs(Arc<[Cidr]>),
}

impl TrustedProxies {
    /// Exactly `proxies` proxies of yours stand between every client and the server, each
    /// appending the address it received the request from. The client is the `proxies`-th
    /// entry from the right; what the client wrote itself is further left and ignored.
    ///
    /// A request with fewer entries did not come through all of them (or a proxy is
    /// misconfigured): it is counted under the peer address (a proxy's, shared by many
    /// clients), which over-limits rather than lets a client pick its key. Every request must
    /// reach the server through the proxies: a client that can connect directly and sends its
    /// own header picks its key; when that is possible, use [`cidrs`](Self::cidrs).
    pub fn count(proxies: usize) -> Self {
        TrustedProxies(Trust::Count(proxies))
    }

    /// Every peer or reported address inside these networks is a proxy of yours: the client
    /// is the first address, from the right, outside them (the peer itself when the peer is
    /// not a trusted proxy, whatever the headers say).
    ///
    /// Name only your proxies' networks: where every entry is trusted, the client is the
    /// leftmost one, which the client itself wrote. A network that holds clients too (such as
    /// `0.0.0.0/0`, or an office range behind the same load balancer) lets those clients pick
    /// their own key.
    pub fn cidrs<I>(networks: I) -> Result<Self, CidrError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let cidrs = networks
            .into_iter()
            .map(|n| n.as_ref().parse())
            .collect::<Result<Vec<Cidr>, _>>()?;
        Ok(TrustedProxies(Trust::Cidrs(cidrs.into())))
    }
}

impl ClientIp {
    /// The connection's peer address.
    pub fn peer() -> Self {
        ClientIp {
            source: Source::Peer,
            ipv6_prefix: 64,
        }
    }

    /// The client reported by `X-Forwarded-For`, counted from the right past `trusted`
    /// proxies (several header lines count as one list, in order).
    pub fn x_forwarded_for(trusted: TrustedProxies) -> Self {
        ClientIp {
            source: Source::Proxied {
                header: ProxyHeader::XForwardedFor,
                trusted,
            },
            ipv6_prefix: 64,
        }
    }

    /// The client reported by the `for=` parameters of RFC 7239 `Forwarded`, counted from the
    /// right past `trusted` proxies (one element per proxy).
    pub fn forwarded(trusted: TrustedProxies) -> Self {
        ClientIp {
            source: Source::Proxied {
                header: ProxyHeader::Forwarded,
                trusted,
            },
            ipv6_prefix: 64,
        }
    }

    /// Counts IPv6 clients per network of this prefix length (default 64; 128 counts every
    /// address on its own, which lets one host with a /64 take 2^64 budgets).
    ///
    /// # Panics
    ///
    /// When `prefix` is above 128.
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        assert!(
            prefix <= 128,
            "an IPv6 prefix is at most 128 bits, not {prefix}"
        );
        self.ipv6_prefix = prefix;
        self
    }

    /// The client's address (IPv4-mapped IPv6 as IPv4; not reduced to its prefix), for code
    /// that needs the address itself, such as an exemption list in a skipper.
    pub fn address(&self, head: &dyn RequestHead) -> Result<IpAddr, Error> {
        let ip = match &self.source {
            Source::Peer => peer(head)?,
            Source::Proxied { header, trusted } => {
                let reported = match header {
                    ProxyHeader::XForwardedFor => x_forwarded_for(head),
                    ProxyHeader::Forwarded => forwarded(head),
                };
                client_behind(&reported, trusted, || peer(head))?
            }
        };
        Ok(canonical(ip))
    }

    /// The key of `ip`: its text (IPv6 reduced to its prefix, `<network>/<prefix>`), written
    /// in place, without the formatting machinery for IPv4 (the common case, on every
    /// request).
    fn key_of(&self, ip: IpAddr) -> KeyText {
        let mut out = KeyText::new();
        // `KeyText`'s `write_str` never fails.
        let _ = match ip {
            IpAddr::V4(v4) => write_ipv4(&mut out, v4),
            IpAddr::V6(v6) if self.ipv6_prefix == 128 => write!(out, "{v6}"),
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.ipv6_prefix))
                    .unwrap_or(0);
                write!(out, "{}/{}", Ipv6Addr::from(bits & mask), self.ipv6_prefix)
            }
        };
        out
    }
}

/// `v4` in dotted decimal, as its `Display` writes it, in one write.
fn write_ipv4(out: &mut KeyText, v4: Ipv4Addr) -> fmt::Result {
    let mut text = [0u8; 15];
    let mut len = 0;
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            text[len] = b'.';
            len += 1;
        }
        let digits = [
            b'0' + octet / 100,
            b'0' + octet / 10 % 10,
            b'0' + octet % 10,
        ];
        let from = match octet {
            100.. => 0,
            10..=99 => 1,
            _ => 2,
        };
        text[len..len + 3 - from].copy_from_slice(&digits[from..]);
        len += 3 - from;
    }
    // ASCII digits and dots: always UTF-8.
    out.write_str(std::str::from_utf8(&text[..len]).unwrap_or_default())
}

impl KeyExtractor for ClientIp {
    fn extract(&self, head: &dyn RequestHead) -> Result<Option<String>, Error> {
        text_to_string(self.extract_text(head))
    }

    fn extract_text(&self, head: &dyn RequestHead) -> Result<Option<KeyText>, Error> {
        self.address(head).map(|ip| Some(self.key_of(ip)))
    }
}

fn peer(head: &dyn RequestHead) -> Result<IpAddr, Error> {
    head.peer().map(|addr| addr.ip()).ok_or(Error::InvalidKey {
        reason: "the request has no peer address: with axum, serve the router with \
                 `into_make_service_with_connect_info::<SocketAddr>()`; with hyper or tower, \
                 insert the connection's `SocketAddr` into the request's extensions",
    })
}

/// The client among the `reported` addresses (left to right; `None` where an entry is not an
/// address) and the peer, past the trusted proxies. Whatever cannot be trusted falls back to
/// the address of the proxy that reported it, never to an entry further left.
fn client_behind(
    reported: &[Option<IpAddr>],
    trusted: &TrustedProxies,
    peer: impl FnOnce() -> Result<IpAddr, Error>,
) -> Result<IpAddr, Error> {
    match &trusted.0 {
        Trust::Count(0) => peer(),
        Trust::Count(n) => match reported.len().checked_sub(*n).map(|i| reported[i]) {
            Some(Some(ip)) => Ok(ip),
            _ => peer(),
        },
        Trust::Cidrs(cidrs) => {
            let is_trusted = |ip: &IpAddr| cidrs.iter().any(|c| c.contains(*ip));
            let mut client = peer()?;
            for entry in reported.iter().rev() {
                if !is_trusted(&client) {
                    break;
                }
                match entry {
                    Some(ip) => client = *ip,
                    // An unreadable report by a trusted proxy: count under that proxy.
                    None => break,
                }
            }
            Ok(client)
        }
    }
}

/// Every `X-Forwarded-For` entry, left to right, over every line of the header.
fn x_forwarded_for(head: &dyn RequestHead) -> Vec<Option<IpAddr>> {
    let mut entries = Vec::new();
    head.header_lines("x-forwarded-for", &mut |value| {
        for entry in value.split(|&b| b == b',') {
            entries.push(std::str::from_utf8(entry).ok().and_then(parse_node));
        }
    });
    entries
}

/// The `for=` of every `Forwarded` element, left to right, over every line of the header;
/// `None` for an element without one, or with `unknown` or an obfuscated identifier.
///
/// A line that cannot be read (not visible ASCII, or a quoted string left open) makes the
/// whole header one unreadable entry, so the client is the peer: where the line's elements
/// begin and end is unknown, and a proxy may have appended its element to a line the client
/// began (`for=<spoof>;x="` swallows `, for=<client>`), so no position counted from the right
/// can be trusted, nor any entry further left.
fn forwarded(head: &dyn RequestHead) -> Vec<Option<IpAddr>> {
    let mut entries = Vec::new();
    let mut unreadable = false;
    head.header_lines("forwarded", &mut |value| {
        let Some(elements) = visible_ascii(value).and_then(|v| split_unquoted(v, ',')) else {
            unreadable = true;
            return;
        };
        for element in elements {
            // Its quotes are closed: it is a whole part of a line whose quotes are.
            let pairs = split_unquoted(element, ';').unwrap_or_default();
            let for_ = pairs.into_iter().find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                name.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| unquote(value.trim()))
            });
            entries.push(for_.as_deref().and_then(parse_node));
        }
    });
    if unreadable {
        return vec![None];
    }
    entries
}

/// `s` split at `sep` outside quoted strings (a backslash escapes the next character inside
/// one); `None` when a quoted string is left open.
fn split_unquoted(s: &str, sep: char) -> Option<Vec<&str>> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                parts.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    (!quoted).then_some(parts)
}

fn unquote(value: &str) -> String {
    match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        Some(inner) => {
            let mut out = String::with_capacity(inner.len());
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                out.push(if c == '\\' {
                    chars.next().unwrap_or(c)
                } else {
                    c
                });
            }
            out
        }
        None => value.to_owned(),
    }
}

/// A node as proxies write it: `203.0.113.7`, `203.0.113.7:4711`, `2001:db8::1`,
/// `[2001:db8::1]` or `[2001:db8::1]:4711`.
fn parse_node(node: &str) -> Option<IpAddr> {
    let node = node.trim();
    if let Some(rest) = node.strip_prefix('[') {
        let (addr, _port) = rest.split_once(']')?;
        return addr.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    let (addr, port) = node.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    addr.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

#[cfg(all(test, feature = "tower"))]
mod tests {
    use std::net::SocketAddr;

    use http::request::Parts;

    use super::*;

    fn parts(headers: &[(&str, &str)], peer: Option<&str>) -> Parts {
        let mut request = http::Request::builder();
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let (mut parts, ()) = request.body(()).unwrap().into_parts();
        if let Some(peer) = peer {
            parts.extensions.insert(peer.parse::<SocketAddr>().unwrap());
        }
        parts
    }

    #[test]
    fn ipv4_keys_are_written_as_display_writes_them() {
        let ip = ClientIp::peer();
        for addr in [
            "0.0.0.0",
            "9.10.99.100",
            "255.255.255.255",
            "10.0.0.1",
            "192.168.100.9",
            "203.0.113.7",
        ] {
            let parsed: Ipv4Addr = addr.parse().unwrap();
            assert_eq!(&*ip.key_of(IpAddr::V4(parsed)), addr);
            let peer = format!("{addr}:4000");
            assert_eq!(
                ip.extract(&parts(&[], Some(&peer))).unwrap().as_deref(),
                Some(addr)
            );
        }
        for octet in 0..=255 {
            let v4 = Ipv4Addr::new(octet, 0, octet, 255);
            assert_eq!(*ip.key_of(IpAddr::V4(v4)), v4.to_string());
        }
        let v6 = "2001:db8:1:2:3:4:5:6".parse::<IpAddr>().unwrap();
        assert_eq!(&*ip.key_of(v6), "2001:db8:1:2::/64");
        assert!(ip.key_of(v6).is_inline());
    }

    fn key(extractor: &ClientIp, headers: &[(&str, &str)], peer: &str) -> String {
        extractor
            .extract(&parts(headers, Some(peer)))
            .unwrap()
            .unwrap()
    }

    #[test]
    fn forwarded_elements_split_outside_quotes() {
        let p = parts(
            &[(
                "forwarded",
                "for=\"[2001:db8::1]:80\";proto=http, For=198.51.100.1;by=\"a,b\", by=x, for=unknown",
            )],
            None,
        );
        assert_eq!(
            forwarded(&p),
            vec![
                Some("2001:db8::1".parse().unwrap()),
                Some("198.51.100.1".parse().unwrap()),
                None,
                None
            ]
        );
    }

    #[test]
    fn nodes_parse_with_and_without_ports() {
        for (node, ip) in [
            ("203.0.113.7", "203.0.113.7"),
            (" 203.0.113.7:4711 ", "203.0.113.7"),
            ("2001:db8::1", "2001:db8::1"),
            ("[2001:db8::1]:443", "2001:db8::1"),
        ] {
            assert_eq!(parse_node(node), Some(ip.parse().unwrap()), "{node}");
        }
        assert_eq!(parse_node("unknown"), None);
        assert_eq!(parse_node("_hidden"), None);
    }

    #[test]
    fn too_few_forwarded_entries_count_under_the_peer() {
        let ip = ClientIp::x_forwarded_for(TrustedProxies::count(2));
        assert_eq!(
            key(&ip, &[("x-forwarded-for", "1.1.1.1")], "10.0.0.1:1"),
            "10.0.0.1"
        );
        assert_eq!(
            key(
                &ip,
                &[("x-forwarded-for", "6.6.6.6, 1.1.1.1, 10.0.0.2")],
                "10.0.0.1:1"
            ),
            "1.1.1.1"
        );
    }

    #[test]
    fn cidr_trust_walks_left_past_trusted_proxies_only() {
        let ip = ClientIp::x_forwarded_for(TrustedProxies::cidrs(["10.0.0.0/8"]).unwrap());
        let spoofed = [("x-forwarded-for", "10.9.9.9, 203.0.113.7, 10.0.0.2")];
        assert_eq!(key(&ip, &spoofed, "10.0.0.1:1"), "203.0.113.7");
        // An untrusted peer is the client, whatever it claims.
        assert_eq!(key(&ip, &spoofed, "198.51.100.9:1"), "198.51.100.9");
        // An unreadable report by a trusted proxy counts under that proxy.
        let garbage = [("x-forwarded-for", "203.0.113.7, garbage")];
        assert_eq!(key(&ip, &garbage, "10.0.0.1:1"), "10.0.0.1");
    }

    #[test]
    fn ipv6_counts_per_prefix_and_mapped_ipv4_as_ipv4() {
        let ip = ClientIp::peer();
        assert_eq!(
            key(&ip, &[], "[2001:db8:1:2:3:4:5:6]:1"),
            "2001:db8:1:2::/64"
        );
        assert_eq!(key(&ip, &[], "[::ffff:203.0.113.7]:1"), "203.0.113.7");
        let wide = ClientIp::peer().ipv6_prefix(48);
        assert_eq!(key(&wide, &[], "[2001:db8:1:2::1]:1"), "2001:db8:1::/48");
        let exact = ClientIp::peer().ipv6_prefix(128);
        assert_eq!(key(&exact, &[], "[2001:db8::1]:1"), "2001:db8::1");
        assert_eq!(
            key(&ClientIp::peer().ipv6_prefix(0), &[], "[2001:db8::1]:1"),
            "::/0"
        );
    }

    #[test]
    fn cidrs_parse_and_contain() {
        let net: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(net.contains("10.200.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.0.0.1".parse().unwrap()));
        assert!(!net.contains("11.0.0.1".parse().unwrap()));
        let any: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(any.contains("1.2.3.4".parse().unwrap()));
        let one: Cidr = "2001:db8::1".parse().unwrap();
        assert!(one.contains("2001:db8::1".parse().unwrap()));
        assert!(!one.contains("2001:db8::2".parse().unwrap()));
        for bad in ["10.0.0.0/33", "nope", "::/129", "10.0.0.0/x"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn missing_connect_info_is_an_error_not_a_pass() {
        let err = ClientIp::peer().extract(&parts(&[], None)).unwrap_err();
        assert!(matches!(err, Error::InvalidKey { .. }));
    }
}
