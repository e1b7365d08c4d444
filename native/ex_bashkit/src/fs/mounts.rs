//! Host directory mounts (`:mounts`, `:allowed_mount_paths`).
//!
//! bashkit's builder can mount host directories itself, but a mount it
//! refuses (sensitive path, missing directory, outside the allowlist) is only
//! printed to stderr and skipped, so a session could start without a mount
//! its owner asked for; it also prints a warning for every writable mount.
//! So the gate runs here and fails loudly, using bashkit's own denylist
//! (`is_sensitive_mount_path`) on the canonical host path, exactly as the
//! builder would. A mount that passes is our `HostFs` (`fs/host.rs`: every
//! host access resolved beneath a handle on the mount root, never following
//! a host symlink) under bashkit's `PosixFs`, attached with `Bash::mount`.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bashkit::{Bash, FileSystem, PosixFs, VfsEntry, VfsEntryKind, VfsSnapshot};

use crate::config::{MountSpec, SessionConfig};
use crate::fs::host::HostFs;

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
    // Host files are read whole into memory, so reading one is bounded by
    // the size a file of the sandbox may have.
    let max_read = bash.fs().limits().max_file_size;
    for (spec, canonical) in checked {
        let backend = HostFs::open(
            &canonical,
            Path::new(&spec.vfs_path),
            spec.writable,
            max_read,
        )
        .map_err(|e| describe(spec, &format!("cannot open host directory: {e}")))?;
        let fs: Arc<dyn FileSystem> = Arc::new(PosixFs::new(backend));
        bash.mount(&spec.vfs_path, fs)
            .map_err(|e| describe(spec, &format!("cannot mount: {e}")))?;
    }
    Ok(())
}

/// Whether the sandbox path `path` lies in one of `config`'s host mounts
/// (the mount point included).
pub fn is_under(config: &SessionConfig, path: &str) -> bool {
    let path = bashkit::normalize_path(Path::new(path));
    config
        .mounts
        .iter()
        .any(|mount| path.starts_with(bashkit::normalize_path(Path::new(&mount.vfs_path))))
}

/// Remove from the in-memory filesystem under `fs` every entry at or below
/// a mount point of `config` (host mounts and `:virtual_fs` alike), where
/// the mount hides it; a directory at a mount point itself stays. Returns
/// how many entries went.
pub fn drop_hidden_entries(
    fs: &Arc<dyn FileSystem>,
    config: &SessionConfig,
) -> bashkit::Result<usize> {
    let points: Vec<PathBuf> = config
        .mounts
        .iter()
        .map(|m| m.vfs_path.as_str())
        .chain(config.virtual_fs.iter().map(String::as_str))
        .map(|p| bashkit::normalize_path(Path::new(p)))
        .collect();
    if points.is_empty() {
        return Ok(0);
    }
    let Some(snapshot) = fs.vfs_snapshot() else {
        return Ok(0);
    };
    let hidden = |entry: &VfsEntry| {
        points.iter().any(|point| {
            entry.path.starts_with(point)
                && (entry.path != *point || !matches!(entry.kind, VfsEntryKind::Directory))
        })
    };
    let total = snapshot.entries().len();
    let kept: Vec<VfsEntry> = snapshot
        .entries()
        .iter()
        .filter(|entry| !hidden(entry))
        .cloned()
        .collect();
    let dropped = total - kept.len();
    if dropped > 0 {
        fs.vfs_restore(&VfsSnapshot::from_entries(kept))?;
    }
    Ok(dropped)
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

/// Refused in either mode, on top of bashkit's denylist: `/var` holds
/// databases (`/var/lib/postgresql`, `/var/lib/mysql`), container state
/// (`/var/lib/docker`), mail and spools, logs that carry tokens, and
/// run-time secrets (`/var/run` is `/run`). See SECURITY.md for the verdict
/// on every top-level directory.
const SECRET_ROOTS: &[&str] = &["/var"];

/// Refused `:read_write` (readable `:read_only`: public files): a script
/// writing here would replace programs and libraries the host runs.
const SYSTEM_SOFTWARE: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/snap",
];

fn under_any(path: &Path, roots: &[&str]) -> bool {
    roots.iter().any(|root| path.starts_with(root))
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
            if bashkit::is_sensitive_mount_path(&canonical) || under_any(&canonical, SECRET_ROOTS) {
                return Err(format!(
                    "refused: host path{resolved} is a sensitive host location (the filesystem \
                     root, /etc, /proc, /sys, /dev, /home, /root, /Users, /private, /run, /var, \
                     /boot, or a path through .ssh, .aws, ...); to mount it deliberately, list a \
                     covering prefix in :allowed_mount_paths"
                ));
            }
            if spec.writable && under_any(&canonical, SYSTEM_SOFTWARE) {
                return Err(format!(
                    "refused: host path{resolved} holds the host's system software (/usr, /bin, \
                     /sbin, /lib*, /opt, /snap): it may be mounted :read_only, not :read_write; \
                     to mount it writable deliberately, list a covering prefix in \
                     :allowed_mount_paths"
                ));
            }
        }
    }
    Ok(canonical)
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
    fn var_is_refused_and_system_software_only_read_only() {
        if Path::new("/var").is_dir() {
            let err = gate(&spec("/var"), None).unwrap_err();
            assert!(err.contains("sensitive"), "{err}");
        }
        if Path::new("/usr").is_dir() {
            assert!(gate(&spec("/usr"), None).is_ok());
            let mut writable = spec("/usr");
            writable.writable = true;
            let err = gate(&writable, None).unwrap_err();
            assert!(err.contains(":read_only, not :read_write"), "{err}");
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
