//! A host directory as a bashkit filesystem backend (`:mounts`), with every
//! host access resolved atomically beneath the mount root.
//!
//! Why not bashkit's `RealFs`: it checks a path (canonicalize, compare with
//! the root) and then uses it, two steps a process on the host can race by
//! swapping a file or directory for a symlink in between; it copies host
//! modes (setuid included) onto what scripts write; it removes or renames
//! the mount root itself; it shows host symlink targets verbatim; and it
//! reads any file whole into memory.
//!
//! Here each mount holds a directory handle on its root, opened once. Every
//! operation walks from that handle with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)` (or, where the kernel lacks it, one
//! `openat(O_NOFOLLOW)` per component) to the parent directory, then acts on
//! the last component relative to that parent's handle with the no-follow
//! form of the call. The host never follows a symlink for us: a link on the
//! way fails the walk, and bashkit's symlink layer (`FollowFs`, outermost in
//! every session) resolves it in the sandbox's namespace and retries with a
//! link-free path. So there is no window in which a swapped entry can lead
//! a read or a write outside the mount.
//!
//! What scripts may do to the host is narrowed further:
//! * modes are masked to `0o777` on every create, write, copy and chmod
//!   (no setuid, setgid or sticky bit can be planted);
//! * the mount root cannot be removed or renamed (its contents can:
//!   `rm -rf /mnt` empties it and fails with "Device or resource busy", as
//!   for a real mount point);
//! * symlink targets are shown as sandbox paths: an absolute host target
//!   inside the mount is rewritten to the path the sandbox sees, one outside
//!   it is not shown at all (the link reads as dangling: "No such file or
//!   directory", the 404 principle);
//! * a file larger than the session's `max_file_size` is refused before any
//!   byte is read, and FIFOs, sockets and devices are never read.

