defmodule Mix.Tasks.ExBashkit.McpTest do
  # `mix ex_bashkit.mcp` as an MCP host runs it: a real OS process (a child
  # `mix` in this project, MIX_ENV=test, already compiled) with messages
  # piped to its stdin, bounded by coreutils' `timeout`.
  use ExBashkit.Test.Case, async: false

  alias ExBashkit.MCP.JSON
  alias ExBashkit.Test.HostDir

  import ExBashkit.Test.MCPMessages, only: [initialize: 1, tool_call: 3]

  @moduletag timeout: 120_000
  @root File.cwd!()

  defp mix_mcp(messages, args) do
    input = tmp_path("in")
    err = tmp_path("err")

    File.write!(
      input,
      Enum.map_join(messages, "", &(JSON.encode!(Map.put(&1, "jsonrpc", "2.0")) <> "\n"))
    )

    quoted = Enum.map_join(args, " ", &("'" <> String.replace(&1, "'", ~S('\'')) <> "'"))
    command = "exec timeout 60 mix ex_bashkit.mcp #{quoted} < '#{input}' 2> '#{err}'"
    {out, status} = System.cmd("sh", ["-c", command], cd: @root, env: [{"MIX_ENV", "test"}])
    {out, File.read!(err), status}
  end

  defp call(id, name, arguments), do: tool_call(id, name, arguments)

  @initialize initialize("2025-11-25")

  test "the shell task's flags: a host mount, the timeout; stdout is MCP messages only" do
    host = HostDir.create!(%{"readme.txt" => "from the host\n"})

    {out, _err, 0} =
      mix_mcp(
        [
          @initialize,
          call(1, "read_file", %{"path" => "/project/readme.txt"}),
          call(2, "write_file", %{"path" => "/project/new.txt", "content" => "x"}),
          call(3, "bash", %{"commands" => "echo started; sleep 10"})
        ],
        ["--mount", "/project=#{host}", "--timeout", "300"]
      )

    answers =
      for line <- String.split(out, "\n", trim: true) do
        assert {:ok, %{"jsonrpc" => "2.0"} = message} = JSON.decode(line), "not MCP: #{line}"
        message
      end

    assert [%{"id" => 0} = init, %{"id" => 1} = read, %{"id" => 2} = write, %{"id" => 3} = slow] =
             answers

    assert init["result"]["instructions"] =~ "/project (read-only)"
    assert read["result"]["structuredContent"]["content"] == "from the host\n"
    # Read-only: the write fails and the host dir is untouched.
    assert write["result"]["isError"]
    refute File.exists?(Path.join(host, "new.txt"))
    # --timeout is the session's limit per call.
    assert %{"exit_code" => 124, "stdout" => "started\n"} = slow["result"]["structuredContent"]
  end

  test "--file starts from a snapshot" do
    session = ExBashkit.Session.new()
    {:ok, _} = ExBashkit.Session.exec(session, "mkdir -p /kept && cd /kept && KEPT=yes")
    snapshot = tmp_path("snap")
    File.write!(snapshot, ExBashkit.Session.snapshot!(session))

    {out, _err, 0} =
      mix_mcp([@initialize, call(1, "bash", %{"commands" => "echo $KEPT $(pwd)"})], [
        "--file",
        snapshot
      ])

    [_, answer] = String.split(out, "\n", trim: true)

    assert {:ok, %{"result" => %{"structuredContent" => %{"stdout" => "yes /kept\n"}}}} =
             JSON.decode(answer)
  end

  test "a bad flag is an error on stderr, nothing on stdout" do
    {out, err, status} = mix_mcp([], ["--no-such-flag"])
    assert status != 0
    assert out == ""
    assert err =~ "ex_bashkit.mcp: invalid option --no-such-flag"
  end
end
