//! Tar archives in and out of a session's filesystem: `rootfs:` (seeding),
//! `Session.export_tar/3` and the canonical form of an `ExBashkit.Image`.
//!
//! Reading is all-or-nothing: `parse` validates the whole archive (names,
//! links, types, the filesystem limits) into a list of entries before
//! anything is written, and the entries are then applied with bashkit's
//! `vfs_restore`, which validates again and replaces the layer's contents
//! atomically. So a refused archive leaves nothing behind.
//!
//! What is refused: bytes that are not a (gzipped) tar; member names that
//! are absolute, contain `..` or are not UTF-8; a relative symlink whose
//! target climbs above the root; a hard link to anything but an earlier
//! regular file of the same archive; a member beneath a file or symlink
//! member; device nodes; and an archive past the filesystem limits (file
//! size, total bytes, file and directory counts, path length). Absolute
//! symlink targets are kept: the session's filesystem is the whole world,
//! so `/bin/sh` names the session's own `/bin/sh` (as a rootfs needs).
//! Members under `dev/` and `proc/` are skipped: those trees are virtual.
//! A long-name or extended header (GNU `L`/`K`, pax `x`/`g`) past 64 KiB
//! is refused before it is read (`check_extension_headers`): the `tar`
//! crate reads such a header whole, and a 97 KB gzip can hold a 100 MB
//! name. Messages quote at most `nif::error::MAX_MESSAGE_BYTES`.
//!
//! Writing walks a filesystem layer *below* bashkit's system layer and
//! mounts (see `session.rs`), without following symlinks, in name order:
//! directories (empty ones included), regular files with their modes and
//! symlinks with their targets.

use std::collections::BTreeMap;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use bashkit::{FileSystem, FileType, FsLimits, VfsEntry, VfsEntryKind, VfsSnapshot};

use crate::nif::error::bounded;

/// Trees a session synthesizes; archives neither bring nor carry them.
const VIRTUAL_TREES: &[&str] = &["dev", "proc"];

/// One validated member, by its absolute path.
#[derive(Debug, Clone)]
enum Member {
    Dir(u32),
    File(Content, u32),
    Symlink(String),
}

/// A regular member's content: read out, or where it lies in the archive
/// (`parse_in_place`).
#[derive(Debug, Clone)]
enum Content {
    Read(Vec<u8>),
    InArchive(Range<usize>),
}

impl Content {
    fn len(&self) -> u64 {
        match self {
            Content::Read(bytes) => bytes.len() as u64,
            Content::InArchive(range) => range.len() as u64,
        }
    }
}

/// Where each regular file's content lies in an archive (`parse_in_place`).
pub type ContentRanges = BTreeMap<PathBuf, Range<usize>>;

/// A counting reader, so that an archive cut short by the size cap is told
/// apart from a corrupt one.
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Err(std::io::Error::other(TOO_LARGE));
        }
        let max = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..max])?;
        self.left -= n as u64;
        Ok(n)
    }
}

const TOO_LARGE: &str = "archive larger than the filesystem limits allow";

/// The most tar bytes an archive within `limits` can take: its content plus
/// headers (and long-name records) for as many members as the limits allow.
fn byte_cap(limits: &FsLimits) -> u64 {
    let members = limits.max_file_count.saturating_add(limits.max_dir_count);
    limits
        .max_total_bytes
        .saturating_add(members.saturating_mul(3 * 512))
        .saturating_add(1 << 20)
}

/// The most bytes a long-name or extended header may hold: a name within
/// any path limit, and pax records for it, fit with room to spare.
const MAX_EXTENSION_HEADER: u64 = 64 * 1024;

/// Validate `bytes` (a tar, or a gzipped tar) into filesystem entries, with
/// implicit parent directories added.
pub fn parse(bytes: &[u8], limits: &FsLimits) -> Result<Vec<VfsEntry>, String> {
    let members = members_of(bytes, limits, false).map_err(bounded)?;
    to_entries(members, limits)
        .map(|(entries, _)| entries)
        .map_err(bounded)
}

