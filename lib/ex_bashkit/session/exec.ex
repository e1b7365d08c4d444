defmodule ExBashkit.Session.Exec do
  @moduledoc false
  # The exec pipeline behind `ExBashkit.Session.exec/3` and `stream/3`:
  # validate the call's options, refuse re-entrant calls, hand the script to
  # the backend (in-node NIF or worker process), then wait in
  # `ExBashkit.Callbacks`, which also serves the script's back-calls.

  alias ExBashkit.{Backend, Callbacks, Error, Session}
  alias ExBashkit.Session.{Defaults, Fs, StreamPump}

  # A call's native options when it gives none.
  @no_options %{stdin: nil, stream: false, timeout_ms: nil, track_changes: false}
  @bashkit_timeout_ms Defaults.bashkit_limit(:timeout_ms)

  @doc false
  @spec run(Session.t(), term(), term()) :: {:ok, ExBashkit.Result.t()} | {:error, Error.t()}
  def run(%Session{} = session, script, opts) do
    script = script!(script, "exec/3")
    {call, forward} = exec_options!(opts)

    run_call(session, script, call, forwarder(forward), nil)
  end

  @doc false
  # Submit the validated `call` and wait for its outcome in this process
  # (serving back-calls); `on_output` gets the streamed chunks, `on_submit`
  # (if any) the exec's id (what `Backend.cancel_exec/3` takes) before the
  # wait.
  #
  # An exec answered within its call (in the node, most short scripts)
  # takes as few steps as it can here: each is paid with the caches that
  # the interpreter has just filled with its own code and data, at several
  # times what it costs in a loop of its own (bench/DECISIONS.md,
  # "Fewer steps after an exec").
  @spec run_call(
          Session.t(),
          String.t(),
          map(),
          (binary(), binary() -> any()),
          (pos_integer() -> any()) | nil
        ) ::
          {:ok, ExBashkit.Result.t()} | {:error, Error.t()}
  def run_call(%Session{} = session, script, call, on_output, on_submit) do
    case submit(session, script, call) do
      {:done, id, outcome} ->
        submitted(on_submit, id)
        Callbacks.result(outcome)

      {:ok, ref, id} ->
        submitted(on_submit, id)
        Callbacks.await(ref, awaiting(session, call, id), on_output)

      {:ok, ref, id, message} ->
        submitted(on_submit, id)
        Callbacks.await(ref, awaiting(session, call, id), on_output, message)

      {:error, _} = error ->
        Error.wrap(error)
    end
  end

  defp submitted(nil, _id), do: :ok
  defp submitted(on_submit, id), do: on_submit.(id)

  @doc false
  @spec stream(Session.t(), term(), term()) :: Enumerable.t()
  def stream(%Session{} = session, script, opts) do
    script = script!(script, "stream/3")
    opts = if is_map(opts), do: Map.to_list(opts), else: opts

    if Keyword.has_key?(opts, :stream_to),
      do: raise(ArgumentError, "stream/3 does not take :stream_to")

    {call, nil} = exec_options!(opts)
    call = %{call | stream: true}
    # The exec is waited on (and its back-calls served) by a pump process,
    # so that a slow consumer cannot stall the script's builtins.
    cancel = &Backend.cancel_exec(session.resource, session.location, &1)
    start = fn -> session |> submit(script, call) |> to_mailbox() end
    context_for = &awaiting(session, call, &1)

    Stream.resource(
      fn ->
        case StreamPump.start(start, context_for, cancel) do
          {:ok, pump} -> {:running, pump}
          {:error, _} = error -> {:failed, elem(Error.wrap(error), 1)}
        end
      end,
      fn
        {:running, pump} ->
          case StreamPump.next(pump) do
            {:output, out, err} -> {chunks(out, err), {:running, pump}}
            {:done, {:ok, result}} -> {[{:exit, result.exit_code}], :done}
            {:done, {:error, error}} -> {[{:error, error}], :done}
          end

        {:failed, error} ->
          {[{:error, error}], :done}

        :done ->
          {:halt, :done}
      end,
      fn
        # Halted early: stop the script and collect its answer, so nothing
        # is left behind in the mailbox.
        {:running, pump} ->
          StreamPump.halt(pump, cancel)

        _ ->
          :ok
      end
    )
  end

  defp chunks("", ""), do: []
  defp chunks(out, ""), do: [{:stdout, out}]
  defp chunks("", err), do: [{:stderr, err}]
  defp chunks(out, err), do: [{:stdout, out}, {:stderr, err}]

  # Validate, then hand the script to the interpreter threads. In the node,
  # the exec NIF checks that the script is UTF-8 where it reads it.
  defp submit(%Session{resource: resource, location: :in_node}, script, call) do
    with :ok <- Callbacks.not_reentrant(resource, "exec"),
         do: Backend.exec(resource, :in_node, script, call, nil)
  end

  defp submit(%Session{resource: resource, location: location} = session, script, call) do
    with :ok <- Callbacks.not_reentrant(resource, "exec"),
         :ok <- check_script(script) do
      Backend.exec(resource, location, script, call, meta(session, call))
    end
  end

  # The exec's deadline: the worker's owner answers by it (`Backend.exec/5`),
  # and so does a caller in the node (`awaiting/3`). The call's
  # `:timeout_ms` counts from the exec's submission; the session's own
  # counts from its start (`:from_start`), after any exec ahead of it. It
  # reads no clock, so it is worked out where it is needed, not carried.
  defp meta(session, call) do
    ms = deadline_ms(call.timeout_ms, session.timeout_ms)
    %{timeout_ms: ms, from_start: ms != call.timeout_ms}
  end

  # What exec `id`'s caller waits with: the session's back-call context,
  # and in the node how it gives up on a command that ignores its deadline.
  defp awaiting(session, call, id) do
    give_up = Backend.give_up(session.resource, session.location, id, meta(session, call))
    %{callback_context(session) | give_up: give_up}
  end

  # An exec that completed within its call, as if its answer had come by
  # message: for a process that waits on the messages (`StreamPump`).
  defp to_mailbox({:done, id, outcome}) do
    ref = make_ref()
    send(self(), {:ex_bashkit_reply, ref, outcome})
    {:ok, ref, id}
  end

  defp to_mailbox({:ok, ref, id, message}) do
    send(self(), message)
    {:ok, ref, id}
  end

  defp to_mailbox(submitted), do: submitted

  @doc false
  # When the exec must be answered (by a worker's owner, or in the node by
  # its caller: `Backend.give_up/4`): the tighter of the call's and the
  # session's timeouts. A session without one has bashkit's default, which
  # its interpreter applies too: without it here, a command that never
  # reaches a command boundary would never be answered.
  @spec deadline_ms(pos_integer() | nil, pos_integer() | nil) :: pos_integer()
  def deadline_ms(call, nil), do: deadline_ms(call, @bashkit_timeout_ms)
  def deadline_ms(nil, session), do: session
  def deadline_ms(call, session), do: min(call, session)

  defp forwarder(nil), do: fn _, _ -> :ok end

  defp forwarder({pid, tag}) do
    fn stdout, stderr ->
      if stdout != "", do: send(pid, {tag, {:stdout, stdout}})
      if stderr != "", do: send(pid, {tag, {:stderr, stderr}})
    end
  end

  @doc false
  # What a request of `session` waits with to serve its back-calls.
  @spec callback_context(Session.t()) :: Callbacks.context()
  def callback_context(session) do
    %{
      resource: session.resource,
      location: session.location,
      builtins: session.builtins,
      virtual_fs: session.virtual_fs,
      egress: session.egress,
      timeout: session.callback_timeout_ms,
      max_reply_bytes: session.max_reply_bytes,
      give_up: nil
    }
  end

  @doc false
  # Scripts are strings; anything else is a programmer error with a message.
  @spec script!(term(), String.t()) :: String.t()
  def script!(script, _fun) when is_binary(script), do: script

  def script!(script, fun) do
    raise ArgumentError,
          "#{fun}: the script must be a string (a binary), got: #{inspect(script)}" <>
            if(is_list(script), do: " (a charlist? use a \"double-quoted\" string)", else: "")
  end

  # `{native_call_options, forward_target | nil}`. Options may be a keyword
  # list or a map, like `new/1`'s.
  @doc false
  @spec exec_options!(term()) :: {map(), {pid(), term()} | nil}
  def exec_options!([]), do: {@no_options, nil}
  def exec_options!(opts) when is_map(opts), do: exec_options!(Map.to_list(opts))

  def exec_options!(opts) when not is_list(opts),
    do:
      raise(ArgumentError, "exec options must be a keyword list or a map, got: #{inspect(opts)}")

  def exec_options!(opts) do
    Enum.reduce(opts, {@no_options, nil}, fn
      {:stdin, data}, {call, fwd} ->
        case Fs.iodata_to_binary(data) do
          {:ok, bin} ->
            {%{call | stdin: bin}, fwd}

          :error ->
            raise ArgumentError, "exec option :stdin must be iodata, got: #{inspect(data)}"
        end

      {:timeout_ms, ms}, {call, fwd} when is_integer(ms) and ms >= 1 ->
        {%{call | timeout_ms: Defaults.clamp_u64(ms)}, fwd}

      {:timeout_ms, :infinity}, {call, fwd} ->
        {%{call | timeout_ms: nil}, fwd}

      {:track_changes, flag}, {call, fwd} when is_boolean(flag) ->
        {%{call | track_changes: flag}, fwd}

      {:stream_to, pid}, {call, _} when is_pid(pid) ->
        {%{call | stream: true}, {pid, :ex_bashkit_output}}

      {:stream_to, {pid, tag}}, {call, _} when is_pid(pid) ->
        {%{call | stream: true}, {pid, tag}}

      {:timeout_ms, value}, _ ->
        raise ArgumentError,
              "exec option :timeout_ms must be a positive integer or :infinity, got: #{inspect(value)}"

      {:track_changes, value}, _ ->
        raise ArgumentError,
              "exec option :track_changes must be a boolean, got: #{inspect(value)}"

      {:stream_to, value}, _ ->
        raise ArgumentError,
              "exec option :stream_to must be a pid or {pid, tag}, got: #{inspect(value)}"

      other, _ ->
        raise ArgumentError,
              "unknown exec option: #{inspect(other)} (valid: :stdin, :timeout_ms, " <>
                ":stream_to, :track_changes)"
    end)
  end

  @doc false
  # Scripts reach the interpreter as UTF-8 text.
  @spec check_script(String.t()) :: :ok | {:error, String.t()}
  def check_script(script) do
    if String.valid?(script),
      do: :ok,
      else: {:error, "script is not valid UTF-8"}
  end
end
