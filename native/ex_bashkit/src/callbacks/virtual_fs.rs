//! Filesystems served by Elixir (`:virtual_fs` option): every operation a
//! script makes under the mount becomes a back-call
//! `{:vfs, mount, op, path, extra}` with the path rooted at the mount.
//!
//! The backend's answers are not trusted, and are checked once, in Elixir
//! (`ExBashkit.Callbacks.Answer`): a malformed listing (bad names, unknown
//! kinds, too deep, too large) fails the operation there, so what arrives
//! here is already well-formed (`callbacks::decode_answer` rejects unknown
//! kinds). Failures map to the io errors bashkit turns into the messages scripts
//! expect ("No such file or directory", ...).

use std::io::{Error as IoError, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bashkit::{DirEntry, FileSystem, FileSystemExt, FileType, Metadata};

use crate::callbacks::{Answer, CallError, CallbackChannel, Request};
use crate::term::value::Value;

/// The operation a back-call asks for, as the atom Elixir matches on.
type Op = &'static str;

/// One mounted Elixir backend.
pub struct ElixirFs {
    mount: String,
    channel: Arc<CallbackChannel>,
}

impl ElixirFs {
    pub fn new(mount: String, channel: Arc<CallbackChannel>) -> Self {
        Self { mount, channel }
    }

    async fn call(&self, op: Op, path: &Path, extra: Extra<'_>) -> bashkit::Result<Answer> {
        let path = path.to_string_lossy();
        let request = VfsRequest {
            mount: &self.mount,
            op,
            path: &path,
            extra,
        };
        match self.channel.call(&request).await {
            Ok(Answer::Failed(reason)) => Err(errno(&reason)),
            Ok(answer) => Ok(answer),
            Err(CallError::Interrupted) => {
                Err(IoError::new(ErrorKind::Interrupted, "Interrupted").into())
            }
            Err(CallError::CallerGone) => {
                Err(IoError::other("virtual_fs backend unavailable: caller gone").into())
            }
            Err(CallError::NoTarget) => Err(IoError::new(
                ErrorKind::Unsupported,
                "virtual_fs paths are served only while a script runs",
            )
            .into()),
        }
    }

    async fn call_done(&self, op: Op, path: &Path, extra: Extra<'_>) -> bashkit::Result<()> {
        match self.call(op, path, extra).await? {
            Answer::Done => Ok(()),
            other => Err(unexpected(op, &other)),
        }
    }
}

/// The op-specific part of a request.
enum Extra<'a> {
    None,
    Content(&'a [u8]),
    Flag(bool),
    Target(&'a Path),
}

struct VfsRequest<'a> {
    mount: &'a str,
    op: Op,
    path: &'a str,
    extra: Extra<'a>,
}

impl Request for VfsRequest<'_> {
    fn to_value(&self) -> Value {
        let extra = match &self.extra {
            Extra::None => Value::nil(),
            Extra::Content(bytes) => Value::bin(bytes),
            Extra::Flag(flag) => Value::from(*flag),
            Extra::Target(path) => Value::from(path.to_string_lossy().into_owned()),
        };
        Value::tuple([
            Value::atom("vfs"),
            self.mount.into(),
            Value::atom(self.op),
            self.path.into(),
            extra,
        ])
    }
}

/// The io error for an errno-style name (or a free-form message). The text
/// is the C library's, so scripts print what they would on a real system.
fn errno(reason: &str) -> bashkit::Error {
    let (kind, text) = match reason {
        "enoent" => (ErrorKind::NotFound, "No such file or directory"),
        "eacces" => (ErrorKind::PermissionDenied, "Permission denied"),
        "eperm" => (ErrorKind::PermissionDenied, "Operation not permitted"),
        "eexist" => (ErrorKind::AlreadyExists, "File exists"),
        "enotdir" => (ErrorKind::NotADirectory, "Not a directory"),
        "eisdir" => (ErrorKind::IsADirectory, "Is a directory"),
        "enotempty" => (ErrorKind::DirectoryNotEmpty, "Directory not empty"),
        "erofs" => (ErrorKind::ReadOnlyFilesystem, "Read-only file system"),
        "enotsup" | "eopnotsupp" => (ErrorKind::Unsupported, "Operation not supported"),
        "etimedout" => (ErrorKind::TimedOut, "Connection timed out"),
        "efbig" => (ErrorKind::FileTooLarge, "File too large"),
        "einval" => (ErrorKind::InvalidInput, "Invalid argument"),
        "eio" => (ErrorKind::Other, "Input/output error"),
        message => return IoError::other(message.to_string()).into(),
    };
    IoError::new(kind, text).into()
}

