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
      volunteer as the kernel's first choice when memory runs out.
    * `:worker_max_cpu_seconds` - CPU-time backstop of each worker process
      (default none).
    * `:worker_kill_grace_ms` - how long a script past its deadline (or
      cancelled) may keep running before its worker is killed
      (default 2 000).
    * `:require_confinement` - when `true`, a worker process that lacks a
      confinement layer (see `ExBashkit.Worker`, "Confinement") builds no
      session and runs no script: `ExBashkit.Session.new/1` raises and
      `ExBashkit.exec/2` answers `{:error, _}`, naming the missing layer
      (default `false`: a missing layer is only reported, by
      `ExBashkit.Session.info/1`).

  There are two families of workers, `:worker_pool_size` each, and each
  starts its OS process on first use: sessions granted network
  (`:allow_net`) live on workers that keep the VM's network namespace; all
  other sessions, and one-shot `ExBashkit.exec/2` scripts, live on workers
  in a network namespace of their own, which reaches nothing.
  """

  use Supervisor

  alias ExBashkit.Worker

  @doc false
  @spec start_link(keyword()) :: Supervisor.on_start()
  def start_link(opts \\ []), do: Supervisor.start_link(__MODULE__, opts, name: __MODULE__)

  @impl true
  def init(_opts) do
    size = Application.get_env(:ex_bashkit, :worker_pool_size, System.schedulers_online())

    worker_opts = worker_options()
    :persistent_term.put({__MODULE__, :size}, size)
    :persistent_term.put({__MODULE__, :next}, :atomics.new(1, []))

    children =
      for family <- [:offline, :network], i <- 1..size do
        {Worker, [name: name(family, i), network: family == :network] ++ worker_opts}
      end

    Supervisor.init(children, strategy: :one_for_one)
  end

  @doc false
  # The options of every worker, from `config :ex_bashkit` (also those of
  # the process `ExBashkit.Worker.self_test/1` starts).
  @spec worker_options() :: keyword()
  def worker_options do
    [
      grace_ms: Application.get_env(:ex_bashkit, :worker_kill_grace_ms, 2_000),
      max_memory: Application.get_env(:ex_bashkit, :worker_max_memory, 4 * 1024 ** 3),
      max_cpu_seconds: Application.get_env(:ex_bashkit, :worker_max_cpu_seconds),
      require_confinement: Application.get_env(:ex_bashkit, :require_confinement, false)
    ]
  end

  @doc """
  The worker a new session with native configuration `config` should live
  on: the next one of its family (see the moduledoc), round-robin. Returns
  `{:ok, name}`, or `{:error, message}` when the application (and so the
  pool) is not running.
  """
  @spec pick(map()) :: {:ok, atom()} | {:error, String.t()}
  def pick(config) do
    # Code loaded without its application (a bare `-pa` VM, a peer node)
    # still gets workers: start the application on first use.
    if :persistent_term.get({__MODULE__, :size}, nil) == nil,
      do: Application.ensure_all_started(:ex_bashkit)

    size = :persistent_term.get({__MODULE__, :size}, nil)

    if is_integer(size) do
      i = rem(:atomics.add_get(:persistent_term.get({__MODULE__, :next}), 1, 1), size) + 1
      {:ok, name(family(config), i)}
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
    for family <- [:offline, :network], i <- 1..size//1, do: name(family, i)
  end

  # Network is a grant of the process, not only of the interpreter: only
  # sessions that were granted some share the VM's network namespace.
  defp family(%{allow_all_net: true}), do: :network
  defp family(%{allow_net: [_ | _]}), do: :network
  defp family(_config), do: :offline

  defp name(:offline, i), do: :"Elixir.ExBashkit.Worker.#{i}"
  defp name(:network, i), do: :"Elixir.ExBashkit.Worker.Network.#{i}"
end
