//! Network access (`:allow_net`, `:block_private_ips`): bashkit's
//! `NetworkAllowlist` is the policy (default deny, scheme + host + port +
//! path-prefix matching, private/reserved IPs refused before and at connect
//! time, no automatic redirects), enforced in `AbsentTransport`, the
//! transport every request of a session goes through, so that a refusal
//! reads as absence (the 404 principle; see `AbsentTransport`).
//!
//! Patterns are checked here with the same URL parser bashkit matches with
//! (`url`): a pattern it cannot parse would otherwise be kept and silently
//! never match; a pattern with a dot segment is refused (the parser
//! resolves `/v1/..` to `/`, which would admit the whole host).
//!
//! bashkit matches a request's path prefix on the *encoded* path, while the
//! server decodes it: `/allowed/..%2fsecret.txt` passes the prefix check and
//! the server serves `/secret.txt`. So every request (each redirect hop
//! included) is also checked by `ambiguous_path`, which turns away paths
//! with encoded separators or dots, where the encoded and the decoded path
//! could name different resources.
//!
//! The transport also sends the URL's host as `Host` (a script's own
//! `Host` header is dropped: behind a shared ingress it would reach a
//! virtual host the allowlist never named), classifies IPv6 literals and
//! resolved addresses by the IPv4 address they embed (`address`), and
//! fails a compressed response that inflates past the cap as a request
//! (`compressed`).

mod address;
mod compressed;

use std::time::Duration;

use bashkit::{
    HttpClient, HttpResponse, HttpTransport, HttpTransportError, HttpTransportRequest,
    NetworkAllowlist,
};
use url::Url;

use crate::config::SessionConfig;

/// The policy a session's requests are checked against: the user's
/// patterns (none: every URL refused; `:all`: any URL), private addresses
/// refused unless `block_private_ips: false`.
pub fn policy(config: &SessionConfig) -> Result<NetworkAllowlist, String> {
    let allowlist = if config.allow_all_net {
        NetworkAllowlist::allow_all()
    } else {
        let mut allowlist = NetworkAllowlist::new();
        for pattern in config.allow_net.iter().flatten() {
            check_pattern(pattern)?;
            allowlist = allowlist.allow(pattern.as_str());
        }
        allowlist
    };
    Ok(allowlist.block_private_ips(config.block_private_ips))
}

/// The allowlist bashkit's own client gets: everything, no private-address
/// precheck. Both are enforced one step later by `AbsentTransport`, which
/// answers a refusal as absence (the 404 principle) where bashkit's client
/// would say "access denied". (Without any allowlist bashkit's `http` would
/// print "network access not configured" and exit 0.)
pub fn allowlist(config: &SessionConfig) -> Result<NetworkAllowlist, String> {
    policy(config)?;
    Ok(NetworkAllowlist::allow_all().block_private_ips(false))
}

/// The transport every request of a session goes through (behind
/// `policy/egress.rs`, which records and may deny what passes it).
pub fn transport(config: &SessionConfig) -> Result<AbsentTransport, String> {
    // Patterns only: the private-address rule is the inner client's, applied
    // to resolved addresses too.
    let policy = policy(config)?.block_private_ips(false);
    let hosts = if config.allow_all_net {
        Vec::new()
    } else {
        config
            .allow_net
            .iter()
            .flatten()
            .filter_map(|p| Url::parse(p).ok().map(|u| origin(&u)))
            .collect()
    };
    let inner =
        HttpClient::new(NetworkAllowlist::allow_all().block_private_ips(config.block_private_ips));
    Ok(AbsentTransport {
        policy,
        hosts,
        inner,
        block_private_ips: config.block_private_ips,
    })
}

/// The 404 principle for the network: what the policy refuses reads as
/// absent, never as refused. A host no `:allow_net` pattern names, and one
/// that is (or resolves to) a private address while those are blocked,
/// fail like a host that does not resolve ("Could not resolve host: NAME",
/// the same message and exit status as a name DNS does not know); a path
/// outside the allowed prefixes of an allowed host, or one whose decoded
/// form is ambiguous (see `ambiguous_path`), gets a `404 Not Found`.
/// Allowed requests go to a bashkit client that applies the private-address
/// rules again at connect time (its resolver filters them).
pub struct AbsentTransport {
    /// The `:allow_net` patterns (private addresses not checked here).
    policy: NetworkAllowlist,
    /// `scheme://host:port` of every pattern (empty with `:all`).
    hosts: Vec<String>,
    inner: HttpClient,
    /// Whether private addresses are refused (`address::is_private`).
    block_private_ips: bool,
}

impl AbsentTransport {
    /// Whether `url`'s host is, or resolves to, a private address by
    /// `address::is_private` (which sees the IPv4 inside every
    /// IPv4-embedding IPv6 form). bashkit's own check still runs after.
    async fn private_host(&self, url: &Url, timeout: Duration) -> bool {
        if !self.block_private_ips {
            return false;
        }
        match url.host() {
            Some(url::Host::Ipv4(v4)) => address::is_private(v4.into()),
            Some(url::Host::Ipv6(v6)) => address::is_private(v6.into()),
            Some(url::Host::Domain(name)) => {
                let port = url.port_or_known_default().unwrap_or(80);
                // Within the request's own deadline; a name that does not
                // resolve (in time) fails in the client.
                let lookup = tokio::net::lookup_host((name, port));
                match tokio::time::timeout(timeout, lookup).await {
                    Ok(Ok(mut addrs)) => addrs.any(|a| address::is_private(a.ip())),
                    _ => false,
                }
            }
            None => false,
        }
    }
}