fn unexpected(op: Op, answer: &Answer) -> bashkit::Error {
    IoError::other(format!(
        "virtual_fs backend gave an unusable answer to {op}: {}",
        answer_kind(answer)
    ))
    .into()
}

fn answer_kind(answer: &Answer) -> &'static str {
    match answer {
        Answer::Command { .. } => "a command result",
        Answer::Done => "ok",
        Answer::Data(_) => "data",
        Answer::Entries(_) => "a listing",
        Answer::Stat(..) => "a stat",
        Answer::Failed(_) => "an error",
        Answer::Allow | Answer::Deny => "an egress decision",
    }
}

/// `kind` is one of `file`, `dir`, `symlink`: `decode_answer` refuses any
/// other, so the last arm is only ever `file`.
fn file_type(kind: &str) -> FileType {
    match kind {
        "dir" => FileType::Directory,
        "symlink" => FileType::Symlink,
        _ => FileType::File,
    }
}

fn metadata(kind: &str, size: u64) -> Metadata {
    let file_type = file_type(kind);
    Metadata {
        mode: if file_type.is_dir() { 0o755 } else { 0o644 },
        file_type,
        size,
        ..Metadata::default()
    }
}

#[bashkit::async_trait]
impl FileSystemExt for ElixirFs {
    fn backend_kind(&self) -> &'static str {
        "elixir"
    }
}

#[bashkit::async_trait]
impl FileSystem for ElixirFs {
    async fn read_file(&self, path: &Path) -> bashkit::Result<Vec<u8>> {
        match self.call("read", path, Extra::None).await? {
            Answer::Data(bytes) => Ok(bytes),
            other => Err(unexpected("read", &other)),
        }
    }

    async fn write_file(&self, path: &Path, content: &[u8]) -> bashkit::Result<()> {
        self.call_done("write", path, Extra::Content(content)).await
    }

    async fn append_file(&self, path: &Path, content: &[u8]) -> bashkit::Result<()> {
        self.call_done("append", path, Extra::Content(content))
            .await
    }

    async fn mkdir(&self, path: &Path, recursive: bool) -> bashkit::Result<()> {
        self.call_done("mkdir", path, Extra::Flag(recursive)).await
    }

    async fn remove(&self, path: &Path, recursive: bool) -> bashkit::Result<()> {
        self.call_done("remove", path, Extra::Flag(recursive)).await
    }

    async fn stat(&self, path: &Path) -> bashkit::Result<Metadata> {
        match self.call("stat", path, Extra::None).await? {
            Answer::Stat(kind, size) => Ok(metadata(&kind, size)),
            other => Err(unexpected("stat", &other)),
        }
    }

    async fn read_dir(&self, path: &Path) -> bashkit::Result<Vec<DirEntry>> {
        match self.call("list", path, Extra::None).await? {
            Answer::Entries(entries) => Ok(entries
                .into_iter()
                .map(|(name, kind)| DirEntry {
                    name,
                    metadata: metadata(&kind, 0),
                })
                .collect()),
            other => Err(unexpected("list", &other)),
        }
    }

    async fn exists(&self, path: &Path) -> bashkit::Result<bool> {
        match self.stat(path).await {
            Ok(_) => Ok(true),
            Err(bashkit::Error::Io(e)) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn rename(&self, from: &Path, to: &Path) -> bashkit::Result<()> {
        self.call_done("rename", from, Extra::Target(to)).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> bashkit::Result<()> {
        let content = self.read_file(from).await?;
        self.write_file(to, &content).await
    }

    async fn symlink(&self, _target: &Path, _link: &Path) -> bashkit::Result<()> {
        Err(IoError::from(ErrorKind::Unsupported).into())
    }

    async fn read_link(&self, _path: &Path) -> bashkit::Result<PathBuf> {
        Err(IoError::from(ErrorKind::InvalidInput).into())
    }

    async fn chmod(&self, path: &Path, _mode: u32) -> bashkit::Result<()> {
        // Modes are not part of the protocol; the file only has to exist.
        self.stat(path).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_names_map_to_io_kinds() {
        match errno("enoent") {
            bashkit::Error::Io(e) => assert_eq!(e.kind(), ErrorKind::NotFound),
            other => panic!("{other:?}"),
        }
        match errno("backend exploded") {
            bashkit::Error::Io(e) => assert_eq!(e.to_string(), "backend exploded"),
            other => panic!("{other:?}"),
        }
    }
}
