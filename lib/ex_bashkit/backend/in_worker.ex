defmodule ExBashkit.Backend.InWorker do
  @moduledoc false
  # `ExBashkit.Backend` for sessions in a worker OS process (`isolation:
  # :process`): each operation is a request to the session's
  # `ExBashkit.Worker`, the owner of that process's port. The request's
  # `ref` is a monitor of the owner, so a wait also ends if it dies
  # (`ExBashkit.Callbacks` matches the `:DOWN`). A session names its worker
  # by its registered name, so that it reaches the restarted owner if the
  # old one ever died.

  @behaviour ExBashkit.Backend

  alias ExBashkit.{Backend, Native, Worker, WorkerPool}
  alias ExBashkit.Backend.InNode

  @impl true
  def new(config, _inline?, group) do
    {config, image} = Backend.base_image(config)
    build(config, image, &WorkerPool.place(&1, group), 2)
  end

  @impl true
  def new_beside(config, {:process, name, _sid}, _inline?) do
    {config, image} = Backend.base_image(config)
    build(config, image, &WorkerPool.place_beside(name, &1), 2)
  end

  defp build(config, image, place, tries) do
    # The image's file exists before the process that maps it starts, or
    # its grant would have nothing to name.
    with :ok <- image_file(image),
         {:ok, name} <- place.(config),
         {:ok, worker} <- whereis(name) do
      sid = System.unique_integer([:positive])
      meta = if image, do: %{image: image}, else: %{}

      case Worker.call(worker, {:new, sid, config}, meta) do
        :ok ->
          {:ok, Native.remote_session(worker, sid), {:process, name, sid}}

        # A group's worker that stopped, its last session gone, just as
        # this one was placed on it: a new one starts.
        {:error, "worker process exited: " <> why}
        when why in [":normal", ":noproc"] and tries > 1 ->
          build(config, image, place, tries - 1)

        {:error, _} = error ->
          # The worker keeps nothing of a session that failed to build.
          send(worker, {:ex_bashkit_drop, sid})
          error
      end
    end
  end

  defp image_file(nil), do: :ok

  defp image_file(image) do
    ExBashkit.Image.Mapped.ensure!(image)
    :ok
  rescue
    error -> {:error, "cannot write the image's file: " <> Exception.message(error)}
  end

  @impl true
  def exec(resource, {:process, name, sid}, script, call, meta) do
    with {:ok, worker} <- whereis(name) do
      ref = Process.monitor(worker)
      id = Worker.request(worker, ref, {:exec, sid, script, call}, meta)
      keep(resource, :ok)
      {:ok, ref, id}
    end
  end

  @impl true
  def exec_once(config, script, meta) do
    with {:ok, name} <- WorkerPool.pick_once(),
         {:ok, worker} <- whereis(name) do
      ref = Process.monitor(worker)
      Worker.request(worker, ref, {:exec_once, config, script}, meta)
      {:ok, ref, nil}
    end
  end

  # The worker's owner answers by the deadline.
  @impl true
  def give_up(_resource, {:process, _name, _sid}, _id, _meta), do: nil

  @impl true
  def cancel_exec(_resource, {:process, name, sid}, id) do
    with {:ok, worker} <- whereis(name), do: Worker.cast(worker, {:cancel_exec, sid, id})
    :ok
  end

  @impl true
  def cancel(resource, {:process, name, sid}) do
    with {:ok, worker} <- whereis(name),
         do: keep(resource, Worker.call(worker, {:cancel, sid}) == true)
  end

  @impl true
  def submit(resource, {:process, name, sid}, op, args) do
    with {:ok, worker} <- whereis(name) do
      ref = Process.monitor(worker)
      Worker.request(worker, ref, List.to_tuple([op, sid | args]))
      keep(resource, :ok)
      {:ok, ref}
    end
  end

  @impl true
  def history_kept(resource, {:process, name, sid}),
    do: call(resource, name, {:history_kept, sid})

  # A worker whose owner stopped meanwhile (its last session gone) keeps
  # nothing; one whose OS process died keeps its sessions' recovery points.
  @impl true
  def history_roots do
    workers =
      for {name, pid} <- live_workers() do
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

    List.flatten(workers)
  end

  @impl true
  def fs(resource, {:process, name, sid}, request) do
    case whereis(name) do
      {:ok, worker} -> keep(resource, Worker.call(worker, {:fs, sid, request}))
      {:error, message} -> {:error, ExBashkit.Error.new(:lost, message)}
    end
  end

  @impl true
  def describe(resource, {:process, name, sid}), do: call(resource, name, {:describe, sid})

  @impl true
  def info(resource, {:process, name, sid}) do
    case call(resource, name, {:info, sid}) do
      {_, _, _} = info -> info
      _ -> nil
    end
  end

  @impl true
  def placement(resource, {:process, name, _sid} = location) do
    confinement =
      case call(resource, name, {:confinement}) do
        %{} = report ->
          Map.take(report, [:seccomp, :landlock, :namespaces, :no_new_privs, :memory_limit])

        _ ->
          InNode.unconfined()
      end

    keep(resource, %{
      isolation: :process,
      os_pid: GenServer.whereis(name) && Worker.os_pid(name),
      group: WorkerPool.group(location),
      confinement: confinement
    })
  end

  @impl true
  def count(what) do
    for {_name, pid} <- live_workers(), reduce: 0 do
      sum ->
        case Worker.call(pid, {what}) do
          n when is_integer(n) -> sum + n
          _ -> sum
        end
    end
  end

  # The answer goes from here to the port of the worker OS process that
  # asked (`ExBashkit.Worker` puts it in the call id), one hop fewer than
  # through the `ExBashkit.Worker` process, which owns the port and reads
  # what comes back. If that OS process is gone, so is the script that
  # asked: the answer is dropped.
  @impl true
  def callback_reply({:process, _name, _sid}, {port, call_id}, answer) do
    Worker.write_frame(port, {:callback_reply, call_id, answer})
  end

  # `result`, the session's handle kept alive until the request that gave
  # it was sent: a handle collected earlier would drop the session, and
  # stop its own worker, ahead of a call whose caller no longer holds it
  # (`Session.state!(Session.new())`). Public, so that no compiler pass
  # drops the argument.
  @doc false
  @spec keep(reference(), result) :: result when result: term()
  def keep(_resource, result), do: result

  # Ask the session's worker `request` and wait for the answer, the handle
  # kept until then.
  defp call(resource, name, request) do
    with {:ok, worker} <- whereis(name), do: keep(resource, Worker.call(worker, request))
  end

  # Every worker of the pool whose owner runs now.
  defp live_workers do
    for name <- WorkerPool.workers(), pid = GenServer.whereis(name), is_pid(pid), do: {name, pid}
  end

  defp whereis(name) do
    case GenServer.whereis(name) do
      pid when is_pid(pid) -> {:ok, pid}
      nil -> {:error, "worker process #{inspect(name)} is not running"}
    end
  end
end