/// The request's headers without `Host`: the client sends the URL's.
fn without_host(headers: &[(String, String)]) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| !name.trim().eq_ignore_ascii_case("host"))
        .cloned()
        .collect()
}

fn origin(url: &Url) -> String {
    format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.port_or_known_default().unwrap_or(0)
    )
}

fn unresolvable(url: &str) -> HttpTransportError {
    let host = Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_default();
    HttpTransportError::Transport(format!("Could not resolve host: {host}"))
}

fn not_found() -> HttpResponse {
    HttpResponse {
        status: 404,
        headers: vec![("content-type".into(), "text/plain".into())],
        body: b"Not Found\n".to_vec(),
    }
}

fn whole_seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl AbsentTransport {
    /// Whether `url` passes `:allow_net`: a pattern admits it and its path
    /// is unambiguous (private addresses are refused at connect time).
    pub fn admits(&self, url: &str) -> bool {
        self.policy.is_allowed(url) && (self.hosts.is_empty() || ambiguous_path(url).is_none())
    }

    /// What a refused `url` reads as: a `404` on a host `:allow_net` names
    /// (or admits, under `:all`), an unresolvable host otherwise.
    pub fn absent(&self, url: &str) -> Result<HttpResponse, HttpTransportError> {
        let host_allowed = self.policy.is_allowed(url)
            || Url::parse(url).is_ok_and(|parsed| self.hosts.contains(&origin(&parsed)));
        match host_allowed {
            true => Ok(not_found()),
            false => Err(unresolvable(url)),
        }
    }
}

#[async_trait::async_trait]
impl HttpTransport for AbsentTransport {
    async fn execute(
        &self,
        request: HttpTransportRequest,
    ) -> Result<HttpResponse, HttpTransportError> {
        let url = request.url.as_str();
        let Ok(parsed) = Url::parse(url) else {
            return Err(HttpTransportError::Transport(format!("invalid URL: {url}")));
        };
        if !self.admits(url) {
            return self.absent(url);
        }
        if self.private_host(&parsed, request.timeout).await {
            return Err(unresolvable(url));
        }
        let headers = without_host(&request.headers);
        let answer = self
            .inner
            .request_with_timeouts(
                request.method,
                url,
                request.body.as_deref(),
                &headers,
                Some(whole_seconds(request.timeout)),
                request.connect_timeout.map(whole_seconds),
            )
            .await;
        let error = match answer {
            Ok(response) => {
                return match compressed::refusal(&headers, &response, request.max_response_bytes) {
                    Some(refusal) => Err(refusal),
                    None => Ok(response),
                }
            }
            Err(error) => error,
        };
        let message = match &error {
            bashkit::Error::Network(m) => m.clone(),
            other => other.to_string(),
        };
        let lower = message.to_ascii_lowercase();
        // A name DNS does not know fails the same way as a refused host
        // (bashkit words it "request failed: error sending request").
        let unknown_name = match parsed.host() {
            Some(url::Host::Domain(name)) => {
                let port = parsed.port_or_known_default().unwrap_or(80);
                tokio::net::lookup_host((name, port)).await.is_err()
            }
            _ => false,
        };
        Err(
            if lower.contains("access denied")
                || lower.contains("dns")
                || lower.contains("resolve")
                || unknown_name
            {
                unresolvable(url)
            } else if lower.contains("timed out") || lower.contains("timeout") {
                HttpTransportError::Timeout
            } else if let Some(rest) = message.strip_prefix("response too large: ") {
                HttpTransportError::TooLarge(rest.to_string())
            } else {
                HttpTransportError::Transport(message)
            },
        )
    }
}

/// How many rounds of percent-decoding are checked (a server, or a proxy
/// in front of it, may decode more than once).
const DECODE_ROUNDS: usize = 3;

/// Why `url`'s path could name something else once the server decodes it,
/// or `None` when it cannot. bashkit matched the encoded path against the
/// allowlist prefix; what the server sees is the decoded one, so the decoded
/// path (each round of decoding) must have no `.` or `..` segment, with `/`
/// and `\` both taken as separators, and no NUL. An encoded separator that
/// forms no dot segment (a URL passed as one path segment) is harmless: the
/// decoded path stays under the same prefix.
fn ambiguous_path(url: &str) -> Option<String> {
    // Unparsable URLs are bashkit's to refuse.
    let parsed = Url::parse(url).ok()?;
    let mut path = parsed.path().as_bytes().to_vec();
    for _ in 0..DECODE_ROUNDS {
        if path.contains(&0) {
            return Some(format!(
                "request path has an encoded NUL: {}",
                parsed.path()
            ));
        }
        if path
            .split(|&b| b == b'/' || b == b'\\')
            .any(|segment| segment == b"." || segment == b"..")
        {
            return Some(format!(
                "request path has a dot segment once decoded: {}",
                parsed.path()
            ));
        }
        let decoded = percent_decode(&path);
        if decoded == path {
            break;
        }
        path = decoded;
    }
    None
}

