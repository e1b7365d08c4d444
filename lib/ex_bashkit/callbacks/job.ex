defmodule ExBashkit.Callbacks.Job do
  @moduledoc false
  # What a back-call runs in its handler process (`ExBashkit.Callbacks`):
  # the user's function for the request (a builtin, a `:virtual_fs`
  # backend, an `:egress` decider), guarded, its answer checked
  # (`ExBashkit.Callbacks.Answer`), and what each failure answers instead:
  # a raise, throw or exit, the handler's death, the timeout, a re-entrant
  # call. `ExBashkit.Callbacks` decides when a failure happened; this
  # module says what the script sees then.

  alias ExBashkit.Callbacks.Answer
  alias ExBashkit.Egress
  alias ExBashkit.VirtualFs.Dispatch

  # Why a handler that called the process blocked in exec failed at once.
  @reentrant_message "called the process that is waiting for this script " <>
                       "(a GenServer.call to the exec's caller cannot be answered until " <>
                       "the script ends: a deadlock); run the script with " <>
                       "ExBashkit.Session.exec_async/3 so that process stays free"
  # The most of a raised exception's message a failed command reports.
  @max_error_bytes 4_096

  @typedoc "Why a back-call failed, as `ExBashkit.Callbacks` saw it."
  @type failure ::
          {:timeout, pos_integer()}
          | {:died, term()}
          | :reentrant
          | {:error | :throw | :exit, term(), Exception.stacktrace()}

  @doc false
  # The job of back-call `request` (run in its handler) and what answers a
  # failure of it.
  @spec of(tuple(), ExBashkit.Callbacks.context()) ::
          {(() -> term()), (failure() -> term())}
  def of(request, context), do: job(request, context)

  # Run `fun`, turning raise/throw/exit into `on_failure.(...)`.
  defp guarded(fun, on_failure) do
    fun.()
  catch
    kind, reason -> on_failure.({kind, reason, __STACKTRACE__})
  end

  # -- builtins ---------------------------------------------------------------

  defp job({:builtin, name, args, stdin, env, cwd}, context) do
    on_failure = &builtin_failure(name, &1)
    cap = context.max_reply_bytes

    job =
      case context.builtins do
        %{^name => fun} ->
          fn ->
            guarded(
              fn ->
                Answer.builtin(
                  name,
                  fun.(%{args: args, stdin: stdin, env: env, cwd: cwd}),
                  cap
                )
              end,
              on_failure
            )
          end

        _ ->
          fn -> {:command, "", "#{name}: builtin not registered\n", 127} end
      end

    {job, on_failure}
  end

  defp job({:vfs, mount, op, path, extra}, context) do
    on_failure = &vfs_failure(mount, op, &1)
    request = vfs_request(op, path, extra)
    cap = context.max_reply_bytes

    job =
      case {context.virtual_fs, Answer.vfs_precheck(op, path)} do
        {_, {:failed, _} = refused} ->
          fn -> refused end

        {%{^mount => backend}, nil} ->
          fn ->
            guarded(
              fn -> Answer.vfs(op, path, Dispatch.call(backend, request), cap) end,
              on_failure
            )
          end

        _ ->
          fn -> {:failed, "enotsup"} end
      end

    {job, on_failure}
  end

  # -- egress -----------------------------------------------------------------

  defp job({:egress, method, url, headers}, context) do
    on_failure = fn _failure -> :deny end
    request = %{method: method, url: url, headers: headers}

    job =
      case context.egress do
        nil -> fn -> :deny end
        decider -> fn -> guarded(fn -> Egress.decide(decider, request) end, on_failure) end
      end

    {job, on_failure}
  end

  defp builtin_failure(name, failure) do
    case failure do
      {:timeout, ms} ->
        {:command, "", "#{name}: builtin timed out after #{ms} ms\n", 124}

      {:died, reason} ->
        {:command, "", "#{name}: builtin process exited: #{short_inspect(reason)}\n", 1}

      :reentrant ->
        {:command, "", "#{name}: " <> @reentrant_message <> "\n", 1}

      {kind, reason, stack} ->
        {:command, "", "#{name}: builtin failed: " <> format_error(kind, reason, stack), 1}
    end
  end

  # -- virtual_fs -------------------------------------------------------------

  defp vfs_request(op, path, extra) do
    base = %{op: op, path: path}

    case op do
      op when op in [:write, :append] -> Map.put(base, :content, extra)
      :mkdir -> Map.put(base, :parents, extra)
      :remove -> Map.put(base, :recursive, extra)
      :rename -> Map.put(base, :to, extra)
      _ -> base
    end
  end

  defp vfs_failure(mount, op, failure) do
    case failure do
      {:timeout, _ms} ->
        {:failed, "etimedout"}

      {:died, reason} ->
        {:failed, "virtual_fs backend for #{mount} exited: #{short_inspect(reason)}"}

      :reentrant ->
        {:failed, "virtual_fs backend for #{mount}: " <> @reentrant_message}

      {kind, reason, stack} ->
        {:failed,
         "virtual_fs backend for #{mount} failed on #{inspect(op)}: " <>
           String.trim_trailing(format_error(kind, reason, stack))}
    end
  end

  # -- helpers ----------------------------------------------------------------

  # A raised message can be any size: keep what crosses back bounded.
  defp format_error(:error, reason, stack) do
    banner = Exception.format_banner(:error, reason, stack)

    if byte_size(banner) > @max_error_bytes,
      do: valid_prefix(binary_part(banner, 0, @max_error_bytes)) <> "... (truncated)\n",
      else: banner <> "\n"
  end

  defp format_error(kind, reason, _stack), do: "#{kind}: #{short_inspect(reason)}\n"

  # A cut may split a UTF-8 sequence: keep the valid part.
  defp valid_prefix(binary) do
    case String.chunk(binary, :valid) do
      [valid | _] -> if String.valid?(valid), do: valid, else: ""
      [] -> ""
    end
  end

  defp short_inspect(term), do: Answer.short_inspect(term)
end
