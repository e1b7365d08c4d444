//! Commands we add to or wrap in bashkit's set: strict `rm`/`tee`, bashkit's
//! own commands run in a nested interpreter, the `python` builtin, the
//! `:git`, `:sqlite`, `:typescript` grants and the checks around their
//! programs.

pub(crate) mod nested;
pub(crate) mod program;
pub(crate) mod python;
pub(crate) mod strict;
pub(crate) mod tools;
