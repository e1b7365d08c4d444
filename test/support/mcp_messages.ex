defmodule ExBashkit.Test.MCPMessages do
  @moduledoc false
  # JSON-RPC messages the MCP tests send, as decoded JSON.

  @doc "An `initialize` request with id 0 asking for `version`."
  def initialize(version \\ "2025-06-18") do
    %{
      "jsonrpc" => "2.0",
      "id" => 0,
      "method" => "initialize",
      "params" => %{"protocolVersion" => version, "capabilities" => %{}}
    }
  end

  @doc "A `tools/call` of `name` with `arguments`."
  def tool_call(id, name, arguments) do
    %{
      "jsonrpc" => "2.0",
      "id" => id,
      "method" => "tools/call",
      "params" => %{"name" => name, "arguments" => arguments}
    }
  end

  @doc "A notification."
  def notification(method, params \\ %{}),
    do: %{"jsonrpc" => "2.0", "method" => method, "params" => params}
end
