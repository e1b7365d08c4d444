defmodule ExBashkit.Store.Collector do
  @moduledoc false
  # Runs `ExBashkit.Store.collect/1` on the configured store: every
  # `ExBashkit.Store.gc_every/0` commits of the node (told by `committed/0`)
  # and when asked (`gc/0`), one collection at a time.
  #
  # A commit moves its session's head (a GC root) before its objects are
  # stored. A collection lists the store's ids first: a commit still under
  # way then may have stored objects that only its head, not stored yet,
  # reaches. So commits count themselves (`committing/1`), and a collection
  # that finds one under way right after its listing waits a little for it
  # and, if it is still there, frees nothing this time. A commit that starts
  # after the listing stores only objects the listing does not hold, or
  # ones its parent (a root) reaches. Commits never wait for a collection.

  use GenServer

  @table :ex_bashkit_store_lock

  @doc false
  @spec start_link(term()) :: GenServer.on_start()
  def start_link(_arg), do: GenServer.start_link(__MODULE__, 0, name: __MODULE__)

  @doc false
  # A commit stored its objects.
  @spec committed() :: :ok
  def committed, do: GenServer.cast(__MODULE__, :committed)

  @doc false
  @spec gc() :: {:ok, non_neg_integer()}
  def gc, do: GenServer.call(__MODULE__, :gc, :infinity)

  @doc false
  # Run `fun` (a commit: its head, then its objects), counted.
  @spec committing((() -> result)) :: result when result: term()
  def committing(fun) do
    if :ets.whereis(@table) == :undefined do
      fun.()
    else
      :ets.update_counter(@table, :commits, 1)

      try do
        fun.()
      after
        :ets.update_counter(@table, :commits, -1)
      end
    end
  end

  @doc false
  # Whether no commit is under way, waiting up to about 100 ms for one.
  @spec quiet?() :: boolean()
  def quiet?, do: quiet?(20)

  defp quiet?(tries) do
    cond do
      :ets.lookup_element(@table, :commits, 2) == 0 -> true
      tries == 0 -> false
      true -> Process.sleep(5) && quiet?(tries - 1)
    end
  end

  @impl true
  def init(count) do
    :ets.new(@table, [:named_table, :public, :set, write_concurrency: true])
    :ets.insert(@table, {:commits, 0})
    {:ok, count}
  end

  @impl true
  def handle_cast(:committed, count) do
    if count + 1 >= ExBashkit.Store.gc_every() do
      collect()
      {:noreply, 0}
    else
      {:noreply, count + 1}
    end
  end

  @impl true
  def handle_call(:gc, _from, _count), do: {:reply, collect(), 0}

  defp collect, do: ExBashkit.Store.collect(ExBashkit.Store.configured(), &quiet?/0)
end
