//! `glob` and `grep` over a session's filesystem (`ExBashkit.Search`), walked
//! here in Rust through bashkit's `FileSystem` trait rather than by running
//! a script: the walk sees exactly what scripts see (the in-memory
//! filesystem, host mounts, `:virtual_fs` backends) and never parses shell
//! output.
//!
//! A search is a job like `exec`: it waits for the session's interpreter
//! (so it runs between scripts, in arrival order) and routes `:virtual_fs`
//! back-calls to the caller while it walks, then answers by message.
//!
//! The work is bounded three ways, each set by the caller: entries visited
//! (`max_entries`), file bytes read (`max_bytes`, grep only) and wall-clock
//! time (`timeout_ms`). Running past a bound is an error that names it,
//! never a silently partial answer. Symlinks are neither followed nor read,
//! so a walk cannot loop; grep skips hidden entries (names starting with a
//! dot, as `Path.wildcard/2` does by default), files with a NUL byte in
//! their first 8 KiB (binary) and files larger than `max_file_bytes`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bashkit::{FileSystem, FileType};
use regex::bytes::{Regex, RegexBuilder};
use rustler::{LocalPid, Term};

use crate::nif::error::NifResult;
use crate::run::reply::{Caller, Payload, ReplyTo};
use crate::session::{Handle, Session};
use crate::term::value::Value;
use crate::{map_struct, run::guard, run::runtime};

/// The longest line grep returns; longer lines are cut (at a character
/// boundary) so one minified file cannot flood the answer.
const MAX_LINE_BYTES: usize = 4096;
/// How much of a file decides whether it is binary.
const BINARY_PROBE_BYTES: usize = 8192;
/// Directory depth a walk never goes past.
const MAX_DEPTH: usize = 256;

map_struct! {
    /// `glob` arguments, validated by Elixir. `pattern` is absolute and
    /// normalized; `base` is the directory results are made relative to
    /// (`nil`: results stay absolute).
    #[derive(Debug)]
    pub struct GlobRequest {
        pub pattern: String,
        pub base: Option<String>,
        pub limit: Option<u64>,
        pub max_entries: u64,
        pub timeout_ms: u64,
    }
}

map_struct! {
    /// `grep` arguments, validated by Elixir. `root` is absolute.
    #[derive(Debug)]
    pub struct GrepRequest {
        pub pattern: String,
        pub root: String,
        pub glob: Option<String>,
        pub case_sensitive: bool,
        pub limit: Option<u64>,
        pub max_entries: u64,
        pub max_bytes: u64,
        pub max_file_bytes: u64,
        pub timeout_ms: u64,
    }
}

/// Why a search has no answer.
enum Failure {
    InvalidRegex(String),
    Message(String),
}

enum Outcome {
    Paths(Vec<String>),
    Matches(Vec<(String, u64, Vec<u8>)>),
    Failed(Failure),
}

impl Payload for Outcome {
    /// `{:ok, [path]}`, `{:ok, [{path, line_number, line}]}`,
    /// `{:error, {:invalid_regex, message}}` or `{:error, message}`.
    fn to_value(&self) -> Value {
        match self {
            Outcome::Paths(paths) => Value::ok_with(paths.clone()),
            Outcome::Matches(matches) => Value::ok_with(Value::List(
                matches
                    .iter()
                    .map(|(path, number, line)| {
                        // Lines of non-UTF-8 files still come back printable.
                        let line = String::from_utf8_lossy(line).into_owned();
                        Value::tuple([path.into(), (*number).into(), line.into()])
                    })
                    .collect(),
            )),
            Outcome::Failed(Failure::InvalidRegex(message)) => Value::tuple([
                Value::atom("error"),
                Value::tuple([Value::atom("invalid_regex"), message.into()]),
            ]),
            Outcome::Failed(Failure::Message(message)) => Value::error(message.clone()),
        }
    }
}

