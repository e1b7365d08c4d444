//! Custom builtins whose body is an Elixir function (`:builtins` option).
//!
//! The command's arguments, stdin, exported environment and working
//! directory go to Elixir as `{:builtin, name, args, stdin, env, cwd}`; the answer becomes the command's
//! stdout, stderr and exit code. A back-call that fails (interrupted, caller
//! gone) fails only this command, the way a crashed program would.

use std::collections::HashMap;
use std::sync::Arc;

use bashkit::{Builtin, BuiltinContext, ExecResult};

use crate::callbacks::{Answer, CallError, CallbackChannel, Request};
use crate::term::value::Value;

/// A builtin registered under `name` that forwards to Elixir.
pub struct ElixirBuiltin {
    name: String,
    channel: Arc<CallbackChannel>,
}

impl ElixirBuiltin {
    pub fn new(name: String, channel: Arc<CallbackChannel>) -> Self {
        Self { name, channel }
    }
}

struct BuiltinRequest<'c> {
    name: &'c str,
    args: &'c [String],
    stdin: &'c [u8],
    env: &'c HashMap<String, String>,
    cwd: String,
}

impl Request for BuiltinRequest<'_> {
    fn to_value(&self) -> Value {
        Value::tuple([
            Value::atom("builtin"),
            self.name.into(),
            Value::List(self.args.iter().map(Value::from).collect()),
            Value::bin(self.stdin),
            self.env.into(),
            self.cwd.as_str().into(),
        ])
    }
}

#[bashkit::async_trait]
impl Builtin for ElixirBuiltin {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let request = BuiltinRequest {
            name: &self.name,
            args: ctx.args,
            stdin: ctx.stdin.map(|s| s.as_bytes()).unwrap_or(&[]),
            env: ctx.env,
            cwd: ctx.cwd.to_string_lossy().into_owned(),
        };
        Ok(match self.channel.call(&request).await {
            Ok(Answer::Command {
                stdout,
                stderr,
                exit_code,
            }) => ExecResult {
                stdout: stdout.into(),
                stderr: stderr.into(),
                exit_code,
                ..Default::default()
            },
            Ok(other) => ExecResult::err(
                format!("{}: unexpected answer from Elixir: {other:?}\n", self.name),
                1,
            ),
            Err(CallError::Interrupted) => {
                ExecResult::err(format!("{}: interrupted\n", self.name), 130)
            }
            Err(CallError::CallerGone) => {
                ExecResult::err(format!("{}: the calling process is gone\n", self.name), 1)
            }
            Err(CallError::NoTarget) => ExecResult::err(
                format!("{}: builtin unavailable outside exec\n", self.name),
                1,
            ),
        })
    }
}
