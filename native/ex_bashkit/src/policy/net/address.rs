//! Private addresses as the network reaches them: an IPv6 address that
//! carries an IPv4 one (mapped, translated, compatible, NAT64, 6to4,
//! Teredo) is as private as the address it carries. bashkit 0.20.2's
//! `is_private_ip` (not public) misses the IPv4-translated form
//! (`::ffff:0:a.b.c.d`, RFC 2765); its rules are repeated here with every
//! form classified by its embedded address. bashkit still refuses what it
//! refuses (all of Teredo, say): the two checks add up.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is private or reserved: by the IPv4 address(es) it
/// embeds when it embeds any, else by IPv6's own reserved ranges.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_private_ipv4(v4),
        IpAddr::V6(v6) => {
            let embedded = embedded_ipv4(v6);
            if !embedded.is_empty() {
                return embedded.into_iter().any(is_private_ipv4);
            }
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || s[..4] == [0x100, 0, 0, 0] // 100::/64 (discard-only)
                || (s[0] & 0xfe00) == 0xfc00 // fc00::/7 (unique local)
                || (s[0] & 0xffc0) == 0xfe80 // fe80::/10 (link-local)
                || (s[0] & 0xffc0) == 0xfec0 // fec0::/10 (site-local)
                || (s[0] & 0xff00) == 0xff00 // ff00::/8 (multicast)
        }
    }
}

/// bashkit's IPv4 rules (its `is_private_ip` is not public).
fn is_private_ipv4(v4: Ipv4Addr) -> bool {
    let o = v4.octets();
    o[0] == 0
        || v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || o[0] == 100 && (o[1] & 0xc0) == 64 // 100.64.0.0/10 (CGNAT)
        || o[0] == 192 && o[1] == 0 && o[2] == 0 // 192.0.0.0/24
        || o[0] == 198 && (o[1] & 0xfe) == 18 // 198.18.0.0/15
        || o[0] >= 224 // multicast, reserved, broadcast
}

/// The IPv4 addresses an IPv6 one forwards to, when it is one of the
/// IPv4-embedding forms (none otherwise). Teredo carries two: its
/// server's (bits 32-63) and its client's (the last 32 bits, inverted).
pub fn embedded_ipv4(v6: Ipv6Addr) -> Vec<Ipv4Addr> {
    let o = v6.octets();
    let last = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    match v6.segments() {
        // ::ffff:a.b.c.d (mapped) and ::ffff:0:a.b.c.d (translated).
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] => vec![last],
        // ::a.b.c.d (compatible; `::` and `::1` are IPv6's own).
        [0, 0, 0, 0, 0, 0, high, low] if high != 0 || low > 1 => vec![last],
        // 64:ff9b::/96 (NAT64) and 64:ff9b:1::/48 (local-use NAT64).
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] | [0x64, 0xff9b, 1, ..] => vec![last],
        // 2002:aabb:ccdd::/48 (6to4).
        [0x2002, ..] => vec![Ipv4Addr::new(o[2], o[3], o[4], o[5])],
        // 2001:0:SSSS:SSSS:flags:port:CCCC:CCCC (Teredo).
        [0x2001, 0, ..] => vec![
            Ipv4Addr::new(o[4], o[5], o[6], o[7]),
            Ipv4Addr::from(!u32::from(last)),
        ],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn private(text: &str) -> bool {
        is_private(text.parse().unwrap())
    }

    #[test]
    fn every_embedding_form_is_classified_by_its_ipv4() {
        for text in [
            "::ffff:127.0.0.1",
            "::ffff:0:127.0.0.1",
            "::ffff:0:a9fe:a9fe",
            "::127.0.0.1",
            "::10.0.0.1",
            "64:ff9b::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::10.1.2.3",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            // Teredo, client 127.0.0.1 inverted (80ff:fffe), public server.
            "2001:0:808:808:0:0:80ff:fffe",
            // Teredo with a private server.
            "2001:0:a00:1:0:0:f7f7:f7f7",
            "::1",
            "::",
            "fe80::1",
        ] {
            assert!(private(text), "{text}");
        }
    }

    #[test]
    fn public_addresses_stay_public() {
        for text in [
            "::ffff:8.8.8.8",
            "::ffff:0:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
            // Teredo: public server 8.8.8.8, client 8.8.4.4 inverted.
            "2001:0:808:808:0:0:f7f7:fbfb",
            "2606:4700::1111",
            "8.8.8.8",
        ] {
            assert!(!private(text), "{text}");
        }
    }
}
