//! Decode the option term that `ExBashkit.Session.Options` produced and turn
//! it into a configured `bashkit::Bash`. Every field arrives filled in: the
//! defaults are Elixir's (`ExBashkit.Session.Defaults`).
//!
//! Elixir validates shape and types (unknown keys, wrong types, negative
//! counts); this side trusts the shape but not the content: a path or a
//! pattern may still be refused here, and that comes back as `Err(message)`.

pub(crate) mod cache;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bashkit::{Bash, ExecutionLimits, FileSystem, FsLimits, InMemoryFs, SessionLimits};

use crate::fs::written::{Written, WrittenFs};
use crate::image::layer::BaseLayer;
use crate::image::BaseImage;

use crate::callbacks::builtins::ElixirBuiltin;
use crate::callbacks::virtual_fs::ElixirFs;
use crate::callbacks::CallbackChannel;
use crate::map_struct;
use crate::policy::commands::{CommandPolicy, Permits};
use crate::policy::egress::RequestLog;
use crate::run::interrupt::{Interrupt, InterruptibleSleep};
use crate::term::value::Bytes;

map_struct! {
    /// Resource limits; `None` keeps bashkit's default. Elixir clamps values past
    /// `u64::MAX` ("unlimited"), so conversions here saturate.
    #[derive(Debug, Clone, Default)]
    pub struct Limits {
        pub max_commands: Option<u64>,
        pub max_loop_iterations: Option<u64>,
        pub max_total_loop_iterations: Option<u64>,
        pub max_function_depth: Option<u64>,
        pub max_input_bytes: Option<u64>,
        pub timeout_ms: Option<u64>,
        pub max_stdout_bytes: Option<u64>,
        pub max_stderr_bytes: Option<u64>,
        pub max_total_commands: Option<u64>,
        pub max_exec_calls: Option<u64>,
        /// Entries the `history` builtin keeps (bashkit's `max_history_entries`).
        pub max_history_entries: Option<u64>,
        /// The in-memory filesystem's quotas (bashkit's `FsLimits`).
        pub max_fs_bytes: Option<u64>,
        pub max_files: Option<u64>,
        pub max_file_bytes: Option<u64>,
    }
}

map_struct! {
    /// One host directory mount.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct MountSpec {
        pub vfs_path: String,
        pub host_path: String,
        pub writable: bool,
    }
}

map_struct! {
    /// Everything `new/1` configures, as validated by Elixir.
    #[derive(Debug, Clone)]
    pub struct SessionConfig {
        pub env: Vec<(String, String)>,
        pub cwd: String,
        pub username: String,
        pub hostname: String,
        pub files: Vec<(String, Bytes)>,
        pub limits: Limits,
        pub mounts: Vec<MountSpec>,
        pub allowed_mount_paths: Option<Vec<String>>,
        /// `None` (or empty): no network; `:all` arrives as `allow_all_net: true`.
        pub allow_net: Option<Vec<String>>,
        pub allow_all_net: bool,
        pub block_private_ips: bool,
        pub builtins: Vec<String>,
        pub virtual_fs: Vec<String>,
        pub python: Vec<String>,
        /// `:git`, `:sqlite`, `:typescript` (see `commands/tools.rs`).
        pub git: Option<crate::commands::tools::GitGrant>,
        pub sqlite: bool,
        pub typescript: bool,
        /// `rootfs:`: a tar (or tar.gz) laid into the filesystem before `:files`.
        pub rootfs: Option<Bytes>,
        /// `base:`: the image mounted copy-on-write under the session's layer.
        pub base: Option<BaseImage>,
        /// `:commands`: which commands exist (`policy/commands.rs`); `None`: all.
        pub commands: Option<CommandPolicy>,
        /// `:soft_delete`: the trash directory, or `None` (deletes are real).
        pub soft_delete: Option<String>,
        /// `:credentials` (`policy/credentials.rs`).
        pub credentials: Vec<crate::policy::credentials::CredentialSpec>,
        /// Whether an `:egress` callback decides each request (`policy/egress.rs`).
        pub egress: bool,
        /// Whether, in a worker, each exec that changed the state leaves a
        /// recovery point (`session/recovery.rs`).
        pub durable: bool,
    }
}

