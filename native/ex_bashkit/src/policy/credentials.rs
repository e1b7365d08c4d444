//! Credentials (`:credentials`): headers bashkit adds to the requests under
//! a URL prefix, after the script has built them (`BashBuilder::credential`)
//! or in place of an opaque placeholder the script holds in an environment
//! variable (`BashBuilder::credential_placeholder`). The secret lives only
//! in bashkit's `before_http` hook and in `policy/egress.rs`, which redacts
//! it from what the host's `:egress` callback sees and from answers that
//! echo it back; it is never in the env, the filesystem, the shell state
//! or anything a result carries.

use bashkit::{BashBuilder, Credential};

use crate::config::SessionConfig;
use crate::from_map;

/// One `{prefix, spec}` entry as Elixir validated it: either a bearer
/// token or headers, and optionally the variable holding its placeholder.
#[derive(Clone)]
pub struct CredentialSpec {
    pub prefix: String,
    pub bearer: Option<String>,
    pub headers: Vec<(String, String)>,
    pub placeholder: Option<String>,
}
from_map!(CredentialSpec {
    prefix,
    bearer,
    headers,
    placeholder
});

/// Never the secret: configurations are `Debug`.
impl std::fmt::Debug for CredentialSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialSpec")
            .field("prefix", &self.prefix)
            .field("placeholder", &self.placeholder)
            .finish_non_exhaustive()
    }
}

impl CredentialSpec {
    fn credential(&self) -> Credential {
        match &self.bearer {
            Some(token) => Credential::bearer(token),
            None => Credential::headers(self.headers.clone()),
        }
    }

    /// The secret values, as they go out in a header.
    fn secrets(&self) -> impl Iterator<Item = &str> {
        self.bearer
            .iter()
            .map(String::as_str)
            .chain(self.headers.iter().map(|(_, value)| value.as_str()))
    }
}

/// Every prefix is a URL prefix `:allow_net` admits (a credential for a
/// place the session cannot reach is a mistake, refused at `new/1`).
pub fn check(config: &SessionConfig) -> Result<(), String> {
    if config.credentials.is_empty() {
        return Ok(());
    }
    let network = crate::policy::net::policy(config)?.block_private_ips(false);
    for spec in &config.credentials {
        crate::policy::net::check_prefix(":credentials prefix", &spec.prefix)?;
        if !network.is_allowed(&spec.prefix) {
            return Err(format!(
                ":credentials prefix {:?} is not within :allow_net",
                spec.prefix
            ));
        }
    }
    Ok(())
}

/// `builder` with the session's credentials; run after `:env` is set, so
/// that a placeholder takes the place of a variable of the same name.
pub fn register(mut builder: BashBuilder, config: &SessionConfig) -> BashBuilder {
    for spec in &config.credentials {
        builder = match &spec.placeholder {
            Some(name) => builder.credential_placeholder(name, &spec.prefix, spec.credential()),
            None => builder.credential(&spec.prefix, spec.credential()),
        };
    }
    builder
}

/// Where credentials go and the variables holding placeholders, never the
/// secrets: `[%{prefix:, placeholder: name | nil}]` (for a model's prompt).
pub fn describe(config: &SessionConfig) -> crate::term::value::Value {
    use crate::term::value::Value;
    let entries = config.credentials.iter().map(|spec| {
        Value::map([
            ("prefix", spec.prefix.as_str().into()),
            ("placeholder", spec.placeholder.clone().into()),
        ])
    });
    Value::List(entries.collect())
}

/// The secret values of every credential (empty ones left out), longest
/// first: one that contains another is redacted whole.
pub fn secrets(config: &SessionConfig) -> Vec<String> {
    let mut secrets: Vec<String> = config
        .credentials
        .iter()
        .flat_map(CredentialSpec::secrets)
        .filter(|secret| !secret.is_empty())
        .map(str::to_string)
        .collect();
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    secrets.dedup();
    secrets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(prefix: &str) -> CredentialSpec {
        CredentialSpec {
            prefix: prefix.into(),
            bearer: Some("tok-secret".into()),
            headers: Vec::new(),
            placeholder: None,
        }
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let printed = format!("{:?}", spec("https://api.example.com/"));
        assert!(!printed.contains("tok-secret"), "{printed}");
        assert!(printed.contains("api.example.com"));
    }

    #[test]
    fn a_prefix_outside_allow_net_is_refused() {
        let mut config = SessionConfig {
            allow_net: Some(vec!["https://api.example.com/v1/".into()]),
            credentials: vec![spec("https://api.example.com/v1/")],
            ..SessionConfig::default()
        };
        assert!(check(&config).is_ok());
        config.credentials = vec![spec("https://other.example.com/")];
        let err = check(&config).unwrap_err();
        assert!(err.contains("not within :allow_net"), "{err}");
        assert!(!err.contains("tok-secret"));
        config.credentials = vec![spec("api.example.com")];
        assert!(check(&config).is_err());
    }
}
