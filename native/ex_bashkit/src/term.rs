//! Terms that cross between Elixir and the interpreter core: `Value`, their
//! one representation; the external term format that frames them for a
//! worker; JSON (for the MCP server); and the cheap hash for the ids the
//! library makes itself.

pub mod etf;
pub(crate) mod json;
pub(crate) mod value;
pub(crate) mod word_hash;
