//! Host directory mounts (`:mounts`, `:allowed_mount_paths`).
//!
//! bashkit's builder can mount host directories itself, but a mount it
//! refuses (sensitive path, missing directory, outside the allowlist) is only
//! printed to stderr and skipped, so a session could start without a mount
//! its owner asked for; it also prints a warning for every writable mount.
//! So the gate runs here and fails loudly, using bashkit's own denylist
//! (`is_sensitive_mount_path`) on the canonical host path, exactly as the
//! builder would. A mount that passes is bashkit's `RealFs` attached with
//! `Bash::mount`: all path containment inside the mount (canonicalization,
//! `..`, symlinks, writes through links) is bashkit's, not ours.
//!
//! One guard is ours (`RegularFilesOnly`): `RealFs` reads a FIFO or a device
//! node like a file, so a FIFO someone left in a mounted directory blocks a
//! read forever (a script times out but leaves an interpreter thread stuck in
//! `read(2)`; `read_file/2` never returns) and a device such as `/dev/zero`
//! would be read until memory runs out. Such entries are refused.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bashkit::{
    Bash, DirEntry, FileSystem, FsBackend, FsLimits, FsUsage, Metadata, PosixFs, RealFs, RealFsMode,
};

use crate::options::MountSpec;

/// One `:allowed_mount_paths` entry: as given, and canonical when it exists.
struct AllowedPath {
    given: String,
    canonical: Option<PathBuf>,
}

/// Validate every mount, then attach them all to `bash`. The first mount that
/// fails the gate is an error naming the mount and the reason.
pub async fn apply(
    bash: &Bash,
    mounts: &[MountSpec],
    allowed: Option<&[String]>,
) -> Result<(), String> {
    if mounts.is_empty() {
        return Ok(());
    }
    let allowlist = allowed.map(|paths| {
        paths
            .iter()
            .map(|given| AllowedPath {
                given: given.clone(),
                // An entry that does not exist covers nothing that exists:
                // dropping it fails closed.
                canonical: std::fs::canonicalize(given).ok(),
            })
            .collect::<Vec<_>>()
    });
    // Check every mount before attaching any, so a refused one leaves no
    // half-configured interpreter behind (it is dropped anyway).
    let checked = mounts
        .iter()
        .map(|spec| {
            gate(spec, allowlist.as_deref())
                .map(|canonical| (spec, canonical))
                .map_err(|reason| describe(spec, &reason))
        })
        .collect::<Result<Vec<_>, String>>()?;
    for (spec, canonical) in checked {
        let mode = if spec.writable {
            RealFsMode::ReadWrite
        } else {
            RealFsMode::ReadOnly
        };
        let backend = RealFs::open(&canonical, mode)
            .await
            .map_err(|e| describe(spec, &format!("cannot open host directory: {e}")))?;
        let backend = RegularFilesOnly {
            root: canonical,
            inner: backend,
        };
        let fs: Arc<dyn FileSystem> = Arc::new(PosixFs::new(backend));
        bash.mount(&spec.vfs_path, fs)
            .map_err(|e| describe(spec, &format!("cannot mount: {e}")))?;
    }
    Ok(())
}

fn describe(spec: &MountSpec, reason: &str) -> String {
    let mode = if spec.writable {
        ":read_write"
    } else {
        ":read_only"
    };
    format!(
        "mount {{{:?}, {:?}, {mode}}}: {reason}",
        spec.vfs_path, spec.host_path
    )
}

/// The canonical host directory `spec` may mount, or why it may not.
fn gate(spec: &MountSpec, allowlist: Option<&[AllowedPath]>) -> Result<PathBuf, String> {
    let given = Path::new(&spec.host_path);
    let canonical = std::fs::canonicalize(given).map_err(|e| match e.kind() {
        ErrorKind::NotFound => "host path does not exist".to_string(),
        _ => format!("cannot resolve host path: {e}"),
    })?;
    // Name the real target when a symlink (or `..`) led somewhere else: that
    // is what the gate judged.
    let resolved = if canonical.as_path() == given {
        String::new()
    } else {
        format!(" (resolves to {})", canonical.display())
    };
    if !canonical.is_dir() {
        return Err(format!("host path is not a directory{resolved}"));
    }
    match allowlist {
        // The allowlist, once set, is the only gate (as in bashkit's builder):
        // the denylist below no longer applies.
        Some(entries) => {
            let covered = entries.iter().any(|entry| {
                entry
                    .canonical
                    .as_deref()
                    .is_some_and(|allowed| canonical.starts_with(allowed))
            });
            if !covered {
                let listed: Vec<&str> = entries.iter().map(|e| e.given.as_str()).collect();
                return Err(format!(
                    "host path{resolved} is not under any :allowed_mount_paths entry {listed:?}"
                ));
            }
        }
        None => {
            if bashkit::is_sensitive_mount_path(&canonical) {
                return Err(format!(
                    "refused: host path{resolved} is a sensitive host location (the filesystem \
                     root, /etc, /proc, /sys, /dev, /home, /root, /Users, /private, /run, or a \
                     path through .ssh, .aws, ...); to mount it deliberately, list a covering \
                     prefix in :allowed_mount_paths"
                ));
            }
        }
    }
    Ok(canonical)
}

