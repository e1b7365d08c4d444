defmodule ExBashkit.Test.HttpServer do
  @moduledoc false
  # The one plain-HTTP test server (the HTTPS one is `TlsHttpServer`): real
  # sockets on a loopback address, real requests from bashkit's HTTP client
  # or our download client, nothing mocked.
  #
  #     server = HttpServer.start!(routes: %{"/" => {200, [], "hello"}})
  #     server.url                      # "http://127.0.0.1:PORT"
  #     HttpServer.connections(server)  # TCP connections accepted so far
  #     HttpServer.requests(server)     # ["GET / HTTP/1.1", ...]
  #     HttpServer.heads(server)        # ["GET / HTTP/1.1\r\nhost: ...", ...]
  #     HttpServer.headers(server)      # [[{"host", "127.0.0.1:PORT"}, ...], ...]
  #
  # Answers come from `:routes` (`path => {status, headers, body}`, unknown
  # paths 404) or a `:handler` `(method, path) -> {status, headers, body}`
  # (or `(method, path, headers)`, to answer with what it was sent);
  # with neither, every path gets 200 `"served " <> path`. Every request is
  # also reported to the starting process as
  # `{:http_request, server_pid, method, path}`, for `assert_received`.
  #
  # Counting is exact, so "blocked" can mean "no TCP connection at all":
  # `connections/1` and `requests/1` first make a request of their own and
  # wait for its answer. The listen backlog is FIFO, so every connection
  # made before the call has been accepted, and recorded, by then. Their own
  # requests are not counted.
  #
  # Each connection answers one request and closes. The server is started
  # supervised by the test and stops with it.

  use GenServer

  @sync_path "/__ex_bashkit_test_sync__"

  @type route :: {pos_integer(), [{String.t(), String.t()}], iodata()}
  @type t :: %{pid: pid(), port: :inet.port_number(), ip: :inet.ip_address(), url: String.t()}

  @doc "Start a server for the calling test; `{:ok, server}` or `{:error, reason}`."
  @spec start(keyword()) :: {:ok, t()} | {:error, term()}
  def start(opts \\ []) do
    opts = Keyword.put(opts, :owner, self())

    case ExUnit.Callbacks.start_supervised({__MODULE__, opts}, id: make_ref()) do
      {:ok, pid} ->
        ip = Keyword.get(opts, :ip, {127, 0, 0, 1})
        port = GenServer.call(pid, :port)
        {:ok, %{pid: pid, port: port, ip: ip, url: "http://#{host(ip)}:#{port}"}}

      # The supervisor wraps the reason `init/1` stopped with.
      {:error, {reason, _child}} ->
        {:error, reason}

      {:error, reason} ->
        {:error, reason}
    end
  end

  @doc "`start/1`, raising when the server cannot listen."
  @spec start!(keyword()) :: t()
  def start!(opts \\ []) do
    case start(opts) do
      {:ok, server} -> server
      {:error, reason} -> raise "test HTTP server did not start: #{inspect(reason)}"
    end
  end

  @doc "How many TCP connections the server accepted before this call."
  @spec connections(t()) :: non_neg_integer()
  def connections(server) do
    sync!(server)
    GenServer.call(server.pid, :connections)
  end

  @doc "The request lines the server read before this call, in order."
  @spec requests(t()) :: [String.t()]
  def requests(server) do
    sync!(server)
    GenServer.call(server.pid, :requests)
  end

  @doc "The request heads (request line and headers) read before this call, in order."
  @spec heads(t()) :: [String.t()]
  def heads(server) do
    sync!(server)
    GenServer.call(server.pid, :heads)
  end

  @doc """
  The headers of each request read before this call, in order: `{name,
  value}` pairs, names lowercased, as they reached the server.
  """
  @spec headers(t()) :: [[{String.t(), String.t()}]]
  def headers(server) do
    for head <- heads(server), do: head |> String.split("\r\n") |> tl() |> header_fields()
  end

  @doc false
  def child_spec(opts) do
    %{id: __MODULE__, start: {__MODULE__, :start_link, [opts]}, restart: :temporary}
  end

  @doc false
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts)

  defp host({127, 0, 0, 1}), do: "127.0.0.1"
  defp host({0, 0, 0, 0, 0, 0, 0, 1}), do: "[::1]"

  defp sync!(%{ip: ip, port: port}) do
    {:ok, socket} = :gen_tcp.connect(ip, port, [:binary, active: false], 5_000)
    :ok = :gen_tcp.send(socket, "GET #{@sync_path} HTTP/1.0\r\n\r\n")
    {:ok, _response} = :gen_tcp.recv(socket, 0, 5_000)
    :gen_tcp.close(socket)
  end

  # -- server -----------------------------------------------------------------

  @impl true
  def init(opts) do
    ip = Keyword.get(opts, :ip, {127, 0, 0, 1})
    family = if tuple_size(ip) == 8, do: :inet6, else: :inet

    answer =
      case {Keyword.get(opts, :routes), Keyword.get(opts, :handler)} do
        {nil, nil} -> fn _method, path -> {200, [], "served " <> path} end
        {nil, handler} -> handler
        {routes, nil} -> fn _method, path -> Map.get(routes, path, {404, [], "not found"}) end
      end

    listen_opts = [family, :binary, ip: ip, active: false, packet: :raw, reuseaddr: true]

    case :gen_tcp.listen(0, listen_opts) do
      {:ok, listen} ->
        {:ok, port} = :inet.port(listen)
        server = self()
        owner = Keyword.fetch!(opts, :owner)
        spawn_link(fn -> accept_loop(listen, server, owner, answer) end)
        {:ok, %{listen: listen, port: port, connections: 0, syncs: 0, requests: [], heads: []}}

      {:error, reason} ->
        {:stop, reason}
    end
  end

  @impl true
  def handle_call(:port, _from, state), do: {:reply, state.port, state}

  # The sync connections of `connections/1` are not the test's.
  def handle_call(:connections, _from, state),
    do: {:reply, state.connections - state.syncs, state}

  def handle_call(:requests, _from, state), do: {:reply, Enum.reverse(state.requests), state}
  def handle_call(:heads, _from, state), do: {:reply, Enum.reverse(state.heads), state}

  # Recorded synchronously, before the connection is served: a client that
  # got an answer has been counted.
  def handle_call(:connection, _from, state),
    do: {:reply, :ok, %{state | connections: state.connections + 1}}

  def handle_call(:sync, _from, state), do: {:reply, :ok, %{state | syncs: state.syncs + 1}}

  def handle_call({:request, line, head}, _from, state),
    do: {:reply, :ok, %{state | requests: [line | state.requests], heads: [head | state.heads]}}

  defp accept_loop(listen, server, owner, answer) do
    case :gen_tcp.accept(listen) do
      {:ok, socket} ->
        :ok = GenServer.call(server, :connection)
        handler = spawn(fn -> serve(socket, server, owner, answer) end)
        :ok = :gen_tcp.controlling_process(socket, handler)
        send(handler, :go)
        accept_loop(listen, server, owner, answer)

      {:error, _} ->
        :ok
    end
  end

  # The request line is read raw, whatever it holds (an absolute URI, dot
  # segments, encoded bytes): a request that should never have been made is
  # recorded however odd it looks.
  defp serve(socket, server, owner, answer) do
    receive do
      :go -> :ok
    after
      5_000 -> :ok
    end

    with {:ok, head} <- read_head(socket, ""),
         [line | fields] <- String.split(head, "\r\n") do
      [method, path | _] = String.split(line, " ") ++ ["", ""]
      request_headers = header_fields(fields)
      answer = if is_function(answer, 3), do: &answer.(&1, &2, request_headers), else: answer
      {status, headers, body} = respond(server, owner, answer, head, method, path)
      body = IO.iodata_to_binary(body)

      head =
        Enum.map([{"content-length", "#{byte_size(body)}"}, {"connection", "close"} | headers], fn
          {k, v} -> [k, ": ", v, "\r\n"]
        end)

      :gen_tcp.send(socket, ["HTTP/1.1 #{status} X\r\n", head, "\r\n", body])
    end

    :gen_tcp.close(socket)
  end

  defp respond(server, _owner, _answer, _line, "GET", @sync_path) do
    :ok = GenServer.call(server, :sync)
    {200, [], ""}
  end

  defp respond(server, owner, answer, head, method, path) do
    [line | _] = String.split(head, "\r\n")
    :ok = GenServer.call(server, {:request, line, head})
    send(owner, {:http_request, server, method, path})
    answer.(method, path)
  end

  defp header_fields(fields) do
    for field <- fields,
        [name, value] <- [String.split(field, ":", parts: 2)],
        do: {String.downcase(name), String.trim(value)}
  end

  defp read_head(socket, acc) do
    if String.contains?(acc, "\r\n\r\n") do
      {:ok, acc}
    else
      case :gen_tcp.recv(socket, 0, 5_000) do
        {:ok, data} when byte_size(acc) < 65_536 -> read_head(socket, acc <> data)
        _ -> :error
      end
    end
  end
end
