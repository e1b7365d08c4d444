defmodule ExBashkit.Sqlite do
  @moduledoc """
  The `sqlite3` command a session gets with the `:sqlite` option.

      iex> session = ExBashkit.Session.new(sqlite: true)
      iex> {:ok, _} = ExBashkit.Session.exec(session, "sqlite3 /app.db 'CREATE TABLE t(x); INSERT INTO t VALUES (20), (22)'")
      iex> {:ok, result} = ExBashkit.Session.exec(session, "sqlite3 /app.db 'SELECT sum(x) FROM t'")
      iex> result.stdout
      "42\\n"

  It is the SQLite engine compiled into bashkit (cargo feature `sqlite`):
  Turso, a SQLite rewrite in Rust, running inside the library's OS process
  (the worker's, or the BEAM's with `isolation: :in_node`). No `sqlite3`
  binary is involved and nothing needs installing. Turso is marked beta by
  its authors. This module holds only this documentation.

  ## Enabling it

  `sqlite: true` registers the command as `sqlite3` and `sqlite`. Without
  it both are unknown commands (exit code 127); `:commands` governs each
  name, like any command's. bashkit also requires
  `BASHKIT_ALLOW_INPROCESS_SQLITE=1` in the environment the interpreter is
  built with; the session sets it and then removes it from the shell, as it
  does for `:python`, so scripts neither see it nor can switch SQLite on.

  ## Databases are files of the session

  `sqlite3 DB SQL...`, `sqlite3 DB < script.sql`, `... | sqlite3 DB`, or
  `:memory:`. A database file is read from the session filesystem and
  written back there when the command ends, in SQLite's file format: it is
  visible to `ExBashkit.Session.read_file/2`, travels in snapshots, shows up
  in `:track_changes` and goes with `reset/1`. Output modes `-csv`,
  `-json`, `-line`, `-column`, `-box`, `-markdown`, `-tabs`, `-header`;
  dot-commands `.tables`, `.schema`, `.dump`, `.mode`, `.headers`, `.read`
  and others (each on its own line). There is no `ATTACH`, `DETACH` or
  `VACUUM`, and PRAGMAs that touch resources (`cache_size`, `mmap_size`,
  `page_size`, ...) are refused.

  ## Limits

  One invocation runs at most the session's `:timeout_ms` (bashkit's own
  budget, 30 s, is lowered to it; the statement in flight is interrupted,
  the command fails with "query timed out", the session stays usable), and
  its output is capped by `:max_stdout_bytes`. bashkit's other caps apply:
  4 MiB of SQL, 10 000 statements and 1 000 000 rows per query, databases
  up to 256 MiB. Every statement also counts against the exec's work
  budget. A call's own `:timeout_ms` (`Session.exec/3`) lowers the budget
  further, to what is left of it.

  SQL given as an argument or on stdin that nests deeper than 256
  parentheses, has a compound SELECT of more than 500 terms or creates more
  than 200 views is refused before it runs ("sqlite3: program refused:
  ...", exit 1): Turso's parser and planner would overflow their stack.
  """
end
