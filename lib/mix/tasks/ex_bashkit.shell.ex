defmodule Mix.Tasks.ExBashkit.Shell do
  @shortdoc "Opens an interactive shell on a new sandbox session"

  @moduledoc """
  Opens an interactive shell on a new `ExBashkit.Session` (see
  `ExBashkit.Shell` for prompts, meta-commands and the piped mode).

      mix ex_bashkit.shell [--file SNAPSHOT] [--mount VFS=HOST[:ro|:rw]]
                           [--allow-net URL] [--credential PREFIX=ENV_VAR]
                           [--python] [--git] [--sqlite]
                           [--typescript] [--timeout MS] [--key KEY]

    * `--file SNAPSHOT` - start from a snapshot file (`%snapshot` writes them).
    * `--mount VFS=HOST[:ro|:rw]` - mount host directory HOST at VFS in the
      sandbox, read-only unless `:rw` (repeatable).
    * `--allow-net URL` - let `curl`/`wget`/`http` reach URL (repeatable).
    * `--credential PREFIX=ENV_VAR` - send the host environment variable
      ENV_VAR's value as a bearer token (`Authorization: Bearer ...`) with
      every request under PREFIX, which `--allow-net` must admit; the shell
      never sees it (repeatable; see "Credentials" in `ExBashkit.Session`).
    * `--python` - register the sandboxed `python`/`python3` builtin.
    * `--git`, `--sqlite`, `--typescript` - grant the virtual `git`,
      `sqlite3` and `ts` (`ExBashkit.Git`, `ExBashkit.Sqlite`,
      `ExBashkit.TypeScript`).
    * `--timeout MS` - per-command timeout (default 30 000; `%timeout`
      changes it).
    * `--key KEY` - key for `--file`, `%snapshot` and `%restore` (default:
      `EX_BASHKIT_SNAPSHOT_KEY`).

  Piped, it prints only the scripts' output and exits with the status of the
  last command (or the one `exit` was given):

      $ printf 'echo hi\\n' | mix ex_bashkit.shell
      hi

  Build output (cargo, the Elixir compiler) goes to stderr, so that stdout
  carries nothing but the scripts' output.
  """

  use Mix.Task

  alias Mix.ExBashkit.SessionFlags

  @task "ex_bashkit.shell"

  @impl Mix.Task
  def run(args) do
    opts = SessionFlags.parse!(args, @task)
    SessionFlags.start_app()

    session =
      opts
      |> SessionFlags.session_options!(@task)
      # The shell's own per-command timeout governs (`--timeout`, `%timeout`).
      |> Keyword.put(:limits, timeout_ms: 7 * 24 * 3_600_000)
      |> SessionFlags.new_session!(@task)

    SessionFlags.restore!(session, opts, @task)
    shell_opts = [key: SessionFlags.key(opts)] ++ SessionFlags.timeout!(opts, @task)

    case ExBashkit.Shell.start(session, shell_opts) do
      {:ok, 0} -> :ok
      {:ok, status} -> exit({:shutdown, status})
    end
  end
end
