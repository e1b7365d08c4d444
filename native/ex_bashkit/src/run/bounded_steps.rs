//! Which scripts may loop, yet cost at most a known amount per command.
//!
//! A script that is not quick (`run/shape.rs`) runs on a dirty CPU
//! scheduler, and while it runs there the caller's own scheduler has
//! nothing to do: the VM lets it spin before it sleeps, about 270–330 µs of
//! CPU per exec on this project's 2-core machine (bench/DECISIONS.md,
//! "Short loops on the caller's scheduler"). For a short loop (a 50-iteration `while`, ~400 µs)
//! that spin nearly doubles what the exec costs. Such a loop can run on the
//! caller's scheduler instead if nothing in it can make one command
//! expensive: bashkit's live execution yields every 64 commands, where the
//! runner checks its time slice (`run/runner.rs`), so the time it holds that
//! scheduler is the slice plus at most 64 commands.
//!
//! [`read`] says a script has bounded steps when
//! - its commands are the builtins of [`STEP_COMMANDS`] (no file is
//!   written: bashkit's in-memory filesystem walks every entry on each
//!   write to check its limits, so a loop of `mkdir` costs more each step),
//!   assignments, `(( ))` and `[[ ]]`, in `if`, `while`, `until`, `for ((;;))`
//!   and `{ }`: no pipeline, redirection, subshell, function or job;
//! - every word is literal text that does not expand (no glob, brace or
//!   tilde) or reads one of the script's own integers, and every arithmetic
//!   expression is made of numbers, operators and those integers;
//! - the script's own integers are the variables it sets at its top level
//!   (where every command runs, in order) to an integer (a literal, an
//!   arithmetic expansion or another own integer) before anything reads
//!   them, and every assignment anywhere sets an integer.
//!
//! So no expansion can be bigger than the script's text or an integer, and
//! no arithmetic can evaluate a string the session left behind (bash
//! evaluates a variable's value as an expression, recursively). That holds
//! while the script's assignments take: a session where a script may have
//! made a variable readonly or a nameref keeps its loops off the caller's
//! scheduler (`Session::quick_fits`, `crate::run::shape::SETS_ATTRIBUTES`). What each
//! command costs is then bashkit's own per-command cost, which grows with
//! the session's exported variables: the session measures it
//! (`Session::quick_fits`). Being wrong here would hold a normal scheduler,
//! so the rules admit only what they can bound; everything else runs as
//! before.

use bashkit::parser::{
    ArithmeticForCommand, AssignmentValue, Command, CompoundCommand, ListOperator, SimpleCommand,
    UntilCommand, WhileCommand, Word, WordPart,
};

use crate::run::shape::{OwnCommands, EXPANDING};

/// Builtins whose cost is bounded by their arguments and that write no
/// file.
const STEP_COMMANDS: &[&str] = &[
    ":", "[", "break", "continue", "echo", "exit", "false", "test", "true",
];

/// What an arithmetic expression may hold besides numbers and names.
const ARITHMETIC_OPERATORS: &str = "+-*/%<>=!&|^~?:(), \t";

/// The longest integer literal an own integer may be set to.
const MAX_INTEGER_DIGITS: usize = 18;

/// Whether `commands`, a script's syntax tree, has bounded steps (see the
/// module doc). `own` are the session's custom builtins: a name that is one
/// of them is a back-call, not the builtin it shadows.
pub fn read(commands: &[Command], own: &OwnCommands) -> bool {
    let mut steps = Steps {
        own,
        integers: Vec::new(),
        bounded: true,
    };
    steps.commands(commands, true);
    steps.bounded
}

struct Steps<'a> {
    own: &'a OwnCommands,
    /// The script's own integers so far: the only variables it may read.
    integers: Vec<String>,
    bounded: bool,
}

