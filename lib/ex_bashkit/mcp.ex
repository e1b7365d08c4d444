defmodule ExBashkit.MCP do
  @moduledoc """
  ExBashkit as a [Model Context Protocol](https://modelcontextprotocol.io)
  server: any MCP host (Claude Desktop and Code, Cursor, an agent in any
  language) gets a sandboxed, stateful shell served by this node.

  Two transports:

    * stdio - `mix ex_bashkit.mcp` (one session for the connection; the
      shell task's flags), or `ExBashkit.MCP.Stdio.serve/1`;
    * Streamable HTTP - this module as a child spec:

          children = [
            {ExBashkit.MCP, port: 4040, session: [limits: [timeout_ms: 10_000]]}
          ]

      serves `POST`/`DELETE` at `http://127.0.0.1:4040/mcp`, one sandbox
      session per MCP session (`Mcp-Session-Id`), ended by `DELETE` or
      after an idle TTL.

  ## Tools

  `ExBashkit.Tool.definitions/1`, one source for both: `bash {commands,
  timeout_ms?}` (`ExBashkit.Tool.call/2`'s contract: output cut to 2 000
  lines / 50 KB per stream, the exit code, partial output and exit 124 on
  timeout), `read_file {path}`, `write_file {path, content}`, `edit_file
  {path, old_text, new_text}` (exact unique match), `glob {pattern}`,
  `grep {pattern, path?, glob?}` (`ExBashkit.Tool.Files`); with
  `history: true` (`mix ex_bashkit.mcp --history`), an agent's undo:
  `commit {message?}`, `checkout {id}`, `log {limit?}`, `diff {from, to?}`
  (`ExBashkit.Tool.History`). A result is the
  tool's JSON map as text, plus `structuredContent` from protocol
  2025-06-18 on; `isError` when its `"error"` is set. Calls on one session
  run one at a time, in order, so state carries from one to the next; a
  `notifications/cancelled`, a `DELETE` or a client that disconnects
  mid-call cancels the running exec. The `initialize` answer's
  `instructions` is `ExBashkit.Tool.system_prompt/1` of the session.

  Protocol versions 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05.
  Malformed JSON, malformed JSON-RPC, unknown methods and tools are
  JSON-RPC errors; oversized requests are refused before they are read.
  """

  alias ExBashkit.MCP.HTTP

  @typedoc "An option of `start_link/1`."
  @type option ::
          {:port, :inet.port_number()}
          | {:ip, :inet.ip_address() | String.t()}
          | {:path, String.t()}
          | {:session, [ExBashkit.Session.option()]}
          | {:pool, ExBashkit.Pool.pool()}
          | {:idle_ttl_ms, pos_integer() | :infinity}
          | {:max_sessions, pos_integer()}
          | {:max_connections, pos_integer()}
          | {:max_request_bytes, pos_integer()}
          | {:allowed_origins, [String.t()]}
          | {:history, boolean()}
          | {:name, GenServer.name()}

  @doc """
  A child spec for `start_link/1`, with `id: {ExBashkit.MCP, port}`.
  """
  @spec child_spec([option()]) :: Supervisor.child_spec()
  def child_spec(opts) when is_list(opts) do
    %{
      id: {__MODULE__, Keyword.get(opts, :name, Keyword.get(opts, :port, 4040))},
      start: {__MODULE__, :start_link, [opts]},
      type: :worker
    }
  end

  @doc """
  Serve MCP's Streamable HTTP transport, linked to the caller.

  Options:

    * `:port` - TCP port (default 4040; `0` picks a free one, see `port/1`).
    * `:ip` - address to listen on (default `{127, 0, 0, 1}`: this machine
      only).
    * `:path` - the MCP endpoint (default `"/mcp"`).
    * `:session` - `ExBashkit.Session.new/1` options of each MCP session's
      sandbox (default `[]`; checked at start, a bad one raises here), or
    * `:pool` - an `ExBashkit.Pool` each MCP session checks a sandbox out
      of for its life (reset and returned when it ends); a pool over its
      queue makes `initialize` an error.
    * `:idle_ttl_ms` - end an MCP session unused this long (default
      900 000, 15 minutes; `:infinity` for never).
    * `:max_sessions` - open MCP sessions at most (default 100); past it,
      `initialize` gets 503.
    * `:max_connections` - open TCP connections at most (default 256).
    * `:max_request_bytes` - the largest request body (default 4 MiB);
      past it, 413.
    * `:allowed_origins` - `Origin` values served besides loopback ones
      (default none).
    * `:history` - `true` to serve the history tools too (default `false`).
    * `:name` - a name for the server process.

  ## Examples

      iex> {:ok, server} = ExBashkit.MCP.start_link(port: 0)
      iex> is_integer(ExBashkit.MCP.port(server))
      true
  """
  @spec start_link([option()]) :: GenServer.on_start()
  def start_link(opts \\ []) when is_list(opts), do: HTTP.start_link(opts)

  @doc "The TCP port `server` listens on (the one picked for `port: 0`)."
  @spec port(GenServer.server()) :: :inet.port_number()
  def port(server), do: HTTP.port(server)

  @doc "How many MCP sessions `server` has open."
  @spec session_count(GenServer.server()) :: non_neg_integer()
  def session_count(server), do: HTTP.session_count(server)
end
