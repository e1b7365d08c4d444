//! The filesystem API (`read_file/2`, `write_file/3`, `list_dir/2`, ...):
//! direct calls on a session's filesystem, without going through a script
//! and without taking the interpreter lock.
//!
//! Paths arrive absolute (Elixir roots relative ones at `/`); they resolve
//! from the filesystem root whatever the session's cwd, and go through host
//! mounts exactly as a script's would.

use std::path::Path;
use std::sync::Arc;

use bashkit::{FileSystem, FileType};
use rustler::{Env, Term};

use crate::result::reason::Failure;
use crate::session::Handle;
use crate::term::value::{Bytes, FromValue, Value};
use crate::{result::bashkit_errors, run::runtime};

/// The kind of an entry as the API reports it.
pub fn type_name(file_type: &FileType) -> &'static str {
    match file_type {
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        // A FIFO holds data like a file; the API has no separate kind.
        FileType::File | FileType::Fifo => "file",
    }
}

/// Write `content` to `path`, creating missing parent directories first.
pub async fn write_creating_parents(
    fs: &Arc<dyn FileSystem>,
    path: &str,
    content: &[u8],
) -> bashkit::Result<()> {
    let path = Path::new(path);
    if let Some(parent) = path.parent() {
        if !fs.exists(parent).await.unwrap_or(false) {
            fs.mkdir(parent, true).await?;
        }
    }
    fs.write_file(path, content).await
}

type FsResult<T> = Result<T, Failure>;

fn run<T>(
    path: &str,
    future: impl std::future::Future<Output = bashkit::Result<T>>,
) -> FsResult<T> {
    runtime::block_on(future).map_err(|e| bashkit_errors::fs_failure(path, &e))
}

pub fn read(fs: &Arc<dyn FileSystem>, path: &str) -> FsResult<Vec<u8>> {
    run(path, fs.read_file(Path::new(path)))
}

pub fn write(fs: &Arc<dyn FileSystem>, path: &str, content: &[u8]) -> FsResult<()> {
    run(path, write_creating_parents(fs, path, content))
}

pub fn list(fs: &Arc<dyn FileSystem>, path: &str) -> FsResult<Vec<(String, &'static str)>> {
    let entries = run(path, fs.read_dir(Path::new(path)))?;
    let mut out: Vec<(String, &'static str)> = entries
        .into_iter()
        .map(|e| (e.name, type_name(&e.metadata.file_type)))
        .collect();
    out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

pub fn mkdir(fs: &Arc<dyn FileSystem>, path: &str, parents: bool) -> FsResult<()> {
    run(path, async {
        // `mkdir -p` semantics: an existing directory is success.
        if parents {
            if let Ok(meta) = fs.stat(Path::new(path)).await {
                if meta.file_type.is_dir() {
                    return Ok(());
                }
            }
        }
        fs.mkdir(Path::new(path), parents).await
    })
}

pub fn remove(fs: &Arc<dyn FileSystem>, path: &str, recursive: bool) -> FsResult<()> {
    run(path, fs.remove(Path::new(path), recursive))
}

pub fn rename(fs: &Arc<dyn FileSystem>, from: &str, to: &str) -> FsResult<()> {
    runtime::block_on(fs.rename(Path::new(from), Path::new(to)))
        .map_err(|e| bashkit_errors::fs_failure(&format!("{from} -> {to}"), &e))
}

pub fn stat(fs: &Arc<dyn FileSystem>, path: &str) -> FsResult<(&'static str, u64)> {
    let meta = run(path, fs.lstat(Path::new(path)))?;
    Ok((type_name(&meta.file_type), meta.size))
}

/// One filesystem request, as both transports carry it:
/// `{:read, path}`, `{:write, path, content}`, `{:list, path}`,
/// `{:mkdir, path, parents}`, `{:remove, path, recursive}`,
/// `{:rename, from, to}`, `{:stat, path}`, and for a session with
/// `:soft_delete` (its trash directory is `trash`) `{:trash}` and
/// `{:undelete, path}` (see `session/trash.rs`). The answer is `:ok`,
/// `{:ok, data | [{name, kind}] | {kind, size} | entries}` or
/// `{:error, message | atom}`. Blocks the calling thread until the
/// filesystem answers.
pub fn call(fs: &Arc<dyn FileSystem>, trash: Option<&str>, request: &Value) -> Value {
    if let Some(answer) = crate::session::trash::call(fs, trash, request) {
        return answer;
    }
    match dispatch(fs, request) {
        Ok(value) => value,
        Err(failure) => failure.to_value(),
    }
}

fn dispatch(fs: &Arc<dyn FileSystem>, request: &Value) -> FsResult<Value> {
    let items = request.elements()?;
    let arg = |i: usize| items.get(i).ok_or("missing argument".to_string());
    let path = || String::from_value(arg(1)?);
    let flag = || bool::from_value(arg(2)?);
    let done = |r: FsResult<()>| r.map(|()| Value::ok());
    match items.first().and_then(Value::as_atom) {
        Some("read") => read(fs, &path()?).map(|data| Value::ok_with(Value::Binary(data))),
        Some("write") => done(write(fs, &path()?, &Bytes::from_value(arg(2)?)?.0)),
        Some("list") => list(fs, &path()?).map(|entries| {
            let entries = entries
                .into_iter()
                .map(|(name, kind)| Value::tuple([name.into(), Value::atom(kind)]));
            Value::ok_with(Value::List(entries.collect()))
        }),
        Some("mkdir") => done(mkdir(fs, &path()?, flag()?)),
        Some("remove") => done(remove(fs, &path()?, flag()?)),
        Some("rename") => done(rename(fs, &path()?, &String::from_value(arg(2)?)?)),
        Some("stat") => stat(fs, &path()?)
            .map(|(kind, size)| Value::ok_with(Value::tuple([Value::atom(kind), size.into()]))),
        _ => Err(format!("unknown filesystem request {request:?}").into()),
    }
}

/// The filesystem API in the node; on a dirty IO scheduler because host
/// mounts may block.
#[rustler::nif(schedule = "DirtyIo")]
fn fs_call<'a>(env: Env<'a>, handle: Handle, request: Term<'a>) -> Term<'a> {
    let answer = match Value::from_term(request) {
        Ok(request) => call(
            &handle.session.fs(),
            handle.session.config().soft_delete.as_deref(),
            &request,
        ),
        Err(message) => Value::error(message),
    };
    answer.to_term(env)
}
