//! `state/1`: a plain view of the shell (env, variables, cwd, functions,
//! aliases, filesystem usage), taken between scripts.

use std::collections::HashMap;

use rustler::{Env, LocalPid, Term};

use crate::nif::error::NifResult;
use crate::result::reason::Failure;
use crate::run::reply::{Caller, Payload, ReplyTo};
use crate::session::lifecycle::Op;
use crate::term::value::Value;
use crate::{run::guard, run::runtime};

use super::resource::{op_for, Handle};

/// `state/1`: a plain view of the shell, taken between scripts.
pub fn state(op: Op, reply: ReplyTo) {
    runtime::spawn(async move {
        let outcome = guard::catch_future(async {
            let bash = op.turn().await?;
            let mut view = ShellStateView::from(bash.shell_state());
            view.fs_usage = bash.fs().usage();
            Ok::<_, Failure>(view)
        })
        .await;
        drop(op);
        match outcome {
            Ok(Ok(view)) => reply.finish(&view),
            Ok(Err(failure)) => reply.finish(&failure.to_value()),
            Err(panic) => reply.finish(&Value::error(format!("internal error: {panic}"))),
        }
    });
}

/// The parts of the shell state `state/1` shows.
pub struct ShellStateView {
    env: HashMap<String, String>,
    variables: HashMap<String, String>,
    cwd: String,
    functions: Vec<String>,
    aliases: HashMap<String, String>,
    last_exit_code: i32,
    /// The filesystem's usage against the `max_fs_bytes` / `max_files`
    /// limits.
    fs_usage: bashkit::FsUsage,
}

impl From<bashkit::ShellState> for ShellStateView {
    fn from(state: bashkit::ShellState) -> Self {
        let mut functions: Vec<String> = state.functions.into_keys().collect();
        functions.sort_unstable();
        Self {
            env: state.env,
            // `shopt` settings live in the variable table as SHOPT_*: they
            // are options, not variables anyone set.
            variables: state
                .variables
                .into_iter()
                .filter(|(k, _)| !k.starts_with("SHOPT_"))
                .collect(),
            cwd: state.cwd.to_string_lossy().into_owned(),
            functions,
            aliases: state.aliases,
            last_exit_code: state.last_exit_code,
            fs_usage: bashkit::FsUsage::default(),
        }
    }
}

impl Payload for ShellStateView {
    fn to_value(&self) -> Value {
        Value::ok_with(Value::map([
            ("env", (&self.env).into()),
            ("variables", (&self.variables).into()),
            ("cwd", (&self.cwd).into()),
            ("functions", self.functions.clone().into()),
            ("aliases", (&self.aliases).into()),
            ("last_exit_code", self.last_exit_code.into()),
            (
                "fs_usage",
                Value::map([
                    ("bytes", self.fs_usage.total_bytes.into()),
                    ("files", self.fs_usage.file_count.into()),
                    ("dirs", self.fs_usage.dir_count.into()),
                ]),
            ),
        ]))
    }
}

/// `state/1`: answers `{:ex_bashkit_reply, ref, {:ok, map} | {:error, _}}`.
#[rustler::nif]
fn session_state(
    env: Env,
    handle: Handle,
    call: Term,
    pid: LocalPid,
    reference: Term,
) -> NifResult<rustler::Atom> {
    let op = op_for(env, &handle, "state/1", call, &pid)?;
    state(op, ReplyTo::new(Caller::process(pid, reference)));
    Ok(rustler::types::atom::ok())
}
