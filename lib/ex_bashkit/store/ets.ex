defmodule ExBashkit.Store.ETS do
  @moduledoc """
  The default `ExBashkit.Store`: an ETS table in this node's memory, owned
  by a process under ExBashkit's application supervisor. Fast, and gone
  with the node (or a restart of that process).

  Option: `:name`, the table's (and its owner's) name, default
  `#{inspect(__MODULE__)}`.
  """

  @behaviour ExBashkit.Store
  use GenServer

  @impl ExBashkit.Store
  def child_spec(opts),
    do: %{id: {__MODULE__, table(opts)}, start: {__MODULE__, :start_link, [opts]}}

  @doc "Start the table's owner."
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts), do: GenServer.start_link(__MODULE__, table(opts), name: table(opts))

  defp table(opts), do: Keyword.get(opts, :name, __MODULE__)

  @impl GenServer
  def init(table) do
    :ets.new(table, [:named_table, :public, :set, read_concurrency: true, write_concurrency: true])

    {:ok, table}
  end

  @impl ExBashkit.Store
  def put(opts, objects) do
    :ets.insert(table(opts), objects)
    :ok
  end

  @impl ExBashkit.Store
  def get(opts, ids), do: lookup(opts, ids, 2)

  @impl ExBashkit.Store
  def refs(opts, ids), do: lookup(opts, ids, 3)

  defp lookup(opts, ids, field) do
    table = table(opts)

    for id <- ids,
        [record] <- [:ets.lookup(table, id)],
        into: %{},
        do: {id, elem(record, field - 1)}
  end

  @impl ExBashkit.Store
  def has?(opts, id), do: :ets.member(table(opts), id)

  @impl ExBashkit.Store
  def delete(opts, ids) do
    table = table(opts)
    Enum.each(ids, &:ets.delete(table, &1))
  end

  @impl ExBashkit.Store
  def ids(opts), do: :ets.select(table(opts), [{{:"$1", :_, :_}, [], [:"$1"]}])

  @impl ExBashkit.Store
  def size(opts) do
    table = table(opts)
    bytes = :ets.foldl(fn {_, blob, _}, sum -> sum + byte_size(blob) end, 0, table)
    %{objects: :ets.info(table, :size), bytes: bytes}
  end
end
