defmodule ExBashkit.MCP.StdioTest do
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.MCP.{JSON, Stdio}

  import ExBashkit.Test.MCPMessages

  # Serve `lines` from a StringIO; the answers, decoded, in the order written.
  defp serve(lines, opts) do
    {:ok, input} = StringIO.open(Enum.map_join(lines, "", &(&1 <> "\n")))
    {:ok, output} = StringIO.open("")
    assert Stdio.serve([input: input, output: output] ++ opts) == :ok
    {_, written} = StringIO.contents(output)

    for line <- String.split(written, "\n", trim: true) do
      {:ok, message} = JSON.decode(line)
      message
    end
  end

  defp json(message), do: JSON.encode!(Map.put(message, "jsonrpc", "2.0"))

  @initialize initialize()

  test "bad lines are parse errors; the connection goes on, and end of input waits for answers" do
    answers =
      serve(
        [
          "not json",
          String.duplicate("x", 300),
          "",
          json(@initialize),
          json(notification("notifications/initialized")),
          json(tool_call(2, "bash", %{"commands" => "sleep 0.2; echo done"}))
        ],
        max_message_bytes: 200
      )

    assert [
             %{"id" => nil, "error" => %{"code" => -32700, "message" => "invalid JSON" <> _}},
             %{"id" => nil, "error" => %{"code" => -32700, "message" => too_long}},
             %{"id" => 0, "result" => %{"protocolVersion" => "2025-06-18"}},
             %{"id" => 2, "result" => %{"structuredContent" => %{"stdout" => "done\n"}}}
           ] = answers

    assert too_long =~ "over the 200-byte limit"
  end

  test "serves a given session" do
    session = ExBashkit.Session.new(files: %{"/given.txt" => "given\n"})

    call = tool_call(2, "read_file", %{"path" => "/given.txt"})

    assert [_, %{"result" => %{"structuredContent" => %{"content" => "given\n"}}}] =
             serve([json(@initialize), json(call)], session: session)
  end
end
