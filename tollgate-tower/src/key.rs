//! Key extractors: which client (or route, or plan) a request is counted against.
//!
//! A key comes only from what the client cannot choose, unless the extractor says otherwise:
//! [`PeerIp`] reads the connection's address (never a header); [`TrustedProxy`] reads
//! `X-Forwarded-For` / `Forwarded` only from a peer inside the configured proxy networks, and
//! then takes the rightmost hop that is not itself a trusted proxy.

use core::hash::Hash;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::header::{HeaderName, FORWARDED};
use http::Request;

use crate::net::{check_prefix, mask, IpNet, NetError};

/// Evaluated at compile time (`from_static` at run time would validate the name per request);
/// a `static`, not a `const`, so a lookup borrows it instead of making and dropping a copy.
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Picks the key a request is counted against; `None` when the request carries no key (the
/// layer then answers as its [`MissingKey`](crate::MissingKey) setting says).
///
/// Implemented by [`GlobalKey`], [`PeerIp`], [`TrustedProxy`], [`HeaderKey`], `RouteKey`
/// (with the `axum` feature), [`FnKey`] (any closure, see [`key_fn`]) and pairs of extractors
/// (`(PeerIp, HeaderKey)` counts each client per API key).
///
/// ```
/// use http::Request;
/// use tollgate_tower::{KeyExtractor, HeaderKey};
/// let by_key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
/// let req = Request::builder().header("x-api-key", "k-42").body(()).unwrap();
/// assert_eq!(by_key.extract(&req).as_deref(), Some(&b"k-42"[..]));
/// assert_eq!(by_key.extract(&Request::new(())), None);
/// ```
pub trait KeyExtractor<B>: Clone + Send + Sync + 'static {
    /// The key type: what the limiter map is keyed by.
    type Key: Hash + Eq + Clone + Send + Sync + 'static;

    /// The request's key, or `None` when it has none.
    fn extract(&self, req: &Request<B>) -> Option<Self::Key>;

    /// The request's key, or why it has none: what the layer asks. A request whose key is
    /// [`KeyError::Ambiguous`] (a key header sent twice) is refused with `400` whatever
    /// [`MissingKey`](crate::MissingKey) says, so that sending a header twice is never a way
    /// around the limit. The default reads [`KeyExtractor::extract`]'s `None` as missing.
    ///
    /// ```
    /// use tollgate_tower::{HeaderKey, KeyError, KeyExtractor};
    /// let k = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
    /// let twice = http::Request::builder().header("x-api-key", "a").header("x-api-key", "b").body(()).unwrap();
    /// assert_eq!(k.extract_key(&twice), Err(KeyError::Ambiguous));
    /// assert_eq!(k.extract_key(&http::Request::new(())), Err(KeyError::Missing));
    /// ```
    #[inline]
    fn extract_key(&self, req: &Request<B>) -> Result<Self::Key, KeyError> {
        self.extract(req).ok_or(KeyError::Missing)
    }

    /// Whether one key stands for many clients ([`GlobalKey`], `RouteKey`): the layer then
    /// sends no `RateLimit` headers unless told to, since they would tell every client about
    /// the others' traffic. Default `false`.
    ///
    /// ```
    /// use tollgate_tower::{GlobalKey, KeyExtractor, PeerIp};
    /// assert!(KeyExtractor::<()>::is_shared(&GlobalKey));
    /// assert!(!KeyExtractor::<()>::is_shared(&PeerIp::default()));
    /// ```
    fn is_shared(&self) -> bool {
        false
    }
}

/// Why a request has no key (see [`KeyExtractor::extract_key`]).
///
/// ```
/// assert_eq!(tollgate_tower::KeyError::Ambiguous.to_string(), "the request names its key more than once");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyError {
    /// The request carries no key (no peer address, no such header).
    Missing,
    /// The request carries more than one key (a key header sent twice): refused.
    Ambiguous,
}

impl core::fmt::Display for KeyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            KeyError::Missing => "the request carries no key",
            KeyError::Ambiguous => "the request names its key more than once",
        })
    }
}