/// `RealFs`, refusing to read (or append to, or copy from) anything on the
/// host that is not a regular file, a directory or a symlink.
struct RegularFilesOnly {
    /// The canonical host directory `inner` is rooted at.
    root: PathBuf,
    inner: RealFs,
}

impl RegularFilesOnly {
    /// Fails for a FIFO, socket or device at `path`. Containment is
    /// `RealFs`'s: a special file is only reported for a path its `stat`
    /// accepts, so nothing is revealed about the host outside the mount (an
    /// escaping path is left for `RealFs` to refuse). The common case costs
    /// one `lstat`.
    #[cfg(unix)]
    async fn check_readable(&self, path: &Path) -> bashkit::Result<()> {
        use std::os::unix::fs::FileTypeExt;
        let normalized = bashkit::normalize_path(path);
        let relative = normalized.strip_prefix("/").unwrap_or(&normalized);
        let Ok(meta) = tokio::fs::symlink_metadata(self.root.join(relative)).await else {
            return Ok(());
        };
        let kind = meta.file_type();
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else {
            return Ok(());
        };
        if self.inner.stat(path).await.is_err() {
            return Ok(());
        }
        // `Unsupported`: bashkit does not retry it as a possible symlink.
        Err(std::io::Error::new(
            ErrorKind::Unsupported,
            format!("{what} on a host mount cannot be read"),
        )
        .into())
    }

    #[cfg(not(unix))]
    async fn check_readable(&self, _path: &Path) -> bashkit::Result<()> {
        Ok(())
    }
}

#[async_trait]
impl FsBackend for RegularFilesOnly {
    async fn read(&self, path: &Path) -> bashkit::Result<Vec<u8>> {
        self.check_readable(path).await?;
        self.inner.read(path).await
    }

    async fn write(&self, path: &Path, content: &[u8]) -> bashkit::Result<()> {
        // Replaces the entry (staged file + rename): never opens a FIFO.
        self.inner.write(path, content).await
    }

    async fn append(&self, path: &Path, content: &[u8]) -> bashkit::Result<()> {
        // Appending reads the existing entry first.
        self.check_readable(path).await?;
        self.inner.append(path, content).await
    }

    async fn mkdir(&self, path: &Path, recursive: bool) -> bashkit::Result<()> {
        self.inner.mkdir(path, recursive).await
    }

    async fn remove(&self, path: &Path, recursive: bool) -> bashkit::Result<()> {
        self.inner.remove(path, recursive).await
    }

    async fn stat(&self, path: &Path) -> bashkit::Result<Metadata> {
        self.inner.stat(path).await
    }

    async fn read_dir(&self, path: &Path) -> bashkit::Result<Vec<DirEntry>> {
        self.inner.read_dir(path).await
    }

    async fn exists(&self, path: &Path) -> bashkit::Result<bool> {
        self.inner.exists(path).await
    }

    async fn rename(&self, from: &Path, to: &Path) -> bashkit::Result<()> {
        self.inner.rename(from, to).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> bashkit::Result<()> {
        self.check_readable(from).await?;
        self.inner.copy(from, to).await
    }

    async fn symlink(&self, target: &Path, link: &Path) -> bashkit::Result<()> {
        self.inner.symlink(target, link).await
    }

    async fn read_link(&self, path: &Path) -> bashkit::Result<PathBuf> {
        self.inner.read_link(path).await
    }

    async fn chmod(&self, path: &Path, mode: u32) -> bashkit::Result<()> {
        self.inner.chmod(path, mode).await
    }

    async fn set_modified_time(
        &self,
        path: &Path,
        time: bashkit::time::SystemTime,
    ) -> bashkit::Result<()> {
        self.inner.set_modified_time(path, time).await
    }

    fn usage(&self) -> FsUsage {
        self.inner.usage()
    }

    fn limits(&self) -> FsLimits {
        self.inner.limits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(host: &str) -> MountSpec {
        MountSpec {
            vfs_path: "/data".into(),
            host_path: host.into(),
            writable: false,
        }
    }

    #[test]
    fn sensitive_paths_are_refused_without_an_allowlist() {
        for host in ["/", "/etc", "/proc", "/dev"] {
            let err = gate(&spec(host), None).unwrap_err();
            assert!(err.contains("sensitive"), "{host}: {err}");
        }
    }

    #[test]
    fn the_allowlist_replaces_the_denylist() {
        let etc = [AllowedPath {
            given: "/etc".into(),
            canonical: std::fs::canonicalize("/etc").ok(),
        }];
        assert!(gate(&spec("/etc"), Some(&etc)).is_ok());
        let err = gate(&spec("/proc"), Some(&etc)).unwrap_err();
        assert!(err.contains("not under any :allowed_mount_paths"), "{err}");
        // An empty allowlist admits nothing.
        assert!(gate(&spec("/etc"), Some(&[])).is_err());
    }

    #[test]
    fn missing_and_non_directory_paths_are_named() {
        let err = gate(&spec("/nonexistent-ex-bashkit-path"), None).unwrap_err();
        assert_eq!(err, "host path does not exist");
        let err = gate(&spec("/proc/self/status"), None).unwrap_err();
        assert!(err.contains("not a directory"), "{err}");
    }
}
