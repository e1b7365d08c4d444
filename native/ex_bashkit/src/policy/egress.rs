//! What goes out, request by request: every request a script makes (each
//! redirect hop included) passes here before `policy/net.rs`'s transport
//! sends it. Here it is
//!
//! - given the session's credentials (`policy/credentials.rs`);
//! - decided: one `:allow_net` admits is put to the host's `:egress`
//!   callback (a back-call, `{:egress, method, url, headers}`, answered
//!   within `:builtin_timeout_ms`; anything but `:allow` denies), and a
//!   denied one reads as absent, as a URL outside `:allow_net` does;
//! - recorded: `method, url, status, decision, bytes` in the session's
//!   [`RequestLog`], which each exec empties into its `Result.requests`;
//! - kept clean of secrets: credential values are redacted from the headers
//!   the callback sees, and from an answer that echoes them back (a server
//!   that reflects request headers would otherwise hand them to the script).

use std::sync::Arc;

use bashkit::{HttpMethod, HttpResponse, HttpTransport, HttpTransportError, HttpTransportRequest};
use parking_lot::Mutex;

use crate::callbacks::{Answer, CallbackChannel, Request};
use crate::config::SessionConfig;
use crate::policy::credentials::Injector;
use crate::policy::net::AbsentTransport;
use crate::term::value::Value;

/// What stands in for a secret wherever one would be seen.
const REDACTED: &str = "[REDACTED]";

/// One request as `Result.requests` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    pub method: &'static str,
    pub url: String,
    /// `None` when denied or unreachable.
    pub status: Option<u16>,
    pub allowed: bool,
    /// Bytes of the answer's body the script got.
    pub bytes: u64,
}

impl RequestRecord {
    /// `%{method:, url:, status:, decision: :allow | :deny, bytes:}`.
    pub fn to_value(&self) -> Value {
        Value::map([
            ("bytes", self.bytes.into()),
            (
                "decision",
                Value::atom(if self.allowed { "allow" } else { "deny" }),
            ),
            ("method", self.method.into()),
            ("status", self.status.map(u32::from).into()),
            ("url", self.url.as_str().into()),
        ])
    }
}

/// The requests of the running exec, in the order they were made; shared
/// by a session and its interpreter's transport.
#[derive(Debug, Default)]
pub struct RequestLog(Mutex<Vec<RequestRecord>>);

impl RequestLog {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Everything recorded since the last take.
    pub fn take(&self) -> Vec<RequestRecord> {
        std::mem::take(&mut self.0.lock())
    }

    fn push(&self, record: RequestRecord) {
        self.0.lock().push(record);
    }
}

/// `records` as the list `Result.requests` holds.
pub fn records_value(records: &[RequestRecord]) -> Value {
    Value::List(records.iter().map(RequestRecord::to_value).collect())
}

/// The transport bashkit's client hands every request to.
pub fn transport(
    config: &SessionConfig,
    channel: Option<&Arc<CallbackChannel>>,
    log: &Arc<RequestLog>,
    credentials: Injector,
) -> Result<Arc<dyn HttpTransport>, String> {
    crate::policy::credentials::check(config)?;
    Ok(Arc::new(EgressTransport {
        inner: crate::policy::net::transport(config)?,
        decider: config.egress.then(|| channel.cloned()),
        credentials,
        log: Arc::clone(log),
    }))
}

struct EgressTransport {
    inner: AbsentTransport,
    /// With `:egress`: the route to the callback (`None` inside: no route,
    /// every request denied).
    decider: Option<Option<Arc<CallbackChannel>>>,
    credentials: Injector,
    log: Arc<RequestLog>,
}

/// The back-call: `{:egress, method, url, headers}`.
struct EgressRequest<'r> {
    method: &'static str,
    url: &'r str,
    headers: Vec<(String, String)>,
}

impl Request for EgressRequest<'_> {
    fn to_value(&self) -> Value {
        let headers = self
            .headers
            .iter()
            .map(|(name, value)| Value::tuple([name.as_str().into(), value.as_str().into()]))
            .collect();
        Value::tuple([
            Value::atom("egress"),
            self.method.into(),
            self.url.into(),
            Value::List(headers),
        ])
    }
}

