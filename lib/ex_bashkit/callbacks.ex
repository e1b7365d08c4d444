defmodule ExBashkit.Callbacks do
  @moduledoc false
  # The Elixir side of the protocol between a running script and the process
  # that asked for it (the Rust side is `native/ex_bashkit/src/callbacks.rs`).
  #
  # A NIF never runs a script: it submits it to the library's interpreter
  # threads and returns. The calling process then waits in `await/2` for
  # messages tagged with the reference it created for this request:
  #
  #   {:ex_bashkit_reply, ref, {:ok, result_tuple} | {:error, message}}
  #       The final answer; exactly one per request (Rust guarantees it).
  #
  #   {:ex_bashkit_output, ref, {stdout_chunk, stderr_chunk}}
  #       Output of a streaming exec, in order, while it runs.
  #
  #   {:ex_bashkit_callback, ref, {call_id, request}}
  #       The script needs Elixir: `request` is
  #         {:builtin, name, args, stdin, env}        a custom builtin, or
  #         {:vfs, mount, op, path, extra}             a virtual_fs operation.
  #       The waiting process hands it to a fresh *runner* process and goes
  #       back to waiting; it never runs user code itself.
  #
  # The runner (unlinked, so nothing it does can take the caller down)
  # spawns a monitored *worker* that calls the user's function, normalizes
  # whatever it returned into the small set of shapes the NIF decodes, and
  # answers through `ExBashkit.Backend.callback_reply/3` (the NIF's
  # `callback_reply/2` in the node, a frame to the worker otherwise):
  #
  #   {:command, stdout, stderr, exit_code}           builtin outcome
  #   :done | {:data, binary} | {:entries, [{name, kind}]}
  #     | {:stat, kind, size} | {:failed, reason}     virtual_fs outcome
  #
  # Failure model, the same for builtins and backends:
  #   * raise / throw / exit inside the function: caught by the worker and
  #     answered as a failure of that one command (exit 1, message on stderr);
  #   * the worker dies any other way (killed, linked crash): the runner sees
  #     the DOWN and answers the failure;
  #   * no answer within `builtin_timeout_ms`: the runner kills the worker and
  #     answers a timeout (exit 124). Rust enforces the same deadline on its
  #     side, so even a dead runner cannot make a script wait longer.
  #   * a late answer (after a timeout) finds nobody waiting and is dropped.
  #
  # Re-entrancy: a worker carries, in its process dictionary, the sessions
  # whose exec is waiting on it (the whole chain, for nested execs). An exec
  # on one of those sessions from inside the worker would wait forever for
  # the lock its own caller holds, so `ExBashkit.Session.exec/3` refuses it at
  # once with `{:error, _}`.

  alias ExBashkit.{Backend, Result}

  @chain_key :"$ex_bashkit_waiting_sessions"
  @kinds [:file, :dir, :symlink]
  @max_entries 10_000
  @ops_without_payload [:write, :append, :mkdir, :remove, :rename]

  @typedoc "What a waiting exec needs to serve back-calls."
  @type context :: %{
          resource: reference() | nil,
          location: Backend.location(),
          builtins: map(),
          virtual_fs: map(),
          timeout: pos_integer()
        }

  @doc false
  @spec no_callbacks() :: context()
  def no_callbacks,
    do: %{resource: nil, location: :in_node, builtins: %{}, virtual_fs: %{}, timeout: 30_000}

  @doc false
  # Whether this process is serving a back-call of a script on `resource`.
  @spec reentrant?(reference()) :: boolean()
  def reentrant?(resource), do: resource in Process.get(@chain_key, [])

  @doc false
  # Wait for the final answer, handing output chunks to `on_output`.
  @spec await(reference(), context(), (binary(), binary() -> any())) ::
          {:ok, Result.t()} | {:error, String.t()}
  def await(ref, context, on_output \\ fn _, _ -> :ok end) do
    case next(ref, context) do
      {:output, stdout, stderr} ->
        on_output.(stdout, stderr)
        await(ref, context, on_output)

      {:done, outcome} ->
        outcome
    end
  end

  @doc false
  # Wait for the answer of a request that is not an exec (state, reset, ...).
  @spec await_reply(reference()) :: term()
  def await_reply(ref) do
    receive do
      {:ex_bashkit_reply, ^ref, reply} ->
        Process.demonitor(ref, [:flush])
        reply

      {:DOWN, ^ref, :process, _, reason} ->
        {:error, worker_down(reason)}
    end
  end

  # For a session in a worker process, `ref` monitors the worker's owner.
  defp worker_down(reason), do: "worker process exited: #{inspect(reason)}"

  @doc false
  # Wait for the raw answer of a job that is not an exec but may make
  # back-calls while it runs (a search walking `:virtual_fs` backends).
  @spec await_reply(reference(), context()) :: term()
  def await_reply(ref, context) do
    receive do
      {:ex_bashkit_reply, ^ref, reply} ->
        Process.demonitor(ref, [:flush])
        reply

      {:DOWN, ^ref, :process, _, reason} ->
        {:error, worker_down(reason)}

      {:ex_bashkit_callback, ^ref, {call_id, request}} ->
        dispatch(call_id, request, context)
        await_reply(ref, context)
    end
  end

  @doc false
  # The next event of request `ref` that the caller must see; back-calls
  # are dispatched on the way.
  @spec next(reference(), context()) ::
          {:output, binary(), binary()} | {:done, {:ok, Result.t()} | {:error, String.t()}}
  def next(ref, context) do
    receive do
      {:ex_bashkit_reply, ^ref, {:ok, native}} ->
        Process.demonitor(ref, [:flush])
        {:done, {:ok, Result.from_native(native)}}

      {:ex_bashkit_reply, ^ref, {:error, message}} ->
        Process.demonitor(ref, [:flush])
        {:done, {:error, message}}

      {:DOWN, ^ref, :process, _, reason} ->
        {:done, {:error, worker_down(reason)}}

      {:ex_bashkit_output, ^ref, {stdout, stderr}} ->
        {:output, stdout, stderr}

      {:ex_bashkit_callback, ^ref, {call_id, request}} ->
        dispatch(call_id, request, context)
        next(ref, context)
    end
  end

  defp dispatch(call_id, request, context) do
    chain = [context.resource | Process.get(@chain_key, [])]
    {job, on_failure} = job(request, context)
    reply = &Backend.callback_reply(context.location, call_id, &1)
    spawn(fn -> run(reply, job, on_failure, context.timeout, chain) end)
  end

  # -- runner -----------------------------------------------------------------

  defp run(reply, job, on_failure, timeout, chain) do
    {pid, mref} =
      spawn_monitor(fn ->
        Process.put(@chain_key, chain)
        reply.(job.())
      end)

    receive do
      {:DOWN, ^mref, :process, ^pid, :normal} ->
        :ok

      {:DOWN, ^mref, :process, ^pid, reason} ->
        reply.(on_failure.({:died, reason}))
    after
      timeout ->
        Process.exit(pid, :kill)
        reply.(on_failure.({:timeout, timeout}))
    end
  end

  # Run `fun`, turning raise/throw/exit into `on_failure.(...)`.
  defp guarded(fun, on_failure) do
    fun.()
  catch
    kind, reason -> on_failure.({kind, reason, __STACKTRACE__})
  end

  # -- builtins ---------------------------------------------------------------

  defp job({:builtin, name, args, stdin, env}, context) do
    on_failure = &builtin_failure(name, &1)

    job =
      case context.builtins do
        %{^name => fun} ->
          fn ->
            guarded(
              fn -> builtin_answer(name, fun.(%{args: args, stdin: stdin, env: env})) end,
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

    job =
      case context.virtual_fs do
        %{^mount => backend} ->
          fn -> guarded(fn -> vfs_answer(op, call_backend(backend, request)) end, on_failure) end

        _ ->
          fn -> {:failed, "enotsup"} end
      end

    {job, on_failure}
  end

  defp builtin_answer(name, answer) do
    case answer do
      {:ok, out} ->
        with {:ok, out} <- binary(out),
             do: {:command, out, "", 0},
             else: (_ -> invalid_builtin(name, answer))

      {:error, err} ->
        with {:ok, err} <- binary(err),
             do: {:command, "", err, 1},
             else: (_ -> invalid_builtin(name, answer))

      %Result{stdout: out, stderr: err, exit_code: code}
      when is_integer(code) and code in -2_147_483_648..2_147_483_647 ->
        with {:ok, out} <- binary(out), {:ok, err} <- binary(err) do
          {:command, out, err, code}
        else
          _ -> invalid_builtin(name, answer)
        end

      other ->
        invalid_builtin(name, other)
    end
  end

  defp invalid_builtin(name, value) do
    {:command, "",
     "#{name}: builtin returned an invalid value: #{short_inspect(value)} " <>
       "(expected {:ok, iodata}, {:error, iodata} or %ExBashkit.Result{})\n", 1}
  end

  defp builtin_failure(name, failure) do
    case failure do
      {:timeout, ms} ->
        {:command, "", "#{name}: builtin timed out after #{ms} ms\n", 124}

      {:died, reason} ->
        {:command, "", "#{name}: builtin process exited: #{short_inspect(reason)}\n", 1}

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

  defp call_backend(fun, request) when is_function(fun, 1), do: fun.(request)
  defp call_backend({module, arg}, request), do: module.handle(request, arg)
  defp call_backend(module, request), do: module.handle(request, nil)

  defp vfs_answer(op, answer) do
    case {op, answer} do
      {_, {:error, reason}} when is_atom(reason) ->
        {:failed, Atom.to_string(reason)}

      {_, {:error, reason}} when is_binary(reason) ->
        {:failed, printable(reason)}

      {op, :ok} when op in @ops_without_payload ->
        :done

      {op, {:ok, _}} when op in @ops_without_payload ->
        :done

      {:read, {:ok, data}} ->
        with {:ok, bin} <- binary(data), do: {:data, bin}, else: (_ -> invalid_vfs(op, answer))

      {:list, {:ok, entries}} when is_list(entries) ->
        entries(entries)

      {:stat, {:ok, %{type: kind} = stat}} when kind in @kinds ->
        stat_answer(kind, Map.get(stat, :size, 0), answer)

      _ ->
        invalid_vfs(op, answer)
    end
  end

  defp stat_answer(kind, size, _answer) when is_integer(size) and size >= 0,
    do: {:stat, kind, size}

  defp stat_answer(_kind, _size, answer), do: invalid_vfs(:stat, answer)

  # Shape only; Rust drops names a directory cannot hold and duplicates.
  defp entries(entries) do
    if length(entries) > @max_entries do
      {:failed, "virtual_fs listing too large (#{length(entries)} entries, max #{@max_entries})"}
    else
      {:entries,
       for(
         {name, kind} <- entries,
         is_binary(name),
         String.valid?(name),
         kind in @kinds,
         do: {name, kind}
       )}
    end
  end

  defp invalid_vfs(op, answer) do
    {:failed,
     "virtual_fs backend returned an invalid value for #{inspect(op)}: #{short_inspect(answer)}"}
  end

  defp vfs_failure(mount, op, failure) do
    case failure do
      {:timeout, _ms} ->
        {:failed, "etimedout"}

      {:died, reason} ->
        {:failed, "virtual_fs backend for #{mount} exited: #{short_inspect(reason)}"}

      {kind, reason, stack} ->
        {:failed,
         "virtual_fs backend for #{mount} failed on #{inspect(op)}: " <>
           String.trim_trailing(format_error(kind, reason, stack))}
    end
  end

  # -- helpers ----------------------------------------------------------------

  defp binary(data) when is_binary(data), do: {:ok, data}

  defp binary(data) do
    {:ok, IO.iodata_to_binary(data)}
  rescue
    ArgumentError -> :error
  end

  defp format_error(:error, reason, stack),
    do: Exception.format_banner(:error, reason, stack) <> "\n"

  defp format_error(kind, reason, _stack), do: "#{kind}: #{short_inspect(reason)}\n"

  defp short_inspect(term), do: inspect(term, limit: 8, printable_limit: 200)

  defp printable(string), do: if(String.valid?(string), do: string, else: inspect(string))
end
