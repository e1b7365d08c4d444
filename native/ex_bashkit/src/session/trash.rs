//! Soft delete (`soft_delete: true | [trash: path]` of `Session.new/1`):
//! what a script deletes or overwrites is moved into a trash directory
//! instead of being dropped, and `Session.undelete/2` puts it back.
//!
//! It is a filesystem wrapper, so every command gets it without knowing:
//! `rm`, `rm -r`, `rmdir`, `unlink`, `find -delete` end in `remove`; `mv`
//! onto a file in `rename`; `>` and every command that rewrites a file
//! (`sed -i`, `cp` onto a file, `tee`) in `write_file`/`copy`. The wrapper
//! sits at the bottom of the session's filesystem stack (bashkit's
//! `BashBuilder::fs`), under the root filesystem layer, the mount table
//! and the symlink layer, so it sees normalized, link-resolved paths of
//! the in-memory filesystem. Host mounts and `:virtual_fs` mounts sit
//! above it: deletes there are real (documented).
//!
//! Each trashed file or directory is *moved* (a rename, never a copy) to
//! `<trash>/<n>_<name>`, so its bytes are counted once by the filesystem
//! limits; an overwrite first moves the old file away, then writes the new
//! one. Empty files are not kept (there is nothing to lose). What is done
//! inside the trash itself is real (emptying it frees the space).
//!
//! Which original path each entry had is kept in `<trash>/.index`, one line
//! per entry (`percent-encoded name TAB percent-encoded path TAB unix
//! seconds`: a name keeps the original's base name, so both are encoded;
//! bashkit's in-memory filesystem refuses control characters in names
//! today, the index does not depend on it), inside the filesystem: snapshots, restores and `reset/1` carry it with the trash.
//! An entry moved out of the trash (`undelete/2`, or a script's own `mv`)
//! or removed from it leaves the index.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bashkit::{
    DirEntry, FileSystem, FileSystemExt, FsLimits, FsUsage, Metadata, SearchCapable, VfsSnapshot,
};

use crate::result::reason::{Failure, Reason};
use crate::term::value::{FromValue, Value};
use crate::{result::bashkit_errors, run::runtime};

/// The file that maps trash entries to their original paths.
pub const INDEX: &str = ".index";

/// A filesystem whose deletes and overwrites go to a trash directory.
pub struct SoftDeleteFs {
    inner: Arc<dyn FileSystem>,
    trash: PathBuf,
    /// Serializes moves into and out of the trash with their index update.
    lock: tokio::sync::Mutex<()>,
    next: AtomicU64,
}

/// One entry of the trash, as `Session.trash/1` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name in the trash (`<n>_<name>`).
    pub name: String,
    /// Where it was.
    pub original: String,
    /// When it was trashed (unix seconds).
    pub deleted_at: u64,
}

impl SoftDeleteFs {
    pub fn new(inner: Arc<dyn FileSystem>, trash: &str) -> Self {
        Self {
            inner,
            trash: PathBuf::from(trash),
            lock: tokio::sync::Mutex::new(()),
            next: AtomicU64::new(1),
        }
    }

    fn in_trash(&self, path: &Path) -> bool {
        path.starts_with(&self.trash)
    }

    /// `path` is a proper ancestor of the trash (`/` for `/.trash`).
    fn holds_trash(&self, path: &Path) -> bool {
        self.trash.starts_with(path) && self.trash != path
    }

    fn index_path(&self) -> PathBuf {
        self.trash.join(INDEX)
    }

    async fn read_index(&self) -> Vec<Entry> {
        match self.inner.read_file(&self.index_path()).await {
            Ok(bytes) => parse_index(&String::from_utf8_lossy(&bytes)),
            Err(_) => Vec::new(),
        }
    }

    async fn write_index(&self, entries: &[Entry]) -> bashkit::Result<()> {
        self.inner
            .write_file(&self.index_path(), format_index(entries).as_bytes())
            .await
    }

