//! Shared base images (`ExBashkit.Image`): an immutable filesystem built
//! once, which any number of sessions mount copy-on-write under their own
//! layer (`image/layer.rs`).
//!
//! An image is identified by the SHA-256 of its canonical tar (`tar_io`,
//! name order, mtimes 0): two builds of the same content are the same image,
//! and a snapshot names the image it was taken over by that id.
//!
//! Lifetime. In the node, the `ImageResource` held by the `%ExBashkit.Image{}`
//! owns the image; a session holds it too (through its layer), so an image
//! lives while its handle or any session over it does. In a worker, the
//! VM names the file it wrote the canonical tar to, once for all workers
//! (`{:map_image, id, path}`); the worker maps it read-only, so the pages
//! of an image are shared by every session process over it, and the image
//! stays pinned until the VM says `{:drop_image, id}` (no session of that
//! worker uses it any more). Both places share one registry of live images
//! by id, so a second build or shipment of the same content reuses the first.

pub(crate) mod archive;
pub(crate) mod layer;
pub(crate) mod snapshot;
pub(crate) mod storage;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};

use bashkit::{FsLimits, InMemoryFs, VfsEntry, VfsEntryKind, VfsSnapshot};
use parking_lot::Mutex;
use rustler::ResourceArc;
use sha2::{Digest, Sha256};

use crate::image::storage::{Mapping, Storage};
use crate::nif::error::NifResult;
use crate::run::teardown::DropLater;
use crate::term::value::{Bytes, FromValue, Value};
use crate::{map_struct, run::runtime};

/// One immutable base filesystem.
pub struct Image {
    pub id: String,
    /// The files, whose contents stay in `tar` until a session reads them
    /// (bashkit's lazy files: a read materializes that one file, once, for
    /// every session over the image).
    pub fs: Arc<InMemoryFs>,
    /// The canonical tar: the image's identity, what a worker maps, and
    /// the storage of every file's content, in one place.
    pub tar: Arc<Storage>,
    /// Content bytes and non-directory entries (what the image costs, and
    /// counts against each session's limits).
    pub bytes: u64,
    pub files: u64,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Image({})", self.id)
    }
}

/// Live images by id (weak: the owners are resources, sessions and pins).
static REGISTRY: LazyLock<Mutex<HashMap<String, Weak<Image>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Images a worker was given and not yet told to drop.
static PINNED: LazyLock<Mutex<HashMap<String, Arc<Image>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The live image `id`, if any.
pub fn lookup(id: &str) -> Option<Arc<Image>> {
    REGISTRY.lock().get(id).and_then(Weak::upgrade)
}

/// The limits an image is built under: those of a session's filesystem,
/// since the image counts against them in every session over it.
pub fn limits() -> FsLimits {
    FsLimits::default()
}

/// Build (or find) the image holding `entries`: its canonical tar is
/// written from a filesystem filled with them, which is then dropped; the
/// image keeps the tar alone (`from_canonical`).
pub async fn build(entries: Vec<VfsEntry>) -> Result<Arc<Image>, String> {
    let tar = canonical_of(entries).await?;
    build_from_canonical(tar).await
}

/// The canonical tar of an image holding `entries`.
async fn canonical_of(entries: Vec<VfsEntry>) -> Result<Vec<u8>, String> {
    let (fs, _, _) = fill(entries, None).await?;
    canonical_tar(&fs).await
}

/// A worker's `{:canonical_tar, id, spec}`: the canonical tar of the image
/// `spec` describes, made where a hostile archive costs the worker only
/// (`Image.build/1` in the default mode). The node then builds the image
/// from it (`canonical: true`), parsing it in place, every check again.
pub async fn canonical_tar_of(spec: BuildSpec) -> Result<Vec<u8>, String> {
    canonical_of(entries_of(spec)?).await
}

/// Build (or find) the image whose canonical tar is `tar` (validated as
/// any archive is by `parse_in_place`).
async fn build_from_canonical(tar: Vec<u8>) -> Result<Arc<Image>, String> {
    let id = hex(Sha256::digest(&tar).as_slice());
    if let Some(existing) = lookup(&id) {
        return Ok(existing);
    }
    from_canonical(Storage::Owned(tar), &id).await
}

