defmodule ExBashkit.Worker.Zygote do
  @moduledoc false
  # The owner of the zygote: one worker OS process, started with the
  # application, that forks each session's process from itself
  # (`native/ex_bashkit/src/worker/zygote.rs`, which says why and how).
  #
  # `start/1` is how every worker OS process starts: forked by the zygote
  # where it runs, else from the executable (not Linux, or the zygote
  # restarting). A forked process's port is opened on `ex_bashkit_spawn`,
  # a small executable that hands the port's pipes to the zygote's new
  # child and exits: the VM owns those pipes as for any port,
  # and they close with it. The port's exit status is the asker's, so the
  # zygote tells the child's pid and, when it ends, its status
  # (`exit_status/1`); both reach the callers through this process.

  use GenServer

  require Logger

  alias ExBashkit.Worker

  @socket_key {__MODULE__, :socket}
  @token_var ~c"EX_BASHKIT_ZYGOTE_TOKEN"
  # How long the zygote may take to name its socket or fork a child, and
  # a status to follow the end of a forked process's pipes (the zygote
  # reaps it as it ends).
  @start_wait_ms 5_000
  @exit_wait_ms 2_000
  # How many statuses nobody asked for (processes stopped on purpose) are kept.
  @kept_exits 256

  @doc false
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts, name: __MODULE__)

  @doc false
  # A worker OS process with `args`: `{port, os_pid, how}`, `how` being
  # `:forked` or `:started`. Raises as `Port.open/2` does if neither works.
  @spec start([String.t()]) :: {port(), non_neg_integer(), :forked | :started}
  def start(args) do
    with {name, token} <- :persistent_term.get(@socket_key, nil),
         owner when is_pid(owner) <- Process.whereis(__MODULE__),
         {:ok, started} <- fork(owner, name, token, args) do
      started
    else
      _ -> started(args)
    end
  end

  # The answer comes to an alias, dropped when the caller gives up: a late
  # one must not reach a worker owner that no longer waits for it.
  defp fork(owner, name, token, args) do
    port = Worker.open_port([name | args], executable: spawner(), env: [{@token_var, token}])
    {:os_pid, asker} = Port.info(port, :os_pid)
    reply_to = :erlang.alias()
    send(owner, {:await_fork, asker, reply_to})

    receive do
      {^reply_to, os_pid} ->
        :erlang.unalias(reply_to)
        {:ok, {port, os_pid, :forked}}

      {^port, {:exit_status, _}} ->
        gave_up(owner, asker, reply_to)
    after
      @start_wait_ms ->
        Port.close(port)
        gave_up(owner, asker, reply_to)
    end
  rescue
    # No `ex_bashkit_spawn` (a package built before it): start the worker.
    _ in [ErlangError, ArgumentError] -> :error
  end

  defp gave_up(owner, asker, reply_to) do
    :erlang.unalias(reply_to)
    send(owner, {:forget_fork, asker})
    :error
  end

  defp spawner, do: Path.join(:code.priv_dir(:ex_bashkit), "native/ex_bashkit_spawn")

  defp started(args) do
    port = Worker.open_port(args)
    {:os_pid, os_pid} = Port.info(port, :os_pid)
    {port, os_pid, :started}
  end

  @doc false
  # How forked process `os_pid` ended: its exit status (128 + the signal
  # for one killed), or nil if the zygote did not say within
  # `@exit_wait_ms`.
  @spec exit_status(non_neg_integer()) :: non_neg_integer() | nil
  def exit_status(os_pid) do
    GenServer.call(__MODULE__, {:exit_status, os_pid}, @exit_wait_ms + 1_000)
  catch
    :exit, _ -> nil
  end

  @impl true
  def init(_opts) do
    Process.flag(:trap_exit, true)

    state = %{
      port: nil,
      # asker's os pid => the child's, or `{:waiting, alias}` of its caller
      forks: %{},
      # child's os pid => {status, seq} not yet asked for, oldest first in `order`
      exits: %{},
      order: :queue.new(),
      # child's os pid => {from, timer}
      waiting: %{}
    }

    {:ok, open(state)}
  end

  # Start the zygote OS process; without one, worker processes start alone.
  defp open(state) do
    with {:unix, :linux} <- :os.type(),
         port = Worker.open_port(["--zygote"]),
         {:ok, socket} <- socket(port) do
      :persistent_term.put(@socket_key, socket)
      %{state | port: port}
    else
      why ->
        Logger.warning("ExBashkit: no zygote (#{inspect(why)}); worker processes start alone")
        %{state | port: nil}
    end
  end

  defp socket(port) do
    receive do
      {^port, {:data, frame}} ->
        case :erlang.binary_to_term(frame, [:safe]) do
          {:zygote, name, token} -> {:ok, {name, String.to_charlist(token)}}
          other -> {:error, other}
        end

      {^port, {:exit_status, status}} ->
        {:error, {:exit_status, status}}
    after
      @start_wait_ms -> {:error, :timeout}
    end
  end

  @impl true
  def handle_call({:exit_status, os_pid}, from, state) do
    case Map.pop(state.exits, os_pid) do
      {nil, _} ->
        timer = Process.send_after(self(), {:no_status, os_pid, from}, @exit_wait_ms)
        {:noreply, put_in(state.waiting[os_pid], {from, timer})}

      {{status, _seq}, exits} ->
        {:reply, status, %{state | exits: exits}}
    end
  end

  @impl true
  def handle_info({:await_fork, asker, reply_to}, state) do
    case Map.pop(state.forks, asker) do
      {os_pid, forks} when is_integer(os_pid) ->
        send(reply_to, {reply_to, os_pid})
        {:noreply, %{state | forks: forks}}

      {nil, forks} ->
        {:noreply, %{state | forks: Map.put(forks, asker, {:waiting, reply_to})}}
    end
  end

  def handle_info({:forget_fork, asker}, state),
    do: {:noreply, %{state | forks: Map.delete(state.forks, asker)}}

  def handle_info({port, {:data, frame}}, %{port: port} = state) do
    {:noreply, zygote_said(:erlang.binary_to_term(frame, [:safe]), state)}
  end

  def handle_info({:no_status, os_pid, from}, state) do
    case state.waiting do
      %{^os_pid => {^from, _}} ->
        GenServer.reply(from, nil)
        {:noreply, %{state | waiting: Map.delete(state.waiting, os_pid)}}

      _ ->
        {:noreply, state}
    end
  end

  # The zygote itself ended: processes it forked run on (their statuses
  # are lost: `exit_status/1` says nil); a new one starts.
  def handle_info({port, {:exit_status, status}}, %{port: port} = state) do
    :persistent_term.erase(@socket_key)
    Logger.warning("ExBashkit: the zygote ended (exit status #{status}); starting another")
    {:noreply, open(state)}
  end

  def handle_info(_other, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, _state), do: :persistent_term.erase(@socket_key)

  defp zygote_said({:forked, asker, os_pid}, state) do
    case Map.pop(state.forks, asker) do
      {{:waiting, reply_to}, forks} ->
        send(reply_to, {reply_to, os_pid})
        %{state | forks: forks}

      {nil, forks} ->
        %{state | forks: Map.put(forks, asker, os_pid)}
    end
  end

  defp zygote_said({:exited, os_pid, status}, state) do
    case Map.pop(state.waiting, os_pid) do
      {{from, timer}, waiting} ->
        Process.cancel_timer(timer)
        GenServer.reply(from, status)
        %{state | waiting: waiting}

      {nil, _} ->
        keep_exit(state, os_pid, status)
    end
  end

  # A status nobody asked for yet; the oldest go past `@kept_exits`.
  defp keep_exit(state, os_pid, status) do
    seq = System.unique_integer([:monotonic])
    exits = Map.put(state.exits, os_pid, {status, seq})
    order = :queue.in({os_pid, seq}, state.order)

    if :queue.len(order) > @kept_exits do
      {{:value, {old, old_seq}}, order} = :queue.out(order)

      exits =
        case exits do
          %{^old => {_, ^old_seq}} -> Map.delete(exits, old)
          _ -> exits
        end

      %{state | exits: exits, order: order}
    else
      %{state | exits: exits, order: order}
    end
  end
end