impl Steps<'_> {
    /// `top`: the commands run whenever the script runs, in order.
    fn commands(&mut self, commands: &[Command], top: bool) {
        for command in commands {
            self.command(command, top);
        }
    }

    fn command(&mut self, command: &Command, top: bool) {
        match command {
            Command::Simple(simple) => self.simple(simple, top),
            Command::Pipeline(pipeline) if pipeline.commands.len() == 1 && !pipeline.negated => {
                self.command(&pipeline.commands[0], top)
            }
            Command::List(list) => {
                self.command(&list.first, top);
                for (operator, command) in &list.rest {
                    // After `&&` or `||` a command may not run.
                    let top = top && *operator == ListOperator::Semicolon;
                    self.bounded &= *operator != ListOperator::Background;
                    self.command(command, top);
                }
            }
            Command::Compound(compound, redirects) if redirects.is_empty() => {
                self.compound(compound, top)
            }
            _ => self.bounded = false,
        }
    }

    fn compound(&mut self, compound: &CompoundCommand, top: bool) {
        match compound {
            CompoundCommand::If(command) => {
                self.commands(&command.condition, false);
                self.commands(&command.then_branch, false);
                for (condition, branch) in &command.elif_branches {
                    self.commands(condition, false);
                    self.commands(branch, false);
                }
                if let Some(branch) = &command.else_branch {
                    self.commands(branch, false);
                }
            }
            CompoundCommand::While(WhileCommand {
                condition, body, ..
            })
            | CompoundCommand::Until(UntilCommand {
                condition, body, ..
            }) => {
                self.commands(condition, false);
                self.commands(body, false);
            }
            CompoundCommand::ArithmeticFor(ArithmeticForCommand {
                init,
                condition,
                step,
                body,
                ..
            }) => {
                // Its start runs once, whenever the loop does.
                self.arithmetic_start(init, top);
                self.bounded &= self.arithmetic(condition) && self.arithmetic(step);
                self.commands(body, false);
            }
            CompoundCommand::BraceGroup(body) => self.commands(body, false),
            CompoundCommand::Arithmetic(expression) => self.bounded &= self.arithmetic(expression),
            CompoundCommand::Conditional(words) => {
                self.bounded &= words.iter().all(|word| self.word(word))
            }
            _ => self.bounded = false,
        }
    }

    fn simple(&mut self, simple: &SimpleCommand, top: bool) {
        let name = match simple.name.parts.as_slice() {
            // Assignments alone.
            [] => "",
            [WordPart::Literal(name)] => name.as_str(),
            _ => return self.bounded = false,
        };
        let command = name.is_empty() || STEP_COMMANDS.contains(&name) && !self.own.has(name);
        let assignments = simple.assignments.iter().all(|assignment| {
            assignment.index.is_none()
                && !assignment.append
                && matches!(&assignment.value, AssignmentValue::Scalar(value) if self.integer(value))
        });
        self.bounded &= command
            && assignments
            && simple.redirects.is_empty()
            && simple.args.iter().all(|word| self.word(word));
        // Assignments alone, where every command runs: from here on the
        // script may read them.
        if self.bounded && top && name.is_empty() {
            for assignment in &simple.assignments {
                self.own_integer(&assignment.name);
            }
        }
    }

    /// A `for ((start; ...))`'s start: `name=expression` at the top level
    /// makes `name` an own integer; anything else must read only own ones.
    fn arithmetic_start(&mut self, start: &str, top: bool) {
        let sets = start.split_once('=').filter(|(name, expression)| {
            top && is_name(name.trim())
                && !expression.starts_with('=')
                && self.arithmetic(expression)
        });
        match sets {
            Some((name, _)) => self.own_integer(name.trim()),
            None => self.bounded &= self.arithmetic(start),
        }
    }

    fn own_integer(&mut self, name: &str) {
        if !self.is_own_integer(name) {
            self.integers.push(name.to_string());
        }
    }

    fn is_own_integer(&self, name: &str) -> bool {
        self.integers.iter().any(|known| known == name)
    }

    /// A value that is an integer: a short literal one, an arithmetic
    /// expansion, an own integer, or nothing.
    fn integer(&self, value: &Word) -> bool {
        match value.parts.as_slice() {
            [] => true,
            [WordPart::Literal(text)] => is_integer_literal(text),
            [WordPart::ArithmeticExpansion(expression)] => self.arithmetic(expression),
            [WordPart::Variable(name)] => self.is_own_integer(name),
            _ => false,
        }
    }

    /// A word no bigger than its text and the integers it reads.
    fn word(&self, word: &Word) -> bool {
        word.parts.iter().all(|part| match part {
            WordPart::Literal(text) => !text.contains(EXPANDING),
            WordPart::Variable(name) => name == "?" || self.is_own_integer(name),
            WordPart::ArithmeticExpansion(expression) => self.arithmetic(expression),
            _ => false,
        })
    }

    /// An expression of decimal numbers, operators and own integers.
    fn arithmetic(&self, expression: &str) -> bool {
        let in_token = |c: char| c.is_ascii_alphanumeric() || c == '_';
        expression
            .chars()
            .all(|c| in_token(c) || ARITHMETIC_OPERATORS.contains(c))
            && expression
                .split(|c| !in_token(c))
                .filter(|token| !token.is_empty())
                .all(|token| {
                    token.bytes().all(|b| b.is_ascii_digit())
                        || is_name(token) && self.is_own_integer(token)
                })
    }
}