    /// Move `path` (which exists) into the trash; the caller holds the lock.
    async fn move_to_trash(&self, path: &Path) -> bashkit::Result<()> {
        if !self.inner.exists(&self.trash).await.unwrap_or(false) {
            self.inner.mkdir(&self.trash, true).await?;
        }
        let base = path
            .file_name()
            .map_or_else(|| "root".to_string(), |n| n.to_string_lossy().into_owned());
        let name = loop {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let candidate = format!("{n}_{base}");
            if !self
                .inner
                .exists(&self.trash.join(&candidate))
                .await
                .unwrap_or(false)
            {
                break candidate;
            }
        };
        self.inner.rename(path, &self.trash.join(&name)).await?;
        let mut entries = self.read_index().await;
        entries.push(Entry {
            name,
            original: path.to_string_lossy().into_owned(),
            deleted_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        });
        self.write_index(&entries).await
    }

    /// Before `path` is overwritten: keep its old content, if it is a
    /// non-empty file outside the trash.
    async fn keep_before_overwrite(&self, path: &Path) -> bashkit::Result<()> {
        if self.in_trash(path) {
            return Ok(());
        }
        match self.inner.lstat(path).await {
            Ok(meta) if meta.file_type.is_file() && meta.size > 0 => self.move_to_trash(path).await,
            _ => Ok(()),
        }
    }

    /// After `path` inside the trash was removed or moved away: drop the
    /// index lines of the entries it was or contained.
    async fn forget(&self, path: &Path) -> bashkit::Result<()> {
        if path == self.index_path() {
            return Ok(());
        }
        let entries = self.read_index().await;
        let kept: Vec<Entry> = entries
            .iter()
            .filter(|e| !self.trash.join(&e.name).starts_with(path))
            .cloned()
            .collect();
        if kept.len() != entries.len() && self.inner.exists(&self.trash).await.unwrap_or(false) {
            self.write_index(&kept).await?;
        }
        Ok(())
    }

    /// Remove `path`, an ancestor of the trash: everything in it goes to the
    /// trash except the trash itself (and the directories leading to it,
    /// which stay).
    async fn remove_around_trash(&self, path: &Path) -> bashkit::Result<()> {
        let mut pending = vec![path.to_path_buf()];
        while let Some(dir) = pending.pop() {
            for entry in self.inner.read_dir(&dir).await? {
                let child = dir.join(&entry.name);
                if child == self.trash {
                    continue;
                }
                if self.holds_trash(&child) {
                    pending.push(child);
                } else {
                    self.move_to_trash(&child).await?;
                }
            }
        }
        Ok(())
    }
}

/// What `<trash>/.index` holds, parsed; malformed lines are skipped.
pub fn parse_index(text: &str) -> Vec<Entry> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let name = percent_decode(fields.next()?)?;
            let original = percent_decode(fields.next()?)?;
            let deleted_at = fields.next()?.parse().ok()?;
            (!name.is_empty() && !name.contains('/')).then_some(Entry {
                name,
                original,
                deleted_at,
            })
        })
        .collect()
}

fn format_index(entries: &[Entry]) -> String {
    entries
        .iter()
        .map(|e| {
            format!(
                "{}\t{}\t{}\n",
                percent_encode(&e.name),
                percent_encode(&e.original),
                e.deleted_at
            )
        })
        .collect()
}

/// Names and paths may hold tabs and newlines; the index must not.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '%' | '\t' | '\n' | '\r' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[async_trait]
impl FileSystemExt for SoftDeleteFs {
    fn usage(&self) -> FsUsage {
        self.inner.usage()
    }

    async fn mkfifo(&self, path: &Path, mode: u32) -> bashkit::Result<()> {
        self.inner.mkfifo(path, mode).await
    }

    fn limits(&self) -> FsLimits {
        self.inner.limits()
    }

    fn vfs_snapshot(&self) -> Option<VfsSnapshot> {
        self.inner.vfs_snapshot()
    }

    fn vfs_restore(&self, snapshot: &VfsSnapshot) -> bashkit::Result<()> {
        self.inner.vfs_restore(snapshot)
    }

    fn backend_kind(&self) -> &'static str {
        self.inner.backend_kind()
    }
}

