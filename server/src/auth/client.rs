//! Who is on the other end of a browser or script request: the client's address and whether it
//! reached SubLane over HTTPS, read from the TCP peer and, only when that peer is a configured
//! trusted proxy, from its `X-Forwarded-For` / `X-Forwarded-Proto` (or `Forwarded`) headers.
//!
//! A client can write any forwarding header; believing them from anyone would let a brute-forcer
//! pick a fresh address per guess, so headers count only from `SUBLANE_TRUSTED_PROXIES`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::{
    extract::{ConnectInfo, Request, State},
    http::HeaderMap,
    middleware::Next,
    response::Response,
};

use crate::{app_state::AppState, config::Config};

/// The TCP peer of a connection, as the listener saw it (axum `ConnectInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// The client of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientInfo {
    /// The client's address: the peer, or the nearest untrusted hop a trusted proxy reports.
    pub ip: IpAddr,
    /// The browser reached SubLane over HTTPS (its cookies must be `Secure`).
    pub https: bool,
}

impl ClientInfo {
    /// For requests that arrive without a peer (in-process tests of handlers).
    pub const UNKNOWN: ClientInfo = ClientInfo { ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED), https: false };

    pub fn of(peer: Option<SocketAddr>, headers: &HeaderMap, config: &Config) -> ClientInfo {
        let peer_ip = peer.map_or(ClientInfo::UNKNOWN.ip, |p| p.ip());
        let trusted = |ip: &IpAddr| config.trusted_proxies.iter().any(|n| n.contains(ip));
        let https_configured = config.https_public_url();
        if !trusted(&peer_ip) {
            return ClientInfo { ip: peer_ip, https: https_configured };
        }
        // The rightmost hop that is not one of our proxies is the client as far as we can tell.
        let mut hops: Vec<IpAddr> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|hop| hop.trim().parse().ok())
            .collect();
        if hops.is_empty() {
            hops = forwarded_for(headers);
        }
        let ip = hops.iter().rev().find(|ip| !trusted(ip)).or(hops.first()).copied().unwrap_or(peer_ip);
        ClientInfo { ip, https: https_configured || forwarded_https(headers) }
    }
}

/// The `for=` addresses of `Forwarded` (RFC 7239), in order: `for=192.0.2.1`,
/// `for="[2001:db8::1]:4711"`; obfuscated or unknown identifiers are skipped.
fn forwarded_for(headers: &HeaderMap) -> Vec<IpAddr> {
    headers
        .get_all("forwarded")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|hop| {
            hop.split(';').find_map(|pair| {
                let (k, v) = pair.trim().split_once('=')?;
                if !k.trim().eq_ignore_ascii_case("for") {
                    return None;
                }
                let v = v.trim().trim_matches('"');
                let host = match v.strip_prefix('[') {
                    Some(rest) => rest.split(']').next()?,
                    None => v.split(':').next().filter(|_| v.matches(':').count() <= 1).unwrap_or(v),
                };
                host.parse().ok()
            })
        })
        .collect()
}

/// `X-Forwarded-Proto: https` or `Forwarded: proto=https` (the first hop's value).
fn forwarded_https(headers: &HeaderMap) -> bool {
    let first = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(',').next().unwrap_or("").trim().to_owned())
    };
    if let Some(proto) = first("x-forwarded-proto") {
        return proto.eq_ignore_ascii_case("https");
    }
    first("forwarded").is_some_and(|hop| {
        hop.split(';').any(|pair| {
            pair.trim().split_once('=').is_some_and(|(k, v)| {
                k.trim().eq_ignore_ascii_case("proto")
                    && v.trim().trim_matches('"').eq_ignore_ascii_case("https")
            })
        })
    })
}

/// Puts the request's [`ClientInfo`] into its extensions for handlers and server functions.
pub async fn attach(State(s): State<AppState>, mut req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<ConnectInfo<PeerAddr>>().map(|c| c.0.0);
    let info = ClientInfo::of(peer, req.headers(), &s.config);
    req.extensions_mut().insert(info);
    next.run(req).await
}

/// The [`ClientInfo`] [`attach`] left on a request.
pub fn from_extensions(ext: &http::Extensions) -> ClientInfo {
    ext.get::<ClientInfo>().copied().unwrap_or(ClientInfo::UNKNOWN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::headers;

    fn config(trusted: &str, public: Option<&str>) -> Config {
        let mut vars = vec![("SUBLANE_TRUSTED_PROXIES", trusted.to_owned())];
        if let Some(p) = public {
            vars.push(("SUBLANE_PUBLIC_URL", p.to_owned()));
        }
        let cli = <crate::config::Cli as clap::Parser>::try_parse_from(["sublane"]).unwrap();
        Config::load(cli, |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap()
    }

    fn peer(ip: &str) -> Option<SocketAddr> {
        Some(SocketAddr::new(ip.parse().unwrap(), 50_000))
    }

    #[test]
    fn forwarding_headers_count_only_from_trusted_proxies() {
        let c = config("10.0.0.0/8", None);
        let h = headers(&[("x-forwarded-for", "203.0.113.9"), ("x-forwarded-proto", "https")]);
        let direct = ClientInfo::of(peer("198.51.100.7"), &h, &c);
        assert_eq!(direct, ClientInfo { ip: "198.51.100.7".parse().unwrap(), https: false });
        let proxied = ClientInfo::of(peer("10.1.2.3"), &h, &c);
        assert_eq!(proxied, ClientInfo { ip: "203.0.113.9".parse().unwrap(), https: true });
    }

    #[test]
    fn the_client_is_the_rightmost_untrusted_hop() {
        let c = config("10.0.0.0/8", None);
        // a client-forged first entry, then the real client, then our own second proxy
        let h = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.9, 10.0.0.2")]);
        assert_eq!(ClientInfo::of(peer("10.0.0.1"), &h, &c).ip, "203.0.113.9".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn forwarded_for_names_the_client_when_x_forwarded_for_is_absent() {
        let c = config("10.0.0.0/8", None);
        let h = headers(&[("forwarded", "for=\"[2001:db8::7]:4711\";proto=https, for=10.0.0.2")]);
        assert_eq!(ClientInfo::of(peer("10.0.0.1"), &h, &c).ip, "2001:db8::7".parse::<IpAddr>().unwrap());
        let h = headers(&[("forwarded", "for=203.0.113.9:1234")]);
        assert_eq!(ClientInfo::of(peer("10.0.0.1"), &h, &c).ip, "203.0.113.9".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn https_from_forwarded_or_the_public_url() {
        let c = config("127.0.0.1", None);
        let h = headers(&[("forwarded", "for=203.0.113.9;proto=https;host=gw.example")]);
        assert!(ClientInfo::of(peer("127.0.0.1"), &h, &c).https);
        let h = headers(&[("x-forwarded-proto", "http")]);
        assert!(!ClientInfo::of(peer("127.0.0.1"), &h, &c).https);
        let c = config("", Some("https://gw.example"));
        assert!(ClientInfo::of(peer("198.51.100.7"), &HeaderMap::new(), &c).https);
    }
}