/// `parse` for an uncompressed tar whose bytes are kept (an image's
/// canonical tar): regular files come out empty, and where their content
/// lies in `bytes` comes beside them, so that nothing is copied.
pub fn parse_in_place(
    bytes: &[u8],
    limits: &FsLimits,
) -> Result<(Vec<VfsEntry>, ContentRanges), String> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        return Err("invalid tar archive: compressed, where an uncompressed one is needed".into());
    }
    let members = members_of(bytes, limits, true).map_err(bounded)?;
    to_entries(members, limits).map_err(bounded)
}

/// The validated members of `bytes` (a tar, or a gzipped tar unless
/// `in_place`).
fn members_of(
    bytes: &[u8],
    limits: &FsLimits,
    in_place: bool,
) -> Result<BTreeMap<String, Member>, String> {
    let cap = byte_cap(limits);
    let gzipped = bytes.starts_with(&[0x1f, 0x8b]);
    let open = || {
        let reader: Box<dyn Read + '_> = if gzipped {
            Box::new(flate2::read::GzDecoder::new(bytes))
        } else {
            Box::new(bytes)
        };
        Capped {
            inner: reader,
            left: cap,
        }
    };
    check_extension_headers(open()).map_err(|e| format!("invalid tar archive: {e}"))?;
    let reader = open();
    let (members, seen_any) =
        read_members(reader, limits, in_place).map_err(|e| format!("invalid tar archive: {e}"))?;
    // `tar` takes a short read at the start for the end of an empty
    // archive; an empty archive is zero blocks, anything else is garbage.
    if !seen_any && !gzipped && bytes.iter().any(|b| *b != 0) {
        return Err("invalid tar archive: no tar header found".into());
    }
    Ok(members)
}