/// The image `id` whose canonical tar is `tar`. File contents are not
/// copied out of it: each file is a lazy file reading its range.
async fn from_canonical(tar: Storage, id: &str) -> Result<Arc<Image>, String> {
    let (entries, ranges) = crate::image::archive::parse_in_place(&tar, &limits())?;
    let tar = Arc::new(tar);
    let (fs, bytes, files) = fill(entries, Some((&tar, &ranges))).await?;
    let mut registry = REGISTRY.lock();
    if let Some(existing) = registry.get(id).and_then(Weak::upgrade) {
        return Ok(existing);
    }
    let image = Arc::new(Image {
        id: id.to_string(),
        fs: Arc::new(fs),
        tar,
        bytes,
        files,
    });
    registry.retain(|_, weak| weak.strong_count() > 0);
    registry.insert(id.to_string(), Arc::downgrade(&image));
    Ok(image)
}

/// A filesystem holding exactly `entries` (validated by `tar_io`: within
/// the limits, parents before children). A file whose content lies in
/// `in_tar` (the archive and each file's range) becomes a lazy file over
/// it; any other is moved in, one at a time, so that filling holds the
/// content about once, not twice.
async fn fill(
    entries: Vec<VfsEntry>,
    in_tar: Option<(&Arc<Storage>, &crate::image::archive::ContentRanges)>,
) -> Result<(InMemoryFs, u64, u64), String> {
    let fs = InMemoryFs::with_limits(limits());
    // Only the root: an image has none of a fresh filesystem's defaults.
    fs.restore(&VfsSnapshot::from_entries(vec![VfsEntry {
        path: "/".into(),
        kind: VfsEntryKind::Directory,
        mode: 0o755,
    }]))
    .map_err(|e| e.to_string())?;
    let (mut bytes, mut files) = (0u64, 0u64);
    for entry in entries {
        match entry.kind {
            VfsEntryKind::Directory => fs.add_dir(&entry.path, entry.mode),
            VfsEntryKind::File { content } => {
                files += 1;
                let range = in_tar.and_then(|(tar, ranges)| {
                    ranges.get(&entry.path).map(|range| (tar, range.clone()))
                });
                match range {
                    Some((tar, range)) if tar.get(range.clone()).is_some() => {
                        let len = range.len() as u64;
                        bytes += len;
                        let tar = Arc::clone(tar);
                        let load = move || tar[range.clone()].to_vec();
                        fs.add_lazy_file(&entry.path, len, entry.mode, Arc::new(load));
                    }
                    Some((_, range)) => {
                        return Err(format!(
                            "{}: content {range:?} lies outside the archive",
                            entry.path.display()
                        ))
                    }
                    None => {
                        bytes += content.len() as u64;
                        fs.add_file(&entry.path, content, entry.mode);
                    }
                }
            }
            VfsEntryKind::Fifo => {
                files += 1;
                fs.add_file(&entry.path, b"", entry.mode);
            }
            VfsEntryKind::Symlink { target } => {
                files += 1;
                bashkit::FileSystem::symlink(&fs, &target, &entry.path)
                    .await
                    .map_err(|e| format!("{}: {e}", entry.path.display()))?;
            }
        }
    }
    // `add_*` skip silently what the limits refuse; `tar_io` checked the
    // same limits, so a shortfall here is a bug worth an error, not a
    // silently smaller image.
    let usage = bashkit::FileSystemExt::usage(&fs);
    if usage.file_count != files {
        return Err(format!(
            "image past the filesystem limits: {} of {files} files stored",
            usage.file_count
        ));
    }
    Ok((fs, bytes, files))
}