impl std::error::Error for KeyError {}

/// The connection's peer address, as a request extension. A hyper server inserts it per
/// connection (see the crate's `proxy` example); axum's `ConnectInfo<SocketAddr>` is read as
/// well (feature `axum`).
///
/// ```
/// use tollgate_tower::PeerAddr;
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(PeerAddr("192.0.2.1:5000".parse().unwrap()));
/// assert_eq!(tollgate_tower::peer_addr(&req).unwrap().port(), 5000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// The connection's peer address of `req`: its [`PeerAddr`] extension, else (feature `axum`)
/// its `ConnectInfo<SocketAddr>`. Never a header.
///
/// ```
/// assert!(tollgate_tower::peer_addr(&http::Request::new(())).is_none());
/// ```
pub fn peer_addr<B>(req: &Request<B>) -> Option<SocketAddr> {
    if let Some(PeerAddr(a)) = req.extensions().get::<PeerAddr>() {
        return Some(*a);
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(a)) = req
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*a);
    }
    None
}

/// One key for every request: a limit on the whole service.
///
/// ```
/// use tollgate_tower::{GlobalKey, KeyExtractor};
/// assert_eq!(GlobalKey.extract(&http::Request::new(())), Some(()));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct GlobalKey;

impl<B> KeyExtractor<B> for GlobalKey {
    type Key = ();
    #[inline]
    fn extract(&self, _: &Request<B>) -> Option<()> {
        Some(())
    }
    fn is_shared(&self) -> bool {
        true
    }
}

/// How client addresses are grouped into keys: IPv4 addresses by their first `v4` bits (32 by
/// default: one key per address), IPv6 by their first `v6` bits (64 by default, since one
/// client is routinely given a whole /64). IPv4-mapped IPv6 addresses count as IPv4.
///
/// ```
/// use tollgate_tower::Grouping;
/// let g = Grouping::default();
/// let a = g.key("2001:db8:1:2::1".parse().unwrap());
/// let b = g.key("2001:db8:1:2:ffff::9".parse().unwrap());
/// assert_eq!(a, b);
/// assert_eq!(a.to_string(), "2001:db8:1:2::");
/// let wide = Grouping::default().try_ipv6_prefix(48)?;
/// assert_eq!(wide.key("2001:db8:1:2::1".parse().unwrap()).to_string(), "2001:db8:1::");
/// # Ok::<(), tollgate_tower::NetError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grouping {
    v4: u8,
    v6: u8,
}

impl Default for Grouping {
    fn default() -> Self {
        Grouping { v4: 32, v6: 64 }
    }
}

impl Grouping {
    /// Groups IPv6 clients by their first `prefix` bits.
    ///
    /// # Errors
    /// [`NetError::PrefixTooLong`] above 128.
    ///
    /// ```
    /// assert!(tollgate_tower::Grouping::default().try_ipv6_prefix(129).is_err());
    /// ```
    pub fn try_ipv6_prefix(mut self, prefix: u8) -> Result<Self, NetError> {
        self.v6 = check_prefix(prefix, 128)?;
        Ok(self)
    }

    /// Groups IPv4 clients by their first `prefix` bits.
    ///
    /// # Errors
    /// [`NetError::PrefixTooLong`] above 32.
    ///
    /// ```
    /// let g = tollgate_tower::Grouping::default().try_ipv4_prefix(24)?;
    /// assert_eq!(g.key("10.1.2.3".parse().unwrap()).to_string(), "10.1.2.0");
    /// # Ok::<(), tollgate_tower::NetError>(())
    /// ```
    pub fn try_ipv4_prefix(mut self, prefix: u8) -> Result<Self, NetError> {
        self.v4 = check_prefix(prefix, 32)?;
        Ok(self)
    }

