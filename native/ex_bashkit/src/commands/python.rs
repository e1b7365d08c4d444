//! The sandboxed `python` builtin (the `:python` option of `Session.new/1`).
//!
//! It is bashkit's own embedded interpreter (Monty, crate feature `python`),
//! registered under the names the user chose. It runs in process, reads and
//! writes the session's filesystem and has no network.
//!
//! bashkit refuses to run it unless the *builder* env holds
//! `BASHKIT_ALLOW_INPROCESS_PYTHON=1`: the opt-in is read once, in `build()`,
//! into a field of the `Bash` (`python_inprocess_opt_in`), and the builtin
//! consults that field, never the live environment. The builder also copies
//! every env entry into the shell, where scripts (and Python's `os.getenv`)
//! would see it; so once the `Bash` is built we take the variable back out
//! of the shell state. Python stays enabled, and nothing visible to a script
//! says how it was switched on.

use bashkit::{Bash, BashBuilder, Python, PythonLimits};

use crate::config::SessionConfig;
use crate::policy::commands::Permits;

/// The variable bashkit reads at build time to allow in-process Python.
pub const OPT_IN: &str = "BASHKIT_ALLOW_INPROCESS_PYTHON";

/// Register the Python builtin under each of `config.python` (none: off).
///
/// Limits: bashkit's defaults for Monty (30 s, 64 MiB heap and print buffer,
/// recursion 200). bashkit clamps the wall-clock budget to what is left of
/// the session's `timeout_ms` on every call, so the session's limits bound
/// Python too.
/// Names outside the command policy (`permits`) are not registered.
pub fn register(
    mut builder: BashBuilder,
    config: &SessionConfig,
    permits: &Permits,
) -> BashBuilder {
    let names: Vec<&String> = config
        .python
        .iter()
        .filter(|n| permits.permits(n))
        .collect();
    if names.is_empty() {
        return builder;
    }
    for name in names {
        builder = builder.builtin(
            name.as_str(),
            Box::new(Python::with_limits(PythonLimits::default())),
        );
    }
    builder.env(OPT_IN, "1")
}

/// Remove the opt-in variable from the shell state of a freshly built `Bash`,
/// unless the user set it through `:env` themselves.
pub fn hide_opt_in(bash: &mut Bash, config: &SessionConfig) {
    if !config.python.is_empty() {
        hide_variable(bash, config, OPT_IN);
    }
}

/// Remove the builder-env variable `name` from the shell state of a
/// freshly built `Bash`, unless the user set it through `:env` themselves
/// (SQLite's opt-in goes the same way, `commands/tools.rs`).
pub fn hide_variable(bash: &mut Bash, config: &SessionConfig, name: &str) {
    if config.env.iter().any(|(key, _)| key == name) {
        return;
    }
    let mut state = bash.shell_state();
    state.env.remove(name);
    state.variables.remove(name);
    state.var_attrs.remove(name);
    bash.restore_shell_state(&state);
}

#[cfg(test)]
mod tests {
    use super::OPT_IN;
    use crate::config::{build_bash, SessionConfig};
    use crate::run::runtime;

    fn config(python: &[&str], env: &[(&str, &str)]) -> SessionConfig {
        SessionConfig {
            python: python.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..SessionConfig::default()
        }
    }

    #[test]
    fn python_runs_but_the_opt_in_is_not_in_the_shell() {
        let mut bash = build_bash(&config(&["python3"], &[]), None, None).unwrap();
        let state = bash.shell_state();
        assert!(!state.env.contains_key(OPT_IN));
        assert!(!state.variables.contains_key(OPT_IN));
        let out = runtime::block_on(bash.exec("python3 -c 'print(6 * 7)'")).unwrap();
        assert_eq!(out.stdout, "42\n", "stderr: {}", out.stderr);
    }

    #[test]
    fn without_the_option_there_is_no_python_even_with_the_variable() {
        let mut bash = build_bash(&config(&[], &[(OPT_IN, "1")]), None, None).unwrap();
        let out = runtime::block_on(bash.exec("python3 -c 'print(1)'")).unwrap();
        assert_eq!(out.exit_code, 127);
    }

    #[test]
    fn a_user_supplied_opt_in_variable_is_left_alone() {
        let bash = build_bash(&config(&["py"], &[(OPT_IN, "1")]), None, None).unwrap();
        assert_eq!(
            bash.shell_state().env.get(OPT_IN).map(String::as_str),
            Some("1")
        );
    }
}
