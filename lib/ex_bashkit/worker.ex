defmodule ExBashkit.Worker do
  @moduledoc """
  One worker OS process that runs sessions for the node
  (`isolation: :process`, the default), and the Elixir process that owns its
  port.

  The worker is `priv/native/ex_bashkit_worker`, built from the same Rust
  crate as the NIF: the same interpreter core, spoken to by frames on its
  stdin/stdout (`{:packet, 4}`, external term format; the protocol is
  documented in `native/ex_bashkit/src/worker.rs`). A crash, a stack
  overflow, an allocation failure or a thread that never stops ends that OS
  process, never the VM.

  This process routes messages both ways: a request carries the caller's pid
  and reference; every message the worker sends back (`{tag, id, payload}`)
  is forwarded to the caller as `{tag, ref, payload}`, the very message the
  NIF transport sends, so the code that waits is the same in both modes.
  Only the answers to back-calls skip it on their way in: a back-call's id
  reaches the caller with the port of the OS process that made it, and the
  waiting caller writes the answer to that port itself (so an answer never
  reaches the OS process started after a crash, whose call ids also count
  from 1).

  What it guarantees:

    * **Caller death** cancels the caller's execs in the worker (one-shot
      `ExBashkit.exec/1` ones too), and its `state`, `reset`, `snapshot`
      and `restore` calls still waiting for their turn.
    * **Deadlines.** Every exec has one: the call's `:timeout_ms`, the
      session's `limits: [timeout_ms: ...]`, or bashkit's default, which the
      interpreter applies too. The worker answers at the deadline, with the
      output so far. If it has not answered one second later (its
      interpreter never reached a command boundary, or its runners are all
      busy), this process asks the worker's reading thread whether the exec
      should have ended (the session's own timeout counts from the exec's
      start, so one that waited for its turn may not be due yet: it is
      looked at again when it is) and, if so, for its output so far, and
      answers with it (with what was streamed, or nothing, if that does not
      come within 200 ms: the OS process gets no CPU. An exec timed out by
      its session's own timeout, which may not be due, is first asked
      about twice more, two seconds apart). If the worker has
      still not finished the exec `:worker_kill_grace_ms` later (default
      2 000), the worker is killed. `ExBashkit.Session.cancel/1` gets the
      same treatment.
    * **Crashes.** When the worker dies, every request in flight on it is
      answered at once with an error of `reason: :crashed` (its message
      from `exec/3`, `%ExBashkit.Error{}` from `run/3`), a new
      worker starts, and every session that lived there is rebuilt: a
      durable one (`durable: true`, the default) from its last recovery
      point (`ExBashkit.Worker.Recovery`), as it was before the call in
      flight, its runtime mounts and unmounts put back; any other from
      its `new/1` configuration, and if it was idle it answers its next
      call with an error of `reason: :lost` (once), so the loss of its
      state is never silent; it is usable again afterwards.

  Workers are started by `ExBashkit.Application` (see
  `ExBashkit.WorkerPool`) and start their OS process on first use.

  ## Confinement

  On Linux each worker OS process confines itself before it reads its
  first frame (`native/ex_bashkit/src/worker/confine.rs`; SECURITY.md says
  what each layer stops): an empty environment; no descriptor of the VM's
  but its two pipes (its stderr is a pipe of its own, whose lines this
  process logs); its own user, mount, IPC and UTS namespaces, and its own
  network namespace, which reaches nothing, unless it serves sessions
  granted network; no capabilities (bounding and ambient sets included),
  even where the VM runs as root; not dumpable and no core dumps;
  `no_new_privs`; a Landlock domain (no program executed, no device used,
  no signal sent outside it); a seccomp-bpf allowlist of the system calls
  the interpreter needs (no process created, nothing executed, nothing
  traced); and the address-space limit of `:worker_max_memory`.

  ## Grants

  Landlock also keeps the OS process to the host files its sessions need:
  it is started granted each `:mounts` entry of its first session
  (`:read_only` ones read only) and the file of its base image
  (`ExBashkit.Image.Mapped`), and opens no other host file. A running
  process can only be narrowed, so a session that joins (a `:group`'s) or
  an `ExBashkit.Session.mount/4` that needs a grant the process lacks
  waits, with the calls that come after it, until nothing is in
  flight there; then every session of the process moves to a new OS
  process started with the wider grants, rebuilt from its recovery point
  as after a crash, but silently: nothing is lost, since nothing was in
  flight and a durable session's point is current at every answer. When a
  session there cannot be rebuilt so (`durable: false`, or over a `:base`
  image), nothing moves and the call that needed more is refused with
  `{:error, message}`.

  A layer the kernel lacks is left out and reported:
  `ExBashkit.Session.info/1` shows the layers a session's process holds,
  and with `config :ex_bashkit, require_confinement: true` a worker missing
  one refuses to build sessions, so `ExBashkit.Session.new/1` raises
  naming it. `self_test/1` checks the layers from inside a confined
  process by trying what they stop.
  """

  use GenServer
  require Logger

  alias ExBashkit.{Deadline, Native}
  alias ExBashkit.Worker.{Grants, Recovery, Zygote}

  # How long the worker's reading thread may take to send an exec's output
  # so far, once asked (it reads every frame, and runs at most a quick
  # script between two).
  @output_wait_ms 200
  # How many more times an exec whose deadline may not have come (its
  # session's own timeout, which counts from its start) is asked about when
  # the reading thread is late, before it is answered without its output.
  # A worker runs at nice 10: beside a busy VM, its reading thread can be
  # late without being frozen.
  @late_asks 2
  @lifecycle_kinds [:state, :reset, :snapshot, :restore]
  # Node-wide questions, and the answer of a worker with no OS process.
  @empty_answers %{history_roots: [], live_sessions: 0, running_scripts: 0}
  # What a spare runs before its session comes (see `handle_info(:warm, _)`):
  # the commands most first scripts use.
  @warm_up_script """
  n=0; for i in 1 2 3; do n=$((n + i)); done; f() { echo "$1"; }
  mkdir -p /tmp/w && cd /tmp/w && f "$n" > a && cat a | grep 6 | wc -l; export W=1; unset W
  """
  # Interpreter threads of a worker: 16 MiB stacks (a stack overflow only
  # ends the worker, unlike in the node), at most 256 scripts at once; the
  # address-space limit makes room for all of them on top of `:max_memory`
  # (the worker adds them and its mapping slack: `worker.rs`).
  @stack_size 16 * 1024 * 1024
  @max_script_threads 256

  @typedoc "A request without its id: `{op, sid, args...}` (see `worker.rs`)."
  @type request :: tuple()

  @doc false
  def child_spec(opts) do
    %{id: Keyword.get(opts, :name, __MODULE__), start: {__MODULE__, :start_link, [opts]}}
  end

  @doc """
  Start a worker owner registered as `opts[:name]` (unregistered when nil:
  a spare, named when claimed). The OS process starts on the first request.
  """
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts),
    do: GenServer.start_link(__MODULE__, opts, name: Keyword.get(opts, :name))

  @doc false
  # Register the spare `worker` under `name` (`{:via, Registry, {registry,
  # key}}`), for the session about to be built there. `:ok`, or
  # `{:error, reason}` when the name is taken or the spare is gone.
  @spec claim(pid(), GenServer.name()) :: :ok | {:error, term()}
  def claim(worker, {:via, Registry, {registry, key}}) do
    GenServer.call(worker, {:claim, registry, key})
  catch
    :exit, reason -> {:error, reason}
  end

  @doc false
  # Send `request` to the worker; its messages reach the caller tagged with
  # `ref`. `meta` may carry `:timeout_ms` (the deadline of an exec, from
  # now) and `:from_start` (true when that deadline is the session's own
  # timeout, which counts from the exec's start: one that waits for its
  # turn is not due by then). Returns the request id, which for an exec is
  # also its exec id.
  @spec request(pid(), reference(), request(), map()) :: pos_integer()
  def request(worker, ref, request, meta \\ %{}) do
    id = System.unique_integer([:positive])
    send(worker, {:ex_bashkit_request, self(), ref, id, request, meta})
    id
  end

  @doc false
  # Send a frame that has no answer (`{:cancel_exec, sid, id}`).
  @spec cast(pid(), tuple()) :: :ok
  def cast(worker, frame) do
    send(worker, {:ex_bashkit_cast, frame})
    :ok
  end

  @doc false
  # Send `request` and wait for its answer (short requests: fs, info, cancel,
  # new). The worker owner always answers, or dies, which also ends the wait.
  @spec call(pid(), request(), map()) :: term()
  def call(worker, request, meta \\ %{}) do
    ref = Process.monitor(worker)
    request(worker, ref, request, meta)

    receive do
      {:ex_bashkit_reply, ^ref, reply} ->
        Process.demonitor(ref, [:flush])
        reply

      {:DOWN, ^ref, :process, _, reason} ->
        {:error, ExBashkit.Error.new(:crashed, "worker process exited: #{inspect(reason)}")}
    end
  end

  @doc false
  # The OS pid of the running worker, or nil (tests and diagnostics).
  @spec os_pid(pid() | atom()) :: non_neg_integer() | nil
  def os_pid(worker), do: GenServer.call(worker, :os_pid)

  # -- server ---------------------------------------------------------------

  @impl true
  def init(opts) do
    Process.flag(:trap_exit, true)
    # Frames are decoded with `[:safe]`: every atom they may carry must
    # exist before the first one arrives. Some live in modules (such as
    # `ExBashkit.Error`) that a fresh VM has not loaded yet: calling the
    # list loads them.
    _ = protocol_atoms()

    {:ok,
     %{
       port: nil,
       os_pid: nil,
       # :forked (by the zygote) or :started: where its exit status comes from
       started: nil,
       generation: 0,
       # id => %{pid, ref, mref, sid, kind, timer}
       routes: %{},
       monitors: %{},
       # sid => config, for rebuilding after a crash
       sessions: %{},
       # sid => message: sessions whose state a crash lost, told once
       lost: %{},
       # sid => the recovery point a durable session is rebuilt from
       points: %{},
       # sid => the host mounts runtime mounts and unmounts left it with
       # (absent: its configuration's), put back with its point
       mounts: %{},
       # base images of the sessions here: id => %ExBashkit.Image{}, and
       # the ids the running OS process has been sent (see `ship_image/2`)
       images: %{},
       shipped: MapSet.new(),
       # ids answered by their deadline and not yet by the worker
       overdue: %{},
       # ids past their deadline waiting for their output so far: id => why
       answering: %{},
       grace_ms: Keyword.get(opts, :grace_ms, 2_000),
       # a session's or group's own worker stops with its last session
       stop_when_idle: Keyword.get(opts, :stop_when_idle, false),
       held: false,
       # requests waiting, in order, for the sessions here to move to an OS
       # process with more grants (see "Grants" in the moduledoc)
       queue: []
     }
     |> Map.merge(settings(opts))}
  end

  @impl true
  def handle_call(:os_pid, _from, state), do: {:reply, state.os_pid, state}

  def handle_call({:claim, registry, key}, _from, state) do
    case Registry.register(registry, key, nil) do
      {:ok, _owner} -> {:reply, :ok, state}
      {:error, reason} -> {:reply, {:error, reason}, state}
    end
  end

  @impl true
  def handle_info({:ex_bashkit_request, pid, ref, id, request, meta}, state) do
    settle(route(state, pid, ref, id, request, meta))
  end

  # A spare starts its OS process before its first session comes, and runs
  # a one-shot script there: a fresh process builds its first interpreter
  # and runs its first commands 10-50 times slower than the next ones
  # (code paged in, tables built on first use), which its session's first
  # calls would otherwise pay. It also builds and drops a session, whose
  # first build in a process pays the same (a group's second session in a
  # fresh process took 0.9 ms to make, its third 0.26 ms).
  def handle_info(:warm, state) do
    case ensure_port(state) do
      {:ok, state} ->
        config = ExBashkit.Session.Options.parse_default!().native
        sid = System.unique_integer([:positive])

        state =
          state
          |> warm_up(&{:exec_once, &1, config, @warm_up_script})
          |> warm_up(&{:new, &1, sid, config})

        {:noreply, send_frame(state, {:drop, sid})}

      {:error, _message} ->
        {:noreply, state}
    end
  end

  def handle_info({tag, :warm_up, _payload}, state)
      when tag in [:ex_bashkit_reply, :ex_bashkit_output],
      do: {:noreply, state}

  def handle_info({:ex_bashkit_cast, frame}, state) do
    {:noreply, send_frame(state, frame)}
  end

  def handle_info({:ex_bashkit_drop, sid}, state) do
    state = %{
      state
      | sessions: Map.delete(state.sessions, sid),
        lost: Map.delete(state.lost, sid),
        points: Map.delete(state.points, sid),
        mounts: Map.delete(state.mounts, sid)
    }

    state = if(state.port, do: send_frame(state, {:drop, sid}), else: state)
    settle(prune_images(state))
  end

  def handle_info({port, {:data, frame}}, %{port: port} = state) do
    settle(deliver(state, decode(frame)))
  end

  # A forked process's port is on the process that asked the zygote for
  # it, which exited at once: the zygote tells how the worker ended.
  def handle_info({port, {:exit_status, status}}, %{port: port} = state) do
    status =
      if state.started == :forked, do: Zygote.exit_status(state.os_pid) || status, else: status

    {:noreply, crashed(state, "exit status #{status}")}
  end

  def handle_info({:EXIT, port, reason}, %{port: port} = state) do
    {:noreply, crashed(state, inspect(reason))}
  end

  def handle_info({:DOWN, mref, :process, _pid, _reason}, state) do
    case Map.pop(state.monitors, mref) do
      {nil, _} ->
        {:noreply, state}

      {id, monitors} ->
        {route, routes} = Map.pop(state.routes, id)
        state = %{state | monitors: monitors, routes: routes}
        cancel_timer(route)
        # Nobody will read the answer: stop the script. A lifecycle call
        # (state, reset, snapshot, restore) still queued is dropped the same
        # way (`session/lifecycle.rs`).
        settle(send_frame(state, stop_frame(route, id)))
    end
  end

  # An exec past its deadline (or cancelled) that the worker has not
  # answered by itself: its output so far is asked of the worker's reading
  # thread, which answers however busy the runners are, and the caller gets
  # it in the error. Other requests are answered at once.
  def handle_info({:deadline, id, why}, state) do
    route = Map.get(state.routes, id)

    cond do
      route == nil or Map.has_key?(state.answering, id) -> {:noreply, state}
      route.kind in [:exec, :exec_once] -> {:noreply, ask_output_so_far(state, id, route, why)}
      true -> settle(answer_stopped(state, id, why, nil))
    end
  end

  def handle_info({:ex_bashkit_reply, {:output_so_far, id}, reply}, state) do
    case reply do
      {stdout, stderr} when is_binary(stdout) and is_binary(stderr) ->
        settle(answer_pending(state, id, {stdout, stderr}))

      # Not overdue after all (see `ExBashkit.Deadline.look_again_ms/1`).
      {:running, left} ->
        {:noreply, look_again(state, id, :deadline, Deadline.look_again_ms(left))}

      # It has just ended: its own answer is on its way. Answer without it
      # only if that has not come a second later.
      _ended ->
        {:noreply, look_again(state, id, :ended, Deadline.slack_ms())}
    end
  end

  # Its own answer never came: answer without it. There is no script left
  # to stop, so no grace period either.
  def handle_info({:ended, id, why}, state) do
    state = answer_stopped(state, id, why, nil)
    settle(%{state | overdue: Map.delete(state.overdue, id)})
  end

  # The reading thread did not answer in time (the OS process is frozen or
  # starved). An exec timed out by its session's own timeout may not be due
  # yet (see `@late_asks`): it is asked about again later. Any other is
  # answered without the output: its deadline has passed for sure.
  def handle_info({:output_so_far_late, id}, state) do
    case {Map.get(state.answering, id), Map.get(state.routes, id)} do
      {{:timeout, _}, %{from_start: true, lates: lates} = route} when lates < @late_asks ->
        state = %{state | routes: Map.put(state.routes, id, %{route | lates: lates + 1})}
        {:noreply, look_again(state, id, :deadline, Deadline.look_again_ms(nil))}

      _ ->
        settle(answer_pending(state, id, nil))
    end
  end

  def handle_info({:ex_bashkit_reply, {:rebuild, sid}, {:error, message}}, state) do
    lost = Map.put(state.lost, sid, lost("session lost and not rebuilt: ", message))
    {:noreply, %{state | lost: lost}}
  end

  def handle_info({:ex_bashkit_reply, {:rebuild, _sid}, _ok}, state), do: {:noreply, state}

  def handle_info({:grace, id, generation}, %{generation: generation} = state) do
    if Map.has_key?(state.overdue, id) and state.os_pid do
      Logger.warning(
        "ExBashkit.Worker: a script ignored its deadline for #{state.grace_ms} ms; " <>
          "killing worker OS process #{state.os_pid}"
      )

      Native.kill_os_process(state.os_pid)
    end

    {:noreply, state}
  end

  def handle_info({:grace, _id, _old_generation}, state), do: {:noreply, state}
  def handle_info({:EXIT, _other, _reason}, state), do: {:noreply, state}
  def handle_info({_old_port, {:exit_status, _}}, state), do: {:noreply, state}
  def handle_info({_old_port, {:data, _}}, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, %{port: port}) do
    if port, do: Port.close(port)
  catch
    _, _ -> :ok
  end

  # After a message that may have answered the last call in flight: the
  # sessions move if requests wait for that, and a session's own process
  # (or a group's) stops with its last session, once the calls still in
  # flight are answered (a session collected while its last call runs
  # still gets that answer), and only once it has held one (a spare, or a
  # process started for a session whose `new` has not come yet, holds
  # none).
  defp settle(%{queue: [_ | _], routes: routes} = state) when map_size(routes) == 0,
    do: settle(move(state))

  defp settle(
         %{stop_when_idle: true, held: true, sessions: sessions, routes: routes, queue: []} =
           state
       )
       when map_size(sessions) == 0 and map_size(routes) == 0,
       do: {:stop, :normal, state}

  defp settle(state), do: {:noreply, state}

  # -- routing --------------------------------------------------------------

  # A request waits while requests before it wait for a move (a cancel never
  # does: the move may be waiting for the exec it stops), and waits itself
  # when it needs a grant the running OS process lacks; one before the OS
  # process starts adds its grants to those it will start with.
  defp route(state, pid, ref, id, request, meta) do
    waiting = {pid, ref, id, request, meta}
    needed = Grants.needed(request)

    cond do
      state.queue != [] and elem(request, 0) != :cancel ->
        %{state | queue: state.queue ++ [waiting]}

      Grants.missing(state.grants, needed) == [] ->
        dispatch(state, pid, ref, id, request, meta)

      state.port == nil ->
        state = %{state | grants: MapSet.union(state.grants, MapSet.new(needed))}
        dispatch(state, pid, ref, id, request, meta)

      true ->
        %{state | queue: [waiting]}
    end
  end

  defp dispatch(state, pid, ref, id, request, meta) do
    kind = elem(request, 0)

    sid =
      if kind in [:exec_once, :live_sessions, :running_scripts, :canonical_tar, :confinement],
        do: nil,
        else: elem(request, 1)

    cond do
      kind != :new and Map.has_key?(state.lost, sid) ->
        {message, lost} = Map.pop(state.lost, sid)
        send(pid, {:ex_bashkit_reply, ref, {:error, message}})
        %{state | lost: lost}

      # No OS process, so no session: answered without starting one.
      state.port == nil and Map.has_key?(@empty_answers, kind) ->
        send(pid, {:ex_bashkit_reply, ref, empty_answer(state, kind)})
        state

      true ->
        case ensure_port(state) do
          {:ok, state} ->
            state =
              if kind == :new,
                do: %{
                  state
                  | sessions: Map.put(state.sessions, sid, elem(request, 2)),
                    held: true
                },
                else: state

            state =
              case meta do
                %{image: %ExBashkit.Image{} = image} -> ship_image(state, image)
                _ -> state
              end

            mref = Process.monitor(pid)
            timer = deadline_timer(id, meta)

            route = %{
              pid: pid,
              ref: ref,
              mref: mref,
              sid: sid,
              kind: kind,
              timer: timer,
              from_start: Map.get(meta, :from_start, false),
              lates: 0,
              holds: Recovery.changes_state?(request) and recoverable?(state, sid)
            }

            # What the answer's bookkeeping needs of the request.
            route =
              if kind in [:fork, :mount, :unmount],
                do: Map.put(route, :arg, elem(request, 2)),
                else: route

            state = %{
              state
              | routes: Map.put(state.routes, id, route),
                monitors: Map.put(state.monitors, mref, id)
            }

            state = if kind == :cancel, do: cancel_running(state, sid), else: state
            send_frame(state, Tuple.insert_at(request, 1, id))

          {:error, message} ->
            send(pid, {:ex_bashkit_reply, ref, {:error, message}})
            state
        end
    end
  end

  # Deadlines past what a timer can hold (about 49 days) are no deadline.
  defp deadline_timer(id, %{timeout_ms: ms}) when is_integer(ms) and ms < 0xFFFF_0000 do
    Process.send_after(self(), {:deadline, id, {:timeout, ms}}, ms + Deadline.slack_ms())
  end

  defp deadline_timer(_id, _meta), do: nil

  # `cancel/1` promises a prompt answer: the execs of `sid` get the deadline
  # treatment, due now.
  defp cancel_running(state, sid) do
    for {id, %{sid: ^sid, kind: :exec} = route} <- state.routes do
      cancel_timer(route)
      Process.send_after(self(), {:deadline, id, :cancelled}, Deadline.slack_ms())
    end

    state
  end

  defp ask_output_so_far(state, id, route, why) do
    # A request of this process's own: its answer comes back here.
    ask = System.unique_integer([:positive])

    to_self = %{
      pid: self(),
      ref: {:output_so_far, id},
      mref: nil,
      sid: route.sid,
      kind: :output_so_far,
      timer: nil
    }

    state = %{
      state
      | routes: Map.put(state.routes, ask, to_self),
        answering: Map.put(state.answering, id, why)
    }

    Process.send_after(self(), {:output_so_far_late, id}, @output_wait_ms)
    send_frame(state, {:output_so_far, ask, route.sid, id})
  end

  defp look_again(state, id, what, after_ms) do
    {why, answering} = Map.pop(state.answering, id)
    if why, do: Process.send_after(self(), {what, id, why}, after_ms)
    %{state | answering: answering}
  end

  # The answer to exec `id` that waited for its output so far, unless the
  # worker answered it by itself meanwhile.
  defp answer_pending(state, id, output) do
    case Map.pop(state.answering, id) do
      {nil, _} -> state
      {why, answering} -> answer_stopped(%{state | answering: answering}, id, why, output)
    end
  end

  # Answer request `id` now, with `why` and the `{stdout, stderr}` it wrote
  # (or nil); give the interpreter the grace period to stop on its own
  # before the worker is killed.
  defp answer_stopped(state, id, why, output) do
    case Map.pop(state.routes, id) do
      {nil, _} ->
        state

      {route, routes} ->
        demonitor(route.mref)
        error = ExBashkit.Error.stopped(why, output)
        send(route.pid, {:ex_bashkit_reply, route.ref, {:error, error}})
        state = %{state | routes: routes, monitors: Map.delete(state.monitors, route.mref)}
        state = send_frame(state, stop_frame(route, id))
        Process.send_after(self(), {:grace, id, state.generation}, state.grace_ms)
        %{state | overdue: Map.put(state.overdue, id, route.sid)}
    end
  end

  # The frame that stops request `id` in the worker, for those that can be
  # stopped (nil for the others).
  defp stop_frame(%{kind: :exec_once}, id), do: {:cancel_once, id}

  defp stop_frame(%{kind: kind, sid: sid}, id) when kind == :exec or kind in @lifecycle_kinds,
    do: {:cancel_exec, sid, id}

  defp stop_frame(_route, _id), do: nil

  defp cancel_timer(%{timer: timer}) when is_reference(timer),
    do: Process.cancel_timer(timer, async: true, info: false)

  defp cancel_timer(_route), do: :ok

  defp demonitor(nil), do: :ok
  defp demonitor(mref), do: Process.demonitor(mref, [:flush])

  defp decode(frame) do
    :erlang.binary_to_term(frame, [:safe])
  rescue
    ArgumentError -> :undecodable
  end

  # Every atom a worker may send. Frames are decoded with `[:safe]`, which
  # refuses atoms the node does not have yet: naming them here, in a
  # function of this module, creates them when the module loads.
  @doc false
  @spec protocol_atoms() :: [atom()]
  def protocol_atoms do
    [:ex_bashkit_reply, :ex_bashkit_output, :ex_bashkit_callback, :ex_bashkit_recovery] ++
      [:ok, :error, nil, true, :commit, :shell, :files, :gone, :link] ++
      [false, :env, :variables, :cwd, :functions, :aliases, :last_exit_code, :builtin, :vfs] ++
      [:read, :write, :append, :mkdir, :remove, :rename, :list, :stat, :file, :dir, :symlink] ++
      [:fs_usage, :bytes, :files, :dirs, :complete, :created, :modified, :deleted] ++
      [:trash, :undelete, :path, :trash_path, :deleted_at, :type, :size] ++
      [:eexist, :enoent, :no_soft_delete, :ex_bashkit_log, :seccomp, :landlock] ++
      [:namespaces, :no_new_privs, :capabilities_dropped, :memory_limit, :missing] ++
      [:user, :mount, :ipc, :uts, :network] ++
      ExBashkit.Error.protocol_atoms()
  end

  # A durable session's recovery point, ahead of the answer of the call
  # that made it (`ExBashkit.Worker.Recovery`).
  defp deliver(state, {:ex_bashkit_recovery, _id, {sid, point}}) when is_integer(sid) do
    if Map.has_key?(state.sessions, sid),
      do: %{state | points: Recovery.put(state.points, sid, point)},
      else: state
  end

  defp deliver(state, {tag, id, payload}) when is_integer(id) do
    case Map.fetch(state.routes, id) do
      {:ok, route} when tag == :ex_bashkit_reply ->
        answer(state, id, route, payload)

      {:ok, route} ->
        send(route.pid, {tag, route.ref, for_caller(state, tag, payload)})
        state

      :error ->
        orphan(state, tag, id, payload)
    end
  end

  defp deliver(state, {:ex_bashkit_log, 0, line}) when is_binary(line) do
    Logger.warning("ExBashkit worker OS process #{state.os_pid}: #{line}")
    state
  end

  defp deliver(state, other) do
    Logger.error("ExBashkit.Worker: unexpected frame from the worker: #{inspect(other)}")
    state
  end

  # A back-call's id names the port of the OS process that made it: call
  # ids are counted per OS process, from 1, so the answer must go to that
  # process or nowhere (after a crash, the next one may wait under the same
  # number for another session's answer).
  defp for_caller(state, :ex_bashkit_callback, {call_id, request}),
    do: {{state.port, call_id}, request}

  defp for_caller(_state, _tag, payload), do: payload

  # A call that changed a durable session's state is answered once a
  # recovery point is made for it: its answer is held by a
  # `:recovery_point` call to the same caller. (One that failed changed
  # nothing: a timed-out restore never ran.)
  defp answer(state, id, %{holds: true} = route, payload)
       when payload == :ok or (is_tuple(payload) and elem(payload, 0) == :ok) do
    state = finish(state, id, route)
    point_id = System.unique_integer([:positive])
    mref = Process.monitor(route.pid)

    held =
      Map.merge(route, %{
        mref: mref,
        kind: :recovery_point,
        holds: false,
        timer: nil,
        held: payload
      })

    state = %{
      state
      | routes: Map.put(state.routes, point_id, held),
        monitors: Map.put(state.monitors, mref, point_id)
    }

    send_frame(state, {:recovery_point, point_id, route.sid, %{timeout_ms: nil}})
  end

  defp answer(state, id, route, payload) do
    {payload, state} = answered(state, route, Map.get(route, :held, payload))
    send(route.pid, {:ex_bashkit_reply, route.ref, payload})
    finish(state, id, route)
  end

  # What this process adds to an answer: the points' GC roots to the OS
  # process's, and a reset's state is its configuration's again.
  defp answered(state, %{kind: :history_roots}, roots) when is_list(roots),
    do: {Enum.uniq(roots ++ Recovery.roots(state.points)), state}

  defp answered(state, %{kind: :reset, sid: sid}, :ok),
    do:
      {:ok,
       %{state | points: Map.delete(state.points, sid), mounts: Map.delete(state.mounts, sid)}}

  # A fork is its parent as of this answer (`session/fork.rs` holds the
  # parent's turn until it is sent).
  defp answered(state, %{kind: :fork, sid: sid, arg: child}, :ok),
    do: {:ok, %{state | points: Recovery.forked(state.points, sid, child)}}

  defp answered(state, %{kind: :mount, sid: sid, arg: spec}, :ok),
    do: {:ok, put_in(state.mounts[sid], host_mounts(state, sid) ++ [spec])}

  defp answered(state, %{kind: :unmount, sid: sid, arg: vfs}, :ok) do
    left = Enum.reject(host_mounts(state, sid), &(&1.vfs_path == vfs))
    {:ok, put_in(state.mounts[sid], left)}
  end

  defp answered(state, %{kind: :history_commit, sid: sid}, {:ok, {id, _objects}} = reply) do
    if recoverable?(state, sid),
      do: {reply, %{state | points: Recovery.committed(state.points, sid, id)}},
      else: {reply, state}
  end

  defp answered(state, _route, payload), do: {payload, state}

  defp empty_answer(state, :history_roots), do: Recovery.roots(state.points)
  defp empty_answer(_state, kind), do: Map.fetch!(@empty_answers, kind)

  defp host_mounts(state, sid) do
    case Map.fetch(state.mounts, sid) do
      {:ok, mounts} -> mounts
      :error -> state.sessions |> Map.get(sid, %{}) |> Map.get(:mounts, [])
    end
  end

  defp recoverable?(state, sid) do
    case Map.fetch(state.sessions, sid) do
      {:ok, config} -> Recovery.recoverable?(config)
      :error -> false
    end
  end

  defp finish(state, id, route) do
    demonitor(route.mref)
    cancel_timer(route)

    %{
      state
      | routes: Map.delete(state.routes, id),
        monitors: Map.delete(state.monitors, route.mref)
    }
  end

  # A message for a request nobody waits for any more: an exec answered by
  # its deadline, or whose caller died. A back-call from it fails at once
  # rather than making the script wait out its timeout.
  defp orphan(state, :ex_bashkit_reply, id, _payload),
    do: %{state | overdue: Map.delete(state.overdue, id)}

  defp orphan(state, :ex_bashkit_callback, _id, {call_id, _request}),
    do: send_frame(state, {:callback_reply, call_id, {:failed, "the calling process is gone"}})

  defp orphan(state, _tag, _id, _payload), do: state

  # A request whose answer nobody waits for (`handle_info(:warm, _)`).
  defp warm_up(state, request) do
    id = System.unique_integer([:positive])
    route = %{pid: self(), ref: :warm_up, mref: nil, sid: nil, kind: :warm_up, timer: nil}
    send_frame(%{state | routes: Map.put(state.routes, id, route)}, request.(id))
  end

  defp send_frame(%{port: nil} = state, _frame), do: state
  defp send_frame(state, nil), do: state

  # A session's credentials are sealed in the configuration this process
  # keeps (`ExBashkit.Session.Credentials`): opened only into the frame.
  defp send_frame(%{port: port} = state, {:new, id, sid, config}) do
    write_frame(port, {:new, id, sid, ExBashkit.Session.Credentials.unseal(config)})
    state
  end

  defp send_frame(%{port: port} = state, frame) do
    write_frame(port, frame)
    state
  end

  @doc false
  # Write `frame` to a worker's `port`. A closed port means its OS process
  # is gone, and with it whatever the frame was for: the frame is dropped.
  @spec write_frame(port(), tuple()) :: :ok
  def write_frame(port, frame) do
    Port.command(port, :erlang.term_to_binary(frame))
    :ok
  rescue
    ArgumentError -> :ok
  end

  # -- base images ----------------------------------------------------------

  # A worker OS process is told each base image's file once
  # (`ExBashkit.Image.Mapped`, written on first use), before the first `new`
  # that names it, and maps it; it keeps the image while any of its
  # sessions does. Frames are handled in order, so the `new` that follows
  # finds it.
  defp ship_image(state, %ExBashkit.Image{id: id} = image) do
    state = %{state | images: Map.put(state.images, id, image)}

    if MapSet.member?(state.shipped, id) or state.port == nil do
      state
    else
      case image_file(image) do
        {:ok, path} ->
          state = send_frame(state, {:map_image, id, path})
          %{state | shipped: MapSet.put(state.shipped, id)}

        # Not an image of this node (a struct decoded from elsewhere): the
        # `new` that follows fails, saying the image is not loaded.
        :error ->
          %{state | images: Map.delete(state.images, id)}
      end
    end
  end

  defp image_file(image) do
    {:ok, ExBashkit.Image.Mapped.ensure!(image)}
  rescue
    _ -> :error
  end

  # Images no session of this worker names any more: the worker frees them,
  # and this process lets go of the handle (so the node's copy can be
  # garbage-collected too).
  defp prune_images(state) do
    in_use =
      for {_sid, %{base: id}} when is_binary(id) <- state.sessions, into: MapSet.new(), do: id

    Enum.reduce(Map.keys(state.images), state, fn id, state ->
      if MapSet.member?(in_use, id) do
        state
      else
        state = if state.port, do: send_frame(state, {:drop_image, id}), else: state

        %{
          state
          | images: Map.delete(state.images, id),
            shipped: MapSet.delete(state.shipped, id)
        }
      end
    end)
  end

  # -- the OS process -------------------------------------------------------

  defp ensure_port(%{port: nil} = state) do
    {port, os_pid, started} = Zygote.start(worker_args(state))
    {:ok, %{state | port: port, os_pid: os_pid, started: started}}
  rescue
    error ->
      {:error, "cannot start the worker process #{executable()}: #{Exception.message(error)}"}
  end

  defp ensure_port(state), do: {:ok, state}

  @doc false
  # What a worker OS process is started with, from a worker's options.
  @spec settings(keyword()) :: map()
  def settings(opts) do
    %{
      max_memory: Keyword.get(opts, :max_memory),
      max_cpu_seconds: Keyword.get(opts, :max_cpu_seconds),
      stack_size: Keyword.get(opts, :stack_size, @stack_size),
      max_script_threads: Keyword.get(opts, :max_script_threads, @max_script_threads),
      network: Keyword.get(opts, :network, false),
      require_confinement: Keyword.get(opts, :require_confinement, false),
      # host files its sessions need: mounts, image files (`Worker.Grants`)
      grants: MapSet.new(Keyword.get(opts, :grants, [])),
      # layers not to apply (tests of `:require_confinement`)
      without: Keyword.get(opts, :without, [])
    }
  end

  @doc false
  # The command line of a worker OS process with `settings/1`
  # (a worker's, or one made by `self_test/1`). `--max-memory` is the heap
  # the docs name: the worker adds its threads' stacks and slack itself.
  @spec worker_args(map()) :: [String.t()]
  def worker_args(state) do
    values =
      Enum.flat_map(
        [
          max_memory: state.max_memory,
          max_cpu_seconds: state.max_cpu_seconds,
          stack_size: state.stack_size,
          max_script_threads: state.max_script_threads
        ],
        fn
          {_key, nil} -> []
          {key, value} -> ["--" <> String.replace(Atom.to_string(key), "_", "-"), "#{value}"]
        end
      )

    flags =
      if(state.network, do: ["--network"], else: []) ++
        if(state.require_confinement, do: ["--require-confinement"], else: [])

    values ++
      flags ++
      Grants.args(state.grants) ++ Enum.flat_map(state.without, &["--without", to_string(&1)])
  end

  @doc false
  # Options: `:env`, the only variables it gets (`[{name, value}]`,
  # charlists); `:executable`, another of the package's executables.
  @spec open_port([String.t()], keyword()) :: port()
  def open_port(args, opts \\ []) do
    # Nothing of the VM's environment reaches the worker.
    env =
      for({name, _} <- System.get_env(), do: {String.to_charlist(name), false}) ++
        Keyword.get(opts, :env, [])

    Port.open({:spawn_executable, Keyword.get(opts, :executable, executable())}, [
      :binary,
      {:packet, 4},
      :exit_status,
      :use_stdio,
      {:args, args},
      {:cd, ~c"/"},
      {:env, env}
    ])
  end

  @doc """
  Start an OS process confined as the worker of a session with `new/1`
  options `opts` would be, and report what it could do from inside:
  `{:ok, report}`, each entry `:ok` (the attempt worked) or
  `{:denied, errno}` (it failed with that error):

    * `:open_host_file` - open a host file outside the mounts for reading;
    * `:open_host_dir` - open its host directory;
    * `:read_mount` - list the host directory of the first mount;
    * `:write_mount` - create a file in the first `:read_only` mount;
    * `:connect_loopback` - connect to a listening socket on 127.0.0.1
      (denied unless `opts` grant network, `:allow_net`);
    * `:exec_binary` - execute `/bin/sh`;
    * `:ptrace_parent` - attach a debugger to the VM.

  `opts` may have `:mounts` (as for `ExBashkit.Session.new/1`; without a
  `:read_only` one, a temporary directory stands for it) and `:allow_net`.
  `{:error, message}` if the process could not be started or said nothing.
  See `ExBashkit.Worker.SelfTest`.

  ## Examples

      {:ok, %{exec_binary: {:denied, :eperm}}} = ExBashkit.Worker.self_test([])
  """
  @spec self_test(keyword()) :: {:ok, ExBashkit.Worker.SelfTest.report()} | {:error, String.t()}
  defdelegate self_test(opts \\ []), to: ExBashkit.Worker.SelfTest, as: :run

  @doc false
  @spec executable() :: Path.t()
  def executable do
    Path.join(:code.priv_dir(:ex_bashkit), "native/ex_bashkit_worker")
  end

  # -- grants ---------------------------------------------------------------

  # Nothing is in flight and requests wait for grants the OS process lacks:
  # the sessions move to a new OS process started with them, rebuilt from
  # their recovery points as after a crash (nothing is lost: no call is in
  # flight, and a durable session's point is current at every answer),
  # then the waiting requests go on in order. Sessions that cannot be
  # rebuilt so keep their process, and the requests that needed more are
  # refused.
  defp move(%{queue: queue} = state) do
    state = %{state | queue: []}
    needed = Enum.flat_map(queue, fn {_, _, _, request, _} -> Grants.needed(request) end)
    missing = Grants.missing(state.grants, needed)
    refusal = if missing != [], do: immovable(state)

    state =
      cond do
        missing == [] or refusal != nil ->
          state

        true ->
          if state.os_pid, do: Native.kill_os_process(state.os_pid)
          if state.port, do: close_port(state.port)
          renew(%{state | grants: MapSet.union(state.grants, MapSet.new(missing))}, state.lost)
      end

    Enum.reduce(queue, state, fn {pid, ref, id, request, meta}, state ->
      if Grants.missing(state.grants, Grants.needed(request)) == [] do
        dispatch(state, pid, ref, id, request, meta)
      else
        send(pid, {:ex_bashkit_reply, ref, {:error, refusal}})
        state
      end
    end)
  end

  # Why the sessions here cannot move, or nil.
  defp immovable(state) do
    Enum.find_value(state.sessions, fn {sid, config} ->
      cond do
        not Recovery.recoverable?(config) ->
          "this worker process was not granted the host directory, and a session on it " <>
            "(durable: false, or over a :base image) cannot move to one that is; " <>
            "give the mount in new/1's :mounts"

        match?({:unrecoverable, _}, Map.get(state.points, sid)) ->
          "this worker process was not granted the host directory, and a session on it " <>
            "has no recovery point to move to one that is"

        true ->
          nil
      end
    end)
  end

  defp close_port(port) do
    Port.close(port)
  rescue
    ArgumentError -> :ok
  end

  # The worker is gone: answer everything in flight, then start a new one
  # and rebuild the sessions that lived there.
  defp crashed(state, why) do
    message =
      ExBashkit.Error.new(
        :crashed,
        "worker process crashed (#{why}); the exec in flight was lost"
      )

    busy =
      for {_id, route} <- state.routes, reduce: MapSet.new() do
        busy ->
          demonitor(route.mref)
          cancel_timer(route)

          case route.kind do
            :rebuild ->
              :ok

            # The points' commits stay roots through a crash.
            :history_roots ->
              send(route.pid, {:ex_bashkit_reply, route.ref, Recovery.roots(state.points)})

            _ ->
              send(route.pid, {:ex_bashkit_reply, route.ref, {:error, message}})
          end

          if route.sid, do: MapSet.put(busy, route.sid), else: busy
      end

    lost_message =
      lost(
        "session lost: its worker process crashed (#{why}) while the session was idle; ",
        "it was rebuilt from its new/1 configuration, so its state since then is gone"
      )

    lost =
      for {sid, _config} <- state.sessions,
          sid not in busy,
          error = loss(state, sid, why, lost_message),
          error != nil,
          into: state.lost,
          do: {sid, error}

    renew(state, lost)
  end

  # A new OS process for the sessions here (with `lost`, those whose state
  # did not survive), nothing in flight any more.
  defp renew(state, lost) do
    state = %{
      state
      | port: nil,
        os_pid: nil,
        generation: state.generation + 1,
        routes: %{},
        monitors: %{},
        overdue: %{},
        answering: %{},
        lost: lost,
        shipped: MapSet.new()
    }

    rebuild(state)
  end

  # What a session that was idle at a crash is told on its next call: nil
  # when it is rebuilt as it was (a durable session, from its recovery
  # point or, with none yet, its configuration).
  defp loss(state, sid, why, lost_message) do
    case {recoverable?(state, sid), Map.get(state.points, sid)} do
      {false, _} ->
        lost_message

      {true, {:unrecoverable, message}} ->
        lost(
          "session lost: its worker process crashed (#{why}) and it had no recovery point: ",
          message
        )

      {true, _point} ->
        nil
    end
  end

  defp rebuild(%{sessions: sessions} = state) when map_size(sessions) == 0, do: state

  defp rebuild(state) do
    case ensure_port(state) do
      {:ok, state} ->
        state = Enum.reduce(Map.values(state.images), state, &ship_image(&2, &1))

        Enum.reduce(state.sessions, state, fn {sid, config}, state ->
          id = System.unique_integer([:positive])

          route = %{
            pid: self(),
            ref: {:rebuild, sid},
            mref: nil,
            sid: sid,
            kind: :rebuild,
            timer: nil
          }

          state = %{state | routes: Map.put(state.routes, id, route)}
          state = send_frame(state, {:new, id, sid, config})
          recover(state, sid, route)
        end)

      {:error, message} ->
        error = lost("session lost: its worker process could not be restarted: ", message)
        lost = for {sid, _} <- state.sessions, into: state.lost, do: {sid, error}
        %{state | lost: lost}
    end
  end

  # Check a rebuilt durable session's recovery point out into it: ahead
  # of every call that comes after (a session's calls run in order).
  defp recover(state, sid, route) do
    with %{} = point <-
           Map.get(state.points, sid, Recovery.built(Map.has_key?(state.mounts, sid))),
         true <- recoverable?(state, sid) do
      id = System.unique_integer([:positive])

      case Recovery.recover_frame(point, id, sid, Map.get(state.mounts, sid)) do
        {:ok, frame} ->
          send_frame(%{state | routes: Map.put(state.routes, id, route)}, frame)

        {:error, message} ->
          error = lost("session lost: its recovery point is not in the store: ", message)
          %{state | lost: Map.put(state.lost, sid, error)}
      end
    else
      _ -> state
    end
  end

  # The error a lost session's next call gets: `prefix` and why.
  defp lost(prefix, %ExBashkit.Error{message: message}), do: lost(prefix, message)
  defp lost(prefix, why) when is_binary(why), do: ExBashkit.Error.new(:lost, prefix <> why)
end