/// Run `body` as a search job on `session` and answer `reply`.
fn run<F>(session: Arc<Session>, reply: ReplyTo, timeout_ms: u64, body: F)
where
    F: FnOnce(
            Arc<dyn FileSystem>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>>
        + Send
        + 'static,
{
    let caller = reply.caller();
    // A walk over a slow backend can take long: a thread of its own, like
    // a script, so short jobs on the worker threads are not held up.
    runtime::spawn_script(async move {
        let outcome = guard::catch_future(async {
            let held = session.hold(&caller).await;
            let fs = held.fs();
            let limit = Duration::from_millis(timeout_ms);
            match tokio::time::timeout(limit, body(fs)).await {
                Ok(outcome) => outcome,
                Err(_) => Outcome::Failed(Failure::Message(format!(
                    "search stopped after {timeout_ms} ms (option :timeout_ms); \
                     narrow the pattern or the directory"
                ))),
            }
        })
        .await;
        let outcome = outcome.unwrap_or_else(|panic| {
            Outcome::Failed(Failure::Message(format!("internal error: {panic}")))
        });
        reply.finish(&outcome);
    });
}

/// `ExBashkit.Search.glob/3`.
pub fn glob(session: Arc<Session>, request: GlobRequest, reply: ReplyTo) {
    let timeout_ms = request.timeout_ms;
    run(session, reply, timeout_ms, move |fs| {
        Box::pin(async move {
            match glob_paths(&fs, &request).await {
                Ok(paths) => Outcome::Paths(paths),
                Err(failure) => Outcome::Failed(failure),
            }
        })
    });
}

/// `ExBashkit.Search.grep/3`.
pub fn grep(session: Arc<Session>, request: GrepRequest, reply: ReplyTo) {
    let timeout_ms = request.timeout_ms;
    run(session, reply, timeout_ms, move |fs| {
        Box::pin(async move {
            match grep_matches(&fs, &request).await {
                Ok(matches) => Outcome::Matches(matches),
                Err(failure) => Outcome::Failed(failure),
            }
        })
    });
}

// -- NIFs (the worker's `glob` / `grep` requests call the jobs above) ---------

/// `ExBashkit.Search.glob/3`: answers `{:ex_bashkit_reply, ref, {:ok, [path]}
/// | {:error, message}}`.
#[rustler::nif]
fn session_glob(handle: Handle, request: Term, pid: LocalPid, reference: Term) -> NifResult<()> {
    let request = GlobRequest::from_term(request)?;
    glob(
        Arc::clone(&handle.session),
        request,
        ReplyTo::new(Caller::process(pid, reference)),
    );
    Ok(())
}

/// `ExBashkit.Search.grep/3`: answers `{:ok, [{path, line_number, line}]}`,
/// `{:error, {:invalid_regex, message}}` or `{:error, message}`.
#[rustler::nif]
fn session_grep(handle: Handle, request: Term, pid: LocalPid, reference: Term) -> NifResult<()> {
    let request = GrepRequest::from_term(request)?;
    grep(
        Arc::clone(&handle.session),
        request,
        ReplyTo::new(Caller::process(pid, reference)),
    );
    Ok(())
}

// -- glob ---------------------------------------------------------------------

async fn glob_paths(
    fs: &Arc<dyn FileSystem>,
    request: &GlobRequest,
) -> Result<Vec<String>, Failure> {
    let matcher = Glob::new(&request.pattern).map_err(Failure::Message)?;
    let start = PathBuf::from(&matcher.literal_prefix);
    let mut found = Vec::new();
    let mut walk = Walk::new(request.max_entries, false);
    // The literal prefix may itself be the only match (a pattern without
    // wildcards names one path).
    if matcher.is_match(&matcher.literal_prefix) && fs.lstat(&start).await.is_ok() {
        found.push(matcher.literal_prefix.clone());
    }
    let max_depth = matcher.max_depth(start.components().count());
    walk.dir(fs, &start, 0, max_depth, &mut |path, _kind, _size| {
        if matcher.is_match(path) {
            found.push(path.to_string());
        }
        Ok(true)
    })
    .await?;
    found.sort_unstable();
    found.dedup();
    let mut paths: Vec<String> = match &request.base {
        Some(base) => found
            .into_iter()
            .map(|path| relative_to(&path, base.trim_end_matches('/')))
            .collect(),
        None => found,
    };
    if let Some(limit) = request.limit {
        paths.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    Ok(paths)
}

/// `path` relative to `base` when it lies under it, else unchanged (as
/// `Path.relative_to/2`).
fn relative_to(path: &str, base: &str) -> String {
    if base.is_empty() {
        return path.trim_start_matches('/').to_string();
    }
    match path.strip_prefix(base) {
        Some(rest) if rest.starts_with('/') => rest[1..].to_string(),
        Some("") => ".".to_string(),
        _ => path.to_string(),
    }
}

// -- grep ---------------------------------------------------------------------

async fn grep_matches(
    fs: &Arc<dyn FileSystem>,
    request: &GrepRequest,
) -> Result<Vec<(String, u64, Vec<u8>)>, Failure> {
    let regex = RegexBuilder::new(&request.pattern)
        .case_insensitive(!request.case_sensitive)
        // Bounds what compiling a hostile pattern may allocate.
        .size_limit(16 * 1024 * 1024)
        .dfa_size_limit(16 * 1024 * 1024)
        .build()
        .map_err(|e| Failure::InvalidRegex(e.to_string()))?;
    let filter = match &request.glob {
        Some(glob) => Some(FileFilter::new(glob).map_err(Failure::Message)?),
        None => None,
    };
    let limit = request
        .limit
        .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    let root = PathBuf::from(&request.root);
    let root_str = request.root.trim_end_matches('/');
    let mut matches = Vec::new();
    if limit == 0 {
        return Ok(matches);
    }

    let meta = fs
        .stat(&root)
        .await
        .map_err(|e| Failure::Message(format!("{}: {e}", request.root)))?;
    let mut budget = ByteBudget {
        left: request.max_bytes,
        max: request.max_bytes,
    };
    if !meta.file_type.is_dir() {
        // A file as the root: search it alone, named by its own name.
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| request.root.clone());
        if meta.size <= request.max_file_bytes {
            let content = read_counted(fs, &root, &mut budget)
                .await?
                .ok_or_else(|| Failure::Message(format!("{}: cannot read", request.root)))?;
            scan(&content, &regex, &name, limit, &mut matches);
        }
        return Ok(matches);
    }

    // Files in walk order (sorted at each level, so paths come out sorted),
    // then read one by one; reading stops at the match limit.
    let mut files = Vec::new();
    let mut walk = Walk::new(request.max_entries, true);
    walk.dir(fs, &root, 0, MAX_DEPTH, &mut |path, kind, size| {
        if kind == Kind::File && size <= request.max_file_bytes {
            let relative = relative_to(path, root_str);
            if filter.as_ref().is_none_or(|f| f.is_match(&relative)) {
                files.push((path.to_string(), relative));
            }
        }
        Ok(true)
    })
    .await?;
    for (path, relative) in files {
        // A file may vanish or become unreadable between listing and
        // reading (or sit on a backend that refuses it): skip it.
        let Some(content) = read_counted(fs, Path::new(&path), &mut budget).await? else {
            continue;
        };
        scan(&content, &regex, &relative, limit, &mut matches);
        if matches.len() >= limit {
            break;
        }
    }
    Ok(matches)
}

struct ByteBudget {
    left: u64,
    max: u64,
}

/// Read `path`, counting its bytes against the budget: `Ok(None)` when
/// the file cannot be read, `Err` when the budget is spent.
async fn read_counted(
    fs: &Arc<dyn FileSystem>,
    path: &Path,
    budget: &mut ByteBudget,
) -> Result<Option<Vec<u8>>, Failure> {
    let Ok(content) = fs.read_file(path).await else {
        return Ok(None);
    };
    let size = content.len() as u64;
    if size > budget.left {
        return Err(Failure::Message(format!(
            "grep read more than {} bytes of files (option :max_bytes); \
             narrow :path or :glob",
            budget.max
        )));
    }
    budget.left -= size;
    Ok(Some(content))
}

/// Append the lines of `content` matching `regex` (at most `limit` in all).
fn scan(
    content: &[u8],
    regex: &Regex,
    name: &str,
    limit: usize,
    matches: &mut Vec<(String, u64, Vec<u8>)>,
) {
    let probe = &content[..content.len().min(BINARY_PROBE_BYTES)];
    if probe.contains(&0) {
        return;
    }
    let body = content.strip_suffix(b"\n").unwrap_or(content);
    if content.is_empty() {
        return;
    }
    for (index, line) in body.split(|b| *b == b'\n').enumerate() {
        if matches.len() >= limit {
            return;
        }
        if regex.is_match(line) {
            matches.push((name.to_string(), index as u64 + 1, cut_line(line)));
        }
    }
}

/// `line`, cut to `MAX_LINE_BYTES` without splitting a UTF-8 character.
fn cut_line(line: &[u8]) -> Vec<u8> {
    if line.len() <= MAX_LINE_BYTES {
        return line.to_vec();
    }
    let mut end = MAX_LINE_BYTES;
    // Back up over UTF-8 continuation bytes (10xxxxxx).
    while end > 0 && (line[end] & 0b1100_0000) == 0b1000_0000 {
        end -= 1;
    }
    line[..end].to_vec()
}

/// grep's `:glob`: without a `/` it matches a file's name at any depth (as
/// ripgrep's `--glob` does, so `*.ex` finds every `.ex` file); with one, the
/// path relative to the search root.
struct FileFilter {
    glob: Glob,
    by_name: bool,
}

impl FileFilter {
    fn new(pattern: &str) -> Result<Self, String> {
        let by_name = !pattern.contains('/');
        Ok(Self {
            glob: Glob::new(pattern)?,
            by_name,
        })
    }

    fn is_match(&self, relative: &str) -> bool {
        if self.by_name {
            let name = relative.rsplit('/').next().unwrap_or(relative);
            self.glob.is_match(name)
        } else {
            self.glob.is_match(relative)
        }
    }
}

// -- the walk -----------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Symlink,
}

