//! The session's in-memory layer, told apart when it was written: what
//! lets a durable session skip hashing its files after an exec that wrote
//! none (`session/recovery.rs`).
//!
//! A thin wrapper that forwards every call and raises one flag on every
//! call that may change the layer (a write that fails raises it too: a
//! partial write is a change). Reads cost nothing more.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use async_trait::async_trait;
use bashkit::{
    DirEntry, FileSystem, FileSystemExt, FsLimits, FsUsage, InMemoryFs, Metadata, Result,
    SearchCapable, VfsSnapshot,
};

/// An in-memory filesystem and whether it was written since last asked.
pub struct WrittenFs {
    inner: InMemoryFs,
    written: AtomicBool,
}

impl WrittenFs {
    /// `inner`, counted as written (nothing has recorded it yet).
    pub fn new(inner: InMemoryFs) -> Self {
        Self {
            inner,
            written: AtomicBool::new(true),
        }
    }

    /// Whether the layer was written since the last call.
    pub fn take_written(&self) -> bool {
        self.written.swap(false, Ordering::AcqRel)
    }

    fn wrote<T>(&self, result: Result<T>) -> Result<T> {
        self.written.store(true, Ordering::Release);
        result
    }
}

#[async_trait]
impl FileSystemExt for WrittenFs {
    fn usage(&self) -> FsUsage {
        self.inner.usage()
    }

    async fn mkfifo(&self, path: &Path, mode: u32) -> Result<()> {
        self.wrote(self.inner.mkfifo(path, mode).await)
    }

    fn limits(&self) -> FsLimits {
        self.inner.limits()
    }

    fn vfs_snapshot(&self) -> Option<VfsSnapshot> {
        self.inner.vfs_snapshot()
    }

    fn vfs_restore(&self, snapshot: &VfsSnapshot) -> Result<()> {
        self.wrote(self.inner.vfs_restore(snapshot))
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
        self.wrote(self.inner.write_file(path, content).await)
    }

    async fn append_file(&self, path: &Path, content: &[u8]) -> Result<()> {
        self.wrote(self.inner.append_file(path, content).await)
    }

    async fn mkdir(&self, path: &Path, recursive: bool) -> Result<()> {
        self.wrote(self.inner.mkdir(path, recursive).await)
    }

    async fn remove(&self, path: &Path, recursive: bool) -> Result<()> {
        self.wrote(self.inner.remove(path, recursive).await)
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
        self.wrote(self.inner.rename(from, to).await)
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.wrote(self.inner.copy(from, to).await)
    }

    async fn symlink(&self, target: &Path, link: &Path) -> Result<()> {
        self.wrote(self.inner.symlink(target, link).await)
    }

    async fn read_link(&self, path: &Path) -> Result<PathBuf> {
        self.inner.read_link(path).await
    }

    async fn chmod(&self, path: &Path, mode: u32) -> Result<()> {
        self.wrote(self.inner.chmod(path, mode).await)
    }

    async fn set_modified_time(&self, path: &Path, time: SystemTime) -> Result<()> {
        self.wrote(self.inner.set_modified_time(path, time).await)
    }

    fn as_search_capable(&self) -> Option<&dyn SearchCapable> {
        self.inner.as_search_capable()
    }
}
