defmodule ExBashkit.Pool do
  @moduledoc """
  Pre-built sessions for stateless work, and a bound on how much runs at
  once.

      children = [
        {ExBashkit.Pool, name: MyApp.Sandbox, size: 8, max_queue: 100,
         session: [limits: [timeout_ms: 5_000]], idle_ttl_ms: 60_000}
      ]

      {:ok, result} = ExBashkit.Pool.exec(MyApp.Sandbox, "echo hi | tr a-z A-Z")

  The pool holds up to `:size` slots. A slot is taken by:

    * `exec/3` - runs a script on a pooled session (built from the
      `:session` options of `ExBashkit.Session.new/1`), in the caller's
      process, and returns its result;
    * `checkout/2` - hands one pooled session to a function for exclusive
      use and returns the function's value;
    * `run/2` - a bare permit: the function runs with no session, the pool
      only bounds how many run at once.

  A session is reset to the state its options built (`ExBashkit.Session.reset/1`)
  before anyone else gets it: no variable, cwd, function or file leaks from
  one caller to the next. When all slots are taken, callers wait in FIFO
  order; past `:max_queue` waiting callers, a call returns
  `{:error, :overloaded}` at once. A slot is freed when its holder returns,
  raises, or dies: a caller killed mid-exec has its script cancelled and its
  session reset before reuse. A process holds at most one slot of a pool at
  a time; asking for a second one raises (it would wait for itself).

  Sessions are built when the pool starts, rebuilt on demand, and dropped
  after `:idle_ttl_ms` unused.

  ## Compatibility

  Code written for the `ExBashkit.Pool` of the other `ex_bashkit` package
  runs unchanged: `run(pool \\\\ ExBashkit.Pool, fun)`,
  `exec(pool \\\\ ExBashkit.Pool, script)` and
  `session_exec(pool \\\\ ExBashkit.Pool, session, script)`; the default name
  is `ExBashkit.Pool`, and `:size` / `:max_queue` default to
  `config :ex_bashkit, pool_size: n, pool_max_queue: m` (then to
  `System.schedulers_online/0` and 50). As there, the pool is not started
  for you: add it to your supervision tree.
  """

  use GenServer

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Session.Credentials

  @default_max_queue 50

  @typedoc "A pool: its pid or name."
  @type pool :: GenServer.server()

  @typedoc "An option of `start_link/1`."
  @type option ::
          {:name, GenServer.name() | nil}
          | {:size, pos_integer()}
          | {:max_queue, non_neg_integer()}
          | {:session, [Session.option()]}
          | {:idle_ttl_ms, pos_integer() | :infinity}

  # -- starting ---------------------------------------------------------------

  @doc """
  A child spec for `opts` (see `start_link/1`), with `id: {ExBashkit.Pool, name}`.
  """
  @spec child_spec([option()]) :: Supervisor.child_spec()
  def child_spec(opts \\ []) when is_list(opts) do
    # The supervisor keeps (and reports) the spec: `:credentials` sealed.
    opts = seal_session(opts)

    %{
      id: {__MODULE__, Keyword.get(opts, :name, __MODULE__)},
      start: {__MODULE__, :start_link, [opts]},
      type: :worker
    }
  end

  @doc """
  Start a pool linked to the caller.

  Options:

    * `:name` - a `GenServer` name (default `ExBashkit.Pool`; `nil` for none).
    * `:size` - how many slots (default `config :ex_bashkit, :pool_size`,
      else `System.schedulers_online/0`).
    * `:max_queue` - how many callers may wait for a slot (default
      `config :ex_bashkit, :pool_max_queue`, else #{@default_max_queue}).
    * `:session` - the `ExBashkit.Session.new/1` options of pooled sessions
      (default `[]`). Unless they name a `:group`, the pool's sessions form a
      group of their own: in worker mode they share worker processes that no
      session outside the pool uses.
    * `:idle_ttl_ms` - drop a session unused this long (default `:infinity`);
      a later caller gets a freshly built one.

  Malformed options raise `ArgumentError` in the caller, session options
  included (one session is built here to check them).

  ## Examples

      iex> {:ok, pool} = ExBashkit.Pool.start_link(name: nil, size: 2, session: [env: [A: "1"]])
      iex> {:ok, result} = ExBashkit.Pool.exec(pool, "echo $A")
      iex> result.stdout
      "1\\n"
  """
  @spec start_link([option()]) :: GenServer.on_start()
  def start_link(opts \\ []) when is_list(opts) do
    # Kept in the pool's state for the sessions it builds later.
    config = opts |> seal_session() |> config!()
    first = Session.new(config.session)
    gen_opts = if config.name, do: [name: config.name], else: []
    GenServer.start_link(__MODULE__, {config, first}, gen_opts)
  end

  defp seal_session(opts) do
    case List.keyfind(opts, :session, 0) do
      {:session, session} when is_list(session) ->
        List.keyreplace(opts, :session, 0, {:session, Credentials.seal_option(session)})

      _ ->
        opts
    end
  end

  defp config!(opts) do
    known = [:name, :size, :max_queue, :session, :idle_ttl_ms]

    for {key, _} <- opts, key not in known do
      raise ArgumentError,
            "unknown ExBashkit.Pool option #{inspect(key)}; known: #{inspect(known)}"
    end

    size =
      opts[:size] || Application.get_env(:ex_bashkit, :pool_size) || System.schedulers_online()

    max_queue =
      opts[:max_queue] || Application.get_env(:ex_bashkit, :pool_max_queue) ||
        @default_max_queue

    ttl = Keyword.get(opts, :idle_ttl_ms, :infinity)
    session = Keyword.get(opts, :session, [])

    check!(is_integer(size) and size > 0, :size, "a positive integer", size)

    check!(
      is_integer(max_queue) and max_queue >= 0,
      :max_queue,
      "a non-negative integer",
      max_queue
    )

    check!(
      ttl == :infinity or (is_integer(ttl) and ttl > 0),
      :idle_ttl_ms,
      "a positive integer or :infinity",
      ttl
    )

    check!(
      is_list(session),
      :session,
      "a keyword list of ExBashkit.Session.new/1 options",
      session
    )

    %{
      name: Keyword.get(opts, :name, __MODULE__),
      size: size,
      max_queue: max_queue,
      # The pool's sessions are one tenant's: they share worker processes
      # of their own (`ExBashkit.Session.new/1`'s `:group`).
      session: Keyword.put_new(session, :group, {__MODULE__, make_ref()}),
      ttl: ttl
    }
  end

  defp check!(true, _key, _what, _value), do: :ok

  defp check!(false, key, what, value),
    do:
      raise(
        ArgumentError,
        "ExBashkit.Pool option #{inspect(key)} must be #{what}, got: #{inspect(value)}"
      )

  # -- the API ------------------------------------------------------------------

  @doc """
  Run `script` on a pooled session of the default pool, `ExBashkit.Pool`
  (same as `exec(ExBashkit.Pool, script, [])`).
  """
  @spec exec(String.t()) :: {:ok, Result.t()} | {:error, String.t() | :overloaded}
  def exec(script) when is_binary(script), do: exec(__MODULE__, script, [])

  @doc """
  Run `script` on a pooled session: the options and results of
  `ExBashkit.Session.exec/3`, or `{:error, :overloaded}` at once when every
  slot is taken and `:max_queue` callers already wait. The script runs in the
  caller's process; the session is reset before it is handed out again.

  ## Examples

      iex> {:ok, pool} = ExBashkit.Pool.start_link(name: nil, size: 1)
      iex> {:ok, _} = ExBashkit.Pool.exec(pool, "export LEAK=1; echo x > /f")
      iex> {:ok, result} = ExBashkit.Pool.exec(pool, "echo [$LEAK]; test -e /f || echo no file")
      iex> result.stdout
      "[]\\nno file\\n"
  """
  @spec exec(pool(), String.t(), [Session.exec_option()]) ::
          {:ok, Result.t()} | {:error, String.t() | :overloaded}
  def exec(pool, script, opts \\ []) when is_binary(script) and is_list(opts) do
    checkout(pool, &Session.exec(&1, script, opts))
  end

  @doc """
  Like `exec/3`, but returns the result or raises `ExBashkit.Error`: the
  error of `ExBashkit.Session.run/3`, or `reason: :overloaded` when the pool
  turned the call away.

  ## Examples

      iex> {:ok, pool} = ExBashkit.Pool.start_link(name: nil, size: 1)
      iex> ExBashkit.Pool.exec!(pool, "echo hi").stdout
      "hi\\n"
  """
  @spec exec!(pool(), String.t(), [Session.exec_option()]) :: Result.t()
  def exec!(pool, script, opts \\ []) when is_binary(script) and is_list(opts) do
    case checkout(pool, &Session.run(&1, script, opts)) do
      {:ok, result} ->
        result

      {:error, :overloaded} ->
        raise ExBashkit.Error.new(
                :overloaded,
                "pool overloaded: every session is busy and :max_queue callers already wait"
              )

      {:error, error} ->
        raise error
    end
  end

  @doc """
  Give `fun` exclusive use of one pooled session and return `fun`'s value
  (or `{:error, :overloaded}`). The session is reset when `fun` returns or
  raises, before anyone else gets it; do not keep it past `fun`.

  ## Examples

      iex> {:ok, pool} = ExBashkit.Pool.start_link(name: nil, size: 1)
      iex> ExBashkit.Pool.checkout(pool, fn session ->
      ...>   {:ok, _} = ExBashkit.Session.exec(session, "cd /tmp")
      ...>   {:ok, result} = ExBashkit.Session.exec(session, "pwd")
      ...>   result.stdout
      ...> end)
      "/tmp\\n"
  """
  @spec checkout(pool(), (Session.t() -> result)) :: result | {:error, :overloaded}
        when result: term()
  def checkout(pool, fun) when is_function(fun, 1) do
    case acquire(pool, :session) do
      {:ok, session} ->
        try do
          fun.(session)
        after
          clean = Session.reset(session) == :ok
          GenServer.cast(pool, {:release, self(), clean})
        end

      {:error, :overloaded} = error ->
        error
    end
  end

  @doc """
  Run `fun` (0-arity) under a permit of `pool` and return its value, or
  `{:error, :overloaded}`: at most `:size` funs run at once, the others wait
  in FIFO order. The permit is freed when `fun` returns or raises, or when
  the caller dies.

  ## Examples

      iex> {:ok, pool} = ExBashkit.Pool.start_link(name: nil, size: 1)
      iex> ExBashkit.Pool.run(pool, fn -> :done end)
      :done
  """
  @spec run(pool(), (() -> result)) :: result | {:error, :overloaded} when result: term()
  def run(pool \\ __MODULE__, fun) when is_function(fun, 0) do
    case acquire(pool, :permit) do
      {:ok, :permit} ->
        try do
          fun.()
        after
          GenServer.cast(pool, {:release, self(), true})
        end

      {:error, :overloaded} = error ->
        error
    end
  end

  @doc """
  Run `script` on `session` (yours, not a pooled one) under a permit of
  `pool`: `run(pool, fn -> ExBashkit.Session.exec(session, script) end)`.

  ## Examples

      iex> {:ok, pool} = ExBashkit.Pool.start_link(name: nil, size: 1)
      iex> session = ExBashkit.Session.new()
      iex> {:ok, _} = ExBashkit.Pool.session_exec(pool, session, "x=5")
      iex> {:ok, %ExBashkit.Result{stdout: "5\\n"}} = ExBashkit.Session.exec(session, "echo $x")
  """
  @spec session_exec(pool(), Session.t(), String.t()) ::
          {:ok, Result.t()} | {:error, String.t() | :overloaded}
  def session_exec(pool \\ __MODULE__, session, script) when is_binary(script),
    do: run(pool, fn -> Session.exec(session, script) end)

  @doc """
  What the pool holds now: `%{size:, busy:, idle:, waiting:}` (`busy` counts
  slots in use, sessions being cleaned after a dead caller included).

  ## Examples

      iex> {:ok, pool} = ExBashkit.Pool.start_link(name: nil, size: 3)
      iex> ExBashkit.Pool.stats(pool)
      %{size: 3, busy: 0, idle: 3, waiting: 0}
  """
  @spec stats(pool()) :: %{
          size: pos_integer(),
          busy: non_neg_integer(),
          idle: non_neg_integer(),
          waiting: non_neg_integer()
        }
  def stats(pool), do: GenServer.call(pool, :stats)

  defp acquire(pool, kind) do
    case GenServer.call(pool, {:acquire, kind}, :infinity) do
      {:error, :reentrant} ->
        raise RuntimeError,
              "ExBashkit.Pool: this process already holds a slot of #{inspect(pool)}; " <>
                "a nested call would wait for a slot only it can free. " <>
                "Run nested work on another pool, or outside the pool."

      reply ->
        reply
    end
  end

  # -- the process ----------------------------------------------------------------
  #
  # `leases`: holder pid => {monitor, session | :permit}, one per process.
  # `idle`: [{session, idle_since_ms}], most recently used first.
  # `cleaning`: sessions being cancelled and reset after their holder died;
  # they still take a slot. `waiting`: FIFO of {from, pid, monitor, kind}.

  @impl true
  def init({config, first}) do
    now = now()
    idle = [{first, now} | for(_ <- 2..config.size//1, do: {Session.new(config.session), now})]

    state = %{
      config: config,
      idle: idle,
      leases: %{},
      cleaning: 0,
      waiting: :queue.new(),
      timer: nil
    }

    {:ok, schedule_expiry(state)}
  end

  @impl true
  def handle_call({:acquire, kind}, {pid, _} = from, state) do
    cond do
      Map.has_key?(state.leases, pid) ->
        {:reply, {:error, :reentrant}, state}

      busy(state) < state.config.size ->
        {reply, state} = grant(pid, kind, state)
        {:reply, reply, state}

      :queue.len(state.waiting) < state.config.max_queue ->
        entry = {from, pid, Process.monitor(pid), kind}
        {:noreply, %{state | waiting: :queue.in(entry, state.waiting)}}

      true ->
        {:reply, {:error, :overloaded}, state}
    end
  end

  def handle_call(:stats, _from, state) do
    stats = %{
      size: state.config.size,
      busy: busy(state),
      idle: length(state.idle),
      waiting: :queue.len(state.waiting)
    }

    {:reply, stats, state}
  end

  @impl true
  def handle_cast({:release, pid, clean}, state) do
    case Map.pop(state.leases, pid) do
      {nil, _} ->
        {:noreply, state}

      {{mon, lease}, leases} ->
        Process.demonitor(mon, [:flush])
        state = %{state | leases: leases}
        state = if clean, do: put_idle(lease, state), else: state
        {:noreply, promote(state)}
    end
  end

  @impl true
  def handle_info({:DOWN, mon, :process, pid, _reason}, state) do
    case Map.pop(state.leases, pid) do
      {{^mon, :permit}, leases} ->
        {:noreply, promote(%{state | leases: leases})}

      # The holder died with the session, maybe mid-exec: stop its script and
      # reset it away from the pool process (a reset waits for the script).
      {{^mon, session}, leases} ->
        pool = self()

        spawn(fn ->
          Session.cancel(session)
          send(pool, {:cleaned, session, Session.reset(session) == :ok})
        end)

        {:noreply, %{state | leases: leases, cleaning: state.cleaning + 1}}

      _ ->
        waiting = :queue.filter(fn {_, _, m, _} -> m != mon end, state.waiting)
        {:noreply, %{state | waiting: waiting}}
    end
  end

  def handle_info({:cleaned, session, clean}, state) do
    state = %{state | cleaning: state.cleaning - 1}
    state = if clean, do: put_idle(session, state), else: state
    {:noreply, promote(state)}
  end

  def handle_info(:expire, state) do
    cutoff = now() - state.config.ttl
    idle = Enum.filter(state.idle, fn {_, since} -> since > cutoff end)
    {:noreply, schedule_expiry(%{state | idle: idle, timer: nil})}
  end

  def handle_info(_other, state), do: {:noreply, state}

  defp busy(state), do: map_size(state.leases) + state.cleaning

  defp grant(pid, :permit, state) do
    lease(pid, :permit, state)
  end

  defp grant(pid, :session, %{idle: [{session, _} | idle]} = state),
    do: lease(pid, session, %{state | idle: idle})

  defp grant(pid, :session, %{idle: []} = state),
    do: lease(pid, Session.new(state.config.session), state)

  defp lease(pid, what, state) do
    leases = Map.put(state.leases, pid, {Process.monitor(pid), what})
    {{:ok, what}, %{state | leases: leases}}
  end

  defp put_idle(:permit, state), do: state

  defp put_idle(session, state),
    do: schedule_expiry(%{state | idle: [{session, now()} | state.idle]})

  # Hand freed slots to waiting callers, first come first served.
  defp promote(state) do
    with true <- busy(state) < state.config.size,
         {{:value, {from, pid, mon, kind}}, waiting} <- :queue.out(state.waiting) do
      Process.demonitor(mon, [:flush])
      {reply, state} = grant(pid, kind, %{state | waiting: waiting})
      GenServer.reply(from, reply)
      promote(state)
    else
      _ -> state
    end
  end

  # One timer at a time, due when the oldest idle session expires.
  defp schedule_expiry(%{config: %{ttl: :infinity}} = state), do: state
  defp schedule_expiry(%{timer: ref} = state) when is_reference(ref), do: state
  defp schedule_expiry(%{idle: []} = state), do: state

  defp schedule_expiry(state) do
    {_, oldest} = List.last(state.idle)
    due = max(oldest + state.config.ttl - now(), 0)
    %{state | timer: Process.send_after(self(), :expire, due)}
  end

  defp now, do: System.monotonic_time(:millisecond)
end
