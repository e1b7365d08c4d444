defmodule ExBashkit.Shell do
  @moduledoc """
  An interactive shell on a sandbox, for exploring one before an agent gets
  it and for looking at what an agent left behind.

  From a terminal, `mix ex_bashkit.shell` (see `Mix.Tasks.ExBashkit.Shell`);
  inside `iex -S mix`, `ExBashkit.Shell.start/2` on an existing session (or
  on `ExBashkit.Session.new/1` options), which returns to iex when the shell
  ends:

      session = ExBashkit.Session.new(files: %{"/notes.txt" => "hi\\n"})
      ExBashkit.Shell.start(session)
      sandbox@bashkit-sandbox:/$ cat /notes.txt
      hi
      sandbox@bashkit-sandbox:/$ %exit
      {:ok, 0}

  ## In a terminal

    * The prompt is `user@host:cwd$ ` and follows `cd`; a command that exits
      non-zero is followed by `[exit N]`.
    * While the input is an unfinished command (an open `for`, `if`, quote,
      `$(`, here-document, a trailing `\\`), the prompt is `> `. bashkit's own
      parser decides (`ExBashkit.Shell.Reader.status/1`).
    * Output is written as the script produces it; stderr is red (and goes
      to the terminal through the same device as stdout, so the two keep
      their order).
    * Line editing and history are whatever the VM's terminal driver offers:
      inside iex, iex's line editor and its history (Up/Down); under `mix`,
      the terminal's own line editing (erase, kill line, word erase), no
      history on OTP 25.
    * Ctrl-D on an empty line ends the shell under `mix`; inside iex on
      OTP 25 the line editor does not turn Ctrl-D into end of input, so use
      `exit` or `%exit` there. Ctrl-C is the VM's (the BREAK menu): bound
      runaway commands with the timeout instead.

  ## Piped

  When standard input is not a terminal there are no prompts and no notes:
  only the scripts' output (stdout to stdout, stderr to stderr), so
  `printf 'echo hi\\n' | mix ex_bashkit.shell` prints `hi`. Lines are read and
  run one complete command at a time, as bash reads a script from stdin.

  ## Meta-commands

  Lines starting with `%` are the shell's own: `%reset`, `%snapshot FILE`,
  `%restore FILE`, `%state`, `%changes`, `%timeout [MS]`, `%help`, `%exit`
  (see `ExBashkit.Shell.Meta`). `exit [N]` and Ctrl-D (end of input) end the
  shell.

  ## Timeouts

  Every command runs with a wall-clock timeout (`:timeout_ms`, default
  30 000 ms, changed with `%timeout MS`; the session's own `:timeout_ms`
  limit still applies and the tighter one wins). A command that runs past it
  is stopped, the shell says so, and the prompt comes back with the session's
  state as the command left it.

  ## How `exit` is seen

  bashkit's `exit` ends the script it runs in, not the session. So that the
  shell ends when a command runs `exit` (typed, in a function, in a sourced
  file), each input that parses is run with one more line after its own
  which reports `$?` on stderr under a marker; the shell hides that line
  (and its `set -x` trace). When the marker does not come back, the input
  stopped before its end, by `exit`, and the shell ends with that status.
  The extra line counts as one command against the session's `:limits`.
  """

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Shell.{Context, Meta, Output, Reader}

  @alive "__ex_bashkit_shell_alive__"

  @typedoc "An option of `start/2`."
  @type option ::
          {:timeout_ms, pos_integer()}
          | {:key, binary() | nil}
          | {:terminal, boolean() | :auto}

  @doc """
  Run the shell on `session_or_opts` until `exit`, `%exit` or end of input,
  reading from and writing to the calling process's standard I/O.

  `session_or_opts` is an `ExBashkit.Session` (the shell works on it in
  place: its state afterwards is what the shell left), an `ExBashkit.Server`
  (its pid or the name it was started with; the shell's commands are the
  server's execs, so they are checkpointed and survive a migration like any
  other), or a keyword list of `ExBashkit.Session.new/1` options for a new
  session.

  `exit`, `%exit` and end of input end the shell. In a terminal, Ctrl-D is
  end of input for `mix ex_bashkit.shell`; inside iex it is not (iex's line
  editor keeps Ctrl-D for deleting the character under the cursor), so use
  `exit` or `%exit` there.

  Options:

    * `:timeout_ms` - per-command timeout in milliseconds (default 30 000).
    * `:key` - the key `%snapshot` seals with and `%restore` checks
      (default: `EX_BASHKIT_SNAPSHOT_KEY` from the environment, if set).
    * `:terminal` - `true` for prompts and colors, `false` for the piped
      behaviour, `:auto` (default) to decide by whether standard input is a
      terminal.

  Returns `{:ok, status}`: the status of the last command run, or the one
  `exit` was given. Raises `ArgumentError` on a bad argument.
  """
  @spec start(Session.t() | ExBashkit.Server.server() | [Session.option()], [option()]) ::
          {:ok, integer()}
  def start(session_or_opts, opts \\ []) do
    target = target!(session_or_opts)
    ctx = context!(target, opts)

    ctx =
      if ctx.terminal,
        do:
          Context.output(
            ctx,
            &Output.note(&1, "ExBashkit shell: %help for commands, #{leave_keys()} to leave\n")
          ),
        else: ctx

    ctx |> loop() |> finish()
  end

  defp target!(%Session{} = session), do: session
  defp target!(opts) when is_list(opts), do: Session.new(opts)
  defp target!(pid) when is_pid(pid), do: server!(pid, pid)

  # A `GenServer` name an `ExBashkit.Server` was started with.
  defp target!(name) when is_atom(name) or is_tuple(name) do
    case GenServer.whereis(name) do
      pid when is_pid(pid) -> server!(pid, name)
      _ -> raise ArgumentError, "no ExBashkit.Server is registered as #{inspect(name)}"
    end
  end

  defp target!(other),
    do:
      raise(
        ArgumentError,
        "expected an ExBashkit.Session, an ExBashkit.Server or Session.new/1 options, " <>
          "got: #{inspect(other)}"
      )

  # A local pid is checked to be a server (a remote one, on another node, is
  # trusted: asking would mean a call that waits for its running exec).
  defp server!(pid, given) do
    if node(pid) != node() or server?(pid),
      do: pid,
      else: raise(ArgumentError, "#{inspect(given)} is not an ExBashkit.Server")
  end

  defp server?(pid) do
    case Process.info(pid, :dictionary) do
      {:dictionary, dict} -> dict[:"$initial_call"] == {ExBashkit.Server, :init, 1}
      nil -> false
    end
  end

  # Inside iex the VM's line editor (OTP's edlin) keeps Ctrl-D for "delete
  # the character under the cursor" and never reports end of input, so the
  # banner names what works there.
  defp leave_keys do
    if Code.ensure_loaded?(IEx) and apply(IEx, :started?, []),
      do: "exit or %exit",
      else: "Ctrl-D"
  end

  defp context!(target, opts) do
    unless Keyword.keyword?(opts),
      do: raise(ArgumentError, "options must be a keyword list, got: #{inspect(opts)}")

    Enum.reduce(opts, base_context(target, opts), fn
      {:timeout_ms, ms}, ctx when is_integer(ms) and ms >= 1 -> %{ctx | timeout_ms: ms}
      {:key, key}, ctx when is_nil(key) or (is_binary(key) and key != "") -> %{ctx | key: key}
      {:terminal, _}, ctx -> ctx
      other, _ctx -> raise ArgumentError, "invalid ExBashkit.Shell option: #{inspect(other)}"
    end)
    |> Context.refresh()
    |> then(&if(&1.terminal, do: Context.identify(&1), else: &1))
  end

  defp base_context(target, opts) do
    terminal =
      case Keyword.get(opts, :terminal, :auto) do
        :auto ->
          terminal?()

        flag when is_boolean(flag) ->
          flag

        other ->
          raise ArgumentError, "invalid ExBashkit.Shell option: #{inspect({:terminal, other})}"
      end

    %Context{
      target: target,
      terminal: terminal,
      key: env_key(),
      output: %Output{
        color: terminal,
        hide: @alive,
        stderr_device: if(terminal, do: :stdio, else: :standard_error)
      }
    }
  end

  defp env_key do
    case System.get_env("EX_BASHKIT_SNAPSHOT_KEY") do
      nil -> nil
      "" -> nil
      key -> key
    end
  end

  defp loop(ctx) do
    case Reader.read(:stdio, Context.prompt(ctx), Context.continuation(ctx)) do
      :eof ->
        {:eof, ctx}

      {:meta, line} ->
        case Meta.run(line, ctx) do
          {:cont, ctx} -> ctx |> before_prompt() |> loop()
          {:halt, ctx} -> {:halt, ctx}
        end

      {kind, text} ->
        if String.trim(text) == "" do
          loop(ctx)
        else
          case run(ctx, text, kind == :script) do
            {:cont, ctx} -> ctx |> before_prompt() |> loop()
            {:exit, ctx} -> {:halt, ctx}
          end
        end
    end
  end

  defp finish({:eof, ctx}) do
    # Ctrl-D: leave the host's prompt on a line of its own, as bash does.
    if ctx.terminal, do: Context.output(ctx, &(&1 |> Output.fresh_line() |> Output.stdout("\n")))
    {:ok, ctx.last_exit}
  end

  defp finish({:halt, ctx}) do
    if ctx.terminal, do: Context.output(ctx, &Output.fresh_line/1)
    {:ok, ctx.last_exit}
  end

  defp before_prompt(%Context{terminal: false} = ctx), do: ctx
  defp before_prompt(ctx), do: Context.output(ctx, &Output.fresh_line/1)

  # Run one input; `{:exit, ctx}` when it ran `exit`. Only input that
  # parses gets the marker line: bashkit runs the lines before a syntax error
  # and then stops, which must not read as `exit`.
  defp run(ctx, text, watch_exit) do
    script = if watch_exit, do: with_alive_marker(text), else: text
    opts = [timeout_ms: ctx.timeout_ms, track_changes: true]
    {answer, output} = Output.exec(ctx.output, ctx.target, script, opts)
    ctx = %{ctx | output: output}

    case answer do
      {:ok, %Result{} = result} ->
        {status, exited} = outcome(result, watch_exit)
        ctx = %{ctx | last_exit: status, last_changes: result.changes}
        ctx = if exited, do: ctx, else: Context.refresh(ctx)
        ctx = if status != 0 and ctx.terminal, do: show_status(ctx, status), else: ctx
        {if(exited, do: :exit, else: :cont), ctx}

      {:error, error} ->
        message = if is_exception(error), do: Exception.message(error), else: error
        ctx = %{ctx | last_exit: 1, last_changes: :unknown}
        {:cont, ctx |> Context.output(&Output.error(&1, message)) |> Context.refresh()}
    end
  end

  defp show_status(ctx, status), do: Context.output(ctx, &Output.note(&1, "[exit #{status}]\n"))

  # One more line, after the input's own lines, reporting `$?`.
  defp with_alive_marker(text) do
    separator = if String.ends_with?(text, "\n"), do: "", else: "\n"
    text <> separator <> "printf '%s %d\\n' #{@alive} \"$?\" >&2\n"
  end

  # `{status, exited?}`. Without the marker (and with stderr complete, so it
  # was not dropped by the output cap) the input stopped before its end.
  defp outcome(result, false), do: {result.exit_code, false}

  defp outcome(result, true) do
    case Regex.run(~r/#{@alive} (-?\d+)\n/, result.stderr) do
      [_, status] -> {String.to_integer(status), false}
      nil -> {result.exit_code, not result.stderr_truncated}
    end
  end

  @doc """
  Whether the calling process's standard input is a terminal.

  True inside iex (its line editor answers for the terminal), and under
  `mix`/`elixir` when the OS process's standard input is a tty.
  """
  @spec terminal?() :: boolean()
  def terminal? do
    case :io.columns(:standard_io) do
      {:ok, _} -> true
      _ -> Process.group_leader() == Process.whereis(:user) and tty_stdin?()
    end
  end

  # The BEAM's fd 0 (Linux: /proc; elsewhere, no prompts unless asked).
  defp tty_stdin? do
    case File.read_link("/proc/self/fd/0") do
      {:ok, "/dev/pts/" <> _} -> true
      {:ok, "/dev/tty" <> _} -> true
      {:ok, "/dev/console"} -> true
      _ -> false
    end
  end
end