/// A minimal configuration for unit tests. The product's defaults are
/// declared once, in Elixir (`ExBashkit.Session.Defaults`), and always
/// arrive in the decoded term: this side has none of its own.
#[cfg(test)]
impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            env: Vec::new(),
            cwd: "/".into(),
            username: "test-user".into(),
            hostname: "test-host".into(),
            files: Vec::new(),
            limits: Limits::default(),
            mounts: Vec::new(),
            allowed_mount_paths: None,
            allow_net: None,
            allow_all_net: false,
            block_private_ips: true,
            builtins: Vec::new(),
            virtual_fs: Vec::new(),
            python: Vec::new(),
            git: None,
            sqlite: false,
            typescript: false,
            rootfs: None,
            base: None,
            commands: None,
            soft_delete: None,
            credentials: Vec::new(),
            egress: false,
            durable: false,
        }
    }
}

/// The session's own filesystem layer, below bashkit's system layer
/// (`/etc`, `/proc`, command stubs) and mounts: what snapshots hold and
/// `export_tar` walks.
#[derive(Clone)]
pub enum Layer {
    Plain(Arc<WrittenFs>),
    Base(Arc<BaseLayer>),
}

impl Layer {
    /// A fresh layer for `config`: an in-memory filesystem with the
    /// session's quotas (`:limits` `max_fs_bytes`, ...) and the user's home,
    /// as `Bash::builder()` makes it, or an overlay over the base image
    /// (whose quotas are the image's).
    pub fn new(config: &SessionConfig) -> Self {
        match &config.base {
            Some(BaseImage(image)) => Layer::Base(Arc::new(BaseLayer::new(
                Arc::clone(image),
                &config.username,
            ))),
            None => {
                let fs = InMemoryFs::with_limits(fs_limits(&config.limits));
                fs.add_dir(format!("/home/{}", config.username), 0o755);
                Layer::Plain(Arc::new(WrittenFs::new(fs)))
            }
        }
    }

    pub fn fs(&self) -> Arc<dyn FileSystem> {
        match self {
            Layer::Plain(fs) => Arc::clone(fs) as Arc<dyn FileSystem>,
            Layer::Base(layer) => Arc::clone(layer) as Arc<dyn FileSystem>,
        }
    }

    /// What changed in the layer since the last call (a layer over a base
    /// image cannot tell: anything).
    pub fn take_written(&self) -> Written {
        match self {
            Layer::Plain(fs) => fs.take_written(),
            Layer::Base(_) => Written::All,
        }
    }

    /// The layer that records its writes, when it is not over a base image.
    pub fn recorded(&self) -> Option<&Arc<WrittenFs>> {
        match self {
            Layer::Plain(fs) => Some(fs),
            Layer::Base(_) => None,
        }
    }

