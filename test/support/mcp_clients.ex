defmodule ExBashkit.Test.MCPClients do
  @moduledoc false
  # The official MCP client SDKs that scripts/setup installs under
  # _build/mcp_clients (Python's `mcp` in a virtualenv, TypeScript's
  # `@modelcontextprotocol/sdk` in node_modules), and the scenario scripts in
  # test/support/mcp_clients/ that drive a server with them. Missing SDKs
  # are a failure that says to run scripts/setup, never a skip.

  @root Path.expand("../..", __DIR__)
  @clients Path.join(@root, "_build/mcp_clients")
  @scripts Path.join(@root, "test/support/mcp_clients")

  @doc "The project's root (where `mix ex_bashkit.mcp` runs)."
  def root, do: @root

  @doc """
  Run the scenario with `sdk` (`:python` or `:typescript`) over `transport`
  (`:stdio`, target the project root; `:http`, target the endpoint URL);
  what the script saw, decoded. `scenario: :history` runs the history
  tools' scenario instead (over stdio, with `--history`).
  """
  def run!(sdk, transport, target, opts \\ []) do
    {program, args, env} = command!(sdk)

    err =
      Path.join(System.tmp_dir!(), "ex_bashkit_mcp_client_#{System.unique_integer([:positive])}")

    command =
      Enum.map_join(
        ["timeout", "150", program | args] ++
          [to_string(transport), target | List.wrap(opts[:scenario] && "#{opts[:scenario]}")],
        " ",
        &sh_quote/1
      ) <>
        " 2> " <> sh_quote(err)

    {out, status} = System.cmd("sh", ["-c", command], cd: @root, env: [{"MIX_ENV", "test"} | env])
    stderr = File.read!(err)
    File.rm(err)

    if status != 0 do
      raise "#{sdk} MCP client (#{transport}) exited #{status}\nstdout: #{out}\nstderr: #{stderr}"
    end

    {:ok, seen} =
      out |> String.split("\n", trim: true) |> List.last() |> ExBashkit.MCP.JSON.decode()

    seen
  end

  defp command!(:python) do
    python = Path.join(@clients, "venv/bin/python")
    installed!(python)
    {python, [Path.join(@scripts, "client.py")], []}
  end

  defp command!(:typescript) do
    sdk = Path.join(@clients, "node_modules/@modelcontextprotocol/sdk")
    installed!(sdk)
    {"node", [Path.join(@scripts, "client.mjs")], [{"MCP_SDK_DIR", sdk}]}
  end

  defp installed!(path) do
    File.exists?(path) ||
      raise "#{path} is missing: run scripts/setup (it installs the MCP client SDKs)"
  end

  defp sh_quote(arg), do: "'" <> String.replace(arg, "'", ~S('\'')) <> "'"
end
