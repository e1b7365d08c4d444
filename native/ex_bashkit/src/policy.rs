//! What a session may do: which commands it has (`commands:`), where it may
//! connect (`allow_net:`), with which credentials (`credentials:`) and
//! whose say and record (`egress:`), `help` under a command policy, and the known
//! bombs of bundled commands refused before they run.

pub(crate) mod bombs;
pub(crate) mod commands;
pub(crate) mod credentials;
pub(crate) mod egress;
pub(crate) mod help;
pub(crate) mod net;