#[async_trait]
impl FileSystem for SoftDeleteFs {
    async fn read_file(&self, path: &Path) -> bashkit::Result<Vec<u8>> {
        self.inner.read_file(path).await
    }

    async fn write_file(&self, path: &Path, content: &[u8]) -> bashkit::Result<()> {
        let _guard = self.lock.lock().await;
        self.keep_before_overwrite(path).await?;
        self.inner.write_file(path, content).await
    }

    async fn append_file(&self, path: &Path, content: &[u8]) -> bashkit::Result<()> {
        self.inner.append_file(path, content).await
    }

    async fn mkdir(&self, path: &Path, recursive: bool) -> bashkit::Result<()> {
        self.inner.mkdir(path, recursive).await
    }

    async fn remove(&self, path: &Path, recursive: bool) -> bashkit::Result<()> {
        let _guard = self.lock.lock().await;
        if self.in_trash(path) {
            self.inner.remove(path, recursive).await?;
            return self.forget(path).await;
        }
        let meta = self.inner.lstat(path).await?;
        if meta.file_type.is_dir() {
            let empty = self.inner.read_dir(path).await?.is_empty();
            if !recursive && !empty {
                // The inner filesystem's own "directory not empty".
                return self.inner.remove(path, false).await;
            }
            if self.holds_trash(path) {
                return self.remove_around_trash(path).await;
            }
        }
        self.move_to_trash(path).await
    }

    async fn stat(&self, path: &Path) -> bashkit::Result<Metadata> {
        self.inner.stat(path).await
    }

    async fn lstat(&self, path: &Path) -> bashkit::Result<Metadata> {
        self.inner.lstat(path).await
    }

    async fn read_dir(&self, path: &Path) -> bashkit::Result<Vec<DirEntry>> {
        self.inner.read_dir(path).await
    }

    async fn exists(&self, path: &Path) -> bashkit::Result<bool> {
        self.inner.exists(path).await
    }

    async fn rename(&self, from: &Path, to: &Path) -> bashkit::Result<()> {
        let _guard = self.lock.lock().await;
        if from != to && !self.in_trash(to) {
            self.keep_before_overwrite(to).await?;
        }
        self.inner.rename(from, to).await?;
        if self.in_trash(from) && !self.in_trash(to) {
            self.forget(from).await?;
        }
        Ok(())
    }