/// A shell variable name.
fn is_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `-12`, `0`, `42`: at most [`MAX_INTEGER_DIGITS`] digits.
fn is_integer_literal(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    (1..=MAX_INTEGER_DIGITS).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bashkit::parser::Parser;

    fn bounded(script: &str) -> bool {
        let parsed = Parser::new(script).parse().expect(script);
        read(&parsed.commands, &OwnCommands::NONE)
    }

    #[test]
    fn loops_over_own_integers_have_bounded_steps() {
        for script in [
            "i=0; while [ $i -lt 50 ]; do i=$((i + 1)); done; echo $i",
            "i=0 n=10; until [ \"$i\" -ge $n ]; do (( i++ )); echo \"line $i\"; done",
            "for ((i = 0; i < 100; i++)); do echo $i; done",
            "for ((i=0; i<3; i++)); do if (( i % 2 )); then echo odd; else echo even; fi; done",
            "x=-3; y=$x; z=$((x * y)); [[ $z -eq 9 ]] && echo nine || echo no",
            "i=0; while :; do (( i += 1 )); [ $i -gt 5 ] && break; { echo $i; }; done; exit $?",
            "echo 'a b' \"c\"; true; false",
        ] {
            assert!(bounded(script), "{script}");
        }
    }

    #[test]
    fn anything_that_may_make_one_step_expensive_does_not() {
        for script in [
            // Variables the script did not set, or set where it may not run.
            "while [ $i -lt 50 ]; do i=$((i + 1)); done",
            "echo $HOME",
            "true && i=0; echo $i",
            "if true; then i=0; fi; echo $i",
            "for ((i = 0; i < n; i++)); do :; done",
            "(( x = y ))",
            // Values that are not integers, or that grow.
            "s=abc; echo $s",
            "i=0; i=\"$i$i\"",
            "i=0; i+=1",
            "i=0; a[$i]=1",
            "i=0; echo $((i + $j))",
            "i=0; echo $((16#ff + i))",
            "i=1234567890123456789",
            // Expansions and commands that read more than their text.
            "echo /*",
            "i=0; echo {1..100000}",
            "echo ${x:-y}",
            "echo $(pwd)",
            "cat /f",
            "i=0; while [ $i -lt 9 ]; do mkdir /d$i; (( i++ )); done",
            "printf '%99999999d' 1",
            // Pipelines, redirections, subshells, functions, jobs.
            "echo hi | echo",
            "echo hi > /f",
            "while true; do :; done > /f",
            "(echo hi)",
            "f() { :; }",
            "sleep 1 &",
            "for x in a b; do echo $x; done",
            "case 1 in 1) echo;; esac",
        ] {
            assert!(!bounded(script), "{script}");
        }
    }

    #[test]
    fn a_sessions_own_command_is_a_back_call_not_the_builtin_it_shadows() {
        let parsed = Parser::new("echo hi").parse().unwrap();
        let own = OwnCommands::new(&["echo".into()]);
        assert!(read(&parsed.commands, &OwnCommands::NONE));
        assert!(!read(&parsed.commands, &own));
    }
}