    /// The key of `ip`: the address with its host bits cleared.
    ///
    /// ```
    /// let g = tollgate_tower::Grouping::default();
    /// assert_eq!(g.key("::ffff:10.0.0.1".parse().unwrap()).to_string(), "10.0.0.1");
    /// ```
    #[inline]
    pub fn key(&self, ip: IpAddr) -> IpAddr {
        let ip = ip.to_canonical();
        let prefix = if ip.is_ipv4() { self.v4 } else { self.v6 };
        mask(ip, prefix)
    }
}

/// The connection's peer address (see [`peer_addr`]), grouped by [`Grouping`]. A request
/// without a peer address has no key.
///
/// ```
/// use tollgate_tower::{KeyExtractor, PeerAddr, PeerIp};
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(PeerAddr("[2001:db8::7]:443".parse().unwrap()));
/// assert_eq!(PeerIp::default().extract(&req).unwrap().to_string(), "2001:db8::");
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct PeerIp {
    grouping: Grouping,
}

impl PeerIp {
    /// Peer addresses grouped by `grouping`.
    ///
    /// ```
    /// let g = tollgate_tower::Grouping::default().try_ipv6_prefix(56)?;
    /// let _ = tollgate_tower::PeerIp::grouped(g);
    /// # Ok::<(), tollgate_tower::NetError>(())
    /// ```
    pub fn grouped(grouping: Grouping) -> Self {
        PeerIp { grouping }
    }
}

impl<B> KeyExtractor<B> for PeerIp {
    type Key = IpAddr;
    #[inline]
    fn extract(&self, req: &Request<B>) -> Option<IpAddr> {
        peer_addr(req).map(|a| self.grouping.key(a.ip()))
    }
}

/// Which header a trusted proxy writes the client chain into.
///
/// ```
/// let _ = tollgate_tower::ForwardedHeader::Forwarded;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:80"`.
    Forwarded,
}

/// The client behind trusted proxies: the peer address when the peer is not a trusted proxy;
/// otherwise the rightmost address of the forwarding header that is not itself inside a
/// trusted network, which is the hop the client cannot forge (every hop to its right was
/// appended by a proxy you trust). Grouped by [`Grouping`] like [`PeerIp`].
///
/// A hop that is not an address (`unknown`, an obfuscated `_name`, garbage) ends the walk at
/// the trusted proxy to its right: that proxy's address becomes the key. An obfuscated port
/// (`for="192.0.2.43:_p1"`, RFC 7239 §6.3) is dropped and the address kept. When every hop
/// is a trusted proxy (the request came from one of them, or a client inside a trusted
/// network), the leftmost hop is the key.
///
/// Trust your proxies' own addresses (`10.0.0.7/32`, one entry per proxy), not the networks
/// they sit in: a host of a trusted network that is not one of your proxies can write any
/// chain it likes, and would be keyed by whatever address it wrote last.
///
/// ```
/// use tollgate_tower::{KeyExtractor, PeerAddr, TrustedProxy};
/// let xff = TrustedProxy::new(["10.0.0.0/8".parse()?]);
/// let mut req = http::Request::builder()
///     .header("x-forwarded-for", "6.6.6.6, 203.0.113.9, 10.1.1.1")
///     .body(())
///     .unwrap();
/// req.extensions_mut().insert(PeerAddr("10.0.0.2:4000".parse().unwrap()));
/// // 6.6.6.6 was written by the client itself; 203.0.113.9 was seen by the proxy 10.1.1.1.
/// assert_eq!(xff.extract(&req).unwrap().to_string(), "203.0.113.9");
/// # Ok::<(), tollgate_tower::NetError>(())
/// ```
#[derive(Clone, Debug)]
pub struct TrustedProxy {
    trusted: Arc<[IpNet]>,
    header: ForwardedHeader,
    grouping: Grouping,
}

impl TrustedProxy {
    /// Trusts `X-Forwarded-For` from peers inside `networks`.
    ///
    /// ```
    /// let t = tollgate_tower::TrustedProxy::new(["127.0.0.1/32".parse()?, "::1".parse()?]);
    /// # Ok::<(), tollgate_tower::NetError>(())
    /// ```
    pub fn new(networks: impl IntoIterator<Item = IpNet>) -> Self {
        TrustedProxy {
            trusted: networks.into_iter().collect(),
            header: ForwardedHeader::XForwardedFor,
            grouping: Grouping::default(),
        }
    }

