defmodule ExBashkit.Callbacks do
  @moduledoc false
  # The Elixir side of the protocol between a running script and the process
  # that asked for it (the Rust side is `native/ex_bashkit/src/callbacks.rs`).
  #
  # An exec NIF runs a quick script to its end (or its first back-call)
  # right there and returns; anything else goes on in the library's
  # interpreter threads. The calling process then waits in `await/4` for
  # messages tagged with the reference it created for this request (in the
  # node, a quick script's next message may come as the value of the NIF
  # call that polled it instead: `returned/4`):
  #
  #   {:ex_bashkit_reply, ref, {:ok, %Result{}} | {:error, %Error{} | message}}
  #       The final answer; exactly one per request (Rust guarantees it).
  #
  #   {:ex_bashkit_output, ref, {stdout_chunk, stderr_chunk}}
  #       Output of a streaming exec, in order, while it runs.
  #
  #   {:ex_bashkit_callback, ref, {call_id, request}}
  #       The script needs Elixir: `request` is
  #         {:builtin, name, args, stdin, env, cwd}   a custom builtin, or
  #         {:vfs, mount, op, path, extra}             a virtual_fs operation, or
  #         {:egress, method, url, headers}            an `:egress` decision.
  #       The waiting process runs it in a fresh *handler* process and goes
  #       back to waiting; it never runs user code itself.
  #
  # The handler (spawned and monitored by the waiting process, unlinked, so
  # nothing it does can take the caller down) runs the request's job
  # (`ExBashkit.Callbacks.Job`: the user's function, guarded), checks and
  # normalizes whatever it returned (`ExBashkit.Callbacks.Answer`:
  # shapes, listings, the session's `max_reply_bytes`) and sends it to the
  # waiting process, which answers through `ExBashkit.Backend.callback_reply/3`
  # (the NIF's `callback_reply/2` in the node, which resumes the script right
  # there; a frame to the worker otherwise). A back-call thus costs one
  # process and two messages (a separate runner process per back-call, as
  # before, cost 10-25 us more: bench/DECISIONS.md). In the node, a quick
  # script's messages come as NIF values instead of by mail: its back-call
  # as the exec's, and what follows an answer (the final reply, or the next
  # back-call) as `callback_reply`'s (`returned/4`).
  #
  # Failure model, the same for builtins, backends and `:egress` (whose
  # every failure answers `:deny`):
  #   * raise / throw / exit inside the function: caught in the handler and
  #     answered as a failure of that one command (exit 1, message on stderr);
  #   * the handler dies any other way (killed, linked crash, an exit of
  #     itself with reason `:normal`): its DOWN comes before any answer, and
  #     the failure is answered at once;
  #   * no answer within `builtin_timeout_ms`: the waiting process kills the
  #     handler, waits for its death, and answers a timeout (exit 124,
  #     `etimedout`). This is the only back-call timer (Rust waits for the
  #     answer, a cancel or the exec's own deadline).
  #   * the exec ends while handlers still run (its timeout, `cancel/1`):
  #     the waiting process kills each and waits for its death before it
  #     returns. No side effect of a handler happens after the caller got
  #     its answer.
  #   * a late answer finds nobody waiting and is dropped.
  #
  # Re-entrancy: a handler carries, in its process dictionary, the sessions
  # whose exec is waiting on it (the whole chain, for nested execs). An exec
  # on one of those sessions from inside the handler would wait forever for
  # the lock its own caller holds, so `ExBashkit.Session.exec/3` refuses it at
  # once with `{:error, _}`.

  alias ExBashkit.{Backend, Error, Result}
  alias ExBashkit.Callbacks.Job
  alias ExBashkit.Session.Defaults

  @chain_key :"$ex_bashkit_waiting_sessions"
  # The messages a NIF call may return instead of sending (`returned/4`).
  @returnable [:ex_bashkit_reply, :ex_bashkit_callback]
  # How long a killed handler may take to die (its DOWN).
  @stop_wait_ms 5_000

  @typedoc "What a waiting exec needs to serve back-calls (and to give up)."
  @type context :: %{
          resource: reference() | nil,
          location: Backend.location(),
          builtins: map(),
          virtual_fs: map(),
          egress: ExBashkit.Egress.decider() | nil,
          timeout: pos_integer(),
          max_reply_bytes: pos_integer(),
          give_up: give_up()
        }

  @typedoc """
  In the node, when the caller looks whether its exec is overdue (`at`,
  monotonic ms: its deadline and a slack) and how (`ask`, answering
  `{stdout, stderr}` once it has given up on it, `{:running, ms | nil}`
  if not due yet, `nil` if it has ended). See `ExBashkit.Backend.give_up/4`.
  """
  @type give_up ::
          %{at: integer(), timeout_ms: pos_integer(), ask: (() -> term())} | nil

  @doc false
  @spec no_callbacks() :: context()
  def no_callbacks do
    %{
      resource: nil,
      location: :in_node,
      builtins: %{},
      virtual_fs: %{},
      egress: nil,
      timeout: Defaults.get(:builtin_timeout_ms),
      max_reply_bytes: Defaults.get(:max_reply_bytes),
      give_up: nil
    }
  end

  @doc false
  # The sessions whose execs wait on this process (see "Re-entrancy"), for a
  # process that waits on an exec in this one's stead (`stream/3`'s pump).
  @spec waiting_chain() :: [reference()]
  def waiting_chain, do: Process.get(@chain_key, [])

  @doc false
  @spec put_waiting_chain([reference()]) :: :ok
  def put_waiting_chain([]), do: :ok

  def put_waiting_chain(chain) do
    Process.put(@chain_key, chain)
    :ok
  end

  @doc false
  # Whether this process is serving a back-call of a script on `resource`.
  @spec reentrant?(reference()) :: boolean()
  def reentrant?(resource) do
    # On every exec: a process that serves no back-call has no chain.
    case Process.get(@chain_key) do
      nil -> false
      chain -> :lists.member(resource, chain)
    end
  end

  @doc false
  # `:ok`, or the error of call `name` on `resource` made while serving a
  # back-call of that session's own running script: it would wait for the
  # lock its own caller holds, for ever.
  @spec not_reentrant(reference(), String.t()) :: :ok | {:error, String.t()}
  def not_reentrant(resource, name) do
    if reentrant?(resource) do
      {:error,
       "re-entrant #{name}: this session is running the script whose builtin or " <>
         "virtual_fs backend made this call; it cannot wait for its own script to end"}
    else
      :ok
    end
  end

  @typedoc "A request's final answer, as the interpreter sends it."
  @type outcome :: {:ok, Result.t()} | {:error, Error.t() | String.t()}

  @doc false
  # The final answer as `exec/3` returns it.
  @spec result(outcome()) :: {:ok, Result.t()} | {:error, Error.t()}
  def result({:ok, %Result{}} = ok), do: ok
  def result({:error, _} = error), do: Error.wrap(error)

  @doc false
  # Wait for the final answer, handing output chunks to `on_output`.
  # `returned` is a message of this request that the NIF call returned
  # instead of sending (`ExBashkit.Backend.exec/5`): it comes first. The
  # request is new, so it has no handlers yet; they are kept as loop state.
  #
  # In a worker, a streaming exec's chunks are also kept until the answer,
  # for one case: an error that carries no output of its own although some
  # was streamed. That is the answer of a worker's owner when its OS
  # process did not answer by the deadline (hung, or starved of CPU) or
  # died: the script's output so far is in that OS process, and what the
  # caller already saw is all that is left of it. (What is kept is bounded
  # by the session's output caps, as the result's own output is; in the
  # node every answer comes from the interpreter, so nothing is kept.)
  #
  # In the node, past the exec's deadline (and a slack) with no answer, a
  # command that does not check its token still runs (jq's `reduce`, a
  # large `sort`): nobody else would answer, so this process asks to give
  # up on it (`context.give_up`). Once given up, nothing more of that exec
  # is sent here; the caller gets the error with its output so far (or its
  # own answer, if that came just before), and the script stops when its
  # command does.
  @spec await(reference(), context(), (binary(), binary() -> any()), tuple() | nil) ::
          {:ok, Result.t()} | {:error, Error.t()}
  def await(ref, context, on_output \\ fn _, _ -> :ok end, returned \\ nil) do
    streamed = if match?({:process, _, _}, context.location), do: {[], []}
    await_loop(ref, context, on_output, returned(ref, context, %{}, returned), streamed)
  end

  defp await_loop(ref, context, on_output, {event, handlers}, streamed) do
    case step(event) do
      {:output, stdout, stderr} ->
        on_output.(stdout, stderr)
        next = event(ref, context, handlers)
        await_loop(ref, context, on_output, next, keep(streamed, stdout, stderr))

      {:done, outcome} ->
        with_streamed(outcome, streamed)

      :give_up ->
        give_up(ref, context, on_output, handlers, streamed)
    end
  end

  # Past the time to look: give up on the exec if it is due.
  defp give_up(ref, context, on_output, handlers, streamed) do
    %{ask: ask, timeout_ms: ms} = give_up = context.give_up

    case ask.() do
      {stdout, stderr} when is_binary(stdout) and is_binary(stderr) ->
        stop_handlers(handlers)
        given_up(ref, on_output, Error.stopped({:timeout, ms}, {stdout, stderr}))

      # Not due yet (see `ExBashkit.Deadline.look_again_ms/1`).
      {:running, left} ->
        at = System.monotonic_time(:millisecond) + ExBashkit.Deadline.look_again_ms(left)
        context = %{context | give_up: %{give_up | at: at}}
        await_loop(ref, context, on_output, event(ref, context, handlers), streamed)

      # It has just ended: its answer is on its way.
      nil ->
        context = %{context | give_up: nil}
        await_loop(ref, context, on_output, event(ref, context, handlers), streamed)
    end
  end

  # The exec was given up: what it sent before is all that comes. Its own
  # answer, if it came in between, wins over `error`.
  defp given_up(ref, on_output, error) do
    receive do
      {:ex_bashkit_output, ^ref, {stdout, stderr}} ->
        on_output.(stdout, stderr)
        given_up(ref, on_output, error)

      {:ex_bashkit_callback, ^ref, _request} ->
        given_up(ref, on_output, error)

      {:ex_bashkit_reply, ^ref, reply} ->
        result(reply)
    after
      0 -> {:error, error}
    end
  end

  defp keep(nil, _stdout, _stderr), do: nil
  defp keep({out, err}, stdout, stderr), do: {[out | stdout], [err | stderr]}

  defp with_streamed({:error, %Error{stdout: "", stderr: ""} = error}, {out, err})
       when out != [] or err != [] do
    stdout = IO.iodata_to_binary(out)
    stderr = IO.iodata_to_binary(err)
    {:error, %{error | stdout: stdout, stderr: stderr}}
  end

  defp with_streamed(outcome, _streamed), do: outcome

  @doc false
  # Wait for the answer of a request that is not an exec (state, reset, ...).
  @spec await_reply(reference()) :: term()
  def await_reply(ref) do
    receive do
      {:ex_bashkit_reply, ^ref, reply} ->
        Process.demonitor(ref, [:flush])
        reply

      {:DOWN, ^ref, :process, _, reason} ->
        {:error, worker_down(reason)}
    end
  end

  # For a session in a worker process, `ref` monitors the worker's owner.
  defp worker_down(reason), do: Error.new(:crashed, "worker process exited: #{inspect(reason)}")

  @doc false
  # Wait for the raw answer of a job that is not an exec but may make
  # back-calls while it runs (a search walking `:virtual_fs` backends).
  @spec await_reply(reference(), context()) :: term()
  def await_reply(ref, context), do: await_reply_loop(ref, context, event(ref, context, %{}))

  defp await_reply_loop(ref, context, {event, handlers}) do
    case event do
      {:reply, reply} -> reply
      {:down, reason} -> {:error, worker_down(reason)}
      {:output, _, _} -> await_reply_loop(ref, context, event(ref, context, handlers))
    end
  end

  defp step({:reply, reply}), do: {:done, result(reply)}
  defp step({:down, reason}), do: {:done, {:error, worker_down(reason)}}
  defp step({:output, _stdout, _stderr} = output), do: output
  defp step(:give_up), do: :give_up

  # Serve back-calls of request `ref` until its answer, its worker's death
  # or an output chunk arrives: `{event, handlers}`, `handlers` being the
  # request's running handlers, `pid => %{mref, reply, on_failure,
  # deadline}`. Every handler still running is stopped before the answer
  # (or the death) is returned.
  defp event(ref, context, handlers) do
    receive do
      {:ex_bashkit_reply, ^ref, reply} ->
        Process.demonitor(ref, [:flush])
        {{:reply, reply}, stop_handlers(handlers)}

      {:DOWN, ^ref, :process, _, reason} ->
        {{:down, reason}, stop_handlers(handlers)}

      {:ex_bashkit_output, ^ref, {stdout, stderr}} ->
        {{:output, stdout, stderr}, handlers}

      {:ex_bashkit_callback, ^ref, {call_id, request}} ->
        event(ref, context, dispatch(handlers, call_id, request, context))

      {:ex_bashkit_answer, pid, answer} when is_map_key(handlers, pid) ->
        {%{mref: mref, reply: reply}, handlers} = Map.pop!(handlers, pid)
        Process.demonitor(mref, [:flush])
        returned(ref, context, handlers, reply.(answer))

      # A handler that ended without answering (even with reason `:normal`).
      {:DOWN, _mref, :process, pid, reason} when is_map_key(handlers, pid) ->
        {answered, handlers} = fail(handlers, pid, {:died, reason})
        returned(ref, context, handlers, answered)

      # A handler calling this process, which waits here and will not answer
      # until the script ends, which waits for the handler: a deadlock. The
      # call is dropped (its handler is killed) and that command fails now.
      {:"$gen_call", {pid, _tag}, _request} when is_map_key(handlers, pid) ->
        {answered, handlers} = fail(handlers, pid, :reentrant)
        returned(ref, context, handlers, answered)
    after
      wait_ms(handlers, context.give_up) ->
        now = System.monotonic_time(:millisecond)

        if due?(context.give_up, now),
          do: {:give_up, handlers},
          else: expire(ref, context, handlers, now)
    end
  end

  defp due?(%{at: at}, now), do: at <= now
  defp due?(nil, _now), do: false

  # Fail the back-calls whose handlers are past their deadline.
  defp expire(ref, context, handlers, now) do
    expired = for {pid, %{deadline: deadline}} <- handlers, deadline <= now, do: pid

    {kept, handlers} =
      Enum.reduce(expired, {nil, handlers}, fn pid, {kept, handlers} ->
        {answered, handlers} = fail(handlers, pid, {:timeout, context.timeout})
        {kept_message(answered, kept), handlers}
      end)

    returned(ref, context, handlers, kept)
  end

  # What a NIF call returned: in the node, a quick script's next message
  # (its back-call, from the exec; its final reply or next back-call, from
  # the `callback_reply` that resumed it) comes as that call's value
  # instead of by mail, and is handled here as `event/3` handles it in the
  # mailbox. Anything else (`true`, `nil`, ...) carried no message.
  defp returned(ref, _context, handlers, {:ex_bashkit_reply, ref, reply}),
    do: {{:reply, reply}, stop_handlers(handlers)}

  defp returned(ref, context, handlers, {:ex_bashkit_callback, ref, {call_id, request}}),
    do: event(ref, context, dispatch(handlers, call_id, request, context))

  # Another request's (not expected): to the mailbox, where it would be.
  defp returned(ref, context, handlers, {tag, _other, _payload} = message)
       when tag in @returnable do
    send(self(), message)
    event(ref, context, handlers)
  end

  defp returned(ref, context, handlers, _nothing), do: event(ref, context, handlers)

  # Of several back-calls answered at once, the one whose call returned a
  # message (one at most: the script goes on in the first such call).
  defp kept_message({tag, _, _} = message, _kept)
       when tag in @returnable,
       do: message

  defp kept_message(_answered, kept), do: kept

  # The handler runs the user's function in a process of its own, spawned
  # and monitored by this process, which never runs user code itself. It
  # carries the re-entrancy chain and `$callers` (as `Task` sets it: Ecto
  # sandbox and Mox allowances reach the handler through the process
  # waiting in exec) and hands its answer here; this process passes it on.
  # Returns `handlers` with the new one.
  defp dispatch(handlers, call_id, request, context) do
    chain = [context.resource | Process.get(@chain_key, [])]
    callers = [self() | Process.get(:"$callers", [])]
    waiter = self()
    {job, on_failure} = Job.of(request, context)

    {pid, mref} =
      spawn_monitor(fn ->
        Process.put(@chain_key, chain)
        Process.put(:"$callers", callers)
        send(waiter, {:ex_bashkit_answer, self(), job.()})
      end)

    handler = %{
      mref: mref,
      reply: &Backend.callback_reply(context.location, call_id, &1),
      on_failure: on_failure,
      deadline: System.monotonic_time(:millisecond) + context.timeout
    }

    # No `:erlang.yield/0` here to let the handler answer before `event/3`
    # looks: it saved the receive's timer (1.5 us), but left two runnable
    # processes on this scheduler at every back-call, so the VM woke the
    # other scheduler, which took one of them: a round trip then spanned
    # both (up to 2x its time and CPU; bench/DECISIONS.md).
    Map.put(handlers, pid, handler)
  end

  # Answer handler `pid`'s back-call with `failure`, once the handler is
  # dead: killed here unless its DOWN already came. Returns what the
  # answer returned (see `returned/4`) and the handlers without it.
  defp fail(handlers, pid, failure) do
    {%{mref: mref, reply: reply, on_failure: on_failure}, handlers} = Map.pop!(handlers, pid)
    if not match?({:died, _}, failure), do: kill(pid, mref)
    {reply.(on_failure.(failure)), handlers}
  end

  # How long the caller may wait before the nearest handler deadline, or
  # the time to look whether to give up.
  defp wait_ms(handlers, nil) when handlers == %{}, do: :infinity

  defp wait_ms(handlers, give_up) do
    first = if give_up, do: give_up.at
    nearest = Enum.reduce(handlers, first, fn {_, %{deadline: d}}, acc -> min(d, acc || d) end)
    max(nearest - System.monotonic_time(:millisecond), 0)
  end

  # The request is answered: stop every handler still running, so no
  # handler outlives the answer. Returns no handlers.
  defp stop_handlers(handlers) when handlers == %{}, do: handlers

  defp stop_handlers(handlers) do
    Enum.each(handlers, fn {pid, %{mref: mref}} -> kill(pid, mref) end)
    %{}
  end

  # Kill the handler and return only once it is dead (`:kill` cannot be
  # trapped, so the DOWN comes), dropping an answer it sent meanwhile.
  defp kill(pid, mref) do
    Process.exit(pid, :kill)

    receive do
      {:DOWN, ^mref, :process, ^pid, _} -> :ok
    after
      @stop_wait_ms -> Process.demonitor(mref, [:flush])
    end

    receive do
      {:ex_bashkit_answer, ^pid, _} -> :ok
    after
      0 -> :ok
    end
  end
end