/// Refuse a long-name or extended header past `MAX_EXTENSION_HEADER`, by
/// its size, before the real pass reads it whole. A raw pass (no header
/// processed) sees the layout the real pass sees until a member whose
/// layout the real pass reads differently: a GNU sparse member (extension
/// blocks) or a pax `size` override; there it stops, the byte cap still
/// bounding what follows.
fn check_extension_headers(reader: impl Read) -> Result<(), String> {
    let mut archive = tar::Archive::new(reader);
    let entries = archive.entries().map_err(|e| e.to_string())?.raw(true);
    for entry in entries {
        // Malformed archives are the real pass's to describe.
        let Ok(mut entry) = entry else {
            return Ok(());
        };
        let kind = entry.header().entry_type();
        let extension = kind.is_gnu_longname()
            || kind.is_gnu_longlink()
            || kind.is_pax_local_extensions()
            || kind.is_pax_global_extensions();
        if extension && entry.size() > MAX_EXTENSION_HEADER {
            return Err(format!(
                "a long-name or extended header of {} bytes ({MAX_EXTENSION_HEADER} at most)",
                entry.size()
            ));
        }
        if kind.is_gnu_sparse() {
            return Ok(());
        }
        if kind.is_pax_local_extensions() {
            let Ok(Some(extensions)) = entry.pax_extensions() else {
                return Ok(());
            };
            if extensions.flatten().any(|e| e.key_bytes() == b"size") {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The members by absolute path, and whether the archive had any entry.
/// With `in_place`, a regular member's content is not read but located
/// (the reader must then be the archive's own uncompressed bytes).
fn read_members(
    reader: impl Read,
    limits: &FsLimits,
    in_place: bool,
) -> Result<(BTreeMap<String, Member>, bool), String> {
    let mut archive = tar::Archive::new(reader);
    let mut members: BTreeMap<String, Member> = BTreeMap::new();
    let mut total: u64 = 0;
    let entries = archive.entries().map_err(|e| e.to_string())?;
    let mut seen_any = false;
    for entry in entries {
        let mut entry = entry.map_err(|e| e.to_string())?;
        seen_any = true;
        let header = entry.header();
        let kind = header.entry_type();
        let mode = header.mode().map_err(|e| e.to_string())? & 0o7777;
        let raw = entry.path_bytes().into_owned();
        let Some(path) = member_path(&raw)? else {
            continue; // the archive's root (`./`) itself
        };
        if VIRTUAL_TREES
            .iter()
            .any(|t| path == format!("/{t}") || path.starts_with(&format!("/{t}/")))
        {
            continue;
        }
        limits
            .validate_path(Path::new(&path))
            .map_err(|e| format!("member {path}: {e}"))?;
        let member = match kind {
            tar::EntryType::Directory => Member::Dir(mode),
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                let size = entry.size();
                if size > limits.max_file_size {
                    return Err(format!(
                        "member {path}: {size} bytes exceeds the {} byte file size limit",
                        limits.max_file_size
                    ));
                }
                total = total.saturating_add(size);
                if total > limits.max_total_bytes {
                    return Err(format!(
                        "{TOO_LARGE} ({} bytes at most)",
                        limits.max_total_bytes
                    ));
                }
                let content = if in_place {
                    let start = usize::try_from(entry.raw_file_position()).unwrap_or(usize::MAX);
                    let len = usize::try_from(size).unwrap_or(usize::MAX);
                    Content::InArchive(start..start.saturating_add(len))
                } else {
                    let mut content = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
                    entry
                        .read_to_end(&mut content)
                        .map_err(|e| format!("member {path}: {e}"))?;
                    Content::Read(content)
                };
                Member::File(content, mode)
            }
            tar::EntryType::Symlink => {
                let target = link_name(&entry, &path)?;
                check_symlink(&path, &target)?;
                Member::Symlink(target)
            }
            tar::EntryType::Link => {
                let target = link_name(&entry, &path)?;
                let target = member_path(target.as_bytes())?
                    .ok_or_else(|| format!("hard link {path} names the archive's root"))?;
                match members.get(&target) {
                    Some(Member::File(content, _)) => {
                        total = total.saturating_add(content.len());
                        Member::File(content.clone(), mode)
                    }
                    _ => {
                        return Err(format!(
                            "hard link {path} must name an earlier regular file of the archive, \
                             not {target}"
                        ))
                    }
                }
            }
            tar::EntryType::Fifo => Member::File(Content::Read(Vec::new()), mode),
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => continue,
            other => {
                return Err(format!(
                    "member {path} is of an unsupported type ({other:?}); only directories, \
                     regular files, symlinks and hard links are"
                ))
            }
        };
        // A later member of the same name replaces an earlier one (tar's own
        // rule); a directory replaced by a file must not keep its children.
        if matches!(member, Member::File(..) | Member::Symlink(_)) {
            let prefix = format!("{path}/");
            if members
                .range(prefix.clone()..)
                .next()
                .is_some_and(|(k, _)| k.starts_with(&prefix))
            {
                return Err(format!(
                    "member {path} replaces a directory that has members"
                ));
            }
        }
        members.insert(path, member);
    }
    Ok((members, seen_any))
}

fn link_name<R: Read>(entry: &tar::Entry<'_, R>, path: &str) -> Result<String, String> {
    let raw = entry
        .link_name_bytes()
        .ok_or_else(|| format!("link {path} has no target"))?;
    String::from_utf8(raw.into_owned()).map_err(|_| format!("link {path}: target is not UTF-8"))
}

/// The absolute path of a member named `raw`, or `None` for the root.
fn member_path(raw: &[u8]) -> Result<Option<String>, String> {
    let name = std::str::from_utf8(raw).map_err(|_| "a member name is not UTF-8".to_string())?;
    if name.starts_with('/') {
        return Err(format!("member {name} has an absolute name"));
    }
    let mut parts = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(format!("member {name} has a `..` component")),
            part if part.contains('\0') => return Err("a member name holds a NUL byte".into()),
            part => parts.push(part),
        }
    }
    Ok((!parts.is_empty()).then(|| format!("/{}", parts.join("/"))))
}

/// A relative target may not climb above the root from the link's directory.
fn check_symlink(path: &str, target: &str) -> Result<(), String> {
    if target.is_empty() {
        return Err(format!("symlink {path} has an empty target"));
    }
    if target.starts_with('/') {
        return Ok(());
    }
    // Depth of the link's directory below the root.
    let mut depth = path.matches('/').count() as i64 - 1;
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!(
                        "symlink {path} -> {target} points outside the archive's root"
                    ));
                }
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

