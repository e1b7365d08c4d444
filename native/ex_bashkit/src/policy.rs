//! What a session may do: which commands it has (`commands:`), where it may
//! connect (`allow_net:`), `help` under a command policy, and the known
//! bombs of bundled commands refused before they run.

pub(crate) mod bombs;
pub(crate) mod commands;
pub(crate) mod help;
pub(crate) mod net;
