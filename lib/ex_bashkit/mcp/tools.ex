defmodule ExBashkit.MCP.Tools do
  @moduledoc """
  The tools the MCP server serves: `ExBashkit.Tool.definitions/1` in MCP's
  shape for `tools/list`, and `ExBashkit.Tool.call/3`'s answer as a
  `tools/call` result.

  A result carries the tool's JSON-ready map as JSON text (one `text`
  content block) and, from protocol version 2025-06-18 on, as
  `structuredContent` too; `isError` is true when the map's `"error"` is
  set (for `bash`: a timeout, a script that could not run, an invalid
  input; a non-zero exit status alone is a result, not an error).
  """

  alias ExBashkit.MCP.{JSON, Protocol}
  alias ExBashkit.Tool
  alias ExBashkit.Tool.History

  @names Enum.map(Tool.definitions(), & &1.name)

  @doc """
  Whether `name` is a tool the server serves; with `history: true`, the
  history tools too (`ExBashkit.Tool.History`).

  ## Examples

      iex> ExBashkit.MCP.Tools.known?("bash")
      true
      iex> ExBashkit.MCP.Tools.known?("rm_rf")
      false
      iex> {ExBashkit.MCP.Tools.known?("commit"), ExBashkit.MCP.Tools.known?("commit", history: true)}
      {false, true}
  """
  @spec known?(term(), [{:history, boolean()}]) :: boolean()
  def known?(name, opts \\ []),
    do: name in @names or (Keyword.get(opts, :history, false) and History.tool?(name))

  @doc """
  The `tools/list` entries for `session` (`name`, `description`,
  `inputSchema`); `opts` as for `ExBashkit.Tool.definitions/2`.
  """
  @spec list(ExBashkit.Session.t(), [{:history, boolean()}]) :: [map()]
  def list(session, opts \\ []) do
    for definition <- Tool.definitions(session, opts) do
      %{
        "name" => definition.name,
        "description" => definition.description,
        "inputSchema" => definition.input_schema
      }
    end
  end

  @doc """
  Run tool `name` on `session` with `arguments` and shape the answer as a
  `tools/call` result for protocol `version`.
  """
  @spec call(ExBashkit.Session.t(), String.t(), map(), String.t() | nil) :: map()
  def call(session, name, arguments, version) do
    session |> Tool.call(name, arguments) |> result(version)
  end

  @doc """
  A tool's answer map as a `tools/call` result for protocol `version`.

  ## Examples

      iex> ExBashkit.MCP.Tools.result(%{"error" => "boom"}, "2025-03-26")
      %{"content" => [%{"type" => "text", "text" => ~s({"error":"boom"})}], "isError" => true}
  """
  @spec result(map(), String.t() | nil) :: map()
  def result(answer, version) do
    case JSON.encode(answer) do
      {:ok, text} ->
        base = %{
          "content" => [%{"type" => "text", "text" => text}],
          "isError" => answer["error"] != nil
        }

        if Protocol.structured_output?(version),
          do: Map.put(base, "structuredContent", answer),
          else: base

      {:error, message} ->
        %{
          "content" => [
            %{"type" => "text", "text" => "the tool's answer is not JSON: " <> message}
          ],
          "isError" => true
        }
    end
  end
end
