//! The envelope of a snapshot taken over a base image.
//!
//! bashkit's snapshot of such a session holds only the session's layer (the
//! overlay's upper filesystem). Around it goes what restoring needs besides:
//! the image's id (restoring needs that image as the session's base) and
//! the image paths the session deleted (whiteouts, which bashkit's overlay
//! does not snapshot). Layout:
//!
//! ```text
//! MAGIC | u32 id_len | id | u32 count | (u32 len | path)* | u8 mac_len | mac | inner
//! ```
//!
//! With a key (keyed snapshots), `mac` is HMAC-SHA256 over everything else
//! (the header and the inner snapshot), so the image id and the deletions
//! are as tamper-proof as the inner snapshot's own HMAC makes the rest.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

const MAGIC: &[u8] = b"EXBKBASE1\n";

/// Wrap `inner`, taken over image `id` with `whiteouts` deleted.
pub fn seal(id: &str, whiteouts: &[String], inner: &[u8], key: Option<&[u8]>) -> Vec<u8> {
    let mut header = Vec::new();
    header.extend_from_slice(MAGIC);
    put(&mut header, id.as_bytes());
    header.extend_from_slice(&(whiteouts.len() as u32).to_be_bytes());
    for path in whiteouts {
        put(&mut header, path.as_bytes());
    }
    let mac = key.map(|key| mac(key, &header, inner)).unwrap_or_default();
    let mut out = header;
    out.push(mac.len() as u8);
    out.extend_from_slice(&mac);
    out.extend_from_slice(inner);
    out
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn mac(key: &[u8], header: &[u8], inner: &[u8]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(header);
    mac.update(inner);
    mac.finalize().into_bytes().to_vec()
}

/// The inner snapshot and the whiteouts to apply, checking that the
/// snapshot fits a session whose base image is `base` (or none).
pub fn open<'a>(
    data: &'a [u8],
    base: Option<&str>,
    key: Option<&[u8]>,
) -> Result<(&'a [u8], Vec<String>), String> {
    let Some(rest) = data.strip_prefix(MAGIC) else {
        return match base {
            None => Ok((data, Vec::new())),
            Some(id) => Err(format!(
                "this session has base image {id}, and the snapshot was taken by a session \
                 without a base image; restore it into a session built without :base"
            )),
        };
    };
    let bad = || "invalid snapshot: truncated base image envelope".to_string();
    let mut cursor = rest;
    let id = take(&mut cursor).ok_or_else(bad)?;
    let id = String::from_utf8(id.to_vec()).map_err(|_| bad())?;
    let count = take_u32(&mut cursor).ok_or_else(bad)?;
    let mut whiteouts = Vec::new();
    for _ in 0..count {
        let path = take(&mut cursor).ok_or_else(bad)?;
        whiteouts.push(String::from_utf8(path.to_vec()).map_err(|_| bad())?);
    }
    let header_len = data.len() - cursor.len();
    let (&mac_len, after) = cursor.split_first().ok_or_else(bad)?;
    let mac_len = mac_len as usize;
    if after.len() < mac_len {
        return Err(bad());
    }
    let (stored, inner) = after.split_at(mac_len);
    if let Some(key) = key {
        let mut check = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
        check.update(&data[..header_len]);
        check.update(inner);
        if check.verify_slice(stored).is_err() {
            return Err(
                "invalid snapshot: snapshot integrity check failed: HMAC mismatch \
                 (wrong key or tampered data)"
                    .into(),
            );
        }
    }
    match base {
        Some(own) if own == id => Ok((inner, whiteouts)),
        Some(own) => Err(format!(
            "snapshot was taken over base image {id}, and this session's base image is {own}; \
             restore it into a session built with base: that image"
        )),
        None => Err(format!(
            "snapshot was taken over base image {id}; restore it into a session built with \
             base: that image (this session has no base image)"
        )),
    }
}

fn take_u32(cursor: &mut &[u8]) -> Option<u32> {
    let (head, rest) = cursor.split_first_chunk::<4>()?;
    *cursor = rest;
    Some(u32::from_be_bytes(*head))
}

fn take<'a>(cursor: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = take_u32(cursor)? as usize;
    if cursor.len() < len {
        return None;
    }
    let (head, rest) = cursor.split_at(len);
    *cursor = rest;
    Some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_checks_the_image_and_key() {
        let sealed = seal("abc", &["/x".into()], b"inner", Some(b"k"));
        let (inner, whiteouts) = open(&sealed, Some("abc"), Some(b"k")).unwrap();
        assert_eq!(inner, b"inner");
        assert_eq!(whiteouts, vec!["/x".to_string()]);
        assert!(open(&sealed, Some("abc"), Some(b"other")).is_err());
        assert!(open(&sealed, Some("def"), Some(b"k"))
            .unwrap_err()
            .contains("abc"));
        assert!(open(&sealed, None, None)
            .unwrap_err()
            .contains("base image abc"));
        assert!(open(b"plain", Some("abc"), None).is_err());
        assert_eq!(open(b"plain", None, None).unwrap().0, b"plain");
    }
}