/// A depth-first walk, entries sorted by name at each level, counting
/// every entry it lists against `max_entries`.
struct Walk {
    visited: u64,
    max_entries: u64,
    skip_hidden: bool,
}

type Visit<'v> = dyn FnMut(&str, Kind, u64) -> Result<bool, Failure> + Send + 'v;

impl Walk {
    fn new(max_entries: u64, skip_hidden: bool) -> Self {
        Self {
            visited: 0,
            max_entries,
            skip_hidden,
        }
    }

    /// Visit the entries under `dir` (not `dir` itself), down to
    /// `max_depth` levels. A directory that cannot be listed is skipped,
    /// except the starting one, whose absence simply means no entries.
    fn dir<'s>(
        &'s mut self,
        fs: &'s Arc<dyn FileSystem>,
        dir: &'s Path,
        depth: usize,
        max_depth: usize,
        visit: &'s mut Visit<'_>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Failure>> + Send + 's>> {
        Box::pin(async move {
            if depth >= max_depth {
                return Ok(());
            }
            let Ok(mut entries) = fs.read_dir(dir).await else {
                return Ok(());
            };
            entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
            for entry in entries {
                if self.skip_hidden && entry.name.starts_with('.') {
                    continue;
                }
                self.visited += 1;
                if self.visited > self.max_entries {
                    return Err(Failure::Message(format!(
                        "search visited more than {} entries (option :max_entries); \
                         narrow the pattern or the directory",
                        self.max_entries
                    )));
                }
                let path = dir.join(&entry.name);
                let Some(path_str) = path.to_str() else {
                    continue;
                };
                let kind = match entry.metadata.file_type {
                    FileType::Directory => Kind::Dir,
                    FileType::Symlink => Kind::Symlink,
                    FileType::File | FileType::Fifo => Kind::File,
                };
                visit(path_str, kind, entry.metadata.size)?;
                if kind == Kind::Dir {
                    self.dir(fs, &path, depth + 1, max_depth, visit).await?;
                }
            }
            Ok(())
        })
    }
}

