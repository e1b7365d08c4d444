defmodule ExBashkit.MCP.SessionTest do
  # One MCP session process, spoken to as a transport does.
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.MCP.Session

  import ExBashkit.Test.MCPMessages

  doctest ExBashkit.MCP.Protocol
  doctest ExBashkit.MCP.Tools

  defp start!(opts \\ []) do
    {:ok, pid} = Session.start_link(opts)
    pid
  end

  defp ask(pid, message) do
    tag = make_ref()
    cast(pid, tag, message)
    assert_receive {^tag, answer}, 30_000
    answer
  end

  defp cast(pid, tag, message),
    do: Session.dispatch(pid, Map.put(message, "jsonrpc", "2.0"), {self(), tag})

  defp initialize!(pid, version \\ "2025-06-18") do
    {:reply, %{"result" => result}} = ask(pid, initialize(version))

    result
  end

  defp call(id, name, arguments), do: tool_call(id, name, arguments)

  test "initialize negotiates the version and describes the sandbox" do
    pid = start!(session: [cwd: "/work"])
    result = initialize!(pid, "2024-11-05")
    assert result["protocolVersion"] == "2024-11-05"
    assert result["capabilities"] == %{"tools" => %{"listChanged" => false}}
    assert result["serverInfo"]["name"] == "ex_bashkit"
    assert result["instructions"] =~ "Working directory: /work"

    assert {:reply, %{"error" => %{"code" => -32600}}} =
             ask(pid, %{"id" => 1, "method" => "initialize", "params" => %{}})

    assert initialize!(start!(), "2099-01-01")["protocolVersion"] == "2025-11-25"
  end

  test "requests before initialize, unknown methods, bad params" do
    pid = start!()

    assert {:reply, %{"error" => %{"code" => -32600}}} =
             ask(pid, %{"id" => 1, "method" => "tools/list"})

    assert {:reply, %{"result" => %{}}} = ask(pid, %{"id" => 2, "method" => "ping"})

    assert {:reply, %{"error" => %{"code" => -32601}}} =
             ask(pid, %{"id" => 3, "method" => "prompts/list"})

    initialize!(pid)

    assert {:reply, %{"error" => %{"code" => -32602}}} =
             ask(pid, %{
               "id" => 4,
               "method" => "tools/call",
               "params" => %{"name" => "bash", "arguments" => "x"}
             })

    assert {:reply, %{"error" => %{"code" => -32600}}} =
             ask(pid, %{"id" => 5, "method" => "ping", "params" => []})

    assert {:reply, %{"error" => %{"code" => -32600}}} =
             ask(pid, %{"id" => nil, "method" => "ping"})

    # Invalid tool input is the tool's error, in the result.
    assert {:reply,
            %{"result" => %{"isError" => true, "structuredContent" => %{"error" => error}}}} =
             ask(pid, call(6, "read_file", %{"path" => 7}))

    assert error =~ "\"path\" must be a string"
  end

  test "tools/list is ExBashkit.Tool.definitions/1 in MCP's shape" do
    pid = start!(session: [sqlite: true])
    initialize!(pid)

    {:reply, %{"result" => %{"tools" => tools}}} =
      ask(pid, %{"id" => 1, "method" => "tools/list"})

    session = ExBashkit.Session.new(sqlite: true)

    assert tools ==
             Enum.map(ExBashkit.Tool.definitions(session), fn d ->
               %{
                 "name" => d.name,
                 "description" => d.description,
                 "inputSchema" => d.input_schema
               }
             end)

    assert hd(tools)["description"] =~ "sqlite3"
  end

  test "calls run one at a time in arrival order; ping is answered while one runs" do
    pid = start!()
    initialize!(pid)
    tag = make_ref()

    cast(pid, tag, call(1, "bash", %{"commands" => "sleep 0.3; cd /tmp"}))
    cast(pid, tag, call(2, "write_file", %{"path" => "x.txt", "content" => "x"}))
    cast(pid, tag, %{"jsonrpc" => "2.0", "id" => 3, "method" => "ping"})

    assert_receive {^tag, {:reply, %{"id" => 3, "result" => %{}}}}, 30_000
    assert_receive {^tag, {:reply, %{"id" => 1}}}, 30_000
    assert_receive {^tag, {:reply, %{"id" => 2, "result" => result}}}, 30_000
    # The write came after the cd.
    assert result["structuredContent"]["path"] == "/tmp/x.txt"
  end

  test "a cancelled call stops its script and is not answered; a queued one is dropped" do
    pid = start!()
    initialize!(pid)
    tag = make_ref()

    cast(pid, tag, call(1, "bash", %{"commands" => "mkdir /w; sleep 30; touch /w/one"}))
    cast(pid, tag, call(2, "bash", %{"commands" => "touch /w/two"}))

    for id <- [2, 1] do
      cast(pid, tag, %{"method" => "notifications/cancelled", "params" => %{"requestId" => id}})

      assert_receive {^tag, :cancelled}, 30_000
    end

    check = "test -e /w/one -o -e /w/two && echo ran || echo stopped"

    assert {:reply, %{"result" => %{"structuredContent" => %{"stdout" => "stopped\n"}}}} =
             ask(pid, call(3, "bash", %{"commands" => check}))

    refute_received {^tag, {:reply, _}}
  end

  test "abandon/2 cancels the call of a client that went away" do
    pid = start!()
    initialize!(pid)
    tag = make_ref()

    cast(pid, tag, call(1, "bash", %{"commands" => "sleep 30; echo late > /late"}))

    Session.abandon(pid, tag)

    assert {:reply, %{"result" => %{"structuredContent" => %{"stdout" => "no\n"}}}} =
             ask(pid, call(2, "bash", %{"commands" => "test -e /late && echo yes || echo no"}))

    refute_received {^tag, _}
  end

  test "a session that cannot be built answers the first request with why, then stops" do
    pid = start!(session: [no_such_option: true])
    monitor = Process.monitor(pid)
    Process.unlink(pid)

    assert {:reply, %{"error" => %{"code" => -32603, "message" => message}}} =
             ask(pid, %{"id" => 0, "method" => "initialize", "params" => %{}})

    assert message =~ "cannot start the sandbox session"
    assert_receive {:DOWN, ^monitor, :process, ^pid, {:shutdown, :no_session}}
  end

  test "serves a given session, and ends after its idle TTL" do
    session = ExBashkit.Session.new()
    {:ok, _} = ExBashkit.Session.exec(session, "given=yes")
    pid = start!(session: session, idle_ttl_ms: 50)
    Process.unlink(pid)
    monitor = Process.monitor(pid)
    initialize!(pid)

    assert {:reply, %{"result" => %{"structuredContent" => %{"stdout" => "yes\n"}}}} =
             ask(pid, call(1, "bash", %{"commands" => "echo $given"}))

    assert_receive {:DOWN, ^monitor, :process, ^pid, {:shutdown, :idle}}
  end

  test "older protocol versions get no structuredContent" do
    pid = start!()
    initialize!(pid, "2025-03-26")
    {:reply, %{"result" => result}} = ask(pid, call(1, "bash", %{"commands" => "echo hi"}))
    refute Map.has_key?(result, "structuredContent")
    assert [%{"type" => "text", "text" => text}] = result["content"]
    assert {:ok, %{"stdout" => "hi\n", "exit_code" => 0}} = ExBashkit.MCP.JSON.decode(text)
  end
end