fn method_name(method: HttpMethod) -> &'static str {
    match method {
        HttpMethod::Get => "GET",
        HttpMethod::Post => "POST",
        HttpMethod::Put => "PUT",
        HttpMethod::Delete => "DELETE",
        HttpMethod::Head => "HEAD",
        HttpMethod::Patch => "PATCH",
    }
}

impl EgressTransport {
    /// What the host's callback answers for this request.
    async fn allowed(&self, method: &'static str, request: &HttpTransportRequest) -> bool {
        let Some(decider) = &self.decider else {
            return true;
        };
        let Some(channel) = decider else {
            return false;
        };
        let headers = request
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), self.redact(value)))
            .collect();
        let asked = EgressRequest {
            method,
            url: &request.url,
            headers,
        };
        matches!(channel.call(&asked).await, Ok(Answer::Allow))
    }

    /// `value` with every credential value in it replaced.
    fn redact(&self, value: &str) -> String {
        self.credentials
            .secrets()
            .iter()
            .fold(value.to_string(), |value, secret| {
                value.replace(secret.as_str(), REDACTED)
            })
    }

    /// An answer with every credential value in its headers and body replaced.
    fn scrubbed(&self, mut response: HttpResponse) -> HttpResponse {
        for (_, value) in &mut response.headers {
            *value = self.redact(value);
        }
        for secret in self.credentials.secrets() {
            response.body = replace_bytes(&response.body, secret.as_bytes(), REDACTED.as_bytes());
        }
        response
    }
}

/// `haystack` with each occurrence of `needle` (not empty) replaced.
fn replace_bytes(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut rest = haystack;
    while let Some(at) = find(rest, needle) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(with);
        rest = &rest[at + needle.len()..];
    }
    out.extend_from_slice(rest);
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    let mut from = 0;
    while from + needle.len() <= haystack.len() {
        let at = from + haystack[from..].iter().position(|&b| b == first)?;
        if haystack.get(at..at + needle.len())? == needle {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[async_trait::async_trait]
impl HttpTransport for EgressTransport {
    async fn execute(
        &self,
        mut request: HttpTransportRequest,
    ) -> Result<HttpResponse, HttpTransportError> {
        self.credentials.apply(&request.url, &mut request.headers);
        let method = method_name(request.method);
        let mut record = RequestRecord {
            method,
            url: request.url.clone(),
            status: None,
            allowed: false,
            bytes: 0,
        };
        let admitted = self.inner.admits(&request.url);
        let answer = if admitted && self.allowed(method, &request).await {
            record.allowed = true;
            let answer = self.inner.execute(request).await;
            answer.map(|response| match self.credentials.secrets().is_empty() {
                true => response,
                false => self.scrubbed(response),
            })
        } else {
            self.inner.absent(&request.url)
        };
        if let (true, Ok(response)) = (record.allowed, &answer) {
            record.status = Some(response.status);
            record.bytes = response.body.len() as u64;
        }
        self.log.push(record);
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_replaced_everywhere() {
        let out = replace_bytes(b"a tok b tok", b"tok", b"[R]");
        assert_eq!(out, b"a [R] b [R]");
        assert_eq!(replace_bytes(b"tt", b"tok", b"x"), b"tt");
        assert_eq!(replace_bytes(b"", b"tok", b"x"), b"");
        assert_eq!(replace_bytes(b"tototok", b"tok", b"x"), b"totox");
    }

    #[test]
    fn a_record_reads_as_result_requests_lists_it() {
        let record = RequestRecord {
            method: "GET",
            url: "http://h/".into(),
            status: None,
            allowed: false,
            bytes: 0,
        };
        let value = record.to_value();
        assert_eq!(value.get("decision"), Some(&Value::atom("deny")));
        assert_eq!(value.get("status"), Some(&Value::nil()));
    }
}
