//! A layer's entries as content several sessions share: what
//! `Session.fork/2` hands a fork in the same process. The fork's files are
//! lazy entries over one copy of the bytes, each copied into the fork only
//! when it reads it, so a fork costs a walk of the paths, not of the bytes.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use bashkit::{FileSystem, FileType, InMemoryFs, Result, VfsEntry, VfsEntryKind, VfsSnapshot};

/// Devices whose reads the filesystem answers by path: their entries hold
/// nothing to share.
const DEVICES: [&str; 2] = ["/dev/urandom", "/dev/random"];

/// One entry of a shared layer.
pub struct SharedEntry {
    path: PathBuf,
    mode: u32,
    modified: SystemTime,
    kind: SharedKind,
}

enum SharedKind {
    File(Arc<Vec<u8>>),
    Directory,
    Symlink(PathBuf),
    Fifo,
}

/// Every entry of `fs`, each file's bytes copied once.
pub async fn share(fs: &InMemoryFs) -> Result<Arc<[SharedEntry]>> {
    let mut out = Vec::new();
    walk(fs, PathBuf::from("/"), &mut out).await?;
    Ok(out.into())
}

fn walk<'a>(
    fs: &'a InMemoryFs,
    dir: PathBuf,
    out: &'a mut Vec<SharedEntry>,
) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>> {
    Box::pin(async move {
        for entry in fs.read_dir(&dir).await? {
            let path = dir.join(&entry.name);
            let meta = fs.lstat(&path).await?;
            let kind = match meta.file_type {
                FileType::Directory => SharedKind::Directory,
                FileType::Symlink => SharedKind::Symlink(fs.read_link(&path).await?),
                FileType::Fifo => SharedKind::Fifo,
                FileType::File if DEVICES.iter().any(|d| Path::new(d) == path) => {
                    SharedKind::File(Arc::default())
                }
                FileType::File => SharedKind::File(Arc::new(fs.read_file(&path).await?)),
            };
            let is_dir = matches!(kind, SharedKind::Directory);
            out.push(SharedEntry {
                path: path.clone(),
                mode: meta.mode,
                modified: meta.modified,
                kind,
            });
            if is_dir {
                walk(fs, path, out).await?;
            }
        }
        Ok(())
    })
}

/// Make `fs` hold `entries` and nothing else: directories, links and pipes
/// as they were, files lazy over the shared bytes, modification times kept.
pub async fn install(fs: &InMemoryFs, entries: &[SharedEntry]) -> Result<()> {
    let skeleton = entries
        .iter()
        .filter_map(|e| {
            let kind = match &e.kind {
                SharedKind::File(_) => return None,
                SharedKind::Directory => VfsEntryKind::Directory,
                SharedKind::Symlink(target) => VfsEntryKind::Symlink {
                    target: target.clone(),
                },
                SharedKind::Fifo => VfsEntryKind::Fifo,
            };
            Some(VfsEntry {
                path: e.path.clone(),
                kind,
                mode: e.mode,
            })
        })
        .collect();
    fs.restore(&VfsSnapshot::from_entries(skeleton))?;
    for entry in entries {
        if let SharedKind::File(content) = &entry.kind {
            let content = Arc::clone(content);
            let size = content.len() as u64;
            fs.add_lazy_file(
                &entry.path,
                size,
                entry.mode,
                Arc::new(move || content.as_ref().clone()),
            );
        }
    }
    for entry in entries {
        if !matches!(entry.kind, SharedKind::Symlink(_)) {
            fs.set_modified_time(&entry.path, entry.modified).await?;
        }
    }
    Ok(())
}