    /// Reads `header` instead of `X-Forwarded-For`.
    ///
    /// ```
    /// use tollgate_tower::{ForwardedHeader, TrustedProxy};
    /// let t = TrustedProxy::new(["10.0.0.0/8".parse()?]).header(ForwardedHeader::Forwarded);
    /// # Ok::<(), tollgate_tower::NetError>(())
    /// ```
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// Groups client addresses by `grouping` (default: IPv4 /32, IPv6 /64).
    ///
    /// ```
    /// use tollgate_tower::{Grouping, TrustedProxy};
    /// let t = TrustedProxy::new([]).grouping(Grouping::default().try_ipv6_prefix(56)?);
    /// # Ok::<(), tollgate_tower::NetError>(())
    /// ```
    pub fn grouping(mut self, grouping: Grouping) -> Self {
        self.grouping = grouping;
        self
    }

    /// Whether `ip` lies in a trusted network. The family is settled once, before the walk
    /// over the networks, so each network costs a mask and a compare.
    #[inline]
    fn is_trusted(&self, ip: IpAddr) -> bool {
        let v4 = match ip {
            IpAddr::V4(v4) => v4,
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => v4,
                None => return self.trusted.iter().any(|n| n.contains_v6(v6)),
            },
        };
        self.trusted.iter().any(|n| n.contains_v4(v4))
    }

    /// The client address for a request from `peer` carrying `req`'s forwarding headers.
    fn client<B>(&self, peer: IpAddr, req: &Request<B>) -> IpAddr {
        if !self.is_trusted(peer) {
            return peer;
        }
        let mut nearest = peer;
        let (name, forwarded) = match self.header {
            ForwardedHeader::XForwardedFor => (&X_FORWARDED_FOR, false),
            ForwardedHeader::Forwarded => (&FORWARDED, true),
        };
        // Header lines in order, hops within a line left to right: walk both from the right.
        for line in req.headers().get_all(name).iter().rev() {
            let Ok(line) = line.to_str() else {
                return nearest;
            };
            for hop in hops_from_right(line) {
                let ip = if forwarded {
                    forwarded_for(hop)
                } else {
                    // `to_str` let only visible ASCII and tabs through, so the only whitespace
                    // `trim` could remove is the spaces and tabs `trim_ascii` removes.
                    parse_node(hop.trim_ascii())
                };
                match ip {
                    Some(ip) if self.is_trusted(ip) => nearest = ip,
                    Some(ip) => return ip,
                    None => return nearest,
                }
            }
        }
        nearest
    }
}

impl<B> KeyExtractor<B> for TrustedProxy {
    type Key = IpAddr;
    fn extract(&self, req: &Request<B>) -> Option<IpAddr> {
        let peer = peer_addr(req)?.ip().to_canonical();
        Some(self.grouping.key(self.client(peer, req)))
    }
}

/// The comma-separated elements of one header line, last first: `line.rsplit(',')`, in a
/// byte loop (the general pattern search costs more than the short hops it would skip).
fn hops_from_right(line: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(line);
    core::iter::from_fn(move || {
        let s = rest?;
        match s.bytes().rposition(|b| b == b',') {
            // ',' is ASCII: both sides of it are on character boundaries.
            Some(i) => {
                rest = Some(&s[..i]);
                Some(&s[i + 1..])
            }
            None => {
                rest = None;
                Some(s)
            }
        }
    })
}

/// The `for=` node of one `Forwarded` element (`for=1.2.3.4;proto=https`).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("for") {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        parse_node(strip_obfuscated_port(value))
    })
}

