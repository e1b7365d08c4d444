defmodule ExBashkit.Server.Op do
  @moduledoc false
  # One request of an `ExBashkit.Server`, run against its session in a
  # short-lived *runner* process linked to the server, one at a time, in
  # arrival order. The server process never waits for the interpreter, so
  # `cancel/1` and caller monitoring stay responsive while a script runs, and
  # back-calls (builtins, virtual_fs) are dispatched by the runner.
  #
  # The runner, in this order:
  #   1. runs the request through the public `ExBashkit.Session` API (an
  #      exception there, e.g. a malformed option, becomes the reply
  #      `{@raise, exception}`, re-raised in the caller);
  #   2. if the request can change the session and the server checkpoints
  #      by snapshots (it runs away from its home node), takes a keyed
  #      snapshot and stores it (`ExBashkit.Server.Checkpoints`), so a caller
  #      that has its answer knows the checkpoint holds it;
  #   3. delivers the answer (a `GenServer.reply/2`, or the final message of a
  #      stream) and tells the server `{:op_done, runner}`.

  require Logger

  alias ExBashkit.Server.Checkpoints
  alias ExBashkit.Session

  @raise :"$ex_bashkit_raise"
  @mutating_fs [:write_file, :mkdir, :remove, :rename]
  @reading_fs [:read_file, :list_dir, :stat]

  @typedoc """
  Where a runner reports, how it checkpoints (`key: nil`: it does not) and
  whether it commits after a change (`undo`).
  """
  @type context :: %{
          server: pid(),
          key: binary() | nil,
          home: node(),
          id: term(),
          undo: boolean()
        }

  @doc false
  @spec raise_tag() :: atom()
  def raise_tag, do: @raise

  @doc false
  # Whether `request` is one the server queues and runs through a runner.
  @spec queued?(term()) :: boolean()
  def queued?({:exec, script, opts}) when is_binary(script) and is_list(opts), do: true

  def queued?({:stream, script, opts, {consumer, tag}})
      when is_binary(script) and is_list(opts) and is_pid(consumer) and is_reference(tag),
      do: true

  def queued?(request) when request in [:state, :reset], do: true
  def queued?({:snapshot, opts}) when is_list(opts), do: true
  def queued?({:restore, bytes, opts}) when is_binary(bytes) and is_list(opts), do: true
  def queued?({:fs, fun, args}) when fun in @mutating_fs or fun in @reading_fs, do: is_list(args)
  def queued?({:migrate, node}) when is_atom(node), do: true
  def queued?({:commit, meta}) when is_map(meta), do: true
  def queued?({:checkout, _id}), do: true
  def queued?({:log, opts}) when is_list(opts), do: true
  def queued?({:diff, _from, _to}), do: true
  def queued?(:undo), do: true
  def queued?(_), do: false

  @doc false
  # The process whose death makes `request` moot: a stream's consumer, or
  # the caller.
  @spec owner(term(), GenServer.from()) :: pid()
  def owner({:stream, _, _, {consumer, _tag}}, _from), do: consumer
  def owner(_request, {caller, _}), do: caller

  @doc false
  # Whether cancelling the session stops this request (it runs a script).
  @spec script?(term()) :: boolean()
  def script?({:exec, _, _}), do: true
  def script?({:stream, _, _, _}), do: true
  def script?(_), do: false

  @doc false
  # Start a runner for `request`, which arrived at `arrived_ms` (the server's
  # monotonic clock) from `from`.
  @spec start(term(), GenServer.from(), integer(), Session.t(), context()) :: pid()
  def start(request, from, arrived_ms, session, context) do
    spawn_link(fn ->
      reply = run(request, from, arrived_ms, session, context.server)

      if changing?(request, reply) and context.undo,
        do: ExBashkit.Session.History.commit(session, %{}, true)

      if mutating?(request, reply), do: checkpoint(session, context)
      deliver(request, from, reply)
      send(context.server, {:op_done, self()})
    end)
  end

  @doc false
  # Store a keyed snapshot of `session` as the server's checkpoint.
  @spec checkpoint(Session.t(), context()) :: :ok
  def checkpoint(_session, %{key: nil}), do: :ok

  def checkpoint(session, %{key: key, home: home, id: id}) do
    case Session.snapshot(session, key: key) do
      {:ok, bytes} ->
        Checkpoints.put(home, id, key, bytes)

      {:error, message} ->
        Logger.warning(
          "ExBashkit.Server: checkpoint not taken (#{message}); the previous one stays"
        )
    end
  end

  defp run(request, from, arrived_ms, session, server) do
    do_run(request, from, arrived_ms, session, server)
  rescue
    exception -> {@raise, exception}
  end

  # `:timeout_ms` of an exec counts from its arrival at the server, as it
  # counts from the call for `Session.exec/3`: time in the queue included.
  defp do_run({:exec, script, opts}, _from, arrived_ms, session, _server) do
    case remaining(opts, arrived_ms) do
      :expired -> queue_timeout()
      opts -> Session.run(session, script, opts)
    end
  end

  defp do_run({:stream, script, opts, target}, from, arrived_ms, session, server) do
    GenServer.reply(from, {:ok, server})

    case remaining(opts, arrived_ms) do
      :expired ->
        queue_timeout()

      opts ->
        Session.run(session, script, [{:stream_to, target} | opts])
    end
  end

  # Every answer in its structured form (`%ExBashkit.Error{}`): the
  # server's public calls give the message or raise it, as the session's do.
  defp do_run(:state, _from, _arrived, session, _server),
    do: Session.Lifecycle.state(session, [])

  defp do_run(:reset, _from, _arrived, session, _server),
    do: Session.Lifecycle.reset(session, [])

  defp do_run({:snapshot, opts}, _from, _arrived, session, _server),
    do: Session.Snapshot.take(session, opts)

  defp do_run({:restore, bytes, opts}, _from, _arrived, session, _server),
    do: Session.Snapshot.restore(session, bytes, opts)

  defp do_run({:fs, fun, args}, _from, _arrived, session, _server),
    do: apply(Session.Fs, fun, [session | args])

  defp do_run({:commit, meta}, _from, _arrived, session, _server),
    do: Session.commit(session, meta)

  defp do_run({:checkout, id}, _from, _arrived, session, _server),
    do: Session.checkout(session, id)

  defp do_run({:log, opts}, _from, _arrived, session, _server), do: Session.log(session, opts)

  defp do_run({:diff, from, to}, _from, _arrived, session, _server),
    do: Session.diff(session, from, to)

  defp do_run(:undo, _from, _arrived, session, _server) do
    case Session.log(session, limit: 1) do
      {:ok, [%{parents: [parent | _]}]} -> Session.checkout(session, parent)
      {:ok, _} -> {:error, "nothing to undo: the session's head has no parent"}
      {:error, _} = error -> error
    end
  end

  defp remaining(opts, arrived_ms) do
    case Keyword.get(opts, :timeout_ms) do
      ms when is_integer(ms) and ms >= 1 ->
        left = ms - (System.monotonic_time(:millisecond) - arrived_ms)
        if left >= 1, do: Keyword.put(opts, :timeout_ms, left), else: :expired

      # Absent or malformed: `Session.exec/3` applies (or rejects) it.
      _ ->
        opts
    end
  end

  # A change an undo goes back over: not the moves in history themselves.
  defp changing?(request, reply),
    do: mutating?(request, reply) and not match?({:checkout, _}, request) and request != :undo

  # A request that raised changed nothing.
  defp mutating?(_request, {@raise, _}), do: false
  defp mutating?({:checkout, _}, _reply), do: true
  defp mutating?(:undo, _reply), do: true
  defp mutating?({:exec, _, _}, _reply), do: true
  defp mutating?({:stream, _, _, _}, _reply), do: true
  defp mutating?(:reset, _reply), do: true
  defp mutating?({:restore, _, _}, _reply), do: true
  defp mutating?({:fs, fun, _}, _reply), do: fun in @mutating_fs
  defp mutating?(_request, _reply), do: false

  # Stream output goes to its consumer, which may not be the caller `from`
  # names (a call relayed by the server's predecessor after a migration).
  defp deliver({:stream, _, _, {consumer, tag}}, _from, reply),
    do: send(consumer, {tag, {:done, reply}})

  defp deliver(_request, from, reply), do: GenServer.reply(from, reply)

  defp queue_timeout do
    {:error,
     %ExBashkit.Error{
       reason: :timeout,
       message: "execution timed out (the :timeout_ms passed in the server's queue)"
     }}
  end
end
