defmodule ExBashkit.Test.HttpServer do
  @moduledoc false
  # A tiny HTTP/1.1 server on a loopback address, for the network tests: real
  # sockets, real requests from bashkit's HTTP client, nothing mocked.
  #
  # Every request it receives is reported to the owner (the test process) as
  # `{:http_request, server_pid, method, path}`, and every connection it
  # accepts as `{:http_connection, server_pid}`, so a test can prove that a
  # request (or any connection at all) was or was not made. Responses come from a `handler` function
  # `(method, path) -> {status, headers, body}`; the default serves
  # `"served " <> path` with status 200.
  #
  # Traffic stays on 127.0.0.1 / ::1. Each connection answers one request and
  # closes; the server stops with the test (it is started supervised).

  @doc "Start a server for the calling test; returns `%{pid, port, url}`."
  def start!(opts \\ []) do
    opts = Keyword.put(opts, :owner, self())
    pid = ExUnit.Callbacks.start_supervised!({__MODULE__, opts}, id: make_ref())

    receive do
      {:http_server_listening, ^pid, port} ->
        host =
          case Keyword.get(opts, :ip, {127, 0, 0, 1}) do
            {127, 0, 0, 1} -> "127.0.0.1"
            {0, 0, 0, 0, 0, 0, 0, 1} -> "[::1]"
          end

        %{
          pid: pid,
          port: port,
          ip: Keyword.get(opts, :ip, {127, 0, 0, 1}),
          url: "http://#{host}:#{port}"
        }
    after
      5_000 -> raise "test HTTP server did not start"
    end
  end

  @doc """
  How many connections `server` accepted before this call, whatever was sent
  on them. It makes one request of its own and waits for it: connections are
  accepted (and reported) in order, so every earlier one has been reported by
  then. Drains the connection reports from the mailbox.
  """
  def connections_before(%{pid: pid, port: port, ip: ip}) do
    {:ok, socket} = :gen_tcp.connect(ip, port, [:binary, active: false])
    :ok = :gen_tcp.send(socket, "GET /sync HTTP/1.0\r\n\r\n")
    {:ok, _response} = :gen_tcp.recv(socket, 0, 5_000)
    :gen_tcp.close(socket)

    receive do
      {:http_request, ^pid, "GET", "/sync"} -> :ok
    after
      5_000 -> raise "test HTTP server did not answer"
    end

    count_connections(pid, 0) - 1
  end

  defp count_connections(pid, n) do
    receive do
      {:http_connection, ^pid} -> count_connections(pid, n + 1)
    after
      0 -> n
    end
  end

  @doc false
  def child_spec(opts) do
    %{id: __MODULE__, start: {__MODULE__, :start_link, [opts]}, restart: :temporary}
  end

  @doc false
  def start_link(opts) do
    {:ok, spawn_link(fn -> listen(opts) end)}
  end

  defp listen(opts) do
    ip = Keyword.get(opts, :ip, {127, 0, 0, 1})
    owner = Keyword.fetch!(opts, :owner)
    handler = Keyword.get(opts, :handler, &default_handler/2)

    {:ok, socket} =
      :gen_tcp.listen(0, [:binary, ip: ip, packet: :http_bin, active: false, reuseaddr: true])

    {:ok, port} = :inet.port(socket)
    send(owner, {:http_server_listening, self(), port})
    accept(socket, owner, handler)
  end

  defp accept(socket, owner, handler) do
    {:ok, conn} = :gen_tcp.accept(socket)
    server = self()
    send(owner, {:http_connection, server})
    pid = spawn(fn -> serve(conn, server, owner, handler) end)
    :ok = :gen_tcp.controlling_process(conn, pid)
    send(pid, :go)
    accept(socket, owner, handler)
  end

  defp serve(conn, server, owner, handler) do
    receive do
      :go -> :ok
    end

    with {:ok, {:http_request, method, {:abs_path, path}, _version}} <-
           :gen_tcp.recv(conn, 0, 5_000),
         :ok <- skip_headers(conn) do
      send(owner, {:http_request, server, to_string(method), path})
      {status, headers, body} = handler.(to_string(method), path)

      head =
        Enum.map_join(
          [{"content-length", byte_size(body)}, {"connection", "close"} | headers],
          fn {k, v} -> "#{k}: #{v}\r\n" end
        )

      :gen_tcp.send(conn, ["HTTP/1.1 #{status} X\r\n", head, "\r\n", body])
    end

    :gen_tcp.close(conn)
  end

  defp skip_headers(conn) do
    case :gen_tcp.recv(conn, 0, 5_000) do
      {:ok, :http_eoh} -> :ok
      {:ok, {:http_header, _, _, _, _}} -> skip_headers(conn)
      other -> other
    end
  end

  defp default_handler(_method, path), do: {200, [], "served " <> path}
end