/// `%XX` sequences decoded; anything else (a lone or malformed `%`) kept.
fn percent_decode(input: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        if input[i] == b'%' && i + 2 < input.len() {
            if let (Some(high), Some(low)) = (hex(input[i + 1]), hex(input[i + 2])) {
                out.push(high << 4 | low);
                i += 3;
                continue;
            }
        }
        out.push(input[i]);
        i += 1;
    }
    out
}

/// Whether the path part of `pattern` (as written, before the URL parser
/// resolves it) has a `.` or `..` segment, spelled plainly or encoded, or
/// an encoded separator.
fn pattern_path_is_ambiguous(pattern: &str) -> bool {
    let after_scheme = pattern.split_once("://").map_or(pattern, |(_, rest)| rest);
    let Some(slash) = after_scheme.find(['/', '\\']) else {
        return false;
    };
    let path = after_scheme[slash..].to_ascii_lowercase();
    if path.contains("%2f") || path.contains("%5c") || path.contains('\\') {
        return true;
    }
    path.split('/')
        .map(|segment| segment.replace("%2e", "."))
        .any(|segment| segment == "." || segment == "..")
}

fn check_pattern(pattern: &str) -> Result<(), String> {
    check_prefix(":allow_net pattern", pattern)
}

/// Whether `pattern` is a URL prefix the allowlist can enforce; `what`
/// names it in the refusal (`:git` remotes are checked the same way).
pub fn check_prefix(what: &str, pattern: &str) -> Result<(), String> {
    let refuse = |why: &str| {
        Err(format!(
            "{what} {pattern:?} is not a URL prefix like \"https://api.example.com/v1\": {why}"
        ))
    };
    let url = match Url::parse(pattern) {
        Ok(url) => url,
        Err(e) => return refuse(&e.to_string()),
    };
    if !matches!(url.scheme(), "http" | "https") {
        return refuse("the scheme must be http or https");
    }
    if url.host_str().is_none_or(str::is_empty) {
        return refuse("it has no host");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return refuse("it carries credentials");
    }
    if url.query().is_some() || url.fragment().is_some() {
        return refuse("it has a query or a fragment");
    }
    if pattern_path_is_ambiguous(pattern) {
        return refuse(
            "its path has a . or .. segment or an encoded separator (the parser would resolve \
             it, e.g. \"/v1/..\" to the whole host)",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_patterns_pass() {
        for p in [
            "https://api.example.com",
            "https://api.example.com/v1",
            "http://127.0.0.1:8080/x/",
            "http://[::1]:9000",
        ] {
            assert!(check_pattern(p).is_ok(), "{p}");
        }
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for p in [
            "api.example.com",
            "ftp://example.com",
            "https://user:pw@example.com",
            "https://example.com/?q=1",
            "https://example.com/#f",
            "http://example.com:99999",
            "http://",
        ] {
            assert!(check_pattern(p).is_err(), "{p}");
        }
    }

    #[test]
    fn dot_segments_in_patterns_are_refused() {
        for p in [
            "http://127.0.0.1:18081/allowed/..",
            "http://h/allowed/../x",
            "http://h/a/./b",
            "http://h/a/%2e%2E/b",
            "http://h/a/%2E",
            "http://h/a%2fb",
            "http://h/a\\..\\b",
        ] {
            let err = check_pattern(p).unwrap_err();
            assert!(err.contains("segment"), "{p}: {err}");
        }
        assert!(check_pattern("http://h/a..b/c.d").is_ok());
    }

    #[test]
    fn ambiguous_request_paths_are_refused() {
        for url in [
            "http://127.0.0.1:18081/allowed/..%2fsecret.txt",
            "http://127.0.0.1:18081/allowed/%2E%2E%2Fsecret.txt",
            "http://h/allowed/..%5csecret",
            "http://h/allowed/x%00",
            "http://h/allowed/x%2F..%2F..%2Fsecret",
            "http://h/allowed/%252e%252e%252fsecret",
        ] {
            assert!(ambiguous_path(url).is_some(), "{url}");
        }
        for url in [
            "http://h/allowed/x",
            "http://h/allowed/a..b?q=%2f",
            "http://h/",
            // A URL passed as one segment: encoded slashes, no dot segment.
            "http://h/go/http%3A%2F%2F127.0.0.1%3A8080%2Fsecret",
            "http://h/allowed/a%2Fb",
        ] {
            assert_eq!(ambiguous_path(url), None, "{url}");
        }
    }

    #[test]
    fn no_allow_net_is_an_empty_policy_that_refuses_everything() {
        let list = policy(&SessionConfig::default()).unwrap();
        assert!(!list.is_allowed("https://example.com/"));
        assert!(list.is_blocking_private_ips());
    }
}
