defmodule ExBashkit.Server.Checkpoints do
  @moduledoc """
  Where checkpointing `ExBashkit.Server`s keep their last state: one table
  per node, owned by this process under ExBashkit's application supervisor,
  so that it outlives any server, `:kill`ed ones included.

  An entry is `{id, key, bytes}`: the server's checkpoint id, the HMAC key
  its snapshots are sealed with (made here on first use, 32 random bytes),
  and the keyed snapshot of its last completed operation (`nil` before the
  first). Every function takes the *home* node of the entry: the node whose
  store holds it, which is the node of the process that started the server
  (its supervisor), so a checkpoint survives the loss of the server's node
  when the server runs elsewhere. Writes go through this process (the table
  is `:protected`); on another node they cross distribution.
  """

  use GenServer

  @table __MODULE__
  @timeout 30_000

  @doc "Start the store (one per node, registered as `#{inspect(__MODULE__)}`)."
  @spec start_link(term()) :: GenServer.on_start()
  def start_link(_arg), do: GenServer.start_link(__MODULE__, [], name: __MODULE__)

  @doc "Whether this node runs the store (the `:ex_bashkit` application is started)."
  @spec available?() :: boolean()
  def available?, do: Process.whereis(__MODULE__) != nil

  @doc """
  The HMAC key of checkpoint `id` on `home`, made on first use and kept until
  `delete/2`.
  """
  @spec key(node(), term()) :: binary()
  def key(home, id), do: GenServer.call({__MODULE__, home}, {:key, id}, @timeout)

  @doc "Store `bytes`, sealed with `key`, as the checkpoint `id` on `home`."
  @spec put(node(), term(), binary(), binary()) :: :ok
  def put(home, id, key, bytes) when is_binary(key) and is_binary(bytes),
    do: GenServer.call({__MODULE__, home}, {:put, id, key, bytes}, @timeout)

  @doc "The key and last snapshot of checkpoint `id` on `home`, or `:error`."
  @spec fetch(node(), term()) :: {:ok, {binary(), binary()}} | :error
  def fetch(home, id) when home == node() do
    case :ets.lookup(@table, id) do
      [{^id, key, bytes}] when is_binary(bytes) -> {:ok, {key, bytes}}
      _ -> :error
    end
  end

  def fetch(home, id), do: :erpc.call(home, __MODULE__, :fetch, [home, id], @timeout)

  @doc "Forget checkpoint `id` on `home`."
  @spec delete(node(), term()) :: :ok
  def delete(home, id), do: GenServer.call({__MODULE__, home}, {:delete, id}, @timeout)

  @impl true
  def init([]) do
    table = :ets.new(@table, [:named_table, :protected, :set, read_concurrency: true])
    {:ok, table}
  end

  @impl true
  def handle_call({:key, id}, _from, table) do
    case :ets.lookup(table, id) do
      [{^id, key, _bytes}] ->
        {:reply, key, table}

      [] ->
        key = :crypto.strong_rand_bytes(32)
        :ets.insert(table, {id, key, nil})
        {:reply, key, table}
    end
  end

  def handle_call({:put, id, key, bytes}, _from, table) do
    :ets.insert(table, {id, key, bytes})
    {:reply, :ok, table}
  end

  def handle_call({:delete, id}, _from, table) do
    :ets.delete(table, id)
    {:reply, :ok, table}
  end
end
