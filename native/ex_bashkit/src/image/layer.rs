//! A session's filesystem layer over a base image: bashkit's `OverlayFs`
//! (reads fall through to the image, writes and deletes stay in an
//! in-memory upper layer with whiteouts), behind a handle that can swap in a
//! fresh overlay.
//!
//! Why the swap: `OverlayFs` snapshots and restores only its upper layer;
//! its whiteouts (what the session deleted from the image) are neither in a
//! snapshot nor cleared by a restore. So a restore builds a new overlay over
//! the same image, restores the upper layer into it, and the whiteouts the
//! snapshot recorded are then applied (`session/snapshot.rs`). The layer sits below
//! bashkit's system layer and mounts, as the plain in-memory filesystem of
//! a session without a base does.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bashkit::{DirEntry, FileSystem, FileSystemExt, FsUsage, Metadata, OverlayFs, VfsSnapshot};
use parking_lot::RwLock;

use crate::image::Image;

type Result<T> = bashkit::Result<T>;

/// The overlay of one session over `image`.
pub struct BaseLayer {
    pub image: Arc<Image>,
    username: String,
    current: RwLock<Arc<OverlayFs>>,
}

impl BaseLayer {
    pub fn new(image: Arc<Image>, username: &str) -> Self {
        let current = RwLock::new(fresh(&image, username));
        Self {
            image,
            username: username.to_string(),
            current,
        }
    }

    fn overlay(&self) -> Arc<OverlayFs> {
        Arc::clone(&self.current.read())
    }

    /// Paths of the image the session no longer shows (deleted, or under a
    /// deleted directory), topmost only.
    pub async fn whiteouts(&self) -> Vec<String> {
        let overlay = self.overlay();
        let image: &dyn FileSystem = self.image.fs.as_ref();
        let mut out = Vec::new();
        let mut pending = vec![PathBuf::from("/")];
        while let Some(dir) = pending.pop() {
            let Ok(children) = image.read_dir(&dir).await else {
                continue;
            };
            for child in children {
                let path = dir.join(&child.name);
                match overlay.exists(&path).await {
                    Ok(true) => {
                        if child.metadata.file_type.is_dir() {
                            pending.push(path);
                        }
                    }
                    _ => out.push(path.to_string_lossy().into_owned()),
                }
            }
        }
        out.sort();
        out
    }

    /// Hide `paths` of the image again (after a restore).
    pub async fn apply_whiteouts(&self, paths: &[String]) {
        let overlay = self.overlay();
        for path in paths {
            // A path the image does not have (another image's snapshot was
            // refused earlier, so this is only a stale entry) is no error.
            let _ = overlay.remove(Path::new(path), true).await;
        }
    }
}

/// A new overlay over `image`, with the user's home like bashkit's default
/// filesystem has.
fn fresh(image: &Arc<Image>, username: &str) -> Arc<OverlayFs> {
    let lower: Arc<dyn FileSystem> = Arc::clone(&image.fs) as Arc<dyn FileSystem>;
    let overlay = OverlayFs::with_limits(lower, crate::image::limits());
    overlay.upper().add_dir(format!("/home/{username}"), 0o755);
    Arc::new(overlay)
}

#[async_trait]
impl FileSystemExt for BaseLayer {
    fn usage(&self) -> FsUsage {
        self.overlay().usage()
    }

    fn limits(&self) -> bashkit::FsLimits {
        self.overlay().limits()
    }

    async fn mkfifo(&self, path: &Path, mode: u32) -> Result<()> {
        self.overlay().mkfifo(path, mode).await
    }

    fn vfs_snapshot(&self) -> Option<VfsSnapshot> {
        self.overlay().vfs_snapshot()
    }

    /// Replace the session's layer: a fresh overlay whose upper layer is
    /// `snapshot` (validated before the swap, so a refused one changes
    /// nothing). Whiteouts follow separately (`apply_whiteouts`).
    fn vfs_restore(&self, snapshot: &VfsSnapshot) -> Result<()> {
        let next = fresh(&self.image, &self.username);
        next.vfs_restore(snapshot)?;
        *self.current.write() = next;
        Ok(())
    }

    fn backend_kind(&self) -> &'static str {
        "overlay"
    }
}

#[async_trait]
impl FileSystem for BaseLayer {
    async fn read_file(&self, path: &Path) -> Result<Vec<u8>> {
        self.overlay().read_file(path).await
    }
    async fn write_file(&self, path: &Path, content: &[u8]) -> Result<()> {
        self.overlay().write_file(path, content).await
    }
    async fn append_file(&self, path: &Path, content: &[u8]) -> Result<()> {
        self.overlay().append_file(path, content).await
    }
    async fn mkdir(&self, path: &Path, recursive: bool) -> Result<()> {
        let overlay = self.overlay();
        // bashkit's overlay copies a parent that only the image has up to
        // the session's layer for writes, not for `mkdir`, whose upper
        // layer then refuses a missing parent: copy it up here.
        if let Some(parent) = path.parent().filter(|_| !recursive) {
            let in_upper = overlay.upper().exists(parent).await.unwrap_or(false);
            let is_dir = overlay
                .stat(parent)
                .await
                .is_ok_and(|m| m.file_type.is_dir());
            if !in_upper && is_dir {
                overlay.upper().mkdir(parent, true).await?;
            }
        }
        overlay.mkdir(path, recursive).await
    }
    async fn remove(&self, path: &Path, recursive: bool) -> Result<()> {
        self.overlay().remove(path, recursive).await
    }
    async fn stat(&self, path: &Path) -> Result<Metadata> {
        self.overlay().stat(path).await
    }
    async fn lstat(&self, path: &Path) -> Result<Metadata> {
        self.overlay().lstat(path).await
    }
    async fn read_dir(&self, path: &Path) -> Result<Vec<DirEntry>> {
        self.overlay().read_dir(path).await
    }
    async fn exists(&self, path: &Path) -> Result<bool> {
        self.overlay().exists(path).await
    }
    async fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.overlay().rename(from, to).await
    }
    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.overlay().copy(from, to).await
    }
    async fn symlink(&self, target: &Path, link: &Path) -> Result<()> {
        self.overlay().symlink(target, link).await
    }
    async fn read_link(&self, path: &Path) -> Result<PathBuf> {
        self.overlay().read_link(path).await
    }
    async fn chmod(&self, path: &Path, mode: u32) -> Result<()> {
        self.overlay().chmod(path, mode).await
    }
    async fn set_modified_time(&self, path: &Path, time: std::time::SystemTime) -> Result<()> {
        self.overlay().set_modified_time(path, time).await
    }
}
