//! IP networks (CIDR) for the trusted-proxy list, and prefix grouping of client addresses.

use core::fmt;
use core::str::FromStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IP network: an address and a prefix length, as in `10.0.0.0/8` or `2001:db8::/32`.
///
/// The host bits are cleared on construction, so `10.1.2.3/8` is the network `10.0.0.0/8`.
/// IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`) are matched as the IPv4 address they carry.
///
/// ```
/// use tollgate_tower::IpNet;
/// let net: IpNet = "10.0.0.0/8".parse()?;
/// assert!(net.contains("10.200.0.1".parse().unwrap()));
/// assert!(!net.contains("11.0.0.1".parse().unwrap()));
/// let host: IpNet = "::1".parse()?; // a bare address is a /32 or /128
/// assert_eq!(host.prefix_len(), 128);
/// # Ok::<(), tollgate_tower::NetError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

/// Why a network could not be made or parsed.
///
/// ```
/// use tollgate_tower::{IpNet, NetError};
/// assert_eq!("10.0.0.0/33".parse::<IpNet>(), Err(NetError::PrefixTooLong { prefix: 33, max: 32 }));
/// assert_eq!("ten/8".parse::<IpNet>(), Err(NetError::BadAddress));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetError {
    /// The address part is not an IPv4 or IPv6 address.
    BadAddress,
    /// The prefix length is not a decimal number.
    BadPrefix,
    /// The prefix is longer than the address (32 bits for IPv4, 128 for IPv6).
    PrefixTooLong {
        /// The prefix length given.
        prefix: u32,
        /// The address family's length in bits.
        max: u8,
    },
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetError::BadAddress => f.write_str("not an IPv4 or IPv6 address"),
            NetError::BadPrefix => f.write_str("the prefix length after '/' is not a number"),
            NetError::PrefixTooLong { prefix, max } => {
                write!(
                    f,
                    "prefix /{prefix} is longer than the address's {max} bits"
                )
            }
        }
    }
}

impl std::error::Error for NetError {}

impl IpNet {
    /// The network of `addr`'s first `prefix` bits.
    ///
    /// # Errors
    /// [`NetError::PrefixTooLong`] when `prefix` exceeds 32 (IPv4) or 128 (IPv6).
    ///
    /// ```
    /// use tollgate_tower::IpNet;
    /// let net = IpNet::try_new("192.168.7.9".parse().unwrap(), 16)?;
    /// assert_eq!(net.to_string(), "192.168.0.0/16");
    /// # Ok::<(), tollgate_tower::NetError>(())
    /// ```
    pub fn try_new(addr: IpAddr, prefix: u8) -> Result<IpNet, NetError> {
        let addr = addr.to_canonical();
        let prefix = check_prefix(prefix, bits(addr))?;
        Ok(IpNet {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// The network's first address.
    ///
    /// ```
    /// let net: tollgate_tower::IpNet = "10.9.8.7/24".parse().unwrap();
    /// assert_eq!(net.addr().to_string(), "10.9.8.0");
    /// ```
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in bits.
    ///
    /// ```
    /// let net: tollgate_tower::IpNet = "fd00::/8".parse().unwrap();
    /// assert_eq!(net.prefix_len(), 8);
    /// ```
    pub fn prefix_len(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` lies inside the network (an IPv4-mapped IPv6 address counts as IPv4).
    ///
    /// ```
    /// let net: tollgate_tower::IpNet = "127.0.0.0/8".parse().unwrap();
    /// assert!(net.contains("::ffff:127.0.0.1".parse().unwrap()));
    /// assert!(!net.contains("::1".parse().unwrap()));
    /// ```
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(ip) => self.contains_v4(ip),
            IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
                Some(ip) => self.contains_v4(ip),
                None => self.contains_v6(ip),
            },
        }
    }

    // `self.addr` has its host bits cleared already (every constructor masks it), so a
    // network contains an address when the address masked to the prefix equals it.

    /// [`IpNet::contains`] for an IPv4 address.
    #[inline]
    pub(crate) fn contains_v4(&self, ip: Ipv4Addr) -> bool {
        match self.addr {
            IpAddr::V4(net) => u32::from(ip) & v4_mask(self.prefix) == u32::from(net),
            IpAddr::V6(_) => false,
        }
    }

    /// [`IpNet::contains`] for an IPv6 address that is not IPv4-mapped.
    #[inline]
    pub(crate) fn contains_v6(&self, ip: Ipv6Addr) -> bool {
        match self.addr {
            IpAddr::V6(net) => u128::from(ip) & v6_mask(self.prefix) == u128::from(net),
            IpAddr::V4(_) => false,
        }
    }
}

impl FromStr for IpNet {
    type Err = NetError;