use std::ffi::OsStr;
use std::io::{Error as IoError, ErrorKind, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bashkit::{DirEntry, FileType, FsBackend, FsLimits, FsUsage, Metadata};
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

/// Permission bits a script may set on the host: no setuid, setgid, sticky.
const PERMISSION_BITS: u32 = 0o777;
/// Mode of a file a script creates (before the process umask).
const NEW_FILE_MODE: u32 = 0o666;
/// Mode of a directory a script creates (before the process umask).
const NEW_DIR_MODE: u32 = 0o777;
/// Deepest directory tree `remove(recursive)` descends (one open handle per
/// level): deeper trees fail rather than exhaust descriptors.
const MAX_REMOVE_DEPTH: usize = 512;

/// The message `errors.rs` and the tests know for a read-only mount.
const READ_ONLY: &str = "realfs is mounted readonly";

static TEMP_SEQUENCE: AtomicU64 = AtomicU64::new(0);
/// Set once `openat2` turned out to be unavailable (old kernel, seccomp).
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// One mounted host directory.
pub struct HostFs {
    /// Handle on the mount root, opened once: every access starts here.
    root: OwnedFd,
    /// The canonical host path of the root (to recognise absolute symlink
    /// targets that point inside the mount).
    host_root: PathBuf,
    /// Where the sandbox sees the root (to show those targets).
    vfs_root: PathBuf,
    writable: bool,
    /// Reads of files larger than this are refused before reading.
    max_read: u64,
}

impl HostFs {
    /// Open `host_root` (canonical, already judged by the mount gate) as the
    /// root of a mount the sandbox sees at `vfs_root`.
    pub fn open(
        host_root: &Path,
        vfs_root: &Path,
        writable: bool,
        max_read: u64,
    ) -> std::io::Result<Self> {
        let root = rustix::fs::open(
            host_root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self {
            root,
            host_root: host_root.to_path_buf(),
            vfs_root: bashkit::normalize_path(vfs_root),
            writable,
            max_read,
        })
    }

    fn check_writable(&self) -> std::io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(IoError::new(ErrorKind::PermissionDenied, READ_ONLY))
        }
    }

    /// A handle on the directory `components` name (relative to the root),
    /// opened with `flags`, without following any symlink on the way.
    fn open_dir(&self, components: &[&OsStr], flags: OFlags) -> std::io::Result<OwnedFd> {
        let flags = flags | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        if components.is_empty() {
            return Ok(rustix::fs::openat(&self.root, ".", flags, Mode::empty())?);
        }
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            let mut joined = Vec::new();
            for (i, component) in components.iter().enumerate() {
                if i > 0 {
                    joined.push(b'/');
                }
                joined.extend_from_slice(component.as_bytes());
            }
            let resolve =
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
            match rustix::fs::openat2(
                &self.root,
                OsStr::from_bytes(&joined),
                flags,
                Mode::empty(),
                resolve,
            ) {
                Ok(fd) => return Ok(fd),
                // Not supported here: walk instead, from now on.
                Err(Errno::NOSYS) | Err(Errno::PERM) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                }
                // EAGAIN: a rename raced the lookup; the walk is exact.
                Err(Errno::AGAIN) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.walk(components, flags)
    }

    /// The portable walk: one `openat(O_NOFOLLOW | O_DIRECTORY)` per
    /// component, each relative to the previous handle. A symlink fails it
    /// (`ENOTDIR`, `ELOOP`); `..` never reaches here (paths are normalized).
    fn walk(&self, components: &[&OsStr], flags: OFlags) -> std::io::Result<OwnedFd> {
        let step = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut current: Option<OwnedFd> = None;
        for (i, component) in components.iter().enumerate() {
            let last = i + 1 == components.len();
            let dir = current.as_ref().map_or(self.root.as_fd(), AsFd::as_fd);
            let next = rustix::fs::openat(
                dir,
                *component,
                if last { flags } else { step },
                Mode::empty(),
            )?;
            current = Some(next);
        }
        current.ok_or_else(|| IoError::other("empty walk"))
    }

    /// The handle of `path`'s parent directory and `path`'s last component;
    /// `None` for the mount root itself.
    fn parent(&self, path: &Path) -> std::io::Result<Option<(OwnedFd, Vec<u8>)>> {
        let components = components(path)?;
        match components.split_last() {
            None => Ok(None),
            Some((leaf, parents)) => {
                let dir = self.open_dir(parents, OFlags::PATH)?;
                Ok(Some((dir, leaf.as_bytes().to_vec())))
            }
        }
    }

    /// `parent`, failing for the mount root with "Device or resource busy":
    /// the root is not the script's to remove, rename or replace.
    fn parent_not_root(&self, path: &Path) -> std::io::Result<(OwnedFd, Vec<u8>)> {
        self.parent(path)?.ok_or_else(mount_root_busy)
    }

    fn lstat(&self, path: &Path) -> std::io::Result<Stat> {
        match self.parent(path)? {
            None => Ok(rustix::fs::fstat(&self.root)?),
            Some((dir, leaf)) => Ok(rustix::fs::statat(
                &dir,
                OsStr::from_bytes(&leaf),
                AtFlags::SYMLINK_NOFOLLOW,
            )?),
        }
    }

    /// Open the regular file `leaf` in `dir` for reading, refusing symlinks
    /// (bashkit follows them in the sandbox), FIFOs, sockets and devices.
    fn open_regular(dir: BorrowedFd<'_>, leaf: &[u8]) -> std::io::Result<(std::fs::File, Stat)> {
        let name = OsStr::from_bytes(leaf);
        // Judge the entry before opening it: opening a device can have
        // effects of its own. The handle is checked again below.
        refuse_special(&rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?)?;
        let fd = rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let stat = rustix::fs::fstat(&fd)?;
        refuse_special(&stat)?;
        Ok((std::fs::File::from(fd), stat))
    }

    /// Write a new file beside `leaf` in `dir` with `fill`, then rename it
    /// over `leaf`: readers see the old or the new content, never a part,
    /// and an existing entry (a symlink included) is replaced, not followed.
    ///
    /// `mode` (special bits masked) is the new file's; `None` creates it
    /// with the default mode under the process umask.
    fn replace(
        dir: BorrowedFd<'_>,
        leaf: &[u8],
        mode: Option<u32>,
        fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let initial = if mode.is_some() { 0o600 } else { NEW_FILE_MODE };
        let (temporary, mut file) = temporary_sibling(dir, initial)?;
        let result = (|| {
            fill(&mut file)?;
            file.flush()?;
            // The rename must not expose a file the crash could empty.
            file.sync_all()?;
            if let Some(mode) = mode {
                rustix::fs::fchmod(&file, Mode::from_raw_mode(mode & PERMISSION_BITS))?;
            }
            drop(file);
            rustix::fs::renameat(
                dir,
                OsStr::from_bytes(&temporary),
                dir,
                OsStr::from_bytes(leaf),
            )?;
            Ok(())
        })();
        if result.is_err() {
            let _ = rustix::fs::unlinkat(dir, OsStr::from_bytes(&temporary), AtFlags::empty());
        }
        result
    }

    /// The mode a rewrite of `leaf` keeps: the existing file's permission
    /// bits (special bits masked), or `None` for a new file (the default
    /// mode under the process umask). A symlink there is refused.
    fn kept_mode(dir: BorrowedFd<'_>, leaf: &[u8]) -> std::io::Result<Option<u32>> {
        match rustix::fs::statat(dir, OsStr::from_bytes(leaf), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if is_symlink(&stat) => Err(write_through_symlink()),
            Ok(stat) => Ok(Some(stat.st_mode & PERMISSION_BITS)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Remove everything inside the directory `dir`, not following links.
    fn remove_contents(dir: BorrowedFd<'_>, depth: usize) -> std::io::Result<()> {
        if depth > MAX_REMOVE_DEPTH {
            return Err(IoError::other("directory tree too deep to remove"));
        }
        let listing = rustix::fs::openat(
            dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::new(listing)? {
            let name = entry?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                names.push(name);
            }
        }
        for name in names {
            Self::remove_entry(dir, &name, true, depth + 1)?;
        }
        Ok(())
    }

    /// Remove `name` in `dir`: a link or file is unlinked, a directory
    /// removed (with its contents when `recursive`).
    fn remove_entry(
        dir: BorrowedFd<'_>,
        name: &[u8],
        recursive: bool,
        depth: usize,
    ) -> std::io::Result<()> {
        let os_name = OsStr::from_bytes(name);
        let stat = match rustix::fs::statat(dir, os_name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            // Gone already (removed concurrently): nothing to do.
            Err(Errno::NOENT) if depth > 0 => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if kind(&stat) == FileType::Directory {
            if recursive {
                let child = rustix::fs::openat(
                    dir,
                    os_name,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                Self::remove_contents(child.as_fd(), depth)?;
            }
            rustix::fs::unlinkat(dir, os_name, AtFlags::REMOVEDIR)?;
        } else {
            rustix::fs::unlinkat(dir, os_name, AtFlags::empty())?;
        }
        Ok(())
    }

    /// What the sandbox is shown for a link's stored `target`.
    fn shown_target(&self, target: PathBuf) -> std::io::Result<PathBuf> {
        if !target.has_root() {
            // Relative: resolved by bashkit from the link's sandbox path.
            return Ok(target);
        }
        let lexical = lexical_normalize(&target);
        match lexical.strip_prefix(&self.host_root) {
            Ok(inside) if inside.as_os_str().is_empty() => Ok(self.vfs_root.clone()),
            Ok(inside) => Ok(self.vfs_root.join(inside)),
            // The 404 principle: what lies outside every mount is absent,
            // not forbidden ("not found" is rendered as the errno's text).
            Err(_) => Err(IoError::new(ErrorKind::NotFound, "not found")),
        }
    }

    /// Refuse a symlink `target` that would lead a host process following
    /// the link out of the mount: absolute targets, `..`, and targets that
    /// go through a symlink that already exists.
    fn check_symlink_target(dir: BorrowedFd<'_>, target: &Path) -> std::io::Result<()> {
        if target.has_root() {
            return Err(IoError::new(
                ErrorKind::PermissionDenied,
                "symlink with absolute target not allowed on a host mount (sandbox security)",
            ));
        }
        if target
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
        {
            return Err(IoError::new(
                ErrorKind::PermissionDenied,
                "symlink target with parent components not allowed on a host mount (sandbox security)",
            ));
        }
        let names: Vec<&OsStr> = target
            .components()
            .filter_map(|c| match c {
                Component::Normal(name) => Some(name),
                _ => None,
            })
            .collect();
        let mut current: Option<OwnedFd> = None;
        for (i, name) in names.iter().enumerate() {
            let here = current.as_ref().map_or(dir, AsFd::as_fd);
            match rustix::fs::statat(here, *name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) if is_symlink(&stat) => {
                    return Err(IoError::new(
                        ErrorKind::PermissionDenied,
                        "symlink target through another symlink not allowed on a host mount \
                         (sandbox security)",
                    ))
                }
                Ok(stat) if kind(&stat) == FileType::Directory && i + 1 < names.len() => {
                    current = Some(rustix::fs::openat(
                        here,
                        *name,
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )?);
                }
                // A file, or a path that does not exist (yet): a later
                // host-side link there is the host's own doing.
                _ => break,
            }
        }
        Ok(())
    }
}

fn mount_root_busy() -> IoError {
    IoError::new(
        ErrorKind::ResourceBusy,
        "Device or resource busy (the mount root itself cannot be removed, renamed or replaced)",
    )
}

fn write_through_symlink() -> IoError {
    IoError::new(
        ErrorKind::PermissionDenied,
        "refusing to create or write through a symlink (sandbox security)",
    )
}

/// The components of a (normalized) mount-relative path. `..` cannot be
/// expressed beneath a handle and is refused.
fn components(path: &Path) -> std::io::Result<Vec<&OsStr>> {
    let mut out = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(name) => out.push(name),
            Component::ParentDir | Component::Prefix(_) => {
                // Outside the mount: absent (the 404 principle).
                return Err(IoError::new(ErrorKind::NotFound, "not found"));
            }
        }
    }
    Ok(out)
}

/// `path` with `.` and `..` resolved lexically (for host link targets).
fn lexical_normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            _ => {}
        }
    }
    out
}