/// The entries (parents first), and where the content of each member read
/// in place lies.
fn to_entries(
    members: BTreeMap<String, Member>,
    limits: &FsLimits,
) -> Result<(Vec<VfsEntry>, ContentRanges), String> {
    let mut dirs: BTreeMap<String, u32> = BTreeMap::new();
    let mut files = 0u64;
    for (path, member) in &members {
        // Every ancestor must be a directory: implicit ones are created,
        // a file or symlink in the way is refused (writing beneath a symlink
        // would put a member somewhere else than its name says).
        let mut ancestor = Path::new(path).parent();
        while let Some(dir) = ancestor {
            let dir_str = dir.to_string_lossy();
            if dir_str == "/" {
                break;
            }
            match members.get(dir_str.as_ref()) {
                Some(Member::Dir(_)) | None => {
                    dirs.entry(dir_str.into_owned()).or_insert(0o755);
                }
                Some(_) => {
                    return Err(format!(
                        "member {path} lies beneath {dir_str}, which is not a directory"
                    ))
                }
            }
            ancestor = dir.parent();
        }
        match member {
            Member::Dir(mode) => {
                dirs.insert(path.clone(), *mode);
            }
            _ => files += 1,
        }
    }
    if files > limits.max_file_count {
        return Err(format!(
            "{TOO_LARGE}: {files} files, {} at most",
            limits.max_file_count
        ));
    }
    if dirs.len() as u64 > limits.max_dir_count {
        return Err(format!(
            "{TOO_LARGE}: {} directories, {} at most",
            dirs.len(),
            limits.max_dir_count
        ));
    }
    let mut out: Vec<VfsEntry> = dirs
        .into_iter()
        .map(|(path, mode)| VfsEntry {
            path: PathBuf::from(path),
            kind: VfsEntryKind::Directory,
            mode,
        })
        .collect();
    let mut ranges = ContentRanges::new();
    for (path, member) in members {
        let (kind, mode) = match member {
            Member::Dir(_) => continue,
            Member::File(Content::Read(content), mode) => (VfsEntryKind::File { content }, mode),
            Member::File(Content::InArchive(range), mode) => {
                ranges.insert(PathBuf::from(&path), range);
                (
                    VfsEntryKind::File {
                        content: Vec::new(),
                    },
                    mode,
                )
            }
            Member::Symlink(target) => (
                VfsEntryKind::Symlink {
                    target: PathBuf::from(target),
                },
                0o777,
            ),
        };
        out.push(VfsEntry {
            path: PathBuf::from(path),
            kind,
            mode,
        });
    }
    Ok((out, ranges))
}

