defmodule ExBashkit.MCP.HTTP do
  @moduledoc """
  The Streamable HTTP transport's server process (what `ExBashkit.MCP`'s
  child spec starts): it owns the listening socket, an acceptor, a
  supervisor of connections (`ExBashkit.MCP.HTTP.Connection`, at most
  `:max_connections`) and one of MCP sessions (`ExBashkit.MCP.Session`,
  at most `:max_sessions`), and the table from `Mcp-Session-Id` to session.

  A session id is 144 random bits, URL-safe base 64. A session leaves the
  table when its process ends: on `DELETE`, after its idle TTL, or when
  the server stops.
  """

  use GenServer

  alias ExBashkit.MCP.HTTP.{Connection, Wire}
  alias ExBashkit.MCP.Protocol

  @defaults [
    port: 4040,
    ip: {127, 0, 0, 1},
    path: "/mcp",
    idle_ttl_ms: 15 * 60 * 1000,
    max_sessions: 100,
    max_connections: 256,
    max_request_bytes: 4 * 1024 * 1024,
    allowed_origins: [],
    history: false
  ]

  @doc false
  def defaults, do: @defaults

  @doc "Start the server linked to the caller (see `ExBashkit.MCP.start_link/1`)."
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts) do
    config = config!(opts)
    gen_opts = if name = Keyword.get(opts, :name), do: [name: name], else: []
    GenServer.start_link(__MODULE__, config, gen_opts)
  end

  @doc "The TCP port the server listens on."
  @spec port(GenServer.server()) :: :inet.port_number()
  def port(server), do: GenServer.call(server, :port)

  @doc "How many MCP sessions are open."
  @spec session_count(GenServer.server()) :: non_neg_integer()
  def session_count(server), do: GenServer.call(server, :session_count)

  @doc false
  # A new MCP session: `{:ok, id, pid}` or `{:error, :too_many_sessions}`.
  def new_session(server), do: GenServer.call(server, :new_session)

  @doc false
  # The session process of `id`, or `nil`.
  def lookup(table, id) do
    case :ets.lookup(table, id) do
      [{^id, pid}] -> pid
      [] -> nil
    end
  end

  # -- options ------------------------------------------------------------------

  defp config!(opts) do
    unless Keyword.keyword?(opts),
      do: raise(ArgumentError, "ExBashkit.MCP options must be a keyword list")

    opts = Keyword.merge(@defaults, opts)

    if Keyword.has_key?(opts, :pool) and Keyword.has_key?(opts, :session),
      do: raise(ArgumentError, "ExBashkit.MCP takes :session or :pool, not both")

    source =
      case Keyword.fetch(opts, :pool) do
        {:ok, pool} ->
          {:pool, pool}

        :error ->
          session = Keyword.get(opts, :session, [])
          # Built once here so that a bad option fails at start, not at
          # the first client's initialize.
          _ = ExBashkit.Session.new(session)
          {:session, session}
      end

    %{
      source: source,
      port: int!(opts, :port, 0..65_535),
      ip: ip!(opts[:ip]),
      path: path!(opts[:path]),
      idle_ttl_ms: ttl!(opts[:idle_ttl_ms]),
      max_sessions: int!(opts, :max_sessions, 1..1_000_000),
      max_connections: int!(opts, :max_connections, 1..1_000_000),
      max_request_bytes: int!(opts, :max_request_bytes, 1..(64 * 1024 * 1024)),
      allowed_origins: origins!(opts[:allowed_origins]),
      history: boolean!(opts, :history)
    }
  end

  defp int!(opts, key, range) do
    case opts[key] do
      n when is_integer(n) -> if n in range, do: n, else: bad!(key, n)
      other -> bad!(key, other)
    end
  end

  defp ip!(ip) when is_tuple(ip), do: ip

  defp ip!(ip) when is_binary(ip) do
    case :inet.parse_address(String.to_charlist(ip)) do
      {:ok, parsed} -> parsed
      {:error, _} -> bad!(:ip, ip)
    end
  end

  defp ip!(other), do: bad!(:ip, other)

  defp path!("/" <> _ = path), do: path
  defp path!(other), do: bad!(:path, other)

  defp ttl!(:infinity), do: :infinity
  defp ttl!(ms) when is_integer(ms) and ms > 0, do: ms
  defp ttl!(other), do: bad!(:idle_ttl_ms, other)

  defp boolean!(opts, key) do
    case opts[key] do
      flag when is_boolean(flag) -> flag
      other -> bad!(key, other)
    end
  end

  defp origins!(origins) when is_list(origins) do
    if Enum.all?(origins, &is_binary/1), do: origins, else: bad!(:allowed_origins, origins)
  end

  defp origins!(other), do: bad!(:allowed_origins, other)

  defp bad!(key, value),
    do: raise(ArgumentError, "ExBashkit.MCP option #{inspect(key)} is invalid: #{inspect(value)}")

  # -- the server ---------------------------------------------------------------

  @impl GenServer
  def init(config) do
    Process.flag(:trap_exit, true)

    listen_opts = [
      :binary,
      packet: :raw,
      active: false,
      reuseaddr: true,
      ip: config.ip,
      backlog: 128
    ]

    case :gen_tcp.listen(config.port, listen_opts) do
      {:ok, listen} ->
        {:ok, port} = :inet.port(listen)
        {:ok, sessions} = DynamicSupervisor.start_link(strategy: :one_for_one)
        {:ok, connections} = Task.Supervisor.start_link(max_children: config.max_connections)
        table = :ets.new(__MODULE__, [:set, :protected, read_concurrency: true])

        context = %{
          server: self(),
          table: table,
          path: config.path,
          max_request_bytes: config.max_request_bytes,
          allowed_origins: config.allowed_origins
        }

        acceptor = spawn_link(fn -> accept(listen, connections, context) end)

        {:ok,
         Map.merge(config, %{
           listen: listen,
           port: port,
           sessions: sessions,
           connections: connections,
           acceptor: acceptor,
           table: table,
           monitors: %{}
         })}

      {:error, reason} ->
        {:stop,
         "ExBashkit.MCP: cannot listen on port #{config.port}: #{:inet.format_error(reason)}"}
    end
  end

  @impl GenServer
  def handle_call(:port, _from, state), do: {:reply, state.port, state}

  def handle_call(:session_count, _from, state), do: {:reply, map_size(state.monitors), state}

  def handle_call(:new_session, _from, state) do
    if map_size(state.monitors) >= state.max_sessions do
      {:reply, {:error, :too_many_sessions}, state}
    else
      {:ok, pid} =
        DynamicSupervisor.start_child(
          state.sessions,
          {ExBashkit.MCP.Session,
           [state.source, idle_ttl_ms: state.idle_ttl_ms, history: state.history]}
        )

      id = Base.url_encode64(:crypto.strong_rand_bytes(18), padding: false)
      :ets.insert(state.table, {id, pid})
      monitor = Process.monitor(pid)
      {:reply, {:ok, id, pid}, %{state | monitors: Map.put(state.monitors, monitor, id)}}
    end
  end

  @impl GenServer
  def handle_info({:DOWN, monitor, :process, _pid, _reason}, state) do
    {id, monitors} = Map.pop(state.monitors, monitor)
    if id, do: :ets.delete(state.table, id)
    {:noreply, %{state | monitors: monitors}}
  end

  def handle_info({:EXIT, _pid, reason}, state) when reason not in [:normal, :shutdown],
    do: {:stop, reason, state}

  def handle_info(_other, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, state) do
    :gen_tcp.close(state.listen)

    for sup <- [state.connections, state.sessions] do
      Process.unlink(sup)
      Process.exit(sup, :shutdown)
    end

    :ok
  end

  # -- accepting ----------------------------------------------------------------

  defp accept(listen, connections, context) do
    case :gen_tcp.accept(listen) do
      {:ok, socket} ->
        hand_off(socket, connections, context)
        accept(listen, connections, context)

      {:error, :closed} ->
        :ok

      {:error, _transient} ->
        accept(listen, connections, context)
    end
  end

  defp hand_off(socket, connections, context) do
    case Task.Supervisor.start_child(connections, fn -> Connection.serve(context) end) do
      {:ok, pid} ->
        case :gen_tcp.controlling_process(socket, pid) do
          :ok -> send(pid, {:socket, socket})
          {:error, _} -> :gen_tcp.close(socket)
        end

      {:error, :max_children} ->
        body =
          ExBashkit.MCP.JSON.encode!(Protocol.error(nil, :internal_error, "too many connections"))

        headers = [{"content-type", "application/json"}, {"connection", "close"}]
        :gen_tcp.send(socket, Wire.response(503, headers, body))
        :gen_tcp.close(socket)
    end
  end
end
