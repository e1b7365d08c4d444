defmodule ExBashkit.MCP.Session do
  @moduledoc """
  One MCP session: a process that owns one `ExBashkit.Session` (built from
  `:session` options, or checked out of an `ExBashkit.Pool` for the
  process's life, or given) and answers the JSON-RPC messages a transport hands it.

  A transport sends each decoded message with `dispatch/3` and a reply
  address `{pid, tag}`; the answer to a request comes back as
  `{tag, {:reply, response}}`, or `{tag, :cancelled}` when the client
  cancelled it (`notifications/cancelled`: no response is due then).
  Notifications and responses get no answer.

  Methods: `initialize` (version negotiation; `instructions` is
  `ExBashkit.Tool.system_prompt/1`), `ping`, `tools/list`, `tools/call`.
  Any other method is a "method not found" error. A `tools/call` runs in a
  process of its own, linked to this one, so that `ping` and cancellations
  are served meanwhile; calls run one at a time, in arrival order (at most
  64 waiting). A cancelled call's process is killed, and a
  caller's death cancels its exec (`ExBashkit.Session.exec/3`), so the
  script stops; `abandon/2` does the same for a client that went away.

  The process ends on `close/1`, when its transport ends it, or after
  `:idle_ttl_ms` with no message and no call running; its calls end with
  it. With a pool, the session is then reset and returned
  (`ExBashkit.Pool.checkout/2`).
  """

  use GenServer

  alias ExBashkit.MCP.{Protocol, Tools}
  alias ExBashkit.{Pool, Tool}

  # Calls queued or running on one session, at most.
  @max_calls 64

  @typedoc "Where an answer goes: `{pid, tag}` gets `{tag, answer}`."
  @type reply_to :: {pid(), term()}

  @typedoc "An option of `start_link/1`."
  @type option ::
          {:session, ExBashkit.Session.t() | [ExBashkit.Session.option()]}
          | {:pool, Pool.pool()}
          | {:idle_ttl_ms, pos_integer() | :infinity}
          | {:history, boolean()}

  @doc """
  Start a session process linked to the caller; returns at once (the
  sandbox session is built, or taken from the pool, in the new process, so
  a full pool never blocks the caller). Options: `:session` (options of
  `ExBashkit.Session.new/1`, or a session to serve) or `:pool`; `:idle_ttl_ms` (default
  `:infinity`); `:history` (default `false`: `true` serves the history tools,
  `ExBashkit.Tool.History`).
  A session that cannot be had (bad options, a pool over its queue) is an
  error answer to the first request, after which the process stops.
  """
  @spec start_link([option()]) :: {:ok, pid()}
  def start_link(opts) do
    :proc_lib.start_link(__MODULE__, :init_it, [opts])
  end

  @doc false
  def child_spec(opts),
    do: %{id: __MODULE__, start: {__MODULE__, :start_link, [opts]}, restart: :temporary}

  @doc "Hand `message` (decoded JSON) to `server`; the answer goes to `reply_to`."
  @spec dispatch(pid(), term(), reply_to()) :: :ok
  def dispatch(server, message, reply_to) do
    send(server, {:mcp_message, message, reply_to})
    :ok
  end

  @doc """
  The client waiting at `tag` is gone: cancel its request (its exec stops)
  and send nothing.
  """
  @spec abandon(pid(), term()) :: :ok
  def abandon(server, tag) do
    send(server, {:mcp_abandon, tag})
    :ok
  end

  @doc """
  Ask `server` to send `{tag, :drained}` to `reply_to` once every request
  handed to it before (by this process) is answered: what the stdio
  transport waits for at end of input.
  """
  @spec drain(pid(), reply_to()) :: :ok
  def drain(server, reply_to) do
    send(server, {:mcp_drain, reply_to})
    :ok
  end

  @doc "End `server` (an HTTP `DELETE`): its running calls are cancelled."
  @spec close(pid()) :: :ok
  def close(server) do
    GenServer.stop(server, {:shutdown, :closed})
  catch
    :exit, _ -> :ok
  end

  @doc false
  def init_it(opts) do
    Process.flag(:trap_exit, true)

    :proc_lib.init_ack({:ok, self()})

    state = %{
      session: nil,
      failure: nil,
      version: nil,
      tools: nil,
      calls: %{},
      queue: [],
      running: nil,
      drain: [],
      ttl: ttl(opts),
      history: Keyword.get(opts, :history, false)
    }

    case Keyword.fetch(opts, :pool) do
      {:ok, pool} ->
        # Returns only when the pool refuses: the loop below runs inside
        # the checkout, which resets and returns the session when it ends.
        {:error, :overloaded} = Pool.checkout(pool, &loop(%{state | session: &1}))
        loop(%{state | failure: "the server is at capacity: try again later"})

      :error ->
        case build(Keyword.get(opts, :session, [])) do
          {:ok, session} -> loop(%{state | session: session})
          {:error, message} -> loop(%{state | failure: message})
        end
    end
  end

  defp build(%ExBashkit.Session{} = session), do: {:ok, session}

  defp build(session_opts) do
    {:ok, ExBashkit.Session.new(session_opts)}
  rescue
    e -> {:error, "cannot start the sandbox session: " <> Exception.message(e)}
  end

  defp ttl(opts) do
    case Keyword.get(opts, :idle_ttl_ms, :infinity) do
      :infinity -> :infinity
      ms when is_integer(ms) and ms > 0 -> ms
    end
  end

  defp loop(state), do: :gen_server.enter_loop(__MODULE__, [], state, timeout(state))

  @impl GenServer
  def init(_opts), do: {:stop, :not_started_this_way}

  @impl GenServer
  def handle_info({:mcp_message, message, reply_to}, state) do
    state = message |> Protocol.classify() |> handle(reply_to, state)
    continue(state)
  end

  def handle_info({:mcp_drain, reply_to}, state),
    do: continue(%{state | drain: [reply_to | state.drain]})

  def handle_info({:mcp_abandon, tag}, state) do
    case Enum.find(state.calls, fn {_id, call} -> elem(call.reply_to, 1) == tag end) do
      {id, _call} -> continue(cancel(state, id, false))
      nil -> continue(state)
    end
  end

  def handle_info({:call_done, id, result}, %{running: id} = state) do
    {call, calls} = Map.pop(state.calls, id)
    reply(call.reply_to, Protocol.result(id, result))
    continue(run_next(%{state | calls: calls, running: nil}))
  end

  # A call's process ended without answering: say so to its client.
  def handle_info({:EXIT, pid, reason}, %{running: id} = state) when reason != :normal do
    case Map.pop(state.calls, id) do
      {%{pid: ^pid} = call, calls} ->
        answer = %{"error" => "internal error: the call ended: #{inspect(reason)}"}
        reply(call.reply_to, Protocol.result(id, Tools.result(answer, state.version)))
        continue(run_next(%{state | calls: calls, running: nil}))

      _ ->
        continue(state)
    end
  end

  def handle_info(:timeout, state) do
    if state.calls == %{}, do: {:stop, {:shutdown, :idle}, state}, else: continue(state)
  end

  def handle_info(_other, state), do: continue(state)

  @impl GenServer
  def terminate(_reason, state) do
    # The running call's death cancels its exec.
    with %{pid: pid} when is_pid(pid) <- state.calls[state.running], do: Process.exit(pid, :kill)
  end

  defp continue(%{version: :failed} = state), do: {:stop, {:shutdown, :no_session}, state}

  defp continue(%{drain: [_ | _], calls: calls} = state) when calls == %{},
    do: continue(drained(state))

  defp continue(state), do: {:noreply, state, timeout(state)}

  defp drained(%{drain: waiters} = state) do
    Enum.each(waiters, &send_answer(&1, :drained))
    %{state | drain: []}
  end

  defp timeout(%{calls: calls, ttl: ttl}) when calls == %{}, do: ttl
  defp timeout(_state), do: :infinity

  # -- messages ---------------------------------------------------------------

  defp handle({:request, id, method, params}, reply_to, state) do
    case request(method, params, id, reply_to, state) do
      {:reply, response, state} ->
        reply(reply_to, response)
        state

      {:noreply, state} ->
        state
    end
  end

  defp handle({:notification, "notifications/cancelled", params}, _reply_to, state) do
    case Map.get(params, "requestId") do
      id when is_map_key(state.calls, id) -> cancel(state, id, true)
      _ -> state
    end
  end

  defp handle({:notification, _method, _params}, _reply_to, state), do: state
  defp handle(:response, _reply_to, state), do: state

  defp handle({:invalid, id, message}, reply_to, state) do
    reply(reply_to, Protocol.error(id, :invalid_request, message))
    state
  end

  # The session could not be had: the first request learns why, then the
  # process stops.
  defp request(_method, _params, id, _reply_to, %{failure: failure} = state)
       when is_binary(failure),
       do: {:reply, Protocol.error(id, :internal_error, failure), %{state | version: :failed}}

  defp request("initialize", params, id, _reply_to, %{version: nil} = state) do
    version = Protocol.negotiate(Map.get(params, "protocolVersion"))

    result = %{
      "protocolVersion" => version,
      "capabilities" => %{"tools" => %{"listChanged" => false}},
      "serverInfo" => %{"name" => "ex_bashkit", "version" => vsn()},
      "instructions" => Tool.system_prompt(state.session)
    }

    # The tools a session has do not change: listed once, so that
    # `tools/list` never waits for a running exec.
    {:reply, Protocol.result(id, result),
     %{state | version: version, tools: Tools.list(state.session, history: state.history)}}
  end

  defp request("initialize", _params, id, _reply_to, state),
    do:
      {:reply, Protocol.error(id, :invalid_request, "the session is already initialized"), state}

  defp request("ping", _params, id, _reply_to, state),
    do: {:reply, Protocol.result(id, %{}), state}

  defp request(method, _params, id, _reply_to, %{version: nil} = state)
       when method in ["tools/list", "tools/call"],
       do: {:reply, Protocol.error(id, :invalid_request, "send initialize first"), state}

  defp request("tools/list", _params, id, _reply_to, state),
    do: {:reply, Protocol.result(id, %{"tools" => state.tools}), state}

  defp request("tools/call", params, id, reply_to, state) do
    name = Map.get(params, "name")
    arguments = Map.get(params, "arguments", %{})

    cond do
      not Tools.known?(name, history: state.history) ->
        {:reply, Protocol.error(id, :invalid_params, "unknown tool: #{inspect(name)}"), state}

      not is_map(arguments) ->
        {:reply, Protocol.error(id, :invalid_params, "arguments must be an object"), state}

      is_map_key(state.calls, id) ->
        {:reply, Protocol.error(id, :invalid_request, "request id #{inspect(id)} is in use"),
         state}

      map_size(state.calls) >= @max_calls ->
        message = "#{@max_calls} calls are already waiting: wait for their answers"
        {:reply, Protocol.error(id, :invalid_request, message), state}

      true ->
        {:noreply, queue_call(state, id, name, arguments, reply_to)}
    end
  end

  defp request(method, _params, id, _reply_to, state),
    do: {:reply, Protocol.error(id, :method_not_found, "method not found: #{method}"), state}

  # -- calls ------------------------------------------------------------------

  # Calls run one at a time, in arrival order: a `cd` or a file written by
  # one is there for the next, as in a shell.
  defp queue_call(state, id, name, arguments, reply_to) do
    call = %{pid: nil, name: name, arguments: arguments, reply_to: reply_to}
    run_next(%{state | calls: Map.put(state.calls, id, call), queue: state.queue ++ [id]})
  end

  defp run_next(%{running: nil, queue: [id | rest]} = state) do
    server = self()
    %{session: session, version: version} = state
    %{name: name, arguments: arguments} = state.calls[id]

    pid =
      spawn_link(fn ->
        send(server, {:call_done, id, Tools.call(session, name, arguments, version)})
      end)

    %{put_in(state.calls[id].pid, pid) | queue: rest, running: id}
  end

  defp run_next(state), do: state

  # Drop the call; a running one's process is killed (its death cancels
  # its exec). Its client is told when it is still there to hear it.
  defp cancel(state, id, tell?) do
    {call, calls} = Map.pop(state.calls, id)
    if tell?, do: send_answer(call.reply_to, :cancelled)

    if call.pid do
      Process.unlink(call.pid)
      Process.exit(call.pid, :kill)
      run_next(%{state | calls: calls, running: nil})
    else
      %{state | calls: calls, queue: List.delete(state.queue, id)}
    end
  end

  defp reply(reply_to, response), do: send_answer(reply_to, {:reply, response})

  defp send_answer({pid, tag}, answer), do: send(pid, {tag, answer})

  defp vsn do
    case Application.spec(:ex_bashkit, :vsn) do
      nil -> "0.0.0"
      vsn -> List.to_string(vsn)
    end
  end
end
