//! Credentials (`:credentials`): headers added to the requests under a
//! URL prefix after the script has built them, or in place of an opaque
//! placeholder the script holds in an environment variable. The secret
//! lives only here, in the session's [`Injector`], which
//! `policy/egress.rs` runs on every request; it also redacts it from what
//! the host's `:egress` callback sees and from answers that echo it back.
//! It is never in the env, the filesystem, the shell state or anything a
//! result carries.
//!
//! The rules are bashkit's (`BashBuilder::credential` and
//! `credential_placeholder`, `bashkit/src/credential.rs`): injected headers
//! replace the script's headers of the same name; a placeholder is
//! replaced only in the credential's own headers and only when it occurs
//! once in the value (several would let a header-echoing host hand the
//! secret back in pieces). They are applied here rather than through
//! bashkit's hook, whose URL matching refuses every private address
//! whatever `:block_private_ips` says: a credential for a service on the
//! host's network would never be sent.

use std::sync::LazyLock;

use bashkit::{Bash, BashBuilder, NetworkAllowlist};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::config::SessionConfig;
use crate::map_struct;

map_struct! {
    /// One `{prefix, spec}` entry as Elixir validated it: either a bearer
    /// token or headers, and optionally the variable holding its placeholder.
    #[derive(Clone)]
    pub struct CredentialSpec {
        pub prefix: String,
        pub bearer: Option<String>,
        pub headers: Vec<(String, String)>,
        pub placeholder: Option<String>,
    }
}

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
    /// The headers it adds, with the part of each value a placeholder
    /// stands for (the token of a bearer, else the whole value).
    fn headers(&self) -> Vec<Header> {
        match &self.bearer {
            Some(token) => vec![Header {
                name: "Authorization".into(),
                value: format!("Bearer {token}"),
                secret: token.clone(),
            }],
            None => self
                .headers
                .iter()
                .map(|(name, value)| Header {
                    name: name.clone(),
                    value: value.clone(),
                    secret: value.clone(),
                })
                .collect(),
        }
    }
}

struct Header {
    name: String,
    value: String,
    secret: String,
}

struct Rule {
    /// The prefix, private addresses admitted (`:allow_net` and
    /// `:block_private_ips` have had their say when a rule is applied).
    matcher: NetworkAllowlist,
    headers: Vec<Header>,
    placeholder: Option<String>,
}

/// A session interpreter's credentials, applied to each request.
pub struct Injector {
    rules: Vec<Rule>,
    /// Every secret value, longest first (one that holds another is
    /// redacted whole).
    secrets: Vec<String>,
}

impl Injector {
    /// `headers` as they go to `url`: credentials added or placeholders
    /// replaced, rule by rule.
    pub fn apply(&self, url: &str, headers: &mut Vec<(String, String)>) {
        for rule in self.rules.iter().filter(|r| r.matcher.is_allowed(url)) {
            match &rule.placeholder {
                None => {
                    headers.retain(|(name, _)| {
                        !rule
                            .headers
                            .iter()
                            .any(|h| h.name.eq_ignore_ascii_case(name))
                    });
                    headers.extend(
                        rule.headers
                            .iter()
                            .map(|h| (h.name.clone(), h.value.clone())),
                    );
                }
                Some(placeholder) => {
                    for (name, value) in headers.iter_mut() {
                        let owned = rule
                            .headers
                            .iter()
                            .find(|h| h.name.eq_ignore_ascii_case(name));
                        if let Some(header) = owned {
                            if value.matches(placeholder.as_str()).count() == 1 {
                                *value = value.replacen(placeholder.as_str(), &header.secret, 1);
                            }
                        }
                    }
                }
            }
        }
    }

    /// The secret values, longest first; empty without credentials.
    pub fn secrets(&self) -> &[String] {
        &self.secrets
    }
}

/// This OS process's key for placeholders, from the OS generator.
static PLACEHOLDER_KEY: LazyLock<Result<[u8; 32], String>> = LazyLock::new(|| {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| format!("cannot make a placeholder: {e}"))?;
    Ok(key)
});