/// Lay `entries` over what `fs` holds now (same path: the entry wins) and
/// restore the result into `fs` in one validated step.
pub fn overlay_entries(fs: &dyn FileSystem, entries: Vec<VfsEntry>) -> Result<(), String> {
    let current = fs
        .vfs_snapshot()
        .ok_or("this session's filesystem cannot be seeded from an archive")?;
    let mut merged: BTreeMap<PathBuf, VfsEntry> = current
        .entries()
        .iter()
        .map(|e| (e.path.clone(), e.clone()))
        .collect();
    for entry in entries {
        // An archive member replaces a default directory or file entirely.
        if !matches!(entry.kind, VfsEntryKind::Directory) {
            let prefix = entry.path.clone();
            merged.retain(|p, _| !p.starts_with(&prefix) || *p == prefix);
        }
        merged.insert(entry.path.clone(), entry);
    }
    fs.vfs_restore(&VfsSnapshot::from_entries(merged.into_values().collect()))
        .map_err(|e| bounded(format!("archive past the filesystem limits: {e}")))
}

/// How `write` names members and stamps times.
pub struct WriteOptions<'a> {
    /// Subtrees left out (mount points: their content is not this layer's).
    pub skip: &'a [String],
    /// Modification times from the filesystem; `false` writes 0 (the
    /// canonical form of an image, whose identity must not depend on when
    /// it was built).
    pub mtimes: bool,
}