/// The canonical tar of a filesystem: what an image's id hashes.
async fn canonical_tar(fs: &InMemoryFs) -> Result<Vec<u8>, String> {
    let options = crate::image::archive::WriteOptions {
        skip: &[],
        mtimes: false,
    };
    crate::image::archive::write(fs, "/", &options).await
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A worker's `{:map_image, id, path}`: map the canonical tar the VM wrote
/// to `path` and pin the image. The file is the VM's own, named by the id
/// in a directory only its user reaches, written whole before it is named
/// (`ExBashkit.Image.Mapped`); hashing it again would cost each session
/// process ~3 ms per MB at its start.
pub fn map_pinned(id: &str, path: &str) -> Result<(), String> {
    if PINNED.lock().contains_key(id) {
        return Ok(());
    }
    let image = match lookup(id) {
        Some(image) => image,
        None => {
            let tar = Storage::Mapped(Mapping::open(path)?);
            let image = runtime::block_on(from_canonical(tar, id));
            // The load's transient allocations (the index): give them back.
            crate::nif::allocator::give_back();
            image?
        }
    };
    PINNED.lock().insert(id.to_string(), image);
    Ok(())
}

/// A worker's `{:drop_image, id}`: sessions over it keep it alive. What
/// goes is torn down on a runner, not on the frame reader (`run/teardown.rs`).
pub fn unpin(id: &str) {
    let removed = PINNED.lock().remove(id);
    if let Some(image) = removed {
        crate::run::teardown::later(image);
    }
}

/// `base:` in a session's configuration: the image, found by id when the
/// configuration is decoded.
#[derive(Clone)]
pub struct BaseImage(pub Arc<Image>);

impl std::fmt::Debug for BaseImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl FromValue for BaseImage {
    fn from_value(value: &Value) -> Result<Self, String> {
        let id = String::from_value(value)?;
        lookup(&id).map(BaseImage).ok_or_else(|| {
            format!("image {id} is not loaded here (its ExBashkit.Image handle was freed)")
        })
    }
}

// -- NIFs -------------------------------------------------------------------

/// The node's handle on an image (`%ExBashkit.Image{ref: ...}`).
pub struct ImageResource {
    /// Dropped on a runner, like a session (`run/teardown.rs`): an image of
    /// 10 000 files took 1.5 ms to tear down on the scheduler that
    /// collected its handle.
    pub image: DropLater<Arc<Image>>,
}

#[rustler::resource_impl]
impl rustler::Resource for ImageResource {}

map_struct! {
    /// What `Image.build/1` hands the NIF: an archive and/or files, applied in
    /// that order; with `canonical`, the archive is an image's canonical tar
    /// made by a worker (`canonical_tar_of`) and there are no files.
    #[derive(Debug, Default)]
    pub struct BuildSpec {
        pub rootfs: Option<Bytes>,
        pub files: Vec<(String, Bytes)>,
        pub canonical: bool,
    }
}

fn entries_of(spec: BuildSpec) -> Result<Vec<VfsEntry>, String> {
    let limits = limits();
    let mut entries = match &spec.rootfs {
        Some(Bytes(tar)) => crate::image::archive::parse(tar, &limits)?,
        None => Vec::new(),
    };
    // `:files` as a tiny archive of their own, so that they get the same
    // checks and implicit parents; then laid over the archive's entries.
    if !spec.files.is_empty() {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, Bytes(content)) in &spec.files {
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            builder
                .append_data(
                    &mut header,
                    path.trim_start_matches('/'),
                    content.as_slice(),
                )
                .map_err(|e| format!(":files entry {path}: {e}"))?;
        }
        let tar = builder.into_inner().map_err(|e| e.to_string())?;
        let files = crate::image::archive::parse(&tar, &limits)?;
        let mut by_path: std::collections::BTreeMap<_, _> =
            entries.into_iter().map(|e| (e.path.clone(), e)).collect();
        for entry in files {
            if matches!(entry.kind, VfsEntryKind::Directory) && by_path.contains_key(&entry.path) {
                continue;
            }
            by_path.insert(entry.path.clone(), entry);
        }
        entries = by_path.into_values().collect();
    }
    Ok(entries)
}

/// `{:ok, {ref, id, bytes, files}}` or `{:error, message}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn image_build(spec: rustler::Term) -> NifResult<(ResourceArc<ImageResource>, String, u64, u64)> {
    let spec = BuildSpec::from_term(spec)?;
    let image = runtime::block_on(async {
        match spec {
            BuildSpec {
                canonical: true,
                rootfs: Some(Bytes(tar)),
                ..
            } => build_from_canonical(tar).await,
            spec => build(entries_of(spec)?).await,
        }
    })?;
    Ok((
        ResourceArc::new(ImageResource {
            image: DropLater::new(Arc::clone(&image)),
        }),
        image.id.clone(),
        image.bytes,
        image.files,
    ))
}

/// The canonical tar of an image, to ship to a worker.
#[rustler::nif(schedule = "DirtyCpu")]
fn image_tar<'a>(
    env: rustler::Env<'a>,
    handle: ResourceArc<ImageResource>,
) -> NifResult<rustler::Term<'a>> {
    Ok(crate::term::value::binary_term(env, &handle.image.tar))
}
