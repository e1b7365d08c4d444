//! File-change tracking for `exec/3`'s `track_changes: true`: which files an
//! exec created, modified and deleted.
//!
//! How: list the session's filesystem (path, size, mtime of every file)
//! before and after the script and compare. Cost: one directory read per
//! directory, twice per exec, no file contents read: O(files) in time and
//! memory, about a microsecond per file in memory. Only tracked execs pay.
//! Covered: the in-memory filesystem and host mounts; skipped: the synthetic
//! `/proc`, `/dev`, `/sys` and `virtual_fs` mounts (listing those would call
//! the backend). A rewrite with identical content counts as modified (its
//! mtime moved), as with any mtime-based tool. Bounded: both listings stop
//! at the exec's deadline (or a cancel), and the change set then says it is
//! incomplete, so a large host mount cannot stretch an exec past its
//! timeout.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use bashkit::{FileSystem, FileType};

/// Listings stop after this many entries; a tracked exec on a larger
/// filesystem reports what it saw (and says so).
pub const MAX_SCAN_ENTRIES: usize = 200_000;

const SYNTHETIC: [&str; 3] = ["/proc", "/dev", "/sys"];

/// Every file: path -> (size, mtime).
#[derive(Debug, Default)]
pub struct Listing {
    files: HashMap<String, (u64, SystemTime)>,
    complete: bool,
}

/// What changed between two listings, each list sorted.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub created: Vec<String>,
    pub modified: Vec<String>,
    pub deleted: Vec<String>,
    /// False when a listing was cut: it hit `MAX_SCAN_ENTRIES`, or the
    /// exec's deadline (or a cancel) came while it ran.
    pub complete: bool,
}

/// List every file of `fs`, skipping `skip` (mount points) and the
/// synthetic directories. `stop` is asked before each directory: once it
/// says so (the exec's deadline passed, or it was cancelled), the listing
/// ends there, marked incomplete.
pub async fn scan(
    fs: &Arc<dyn FileSystem>,
    skip: &[String],
    stop: &(dyn Fn() -> bool + Sync),
) -> Listing {
    let mut listing = Listing {
        files: HashMap::new(),
        complete: true,
    };
    let mut pending = vec![PathBuf::from("/")];
    let mut seen = 0usize;
    while let Some(dir) = pending.pop() {
        if stop() {
            listing.complete = false;
            return listing;
        }
        let Ok(entries) = fs.read_dir(&dir).await else {
            continue;
        };
        for entry in entries {
            seen += 1;
            if seen > MAX_SCAN_ENTRIES {
                listing.complete = false;
                return listing;
            }
            let path = dir.join(&entry.name);
            let text = path.to_string_lossy().into_owned();
            if SYNTHETIC.contains(&text.as_str()) || skip.iter().any(|s| s == &text) {
                continue;
            }
            match entry.metadata.file_type {
                FileType::Directory => pending.push(path),
                FileType::File | FileType::Symlink | FileType::Fifo => {
                    listing
                        .files
                        .insert(text, (entry.metadata.size, entry.metadata.modified));
                }
            }
        }
    }
    listing
}

/// Compare two listings.
pub fn diff(before: &Listing, after: &Listing) -> Changes {
    let mut changes = Changes {
        complete: before.complete && after.complete,
        ..Changes::default()
    };
    for (path, meta) in &after.files {
        match before.files.get(path) {
            None => changes.created.push(path.clone()),
            Some(old) if old != meta => changes.modified.push(path.clone()),
            Some(_) => {}
        }
    }
    for path in before.files.keys() {
        if !after.files.contains_key(path) {
            changes.deleted.push(path.clone());
        }
    }
    changes.created.sort_unstable();
    changes.modified.sort_unstable();
    changes.deleted.sort_unstable();
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::time::Duration;

    fn listing(files: &[(&str, u64, u64)]) -> Listing {
        Listing {
            files: files
                .iter()
                .map(|(p, size, t)| {
                    (
                        p.to_string(),
                        (*size, SystemTime::UNIX_EPOCH + Duration::from_secs(*t)),
                    )
                })
                .collect(),
            complete: true,
        }
    }

    #[test]
    fn diff_sorts_created_modified_deleted() {
        let before = listing(&[("/a", 1, 1), ("/b", 1, 1), ("/c", 1, 1)]);
        let after = listing(&[("/a", 1, 1), ("/b", 2, 1), ("/d", 1, 1), ("/c0", 0, 0)]);
        let changes = diff(&before, &after);
        assert_eq!(changes.created, vec!["/c0", "/d"]);
        assert_eq!(changes.modified, vec!["/b"]);
        assert_eq!(changes.deleted, vec!["/c"]);
        assert!(changes.complete);
    }

    #[test]
    fn scan_sees_files_and_skips_mounts() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let bash = bashkit::Bash::builder().build();
        let fs = bash.fs();
        rt.block_on(async {
            fs.mkdir(Path::new("/data/sub"), true).await.unwrap();
            fs.write_file(Path::new("/data/sub/f"), b"x").await.unwrap();
            fs.mkdir(Path::new("/skipme"), true).await.unwrap();
            fs.write_file(Path::new("/skipme/g"), b"y").await.unwrap();
            let first = scan(&fs, &["/skipme".to_string()], &|| false).await;
            assert!(first.files.contains_key("/data/sub/f"));
            assert!(!first.files.keys().any(|k| k.starts_with("/skipme")));
            assert!(!first.files.keys().any(|k| k.starts_with("/proc")));
            // Nothing happened in between: nothing changed.
            let second = scan(&fs, &["/skipme".to_string()], &|| false).await;
            // A scan told to stop lists nothing and says it is incomplete.
            let cut = scan(&fs, &[], &|| true).await;
            assert!(!cut.complete && cut.files.is_empty());
            assert_eq!(
                diff(&first, &second),
                Changes {
                    complete: true,
                    ..Changes::default()
                }
            );
        });
    }
}
