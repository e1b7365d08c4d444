defmodule ExBashkit.Store.Mnesia do
  @moduledoc """
  An `ExBashkit.Store` in OTP's Mnesia: a table replicated to the nodes you
  name, so that a session's history outlives the node that made it (check
  it out on another node).

  Options:

    * `:nodes` - the nodes holding a copy (default `[node()]`). Each must be
      connected and run Mnesia; the store's process starts Mnesia here,
      joins the others and creates the table, or adds a copy of it here.
    * `:table` - the table's name (default `:ex_bashkit_objects`).
    * `:copies` - `:ram_copies` (default) or `:disc_copies` (needs a disc
      schema, `:mnesia.create_schema/1`, made beforehand).

  Writes are Mnesia transactions: an object is on every copy or none.
  `ExBashkit.Store.gc/1` counts the sessions of every node in `:nodes`, and
  frees nothing while one of them cannot be asked. It waits for the
  commits of its own node only: a commit on another node at that very
  moment may lose objects (its later checkout then fails whole), so
  collect where the commits are, or rarely (`gc_every`).
  """

  @behaviour ExBashkit.Store
  use GenServer

  @wait_ms 30_000

  @impl ExBashkit.Store
  def child_spec(opts),
    do: %{id: {__MODULE__, table(opts)}, start: {__MODULE__, :start_link, [opts]}}

  @doc "Start Mnesia, join `:nodes` and make sure the table has a copy here."
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts)

  @impl GenServer
  def init(opts) do
    case ensure_table(opts) do
      :ok -> {:ok, opts}
      {:error, message} -> {:stop, message}
    end
  end

  defp table(opts), do: Keyword.get(opts, :table, :ex_bashkit_objects)

  @impl ExBashkit.Store
  def nodes(opts), do: Keyword.get(opts, :nodes, [node()])

  @doc false
  @spec ensure_table(keyword()) :: :ok | {:error, String.t()}
  def ensure_table(opts) do
    table = table(opts)
    copies = Keyword.get(opts, :copies, :ram_copies)
    others = nodes(opts) -- [node()]

    with :ok <- :mnesia.start(),
         {:ok, _} <- :mnesia.change_config(:extra_db_nodes, others),
         :ok <- create_or_copy(table, copies, nodes(opts)),
         :ok <- :mnesia.wait_for_tables([table], @wait_ms) do
      :ok
    else
      error ->
        {:error, "ExBashkit.Store.Mnesia: cannot set up #{inspect(table)}: #{inspect(error)}"}
    end
  end

  defp create_or_copy(table, copies, nodes) do
    case :mnesia.create_table(table, [{:attributes, [:id, :blob, :refs]}, {copies, nodes}]) do
      {:atomic, :ok} ->
        :ok

      {:aborted, {:already_exists, ^table}} ->
        case :mnesia.add_table_copy(table, node(), copies) do
          {:atomic, :ok} -> :ok
          {:aborted, {:already_exists, ^table, _node}} -> :ok
          other -> other
        end

      other ->
        other
    end
  end

  @impl ExBashkit.Store
  def put(opts, objects) do
    table = table(opts)

    case :mnesia.transaction(fn ->
           Enum.each(objects, fn {id, blob, refs} -> :mnesia.write({table, id, blob, refs}) end)
         end) do
      {:atomic, :ok} ->
        :ok

      {:aborted, reason} ->
        {:error, "cannot store objects in #{inspect(table)}: #{inspect(reason)}"}
    end
  end

  @impl ExBashkit.Store
  def get(opts, ids), do: lookup(opts, ids, 2)

  @impl ExBashkit.Store
  def refs(opts, ids), do: lookup(opts, ids, 3)

  defp lookup(opts, ids, field) do
    table = table(opts)

    for id <- ids,
        [record] <- [:mnesia.dirty_read(table, id)],
        into: %{},
        do: {id, elem(record, field)}
  end

  @impl ExBashkit.Store
  def has?(opts, id), do: :mnesia.dirty_read(table(opts), id) != []

  @impl ExBashkit.Store
  def delete(opts, ids) do
    table = table(opts)
    {:atomic, :ok} = :mnesia.transaction(fn -> Enum.each(ids, &:mnesia.delete({table, &1})) end)
    :ok
  end

  @impl ExBashkit.Store
  def ids(opts), do: :mnesia.dirty_all_keys(table(opts))

  @impl ExBashkit.Store
  def size(opts) do
    table = table(opts)
    blobs = :mnesia.dirty_select(table, [{{table, :_, :"$1", :_}, [], [{:byte_size, :"$1"}]}])
    %{objects: length(blobs), bytes: Enum.sum(blobs)}
  end
end