    fn from_str(s: &str) -> Result<IpNet, NetError> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| NetError::BadAddress)?;
        let max = bits(addr.to_canonical());
        let prefix = match prefix {
            None => max,
            Some(p) => {
                let p: u32 = p.parse().map_err(|_| NetError::BadPrefix)?;
                // A mapped IPv4 network is written with an IPv6 prefix (::ffff:0:0/96 + v4 bits).
                let p = if addr.is_ipv6() && max == 32 {
                    p.checked_sub(96).ok_or(NetError::PrefixTooLong {
                        prefix: p,
                        max: 128,
                    })?
                } else {
                    p
                };
                if p > u32::from(max) {
                    return Err(NetError::PrefixTooLong { prefix: p, max });
                }
                p as u8 // at most 128 by the check above
            }
        };
        IpNet::try_new(addr, prefix)
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn bits(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

/// `prefix` if it fits an address of `max` bits.
pub(crate) fn check_prefix(prefix: u8, max: u8) -> Result<u8, NetError> {
    if prefix > max {
        return Err(NetError::PrefixTooLong {
            prefix: u32::from(prefix),
            max,
        });
    }
    Ok(prefix)
}

/// The IPv4 netmask of `prefix` bits (32 and more: all ones).
#[inline]
fn v4_mask(prefix: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(prefix.min(32)))
        .unwrap_or(0)
}

/// The IPv6 netmask of `prefix` bits (128 and more: all ones).
#[inline]
fn v6_mask(prefix: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(prefix.min(128)))
        .unwrap_or(0)
}

/// `addr` with all but its first `prefix` bits cleared (`prefix` at most the family's bits).
#[inline]
pub(crate) fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & v4_mask(prefix))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & v6_mask(prefix))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn masks_each_prefix_length() {
        assert_eq!(mask(ip("255.255.255.255"), 0), ip("0.0.0.0"));
        assert_eq!(mask(ip("255.255.255.255"), 32), ip("255.255.255.255"));
        assert_eq!(mask(ip("10.1.2.3"), 12), ip("10.0.0.0"));
        assert_eq!(mask(ip("2001:db8:1:2:3:4:5:6"), 64), ip("2001:db8:1:2::"));
        assert_eq!(mask(ip("2001:db8::1"), 0), ip("::"));
        assert_eq!(mask(ip("2001:db8::1"), 128), ip("2001:db8::1"));
    }

    #[test]
    fn parses_and_rejects() {
        let n: IpNet = "2001:db8::/32".parse().unwrap();
        assert!(n.contains(ip("2001:db8:ffff::1")));
        assert!(!n.contains(ip("2001:db9::1")));
        assert!(!n.contains(ip("32.1.13.184"))); // same leading bits, other family
        assert_eq!("1.2.3.4/x".parse::<IpNet>(), Err(NetError::BadPrefix));
        assert_eq!("1.2.3.4/".parse::<IpNet>(), Err(NetError::BadPrefix));
        assert_eq!(
            "::/129".parse::<IpNet>(),
            Err(NetError::PrefixTooLong {
                prefix: 129,
                max: 128
            })
        );
        assert_eq!(
            "1.2.3.4/4294967295".parse::<IpNet>(),
            Err(NetError::PrefixTooLong {
                prefix: u32::MAX,
                max: 32
            })
        );
        let mapped: IpNet = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(mapped.to_string(), "10.0.0.0/8");
        assert!(mapped.contains(ip("10.3.3.3")));
    }
}