// -- glob patterns ------------------------------------------------------------

/// A shell glob compiled to an anchored regex over `/`-separated paths:
/// `*` and `?` stay within one segment (and match dot files), `**` as a
/// whole segment spans any number of directories (zero included),
/// `[abc]`, `[!a-z]` and `{a,b}` as in bash, `\x` a literal `x`.
struct Glob {
    regex: regex::Regex,
    /// The leading segments without wildcards: where a walk starts.
    literal_prefix: String,
    /// Segments in the pattern, and whether one is `**`.
    segments: usize,
    recursive: bool,
}

impl Glob {
    fn new(pattern: &str) -> Result<Self, String> {
        let source = translate(pattern)?;
        let regex = regex::RegexBuilder::new(&source)
            .size_limit(4 * 1024 * 1024)
            .build()
            .map_err(|e| format!("invalid glob {pattern:?}: {e}"))?;
        let parts: Vec<&str> = pattern.split('/').collect();
        let literal: Vec<&str> = parts
            .iter()
            .take_while(|s| !has_wildcard(s))
            .copied()
            .collect();
        // The last segment, when literal, is a candidate match, not a
        // directory to start from (unless every segment is literal).
        let literal_prefix = if pattern.starts_with('/') {
            let joined = literal.join("/");
            if joined.is_empty() {
                "/".to_string()
            } else {
                joined
            }
        } else {
            literal.join("/")
        };
        Ok(Self {
            regex,
            literal_prefix,
            segments: parts.iter().filter(|s| !s.is_empty()).count(),
            recursive: parts.contains(&"**"),
        })
    }

