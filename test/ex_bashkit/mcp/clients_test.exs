defmodule ExBashkit.MCP.ClientsTest do
  # The server driven by the official MCP client SDKs, which nobody here
  # wrote: Python's `mcp` and TypeScript's `@modelcontextprotocol/sdk`, over
  # stdio (`mix ex_bashkit.mcp` spawned by the client) and Streamable HTTP
  # (`ExBashkit.MCP` in this node). Each runs the same scenario
  # (test/support/mcp_clients/): initialize, list tools, two `bash` calls
  # that share state, write then read a file, a timeout, a cancelled call.
  use ExBashkit.Test.Case, async: false

  alias ExBashkit.Test.MCPClients

  @moduletag timeout: 300_000

  @tools ["bash", "edit_file", "glob", "grep", "read_file", "write_file"]

  setup_all do
    server = start_supervised!({ExBashkit.MCP, port: 0})
    history = start_supervised!({ExBashkit.MCP, port: 0, history: true}, id: :history)

    %{
      url: "http://127.0.0.1:#{ExBashkit.MCP.port(server)}/mcp",
      history_url: "http://127.0.0.1:#{ExBashkit.MCP.port(history)}/mcp",
      server: server
    }
  end

  for sdk <- [:python, :typescript], transport <- [:stdio, :http] do
    test "the #{sdk} SDK over #{transport}", context do
      target = if unquote(transport) == :stdio, do: MCPClients.root(), else: context.url
      seen = MCPClients.run!(unquote(sdk), unquote(transport), target)
      assert_scenario(seen)
    end
  end

  for sdk <- [:python, :typescript], transport <- [:stdio, :http] do
    test "the #{sdk} SDK over #{transport}: the history tools undo an agent's change", context do
      target = if unquote(transport) == :stdio, do: MCPClients.root(), else: context.history_url
      seen = MCPClients.run!(unquote(sdk), unquote(transport), target, scenario: :history)
      assert seen["tools"] == Enum.sort(@tools ++ ["checkout", "commit", "diff", "log"])
      assert %{"id" => commit, "error" => nil} = seen["commit"]["answer"]

      assert seen["diff"]["answer"] == %{
               "created" => ["/work/g"],
               "modified" => ["/work/f"],
               "deleted" => [],
               "error" => nil
             }

      assert seen["checkout"]["answer"] == %{"id" => commit, "error" => nil}
      assert seen["after"]["answer"]["stdout"] == "v1\nno g\nX=\n"

      assert [%{"id" => ^commit, "message" => "v1", "at" => at} | _] =
               seen["log"]["answer"]["commits"]

      assert {:ok, _, _} = DateTime.from_iso8601(at)
      assert seen["bad_checkout"]["is_error"]
      assert seen["bad_checkout"]["answer"]["error"] =~ "no commit"
    end
  end

  test "both SDKs end their HTTP sessions with DELETE when they close", context do
    for sdk <- [:python, :typescript], do: MCPClients.run!(sdk, :http, context.url)
    eventually(fn -> ExBashkit.MCP.session_count(context.server) == 0 end)
  end

  defp assert_scenario(seen) do
    assert seen["server_name"] == "ex_bashkit"
    assert seen["tools"] == @tools

    # State persists between calls: the variable and the cwd.
    assert seen["second_bash"]["answer"] == %{
             "stdout" => "42\n/work\n",
             "stderr" => "",
             "exit_code" => 0,
             "error" => nil
           }

    assert seen["second_bash"]["structured"] == seen["second_bash"]["answer"]
    refute seen["second_bash"]["is_error"]

    # A relative path resolves against the shell's cwd.
    assert seen["write"]["answer"] == %{
             "path" => "/work/notes/a.txt",
             "bytes" => 6,
             "error" => nil
           }

    assert seen["read"]["answer"]["content"] == "hello\n"

    # ExBashkit.Tool's timeout contract: exit 124, the output so far.
    assert %{"exit_code" => 124, "stdout" => "partial\n", "error" => "timeout"} =
             seen["timeout"]["answer"]

    assert seen["timeout"]["is_error"]

    # The cancelled call's script was stopped (the next call did not wait
    # for it, and it never reached its `touch`); the session kept its state.
    assert seen["cancelled"]
    assert seen["after_cancel"]["answer"]["stdout"] == "stopped\n41\n"

    assert seen["unknown_tool"] == -32602
  end
end
