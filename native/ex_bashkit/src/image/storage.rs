//! Where an image's canonical tar (and so every file's content) lives: in
//! this process's memory, or, in a worker, mapped read-only from the file
//! the VM wrote once for every worker (`ExBashkit.Image.Mapped`), so that
//! all session processes over one image share its pages.

use std::ops::Deref;

/// The bytes of a canonical tar.
pub enum Storage {
    Owned(Vec<u8>),
    Mapped(Mapping),
}

impl Deref for Storage {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Storage::Owned(bytes) => bytes,
            Storage::Mapped(mapping) => mapping.bytes(),
        }
    }
}

/// A whole file mapped read-only and private: its pages are the page
/// cache's, shared with every process that maps the same file.
pub struct Mapping {
    address: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and lives until drop; `&[u8]` views of
// it may be shared across threads as any immutable byte slice.
unsafe impl Send for Mapping {}
// SAFETY: as above: nothing writes through the mapping.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map the file at `path` whole.
    pub fn open(path: &str) -> Result<Self, String> {
        let file = std::fs::File::open(path).map_err(|e| format!("opening {path}: {e}"))?;
        let len = file
            .metadata()
            .map_err(|e| format!("reading {path}: {e}"))?
            .len() as usize;
        if len == 0 {
            return Err(format!("{path} is empty"));
        }
        // SAFETY: a fresh read-only private mapping of an open file, checked
        // below; the descriptor may close once it is made.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        if address == libc::MAP_FAILED {
            return Err(format!(
                "mapping {path}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Self { address, len })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `address` maps `len` readable bytes until `drop`.
        unsafe { std::slice::from_raw_parts(self.address.cast::<u8>(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once.
        unsafe {
            libc::munmap(self.address, self.len);
        }
    }
}