    fn is_match(&self, path: &str) -> bool {
        self.regex.is_match(path)
    }

    /// How deep below the literal prefix a match can lie.
    fn max_depth(&self, prefix_depth: usize) -> usize {
        if self.recursive {
            MAX_DEPTH
        } else {
            // `components()` of an absolute path counts the root.
            (self.segments + 1).saturating_sub(prefix_depth).max(1)
        }
    }
}

fn has_wildcard(segment: &str) -> bool {
    segment.contains(['*', '?', '[', '{', '\\'])
}

/// Translate a glob into regex source, anchored at both ends.
fn translate(pattern: &str) -> Result<String, String> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::from("^");
    let mut braces = 0usize;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '*' if chars.get(i + 1) == Some(&'*') => {
                let starts_segment = i == 0 || chars[i - 1] == '/';
                let next = chars.get(i + 2);
                if starts_segment && next == Some(&'/') {
                    // `**/`: zero or more whole directories.
                    out.push_str("(?:[^/]*/)*");
                    i += 3;
                    continue;
                }
                if starts_segment && next.is_none() {
                    // Trailing `**`: everything below.
                    out.push_str(".*");
                    i += 2;
                    continue;
                }
                // `**` inside a segment is two `*`.
                out.push_str("[^/]*");
                i += 2;
                continue;
            }
            '*' => out.push_str("[^/]*"),
            '?' => out.push_str("[^/]"),
            '[' => match class(&chars, i) {
                Some((source, next)) => {
                    out.push_str(&source);
                    i = next;
                    continue;
                }
                None => out.push_str(r"\["),
            },
            '{' => {
                braces += 1;
                out.push_str("(?:");
            }
            ',' if braces > 0 => out.push('|'),
            '}' if braces > 0 => {
                braces -= 1;
                out.push(')');
            }
            '\\' => {
                if let Some(next) = chars.get(i + 1) {
                    out.push_str(&regex::escape(&next.to_string()));
                    i += 2;
                    continue;
                }
                out.push_str(r"\\");
            }
            other => out.push_str(&regex::escape(&other.to_string())),
        }
        i += 1;
    }
    if braces > 0 {
        return Err(format!("invalid glob {pattern:?}: unclosed {{"));
    }
    out.push('$');
    Ok(out)
}

