defmodule ExBashkit.Server.Checkpoints do
  @moduledoc """
  Where checkpointing `ExBashkit.Server`s keep their state: one table per
  node, owned by this process under ExBashkit's application supervisor, so
  that it outlives any server, `:kill`ed ones included.

  An entry is `{id, key, checkpoint}`, under the server's checkpoint id:

    * `{:live, session}` - the server's session itself, for a server that
      runs on the node of this table: the table keeps its handle alive, so
      the session outlives the server and its restart takes it back
      (`claim/1`). A crash of its interpreter is the session's own business
      (`durable:` in `ExBashkit.Session.new/1`). A session nobody claims
      within 5 s of its server's death is snapshotted
      and released: a supervisor restarts at once, and a server that is not
      restarted must not hold an OS process forever.
    * `{:snapshot, bytes}` - a keyed snapshot: of its last completed
      operation, for a server on another node than the one that started
      it (that node may go down with the session); or of an unclaimed
      session. `key` is the HMAC key it is sealed with (32 random bytes,
      made here).
    * `nil` - a key made, no snapshot stored yet.

  The snapshot functions take the *home* node of the entry: the node whose
  table holds it, the node of the process that started the server (its
  supervisor). Writes go through this process (the table is `:protected`);
  on another node they cross distribution.
  """

  use GenServer

  alias ExBashkit.Session

  @table __MODULE__
  @timeout 30_000
  # How long a kept session waits for its server's restart.
  @unclaimed_ms 5_000

  @doc "Start the store (one per node, registered as `#{inspect(__MODULE__)}`)."
  @spec start_link(term()) :: GenServer.on_start()
  def start_link(_arg), do: GenServer.start_link(__MODULE__, [], name: __MODULE__)

  @doc "Whether this node runs the store (the `:ex_bashkit` application is started)."
  @spec available?() :: boolean()
  def available?, do: Process.whereis(__MODULE__) != nil

  @doc """
  Keep `session` on this node as checkpoint `id` for the calling server,
  until `delete/2`.
  """
  @spec keep(term(), Session.t()) :: :ok
  def keep(id, %Session{} = session),
    do: GenServer.call(__MODULE__, {:keep, id, session}, @timeout)

  @doc """
  Checkpoint `id` of this node for the calling server, which keeps it from
  now on: the session a previous server kept, or the snapshot it became
  (`{:snapshot, key, bytes}`).
  """
  @spec claim(term()) :: {:ok, Session.t()} | {:snapshot, binary(), binary()} | :error
  def claim(id), do: GenServer.call(__MODULE__, {:claim, id}, @timeout)

  @doc """
  The HMAC key of checkpoint `id` on `home`, made on first use and kept until
  `delete/2`.
  """
  @spec key(node(), term()) :: binary()
  def key(home, id), do: GenServer.call({__MODULE__, home}, {:key, id}, @timeout)

  @doc "Store `bytes`, sealed with `key`, as the checkpoint `id` on `home`."
  @spec put(node(), term(), binary(), binary()) :: :ok
  def put(home, id, key, bytes) when is_binary(key) and is_binary(bytes),
    do: GenServer.call({__MODULE__, home}, {:put, id, key, {:snapshot, bytes}}, @timeout)

  @doc "The key and last snapshot of checkpoint `id` on `home`, or `:error`."
  @spec fetch(node(), term()) :: {:ok, {binary(), binary()}} | :error
  def fetch(home, id) when home == node() do
    case :ets.lookup(@table, id) do
      [{^id, key, {:snapshot, bytes}}] -> {:ok, {key, bytes}}
      _ -> :error
    end
  end

  def fetch(home, id), do: :erpc.call(home, __MODULE__, :fetch, [home, id], @timeout)

  @doc "Forget checkpoint `id` on `home` (a kept session is released)."
  @spec delete(node(), term()) :: :ok
  def delete(home, id), do: GenServer.call({__MODULE__, home}, {:delete, id}, @timeout)

  @impl true
  def init([]) do
    table = :ets.new(@table, [:named_table, :protected, :set, read_concurrency: true])
    # monitor => id of a kept session's server, and id => that monitor
    {:ok, %{table: table, keepers: %{}, kept: %{}}}
  end

  @impl true
  def handle_call({:key, id}, _from, state) do
    case :ets.lookup(state.table, id) do
      [{^id, key, _checkpoint}] when is_binary(key) ->
        {:reply, key, state}

      _ ->
        key = :crypto.strong_rand_bytes(32)
        :ets.insert(state.table, {id, key, nil})
        {:reply, key, state}
    end
  end

  def handle_call({:put, id, key, checkpoint}, _from, state) do
    :ets.insert(state.table, {id, key, checkpoint})
    {:reply, :ok, state}
  end

  def handle_call({:keep, id, session}, {server, _}, state) do
    :ets.insert(state.table, {id, nil, {:live, session}})
    {:reply, :ok, watch(forget(state, id), id, server)}
  end

  def handle_call({:claim, id}, {server, _}, state) do
    case :ets.lookup(state.table, id) do
      [{^id, _, {:live, session}}] ->
        {:reply, {:ok, session}, watch(forget(state, id), id, server)}

      [{^id, key, {:snapshot, bytes}}] ->
        {:reply, {:snapshot, key, bytes}, state}

      _ ->
        {:reply, :error, state}
    end
  end

  def handle_call({:delete, id}, _from, state) do
    :ets.delete(state.table, id)
    {:reply, :ok, forget(state, id)}
  end

  @impl true
  # A kept session's server died: its restart has until the timer to claim
  # the session.
  def handle_info({:DOWN, mon, :process, _, _}, %{keepers: keepers} = state)
      when is_map_key(keepers, mon) do
    Process.send_after(self(), {:unclaimed, mon}, @unclaimed_ms)
    {:noreply, state}
  end

  def handle_info({:unclaimed, mon}, %{keepers: keepers} = state)
      when is_map_key(keepers, mon) do
    id = Map.fetch!(keepers, mon)
    [{^id, _, {:live, session}}] = :ets.lookup(state.table, id)
    store = self()

    # Off this process: a snapshot takes as long as the session is large.
    spawn(fn ->
      key = :crypto.strong_rand_bytes(32)
      send(store, {:snapshotted, mon, key, Session.snapshot(session, key: key)})
    end)

    {:noreply, state}
  end

  def handle_info({:snapshotted, mon, key, result}, %{keepers: keepers} = state)
      when is_map_key(keepers, mon) do
    id = Map.fetch!(keepers, mon)

    case result do
      {:ok, bytes} -> :ets.insert(state.table, {id, key, {:snapshot, bytes}})
      {:error, _} -> :ets.delete(state.table, id)
    end

    {:noreply, forget(state, id)}
  end

  # A claim or delete came first.
  def handle_info(_stale, state), do: {:noreply, state}

  defp watch(state, id, server) do
    mon = Process.monitor(server)
    %{state | keepers: Map.put(state.keepers, mon, id), kept: Map.put(state.kept, id, mon)}
  end

  defp forget(state, id) do
    case Map.pop(state.kept, id) do
      {nil, _} ->
        state

      {mon, kept} ->
        Process.demonitor(mon, [:flush])
        %{state | keepers: Map.delete(state.keepers, mon), kept: kept}
    end
  end
end