/// The placeholder of `spec`: `bk_placeholder_` and 128 bits in hex of an
/// HMAC, under this process's random key, of the credential. It is a
/// capability inside the sandbox (sent under the prefix, it gets the secret
/// sent), so it must not be guessable; and it is the same for the same
/// credential in this process, so that a `reset/1` or a snapshot restored
/// into a session with the same credential keeps it valid. The MAC tells
/// nothing of the secret.
fn placeholder(spec: &CredentialSpec) -> Result<String, String> {
    let key = PLACEHOLDER_KEY.as_ref().map_err(String::clone)?;
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    let fields = [&spec.prefix]
        .into_iter()
        .chain(spec.placeholder.iter())
        .chain(spec.bearer.iter())
        .chain(spec.headers.iter().flat_map(|(name, value)| [name, value]));
    for field in fields {
        mac.update(&(field.len() as u64).to_le_bytes());
        mac.update(field.as_bytes());
    }
    let digest = mac.finalize().into_bytes();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("bk_placeholder_{hex}"))
}

/// After a snapshot is restored: each placeholder variable the snapshot
/// brought holds this session's placeholder again (one from another
/// process, or another credential, would never be replaced on the wire).
pub fn keep_placeholders(bash: &mut Bash, config: &SessionConfig) -> Result<(), String> {
    if config
        .credentials
        .iter()
        .all(|spec| spec.placeholder.is_none())
    {
        return Ok(());
    }
    let mut state = bash.shell_state();
    for spec in &config.credentials {
        let Some(name) = &spec.placeholder else {
            continue;
        };
        let ours = placeholder(spec)?;
        if let Some(value) = state.env.get_mut(name) {
            *value = ours.clone();
        }
        if let Some(value) = state.variables.get_mut(name) {
            if value.starts_with("bk_placeholder_") {
                *value = ours;
            }
        }
    }
    bash.restore_shell_state(&state);
    Ok(())
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

/// `builder` with each placeholder in its variable (run after `:env` is
/// set: a placeholder takes the place of a variable of the same name), and
/// the injector its transport applies.
pub fn register(
    mut builder: BashBuilder,
    config: &SessionConfig,
) -> Result<(BashBuilder, Injector), String> {
    let mut rules = Vec::with_capacity(config.credentials.len());
    for spec in &config.credentials {
        let placeholder = match &spec.placeholder {
            Some(name) => {
                let value = placeholder(spec)?;
                builder = builder.env(name, &value);
                Some(value)
            }
            None => None,
        };
        rules.push(Rule {
            matcher: NetworkAllowlist::new()
                .allow(&spec.prefix)
                .block_private_ips(false),
            headers: spec.headers(),
            placeholder,
        });
    }
    let mut secrets: Vec<String> = rules
        .iter()
        .flat_map(|rule| &rule.headers)
        .map(|h| h.secret.clone())
        .filter(|secret| !secret.is_empty())
        .collect();
    secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    secrets.dedup();
    Ok((builder, Injector { rules, secrets }))
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

    fn injector(spec: CredentialSpec) -> Injector {
        let config = SessionConfig {
            credentials: vec![spec],
            ..SessionConfig::default()
        };
        register(bashkit::Bash::builder(), &config).unwrap().1
    }

    #[test]
    fn injection_replaces_the_scripts_header_under_the_prefix_only() {
        let injector = injector(spec("http://127.0.0.1:9/api/"));
        let mut headers = vec![("authorization".into(), "forged".into())];
        injector.apply("http://127.0.0.1:9/api/x", &mut headers);
        assert_eq!(
            headers,
            vec![("Authorization".to_string(), "Bearer tok-secret".to_string())]
        );
        let mut outside = vec![("authorization".into(), "mine".into())];
        injector.apply("http://127.0.0.1:9/other", &mut outside);
        assert_eq!(
            outside,
            vec![("authorization".to_string(), "mine".to_string())]
        );
        assert_eq!(injector.secrets(), ["tok-secret".to_string()]);
    }

    #[test]
    fn a_placeholder_is_replaced_once_in_its_own_header_and_is_stable() {
        let with_placeholder = CredentialSpec {
            placeholder: Some("KEY".into()),
            ..spec("http://h/")
        };
        let first = placeholder(&with_placeholder).unwrap();
        assert_eq!(first, placeholder(&with_placeholder).unwrap());
        assert!(first.starts_with("bk_placeholder_") && first.len() == 47);
        assert!(!first.contains("tok-secret"));
        let injector = injector(with_placeholder);
        let mut headers = vec![
            ("Authorization".into(), format!("Bearer {first}")),
            ("X-Other".into(), first.clone()),
        ];
        injector.apply("http://h/x", &mut headers);
        assert_eq!(headers[0].1, "Bearer tok-secret");
        assert_eq!(headers[1].1, first);
        // Twice in one value: a try to read the secret back in pieces.
        let mut twice = vec![("Authorization".into(), format!("{first}{first}"))];
        injector.apply("http://h/x", &mut twice);
        assert_eq!(twice[0].1, format!("{first}{first}"));
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