/// RFC 7239 §6.3: a node's port may be obfuscated (`192.0.2.43:_p1`, `"[2001:db8::1]:_x"`);
/// the address is what counts, so the port is dropped.
fn strip_obfuscated_port(node: &str) -> &str {
    match node.rsplit_once(':') {
        Some((addr, port))
            if port.starts_with('_')
                && port[1..]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
                && (addr.ends_with(']') || !addr.contains(':')) =>
        {
            addr.strip_prefix('[')
                .and_then(|a| a.strip_suffix(']'))
                .unwrap_or(addr)
        }
        _ => node,
    }
}

/// An address with an optional port: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]:80`.
fn parse_node(node: &str) -> Option<IpAddr> {
    if let Some(ip) = parse_ipv4(node.as_bytes()) {
        return Some(IpAddr::V4(ip));
    }
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(rest) = node.strip_prefix('[') {
        let (ip, _) = rest.split_once(']')?;
        return ip.parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
    }
    let (ip, port) = node.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    ip.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// A dotted-quad IPv4 address, read exactly as `Ipv4Addr::from_str` reads one: four decimal
/// octets separated by dots, each of one to three digits, at most 255 and without a leading
/// zero (`01`), nothing before or after. `None` for anything else, which the caller then gives
/// to the standard parser: this reads the common hop of a forwarding header in one pass over
/// its bytes, without the standard parser's IPv4-then-IPv6 attempts.
#[inline]
fn parse_ipv4(s: &[u8]) -> Option<std::net::Ipv4Addr> {
    if !(7..=15).contains(&s.len()) {
        return None; // "0.0.0.0" to "255.255.255.255"
    }
    let mut addr = 0u32;
    let (mut octet, mut digits, mut dots) = (0u32, 0usize, 0u32);
    let mut i = 0;
    loop {
        let b = s.get(i).copied();
        if let Some(d @ b'0'..=b'9') = b {
            // Wrapping: a run of more than three digits is refused below whatever its value.
            octet = octet.wrapping_mul(10).wrapping_add(u32::from(d - b'0'));
            digits += 1;
            i += 1;
            continue;
        }
        // The end of an octet: one to three digits, at most 255, and no leading zero (two
        // digits below 10 or three below 100 start with a `0`).
        const LEAST: [u32; 4] = [0, 0, 10, 100];
        if digits == 0 || digits > 3 || octet > 255 || octet < LEAST[digits] {
            return None;
        }
        addr = addr << 8 | octet;
        match b {
            None if dots == 3 => return Some(std::net::Ipv4Addr::from(addr)),
            Some(b'.') if dots < 3 => {
                (octet, digits, dots) = (0, 0, dots + 1);
                i += 1;
            }
            _ => return None,
        }
    }
}

/// The client address a trusted reverse proxy (nginx's `real_ip`, many load balancers) puts
/// in `X-Real-IP`: read only from a peer inside the trusted networks, else the peer's own
/// address is the key. A trusted peer's request without the header (or with a value that is
/// not an address) is keyed by the peer; one with the header twice is refused
/// ([`KeyError::Ambiguous`]). Grouped by [`Grouping`] like [`PeerIp`].
///
/// Trust your proxies' own addresses (`10.0.0.7/32`), not the networks they sit in: any host
/// of a trusted network can write any `X-Real-IP` it likes.
///
/// ```
/// use tollgate_tower::{KeyExtractor, PeerAddr, RealIp};
/// let real = RealIp::new(["10.0.0.7/32".parse()?]);
/// let mut req = http::Request::builder().header("x-real-ip", "203.0.113.9").body(()).unwrap();
/// req.extensions_mut().insert(PeerAddr("10.0.0.7:4000".parse().unwrap()));
/// assert_eq!(real.extract(&req).unwrap().to_string(), "203.0.113.9");
/// req.extensions_mut().insert(PeerAddr("198.51.100.1:4000".parse().unwrap()));
/// assert_eq!(real.extract(&req).unwrap().to_string(), "198.51.100.1"); // not a trusted peer
/// # Ok::<(), tollgate_tower::NetError>(())
/// ```
#[derive(Clone, Debug)]
pub struct RealIp {
    proxies: TrustedProxy,
}

static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

impl RealIp {
    /// Trusts `X-Real-IP` from peers inside `networks`.
    ///
    /// ```
    /// let r = tollgate_tower::RealIp::new(["127.0.0.1".parse()?]);
    /// # Ok::<(), tollgate_tower::NetError>(())
    /// ```
    pub fn new(networks: impl IntoIterator<Item = IpNet>) -> Self {
        RealIp {
            proxies: TrustedProxy::new(networks),
        }
    }

    /// Groups client addresses by `grouping` (default: IPv4 /32, IPv6 /64).
    ///
    /// ```
    /// use tollgate_tower::{Grouping, RealIp};
    /// let r = RealIp::new([]).grouping(Grouping::default().try_ipv6_prefix(56)?);
    /// # Ok::<(), tollgate_tower::NetError>(())
    /// ```
    pub fn grouping(mut self, grouping: Grouping) -> Self {
        self.proxies.grouping = grouping;
        self
    }
}

impl<B> KeyExtractor<B> for RealIp {
    type Key = IpAddr;
    fn extract(&self, req: &Request<B>) -> Option<IpAddr> {
        self.extract_key(req).ok()
    }
    fn extract_key(&self, req: &Request<B>) -> Result<IpAddr, KeyError> {
        let peer = peer_addr(req).ok_or(KeyError::Missing)?.ip().to_canonical();
        if !self.proxies.is_trusted(peer) {
            return Ok(self.proxies.grouping.key(peer));
        }
        let client = match single_value(req, &X_REAL_IP) {
            Ok(v) => v
                .to_str()
                .ok()
                .and_then(|v| parse_node(v.trim_ascii()))
                .unwrap_or(peer),
            Err(KeyError::Missing) => peer,
            Err(e) => return Err(e),
        };
        Ok(self.proxies.grouping.key(client))
    }
}

/// The value of one request header (an API key, a tenant id), as bytes. A request without the
/// header has no key ([`KeyError::Missing`]); one with it twice is refused
/// ([`KeyError::Ambiguous`]: an upstream reading the first value and a limit counting another
/// would let a client rotate the second one around its limit).
///
/// ```
/// use tollgate_tower::{HeaderKey, KeyExtractor};
/// let k = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
/// let twice = http::Request::builder()
///     .header("x-api-key", "a")
///     .header("x-api-key", "b")
///     .body(())
///     .unwrap();
/// assert_eq!(k.extract(&twice), None);
/// ```
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: HeaderName,
}