    async fn copy(&self, from: &Path, to: &Path) -> bashkit::Result<()> {
        let _guard = self.lock.lock().await;
        if from != to {
            self.keep_before_overwrite(to).await?;
        }
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

    async fn set_modified_time(&self, path: &Path, time: SystemTime) -> bashkit::Result<()> {
        self.inner.set_modified_time(path, time).await
    }

    fn as_search_capable(&self) -> Option<&dyn SearchCapable> {
        self.inner.as_search_capable()
    }
}

// -- The session API: `Session.trash/1` and `Session.undelete/2` -----------

/// `{:trash}` and `{:undelete, path}` of the filesystem API (`session/fs.rs`);
/// `None` for every other request. Without `:soft_delete` (`trash` is
/// `None`) both answer `{:error, :no_soft_delete}`.
pub fn call(fs: &Arc<dyn FileSystem>, trash: Option<&str>, request: &Value) -> Option<Value> {
    let items = request.elements().ok()?;
    let op = items.first().and_then(Value::as_atom)?;
    if !matches!(op, "trash" | "undelete") {
        return None;
    }
    let Some(trash) = trash else {
        return Some(
            Failure::new(
                Reason::NotSupported,
                "the session has no trash: build it with soft_delete: true",
            )
            .to_value(),
        );
    };
    Some(match op {
        "trash" => match runtime::block_on(list(fs, trash)) {
            Ok(listed) => Value::ok_with(Value::List(
                listed
                    .into_iter()
                    .map(|l| {
                        Value::map([
                            ("path", l.entry.original.into()),
                            ("trash_path", l.trash_path.into()),
                            ("deleted_at", l.entry.deleted_at.into()),
                            ("type", Value::atom(l.kind)),
                            ("size", l.size.into()),
                        ])
                    })
                    .collect(),
            )),
            Err(e) => bashkit_errors::fs_failure(trash, &e).to_value(),
        },
        _ => {
            let Some(Ok(path)) = items.get(1).map(String::from_value) else {
                return Some(Value::error("undelete: missing path"));
            };
            match runtime::block_on(undelete(fs, trash, &path)) {
                Ok(()) => Value::ok(),
                Err(Refusal::NotInTrash) => Failure::new(
                    Reason::NotFound,
                    format!("{path}: nothing in the trash came from this path"),
                )
                .to_value(),
                Err(Refusal::Taken) => Failure::new(
                    Reason::Exists,
                    format!("{path}: something is at this path again; remove it first"),
                )
                .to_value(),
                Err(Refusal::Fs(e)) => bashkit_errors::fs_failure(&path, &e).to_value(),
            }
        }
    })
}

/// One listed entry: the index line plus what is there now.
pub struct Listed {
    pub entry: Entry,
    pub trash_path: String,
    pub kind: &'static str,
    pub size: u64,
}

/// The trash's entries, oldest first, through the session's filesystem
/// `fs` (entries whose file a script removed by hand are left out).
pub async fn list(fs: &Arc<dyn FileSystem>, trash: &str) -> bashkit::Result<Vec<Listed>> {
    let trash = Path::new(trash);
    let entries = match fs.read_file(&trash.join(INDEX)).await {
        Ok(bytes) => parse_index(&String::from_utf8_lossy(&bytes)),
        Err(_) => return Ok(Vec::new()),
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let path = trash.join(&entry.name);
        if let Ok(meta) = fs.lstat(&path).await {
            out.push(Listed {
                trash_path: path.to_string_lossy().into_owned(),
                kind: crate::session::fs::type_name(&meta.file_type),
                size: meta.size,
                entry,
            });
        }
    }
    Ok(out)
}

/// Why `undelete` did nothing.
pub enum Refusal {
    /// Nothing in the trash came from that path.
    NotInTrash,
    /// Something is at the original path again; it is left alone.
    Taken,
    Fs(bashkit::Error),
}

/// Put the most recently trashed entry of `original` back where it was,
/// creating missing parent directories. If the path is taken again, nothing
/// changes (the caller may remove what is there, which trashes it, first).
pub async fn undelete(
    fs: &Arc<dyn FileSystem>,
    trash: &str,
    original: &str,
) -> Result<(), Refusal> {
    let listed = list(fs, trash).await.map_err(Refusal::Fs)?;
    let Some(found) = listed
        .into_iter()
        .rev()
        .find(|l| l.entry.original == original)
    else {
        return Err(Refusal::NotInTrash);
    };
    let target = Path::new(original);
    match fs.lstat(target).await {
        Ok(_) => return Err(Refusal::Taken),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(Refusal::Fs(e)),
    }
    if let Some(parent) = target.parent() {
        if !fs.exists(parent).await.unwrap_or(false) {
            fs.mkdir(parent, true).await.map_err(Refusal::Fs)?;
        }
    }
    fs.rename(Path::new(&found.trash_path), target)
        .await
        .map_err(Refusal::Fs)
}

fn is_not_found(error: &bashkit::Error) -> bool {
    matches!(error, bashkit::Error::Io(io) if io.kind() == ErrorKind::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_round_trips_awkward_paths() {
        let entries = vec![
            Entry {
                name: "1_a".into(),
                original: "/x/a\tb\nc%d".into(),
                deleted_at: 7,
            },
            Entry {
                name: "3_c\td\ne%".into(),
                original: "/a b/c\td\ne%".into(),
                deleted_at: 9,
            },
            Entry {
                name: "2_é".into(),
                original: "/é".into(),
                deleted_at: 8,
            },
        ];
        assert_eq!(parse_index(&format_index(&entries)), entries);
        assert_eq!(parse_index("bad\nx\t%zz\t1\n1_a\t/a\t3\n").len(), 1);
    }
}
