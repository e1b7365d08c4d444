//! The files a recovery point carries when an exec wrote a few: each path
//! the layer recorded (`fs/written.rs`), as it is now, read back and
//! replayed over the last commit in order. Cost ∝ bytes written, not held.
//!
//! An entry is `{:file, path, mode, mtime_ns, content}`, `{:dir, path,
//! mode, replaced}`, `{:link, path, target}` or `{:gone, path}`. A
//! `replaced` directory was removed, renamed or copied there: what it held
//! before goes, and the entries after it (all it holds now) fill it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bashkit::{FileSystem, FileType, InMemoryFs};

use crate::term::value::{Bytes, FromValue, Value};

/// The entries for `paths` (`trees`: those replaced whole), and their
/// bytes.
pub async fn read(
    fs: &InMemoryFs,
    paths: &BTreeSet<PathBuf>,
    trees: &BTreeSet<PathBuf>,
) -> (Vec<Value>, u64) {
    let mut out = Vec::new();
    let mut bytes = 0u64;
    for path in paths {
        // Depth first, a directory before what it holds.
        let mut stack = vec![(path.clone(), trees.contains(path))];
        while let Some((path, tree)) = stack.pop() {
            let name = Value::from(path.to_string_lossy().into_owned());
            let Ok(meta) = fs.lstat(&path).await else {
                out.push(Value::tuple([Value::atom("gone"), name]));
                continue;
            };
            match meta.file_type {
                FileType::Directory => {
                    out.push(Value::tuple([
                        Value::atom("dir"),
                        name,
                        Value::from(u64::from(meta.mode)),
                        Value::from(tree),
                    ]));
                    if tree {
                        let mut children = fs.read_dir(&path).await.unwrap_or_default();
                        children.sort_by(|a, b| b.name.cmp(&a.name));
                        stack.extend(children.into_iter().map(|c| (path.join(c.name), true)));
                    }
                }
                FileType::Symlink => {
                    let target = fs.read_link(&path).await.unwrap_or_default();
                    out.push(Value::tuple([
                        Value::atom("link"),
                        name,
                        Value::from(target.to_string_lossy().into_owned()),
                    ]));
                }
                FileType::File | FileType::Fifo => {
                    let content = fs.read_file(&path).await.unwrap_or_default();
                    bytes += content.len() as u64;
                    let mtime = meta.modified.duration_since(UNIX_EPOCH).unwrap_or_default();
                    out.push(Value::tuple([
                        Value::atom("file"),
                        name,
                        Value::from(u64::from(meta.mode)),
                        Value::from(u64::try_from(mtime.as_nanos()).unwrap_or(u64::MAX)),
                        Value::Binary(content),
                    ]));
                }
            }
        }
    }
    (out, bytes)
}

/// Replay `entries` on `fs`, in order; answers the bytes of the files
/// written. A malformed entry refuses the whole recovery (nothing is
/// replayed past it).
pub async fn replay(fs: &InMemoryFs, entries: &[Value]) -> Result<u64, String> {
    let mut bytes = 0u64;
    for entry in entries {
        let Value::Tuple(items) = entry else {
            return Err("a file entry is not a tuple".into());
        };
        let kind = items.first().and_then(Value::as_atom).unwrap_or("");
        let field = |i: usize| items.get(i).ok_or_else(|| format!("short {kind} entry"));
        let path = PathBuf::from(String::from_value(field(1)?)?);
        match kind {
            "gone" => {
                let _ = fs.remove(&path, true).await;
            }
            "dir" => {
                if bool::from_value(field(3)?)? {
                    let _ = fs.remove(&path, true).await;
                }
                fs.mkdir(&path, true).await.map_err(|e| e.to_string())?;
                let mode = u32::from_value(field(2)?)?;
                fs.chmod(&path, mode).await.map_err(|e| e.to_string())?;
            }
            "link" => {
                let _ = fs.remove(&path, false).await;
                parent(fs, &path).await?;
                let target = PathBuf::from(String::from_value(field(2)?)?);
                fs.symlink(&target, &path)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            "file" => {
                parent(fs, &path).await?;
                let Bytes(content) = Bytes::from_value(field(4)?)?;
                bytes += content.len() as u64;
                fs.write_file(&path, &content)
                    .await
                    .map_err(|e| e.to_string())?;
                fs.chmod(&path, u32::from_value(field(2)?)?)
                    .await
                    .map_err(|e| e.to_string())?;
                let mtime = UNIX_EPOCH + Duration::from_nanos(u64::from_value(field(3)?)?);
                let _ = fs
                    .set_modified_time(&path, mtime.max(SystemTime::UNIX_EPOCH))
                    .await;
            }
            other => return Err(format!("unknown file entry {other:?}")),
        }
    }
    Ok(bytes)
}

async fn parent(fs: &InMemoryFs, path: &Path) -> Result<(), String> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => {
            fs.mkdir(dir, true).await.map_err(|e| e.to_string())
        }
        _ => Ok(()),
    }
}
