defmodule ExBashkit.WorkerPool do
  @moduledoc """
  The worker OS processes of `isolation: :process`, supervised, and how a
  new session picks one.

  `config :ex_bashkit` keys, read when the application starts:

    * `:worker_pool_size` - how many worker processes (default: the number
      of online schedulers). Sessions are spread over them round-robin and
      stay on theirs for life; a worker serves many sessions.
    * `:worker_max_memory` - how much heap each worker may use, in bytes
      (default 4 GiB), enforced as an address-space limit (this plus room
      for its thread stacks): past it, allocations fail and the worker dies,
      taking only its own sessions' in-flight execs with it. Workers also
      volunteer as the kernel's first choice when memory runs out. A limit
      the worker cannot set ends it at start (it never runs unconfined).
    * `:worker_max_cpu_seconds` - CPU-time backstop of each worker process
      (default none).
    * `:worker_kill_grace_ms` - how long a script past its deadline (or
      cancelled) may keep running before its worker is killed
      (default 2 000).
  """

  use Supervisor

  alias ExBashkit.Worker

  @doc false
  @spec start_link(keyword()) :: Supervisor.on_start()
  def start_link(opts \\ []), do: Supervisor.start_link(__MODULE__, opts, name: __MODULE__)

  @impl true
  def init(_opts) do
    size = Application.get_env(:ex_bashkit, :worker_pool_size, System.schedulers_online())

    worker_opts = [
      grace_ms: Application.get_env(:ex_bashkit, :worker_kill_grace_ms, 2_000),
      max_memory: Application.get_env(:ex_bashkit, :worker_max_memory, 4 * 1024 ** 3),
      max_cpu_seconds: Application.get_env(:ex_bashkit, :worker_max_cpu_seconds)
    ]

    :persistent_term.put({__MODULE__, :size}, size)
    :persistent_term.put({__MODULE__, :next}, :atomics.new(1, []))
    children = for i <- 1..size, do: {Worker, [name: name(i)] ++ worker_opts}
    Supervisor.init(children, strategy: :one_for_one)
  end

  @doc """
  The worker a new session should live on: the next one, round-robin.
  Returns `{:ok, name}`, or `{:error, message}` when the application (and so
  the pool) is not running.
  """
  @spec pick() :: {:ok, atom()} | {:error, String.t()}
  def pick do
    # Code loaded without its application (a bare `-pa` VM, a peer node)
    # still gets workers: start the application on first use.
    if :persistent_term.get({__MODULE__, :size}, nil) == nil,
      do: Application.ensure_all_started(:ex_bashkit)

    size = :persistent_term.get({__MODULE__, :size}, nil)

    if is_integer(size) do
      i = rem(:atomics.add_get(:persistent_term.get({__MODULE__, :next}), 1, 1), size) + 1
      {:ok, name(i)}
    else
      {:error,
       "no worker process: the :ex_bashkit application is not started " <>
         "(start it, or use isolation: :in_node)"}
    end
  end

  @doc "The registered names of the pool's workers."
  @spec workers() :: [atom()]
  def workers do
    size = :persistent_term.get({__MODULE__, :size}, 0)
    for i <- 1..size//1, do: name(i)
  end

  defp name(i), do: :"Elixir.ExBashkit.Worker.#{i}"
end