/// A bracket expression starting at `chars[start]` (`[`): its regex source
/// and the index after its `]`, or `None` if it is not closed.
fn class(chars: &[char], start: usize) -> Option<(String, usize)> {
    let mut i = start + 1;
    let mut out = String::from("[");
    if matches!(chars.get(i), Some('!') | Some('^')) {
        out.push('^');
        i += 1;
    }
    // A `]` right after the opening is a literal member.
    let mut first = true;
    while i < chars.len() {
        let c = chars[i];
        if c == ']' && !first {
            // A class never matches the separator.
            if out.starts_with("[^") {
                out.push('/');
            }
            out.push(']');
            if out == "[]" {
                return None;
            }
            return Some((out, i + 1));
        }
        match c {
            '-' if !first && chars.get(i + 1) != Some(&']') => out.push('-'),
            '/' => return None,
            // `\`, `[`, `&`, `~`, `^` have meanings inside a Rust regex
            // class: escaped; letters and digits must not be.
            other => out.push_str(&regex::escape(&other.to_string())),
        }
        first = false;
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, path: &str) -> bool {
        Glob::new(pattern).unwrap().is_match(path)
    }

    #[test]
    fn star_stays_in_one_segment_and_matches_dot_files() {
        assert!(matches("/a/*.ex", "/a/x.ex"));
        assert!(matches("/a/*.ex", "/a/.x.ex"));
        assert!(!matches("/a/*.ex", "/a/b/x.ex"));
        assert!(matches("/a/?.ex", "/a/x.ex"));
        assert!(!matches("/a/?.ex", "/a/xy.ex"));
    }

    #[test]
    fn double_star_spans_zero_or_more_directories() {
        assert!(matches("/a/**/*.ex", "/a/x.ex"));
        assert!(matches("/a/**/*.ex", "/a/b/c/x.ex"));
        assert!(!matches("/a/**/*.ex", "/b/x.ex"));
        assert!(matches("/a/**", "/a/b/c"));
        assert!(matches("**/*.rs", "src/lib.rs"));
        assert!(matches("**/*.rs", "lib.rs"));
    }

    #[test]
    fn classes_braces_and_escapes() {
        assert!(matches("/[ab].txt", "/a.txt"));
        assert!(!matches("/[!ab].txt", "/a.txt"));
        assert!(matches("/[!ab].txt", "/c.txt"));
        assert!(matches("/[a-c].txt", "/b.txt"));
        assert!(matches("/x.{ex,exs}", "/x.exs"));
        assert!(!matches("/x.{ex,exs}", "/x.rs"));
        assert!(matches(r"/\*.txt", "/*.txt"));
        assert!(!matches(r"/\*.txt", "/a.txt"));
        assert!(matches("/a[.txt", "/a[.txt"));
        assert!(matches("/(x)+.txt", "/(x)+.txt"));
        assert!(Glob::new("/{a,b").is_err());
    }

    #[test]
    fn literal_prefix_is_where_the_walk_starts() {
        assert_eq!(
            Glob::new("/w/lib/**/*.ex").unwrap().literal_prefix,
            "/w/lib"
        );
        assert_eq!(Glob::new("/*.ex").unwrap().literal_prefix, "/");
        assert_eq!(Glob::new("/w/a.txt").unwrap().literal_prefix, "/w/a.txt");
    }

    #[test]
    fn relative_paths() {
        assert_eq!(relative_to("/w/a/b", "/w"), "a/b");
        assert_eq!(relative_to("/x/a", "/w"), "/x/a");
        assert_eq!(relative_to("/wx/a", "/w"), "/wx/a");
        assert_eq!(relative_to("/a/b", ""), "a/b");
    }

    #[test]
    fn lines_are_cut_at_a_character_boundary() {
        let line = "é".repeat(MAX_LINE_BYTES);
        let cut = cut_line(line.as_bytes());
        assert!(cut.len() <= MAX_LINE_BYTES);
        assert!(std::str::from_utf8(&cut).is_ok());
    }
}
