defmodule ExBashkit.MCP.HTTP.Connection do
  @moduledoc """
  One TCP connection of the Streamable HTTP transport: requests in turn
  (keep-alive), each routed to its MCP session.

    * `POST` with a JSON-RPC message. An `initialize` without
      `Mcp-Session-Id` opens a session, whose id the answer's
      `Mcp-Session-Id` header carries; any other message needs that
      header (400 without it, 404 for a session that has ended). A
      notification or response is answered 202. A `tools/call` whose client
      accepts `text/event-stream` is answered as an event stream (one
      event, the result; kept alive with comments while the call runs);
      other requests, and clients that accept only JSON, get
      `application/json`.
    * `DELETE` ends the session (its running call is cancelled).
    * `GET` is 405: the server sends nothing unasked.

  A client that closes the connection while its request runs has the
  request abandoned: its exec is cancelled. An unparsable body is a JSON-RPC
  parse error; a body over the limit is 413 with a JSON-RPC error, and the
  connection closes. A request with an `Origin` header is served only when
  the origin is a loopback one or listed in `:allowed_origins` (the spec's
  defence against DNS rebinding).
  """

  alias ExBashkit.MCP.{HTTP, JSON, Protocol, Session}
  alias ExBashkit.MCP.HTTP.Wire

  # How long a kept-alive connection waits for its next request, and how
  # long a request may take to arrive once begun.
  @idle_timeout_ms 60_000
  # A comment on a quiet event stream this often.
  @keepalive_ms 15_000

  @doc false
  # Run by the server's connection supervisor; the socket follows.
  def serve(context) do
    receive do
      {:socket, socket} -> loop(%{context: context, socket: socket, buffer: ""})
    after
      5_000 -> :ok
    end
  end

  defp loop(state) do
    %{socket: socket, buffer: buffer, context: context} = state

    case Wire.read(socket, buffer, context.max_request_bytes, @idle_timeout_ms) do
      {:ok, request, rest} ->
        state = %{state | buffer: rest}

        case handle(request, state) do
          {:keep, state} ->
            if close?(request), do: :gen_tcp.close(socket), else: loop(state)

          :closed ->
            :gen_tcp.close(socket)
        end

      :closed ->
        :gen_tcp.close(socket)

      {:error, status, message} ->
        send_json(state, status, Protocol.error(nil, :invalid_request, message), close: true)
        :gen_tcp.close(socket)
    end
  end

  defp close?(%{version: {1, 0}} = request), do: header(request, "connection") != "keep-alive"
  defp close?(request), do: header(request, "connection") == "close"

  defp header(request, name), do: request.headers |> Map.get(name, "") |> String.downcase()

  # -- routing --------------------------------------------------------------------

  defp handle(%{path: path} = request, %{context: %{path: path}} = state) do
    cond do
      not origin_allowed?(request, state.context.allowed_origins) ->
        send_json(state, 403, Protocol.error(nil, :invalid_request, "origin not allowed"))

      request.method == "POST" ->
        post(request, state)

      request.method == "DELETE" ->
        delete(request, state)

      true ->
        send_response(state, 405, [{"allow", "POST, DELETE"}], "")
    end
  end

  defp handle(_request, state), do: send_response(state, 404, [], "")

  defp origin_allowed?(request, allowed) do
    case Map.fetch(request.headers, "origin") do
      :error ->
        true

      {:ok, origin} ->
        origin in allowed or
          match?(
            %URI{host: host} when host in ["localhost", "127.0.0.1", "[::1]", "::1"],
            URI.parse(origin)
          )
    end
  end

  defp post(request, state) do
    with :ok <- json_content_type(request),
         :ok <- protocol_version(request),
         {:ok, message} <- decode(request.body, state) do
      route(Protocol.classify(message), message, request, state)
    else
      {:error, status, response} -> send_json(state, status, response)
    end
  end

  defp json_content_type(request) do
    case request.headers |> Map.get("content-type", "") |> String.downcase() do
      "application/json" <> _ ->
        :ok

      _ ->
        {:error, 415,
         Protocol.error(nil, :invalid_request, "Content-Type must be application/json")}
    end
  end

  defp protocol_version(request) do
    case Map.fetch(request.headers, "mcp-protocol-version") do
      :error ->
        :ok

      {:ok, version} ->
        if version in Protocol.versions(),
          do: :ok,
          else:
            {:error, 400,
             Protocol.error(nil, :invalid_request, "unsupported MCP-Protocol-Version: #{version}")}
    end
  end

  defp decode(body, state) do
    case JSON.decode(body, state.context.max_request_bytes) do
      {:ok, message} -> {:ok, message}
      {:error, message} -> {:error, 400, Protocol.error(nil, :parse_error, message)}
    end
  end

  defp route({:invalid, id, message}, _message, _request, state),
    do: send_json(state, 400, Protocol.error(id, :invalid_request, message))

  defp route({:request, id, "initialize", _params}, message, request, state)
       when not is_map_key(request.headers, "mcp-session-id") do
    case HTTP.new_session(state.context.server) do
      {:ok, session_id, pid} ->
        case await(pid, message, false, state, [{"mcp-session-id", session_id}]) do
          # A failed initialize opens nothing.
          {:error_answer, result} ->
            Session.close(pid)
            result

          result ->
            result
        end

      {:error, :too_many_sessions} ->
        send_json(state, 503, Protocol.error(id, :internal_error, "too many sessions: try later"))
    end
  end

  defp route(kind, message, request, state) do
    id = with {:request, id, _, _} <- kind, do: id

    case Map.fetch(request.headers, "mcp-session-id") do
      :error ->
        message = "the Mcp-Session-Id header is required (send initialize first)"
        send_json(state, 400, Protocol.error(request_id(id), :invalid_request, message))

      {:ok, session_id} ->
        case HTTP.lookup(state.context.table, session_id) do
          nil ->
            send_json(
              state,
              404,
              Protocol.error(request_id(id), :invalid_request, "session not found")
            )

          pid ->
            dispatch(kind, pid, message, request, state)
        end
    end
  end

  defp request_id(id) when is_binary(id) or is_integer(id), do: id
  defp request_id(_), do: nil

  defp dispatch({:request, _id, method, _params}, pid, message, request, state) do
    sse? = method == "tools/call" and accepts_event_stream?(request)

    case await(pid, message, sse?, state, []) do
      {:error_answer, result} -> result
      result -> result
    end
  end

  # Notifications and responses: handed over, answered at once.
  defp dispatch(_kind, pid, message, _request, state) do
    Session.dispatch(pid, message, {self(), make_ref()})
    send_response(state, 202, [], "")
  end

  defp accepts_event_stream?(request),
    do: request |> header("accept") |> String.contains?("text/event-stream")

  defp delete(request, state) do
    with {:ok, session_id} <- Map.fetch(request.headers, "mcp-session-id"),
         pid when is_pid(pid) <- HTTP.lookup(state.context.table, session_id) do
      Session.close(pid)
      send_response(state, 200, [], "")
    else
      :error -> send_response(state, 400, [], "")
      nil -> send_response(state, 404, [], "")
    end
  end

  # -- waiting for an answer --------------------------------------------------------

  # Hand `message` to the session and answer with what it sends back,
  # watching the socket: a client gone meanwhile abandons the request.
  defp await(pid, message, sse?, state, headers) do
    tag = make_ref()
    monitor = Process.monitor(pid)
    Session.dispatch(pid, message, {self(), tag})
    :inet.setopts(state.socket, active: :once)
    id = Map.get(message, "id")
    wait = %{id: id, pid: pid, tag: tag, monitor: monitor, sse?: sse?, headers: headers}

    if sse? do
      with {:keep, state} <- send_data(state, Wire.event_stream_head(headers)),
           do: wait(wait, state),
           else: (_ -> gone(wait))
    else
      wait(wait, state)
    end
  end

  defp wait(wait, state) do
    %{tag: tag, monitor: monitor} = wait
    socket = state.socket

    receive do
      {^tag, {:reply, response}} ->
        Process.demonitor(monitor, [:flush])
        state = passive(state)
        result = answer(wait, state, response)
        if Map.has_key?(response, "error"), do: {:error_answer, result}, else: result

      {^tag, :cancelled} ->
        Process.demonitor(monitor, [:flush])
        state = passive(state)

        if wait.sse?,
          do: send_data(state, Wire.last_chunk()),
          else:
            send_json(state, 200, Protocol.error(wait.id, :invalid_request, "request cancelled"))

      # A pipelined request, kept for later; past the bound the socket is
      # no longer read (nor watched) until the answer is out.
      {:tcp, ^socket, data} ->
        buffer = state.buffer <> data

        if byte_size(buffer) <= 2 * state.context.max_request_bytes,
          do: :inet.setopts(socket, active: :once)

        wait(wait, %{state | buffer: buffer})

      {:tcp_closed, ^socket} ->
        gone(wait)

      {:tcp_error, ^socket, _} ->
        gone(wait)

      {:DOWN, ^monitor, :process, _, _} ->
        state = passive(state)
        error = Protocol.error(wait.id, :internal_error, "the session ended")

        if wait.sse?,
          do: answer(wait, state, error),
          else: send_json(state, 404, error, wait.headers)
    after
      @keepalive_ms ->
        if wait.sse? do
          case send_data(state, Wire.keepalive()) do
            {:keep, state} -> wait(wait, state)
            :closed -> gone(wait)
          end
        else
          wait(wait, state)
        end
    end
  end

  defp answer(%{sse?: true}, state, response) do
    with {:keep, state} <- send_data(state, Wire.event(JSON.encode!(response))),
         do: send_data(state, Wire.last_chunk())
  end

  # A failed initialize gives no session id.
  defp answer(wait, state, response) do
    headers = if Map.has_key?(response, "error"), do: [], else: wait.headers
    send_json(state, 200, response, headers)
  end

  defp gone(wait) do
    Session.abandon(wait.pid, wait.tag)
    Process.demonitor(wait.monitor, [:flush])
    :closed
  end

  # Back to reading with `recv`, keeping what arrived while waiting.
  defp passive(state) do
    :inet.setopts(state.socket, active: false)

    receive do
      {:tcp, socket, data} when socket == state.socket -> %{state | buffer: state.buffer <> data}
    after
      0 -> state
    end
  end

  # -- writing --------------------------------------------------------------------

  defp send_json(state, status, response, extra \\ [])

  defp send_json(state, status, response, close: true) do
    headers = [{"content-type", "application/json"}, {"connection", "close"}]
    send_response(state, status, headers, JSON.encode!(response))
  end

  defp send_json(state, status, response, headers) do
    send_response(
      state,
      status,
      [{"content-type", "application/json"} | headers],
      JSON.encode!(response)
    )
  end

  defp send_response(state, status, headers, body),
    do: send_data(state, Wire.response(status, headers, body))

  defp send_data(state, data) do
    case :gen_tcp.send(state.socket, data) do
      :ok -> {:keep, state}
      {:error, _} -> :closed
    end
  end
end
