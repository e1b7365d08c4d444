//! Commands we add to or wrap in bashkit's set: strict `rm`/`tee`, bashkit's
//! own commands run in a nested interpreter, the `python` builtin, and the
//! `:git`, `:sqlite`, `:typescript` grants.

pub(crate) mod nested;
pub(crate) mod python;
pub(crate) mod strict;
pub(crate) mod tools;
