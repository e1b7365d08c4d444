//! `rm` and `tee` as every session runs them: a filesystem failure is the
//! command's own (a message on stderr, exit status 1), as in bash.
//!
//! Why ours and not bashkit's (0.20.2):
//! * bashkit's `tee` passes a write error up as an error of the whole exec
//!   (`{:error, "io error: ..."}`), losing the output of everything that ran
//!   before it, for a read-only mount or a missing directory alike;
//! * bashkit's `rm -f` drops *every* error, so `rm -rf /ro/sub` on a
//!   read-only mount exits 0 having deleted nothing. `-f` forgives only what
//!   does not exist (GNU rm).
//!
//! Our `rm` also keeps GNU rm's `--preserve-root` failsafe (the default):
//! `rm -r /` is refused with GNU's words before anything is touched. (The
//! root filesystem layer of bashkit refuses removing `/` anyway, as
//! "Permission denied", since `/` holds its `/etc`, `/proc` and `/dev`.)
//!
//! bashkit offers no way to wrap one of its own builtins (they are private),
//! so these replace them by name; everything else about them follows
//! bashkit's versions (options, messages, operand order). A `:builtins`
//! entry of the same name still wins: it is registered after these.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use bashkit::{Builtin, BuiltinContext, ExecResult};

/// The commands this module provides, by name.
pub fn all() -> [(&'static str, Box<dyn Builtin>); 2] {
    [("rm", Box::new(Rm)), ("tee", Box::new(Tee))]
}

/// A filesystem error in the words a script sees.
fn reason(error: &bashkit::Error) -> String {
    match error {
        bashkit::Error::Io(io) => io.to_string(),
        other => other.to_string(),
    }
}

/// `file` as an absolute, normalized sandbox path (as bashkit's builtins
/// resolve operands).
fn resolve(cwd: &Path, file: &str) -> PathBuf {
    let path = Path::new(file);
    if path.is_absolute() {
        bashkit::normalize_path(path)
    } else {
        bashkit::normalize_path(&bashkit::vfs_join(cwd, path))
    }
}

fn is_not_found(error: &bashkit::Error) -> bool {
    matches!(error, bashkit::Error::Io(io) if io.kind() == ErrorKind::NotFound)
}

fn invalid_option(command: &str, option: &str) -> ExecResult {
    ExecResult::err(
        format!(
            "{command}: invalid option -- '{}'\nTry '{command} --help' for more information.\n",
            option.trim_start_matches('-')
        ),
        1,
    )
}

/// `rm [-f] [-r|-R] FILE...`.
pub struct Rm;

const RM_HELP: &str = "Usage: rm [OPTION]... [FILE]...\nRemove (unlink) the FILE(s).\n\n  -f\t\tignore nonexistent files and arguments, never prompt\n  -r, -R\tremove directories and their contents recursively\n      --help\tdisplay this help and exit\n      --version\toutput version information and exit\n";

#[bashkit::async_trait]
impl Builtin for Rm {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let mut recursive = false;
        let mut force = false;
        let mut preserve_root = true;
        let mut files: Vec<&String> = Vec::new();
        let mut options_done = false;
        for arg in ctx.args {
            if options_done {
                files.push(arg);
            } else if arg == "--" {
                options_done = true;
            } else if let Some(long) = arg.strip_prefix("--") {
                match long.split('=').next().unwrap_or("") {
                    "help" => return Ok(ExecResult::ok(RM_HELP.to_string())),
                    "version" => return Ok(ExecResult::ok("rm (bashkit) 0.1\n".to_string())),
                    "recursive" => recursive = true,
                    "force" => force = true,
                    "no-preserve-root" => preserve_root = false,
                    "preserve-root" => preserve_root = true,
                    "dir" | "interactive" | "verbose" | "one-file-system" => {}
                    _ => {
                        return Ok(ExecResult::err(
                            format!(
                                "rm: unrecognized option '{arg}'\nTry 'rm --help' for more \
                                 information.\n"
                            ),
                            1,
                        ))
                    }
                }
            } else if arg.starts_with('-') && arg.len() > 1 {
                for c in arg[1..].chars() {
                    match c {
                        'r' | 'R' => recursive = true,
                        'f' => force = true,
                        'i' | 'I' | 'd' | 'v' => {}
                        _ => return Ok(invalid_option("rm", &c.to_string())),
                    }
                }
            } else {
                files.push(arg);
            }
        }

        if files.is_empty() {
            // GNU rm: `-f` with no operands is not an error.
            if force {
                return Ok(ExecResult::ok(String::new()));
            }
            return Ok(ExecResult::err("rm: missing operand\n".to_string(), 1));
        }

        // Each failing operand is reported and the rest still go; the
        // status is 1 if any failed.
        let mut stderr = String::new();
        for file in files {
            let path = resolve(ctx.cwd, file);
            if recursive && preserve_root && path == Path::new("/") {
                let same = if file.as_str() == "/" {
                    String::new()
                } else {
                    " (same as '/')".to_string()
                };
                stderr.push_str(&format!(
                    "rm: it is dangerous to operate recursively on '{file}'{same}\nrm: use \
                     --no-preserve-root to override this failsafe\n"
                ));
                continue;
            }
            // lstat: rm acts on a link itself (dangling links included).
            let meta = match ctx.fs.lstat(&path).await {
                Ok(meta) => meta,
                Err(e) if force && is_not_found(&e) => continue,
                Err(_) => {
                    stderr.push_str(&format!(
                        "rm: cannot remove '{file}': No such file or directory\n"
                    ));
                    continue;
                }
            };
            if meta.file_type.is_dir() && !recursive {
                stderr.push_str(&format!("rm: cannot remove '{file}': Is a directory\n"));
                continue;
            }
            match ctx.fs.remove(&path, recursive).await {
                Ok(()) => {}
                // Gone meanwhile: what -f forgives.
                Err(e) if force && is_not_found(&e) => {}
                Err(e) => {
                    stderr.push_str(&format!("rm: cannot remove '{file}': {}\n", reason(&e)));
                }
            }
        }
        Ok(if stderr.is_empty() {
            ExecResult::ok(String::new())
        } else {
            ExecResult::err(stderr, 1)
        })
    }
}

