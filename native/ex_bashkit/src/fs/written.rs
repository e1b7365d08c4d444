//! The session's in-memory layer, told apart when it was written, and
//! where: what lets a durable session skip hashing its files after an exec
//! that wrote none, and send only the files an exec wrote
//! (`session/recovery.rs`).
//!
//! A thin wrapper that forwards every call and records, on every call that
//! may change the layer, the paths it touched (a write that fails counts
//! too: a partial write is a change). Reads cost nothing more.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use bashkit::{
    DirEntry, FileSystem, FileSystemExt, FsLimits, FsUsage, InMemoryFs, Metadata, Result,
    SearchCapable, VfsSnapshot,
};
use parking_lot::Mutex;

use crate::fs::shared::{self, SharedEntry};

/// Paths past which a change is told as "everything": a script that
/// touches more files than this is cheaper to commit whole.
const MAX_TOUCHED: usize = 4_096;

/// Generations of every layer of this process: a layer's generation is
/// never another layer's, so one taken from a layer since replaced (a
/// reset) matches nothing.
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

fn next_generation() -> u64 {
    GENERATIONS.fetch_add(1, Ordering::AcqRel)
}

/// What changed in the layer since last asked.
#[derive(Debug, Default, PartialEq, Eq)]
pub enum Written {
    #[default]
    Nothing,
    /// These paths, each as it is now: a file, a directory, a symlink, or
    /// gone. A directory in `trees` was removed, renamed or copied there:
    /// what it held before is gone, what it holds now is part of it.
    Paths {
        paths: BTreeSet<PathBuf>,
        trees: BTreeSet<PathBuf>,
    },
    /// Anything: the whole layer was replaced, or too much was touched.
    All,
}

impl Written {
    fn touch(&mut self, path: &Path, tree: bool) {
        if let Written::Nothing = self {
            *self = Written::Paths {
                paths: BTreeSet::new(),
                trees: BTreeSet::new(),
            };
        }
        if let Written::Paths { paths, trees } = self {
            paths.insert(path.to_path_buf());
            if tree {
                trees.insert(path.to_path_buf());
            }
            if paths.len() > MAX_TOUCHED {
                *self = Written::All;
            }
        }
    }
}

/// An in-memory filesystem and what was written in it since last asked.
pub struct WrittenFs {
    inner: InMemoryFs,
    written: Mutex<Written>,
    /// Moved by every change: what tells a shared copy, or the tree of the
    /// last commit (`session/history.rs`), still true.
    generation: AtomicU64,
    /// The layer as shared content (`fs/shared.rs`), made by the first fork
    /// since the layer last changed, at that generation; the next forks of
    /// an unchanged session reuse it.
    shared: Mutex<Option<(u64, Arc<[SharedEntry]>)>>,
}

impl WrittenFs {
    /// `inner`, counted as wholly written (nothing has recorded it yet).
    pub fn new(inner: InMemoryFs) -> Self {
        Self {
            inner,
            written: Mutex::new(Written::All),
            generation: AtomicU64::new(next_generation()),
            shared: Mutex::new(None),
        }
    }

    /// The layer's entries as shared content: copied once per change.
    pub async fn shared(&self) -> Result<Arc<[SharedEntry]>> {
        let generation = self.generation();
        if let Some((at, entries)) = self.shared.lock().as_ref() {
            if *at == generation {
                return Ok(Arc::clone(entries));
            }
        }
        let entries = shared::share(&self.inner).await?;
        let mut cached = self.shared.lock();
        // A change during the walk leaves nothing cached: the walk may
        // have seen half of it.
        *cached = (self.generation() == generation).then(|| (generation, Arc::clone(&entries)));
        Ok(entries)
    }

    /// The layer's generation now: equal generations, the same files.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.generation.store(next_generation(), Ordering::Release);
        self.shared.lock().take();
    }

    /// What was written since the last call.
    pub fn take_written(&self) -> Written {
        std::mem::take(&mut *self.written.lock())
    }

    /// The filesystem itself, whose writes are not recorded (a recovery
    /// replaying what was recorded).
    pub fn unrecorded(&self) -> &InMemoryFs {
        &self.inner
    }

    fn wrote<T>(&self, result: Result<T>, path: &Path) -> Result<T> {
        self.changed();
        self.written.lock().touch(path, false);
        result
    }

    fn wrote_tree<T>(&self, result: Result<T>, from: Option<&Path>, to: &Path) -> Result<T> {
        self.changed();
        let mut written = self.written.lock();
        if let Some(from) = from {
            written.touch(from, true);
        }
        written.touch(to, true);
        result
    }
}

#[async_trait]
impl FileSystemExt for WrittenFs {
    fn usage(&self) -> FsUsage {
        self.inner.usage()
    }

    async fn mkfifo(&self, path: &Path, mode: u32) -> Result<()> {
        self.wrote(self.inner.mkfifo(path, mode).await, path)
    }

    fn limits(&self) -> FsLimits {
        self.inner.limits()
    }

    fn vfs_snapshot(&self) -> Option<VfsSnapshot> {
        self.inner.vfs_snapshot()
    }

    fn vfs_restore(&self, snapshot: &VfsSnapshot) -> Result<()> {
        self.changed();
        *self.written.lock() = Written::All;
        self.inner.vfs_restore(snapshot)
    }

    fn backend_kind(&self) -> &'static str {
        self.inner.backend_kind()
    }
}

#[async_trait]
impl FileSystem for WrittenFs {
    async fn read_file(&self, path: &Path) -> Result<Vec<u8>> {
        self.inner.read_file(path).await
    }

    async fn write_file(&self, path: &Path, content: &[u8]) -> Result<()> {
        self.wrote(self.inner.write_file(path, content).await, path)
    }

    async fn append_file(&self, path: &Path, content: &[u8]) -> Result<()> {
        self.wrote(self.inner.append_file(path, content).await, path)
    }

    async fn mkdir(&self, path: &Path, recursive: bool) -> Result<()> {
        self.wrote(self.inner.mkdir(path, recursive).await, path)
    }

    async fn remove(&self, path: &Path, recursive: bool) -> Result<()> {
        self.wrote_tree(self.inner.remove(path, recursive).await, None, path)
    }

    async fn stat(&self, path: &Path) -> Result<Metadata> {
        self.inner.stat(path).await
    }

    async fn lstat(&self, path: &Path) -> Result<Metadata> {
        self.inner.lstat(path).await
    }

    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>> {
        self.inner.read_dir(path).await
    }

    async fn exists(&self, path: &Path) -> Result<bool> {
        self.inner.exists(path).await
    }

    async fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.wrote_tree(self.inner.rename(from, to).await, Some(from), to)
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.wrote_tree(self.inner.copy(from, to).await, None, to)
    }

    async fn symlink(&self, target: &Path, link: &Path) -> Result<()> {
        self.wrote(self.inner.symlink(target, link).await, link)
    }

    async fn read_link(&self, path: &Path) -> Result<PathBuf> {
        self.inner.read_link(path).await
    }

    async fn chmod(&self, path: &Path, mode: u32) -> Result<()> {
        self.wrote(self.inner.chmod(path, mode).await, path)
    }

    async fn set_modified_time(&self, path: &Path, time: SystemTime) -> Result<()> {
        self.wrote(self.inner.set_modified_time(path, time).await, path)
    }

    fn as_search_capable(&self) -> Option<&dyn SearchCapable> {
        self.inner.as_search_capable()
    }
}
