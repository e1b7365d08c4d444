//! A compressed response that would inflate past the response cap fails
//! the request, not the exec. bashkit 0.20.2's `curl --compressed` inflates
//! the body after the transport returns and, past the cap, returns an
//! error from the builtin, which ends the whole exec (`if ! curl ...`
//! never runs). The transport inflates it first, counting only, and turns
//! a bomb (or a body that does not inflate) into a failed request: curl
//! exits non-zero with a message on stderr, the script goes on.

use std::io::{self, Read};

use bashkit::{HttpResponse, HttpTransportError};
use flate2::read::{DeflateDecoder, GzDecoder};

/// The `Accept-Encoding` value curl's `--compressed` adds (after the
/// script's own headers): the one sign in the request that curl will
/// inflate the answer.
const CURL_COMPRESSED: &str = "gzip, deflate";

/// Why `response`, asked for by `curl --compressed`, cannot be inflated
/// within `limit` bytes the way curl inflates it; `None` when it can, or
/// when curl will not inflate it.
pub fn refusal(
    request_headers: &[(String, String)],
    response: &HttpResponse,
    limit: usize,
) -> Option<HttpTransportError> {
    let asked = request_headers.iter().any(|(name, value)| {
        name.eq_ignore_ascii_case("accept-encoding") && value == CURL_COMPRESSED
    });
    // Exactly the values curl's own decoder acts on.
    let encoding = response
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-encoding"))
        .map(|(_, value)| value.as_str());
    let body = response.body.as_slice();
    let inflated = match (asked, encoding) {
        (true, Some("gzip")) => inflated_size(GzDecoder::new(body), limit),
        (true, Some("deflate")) => inflated_size(DeflateDecoder::new(body), limit),
        _ => return None,
    };
    match inflated {
        Ok(size) if size <= limit => None,
        Ok(_) => Some(HttpTransportError::TooLarge(format!(
            "decompressed response exceeded {limit} bytes limit"
        ))),
        Err(e) => Some(HttpTransportError::Transport(format!(
            "{} decompression failed: {e}",
            encoding.unwrap_or_default()
        ))),
    }
}

/// How many bytes `decoder` yields, reading at most `limit + 1`.
fn inflated_size(decoder: impl Read, limit: usize) -> io::Result<usize> {
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let size = io::copy(&mut decoder.take(cap), &mut io::sink())?;
    Ok(usize::try_from(size).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{write::GzEncoder, Compression};
    use std::io::Write;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn response(body: Vec<u8>) -> HttpResponse {
        HttpResponse {
            status: 200,
            headers: vec![("Content-Encoding".into(), "gzip".into())],
            body,
        }
    }

    #[test]
    fn a_bomb_is_refused_only_when_curl_would_inflate_it() {
        let asked = [("Accept-Encoding".to_string(), "gzip, deflate".to_string())];
        let bomb = response(gzip(&vec![0; 2_000]));
        assert!(matches!(
            refusal(&asked, &bomb, 1_000),
            Some(HttpTransportError::TooLarge(_))
        ));
        assert!(refusal(&asked, &bomb, 2_000).is_none());
        assert!(refusal(&[], &bomb, 1_000).is_none());
        let by_hand = [("Accept-Encoding".to_string(), "gzip".to_string())];
        assert!(refusal(&by_hand, &bomb, 1_000).is_none());
        assert!(matches!(
            refusal(&asked, &response(b"not gzip".to_vec()), 1_000),
            Some(HttpTransportError::Transport(_))
        ));
    }
}