/// `tee [-a] [-i] [-p] [--output-error[=MODE]] FILE...`.
pub struct Tee;

const TEE_HELP: &str = "Usage: tee [OPTION]... [FILE]...\nCopy standard input to each FILE, and also to standard output.\n\n  -a, --append\t\tappend to the given FILEs, do not overwrite\n  -i, --ignore-interrupts\tignore interrupt signals\n  -p\t\t\toperate in a more appropriate MODE with pipes\n      --output-error[=MODE]\tset behavior on write error\n      --help\t\tdisplay this help and exit\n      --version\t\toutput version information and exit\n";

#[bashkit::async_trait]
impl Builtin for Tee {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let mut append = false;
        let mut files: Vec<&String> = Vec::new();
        let mut options_done = false;
        for arg in ctx.args {
            if options_done || arg == "-" || !arg.starts_with('-') {
                // tee(1): a FILE of `-` is a file named `-`.
                files.push(arg);
            } else if arg == "--" {
                options_done = true;
            } else if let Some(long) = arg.strip_prefix("--") {
                match long.split('=').next().unwrap_or("") {
                    "help" => return Ok(ExecResult::ok(TEE_HELP.to_string())),
                    "version" => return Ok(ExecResult::ok("tee (bashkit) 0.1\n".to_string())),
                    "append" => append = true,
                    // No signals and no broken pipes in the sandbox.
                    "ignore-interrupts" | "output-error" => {}
                    _ => {
                        return Ok(ExecResult::err(
                            format!(
                                "tee: unrecognized option '{arg}'\nTry 'tee --help' for more \
                                 information.\n"
                            ),
                            2,
                        ))
                    }
                }
            } else {
                for c in arg[1..].chars() {
                    match c {
                        'a' => append = true,
                        'i' | 'p' => {}
                        _ => {
                            let mut result = invalid_option("tee", &c.to_string());
                            result.exit_code = 2;
                            return Ok(result);
                        }
                    }
                }
            }
        }

        let input: &[u8] = ctx.stdin.map_or(&[], |stdin| stdin.as_bytes());
        let mut stderr = String::new();
        for file in files {
            let path = resolve(ctx.cwd, file);
            let written = if append {
                ctx.fs.append_file(&path, input).await
            } else {
                ctx.fs.write_file(&path, input).await
            };
            if let Err(e) = written {
                // Like GNU tee: report, go on with the other files, and
                // still copy the input to stdout.
                stderr.push_str(&format!("tee: {file}: {}\n", reason(&e)));
            }
        }
        let stdout = ctx.stdin.cloned().unwrap_or_default();
        let mut result = ExecResult::ok(stdout);
        if !stderr.is_empty() {
            result.stderr = stderr.into();
            result.exit_code = 1;
        }
        Ok(result)
    }
}