fn kind(stat: &Stat) -> FileType {
    match rustix::fs::FileType::from_raw_mode(stat.st_mode) {
        rustix::fs::FileType::Directory => FileType::Directory,
        rustix::fs::FileType::Symlink => FileType::Symlink,
        // FIFOs, sockets and devices show as files (as with `RealFs`) and
        // are refused when read.
        _ => FileType::File,
    }
}

fn is_symlink(stat: &Stat) -> bool {
    kind(stat) == FileType::Symlink
}

fn refuse_special(stat: &Stat) -> std::io::Result<()> {
    use rustix::fs::FileType as Host;
    let what = match Host::from_raw_mode(stat.st_mode) {
        Host::Fifo => "a FIFO",
        Host::Socket => "a socket",
        Host::CharacterDevice | Host::BlockDevice => "a device",
        _ => return Ok(()),
    };
    // `Unsupported`: bashkit does not retry it as a possible symlink.
    Err(IoError::new(
        ErrorKind::Unsupported,
        format!("{what} on a host mount cannot be read"),
    ))
}

/// Seconds and nanoseconds of a `stat` time as a `SystemTime`.
#[allow(clippy::unnecessary_cast)] // field widths differ between targets
fn time(seconds: i64, nanos: u64) -> SystemTime {
    let nanos = Duration::from_nanos(nanos.min(999_999_999));
    if seconds >= 0 {
        UNIX_EPOCH + Duration::from_secs(seconds as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs()) + nanos
    }
}

