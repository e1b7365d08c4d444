//! The commands that run a program of their own, `sqlite`/`sqlite3` and
//! `ts` (and its aliases), wrapped so that they keep to the session's
//! rules where bashkit 0.20.2 does not:
//!
//! - a program `policy::bombs::program_bomb` recognises (read from the
//!   arguments and stdin; a program in a file is not read) is refused
//!   before it runs: "NAME: program refused: WHY", exit 1;
//! - an exec's per-call deadline (`timeout_ms:` of `exec/3`) bounds the
//!   program's own budget. bashkit clamps TypeScript's and SQLite's budgets
//!   to the *session's* timeout only, and both run synchronously, where no
//!   timer or cancel reaches them: `ts -c 'for(;;){}'` with a 1.5 s
//!   deadline ran 30 s. With a deadline, the command is made for the call
//!   with a budget of what is left of it (`Interrupt::remaining`).

use std::sync::Arc;
use std::time::Duration;

use bashkit::{Builtin, BuiltinContext, ExecResult};

use crate::policy::bombs::{program_bomb, Language};
use crate::run::interrupt::Interrupt;

/// Makes the command with a budget of at most the given duration.
pub type Make = Arc<dyn Fn(Duration) -> Box<dyn Builtin> + Send + Sync>;

/// One program-running command, checked and deadline-bound.
pub struct Program {
    name: String,
    language: Language,
    /// The command with the session's budget.
    session_budget: Box<dyn Builtin>,
    make: Make,
    interrupt: Option<Arc<Interrupt>>,
}

impl Program {
    pub fn new(
        name: &str,
        language: Language,
        make: Make,
        session_budget: Duration,
        interrupt: Option<&Arc<Interrupt>>,
    ) -> Self {
        Self {
            name: name.to_string(),
            language,
            session_budget: make(session_budget),
            make,
            interrupt: interrupt.cloned(),
        }
    }
}

#[bashkit::async_trait]
impl Builtin for Program {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let stdin = ctx.stdin.map(|s| s.to_string());
        let texts = ctx.args.iter().map(String::as_str).chain(stdin.as_deref());
        for text in texts {
            if let Some(why) = program_bomb(self.language, text) {
                return Ok(ExecResult::err(
                    format!("{}: program refused: {why}\n", self.name),
                    1,
                ));
            }
        }
        match self
            .interrupt
            .as_ref()
            .and_then(|i| Some((i, i.remaining()?)))
        {
            Some((interrupt, left)) => {
                let answer = (self.make)(left).execute(ctx).await;
                interrupt.or_timed_out(answer).await
            }
            None => self.session_budget.execute(ctx).await,
        }
    }
}
