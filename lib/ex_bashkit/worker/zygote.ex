defmodule ExBashkit.Worker.Zygote do
  @moduledoc false
  # The owner of the zygote: one worker OS process, started with the
  # application, that forks each session's process from itself
  # (`native/ex_bashkit/src/worker/zygote.rs`, which says why and how).
  #
  # `start/1` is how every worker OS process starts: forked by the zygote
  # where it runs, else from the executable (a kernel without what the
  # zygote needs, or the zygote restarting). A forked process's port reads
  # and writes the pipes the NIF made (`{:fd, read, write}`), so it sends
  # `{port, :eof}` where a started one sends `{port, {:exit_status, s}}`:
  # the zygote reaps it and tells its status here (`exit_status/1`).
  #
  # A port on descriptors does not close them when it closes, and a forked
  # process ends when its stdin closes: so this owner monitors each such
  # port and closes its two descriptors once it is gone, however it went
  # (closed, or its owner ended).

  use GenServer

  require Logger

  alias ExBashkit.{Native, Worker}

  @name_key {__MODULE__, :socket}
  # How long a status may take to follow the end of a forked process's
  # pipes (the zygote reaps it as it ends), and how many unclaimed ones
  # (processes stopped on purpose) are kept.
  @exit_wait_ms 2_000
  @kept_exits 256
  @start_wait_ms 5_000

  @doc false
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts, name: __MODULE__)

  @doc false
  # A worker OS process with `args`: `{port, os_pid, how}`, `how` being
  # `:forked` or `:started`. Raises as `Port.open/2` does if neither works.
  @spec start([String.t()]) :: {port(), non_neg_integer(), :forked | :started}
  def start(args) do
    with name when is_binary(name) <- :persistent_term.get(@name_key, nil),
         {:ok, {read, write, os_pid}} <- Native.zygote_spawn(name, args) do
      port =
        try do
          Port.open({:fd, read, write}, [:binary, {:packet, 4}, :eof])
        rescue
          error ->
            Native.zygote_release(read, write)
            reraise error, __STACKTRACE__
        end

      GenServer.cast(__MODULE__, {:forked, port, read, write})
      {port, os_pid, :forked}
    else
      _ ->
        port = Worker.open_port(args)
        {:os_pid, os_pid} = Port.info(port, :os_pid)
        {port, os_pid, :started}
    end
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
    {:ok, open(%{port: nil, exits: %{}, order: :queue.new(), waiting: %{}, pipes: %{}})}
  end

  # Start the zygote OS process; without one, worker processes start alone.
  defp open(state) do
    with {:unix, :linux} <- :os.type(),
         port = Worker.open_port(["--zygote", System.pid()]),
         {:ok, name} <- socket_name(port) do
      :persistent_term.put(@name_key, name)
      %{state | port: port}
    else
      why ->
        Logger.warning("ExBashkit: no zygote (#{inspect(why)}); worker processes start alone")
        %{state | port: nil}
    end
  end

  defp socket_name(port) do
    receive do
      {^port, {:data, frame}} ->
        case :erlang.binary_to_term(frame, [:safe]) do
          {:zygote, name} -> {:ok, name}
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
  def handle_cast({:forked, port, read, write}, state) do
    ref = :erlang.monitor(:port, port)
    {:noreply, put_in(state.pipes[ref], {read, write})}
  end

  @impl true
  def handle_info({:DOWN, ref, :port, _port, _reason}, state) do
    {{read, write}, pipes} = Map.pop(state.pipes, ref)
    Native.zygote_release(read, write)
    {:noreply, %{state | pipes: pipes}}
  end

  def handle_info({port, {:data, frame}}, %{port: port} = state) do
    {:exited, os_pid, status} = :erlang.binary_to_term(frame, [:safe])

    case Map.pop(state.waiting, os_pid) do
      {{from, timer}, waiting} ->
        Process.cancel_timer(timer)
        GenServer.reply(from, status)
        {:noreply, %{state | waiting: waiting}}

      {nil, _} ->
        {:noreply, keep_exit(state, os_pid, status)}
    end
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
    :persistent_term.erase(@name_key)
    Logger.warning("ExBashkit: the zygote ended (exit status #{status}); starting another")
    {:noreply, open(state)}
  end

  def handle_info(_other, state), do: {:noreply, state}

  @impl true
  def terminate(_reason, _state), do: :persistent_term.erase(@name_key)

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
