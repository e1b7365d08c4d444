defmodule Mix.Tasks.ExBashkit.Mcp do
  @shortdoc "Serves a sandbox session over MCP (stdio)"

  @moduledoc """
  Serves one `ExBashkit.Session` to an MCP host (Claude Desktop, Claude
  Code, Cursor, any Model Context Protocol client) over the stdio
  transport: JSON-RPC messages on stdin and stdout, one session for the
  connection, ended when stdin closes. See `ExBashkit.MCP` for the tools.

      mix ex_bashkit.mcp [--file SNAPSHOT] [--mount VFS=HOST[:ro|:rw]]
                         [--allow-net URL] [--python] [--git] [--sqlite]
                         [--typescript] [--timeout MS] [--key KEY]
                         [--history]

  The flags are `mix ex_bashkit.shell`'s: `--timeout MS` is the session's
  limit per call (default 30 000; a call's `timeout_ms` may ask for less),
  `--file SNAPSHOT` starts from a snapshot (keyed with `--key` or
  `EX_BASHKIT_SNAPSHOT_KEY`). `--history` serves the history tools too
  (`commit`, `checkout`, `log`, `diff`: an agent's undo).

  stdout carries MCP messages only: build output and logs go to stderr.
  """

  use Mix.Task

  alias Mix.ExBashkit.SessionFlags

  @task "ex_bashkit.mcp"

  @impl Mix.Task
  def run(args) do
    opts = SessionFlags.parse!(args, @task, history: :boolean)
    # Everything this process and the ones it starts print, and the logs,
    # go to stderr; the protocol gets the original stdout.
    stdio = Process.group_leader()
    Logger.configure_backend(:console, device: :standard_error)
    SessionFlags.start_app()
    Process.group_leader(self(), Process.whereis(:standard_error))

    session =
      opts
      |> SessionFlags.session_options!(@task)
      |> Keyword.put(:limits, SessionFlags.timeout!(opts, @task))
      |> SessionFlags.new_session!(@task)

    SessionFlags.restore!(session, opts, @task)

    ExBashkit.MCP.Stdio.serve(
      session: session,
      history: Keyword.get(opts, :history, false),
      input: stdio,
      output: stdio
    )
  end
end
