defmodule ExBashkit.Backend do
  @moduledoc false
  # The one choke point between the public API and where sessions live.
  #
  # A session is either in this node (`isolation: :in_node`: a NIF resource,
  # `ExBashkit.Native`) or in a worker OS process (`isolation: :process`:
  # `ExBashkit.Worker`, which forwards to the same Rust core over a port).
  # Every public function reaches the interpreter through this module, which
  # is the only place that tells the two apart. Both transports answer
  # long requests with the same messages, `{:ex_bashkit_reply, ref, outcome}`
  # (plus `:ex_bashkit_output` / `:ex_bashkit_callback` while an exec runs),
  # so the code that waits (`ExBashkit.Request`) is shared.
  #
  # For a worker, the request's `ref` is a monitor of the worker's owner
  # process, so the wait also ends if that process dies (`Request.await/3`
  # matches the `:DOWN`).

  alias ExBashkit.{Callbacks, Native, Worker, WorkerPool}

  @typedoc "Where a session lives."
  @type location :: :in_node | {:process, atom(), pos_integer()}

  @typedoc """
  A back-call's id, as its request carries it: the NIF's counter in the
  node; in a worker, with the port of the OS process that made it (each
  counts from 1).
  """
  @type call_id :: pos_integer() | {port(), pos_integer()}

  # A NIF given something that is not a session handle of this VM raises
  # `ArgumentError` (badarg); say what that means. A macro, so that the
  # call runs inline: a closure would cost a short exec 40 ns.
  defmacrop nif(call) do
    quote do
      try do
        unquote(call)
      rescue
        ArgumentError -> not_a_session!(__STACKTRACE__)
      end
    end
  end

  @doc false
  # Build a session from the validated native configuration. Returns the
  # handle the `%Session{}` keeps (its identity and, through GC, its life)
  # and its location.
  @spec new(map(), :in_node | :process, boolean(), term()) ::
          {:ok, reference(), location()} | {:error, String.t()}
  def new(config, isolation, inline?, group \\ nil)

  def new(config, :in_node, inline?, _group) do
    {config, image} = base_image(ExBashkit.Session.Credentials.unseal(config))
    result = if inline?, do: Native.session_new_inline(config), else: Native.session_new(config)
    # The image must outlive the build, which finds it by id: this use
    # keeps it referenced until the NIF has returned.
    keep_alive(image)

    with {:ok, resource} <- result, do: {:ok, resource, :in_node}
  end

  def new(config, :process, _inline?, group) do
    {config, image} = base_image(config)
    build_in_worker(config, image, &WorkerPool.place(&1, group), 2)
  end

  @doc false
  # Build a fork of the session at `location` from `config`: in the
  # parent's process (the same tenant) when it has one.
  @spec new_beside(map(), location(), boolean()) ::
          {:ok, reference(), location()} | {:error, String.t()}
  def new_beside(config, {:process, name, _sid}, _inline?) do
    {config, image} = base_image(config)
    build_in_worker(config, image, &WorkerPool.place_beside(name, &1), 2)
  end

  def new_beside(config, :in_node, inline?), do: new(config, :in_node, inline?)

  @doc false
  # How a session at `location` names the session `resource` at `other` in
  # a request of its own (a fork): the resource in the node, the session
  # id in the same worker; `:elsewhere` in another process.
  @spec beside(location(), reference(), location()) :: {:ok, term()} | :elsewhere
  def beside(:in_node, resource, :in_node), do: {:ok, resource}
  def beside({:process, name, _}, _resource, {:process, name, sid}), do: {:ok, sid}
  def beside(_location, _resource, _other), do: :elsewhere

  defp build_in_worker(config, image, place, tries) do
    with {:ok, name} <- place.(config),
         {:ok, worker} <- whereis(name) do
      sid = System.unique_integer([:positive])

      case Worker.call(worker, {:new, sid, config}, image_meta(image)) do
        :ok ->
          {:ok, Native.remote_session(worker, sid), {:process, name, sid}}

        # A group's worker that stopped, its last session gone, just as
        # this one was placed on it: a new one starts.
        {:error, "worker process exited: " <> why}
        when why in [":normal", ":noproc"] and tries > 1 ->
          build_in_worker(config, image, place, tries - 1)

        {:error, _} = error ->
          # The worker keeps nothing of a session that failed to build.
          send(worker, {:ex_bashkit_drop, sid})
          error
      end
    end
  end

  # `:base` travels as the image's id; the image itself goes where the
  # session is built (`ExBashkit.Image`).
  defp base_image(%{base: %ExBashkit.Image{id: id} = image} = config),
    do: {%{config | base: id}, image}

  defp base_image(config), do: {config, nil}

  defp image_meta(nil), do: %{}
  defp image_meta(image), do: %{image: image}

  defp keep_alive(nil), do: :ok
  defp keep_alive(%ExBashkit.Image{ref: ref}), do: :erlang.phash2(ref) && :ok

  # A session names its worker by its registered name, so that it reaches
  # the restarted owner process if the old one ever died.
  @doc false
  # `result`, the session's handle kept alive until the request that gave
  # it was sent: a handle collected earlier would drop the session, and
  # stop its own worker, ahead of a call whose caller no longer holds it
  # (`Session.state!(Session.new())`).
  @spec keep(reference(), result) :: result when result: term()
  def keep(_resource, result), do: result

  defp whereis(name) do
    case GenServer.whereis(name) do
      pid when is_pid(pid) -> {:ok, pid}
      nil -> {:error, "worker process #{inspect(name)} is not running"}
    end
  end

  @doc false
  # Submit an exec; messages arrive tagged with the returned ref. An exec
  # that completed within the call (in the node, the runner's inline fast
  # path, `run/runner.rs`) is `{:done, id, outcome}` instead: nothing arrives.
  # A quick one that made a back-call within the call returns that first
  # message itself, `{:ok, ref, id, message}`: handle it before the mailbox.
  # `meta` is the exec's deadline, which a worker's owner answers by; in the
  # node (`nil`) the caller keeps it.
  @spec exec(reference(), location(), String.t(), map(), map() | nil) ::
          {:ok, reference(), pos_integer()}
          | {:ok, reference(), pos_integer(), tuple()}
          | {:done, pos_integer(), Callbacks.outcome()}
          | {:error, String.t()}
  def exec(resource, :in_node, script, call, _meta) do
    ref = make_ref()

    case nif(Native.session_exec(resource, script, call, self(), ref)) do
      {:ok, {:done, id, outcome}} -> {:done, id, outcome}
      {:ok, {:ok, id}} -> {:ok, ref, id}
      {:ok, {:ok, id, message}} -> {:ok, ref, id, message}
      {:error, _} = error -> error
    end
  end

  def exec(resource, {:process, name, sid}, script, call, meta) do
    with {:ok, worker} <- whereis(name) do
      ref = Process.monitor(worker)
      id = Worker.request(worker, ref, {:exec, sid, script, call}, meta)
      keep(resource, :ok)
      {:ok, ref, id}
    end
  end

  @doc false
  # `config` is a session's native configuration with at most `:limits`
  # given (`ExBashkit.exec/2`; the core has no defaults of its own).
  # Answers like `exec/5`.
  @spec exec_once(map(), String.t(), :in_node | :process, map()) ::
          {:ok, reference(), Callbacks.give_up()}
          | {:done, Callbacks.outcome()}
          | {:error, String.t()}
  def exec_once(config, script, :in_node, meta) do
    ref = make_ref()

    case Native.exec_once(config, script, self(), ref) do
      {:ok, {:done, outcome}} ->
        {:done, outcome}

      {:ok, {:ok, handle}} ->
        {:ok, ref, give_up(meta, fn -> Native.exec_once_give_up(handle) end)}

      {:error, message} ->
        {:error, message}
    end
  end

  def exec_once(config, script, :process, meta) do
    with {:ok, name} <- WorkerPool.pick_once(),
         {:ok, worker} <- whereis(name) do
      ref = Process.monitor(worker)
      Worker.request(worker, ref, {:exec_once, config, script}, meta)
      {:ok, ref, nil}
    end
  end

  @doc false
  # How the caller of exec `id` gives up on it (`Callbacks.await/4`): in
  # the node, nobody else answers an exec whose command does not check its
  # token past its deadline, so its caller does, as a worker's owner does
  # (`ExBashkit.Worker`), the same slack later. nil in a worker, whose
  # owner answers, and for a deadline no timer can hold (about 49 days).
  @spec give_up(reference(), location(), pos_integer(), map()) :: Callbacks.give_up()
  def give_up(resource, :in_node, id, meta),
    do: give_up(meta, fn -> Native.session_give_up_exec(resource, id) end)

  def give_up(_resource, {:process, _name, _sid}, _id, _meta), do: nil

  defp give_up(%{timeout_ms: ms}, ask) when is_integer(ms) and ms < 0xFFFF_0000 do
    slack = ExBashkit.Deadline.slack_ms()
    %{at: System.monotonic_time(:millisecond) + ms + slack, timeout_ms: ms, ask: ask}
  end

  defp give_up(_meta, _ask), do: nil

  @doc false
  @spec cancel_exec(reference(), location(), pos_integer()) :: :ok
  def cancel_exec(resource, :in_node, id) do
    nif(Native.session_cancel_exec(resource, id))
    :ok
  end

  def cancel_exec(_resource, {:process, name, sid}, id) do
    with {:ok, worker} <- whereis(name), do: Worker.cast(worker, {:cancel_exec, sid, id})
    :ok
  end

  @doc false
  @spec cancel(reference(), location()) :: boolean()
  def cancel(resource, :in_node), do: nif(Native.session_cancel(resource))

  def cancel(resource, {:process, name, sid}) do
    with {:ok, worker} <- whereis(name),
         do: keep(resource, Worker.call(worker, {:cancel, sid}) == true)
  end

  @doc false
  # `state`, `reset`, `snapshot`, `restore`: submitted, answered by message,
  # or, in the node, answered within the call (`{:done, reply}`: a reset
  # that swapped in an interpreter built in advance).
  @spec submit(reference(), location(), atom(), list()) ::
          {:ok, reference()} | {:done, term()} | {:error, term()}
  def submit(resource, :in_node, op, args) do
    ref = make_ref()

    case nif(apply(Native, :"session_#{op}", [resource | args] ++ [self(), ref])) do
      {:ok, {:done, reply}} -> {:done, reply}
      :ok -> {:ok, ref}
      {:ok, _} -> {:ok, ref}
      {:error, _} = error -> error
    end
  end

  def submit(resource, {:process, name, sid}, op, args) do
    with {:ok, worker} <- whereis(name) do
      ref = Process.monitor(worker)
      Worker.request(worker, ref, List.to_tuple([op, sid | args]))
      keep(resource, :ok)
      {:ok, ref}
    end
  end

  @doc false
  # The commits a session keeps, newest first (`session/history.rs`).
  @spec history_kept(reference(), location()) :: [String.t()] | {:error, String.t()}
  def history_kept(resource, :in_node), do: nif(Native.session_history_kept(resource))

  def history_kept(resource, {:process, name, sid}) do
    with {:ok, worker} <- whereis(name),
         do: keep(resource, Worker.call(worker, {:history_kept, sid}))
  end

  @doc false
  # Every commit a live session of this node keeps, in the node and in
  # every worker: the store's GC roots. Raises when a worker cannot say,
  # so that the collector frees nothing on doubt. A worker whose owner
  # stopped meanwhile (its last session gone) keeps nothing; one whose OS
  # process died keeps its sessions' recovery points.
  @spec history_roots() :: [String.t()]
  def history_roots do
    workers =
      for name <- WorkerPool.workers(), pid = GenServer.whereis(name), is_pid(pid) do
        case Worker.call(pid, {:history_roots, nil}) do
          roots when is_list(roots) ->
            roots

          # The owner itself exited meanwhile (its last session gone). Its
          # OS process dying answers its points' commits instead.
          {:error, %ExBashkit.Error{reason: :crashed}} ->
            []

          other ->
            if Process.alive?(pid),
              do: raise("worker #{inspect(name)} did not list its roots: #{inspect(other)}"),
              else: []
        end
      end

    Enum.uniq(Native.history_roots() ++ List.flatten(workers))
  end

  @doc false
  # A filesystem request (see `session/fs.rs`), answered synchronously.
  @spec fs(reference(), location(), tuple()) :: term()
  def fs(resource, :in_node, request), do: nif(Native.fs_call(resource, request))

  def fs(resource, {:process, name, sid}, request) do
    case whereis(name) do
      {:ok, worker} -> keep(resource, Worker.call(worker, {:fs, sid, request}))
      {:error, message} -> {:error, ExBashkit.Error.new(:lost, message)}
    end
  end

  @doc false
  # `{:ok, grants}` of `runtime_mounts::describe` (mounts, network, limits).
  @spec describe(reference(), location()) :: {:ok, map()} | {:error, String.t()}
  def describe(resource, :in_node), do: Native.session_describe(resource)

  def describe(resource, {:process, name, sid}) do
    with {:ok, worker} <- whereis(name),
         do: keep(resource, Worker.call(worker, {:describe, sid}))
  end

  @doc false
  # `{id, running?, cwd | nil}`, or nil when the session cannot say.
  @spec info(reference(), location()) :: {integer(), boolean(), String.t() | nil} | nil
  def info(resource, :in_node), do: nif(Native.session_info(resource))

  def info(resource, {:process, name, sid}) do
    with {:ok, worker} <- whereis(name),
         {_, _, _} = info <- keep(resource, Worker.call(worker, {:info, sid})) do
      info
    else
      _ -> nil
    end
  end

  @doc false
  # Where the session runs and how that OS process is confined
  # (`ExBashkit.Session.info/1`).
  @spec placement(location()) :: map()
  def placement(:in_node) do
    %{
      isolation: :in_node,
      os_pid: nil,
      group: nil,
      confinement: %{
        seccomp: false,
        landlock: false,
        namespaces: [],
        no_new_privs: false,
        memory_limit: nil
      }
    }
  end

  def placement({:process, name, _sid} = location) do
    confinement =
      with {:ok, worker} <- whereis(name),
           %{} = report <- Worker.call(worker, {:confinement}) do
        Map.take(report, [:seccomp, :landlock, :namespaces, :no_new_privs, :memory_limit])
      else
        _ -> placement(:in_node).confinement
      end

    %{
      isolation: :process,
      os_pid: GenServer.whereis(name) && Worker.os_pid(name),
      group: WorkerPool.group(location),
      confinement: confinement
    }
  end

  defp not_a_session!(stacktrace) do
    reraise ArgumentError,
            "not a session of this node: it belongs to another node (a term decoded " <>
              "from elsewhere) or was not made by ExBashkit.Session.new/1",
            stacktrace
  end

  @doc false
  # Sessions alive, in the node and in every worker (leak tests).
  @spec live_sessions() :: non_neg_integer()
  def live_sessions, do: Native.live_sessions() + sum_over_workers({:live_sessions})

  @doc false
  # Scripts running or queued, in the node and in every worker.
  @spec running_scripts() :: non_neg_integer()
  def running_scripts, do: Native.running_scripts() + sum_over_workers({:running_scripts})

  defp sum_over_workers(request) do
    for name <- WorkerPool.workers(), pid = GenServer.whereis(name), is_pid(pid), reduce: 0 do
      sum ->
        case Worker.call(pid, request) do
          n when is_integer(n) -> sum + n
          _ -> sum
        end
    end
  end

  @doc false
  # Answer a back-call of a script running at `location`. In the node, for
  # a quick script, the value is the message the script sent next during
  # the call (its final reply or its next back-call), returned instead of
  # sent (`ExBashkit.Callbacks` handles it).
  @spec callback_reply(location(), call_id(), term()) :: term()
  def callback_reply(:in_node, call_id, answer), do: Native.callback_reply(call_id, answer)

  # In a worker, the answer goes from here to the port of the worker OS
  # process that asked (`ExBashkit.Worker` puts it in the call id), one hop
  # fewer than through the `ExBashkit.Worker` process, which owns the port
  # and reads what comes back. If that OS process is gone, so is the script
  # that asked: the answer is dropped.
  def callback_reply({:process, _name, _sid}, {port, call_id}, answer) do
    Worker.write_frame(port, {:callback_reply, call_id, answer})
  end

  @doc false
  # Forget the worker monitor behind `ref` once its request is answered.
  @spec done(reference(), location() | :process) :: :ok
  def done(_ref, :in_node), do: :ok

  def done(ref, _process) do
    Process.demonitor(ref, [:flush])
    :ok
  end
end
