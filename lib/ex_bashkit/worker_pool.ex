defmodule ExBashkit.WorkerPool do
  @moduledoc """
  The worker OS processes of `isolation: :process`, supervised, and how a
  new session picks one.

  `config :ex_bashkit` keys, read when the application starts:

    * `:worker_pool_size` - how many shared workers run one-shot scripts
      (default: the number of online schedulers), spread round-robin.
      Sessions never live there (see below).
    * `:worker_max_memory` - how much heap each shared worker may use, in
      bytes (default 4 GiB), enforced as an address-space limit (this plus
      room for its thread stacks): past it, allocations fail and the worker
      dies, taking only its own in-flight execs with it. (A session's own
      process is capped by its `limits: [max_memory_bytes: n]`.) Workers also
      volunteer as the kernel's first choice when memory runs out. A limit
      the worker cannot set ends it at start (it never runs unconfined).
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

    * `:max_worker_processes` - how many worker processes sessions may
      hold at once (one per session without a `:group`, one per group;
      default 1 000; `process_count/0` says how many now). A session past
      it is refused: `ExBashkit.Session.new/1` raises `ArgumentError`
      saying `max_worker_processes` was reached. It never gets a seat
      beside another session or group.

  Each session lives on a worker OS process of its own, started for it
  (one already started and confined waits for the next session: its
  `new/1` does not pay the start) and stopped with it; its forks
  (`ExBashkit.Session.fork/2`) live there too. Sessions given a `:group`
  (see `ExBashkit.Session.new/1`) share a process of that group's own,
  started on the first such session and stopped with its last. A process
  is capped at its first session's `limits: [max_memory_bytes: n]`,
  default 512 MiB. A crash there costs that session (or group) only.

  Sessions granted network (`:allow_net`) live in the VM's network
  namespace; all others in a network namespace of their own, which reaches
  nothing. One-shot `ExBashkit.exec/2` scripts run on `:worker_pool_size`
  shared workers of their own (no network either), which hold no session:
  a crash there costs the other one-shots in flight on that process, and
  no session anything. `:worker_pool_size` also sizes the shared families
  `pick/1` answers from (sessions no longer live there).
  """

  use Supervisor

  alias ExBashkit.Worker
  alias ExBashkit.Worker.Grants
  alias ExBashkit.WorkerPool.Spares

  # Shared workers: sessions without network, sessions with, one-shots.
  @families [:offline, :network, :once]
  @registry ExBashkit.WorkerRegistry
  @own ExBashkit.OwnWorkers
  # The heap of a group's process when its first session gives no
  # `max_memory_bytes`: room for a session at its default filesystem quota
  # (100 MB of files, held once more while a snapshot is taken) and the
  # interpreter's working set, with headroom; a memory bomb (the jq crasher
  # of issue 67 reached 2.75 GB) is cut off at a fifth of that.
  @group_max_memory 512 * 1024 * 1024

  @doc false
  @spec start_link(keyword()) :: Supervisor.on_start()
  def start_link(opts \\ []), do: Supervisor.start_link(__MODULE__, opts, name: __MODULE__)

  @impl true
  def init(_opts) do
    size = Application.get_env(:ex_bashkit, :worker_pool_size, System.schedulers_online())

    worker_opts = worker_options()
    :persistent_term.put({__MODULE__, :size}, size)
    :persistent_term.put({__MODULE__, :next}, :atomics.new(1, []))

    shared =
      for family <- @families, i <- 1..size do
        {Worker, [name: name(family, i), network: family == :network] ++ worker_opts}
      end

    own = [
      {Registry, keys: :unique, name: @registry},
      # Room for the spares beside the bound (`Spares`).
      {DynamicSupervisor,
       name: @own, strategy: :one_for_one, max_children: max_worker_processes() + 2},
      Spares
    ]

    Supervisor.init(own ++ shared, strategy: :one_for_one)
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

  @doc false
  # The worker a new session of `group` (nil: none) with native
  # configuration `config` lives on: a process of the group's own, or of
  # the session's own without a group (the spare, when it has no
  # `max_memory_bytes` limit, no host mount and no base image: `Spares`). A
  # process started here is granted the session's host mounts and image
  # file (`ExBashkit.Worker.Grants`).
  @spec place(map(), term()) :: {:ok, GenServer.name()} | {:error, String.t()}
  def place(config, group) do
    memory = get_in(config, [:limits, :max_memory_bytes])
    grants = Grants.of_config(config)

    case group do
      nil -> own_worker({family(config), {:own, make_ref()}, memory}, grants)
      group -> own_worker({family(config), {:group, group}, memory}, grants)
    end
  end

  @doc false
  # The worker of a fork of the session on worker `name`: its parent's
  # process (the same tenant), or, if that has stopped, one as `place/2`
  # gives.
  @spec place_beside(GenServer.name(), map()) :: {:ok, GenServer.name()} | {:error, String.t()}
  def place_beside(name, config) do
    if GenServer.whereis(name), do: {:ok, name}, else: place(config, group({:process, name, 0}))
  end

  defp own_worker({family, _owner, memory} = key, grants) do
    if Process.whereis(@own) == nil, do: Application.ensure_all_started(:ex_bashkit)
    name = {:via, Registry, {@registry, key}}

    opts =
      Keyword.merge(worker_options(),
        network: family == :network,
        max_memory: memory || @group_max_memory,
        grants: grants,
        stop_when_idle: true
      )

    case GenServer.whereis(name) do
      pid when is_pid(pid) -> {:ok, name}
      nil -> start_own(key, name, opts)
    end
  end

  # Every process of a session or group is registered under its key: the
  # count is theirs (a spare waiting for its session is not counted).
  defp start_own({family, owner, memory}, name, opts) do
    if Registry.count(@registry) >= max_worker_processes() do
      {:error, max_reached()}
    else
      started =
        case {owner, memory, opts[:grants]} do
          {{:own, _}, nil, []} -> Spares.claim(family, name, opts, &start_worker/1)
          _ -> start_worker(Keyword.put(opts, :name, name))
        end

      case started do
        {:ok, _pid} -> {:ok, name}
        {:error, {:already_started, _pid}} -> {:ok, name}
        {:error, :max_children} -> {:error, max_reached()}
        {:error, reason} -> {:error, "cannot start a worker process: #{inspect(reason)}"}
      end
    end
  end

  # A named worker is restarted under its name if its owner process ever
  # fails; a spare (no name yet) is not: a restarted one would be nobody's.
  defp start_worker(opts) do
    restart = if opts[:name], do: :transient, else: :temporary
    DynamicSupervisor.start_child(@own, Supervisor.child_spec({Worker, opts}, restart: restart))
  end

  defp max_reached do
    "max_worker_processes (#{max_worker_processes()}) reached: no worker process for " <>
      "another session or group; raise config :ex_bashkit, :max_worker_processes, or end " <>
      "other sessions"
  end

  @doc """
  How many worker processes sessions hold of their own now (one per
  session without a `:group`, one per group): what
  `:max_worker_processes` bounds.
  """
  @spec process_count() :: non_neg_integer()
  def process_count do
    if Process.whereis(@registry), do: Registry.count(@registry), else: 0
  end

  @doc false
  # The `:group` of the session at `location` (nil without one).
  @spec group(ExBashkit.Backend.location()) :: term()
  def group({:process, {:via, Registry, {@registry, {_family, {:group, group}, _}}}, _sid}),
    do: group

  def group(_location), do: nil

  defp max_worker_processes,
    do: Application.get_env(:ex_bashkit, :max_worker_processes, 1_000)

  @doc """
  The worker a new session with native configuration `config` should live
  on: the next one of its family (see the moduledoc), round-robin. Returns
  `{:ok, name}`, or `{:error, message}` when the application (and so the
  pool) is not running.
  """
  @spec pick(map()) :: {:ok, atom()} | {:error, String.t()}
  def pick(config), do: pick_in(family(config))

  @doc """
  The worker a one-shot `ExBashkit.exec/2` script runs on: the next of the
  one-shot family, whose processes hold no session. Answers as `pick/1`.
  """
  @spec pick_once() :: {:ok, atom()} | {:error, String.t()}
  def pick_once, do: pick_in(:once)

  defp pick_in(family) do
    # Code loaded without its application (a bare `-pa` VM, a peer node)
    # still gets workers: start the application on first use.
    if :persistent_term.get({__MODULE__, :size}, nil) == nil,
      do: Application.ensure_all_started(:ex_bashkit)

    size = :persistent_term.get({__MODULE__, :size}, nil)

    if is_integer(size) do
      i = rem(:atomics.add_get(:persistent_term.get({__MODULE__, :next}), 1, 1), size) + 1
      {:ok, name(family, i)}
    else
      {:error,
       "no worker process: the :ex_bashkit application is not started " <>
         "(start it, or use isolation: :in_node)"}
    end
  end

  @doc "The registered names of the pool's shared workers, and the pids of the sessions' and groups' own."
  @spec workers() :: [atom() | pid()]
  def workers do
    size = :persistent_term.get({__MODULE__, :size}, 0)
    shared = for family <- @families, i <- 1..size//1, do: name(family, i)

    own =
      if Process.whereis(@own),
        do: for({_, pid, _, _} <- DynamicSupervisor.which_children(@own), is_pid(pid), do: pid),
        else: []

    shared ++ own
  end

  # Network is a grant of the process, not only of the interpreter: only
  # sessions that were granted some share the VM's network namespace.
  defp family(%{allow_all_net: true}), do: :network
  defp family(%{allow_net: [_ | _]}), do: :network
  defp family(_config), do: :offline

  defp name(:offline, i), do: :"Elixir.ExBashkit.Worker.#{i}"
  defp name(:network, i), do: :"Elixir.ExBashkit.Worker.Network.#{i}"
  defp name(:once, i), do: :"Elixir.ExBashkit.Worker.Once.#{i}"
end