impl HeaderKey {
    /// Keys requests by the value of `name`.
    ///
    /// ```
    /// let k = tollgate_tower::HeaderKey::new(http::header::AUTHORIZATION);
    /// ```
    pub fn new(name: HeaderName) -> Self {
        HeaderKey { name }
    }
}

impl<B> KeyExtractor<B> for HeaderKey {
    type Key = Box<[u8]>;
    fn extract(&self, req: &Request<B>) -> Option<Box<[u8]>> {
        self.extract_key(req).ok()
    }
    fn extract_key(&self, req: &Request<B>) -> Result<Box<[u8]>, KeyError> {
        single_value(req, &self.name).map(|v| v.as_bytes().into())
    }
}

/// The one value of header `name`: missing without it, ambiguous with two or more.
fn single_value<'r, B>(
    req: &'r Request<B>,
    name: &HeaderName,
) -> Result<&'r http::HeaderValue, KeyError> {
    let mut values = req.headers().get_all(name).iter();
    let value = values.next().ok_or(KeyError::Missing)?;
    // Copied by the callers, not shared: a shared value would keep the whole read buffer
    // alive in the map.
    match values.next() {
        None => Ok(value),
        Some(_) => Err(KeyError::Ambiguous),
    }
}

/// The route axum matched (`MatchedPath`, e.g. `/users/{id}`): one key per route, whatever
/// the path's parameters. Outside a router (or for a path no route matched) there is no key.
///
/// ```
/// use tollgate_tower::{KeyExtractor, RouteKey};
/// let mut req = http::Request::new(());
/// assert_eq!(RouteKey.extract(&req), None);
/// ```
#[cfg(feature = "axum")]
#[derive(Clone, Copy, Debug, Default)]
pub struct RouteKey;