#[allow(clippy::unnecessary_cast)] // field widths differ between targets
fn metadata(stat: &Stat) -> Metadata {
    let file_type = kind(stat);
    let modified = time(stat.st_mtime as i64, stat.st_mtime_nsec as u64);
    Metadata {
        file_type,
        size: if file_type.is_dir() {
            0
        } else {
            stat.st_size as u64
        },
        mode: stat.st_mode & 0o7777,
        modified,
        created: time(stat.st_ctime as i64, stat.st_ctime_nsec as u64),
    }
}

/// Create a new, empty staging file in `dir` (`O_EXCL`, never following)
/// with `mode` (under the process umask).
fn temporary_sibling(dir: BorrowedFd<'_>, mode: u32) -> std::io::Result<(Vec<u8>, std::fs::File)> {
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    for _ in 0..64 {
        let sequence = TEMP_SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            ".ex-bashkit-tmp-{}-{sequence:x}-{stamp:x}",
            std::process::id()
        );
        match rustix::fs::openat(
            dir,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        ) {
            Ok(fd) => return Ok((name.into_bytes(), std::fs::File::from(fd))),
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(IoError::new(
        ErrorKind::AlreadyExists,
        "unable to allocate a staging file",
    ))
}

/// Change the mode of `leaf` in `dir` without following a link there: open
/// the entry itself (`O_PATH | O_NOFOLLOW`) and chmod that exact inode.
fn chmod_entry(dir: BorrowedFd<'_>, leaf: &[u8], mode: u32) -> std::io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        OsStr::from_bytes(leaf),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if is_symlink(&rustix::fs::fstat(&fd)?) {
        // bashkit resolves the link in the sandbox and asks again.
        return Err(IoError::new(ErrorKind::InvalidInput, "is a symbolic link"));
    }
    let mode = Mode::from_raw_mode(mode & PERMISSION_BITS);
    // `fchmod` refuses `O_PATH` handles; the handle's /proc entry names the
    // same inode whatever happens to the directory entry meanwhile.
    let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
    match rustix::fs::chmod(proc_path.as_str(), mode) {
        Ok(()) => Ok(()),
        // No /proc: fall back to a real handle (needs read permission).
        Err(Errno::NOENT) => {
            let fd = rustix::fs::openat(
                dir,
                OsStr::from_bytes(leaf),
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            Ok(rustix::fs::fchmod(&fd, mode)?)
        }
        Err(e) => Err(e.into()),
    }
}

fn read_limited(
    file: &mut std::fs::File,
    size: u64,
    max: u64,
    path: &Path,
) -> std::io::Result<Vec<u8>> {
    let too_large = |size: u64| {
        IoError::new(
            ErrorKind::FileTooLarge,
            format!(
                "file too large to read: {} is {size} bytes, over the sandbox's file size limit \
                 of {max} bytes",
                path.display()
            ),
        )
    };
    if size > max {
        return Err(too_large(size));
    }
    let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    // One byte past the limit tells a file that grew after the stat.
    file.take(max.saturating_add(1)).read_to_end(&mut data)?;
    if data.len() as u64 > max {
        return Err(too_large(data.len() as u64));
    }
    Ok(data)
}

#[async_trait]
impl FsBackend for HostFs {
    async fn read(&self, path: &Path) -> bashkit::Result<Vec<u8>> {
        let Some((dir, leaf)) = self.parent(path)? else {
            return Err(IoError::new(ErrorKind::IsADirectory, "is a directory").into());
        };
        let (mut file, stat) = Self::open_regular(dir.as_fd(), &leaf)?;
        #[allow(clippy::unnecessary_cast)]
        let size = stat.st_size as u64;
        Ok(read_limited(&mut file, size, self.max_read, path)?)
    }

    async fn write(&self, path: &Path, content: &[u8]) -> bashkit::Result<()> {
        self.check_writable()?;
        let (dir, leaf) = self.parent_not_root(path)?;
        let mode = Self::kept_mode(dir.as_fd(), &leaf)?;
        Self::replace(dir.as_fd(), &leaf, mode, |file| file.write_all(content))?;
        Ok(())
    }

    async fn append(&self, path: &Path, content: &[u8]) -> bashkit::Result<()> {
        self.check_writable()?;
        let (dir, leaf) = self.parent_not_root(path)?;
        let mode = Self::kept_mode(dir.as_fd(), &leaf)?;
        let existing = match Self::open_regular(dir.as_fd(), &leaf) {
            Ok((file, _)) => Some(file),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        Self::replace(dir.as_fd(), &leaf, mode, |file| {
            if let Some(mut existing) = existing {
                // Streamed: appending to a large file needs no memory.
                std::io::copy(&mut existing, file)?;
            }
            file.write_all(content)
        })?;
        Ok(())
    }

    async fn mkdir(&self, path: &Path, recursive: bool) -> bashkit::Result<()> {
        self.check_writable()?;
        let names = components(path)?;
        let mode = Mode::from_raw_mode(NEW_DIR_MODE);
        if !recursive {
            let Some((leaf, parents)) = names.split_last() else {
                return Err(IoError::new(ErrorKind::AlreadyExists, "directory exists").into());
            };
            let dir = self.open_dir(parents, OFlags::PATH)?;
            rustix::fs::mkdirat(&dir, *leaf, mode).map_err(IoError::from)?;
            return Ok(());
        }
        // Create each missing level relative to the handle of the one
        // above; an existing symlink fails the next open (not followed).
        let mut current: Option<OwnedFd> = None;
        for name in names {
            let here = current.as_ref().map_or(self.root.as_fd(), AsFd::as_fd);
            match rustix::fs::mkdirat(here, name, mode) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(IoError::from(e).into()),
            }
            current = Some(
                rustix::fs::openat(
                    here,
                    name,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(IoError::from)?,
            );
        }
        Ok(())
    }

    async fn remove(&self, path: &Path, recursive: bool) -> bashkit::Result<()> {
        self.check_writable()?;
        match self.parent(path)? {
            Some((dir, leaf)) => Self::remove_entry(dir.as_fd(), &leaf, recursive, 0)?,
            None => {
                // `rm -rf /mnt`: the contents go, the mount root stays.
                if recursive {
                    Self::remove_contents(self.root.as_fd(), 0)?;
                }
                return Err(mount_root_busy().into());
            }
        }
        Ok(())
    }

    async fn stat(&self, path: &Path) -> bashkit::Result<Metadata> {
        Ok(metadata(&self.lstat(path)?))
    }

    async fn read_dir(&self, path: &Path) -> bashkit::Result<Vec<DirEntry>> {
        let names = components(path)?;
        let dir = self.open_dir(&names, OFlags::RDONLY)?;
        let mut entries = Vec::new();
        for entry in rustix::fs::Dir::read_from(&dir).map_err(IoError::from)? {
            let entry = entry.map_err(IoError::from)?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let stat = match rustix::fs::statat(
                &dir,
                OsStr::from_bytes(name),
                AtFlags::SYMLINK_NOFOLLOW,
            ) {
                Ok(stat) => stat,
                // Removed while listing.
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(IoError::from(e).into()),
            };
            entries.push(DirEntry {
                name: String::from_utf8_lossy(name).into_owned(),
                metadata: metadata(&stat),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    async fn exists(&self, path: &Path) -> bashkit::Result<bool> {
        match self.lstat(path) {
            Ok(_) => Ok(true),
            Err(e)
                if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
                    || e.raw_os_error() == Some(Errno::LOOP.raw_os_error()) =>
            {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn rename(&self, from: &Path, to: &Path) -> bashkit::Result<()> {
        self.check_writable()?;
        let (from_dir, from_leaf) = self.parent_not_root(from)?;
        let (to_dir, to_leaf) = self.parent_not_root(to)?;
        if let Ok(stat) = rustix::fs::statat(
            &to_dir,
            OsStr::from_bytes(&to_leaf),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            if is_symlink(&stat) {
                return Err(write_through_symlink().into());
            }
        }
        rustix::fs::renameat(
            &from_dir,
            OsStr::from_bytes(&from_leaf),
            &to_dir,
            OsStr::from_bytes(&to_leaf),
        )
        .map_err(IoError::from)?;
        Ok(())
    }

    async fn copy(&self, from: &Path, to: &Path) -> bashkit::Result<()> {
        self.check_writable()?;
        let Some((from_dir, from_leaf)) = self.parent(from)? else {
            return Err(IoError::other("cannot copy directory").into());
        };
        let stat = rustix::fs::statat(
            &from_dir,
            OsStr::from_bytes(&from_leaf),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(IoError::from)?;
        if is_symlink(&stat) {
            let target = rustix::fs::readlinkat(&from_dir, OsStr::from_bytes(&from_leaf), vec![])
                .map_err(IoError::from)?;
            let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
            return self.symlink(&target, to).await;
        }
        let (to_dir, to_leaf) = self.parent_not_root(to)?;
        // Refuses a symlink at the destination.
        Self::kept_mode(to_dir.as_fd(), &to_leaf)?;
        let (mut source, stat) = Self::open_regular(from_dir.as_fd(), &from_leaf)?;
        Self::replace(to_dir.as_fd(), &to_leaf, Some(stat.st_mode), |file| {
            std::io::copy(&mut source, file).map(|_| ())
        })?;
        Ok(())
    }

    async fn symlink(&self, target: &Path, link: &Path) -> bashkit::Result<()> {
        self.check_writable()?;
        let (dir, leaf) = self.parent_not_root(link)?;
        Self::check_symlink_target(dir.as_fd(), target)?;
        rustix::fs::symlinkat(target, &dir, OsStr::from_bytes(&leaf)).map_err(IoError::from)?;
        Ok(())
    }

    async fn read_link(&self, path: &Path) -> bashkit::Result<PathBuf> {
        let Some((dir, leaf)) = self.parent(path)? else {
            return Err(IoError::new(ErrorKind::InvalidInput, "not a symbolic link").into());
        };
        let target = rustix::fs::readlinkat(&dir, OsStr::from_bytes(&leaf), vec![])
            .map_err(IoError::from)?;
        let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
        Ok(self.shown_target(target)?)
    }

    async fn chmod(&self, path: &Path, mode: u32) -> bashkit::Result<()> {
        self.check_writable()?;
        match self.parent(path)? {
            Some((dir, leaf)) => chmod_entry(dir.as_fd(), &leaf, mode)?,
            None => {
                // "." of the root handle is the root itself, never a link.
                rustix::fs::chmodat(
                    &self.root,
                    ".",
                    Mode::from_raw_mode(mode & PERMISSION_BITS),
                    AtFlags::empty(),
                )
                .map_err(IoError::from)?;
            }
        }
        Ok(())
    }

    async fn set_modified_time(&self, path: &Path, time: SystemTime) -> bashkit::Result<()> {
        self.check_writable()?;
        let since = time
            .duration_since(UNIX_EPOCH)
            .map_err(|_| IoError::new(ErrorKind::InvalidInput, "time before 1970"))?;
        let times = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec {
                tv_sec: 0,
                tv_nsec: rustix::fs::UTIME_OMIT,
            },
            last_modification: rustix::fs::Timespec {
                tv_sec: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: since.subsec_nanos().into(),
            },
        };
        match self.parent(path)? {
            Some((dir, leaf)) => {
                let name = OsStr::from_bytes(&leaf);
                if is_symlink(
                    &rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                        .map_err(IoError::from)?,
                ) {
                    // bashkit resolves the link in the sandbox and asks again.
                    return Err(IoError::new(ErrorKind::InvalidInput, "is a symbolic link").into());
                }
                // NOFOLLOW: a link swapped in meanwhile gets the time itself.
                rustix::fs::utimensat(&dir, name, &times, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(IoError::from)?;
            }
            None => {
                rustix::fs::utimensat(&self.root, ".", &times, AtFlags::empty())
                    .map_err(IoError::from)?;
            }
        }
        Ok(())
    }

    fn usage(&self) -> FsUsage {
        // Host files are not the session's quota (walking them would cost
        // a scan per write).
        FsUsage::default()
    }

    fn limits(&self) -> FsLimits {
        FsLimits::unlimited()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A scratch host directory, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let path = std::env::temp_dir().join(format!(
                "ex_bashkit_host_fs_{name}_{}_{}",
                std::process::id(),
                TEMP_SEQUENCE.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(path.join("sub")).unwrap();
            std::fs::write(path.join("sub/f"), "inside").unwrap();
            Self(std::fs::canonicalize(path).unwrap())
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn fs(root: &Path, writable: bool) -> HostFs {
        HostFs::open(root, Path::new("/m"), writable, 1024).unwrap()
    }

    fn io_kind(result: bashkit::Result<impl Sized>) -> ErrorKind {
        match result {
            Err(bashkit::Error::Io(e)) => e.kind(),
            Err(other) => panic!("not an io error: {other}"),
            Ok(_) => panic!("succeeded"),
        }
    }

    #[test]
    fn parent_components_are_refused() {
        assert!(components(Path::new("/a/../b")).is_err());
        assert_eq!(components(Path::new("/a/./b")).unwrap().len(), 2);
        assert!(components(Path::new("/")).unwrap().is_empty());
    }

    #[test]
    fn link_targets_are_shown_as_sandbox_paths_or_not_at_all() {
        let dir = Scratch::new("links");
        let host = fs(&dir.0, false);
        std::os::unix::fs::symlink(dir.0.join("sub/f"), dir.0.join("in")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.0.join("out")).unwrap();
        std::os::unix::fs::symlink("sub/f", dir.0.join("rel")).unwrap();
        let read = |p: &str| crate::run::runtime::block_on(host.read_link(Path::new(p)));
        assert_eq!(read("/in").unwrap(), PathBuf::from("/m/sub/f"));
        assert_eq!(read("/rel").unwrap(), PathBuf::from("sub/f"));
        assert_eq!(io_kind(read("/out")), ErrorKind::NotFound);
    }

    #[test]
    fn a_symlink_on_the_way_is_never_followed_on_the_host() {
        let dir = Scratch::new("walk");
        let outside = Scratch::new("outside");
        std::os::unix::fs::symlink(&outside.0, dir.0.join("link")).unwrap();
        let host = fs(&dir.0, true);
        let read = crate::run::runtime::block_on(host.read(Path::new("/link/sub/f")));
        assert!(read.is_err());
        let write = crate::run::runtime::block_on(host.write(Path::new("/link/new"), b"x"));
        assert!(write.is_err());
        assert!(!outside.0.join("new").exists());
    }

    #[test]
    fn modes_are_masked_and_the_root_stays() {
        let dir = Scratch::new("modes");
        let host = fs(&dir.0, true);
        crate::run::runtime::block_on(async {
            host.write(Path::new("/x"), b"x").await.unwrap();
            host.chmod(Path::new("/x"), 0o6755).await.unwrap();
            host.chmod(Path::new("/sub"), 0o3777).await.unwrap();
            assert_eq!(
                io_kind(host.remove(Path::new("/"), true).await),
                ErrorKind::ResourceBusy
            );
            assert_eq!(
                io_kind(host.rename(Path::new("/"), Path::new("/y")).await),
                ErrorKind::ResourceBusy
            );
        });
        // The contents went, the root stayed.
        assert!(dir.0.is_dir());
        assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 0);
        let host = fs(&dir.0, true);
        crate::run::runtime::block_on(async {
            host.write(Path::new("/x"), b"x").await.unwrap();
            host.chmod(Path::new("/x"), 0o4755).await.unwrap();
        });
        let mode = std::fs::metadata(dir.0.join("x"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755);
    }

    #[test]
    fn reads_past_the_limit_are_refused() {
        let dir = Scratch::new("big");
        std::fs::write(dir.0.join("big"), vec![b'a'; 2048]).unwrap();
        let host = fs(&dir.0, false);
        let read = crate::run::runtime::block_on(host.read(Path::new("/big")));
        assert_eq!(io_kind(read), ErrorKind::FileTooLarge);
        let small = crate::run::runtime::block_on(host.read(Path::new("/sub/f"))).unwrap();
        assert_eq!(small, b"inside");
    }

    #[test]
    fn a_read_only_mount_refuses_writes() {
        let dir = Scratch::new("ro");
        let host = fs(&dir.0, false);
        let write = crate::run::runtime::block_on(host.write(Path::new("/n"), b"x"));
        assert_eq!(io_kind(write), ErrorKind::PermissionDenied);
        assert!(!dir.0.join("n").exists());
    }
}
