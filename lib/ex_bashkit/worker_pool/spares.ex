defmodule ExBashkit.WorkerPool.Spares do
  @moduledoc false
  # One started, confined, idle worker OS process per network family,
  # waiting for the next session without a `:group`: `new/1` takes it
  # (`claim/2`) instead of paying a process start, and a replacement starts
  # at once, off the caller's path. A spare holds no session until it is
  # claimed, so it is never a seat beside a stranger; a claimed one serves
  # that session alone (and its forks) and stops with it.

  use GenServer

  alias ExBashkit.Worker

  @families [:offline, :network]

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts, name: __MODULE__)

  @doc false
  # A worker of `family`, registered under `name` (a `{:via, Registry, _}`
  # name), started with `opts`: the spare if there is one, else a fresh one.
  # `start` starts a worker under the pool's supervisor from its options.
  @spec claim(atom(), GenServer.name(), keyword(), (keyword() -> {:ok, pid()} | {:error, term()})) ::
          {:ok, pid()} | {:error, term()}
  def claim(family, name, opts, start) do
    spare =
      if Process.whereis(__MODULE__),
        do: GenServer.call(__MODULE__, {:take, family, opts, start}),
        else: nil

    case spare && Worker.claim(spare, name) do
      :ok -> {:ok, spare}
      # Gone between its hand-over and the claim: start one as if none.
      _ -> start.(Keyword.put(opts, :name, name))
    end
  end

  @impl true
  def init(_opts), do: {:ok, Map.new(@families, &{&1, nil})}

  @impl true
  def handle_call({:take, family, opts, start}, _from, spares) do
    spare = Map.get(spares, family)
    spare = if is_pid(spare) and Process.alive?(spare), do: spare, else: nil
    send(self(), {:replace, family, opts, start})
    {:reply, spare, Map.put(spares, family, nil)}
  end

  @impl true
  def handle_info({:replace, family, opts, start}, spares) do
    spares =
      case Map.get(spares, family) do
        nil ->
          case start.(Keyword.put(opts, :name, nil)) do
            {:ok, pid} ->
              # The OS process starts now, so that the claim finds it ready.
              send(pid, :warm)
              Map.put(spares, family, pid)

            {:error, _} ->
              spares
          end

        _ready ->
          spares
      end

    {:noreply, spares}
  end
end
