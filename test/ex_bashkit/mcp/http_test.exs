defmodule ExBashkit.MCP.HTTPTest do
  # The Streamable HTTP transport from a raw loopback socket: what a client
  # that does things wrong gets, sessions' lives, a client that vanishes
  # mid-exec. (The well-behaved clients are the SDKs: clients_test.exs.)
  use ExBashkit.Test.Case, async: false

  alias ExBashkit.MCP
  alias ExBashkit.MCP.JSON

  import ExBashkit.Test.MCPMessages

  @moduletag timeout: 120_000

  defp start!(opts \\ []) do
    server = start_supervised!({MCP, Keyword.merge([port: 0], opts)}, id: make_ref())
    %{server: server, port: MCP.port(server)}
  end

  # One HTTP/1.1 exchange on a fresh connection: {status, headers, body}.
  defp http(port, method, headers, body \\ "") do
    {:ok, socket} = :gen_tcp.connect(~c"127.0.0.1", port, [:binary, active: false])
    :ok = :gen_tcp.send(socket, request(method, headers, body))
    response = read_response(socket)
    :gen_tcp.close(socket)
    response
  end

  defp request(method, headers, body) do
    [
      "#{method} /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n",
      Enum.map(headers, fn {k, v} -> "#{k}: #{v}\r\n" end),
      "content-length: #{byte_size(body)}\r\n\r\n",
      body
    ]
  end

  defp read_response(socket, buffer \\ "") do
    case :binary.split(buffer, "\r\n\r\n") do
      [head, rest] ->
        [status_line | lines] = String.split(head, "\r\n")
        [_, status | _] = String.split(status_line, " ")

        headers =
          Map.new(lines, fn line ->
            [k, v] = String.split(line, ": ", parts: 2)
            {String.downcase(k), v}
          end)

        {String.to_integer(status), headers, read_body(socket, headers, rest)}

      [_] ->
        {:ok, more} = :gen_tcp.recv(socket, 0, 30_000)
        read_response(socket, buffer <> more)
    end
  end

  defp read_body(socket, %{"transfer-encoding" => "chunked"}, rest) do
    if String.ends_with?(rest, "0\r\n\r\n") do
      dechunk(rest)
    else
      case :gen_tcp.recv(socket, 0, 30_000) do
        {:ok, more} -> read_body(socket, %{"transfer-encoding" => "chunked"}, rest <> more)
        {:error, :closed} -> dechunk(rest)
      end
    end
  end

  defp read_body(socket, headers, rest) do
    length = String.to_integer(Map.get(headers, "content-length", "0"))

    if byte_size(rest) >= length do
      rest
    else
      {:ok, more} = :gen_tcp.recv(socket, 0, 30_000)
      read_body(socket, headers, rest <> more)
    end
  end

  defp dechunk(data) do
    case :binary.split(data, "\r\n") do
      [size, rest] ->
        case String.to_integer(size, 16) do
          0 ->
            ""

          n ->
            binary_part(rest, 0, n) <> dechunk(binary_part(rest, n + 2, byte_size(rest) - n - 2))
        end

      _ ->
        ""
    end
  end

  @json [{"content-type", "application/json"}, {"accept", "application/json, text/event-stream"}]

  defp post(port, message, headers \\ []) do
    {status, resp_headers, body} = http(port, "POST", @json ++ headers, JSON.encode!(message))
    {status, resp_headers, decode_body(resp_headers, body)}
  end

  defp decode_body(_headers, ""), do: nil

  defp decode_body(%{"content-type" => "text/event-stream"}, body) do
    [data] = for "data: " <> json <- String.split(body, "\n"), do: json
    JSON.decode(data) |> elem(1)
  end

  defp decode_body(_headers, body), do: JSON.decode(body) |> elem(1)

  defp initialize!(port) do
    {200, headers, %{"result" => %{"protocolVersion" => _}}} = post(port, initialize())

    session = Map.fetch!(headers, "mcp-session-id")

    {202, _, nil} = post(port, notification("notifications/initialized"), sid(session))

    session
  end

  defp sid(session), do: [{"mcp-session-id", session}]

  defp bash(port, session, id, commands) do
    {200, _, %{"result" => result}} =
      post(port, tool_call(id, "bash", %{"commands" => commands}), sid(session))

    result["structuredContent"]
  end

  test "malformed JSON, malformed JSON-RPC and unknown methods are JSON-RPC errors" do
    %{port: port} = start!()

    {400, _, body} = http(port, "POST", @json, "{not json")
    assert %{"error" => %{"code" => -32700}, "id" => nil} = JSON.decode(body) |> elem(1)

    assert {400, _, %{"error" => %{"code" => -32600}}} = post(port, %{"hello" => "world"})
    assert {400, _, %{"error" => %{"code" => -32600}}} = post(port, [%{"jsonrpc" => "2.0"}])

    session = initialize!(port)

    assert {200, _, %{"id" => 5, "error" => %{"code" => -32601}}} =
             post(
               port,
               %{"jsonrpc" => "2.0", "id" => 5, "method" => "resources/list"},
               sid(session)
             )

    unknown_tool = tool_call(6, "rm_rf", %{})

    assert {200, _, %{"id" => 6, "error" => %{"code" => -32602}}} =
             post(port, unknown_tool, sid(session))

    # The session is none the worse.
    assert %{"stdout" => "ok\n"} = bash(port, session, 7, "echo ok")
  end

  test "an oversized request is refused before it is read, and the server serves on" do
    %{port: port} = start!(max_request_bytes: 1024)
    session = initialize!(port)

    {:ok, socket} = :gen_tcp.connect(~c"127.0.0.1", port, [:binary, active: false])

    head =
      "POST /mcp HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: 10000000\r\n\r\n"

    :ok = :gen_tcp.send(socket, head)
    {413, headers, body} = read_response(socket)
    assert headers["connection"] == "close"
    assert %{"error" => %{"code" => -32600, "message" => message}} = JSON.decode(body) |> elem(1)
    assert message =~ "1024-byte limit"
    :gen_tcp.close(socket)

    assert %{"stdout" => "still here\n"} = bash(port, session, 2, "echo still here")
  end

  test "requests without a session, with an unknown one, GET and a foreign Origin" do
    %{port: port} = start!()
    ping = %{"jsonrpc" => "2.0", "id" => 1, "method" => "ping"}

    assert {400, _, %{"error" => %{"code" => -32600}, "id" => 1}} = post(port, ping)
    assert {404, _, %{"error" => %{"code" => -32600}}} = post(port, ping, sid("nope"))

    assert {405, %{"allow" => "POST, DELETE"}, _} =
             http(port, "GET", [{"accept", "text/event-stream"}])

    assert {404, _, _} = http(port, "DELETE", sid("nope"))

    assert {403, _, _} = post(port, ping, [{"origin", "http://evil.example"}])
    session = initialize!(port)

    assert {200, _, %{"result" => %{}}} =
             post(port, ping, [{"origin", "http://localhost:3000"} | sid(session)])

    assert {400, _, %{"error" => %{"code" => -32600}}} =
             post(port, ping, [{"mcp-protocol-version", "1999-01-01"} | sid(session)])
  end

  test "one sandbox per MCP session; DELETE ends one, the other goes on" do
    %{port: port, server: server} = start!()
    a = initialize!(port)
    b = initialize!(port)
    assert MCP.session_count(server) == 2

    bash(port, a, 2, "x=from-a")
    assert %{"stdout" => "[]\n"} = bash(port, b, 2, "echo \"[$x]\"")

    assert {200, _, _} = http(port, "DELETE", sid(a))
    assert {404, _, _} = post(port, %{"jsonrpc" => "2.0", "id" => 3, "method" => "ping"}, sid(a))
    assert %{"stdout" => "b\n"} = bash(port, b, 3, "echo b")
    eventually(fn -> MCP.session_count(server) == 1 end)
  end

  test "an idle session ends after its TTL" do
    %{port: port, server: server} = start!(idle_ttl_ms: 100)
    session = initialize!(port)
    eventually(fn -> MCP.session_count(server) == 0 end)

    assert {404, _, _} =
             post(port, %{"jsonrpc" => "2.0", "id" => 2, "method" => "ping"}, sid(session))
  end

  test "past :max_sessions, initialize is refused" do
    %{port: port} = start!(max_sessions: 1)
    initialize!(port)

    assert {503, headers, %{"error" => _}} = post(port, initialize())

    refute Map.has_key?(headers, "mcp-session-id")
  end

  test "a client that vanishes mid-exec cancels its exec; other sessions are served meanwhile" do
    %{port: port} = start!()
    session = initialize!(port)
    other = initialize!(port)
    bash(port, session, 2, "mkdir -p /w")

    call = tool_call(3, "bash", %{"commands" => "sleep 30; touch /w/after"})

    {:ok, socket} = :gen_tcp.connect(~c"127.0.0.1", port, [:binary, active: false])
    :ok = :gen_tcp.send(socket, request("POST", @json ++ sid(session), JSON.encode!(call)))
    # The event stream's head: the call is running.
    {:ok, head} = :gen_tcp.recv(socket, 0, 30_000)
    assert head =~ "text/event-stream"

    assert %{"stdout" => "other\n"} = bash(port, other, 2, "echo other")
    :gen_tcp.close(socket)

    # Had the script not been stopped, this call would wait for it and see
    # the file.
    assert %{"stdout" => "stopped\n"} =
             bash(port, session, 4, "test -e /w/after && echo ran || echo stopped")
  end

  test "notifications/cancelled ends a running call's event stream without an answer" do
    %{port: port} = start!()
    session = initialize!(port)

    call = tool_call("slow", "bash", %{"commands" => "sleep 30"})

    {:ok, socket} = :gen_tcp.connect(~c"127.0.0.1", port, [:binary, active: false])
    :ok = :gen_tcp.send(socket, request("POST", @json ++ sid(session), JSON.encode!(call)))
    {:ok, head} = :gen_tcp.recv(socket, 0, 30_000)

    cancel = notification("notifications/cancelled", %{"requestId" => "slow"})

    assert {202, _, nil} = post(port, cancel, sid(session))

    {200, headers, body} = read_response(socket, head)
    assert headers["content-type"] == "text/event-stream"
    assert body == ""
    :gen_tcp.close(socket)
    assert %{"stdout" => "next\n"} = bash(port, session, 2, "echo next")
  end

  test "with :pool, each MCP session holds a pooled sandbox until it ends" do
    {:ok, pool} = ExBashkit.Pool.start_link(name: nil, size: 2, session: [env: [POOLED: "yes"]])
    %{port: port} = start!(pool: pool)
    session = initialize!(port)
    assert %{"stdout" => "yes\n"} = bash(port, session, 2, "echo $POOLED; leftover=1")
    assert %{busy: 1} = ExBashkit.Pool.stats(pool)

    assert {200, _, _} = http(port, "DELETE", sid(session))
    eventually(fn -> ExBashkit.Pool.stats(pool).busy == 0 end)

    # The next MCP session gets a reset sandbox.
    again = initialize!(port)
    assert %{"stdout" => "[]\n"} = bash(port, again, 2, "echo \"[$leftover]\"")
  end

  test "with :pool over its queue, initialize is an error and opens no session" do
    {:ok, pool} = ExBashkit.Pool.start_link(name: nil, size: 1, max_queue: 0)
    %{port: port, server: server} = start!(pool: pool)
    initialize!(port)

    assert {200, headers, %{"error" => %{"code" => -32603, "message" => message}}} =
             post(port, initialize())

    assert message =~ "capacity"
    refute Map.has_key?(headers, "mcp-session-id")
    eventually(fn -> MCP.session_count(server) == 1 end)
  end

  test "bad options raise at start" do
    assert_raise ArgumentError, fn -> MCP.start_link(port: 0, session: [no_such_option: 1]) end
    assert_raise ArgumentError, ~r/:ip/, fn -> MCP.start_link(port: 0, ip: "not an ip") end

    assert_raise ArgumentError, ~r/not both/, fn ->
      MCP.start_link(port: 0, pool: :p, session: [])
    end
  end
end
