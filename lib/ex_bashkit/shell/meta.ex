defmodule ExBashkit.Shell.Meta do
  @moduledoc """
  The shell's meta-commands: lines starting with `%`, handled by the shell
  itself instead of the sandbox.

      %reset            back to the state the session was built with
      %snapshot FILE    save the session (shell state and files) to a host file
      %restore FILE     load a snapshot file into the session
      %state            env, cwd, functions and aliases
      %changes          files the last command created, modified or deleted
      %timeout [MS]     show or set the per-command timeout
      %help             this list
      %exit             leave the shell

  Snapshots are sealed with the shell's key when it has one (`--key`, the
  `:key` option, or `EX_BASHKIT_SNAPSHOT_KEY`), and `%restore` then needs the
  same key. FILE is a path on the host, relative to the host's working
  directory.
  """

  alias ExBashkit.Shell.{Context, Output, Target}

  @help """
  %reset            back to the state the session was built with
  %snapshot FILE    save the session (shell state and files) to FILE on the host
  %restore FILE     load a snapshot FILE into the session
  %state            env, cwd, functions and aliases
  %changes          files the last command created, modified or deleted
  %timeout [MS]     show or set the per-command timeout (milliseconds)
  %help             this list
  %exit             leave the shell (so do `exit` and Ctrl-D)
  """

  @doc """
  Run meta-command `line` (with its leading `%`). `{:cont, ctx}` to keep
  reading, `{:halt, ctx}` to end the shell.
  """
  @spec run(String.t(), Context.t()) :: {:cont, Context.t()} | {:halt, Context.t()}
  def run("%" <> line, ctx) do
    case String.split(line, ~r/\s+/, parts: 2, trim: true) do
      ["exit"] -> {:halt, ctx}
      [command] -> {:cont, command(command, nil, ctx)}
      [command, arg] -> {:cont, command(command, String.trim(arg), ctx)}
      [] -> {:cont, usage(ctx, "empty meta-command")}
    end
  end

  defp command("help", nil, ctx), do: say(ctx, @help)

  defp command("reset", nil, ctx) do
    case Target.reset(ctx.target) do
      :ok -> %{Context.refresh(ctx) | last_changes: nil, last_exit: 0} |> done("session reset\n")
      {:error, message} -> fail(ctx, "%reset: " <> message)
    end
  end

  defp command("snapshot", file, ctx) when is_binary(file) do
    with {:ok, bytes} <- Target.snapshot(ctx.target, key_opt(ctx)),
         :ok <- write(file, bytes) do
      done(ctx, "snapshot written to #{file} (#{byte_size(bytes)} bytes#{sealed(ctx)})\n")
    else
      {:error, message} -> fail(ctx, "%snapshot: " <> message)
    end
  end

  defp command("restore", file, ctx) when is_binary(file) do
    with {:ok, bytes} <- read(file),
         :ok <- Target.restore(ctx.target, bytes, key_opt(ctx)) do
      %{Context.refresh(ctx) | last_changes: nil} |> done("restored #{file}\n")
    else
      {:error, message} -> fail(ctx, "%restore: " <> message)
    end
  end

  defp command("state", nil, ctx), do: say(ctx, describe_state(ctx))
  defp command("changes", nil, ctx), do: say(ctx, describe_changes(ctx.last_changes))
  defp command("timeout", nil, ctx), do: say(ctx, "timeout: #{ctx.timeout_ms} ms\n")

  defp command("timeout", ms, ctx) when is_binary(ms) do
    case Integer.parse(ms) do
      {n, ""} when n >= 1 -> %{ctx | timeout_ms: n} |> done("timeout: #{n} ms\n")
      _ -> usage(ctx, "%timeout takes a positive number of milliseconds, got: #{ms}")
    end
  end

  defp command(name, _arg, ctx)
       when name in ~w(help reset state changes snapshot restore),
       do: usage(ctx, "wrong arguments for %#{name}")

  defp command(name, _arg, ctx), do: usage(ctx, "unknown meta-command %#{name}")

  defp say(ctx, text), do: Context.output(ctx, &Output.note(&1, text))

  # A confirmation ("session reset"): only in a terminal; piped, the output
  # is what was asked for.
  defp done(%Context{terminal: false} = ctx, _text), do: ctx
  defp done(ctx, text), do: say(ctx, text)
  defp fail(ctx, message), do: Context.output(ctx, &Output.error(&1, message))
  defp usage(ctx, message), do: fail(ctx, message <> " (%help lists them)")

  defp key_opt(%Context{key: nil}), do: []
  defp key_opt(%Context{key: key}), do: [key: key]

  defp sealed(%Context{key: nil}), do: ""
  defp sealed(_keyed), do: ", keyed"

  defp write(file, bytes) do
    case File.write(file, bytes) do
      :ok -> :ok
      {:error, reason} -> {:error, "#{file}: #{:file.format_error(reason)}"}
    end
  end

  defp read(file) do
    case File.read(file) do
      {:ok, bytes} -> {:ok, bytes}
      {:error, reason} -> {:error, "#{file}: #{:file.format_error(reason)}"}
    end
  end

  defp describe_state(ctx) do
    case Target.state(ctx.target) do
      {:ok, state} -> describe_state(ctx, state)
      {:error, message} -> ["state unavailable: #{message}\n"]
    end
  end

  defp describe_state(ctx, state) do
    [
      "cwd: #{state.cwd}\n",
      "last exit code: #{ctx.last_exit}\n",
      "env:\n",
      lines(Enum.sort(state.env), fn {k, v} -> "  #{k}=#{v}\n" end),
      "functions:",
      if(state.functions == [],
        do: " (none)",
        else: [" " | Enum.intersperse(state.functions, " ")]
      ),
      "\naliases:\n",
      lines(Enum.sort(state.aliases), fn {k, v} -> "  alias #{k}=#{inspect(v)}\n" end)
    ]
  end

  defp describe_changes(nil), do: "no command has run since the start or the last %reset\n"

  defp describe_changes(:unknown),
    do: "the last command did not run to completion: its changes are unknown\n"

  defp describe_changes(changes) do
    listed =
      for {kind, label} <- [created: "created", modified: "modified", deleted: "deleted"],
          path <- Map.fetch!(changes, kind),
          do: "#{label}: #{path}\n"

    case {listed, changes.complete} do
      {[], _} -> "no files changed\n"
      {listed, true} -> listed
      {listed, false} -> [listed, "(incomplete: the filesystem was too large to list whole)\n"]
    end
  end

  defp lines([], _fun), do: "  (none)\n"
  defp lines(items, fun), do: Enum.map(items, fun)
end
