defprotocol ExBashkit.Shell.Target do
  @moduledoc """
  What `ExBashkit.Shell` drives: anything that runs scripts with the
  `ExBashkit.Session` API shape.

  The shell only talks to its target through these functions, so a new kind
  of target is one `defimpl` of this protocol plus a clause in
  `ExBashkit.Shell.start/2` that recognizes it. `ExBashkit.Session` and an
  `ExBashkit.Server` (by its pid) are implemented below.
  """

  @doc "Run `script` like `ExBashkit.Session.exec/3` (options `:timeout_ms`, `:stream_to`, `:track_changes`)."
  @spec exec(t(), String.t(), keyword()) ::
          {:ok, ExBashkit.Result.t()} | {:error, ExBashkit.Error.t() | term()}
  def exec(target, script, opts)

  @doc "`{:ok, state}` of `ExBashkit.Session.state/2`, or `{:error, message}`."
  @spec state(t()) :: {:ok, map()} | {:error, String.t()}
  def state(target)

  @doc "Back to the state the target was built with (`ExBashkit.Session.reset/1`)."
  @spec reset(t()) :: :ok | {:error, String.t()}
  def reset(target)

  @doc "A snapshot binary (`ExBashkit.Session.snapshot/2`)."
  @spec snapshot(t(), keyword()) :: {:ok, binary()} | {:error, String.t()}
  def snapshot(target, opts)

  @doc "Load a snapshot in place (`ExBashkit.Session.restore/3`)."
  @spec restore(t(), binary(), keyword()) :: :ok | {:error, String.t()}
  def restore(target, bytes, opts)
end

defimpl ExBashkit.Shell.Target, for: ExBashkit.Session do
  alias ExBashkit.Session

  def exec(session, script, opts), do: Session.exec(session, script, opts)
  def state(session), do: Session.state(session)
  def reset(session), do: Session.reset(session)
  def snapshot(session, opts), do: Session.snapshot(session, opts)

  def restore(session, bytes, opts) do
    with {:ok, _same} <- Session.restore(session, bytes, opts), do: :ok
  end
end

defimpl ExBashkit.Shell.Target, for: PID do
  # An `ExBashkit.Server`: `ExBashkit.Shell.start/2` resolves a name to its
  # pid and checks that it is a server before the shell gets it.
  alias ExBashkit.Server

  def exec(server, script, opts), do: Server.exec(server, script, opts)
  def state(server), do: Server.state(server)
  def reset(server), do: Server.reset(server)
  def snapshot(server, opts), do: Server.snapshot(server, opts)

  def restore(server, bytes, opts) do
    with {:ok, _same} <- Server.restore(server, bytes, opts), do: :ok
  end
end
