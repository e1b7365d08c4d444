defmodule ExBashkit.Test.LoopbackHttp do
  @moduledoc false
  # A tiny HTTP/1.1 server on a loopback address, for network tests.
  #
  # It serves a fixed route table and records every connection it accepts and
  # every request line it reads, so a test can prove that a blocked request
  # never reached the socket (no connection at all), not merely that the
  # script saw an error.
  #
  #     {:ok, server} = HttpServer.start(routes: %{"/" => {200, [], "hello"}})
  #     HttpServer.port(server)
  #     HttpServer.connections(server)   # accepted TCP connections so far
  #     HttpServer.requests(server)      # ["GET /", ...]
  #
  # A route is `{status, headers, body}`; unknown paths get 404.

  use GenServer

  @type route :: {pos_integer(), [{String.t(), String.t()}], iodata()}

  @spec start(keyword()) :: {:ok, pid()} | {:error, term()}
  def start(opts) do
    GenServer.start(__MODULE__, opts)
  end

  @spec port(pid()) :: :inet.port_number()
  def port(server), do: GenServer.call(server, :port)

  @spec connections(pid()) :: non_neg_integer()
  def connections(server), do: GenServer.call(server, :connections)

  @spec requests(pid()) :: [String.t()]
  def requests(server), do: GenServer.call(server, :requests)

  @spec stop(pid()) :: :ok
  def stop(server), do: GenServer.stop(server)

  @impl true
  def init(opts) do
    ip = Keyword.get(opts, :ip, {127, 0, 0, 1})
    family = if tuple_size(ip) == 8, do: :inet6, else: :inet
    routes = Keyword.get(opts, :routes, %{})

    case :gen_tcp.listen(Keyword.get(opts, :port, 0), [
           family,
           :binary,
           ip: ip,
           active: false,
           packet: :raw,
           reuseaddr: true
         ]) do
      {:ok, listen} ->
        {:ok, port} = :inet.port(listen)
        server = self()
        acceptor = spawn_link(fn -> accept_loop(listen, server, routes) end)
        {:ok, %{listen: listen, port: port, acceptor: acceptor, connections: 0, requests: []}}

      {:error, reason} ->
        {:stop, reason}
    end
  end

  @impl true
  def handle_call(:port, _from, state), do: {:reply, state.port, state}
  def handle_call(:connections, _from, state), do: {:reply, state.connections, state}
  def handle_call(:requests, _from, state), do: {:reply, Enum.reverse(state.requests), state}

  @impl true
  def handle_cast(:connection, state),
    do: {:noreply, %{state | connections: state.connections + 1}}

  def handle_cast({:request, line}, state),
    do: {:noreply, %{state | requests: [line | state.requests]}}

  defp accept_loop(listen, server, routes) do
    case :gen_tcp.accept(listen) do
      {:ok, socket} ->
        GenServer.cast(server, :connection)
        handler = spawn(fn -> serve(socket, server, routes) end)
        :ok = :gen_tcp.controlling_process(socket, handler)
        send(handler, :go)
        accept_loop(listen, server, routes)

      {:error, _} ->
        :ok
    end
  end

  defp serve(socket, server, routes) do
    receive do
      :go -> :ok
    end

    with {:ok, head} <- read_head(socket, ""),
         [request_line | _] <- String.split(head, "\r\n") do
      GenServer.cast(server, {:request, request_line})
      path = request_line |> String.split(" ") |> Enum.at(1, "/")
      {status, headers, body} = Map.get(routes, path, {404, [], "not found"})
      body = IO.iodata_to_binary(body)

      header_lines =
        Enum.map([{"content-length", "#{byte_size(body)}"}, {"connection", "close"} | headers], fn
          {k, v} -> [k, ": ", v, "\r\n"]
        end)

      :gen_tcp.send(socket, ["HTTP/1.1 #{status} X\r\n", header_lines, "\r\n", body])
    end

    :gen_tcp.close(socket)
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