#[cfg(feature = "axum")]
impl<B> KeyExtractor<B> for RouteKey {
    type Key = Box<str>;
    fn is_shared(&self) -> bool {
        true
    }
    fn extract(&self, req: &Request<B>) -> Option<Box<str>> {
        req.extensions()
            .get::<axum::extract::MatchedPath>()
            .map(|p| p.as_str().into())
    }
}

/// A closure as an extractor (see [`key_fn`]).
#[derive(Clone, Copy, Debug)]
pub struct FnKey<F>(F);

/// Any closure `Fn(&Request<B>) -> Option<K>` as a [`KeyExtractor`].
///
/// ```
/// use tollgate_tower::{key_fn, KeyExtractor};
/// let by_tenant = key_fn(|req: &http::Request<()>| {
///     req.uri().path().split('/').nth(1).map(str::to_owned)
/// });
/// let req = http::Request::builder().uri("/acme/items").body(()).unwrap();
/// assert_eq!(by_tenant.extract(&req).as_deref(), Some("acme"));
/// ```
pub fn key_fn<F>(f: F) -> FnKey<F> {
    FnKey(f)
}

impl<B, K, F> KeyExtractor<B> for FnKey<F>
where
    F: Fn(&Request<B>) -> Option<K> + Clone + Send + Sync + 'static,
    K: Hash + Eq + Clone + Send + Sync + 'static,
{
    type Key = K;
    #[inline]
    fn extract(&self, req: &Request<B>) -> Option<K> {
        (self.0)(req)
    }
}