    /// The overlay, when the session has a base image.
    pub fn base(&self) -> Option<&Arc<BaseLayer>> {
        match self {
            Layer::Base(layer) => Some(layer),
            Layer::Plain(_) => None,
        }
    }
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

/// bashkit's execution limits with the user's overrides applied.
pub fn execution_limits(limits: &Limits) -> ExecutionLimits {
    let mut out = ExecutionLimits::new();
    if let Some(v) = limits.max_commands {
        out = out.max_commands(to_usize(v));
    }
    if let Some(v) = limits.max_loop_iterations {
        out = out.max_loop_iterations(to_usize(v));
    }
    if let Some(v) = limits.max_total_loop_iterations {
        out = out.max_total_loop_iterations(to_usize(v));
    }
    if let Some(v) = limits.max_function_depth {
        out = out.max_function_depth(to_usize(v));
    }
    if let Some(v) = limits.max_input_bytes {
        out = out.max_input_bytes(to_usize(v));
    }
    if let Some(v) = limits.timeout_ms {
        out = out.timeout(Duration::from_millis(v));
    }
    if let Some(v) = limits.max_stdout_bytes {
        out = out.max_stdout_bytes(to_usize(v));
    }
    if let Some(v) = limits.max_stderr_bytes {
        out = out.max_stderr_bytes(to_usize(v));
    }
    if let Some(v) = limits.max_history_entries {
        out = out.max_history_entries(to_usize(v));
    }
    out
}

/// The in-memory filesystem's quotas with the user's overrides applied
/// (host mounts and `:virtual_fs` backends are not counted).
pub fn fs_limits(limits: &Limits) -> FsLimits {
    let mut out = FsLimits::new();
    if let Some(v) = limits.max_fs_bytes {
        out = out.max_total_bytes(v);
    }
    if let Some(v) = limits.max_files {
        out = out.max_file_count(v);
    }
    if let Some(v) = limits.max_file_bytes {
        out = out.max_file_size(v);
    }
    out
}

/// Cumulative limits across every exec of one session. Unset means
/// unlimited: bashkit's default of 1000 exec calls would otherwise break a
/// long-lived session without warning.
pub fn session_limits(limits: &Limits) -> SessionLimits {
    SessionLimits::new()
        .max_total_commands(limits.max_total_commands.unwrap_or(u64::MAX))
        .max_exec_calls(limits.max_exec_calls.unwrap_or(u64::MAX))
}

/// The route for back-calls, when `config` has builtins, virtual_fs mounts
/// or an `:egress` callback.
pub fn callback_channel(
    config: &SessionConfig,
    interrupt: &Arc<Interrupt>,
) -> Option<Arc<CallbackChannel>> {
    (!config.builtins.is_empty() || !config.virtual_fs.is_empty() || config.egress)
        .then(|| CallbackChannel::new(Arc::clone(interrupt)))
}

/// `build_bash_on` over a fresh layer (the unit tests' shorthand).
#[cfg(test)]
pub fn build_bash(
    config: &SessionConfig,
    channel: Option<&Arc<CallbackChannel>>,
    interrupt: Option<&Arc<Interrupt>>,
) -> Result<Bash, String> {
    build_bash_on(
        config,
        channel,
        interrupt,
        &Layer::new(config),
        &RequestLog::new(),
    )
}

/// Build the interpreter `config` describes over `layer` (sessions keep
/// the layer); `prepare` must run next. `interrupt` (sessions only) makes
/// waiting commands cancellable; its requests are recorded in `requests`.
pub fn build_bash_on(
    config: &SessionConfig,
    channel: Option<&Arc<CallbackChannel>>,
    interrupt: Option<&Arc<Interrupt>>,
    layer: &Layer,
    requests: &Arc<RequestLog>,
) -> Result<Bash, String> {
    // Soft delete wraps the session's layer, so every command's deletes
    // (and `Session.trash/1`) see the same trash.
    let fs = match &config.soft_delete {
        Some(trash) => Arc::new(crate::session::trash::SoftDeleteFs::new(layer.fs(), trash))
            as Arc<dyn FileSystem>,
        None => layer.fs(),
    };
    let mut builder = Bash::builder()
        .fs(fs)
        .cwd(&config.cwd)
        .username(&config.username)
        .hostname(&config.hostname)
        .limits(execution_limits(&config.limits))
        .session_limits(session_limits(&config.limits))
        .filesystem_limits(fs_limits(&config.limits));
    for (key, value) in &config.env {
        builder = builder.env(key, value);
    }
    let (with_placeholders, credentials) = crate::policy::credentials::register(builder, config)?;
    builder = with_placeholders
        .network(crate::policy::net::allowlist(config)?)
        .http_transport(crate::policy::egress::transport(
            config,
            channel,
            requests,
            credentials,
        )?);
    // The command policy: bashkit's commands outside it are filtered out of
    // the table, ours are not registered (see `policy/commands.rs` for why that
    // covers every route to a command).
    let permits = Permits::new(config.commands.as_ref())?;
    let keep = permits.clone();
    // bashkit keeps one filter: the one place that also drops its own
    // commands the session was not granted (`git`, see `commands/tools.rs`).
    let ungranted = crate::commands::tools::ungranted(config);
    builder = builder.builtin_filter(move |name| keep.permits(name) && !ungranted.contains(&name));
    for (name, command) in crate::commands::strict::all() {
        if permits.permits(name) {
            builder = builder.builtin(name, command);
        }
    }
    // bashkit's commands whose filesystem errors would end the exec, and
    // `help` under a policy, run in a nested interpreter (`commands/nested.rs`).
    let nested = Arc::new(crate::commands::nested::Nested::new(
        execution_limits(&config.limits),
        &config.username,
        &config.hostname,
        interrupt,
    ));
    for name in crate::commands::nested::CONTAINED {
        if permits.permits(name) {
            let contained = crate::commands::nested::Contained::new(name, Arc::clone(&nested));
            builder = builder.builtin(*name, Box::new(contained));
        }
    }
    // Sessions only: a one-shot's deadline is its interpreter's own.
    if interrupt.is_some() {
        for name in crate::commands::nested::DEADLINE_BOUND {
            if permits.permits(name) {
                let bound = crate::commands::nested::DeadlineBound::new(name, Arc::clone(&nested));
                builder = builder.builtin(*name, Box::new(bound));
            }
        }
    }
    if config.commands.is_some() {
        let help = crate::policy::help::PolicyHelp::new(permits.clone(), nested);
        builder = builder.builtin("help", Box::new(help));
    }
    if let Some(interrupt) = interrupt.filter(|_| permits.permits("sleep")) {
        let sleep = InterruptibleSleep::new(Arc::clone(interrupt));
        builder = builder.builtin("sleep", Box::new(sleep));
    }
    if let Some(channel) = channel {
        for name in config.builtins.iter().filter(|n| permits.permits(n)) {
            let builtin = ElixirBuiltin::new(name.clone(), Arc::clone(channel));
            builder = builder.builtin(name, Box::new(builtin));
        }
    }
    builder = builder.before_tool(Box::new(crate::policy::bombs::refuse));
    builder = crate::commands::python::register(builder, config, &permits);
    builder = crate::commands::tools::register(builder, config, &permits, interrupt)?;
    let mut bash = builder.build();
    crate::commands::python::hide_opt_in(&mut bash, config);
    crate::commands::tools::hide_opt_in(&mut bash, config);
    enable_alias_expansion(&mut bash);
    Ok(bash)
}

/// Whether `prepare` has anything to do (it is skipped on the fast path of
/// a purely in-memory session).
pub fn needs_prepare(config: &SessionConfig) -> bool {
    !config.mounts.is_empty()
        || !config.files.is_empty()
        || !config.virtual_fs.is_empty()
        || config.rootfs.is_some()
        || config.cwd != "/"
}

/// The asynchronous half of construction: attach host mounts, seed
/// `:files` (through the mounts, like `write_file/3`), create the cwd, mount
/// the virtual_fs backends.
pub async fn prepare(
    bash: &Bash,
    config: &SessionConfig,
    channel: Option<&Arc<CallbackChannel>>,
) -> Result<(), String> {
    prepare_with(bash, config, channel, Seed::Everywhere).await
}

/// `prepare` for `reset/1`: the same, except that nothing is written
/// through a host mount. Host files are not part of the session's state
/// (reset does not roll them back), so a `:files` entry under a mount must
/// not overwrite what happened to that host file since `new/1`.
pub async fn prepare_reset(
    bash: &Bash,
    config: &SessionConfig,
    channel: Option<&Arc<CallbackChannel>>,
) -> Result<(), String> {
    prepare_with(bash, config, channel, Seed::OutsideMounts).await
}

/// Where `:files` and the cwd are (re)created.
#[derive(Clone, Copy, PartialEq)]
enum Seed {
    Everywhere,
    OutsideMounts,
}

async fn prepare_with(
    bash: &Bash,
    config: &SessionConfig,
    channel: Option<&Arc<CallbackChannel>>,
    seed: Seed,
) -> Result<(), String> {
    crate::fs::mounts::apply(bash, &config.mounts, config.allowed_mount_paths.as_deref()).await?;
    if let Some(Bytes(tar)) = &config.rootfs {
        let entries = crate::image::archive::parse(tar, &bashkit::FsLimits::default())
            .map_err(|e| format!(":rootfs: {e}"))?;
        crate::image::archive::overlay_entries(bash.fs().as_ref(), entries)
            .map_err(|e| format!(":rootfs: {e}"))?;
    }
    seed_files(&bash.fs(), config, seed).await?;
    if let Some(channel) = channel {
        for mount in &config.virtual_fs {
            let backend = ElixirFs::new(mount.clone(), Arc::clone(channel));
            bash.mount(mount, Arc::new(backend))
                .map_err(|e| format!("cannot mount :virtual_fs at {mount}: {e}"))?;
        }
    }
    Ok(())
}

/// A session behaves like an interactive shell, where aliases defined by one
/// command expand in the next (`shopt -s expand_aliases`); bashkit keeps the
/// shopt as a shell variable.
fn enable_alias_expansion(bash: &mut Bash) {
    let mut state = bash.shell_state();
    state
        .variables
        .insert("SHOPT_expand_aliases".to_string(), "1".to_string());
    bash.restore_shell_state(&state);
}

async fn seed_files(
    fs: &Arc<dyn FileSystem>,
    config: &SessionConfig,
    seed: Seed,
) -> Result<(), String> {
    let skipped =
        |path: &str| seed == Seed::OutsideMounts && crate::fs::mounts::is_under(config, path);
    for (path, Bytes(content)) in &config.files {
        if skipped(path) {
            continue;
        }
        crate::session::fs::write_creating_parents(fs, path, content)
            .await
            .map_err(|e| format!("cannot write :files entry {path}: {e}"))?;
    }
    // A cwd the session starts in must exist, or the first `ls` fails; and
    // must be a directory.
    let cwd = Path::new(&config.cwd);
    if config.cwd != "/" && !skipped(&config.cwd) {
        match fs.stat(cwd).await {
            Ok(meta) if meta.file_type.is_dir() => {}
            Ok(_) => return Err(format!(":cwd {} is not a directory", config.cwd)),
            Err(_) => fs
                .mkdir(cwd, true)
                .await
                .map_err(|e| format!("cannot create :cwd {}: {e}", config.cwd))?,
        }
    }
    Ok(())
}
