defmodule ExBashkit.Store.Collector do
  @moduledoc false
  # Runs `ExBashkit.Store.collect/1` on the configured store: every
  # `ExBashkit.Store.gc_every/0` commits of the node (told by `committed/0`)
  # and when asked (`gc/0`), one collection at a time.
  #
  # A commit moves its session's head (a GC root) before its objects are
  # stored: a collection between the two would find a root it cannot walk
  # and sweep what only that root reaches. So commits and collections
  # exclude each other, through counters in an ETS table (`committing/1`
  # and `exclusive/1`): any number of commits at once, a collection only
  # when none is between its head and its last object.

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
  # Run `fun` (a commit: its head, then its objects) while no collection
  # runs. Without the collector (the application not started) it just runs.
  @spec committing((() -> result)) :: result when result: term()
  def committing(fun) do
    if :ets.whereis(@table) == :undefined do
      fun.()
    else
      enter()

      try do
        fun.()
      after
        :ets.update_counter(@table, :commits, -1)
      end
    end
  end

  defp enter do
    :ets.update_counter(@table, :commits, 1)

    if :ets.lookup_element(@table, :collecting, 2) == 1 do
      :ets.update_counter(@table, :commits, -1)
      Process.sleep(1)
      enter()
    else
      :ok
    end
  end

  # Run `fun` once no commit is under way, holding new ones back.
  defp exclusive(fun) do
    :ets.insert(@table, {:collecting, 1})

    try do
      wait_for_commits()
      fun.()
    after
      :ets.insert(@table, {:collecting, 0})
    end
  end

  defp wait_for_commits do
    if :ets.lookup_element(@table, :commits, 2) > 0 do
      Process.sleep(1)
      wait_for_commits()
    end
  end

  @impl true
  def init(count) do
    :ets.new(@table, [:named_table, :public, :set, write_concurrency: true])
    :ets.insert(@table, [{:commits, 0}, {:collecting, 0}])
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

  defp collect, do: exclusive(fn -> ExBashkit.Store.collect(ExBashkit.Store.configured()) end)
end