impl<B, X, Y> KeyExtractor<B> for (X, Y)
where
    X: KeyExtractor<B>,
    Y: KeyExtractor<B>,
{
    type Key = (X::Key, Y::Key);
    #[inline]
    fn extract(&self, req: &Request<B>) -> Option<Self::Key> {
        Some((self.0.extract(req)?, self.1.extract(req)?))
    }
    #[inline]
    fn extract_key(&self, req: &Request<B>) -> Result<Self::Key, KeyError> {
        let (a, b) = (self.0.extract_key(req), self.1.extract_key(req));
        match (a, b) {
            (Ok(a), Ok(b)) => Ok((a, b)),
            (Err(KeyError::Ambiguous), _) | (_, Err(KeyError::Ambiguous)) => {
                Err(KeyError::Ambiguous)
            }
            _ => Err(KeyError::Missing),
        }
    }
    /// Shared only when both halves are.
    fn is_shared(&self) -> bool {
        self.0.is_shared() && self.1.is_shared()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(peer: &str, header: &str, values: &[&str]) -> Request<()> {
        let mut b = Request::builder();
        for v in values {
            b = b.header(header, *v);
        }
        let mut r = b.body(()).unwrap();
        r.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
        r
    }

    fn proxies() -> TrustedProxy {
        TrustedProxy::new(["10.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()])
    }

    /// Each case: a request from `peer` carrying one `header` line per value, and the key `x`
    /// makes of it.
    fn assert_keys(x: &TrustedProxy, header: &str, cases: &[(&str, &[&str], &str)]) {
        for &(peer, values, key) in cases {
            let got = x.extract(&req(peer, header, values)).unwrap().to_string();
            assert_eq!(got, key, "{header}: {values:?} from {peer}");
        }
    }

    /// A peer inside [`proxies`]' networks.
    const PROXY: &str = "10.0.0.1:1";

    #[test]
    fn x_forwarded_for_rightmost_untrusted_hop() {
        let cases: &[(&str, &[&str], &str)] = &[
            // An untrusted peer's header is ignored.
            ("198.51.100.7:1", &["1.1.1.1"], "198.51.100.7"),
            // The rightmost untrusted hop, across lines, with or without a port.
            (
                PROXY,
                &["9.9.9.9, 203.0.113.5", "10.2.2.2 , [fd00::3]:8080"],
                "203.0.113.5",
            ),
            (PROXY, &["203.0.113.5:4444"], "203.0.113.5"),
            // Garbage, or only trusted hops: the nearest proxy.
            (PROXY, &["1.1.1.1, bogus, 10.3.3.3"], "10.3.3.3"),
            (PROXY, &["10.4.4.4, 10.3.3.3"], "10.4.4.4"),
            (PROXY, &[], "10.0.0.1"),
            // An IPv4-mapped peer is the IPv4 address, and so is an IPv4-mapped hop.
            ("[::ffff:10.0.0.1]:1", &["::ffff:192.0.2.1"], "192.0.2.1"),
        ];
        assert_keys(&proxies(), "x-forwarded-for", cases);
    }

    #[test]
    fn forwarded_header_nodes() {
        let x = proxies().header(ForwardedHeader::Forwarded);
        let cases: &[(&str, &[&str], &str)] = &[
            (
                PROXY,
                &["for=6.6.6.6, For=\"[2001:db8:cafe::17]:4711\";proto=https, for=10.9.9.9"],
                "2001:db8:cafe::",
            ),
            (
                PROXY,
                &["for=\"192.0.2.43:_p1\", for=10.9.9.9"],
                "192.0.2.43",
            ),
            (PROXY, &["for=\"[2001:db8::9]:_x.y-z\""], "2001:db8::"),
            (PROXY, &["for=unknown;by=10.0.0.1"], "10.0.0.1"),
        ];
        assert_keys(&x, "forwarded", cases);
        // X-Forwarded-For is not read when Forwarded is configured.
        assert_keys(&x, "x-forwarded-for", &[(PROXY, &["7.7.7.7"], "10.0.0.1")]);
    }

    /// The fast IPv4 reader accepts exactly what the standard parser accepts as IPv4, with
    /// the same value: the edge cases by hand, then strings of digits and dots up to 16 bytes
    /// from a fixed pseudo-random sequence (most of them near-addresses).
    #[test]
    fn ipv4_fast_path_agrees_with_std() {
        let check = |s: &str| {
            let std = s.parse::<std::net::Ipv4Addr>().ok();
            assert_eq!(parse_ipv4(s.as_bytes()), std, "{s:?}");
        };
        for s in [
            "0.0.0.0",
            "255.255.255.255",
            "256.0.0.0",
            "1.2.3.04",
            "01.2.3.4",
            "00.0.0.0",
            "0.00.0.0",
            "1.2.3",
            "1.2.3.4.",
            ".1.2.3.4",
            "1..2.3",
            "1.2.3.4 ",
            " 1.2.3.4",
            "1.2.3.-4",
            "1234.1.1.1",
            "1.2.3.4:80",
            "+1.2.3.4",
            "1.2.3.\u{663}",
            "9.99.199.250",
        ] {
            check(s);
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 17) as usize;
            let s: String = (0..len)
                .map(|i| match (x >> (i * 3 + 5)) as usize % 13 {
                    0..=2 => '.',
                    d => char::from(b'0' + (d - 3) as u8),
                })
                .collect();
            check(&s);
        }
    }

    #[test]
    fn hops_split_as_rsplit_does() {
        for line in [
            "",
            ",",
            "a",
            "a,b",
            "a,,b,",
            " a , b ",
            ",a",
            "1.1.1.1, 2.2.2.2",
        ] {
            let ours: Vec<&str> = hops_from_right(line).collect();
            let std: Vec<&str> = line.rsplit(',').collect();
            assert_eq!(ours, std, "{line:?}");
        }
    }

    #[test]
    fn pair_needs_both_keys() {
        let x = (
            PeerIp::default(),
            HeaderKey::new(HeaderName::from_static("x-k")),
        );
        let r = req("192.0.2.1:1", "x-k", &["v"]);
        assert_eq!(
            x.extract(&r),
            Some(("192.0.2.1".parse().unwrap(), b"v"[..].into()))
        );
        assert_eq!(x.extract(&req("192.0.2.1:1", "x-other", &["v"])), None);
    }
}
