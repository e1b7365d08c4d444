//! Network access (`:allow_net`, `:block_private_ips`) mapped onto bashkit's
//! `NetworkAllowlist`, which implements the policy: default deny, scheme +
//! host + port + path-prefix matching, private/reserved IPs refused before
//! and at connect time, no automatic redirects.
//!
//! Patterns are checked here with the same URL parser bashkit matches with
//! (`url`): a pattern it cannot parse would otherwise be kept and silently
//! never match.

use bashkit::NetworkAllowlist;
use url::Url;

use crate::options::SessionConfig;

/// The allowlist a session gets. Without `:allow_net` it is an empty one,
/// which refuses every URL: with no allowlist at all, bashkit's `http`
/// builtin prints "network access not configured" on stdout and exits 0,
/// where a script must see a failure.
pub fn allowlist(config: &SessionConfig) -> Result<NetworkAllowlist, String> {
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

fn check_pattern(pattern: &str) -> Result<(), String> {
    let refuse = |why: &str| {
        Err(format!(
            ":allow_net pattern {pattern:?} is not a URL prefix like \"https://api.example.com/v1\": {why}"
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
    fn no_allow_net_is_an_empty_allowlist_that_refuses_everything() {
        let list = allowlist(&SessionConfig::default()).unwrap();
        assert!(!list.is_allowed("https://example.com/"));
        assert!(list.is_blocking_private_ips());
    }
}
