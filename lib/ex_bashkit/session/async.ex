defmodule ExBashkit.Session.Async do
  @moduledoc false
  # `ExBashkit.Session.exec_async/3` and `cancel/2`.
  #
  # The exec needs a process that waits for it and serves its back-calls
  # (`ExBashkit.Callbacks`); the caller must stay free. So two processes,
  # neither linked to the caller:
  #
  #   * the *guard* owns the request's reference, an alias (`:erlang.alias/0`)
  #     so that `cancel/2` reaches it from any process; it monitors the
  #     caller (death cancels the exec) and the waiter;
  #   * the *waiter* runs the exec like `exec/3` would (it is the exec's
  #     caller for the backend), sends the caller
  #     `{:ex_bashkit, ref, {:stdout | :stderr, chunk}}` when streaming and
  #     then `{:ex_bashkit, ref, outcome}`, and exits.
  #
  # The guard tells the backend to cancel the exec by its id, so a cancelled
  # exec still answers with the output it had written (`%Error{}`).
  #
  # `start/3` returns once the exec is submitted (the guard hands back the
  # reference when the waiter reports the exec's id, or ends): an exec the
  # caller submits next is queued behind it on the session, as two `exec/3`
  # calls in a row would be.

  alias ExBashkit.{Backend, Error, Session}
  alias ExBashkit.Session.Exec

  # How long `start/3` waits for the guard to hand back its reference (it
  # does so once the exec is submitted: a quick script has run by then, any
  # other is queued or has run one time slice).
  @ack_timeout_ms 5_000

  @doc false
  @spec start(Session.t(), term(), term()) :: {:ok, reference()}
  def start(%Session{} = session, script, opts) do
    script = Exec.script!(script, "exec_async/3")
    {stream?, opts} = stream_option!(opts)
    {call, nil} = Exec.exec_options!(opts)
    call = %{call | stream: stream?}
    caller = self()
    callers = [caller | Process.get(:"$callers", [])]
    ack = make_ref()

    {pid, mon} =
      spawn_monitor(fn -> guard(caller, callers, ack, session, script, call, stream?) end)

    receive do
      {^ack, ref} ->
        Process.demonitor(mon, [:flush])
        {:ok, ref}

      {:DOWN, ^mon, :process, ^pid, reason} ->
        raise "exec_async/3: the exec's process exited at start: #{inspect(reason)}"
    after
      @ack_timeout_ms ->
        Process.exit(pid, :kill)
        Process.demonitor(mon, [:flush])
        raise "exec_async/3: the exec's process did not start within #{@ack_timeout_ms} ms"
    end
  end

  @doc false
  @spec cancel(reference()) :: :ok
  def cancel(ref) when is_reference(ref) do
    # An alias no longer active (the exec is over) drops the message.
    send(ref, {:ex_bashkit_cancel, ref})
    :ok
  end

  defp stream_option!(opts) when is_map(opts), do: stream_option!(Map.to_list(opts))

  defp stream_option!(opts) when is_list(opts) do
    if Keyword.has_key?(opts, :stream_to),
      do: raise(ArgumentError, "exec_async/3 does not take :stream_to (use stream: true)")

    case Keyword.pop(opts, :stream, false) do
      {flag, rest} when is_boolean(flag) ->
        {flag, rest}

      {other, _} ->
        raise ArgumentError,
              "exec_async/3 option :stream must be a boolean, got: #{inspect(other)}"
    end
  end

  defp stream_option!(opts),
    do:
      raise(ArgumentError, "exec options must be a keyword list or a map, got: #{inspect(opts)}")

  # -- the guard -------------------------------------------------------------

  defp guard(caller, callers, ack, session, script, call, stream?) do
    ref = :erlang.alias()
    caller_mon = Process.monitor(caller)
    guard = self()

    {waiter, waiter_mon} =
      spawn_monitor(fn ->
        Process.put(:"$callers", callers)
        on_output = if stream?, do: &send_output(caller, ref, &1, &2), else: fn _, _ -> :ok end
        on_submit = &send(guard, {:exec_id, ref, &1})
        outcome = Exec.run_call(session, script, call, on_output, on_submit)
        send(caller, {:ex_bashkit, ref, outcome})
      end)

    state = %{
      ref: ref,
      session: session,
      caller: caller,
      caller_mon: caller_mon,
      waiter: waiter,
      waiter_mon: waiter_mon,
      id: nil,
      cancel?: false,
      ack: ack
    }

    loop(state)
  end

  defp loop(%{ref: ref, caller_mon: caller_mon, waiter_mon: waiter_mon} = state) do
    receive do
      {:exec_id, ^ref, id} ->
        state = acknowledge(%{state | id: id})
        if state.cancel?, do: cancel_exec(state)
        loop(state)

      {:ex_bashkit_cancel, ^ref} ->
        loop(request_cancel(state))

      {:DOWN, ^caller_mon, :process, _, _} ->
        loop(request_cancel(state))

      # The submit failed (its error is already on its way to the caller).
      {:DOWN, ^waiter_mon, :process, _, :normal} ->
        acknowledge(state)
        :erlang.unalias(ref)

      {:DOWN, ^waiter_mon, :process, _, reason} ->
        acknowledge(state)
        :erlang.unalias(ref)
        message = "exec_async/3: the process waiting for the exec exited: #{inspect(reason)}"
        send(state.caller, {:ex_bashkit, ref, {:error, %Error{message: message}}})
    end
  end

  # Hand the reference to the caller, once: `start/3` then returns.
  defp acknowledge(%{ack: nil} = state), do: state

  defp acknowledge(%{ack: ack} = state) do
    send(state.caller, {ack, state.ref})
    %{state | ack: nil}
  end

  defp request_cancel(%{cancel?: true} = state), do: state

  defp request_cancel(state) do
    state = %{state | cancel?: true}
    if state.id, do: cancel_exec(state)
    state
  end

  defp cancel_exec(%{session: session, id: id}),
    do: Backend.cancel_exec(session.resource, session.location, id)

  defp send_output(caller, ref, stdout, stderr) do
    if stdout != "", do: send(caller, {:ex_bashkit, ref, {:stdout, stdout}})
    if stderr != "", do: send(caller, {:ex_bashkit, ref, {:stderr, stderr}})
  end
end
