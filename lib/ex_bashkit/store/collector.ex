defmodule ExBashkit.Store.Collector do
  @moduledoc false
  # Runs `ExBashkit.Store.collect/1` on the configured store: every
  # `ExBashkit.Store.gc_every/0` commits of the node (told by `committed/0`)
  # and when asked (`gc/0`), one collection at a time.

  use GenServer

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

  @impl true
  def init(count), do: {:ok, count}

  @impl true
  def handle_cast(:committed, count) do
    if count + 1 >= ExBashkit.Store.gc_every() do
      ExBashkit.Store.collect(ExBashkit.Store.configured())
      {:noreply, 0}
    else
      {:noreply, count + 1}
    end
  end

  @impl true
  def handle_call(:gc, _from, _count),
    do: {:reply, ExBashkit.Store.collect(ExBashkit.Store.configured()), 0}
end
