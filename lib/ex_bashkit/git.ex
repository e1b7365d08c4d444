defmodule ExBashkit.Git do
  @moduledoc """
  The virtual `git` a session gets with the `:git` option.

      iex> session = ExBashkit.Session.new(git: [author: {"Agent", "agent@example.com"}], cwd: "/work")
      iex> {:ok, _} = ExBashkit.Session.exec(session, "git init -q && echo hi > a.txt && git add a.txt")
      iex> {:ok, _} = ExBashkit.Session.exec(session, "git commit -q -m 'first'")
      iex> {:ok, result} = ExBashkit.Session.exec(session, "git log")
      iex> result.stdout =~ "Author: Agent <agent@example.com>"
      true

  It is bashkit's own git (cargo feature `git`), written in Rust and confined
  to the session's filesystem: no host `git`, no subprocess, no host
  configuration (`~/.gitconfig`, `GIT_*` variables) is ever read. Its whole
  state is the repository's `.git` directory, an ordinary directory of the
  session filesystem: it moves with `ExBashkit.Session.snapshot/2` and
  `restore/3`, with `ExBashkit.Server` checkpoints and migrations, shows up
  in `:track_changes`, and `reset/1` drops it with every other file. This
  module holds only this documentation.

  ## Enabling it

    * `git: true` - commits are authored by bashkit's virtual identity,
      `sandbox <sandbox@bashkit.local>`;
    * `git: [author: {name, email}]` - by that identity (a name and an email
      without `|`, `<`, `>` or control characters);
    * `git: [remotes: [url_pattern]]` - URLs `clone`, `fetch`, `pull` and
      `push` may name (see "Remotes").

  Without the option, or when `:commands` leaves it out, `git` is an unknown
  command (exit code 127) on every route, and a snapshot of a session with
  git does not restore into one without it.

  ## What works

  `init [-q] [-b BRANCH] [DIR]`, `config`, `add PATH...` / `add .`,
  `commit -m MSG` (`-a`, `-am MSG`), `status`, `log [-n N]`, `branch`
  (list, create, `-d`), `checkout BRANCH` / `checkout -b BRANCH`, `reset`,
  `restore [--staged]`, `show`, `ls-files`, `rev-parse` (`--show-toplevel`,
  `--abbrev-ref HEAD`, ...), `merge-base`, `grep`, `remote add/remove/-v`,
  and `clone PATH` of a repository in the session filesystem (a copy).
  Commands run from the repository's top directory: there is no upward
  search for `.git` from a subdirectory.

  ## What does not (bashkit 0.20.2)

  It is a model of git's workflow, not git's object store: a commit records
  its message, author and the list of files, not their contents. So:

    * `git diff` prints a fixed placeholder line, never the changes;
    * `git status` does not report edits to committed files (only staged and
      untracked ones);
    * `git checkout BRANCH` moves `HEAD` but changes no file, and a commit
      always advances `master`, whatever branch is checked out (every
      branch shows one log);
    * `git show HEAD:PATH` shows the working copy;
    * two commits within one second of each other get the same hash;
    * remote URLs are checked against the allowlist but never contacted:
      `clone`, `fetch`, `pull` and `push` of a URL fail with "network
      operations not supported in virtual mode" once the URL is allowed.

  The test suite keeps a reproducer of each (tagged `:known_issue`).

  ## Remotes

  A remote pattern is a URL prefix, as for `:allow_net`, and must lie
  within the session's network access: covered by an `:allow_net` pattern
  (or `:all`), and, for a private or loopback address, with
  `block_private_ips: false`. A pattern outside it raises `ArgumentError`
  at `ExBashkit.Session.new/1`. bashkit itself accepts only `https://` URLs
  for remotes. A URL no pattern covers is refused (exit code 128) without
  any connection.

  ## Limits

  git runs like any other command: it counts against the session's command
  and time limits, its output against `:max_stdout_bytes`, and its files
  against the filesystem's limits.
  """
end