/// A tar of `root` in `fs` (members named relative to `root`, like
/// `tar -C root .`; a file `root` gives one member, its base name).
pub async fn write(
    fs: &dyn FileSystem,
    root: &str,
    options: &WriteOptions<'_>,
) -> Result<Vec<u8>, String> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.mode(tar::HeaderMode::Complete);
    let meta = fs
        .stat(Path::new(root))
        .await
        .map_err(|e| crate::result::bashkit_errors::describe_fs(root, &e))?;
    if meta.file_type.is_dir() {
        // Every path first, then in path order: a directory precedes what
        // it holds, and the output does not depend on listing order.
        let mut found: Vec<(String, bashkit::Metadata)> = Vec::new();
        let mut pending = vec![root.to_string()];
        while let Some(dir) = pending.pop() {
            let children = fs
                .read_dir(Path::new(&dir))
                .await
                .map_err(|e| crate::result::bashkit_errors::describe_fs(&dir, &e))?;
            for child in children {
                let path = join(&dir, &child.name);
                if skipped(&path, options.skip) {
                    continue;
                }
                // `read_dir` of an overlay may report the upper entry's
                // type; stat again for the exact metadata.
                let meta = fs.stat(Path::new(&path)).await.unwrap_or(child.metadata);
                if meta.file_type.is_dir() {
                    pending.push(path.clone());
                }
                found.push((path, meta));
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, meta) in found {
            let name = relative(root, &path);
            append(&mut builder, fs, &path, &name, &meta, options).await?;
        }
    } else {
        let name = Path::new(root)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".into());
        append(&mut builder, fs, root, &name, &meta, options).await?;
    }
    builder.into_inner().map_err(|e| e.to_string())
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn relative(root: &str, path: &str) -> String {
    let rest = if root == "/" {
        &path[1..]
    } else {
        &path[root.len() + 1..]
    };
    rest.to_string()
}

fn skipped(path: &str, skip: &[String]) -> bool {
    let top = path.trim_start_matches('/');
    VIRTUAL_TREES
        .iter()
        .any(|t| top == *t || top.starts_with(&format!("{t}/")))
        || skip
            .iter()
            .any(|s| path == s || path.starts_with(&format!("{}/", s.trim_end_matches('/'))))
}

async fn append(
    builder: &mut tar::Builder<Vec<u8>>,
    fs: &dyn FileSystem,
    path: &str,
    name: &str,
    meta: &bashkit::Metadata,
    options: &WriteOptions<'_>,
) -> Result<(), String> {
    let mut header = tar::Header::new_gnu();
    header.set_mode(meta.mode & 0o7777);
    header.set_uid(0);
    header.set_gid(0);
    let mtime = match options.mtimes {
        true => meta
            .modified
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        false => 0,
    };
    header.set_mtime(mtime);
    let io = |e: std::io::Error| format!("cannot write {path} to the archive: {e}");
    match meta.file_type {
        FileType::Directory => {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_size(0);
            builder
                .append_data(&mut header, format!("{name}/"), std::io::empty())
                .map_err(io)
        }
        FileType::Symlink => {
            let target = fs
                .read_link(Path::new(path))
                .await
                .map_err(|e| crate::result::bashkit_errors::describe_fs(path, &e))?;
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_size(0);
            header.set_mode(0o777);
            builder.append_link(&mut header, name, &target).map_err(io)
        }
        FileType::File | FileType::Fifo => {
            let content = fs
                .read_file(Path::new(path))
                .await
                .map_err(|e| crate::result::bashkit_errors::describe_fs(path, &e))?;
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(content.len() as u64);
            builder
                .append_data(&mut header, name, content.as_slice())
                .map_err(io)
        }
    }
}

/// `bytes` gzipped.
pub fn gzip(bytes: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).map_err(|e| e.to_string())?;
    encoder.finish().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        build(&mut builder);
        builder.into_inner().unwrap()
    }

    fn file(builder: &mut tar::Builder<Vec<u8>>, name: &str, content: &[u8]) {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o640);
        header.set_entry_type(tar::EntryType::Regular);
        // Bypass the builder's own name checks: hostile names are the point.
        let bytes = name.as_bytes();
        header.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
        header.set_cksum();
        builder.append(&header, content).unwrap();
    }

    fn long_named(name: &str) -> Vec<u8> {
        tar_of(|b| {
            let mut header = tar::Header::new_gnu();
            header.set_size(1);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut header, name, &b"x"[..]).unwrap();
        })
    }

    #[test]
    fn a_huge_long_name_is_refused_unread_with_a_short_message() {
        let limits = FsLimits::default();
        let huge = format!("/{}", "a".repeat(4 << 20));
        for bytes in [
            long_named(&huge[1..]),
            gzip(&long_named(&huge[1..])).unwrap(),
        ] {
            let error = parse(&bytes, &limits).unwrap_err();
            assert!(error.contains("long-name or extended header"), "{error}");
            assert!(
                error.len() <= crate::nif::error::MAX_MESSAGE_BYTES,
                "{}",
                error.len()
            );
        }
        // Past the path limit but within the header cap: refused by the
        // limit, quoted short.
        let long = "b/".repeat(20_000) + "c";
        let error = parse(&long_named(&long), &limits).unwrap_err();
        assert!(
            error.len() < crate::nif::error::MAX_MESSAGE_BYTES + 40,
            "{error}"
        );
        // An ordinary long name still reads.
        let name = "d/".repeat(60) + "e";
        let entries = parse(&long_named(&name), &limits).unwrap();
        assert!(entries
            .iter()
            .any(|e| e.path == Path::new(&format!("/{name}"))));
    }

    #[test]
    fn refuses_absolute_and_dotdot_names() {
        let limits = FsLimits::default();
        for name in ["/etc/x", "a/../../x", "../x"] {
            let bytes = tar_of(|b| file(b, name, b"x"));
            let error = parse(&bytes, &limits).unwrap_err();
            assert!(
                error.contains("absolute") || error.contains(".."),
                "{error}"
            );
        }
    }

    #[test]
    fn symlink_escape_is_lexical_from_the_link_directory() {
        assert!(check_symlink("/a/b", "../c").is_ok());
        assert!(check_symlink("/a/b", "../../c").is_err());
        assert!(check_symlink("/a", "/etc/passwd").is_ok());
    }

    #[test]
    fn adds_implicit_parents() {
        let bytes = tar_of(|b| file(b, "x/y/z.txt", b"hi"));
        let entries = parse(&bytes, &FsLimits::default()).unwrap();
        let paths: Vec<_> = entries.iter().map(|e| e.path.clone()).collect();
        assert!(paths.contains(&PathBuf::from("/x")));
        assert!(paths.contains(&PathBuf::from("/x/y")));
        assert!(paths.contains(&PathBuf::from("/x/y/z.txt")));
    }
}
