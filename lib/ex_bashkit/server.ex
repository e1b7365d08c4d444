defmodule ExBashkit.Server do
  @moduledoc """
  An `ExBashkit.Session` in a process: something to name, supervise,
  checkpoint and move across a cluster.

      children = [
        {ExBashkit.Server, name: MyApp.Shell, checkpoint: true, env: [LANG: "C"]}
      ]

      Supervisor.start_link(children, strategy: :one_for_one)
      {:ok, result} = ExBashkit.Server.exec(MyApp.Shell, "cd /tmp && export X=1")

  `start_link/1` takes every option of `ExBashkit.Session.new/1`, plus:

    * `:name` - any `GenServer` name: an atom, `{:global, term}` or
      `{:via, module, term}`.
    * `:checkpoint` - `true` to keep the state outside the process after
      every completed operation (default `false`, see "Checkpoints").
    * `:undo` - `true` to commit the session (`ExBashkit.Session.commit/2`)
      once at start and after every operation that can change it, before
      the caller gets its answer, so that `undo/1` can go back one step at a
      time (default `false`, see "Undo").
    * `:node` - start the server on this node when it is connected (default:
      the caller's). The server is linked to the caller all the same (its
      supervisor), and when that node is gone, a restart starts it on the
      caller's node (see "Sessions across nodes").

  Every function takes the server as a pid or a name and works like its
  `ExBashkit.Session` counterpart: `exec/3`, `stream/3`, `cancel/1`,
  `state/1`, `reset/1`, `snapshot/2`, `restore/3` and the filesystem
  functions. Requests run one at a time, in arrival order. A call waits as
  long as its operation does: `exec/3` is bounded by the exec's own
  `:timeout_ms` (counted from its arrival at the server, queue time
  included) or the session's limit, never by `GenServer`'s 5 s default. If
  the caller of an exec dies, its script is cancelled and a queued request
  of a dead caller is dropped, so a server never stays busy for nobody. A
  builtin or `:virtual_fs` backend must not call its own server: the call
  would queue behind the script waiting for it, until `:builtin_timeout_ms`.

  ## Checkpoints

  With `checkpoint: true`, the server's session outlives the server
  process: `ExBashkit.Server.Checkpoints`, a table owned by a process of
  ExBashkit's application, keeps it. When the server dies, even by
  `Process.exit(pid, :kill)`, and its supervisor restarts it, the new
  server takes the same session back, with its env, cwd, files,
  functions, aliases and history. The operation in flight when
  the server died is cancelled (its caller gets an exit); what it did until
  then stays, as after `cancel/1`. A crash of the session's interpreter is
  recovered by the session itself (`durable:` in
  `ExBashkit.Session.new/1`, on by default). Capabilities (builtins,
  mounts, limits, network) are the session's, from the first start.

  What it costs: nothing per operation; the table holds the session
  handle. A session whose server is not restarted within 5 s (its
  supervisor gave up, or it was started outside one) is snapshotted and
  released, so that it does not hold an OS process forever; a later start
  with the same checkpoint id restores that snapshot. A server that ends
  `:normal` (`GenServer.stop/1`) releases its checkpoint.

  A server on another node than the one that started it (`:node`) keeps
  its state the previous way, since that node may go down with the
  session: after every operation that can change the session (exec,
  stream, reset, restore, write_file, mkdir, remove, rename) and before the
  caller gets its answer, it takes a keyed snapshot
  (`ExBashkit.Session.snapshot/2`, a random 32-byte key) and stores it on
  the starting node. Its cost grows with the files the session holds (a
  snapshot serializes every byte), and it carries what a snapshot carries
  (see `ExBashkit.Session.snapshot/2`). Figures for both ways: `bench/`
  (`scripts/bench-history`).

  A checkpoint is found again by its id: the server's `:name` when it has
  one, else an id that `child_spec/1` makes once, so restarts by the same
  supervisor find it. An unnamed server started by `start_link/1` outside a
  supervisor has nothing to come back to.

  ## Undo

  `commit/2`, `checkout/2`, `log/2` and `diff/3` work as their
  `ExBashkit.Session` counterparts on the server's session. With
  `undo: true`, the server commits after every change (the operations
  `:checkpoint` names), and `undo/1` checks out the parent of the head:
  the state before the last change; again, the one before that, within the
  history the session keeps (`ExBashkit.Store.history_limit/0`). An
  operation that left the state exactly as it was commits nothing; an exec
  that wrote no file still sets `$_`, a change. Each change costs what
  `ExBashkit.Session.commit/2` does: a hash of every file when one was
  written, a few KiB of shell state when none was.

  ## Sessions across nodes

  `migrate/2` moves a live server to another node of the cluster, which must
  run the `:ex_bashkit` application with the same code. It waits for the
  requests ahead of it, commits the session (unless nothing changed since
  its head), starts a server under `ExBashkit.Server.Supervisor` (a
  `DynamicSupervisor`) on that node with the same options, so the same
  capabilities, sends it the objects of the commits the session keeps that
  the other node's `ExBashkit.Store` lacks (none, for a store the nodes
  share), checks the head out there (the log comes along), hands the name
  over, relays to it every request that arrived meanwhile, and stops the old
  process with reason `:normal`. Each request is served once, by one of the
  two. A session over a `:base` image, which commits cannot hold yet, moves
  as a keyed snapshot. Names:

    * `{:global, name}` and `{:via, :global, name}` move atomically
      (`:global.re_register_name/2`): callers anywhere keep using the name.
    * other `{:via, module, name}`: unregistered, then registered by the
      new server; with a node-local registry (`Registry`) it lands in the
      registry of the new node.
    * an atom: registered on the new node (reach it as `{name, node}`).

  A server in your own supervisor should be `:transient` (the default of
  `child_spec/1`) so that a migrated-away child is not restarted.

  With `:node`, a supervisor on one node keeps a server on another: the
  server is linked to the supervisor and checkpoints to the supervisor's
  node; if the server's node goes down, the supervisor restarts it on its
  own node from the last checkpoint.
  """

  use GenServer

  require Logger

  alias ExBashkit.Server.{Checkpoints, Naming, Op}
  alias ExBashkit.{Error, Result, Session}
  alias ExBashkit.Session.{Credentials, History}

  @server_keys [:name, :checkpoint, :undo, :node, :checkpoint_id, :handoff_from]
  @remote_timeout 30_000

  @typedoc "A server: its pid or any `GenServer` name it was started with."
  @type server :: GenServer.server()

  @typedoc "An option of `start_link/1`: a `Session.new/1` option or a server option."
  @type option ::
          Session.option()
          | {:name, GenServer.name()}
          | {:checkpoint, boolean()}
          | {:undo, boolean()}
          | {:node, node()}

  # -- starting ---------------------------------------------------------------

  @doc """
  A child spec for `opts` (see `start_link/1`): `restart: :transient`, and
  `id: {ExBashkit.Server, name}` for a named server (`ExBashkit.Server`
  otherwise). For a checkpointing server without a name, it fixes the
  checkpoint id here, once, so that every restart finds the checkpoint.
  """
  @spec child_spec([option()]) :: Supervisor.child_spec()
  def child_spec(opts) when is_list(opts) do
    # The supervisor keeps (and reports) the spec: `:credentials` sealed.
    opts = Credentials.seal_option(opts)
    opts = Keyword.put_new_lazy(opts, :checkpoint_id, fn -> default_checkpoint_id(opts) end)

    %{
      id: if(name = opts[:name], do: {__MODULE__, name}, else: __MODULE__),
      start: {__MODULE__, :start_link, [opts]},
      restart: :transient,
      type: :worker
    }
  end

  @doc """
  Start a server linked to the caller. Takes every `ExBashkit.Session.new/1`
  option plus `:name`, `:checkpoint` and `:node` (see the module doc).

  Malformed options raise `ArgumentError` in the caller, as
  `ExBashkit.Session.new/1` does. Returns `{:ok, pid}`, or
  `{:error, {:already_started, pid}}` when the name is taken.

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link(env: [GREETING: "hi"])
      iex> {:ok, result} = ExBashkit.Server.exec(pid, "echo $GREETING")
      iex> result.stdout
      "hi\\n"
  """
  @spec start_link([option()]) :: GenServer.on_start()
  def start_link(opts \\ []) when is_list(opts) do
    # Kept in the server's state for the sessions it builds later.
    {config, session_opts} = opts |> Credentials.seal_option() |> config!()
    # Validates every session option here, in the caller.
    session = Session.new(session_opts)

    case target_node(config.node) do
      local when local == node() ->
        GenServer.start_link(__MODULE__, {config, session_opts, session, nil})

      remote ->
        start_remote(remote, {config, session_opts, nil, self()})
    end
  end

  # A server on another node, linked to the caller from its `init`.
  defp start_remote(node, init_arg) do
    :erpc.call(node, GenServer, :start, [__MODULE__, init_arg], @remote_timeout)
  catch
    kind, reason -> {:error, {:node_unreachable, node, {kind, reason}}}
  end

  defp target_node(nil), do: node()
  defp target_node(node), do: if(node in Node.list(), do: node, else: node())

  defp boolean!(server_opts, key) do
    case Keyword.get(server_opts, key, false) do
      flag when is_boolean(flag) ->
        flag

      other ->
        raise ArgumentError,
              "ExBashkit.Server option #{inspect(key)} must be a boolean, got: #{inspect(other)}"
    end
  end

  defp config!(opts) do
    {server_opts, session_opts} = Keyword.split(opts, @server_keys)
    name = Naming.validate!(server_opts[:name])

    checkpoint = boolean!(server_opts, :checkpoint)

    if checkpoint and not Checkpoints.available?() do
      raise ArgumentError,
            "ExBashkit.Server option checkpoint: true needs the :ex_bashkit application " <>
              "started on #{node()} (it owns the checkpoint table)"
    end

    undo = boolean!(server_opts, :undo)

    node =
      case server_opts[:node] do
        node when is_atom(node) ->
          node

        other ->
          raise ArgumentError,
                "ExBashkit.Server option :node must be a node, got: #{inspect(other)}"
      end

    config = %{
      name: name,
      checkpoint: checkpoint,
      undo: undo,
      node: node,
      home: node(),
      id: server_opts[:checkpoint_id] || default_checkpoint_id(opts),
      handoff_from: server_opts[:handoff_from]
    }

    {config, session_opts}
  end

  defp default_checkpoint_id(opts) do
    case opts[:name] do
      nil -> {:ref, make_ref()}
      name -> {:name, name}
    end
  end

  # -- the API ------------------------------------------------------------------

  @doc """
  Run `script` on the server's session: the options and results of
  `ExBashkit.Session.exec/3` (`{:error, message}` on a failure; `run/3`
  gives it as `%ExBashkit.Error{}`). The call waits as long as the exec may
  run (its `:timeout_ms`, counted from its arrival at the server).

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link()
      iex> {:ok, _} = ExBashkit.Server.exec(pid, "cd /tmp; x=1")
      iex> {:ok, %ExBashkit.Result{stdout: "/tmp 1\\n"}} = ExBashkit.Server.exec(pid, "echo $(pwd) $x")
  """
  @spec exec(server(), String.t(), [Session.exec_option()]) ::
          {:ok, Result.t()} | {:error, String.t()}
  def exec(server, script, opts \\ []), do: Error.to_message(run(server, script, opts))

  @doc """
  Run `script` like `exec/3`, answering a failure as data, as
  `ExBashkit.Session.run/3` does: `{:ok, %ExBashkit.Result{}}` or
  `{:error, %ExBashkit.Error{}}`.

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link()
      iex> {:error, error} = ExBashkit.Server.run(pid, "if then fi")
      iex> error.reason
      :parse
  """
  @spec run(server(), String.t(), [Session.exec_option()]) ::
          {:ok, Result.t()} | {:error, Error.t()}
  def run(server, script, opts \\ []) when is_binary(script) and is_list(opts),
    do: call(server, {:exec, script, opts})

  @doc """
  Like `exec/3` (the answer of `run/3`), but returns the result or raises
  `ExBashkit.Error`.

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link()
      iex> ExBashkit.Server.exec!(pid, "echo hi").stdout
      "hi\\n"
  """
  @spec exec!(server(), String.t(), [Session.exec_option()]) :: Result.t()
  def exec!(server, script, opts \\ []) do
    case run(server, script, opts) do
      {:ok, result} -> result
      {:error, error} -> raise error
    end
  end

  @doc """
  Run `script` like `exec/3` and return a lazy stream of its output, as
  `ExBashkit.Session.stream/3` does: `{:stdout, chunk}`, `{:stderr, chunk}`,
  then `{:exit, code}` or `{:error, message}`. Halting the stream
  early cancels the script. If the server dies meanwhile, the stream ends
  with `{:error, message}` too.

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link()
      iex> pid |> ExBashkit.Server.stream("echo a; echo b >&2") |> Enum.to_list()
      [{:stdout, "a\\n"}, {:stderr, "b\\n"}, {:exit, 0}]
  """
  @spec stream(server(), String.t(), [Session.exec_option()]) ::
          Enumerable.t(
            {:stdout | :stderr, binary()}
            | {:exit, integer()}
            | {:error, String.t()}
          )
  def stream(server, script, opts \\ []) when is_binary(script) and is_list(opts) do
    if Keyword.has_key?(opts, :stream_to),
      do: raise(ArgumentError, "stream/3 does not take :stream_to")

    Stream.resource(
      fn ->
        tag = make_ref()
        {:ok, pid} = call(server, {:stream, script, opts, {self(), tag}})
        {tag, Process.monitor(pid), pid}
      end,
      &next_chunk/1,
      &close_stream/1
    )
  end

  defp next_chunk(:done), do: {:halt, :done}

  defp next_chunk({tag, mon, _pid} = acc) do
    receive do
      {^tag, {:done, reply}} ->
        Process.demonitor(mon, [:flush])
        {final(reply), :done}

      {^tag, {kind, chunk}} ->
        {[{kind, chunk}], acc}

      {:DOWN, ^mon, :process, _, reason} ->
        {[{:error, "ExBashkit.Server exited: #{inspect(reason)}"}], :done}
    end
  end

  defp final({:ok, %Result{exit_code: code}}), do: [{:exit, code}]
  defp final({:error, error}), do: [Error.to_message({:error, error})]
  defp final({:"$ex_bashkit_raise", exception}), do: raise(exception)

  # Halted early: cancel the script and wait for its end, so that nothing of
  # it is left in the caller's mailbox.
  defp close_stream(:done), do: :ok

  defp close_stream({tag, mon, pid}) do
    GenServer.cast(pid, {:cancel_stream, tag})

    receive do
      {^tag, {:done, _}} -> Process.demonitor(mon, [:flush])
      {:DOWN, ^mon, :process, _, _} -> :ok
    end

    flush(tag)
  end

  defp flush(tag) do
    receive do
      {^tag, _} -> flush(tag)
    after
      0 -> :ok
    end
  end

  @doc """
  Stop the script running on the server's session (see
  `ExBashkit.Session.cancel/1`): `:ok` if one was running, `:idle` if not.
  Answered at once, whatever the server is running.

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link()
      iex> ExBashkit.Server.cancel(pid)
      :idle
  """
  @spec cancel(server()) :: :ok | :idle
  def cancel(server), do: GenServer.call(server, :cancel)

  @doc """
  Where the server's session runs and how that OS process is confined (see
  `ExBashkit.Session.info/1`). Answered at once, while an operation runs.
  """
  @spec info(server()) :: map()
  def info(server), do: call(server, :info)

  @doc """
  The session's shell state (see `ExBashkit.Session.state/2`):
  `{:ok, state}` or `{:error, message}`.

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link()
      iex> {:ok, _} = ExBashkit.Server.exec(pid, "export A=1; cd /tmp")
      iex> {:ok, state} = ExBashkit.Server.state(pid)
      iex> {state.env["A"], state.cwd}
      {"1", "/tmp"}
  """
  @spec state(server()) :: {:ok, map()} | {:error, String.t()}
  def state(server), do: Error.to_message(call(server, :state))

  @doc """
  Put the session back in the state its options built (see
  `ExBashkit.Session.reset/1`).

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link()
      iex> {:ok, _} = ExBashkit.Server.exec(pid, "export X=1")
      iex> ExBashkit.Server.reset(pid)
      :ok
      iex> {:ok, %ExBashkit.Result{stdout: "\\n"}} = ExBashkit.Server.exec(pid, "echo $X")
  """
  @spec reset(server()) :: :ok | {:error, String.t()}
  def reset(server), do: Error.to_message(call(server, :reset))

  @doc """
  A snapshot of the session (see `ExBashkit.Session.snapshot/2` for the
  options; give a `:key` when the bytes cross a trust boundary).

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link()
      iex> {:ok, bytes} = ExBashkit.Server.snapshot(pid, key: "secret")
      iex> is_binary(bytes)
      true
  """
  @spec snapshot(server(), [Session.snapshot_option()]) :: {:ok, binary()} | {:error, String.t()}
  def snapshot(server, opts \\ []) when is_list(opts),
    do: Error.to_message(call(server, {:snapshot, opts}))

  @doc """
  Restore `bytes` from a snapshot into the server's session (see
  `ExBashkit.Session.restore/3`). Returns `{:ok, server}` (the `server`
  given), as `ExBashkit.Session.restore/3` returns the session, or
  `{:error, message}`.

  ## Examples

      iex> {:ok, a} = ExBashkit.Server.start_link()
      iex> {:ok, _} = ExBashkit.Server.exec(a, "x=7")
      iex> {:ok, bytes} = ExBashkit.Server.snapshot(a)
      iex> {:ok, b} = ExBashkit.Server.start_link()
      iex> {:ok, ^b} = ExBashkit.Server.restore(b, bytes)
      iex> {:ok, %ExBashkit.Result{stdout: "7\\n"}} = ExBashkit.Server.exec(b, "echo $x")
  """
  @spec restore(server(), binary(), [{:key, binary()}]) :: {:ok, server()} | {:error, String.t()}
  def restore(server, bytes, opts \\ []) when is_binary(bytes) and is_list(opts) do
    with :ok <- Error.to_message(call(server, {:restore, bytes, opts})), do: {:ok, server}
  end

  @doc """
  Commit the server's session (see `ExBashkit.Session.commit/2`).

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link()
      iex> {:ok, id} = ExBashkit.Server.commit(pid, %{step: 1})
      iex> {:ok, [%{id: ^id}]} = ExBashkit.Server.log(pid)
  """
  @spec commit(server(), map()) :: {:ok, Session.commit_id()} | {:error, String.t()}
  def commit(server, meta \\ %{}) when is_map(meta), do: call(server, {:commit, meta})

  @doc "Check out a commit into the server's session (see `ExBashkit.Session.checkout/2`)."
  @spec checkout(server(), Session.commit_id()) :: :ok | {:error, String.t()}
  def checkout(server, commit_id), do: call(server, {:checkout, commit_id})

  @doc "The server's session's history (see `ExBashkit.Session.log/2`)."
  @spec log(server(), [{:limit, pos_integer()}]) ::
          {:ok, [Session.commit()]} | {:error, String.t()}
  def log(server, opts \\ []) when is_list(opts), do: call(server, {:log, opts})

  @doc "What changed between two commits, or since one (see `ExBashkit.Session.diff/3`)."
  @spec diff(server(), Session.commit_id(), Session.commit_id() | :current) ::
          {:ok, %{created: [String.t()], modified: [String.t()], deleted: [String.t()]}}
          | {:error, String.t()}
  def diff(server, from_id, to_id \\ :current), do: call(server, {:diff, from_id, to_id})

  @doc """
  Go back to the state before the session's last commit: check out the
  parent of its head. With `undo: true`, the state before the last change
  (see "Undo"). `{:error, message}` when there is nothing to go back to.

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link(undo: true)
      iex> {:ok, _} = ExBashkit.Server.exec(pid, "echo oops > /f")
      iex> ExBashkit.Server.undo(pid)
      :ok
      iex> {:error, _} = ExBashkit.Server.read_file(pid, "/f")
  """
  @spec undo(server()) :: :ok | {:error, String.t()}
  def undo(server), do: call(server, :undo)

  @doc """
  Read a file of the session (see `ExBashkit.Session.read_file/2`).

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link(files: %{"/in.txt" => "data"})
      iex> ExBashkit.Server.read_file(pid, "/in.txt")
      {:ok, "data"}
  """
  @spec read_file(server(), Path.t()) :: {:ok, binary()} | {:error, String.t()}
  def read_file(server, path), do: fs(server, :read_file, [path])

  @doc """
  Write a file of the session (see `ExBashkit.Session.write_file/3`).

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link()
      iex> ExBashkit.Server.write_file(pid, "/a/b.txt", ["x", "y"])
      :ok
      iex> ExBashkit.Server.read_file(pid, "/a/b.txt")
      {:ok, "xy"}
  """
  @spec write_file(server(), Path.t(), iodata()) :: :ok | {:error, String.t()}
  def write_file(server, path, content), do: fs(server, :write_file, [path, content])

  @doc """
  List a directory of the session (see `ExBashkit.Session.list_dir/2`).

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link(files: %{"/d/f" => "x"})
      iex> ExBashkit.Server.list_dir(pid, "/d")
      {:ok, [{"f", :file}]}
  """
  @spec list_dir(server(), Path.t()) ::
          {:ok, [{String.t(), Session.fs_type()}]} | {:error, String.t()}
  def list_dir(server, path), do: fs(server, :list_dir, [path])

  @doc """
  Create a directory in the session (see `ExBashkit.Session.mkdir/3`).

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link()
      iex> ExBashkit.Server.mkdir(pid, "/a/b", parents: true)
      :ok
  """
  @spec mkdir(server(), Path.t(), [{:parents, boolean()}]) :: :ok | {:error, String.t()}
  def mkdir(server, path, opts \\ []), do: fs(server, :mkdir, [path, opts])

  @doc """
  Remove a path from the session (see `ExBashkit.Session.remove/3`).

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link(files: %{"/f" => "x"})
      iex> ExBashkit.Server.remove(pid, "/f")
      :ok
  """
  @spec remove(server(), Path.t(), [{:recursive, boolean()}]) :: :ok | {:error, String.t()}
  def remove(server, path, opts \\ []), do: fs(server, :remove, [path, opts])

  @doc """
  Rename a path in the session (see `ExBashkit.Session.rename/3`).

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link(files: %{"/a" => "x"})
      iex> ExBashkit.Server.rename(pid, "/a", "/b")
      :ok
  """
  @spec rename(server(), Path.t(), Path.t()) :: :ok | {:error, String.t()}
  def rename(server, from, to), do: fs(server, :rename, [from, to])

  @doc """
  Metadata of a path in the session (see `ExBashkit.Session.stat/2`).

  ## Examples

      iex> {:ok, pid} = ExBashkit.Server.start_link(files: %{"/f" => "123"})
      iex> ExBashkit.Server.stat(pid, "/f")
      {:ok, %{type: :file, size: 3}}
  """
  @spec stat(server(), Path.t()) ::
          {:ok, %{type: Session.fs_type(), size: non_neg_integer()}} | {:error, String.t()}
  def stat(server, path), do: fs(server, :stat, [path])

  @doc """
  Move the server to `node` (see "Sessions across nodes" in the module doc):
  `{:ok, new_pid}` once the new server holds the session and the name, or
  `{:error, reason}` with the server unchanged where it was. Migrating to
  the server's own node returns `{:ok, pid}` and changes nothing.
  """
  @spec migrate(server(), node()) :: {:ok, pid()} | {:error, term()}
  def migrate(server, node) when is_atom(node), do: call(server, {:migrate, node})

  defp fs(server, fun, args), do: Error.to_message(call(server, {:fs, fun, args}))

  defp call(server, request, retries \\ 3) do
    case GenServer.call(server, request, :infinity) do
      {:"$ex_bashkit_raise", exception} -> raise exception
      reply -> reply
    end
  catch
    # A name resolved to a server that was handing it to its successor and
    # ended (`:normal`) before the call reached it: the call was not served.
    # Resolve the name again.
    :exit, {reason, _} when reason in [:normal, :noproc] and not is_pid(server) and retries > 0 ->
      Process.sleep(5)
      call(server, request, retries - 1)
  end

  # -- the process ----------------------------------------------------------------

  @impl true
  def init({config, session_opts, session, parent}) do
    # Runners are linked; a runner that dies unexpectedly must not take the
    # session down, and a remote parent's exit arrives as a message.
    Process.flag(:trap_exit, true)
    if parent, do: Process.link(parent)

    with :ok <- Naming.register(config.name, config.handoff_from),
         {:ok, session} <- build(session, session_opts) do
      config = Map.put(config, :keeps, keeps(config))
      key = if config.keeps == :snapshot, do: Checkpoints.key(config.home, config.id)

      session = recover(session, config, key)
      if config.undo, do: Session.commit(session)

      state = %{
        session: session,
        session_opts: session_opts,
        config: config,
        key: key,
        parent: parent,
        queue: :queue.new(),
        running: nil,
        relay: nil
      }

      {:ok, state}
    else
      {:error, reason} -> {:stop, reason}
    end
  end

  defp build(%Session{} = session, _opts), do: {:ok, session}

  defp build(nil, opts) do
    {:ok, Session.new(opts)}
  rescue
    e in ArgumentError -> {:error, {:invalid_options, Exception.message(e)}}
  end

  # How a checkpointing server keeps its state: on the node that started it
  # (its supervisor's), the session itself; elsewhere, snapshots sent home,
  # since this node may go down with the session.
  defp keeps(%{checkpoint: false}), do: nil
  defp keeps(%{home: home}) when home == node(), do: :session
  defp keeps(_config), do: :snapshot

  # Back to the kept session or the last snapshot, if there is one. The
  # kept session's operation in flight, if any, is cancelled (its caller got
  # an exit); what it did until then stays, as after `cancel/1`. A snapshot
  # that cannot be restored (it should not happen) is dropped with a warning
  # rather than making every restart fail.
  defp recover(session, %{keeps: nil}, _key), do: session

  defp recover(session, %{keeps: :session, id: id}, _key) do
    case Checkpoints.claim(id) do
      {:ok, kept} ->
        Session.cancel(kept)
        kept

      {:snapshot, key, bytes} ->
        session = restored(session, bytes, key)
        :ok = Checkpoints.keep(id, session)
        session

      :error ->
        :ok = Checkpoints.keep(id, session)
        session
    end
  end

  defp recover(session, config, key) do
    case Checkpoints.fetch(config.home, config.id) do
      {:ok, {^key, bytes}} -> restored(session, bytes, key)
      _ -> session
    end
  end

  defp restored(session, bytes, key) do
    case Session.restore(session, bytes, key: key) do
      {:ok, _} ->
        session

      {:error, message} ->
        Logger.warning("ExBashkit.Server: checkpoint dropped, starting fresh (#{message})")
        session
    end
  end

  defp context(state) do
    %{
      server: self(),
      key: state.key,
      home: state.config.home,
      id: state.config.id,
      undo: state.config.undo
    }
  end

  @impl true
  def handle_call(request, from, %{relay: relay} = state) when relay != nil,
    do: {:noreply, relay_call(request, from, state)}

  def handle_call(:cancel, _from, state), do: {:reply, Session.cancel(state.session), state}
  def handle_call(:info, _from, state), do: {:reply, Session.info(state.session), state}

  def handle_call({:migrate, node}, _from, state) when node == node(),
    do: {:reply, {:ok, self()}, state}

  # From the predecessor of a migration: take its session.
  def handle_call({:"$ex_bashkit_adopt", handover}, _from, state) do
    case take_over(state.session, handover) do
      :ok ->
        Op.checkpoint(state.session, context(state))
        {:reply, :ok, state}

      {:error, _} = error ->
        {:reply, error, state}
    end
  end

  def handle_call(:"$ex_bashkit_claim_name", _from, state),
    do: {:reply, Naming.register(state.config.name, nil), state}

  def handle_call(request, from, state) do
    if Op.queued?(request) do
      entry = %{
        request: request,
        from: from,
        mon: Process.monitor(Op.owner(request, from)),
        at: System.monotonic_time(:millisecond)
      }

      next(%{state | queue: :queue.in(entry, state.queue)})
    else
      {:reply, {:error, {:unknown_request, request}}, state}
    end
  end

  @impl true
  # Forwarded; then the relay stops if that was all it had left to do (as
  # after any message: otherwise a cast that came last would keep it alive).
  def handle_cast(request, %{relay: relay} = state) when relay != nil do
    GenServer.cast(relay.to, request)
    relay_or_stop(state)
  end

  def handle_cast({:cancel_stream, tag}, state) do
    case state.running do
      %{request: {:stream, _, _, {_, ^tag}}} -> Session.cancel(state.session)
      _ -> :idle
    end

    {:noreply, state}
  end

  def handle_cast(_other, state), do: {:noreply, state}

  @impl true
  def handle_info({ref, reply}, %{relay: %{pending: pending}} = state)
      when is_map_key(pending, ref) do
    {from, pending} = Map.pop(pending, ref)
    GenServer.reply(from, reply)
    relay_or_stop(put_in(state.relay.pending, pending))
  end

  # The successor died: the relayed calls may or may not have run there;
  # their callers get this exit (not `:normal`, so they do not retry).
  def handle_info({:DOWN, mon, :process, _, _}, %{relay: %{mon: mon}} = state),
    do: {:stop, {:shutdown, :successor_down}, state}

  def handle_info(_message, %{relay: relay} = state) when relay != nil,
    do: relay_or_stop(state)

  def handle_info({:op_done, pid}, %{running: %{pid: pid, mon: mon}} = state) do
    Process.demonitor(mon, [:flush])
    next(%{state | running: nil})
  end

  # A runner ended without reporting (it should not happen): answer for it.
  def handle_info({:EXIT, pid, reason}, %{running: %{pid: pid} = running} = state) do
    Process.demonitor(running.mon, [:flush])
    GenServer.reply(running.from, {:error, "ExBashkit.Server runner exited: #{inspect(reason)}"})
    next(%{state | running: nil})
  end

  def handle_info({:EXIT, parent, reason}, %{parent: parent} = state),
    do: {:stop, reason, state}

  def handle_info({:EXIT, _pid, _reason}, state), do: {:noreply, state}

  # A caller died: stop its script, or forget its queued request.
  def handle_info({:DOWN, mon, :process, _, _}, %{running: %{mon: mon} = running} = state) do
    if Op.script?(running.request), do: Session.cancel(state.session)
    {:noreply, state}
  end

  def handle_info({:DOWN, mon, :process, _, _}, state) do
    {:noreply, %{state | queue: :queue.filter(&(&1.mon != mon), state.queue)}}
  end

  def handle_info(_other, state), do: {:noreply, state}

  @impl true
  def handle_continue(:migrate, state) do
    {{:value, entry}, queue} = :queue.out(state.queue)
    {:migrate, node} = entry.request
    state = %{state | queue: queue}

    case migrate_to(node, state) do
      {:ok, new} ->
        Process.demonitor(entry.mon, [:flush])
        GenServer.reply(entry.from, {:ok, new})
        relay = %{to: new, mon: Process.monitor(new), pending: %{}}
        state = Enum.reduce(:queue.to_list(queue), %{state | relay: relay}, &relay_entry/2)
        relay_or_stop(%{state | queue: :queue.new()})

      {:error, _} = error ->
        Process.demonitor(entry.mon, [:flush])
        GenServer.reply(entry.from, error)
        next(state)
    end
  end

  # A server that ends `:normal` is not restarted (`:transient`): its
  # checkpoint is released. A relay's checkpoint went with its successor.
  @impl true
  def terminate(:normal, %{relay: nil, config: %{keeps: keeps} = config}) when keeps != nil do
    Checkpoints.delete(config.home, config.id)
  catch
    :exit, _home_unreachable -> :ok
  end

  def terminate(_reason, _state), do: :ok

  # Start the next queued request if none runs. A migration runs in the
  # server itself, once everything ahead of it has ended.
  defp next(%{running: nil} = state) do
    case :queue.peek(state.queue) do
      :empty ->
        {:noreply, state}

      {:value, %{request: {:migrate, _}}} ->
        {:noreply, state, {:continue, :migrate}}

      {:value, _} ->
        {{:value, entry}, queue} = :queue.out(state.queue)
        pid = Op.start(entry.request, entry.from, entry.at, state.session, context(state))
        {:noreply, %{state | queue: queue, running: Map.put(entry, :pid, pid)}}
    end
  end

  defp next(state), do: {:noreply, state}

  # -- migration -----------------------------------------------------------------

  defp migrate_to(node, state) do
    with {:ok, handover} <- handover(state.session, node),
         {:ok, new} <- start_successor(node, state),
         :ok <- adopt(new, handover, node) do
      if Naming.hand_over(state.config.name, new) == :claim,
        do: GenServer.call(new, :"$ex_bashkit_claim_name", @remote_timeout)

      # The successor's checkpoint lives on its node now.
      if state.config.checkpoint and state.config.home != node,
        do: Checkpoints.delete(state.config.home, state.config.id)

      {:ok, new}
    end
  end

  defp start_successor(node, state) do
    opts =
      state.session_opts ++
        [
          name: state.config.name,
          checkpoint: state.config.checkpoint,
          checkpoint_id: state.config.id,
          handoff_from: self()
        ]

    DynamicSupervisor.start_child({ExBashkit.Server.Supervisor, node}, {__MODULE__, opts})
  catch
    :exit, reason -> {:error, {:node_unreachable, node, reason}}
  end

  # What the successor takes: the session's commits, less the objects that
  # node's store holds already; a snapshot for a session commits cannot
  # hold (one over a `:base` image).
  defp handover(session, node) do
    case History.export(session, &lacks(node, &1)) do
      {:ok, export} ->
        {:ok, {:commit, export}}

      {:error, _} ->
        key = :crypto.strong_rand_bytes(32)

        with {:ok, bytes} <- Session.snapshot(session, key: key),
             do: {:ok, {:snapshot, bytes, key}}
    end
  end

  defp lacks(node, ids) do
    held = :erpc.call(node, ExBashkit.Store, :refs, [ids], @remote_timeout)
    Enum.reject(ids, &Map.has_key?(held, &1))
  catch
    # The successor will not start there either: that error is the answer.
    _kind, _reason -> ids
  end

  defp take_over(session, {:commit, export}), do: History.import(session, export)

  defp take_over(session, {:snapshot, bytes, key}) do
    with {:ok, _} <- Session.restore(session, bytes, key: key), do: :ok
  end

  defp adopt(new, handover, node) do
    case GenServer.call(new, {:"$ex_bashkit_adopt", handover}, @remote_timeout) do
      :ok ->
        :ok

      error ->
        DynamicSupervisor.terminate_child({ExBashkit.Server.Supervisor, node}, new)
        error
    end
  end

  # After a migration, this process relays: requests queued behind the
  # migration, and any call that still reaches it (a caller that resolved
  # the name just before the hand-over), go to the successor, and its
  # answers come back through here. Relaying rather than forwarding keeps
  # each caller's monitor on a live process until its answer is in. The
  # relay stops, `:normal`, once nothing is pending and its mailbox is
  # empty; a call that reaches it later was not served, and `call/2` tries
  # the name again.
  defp relay_entry(entry, state) do
    Process.demonitor(entry.mon, [:flush])
    relay_call(entry.request, entry.from, state)
  end

  defp relay_call(request, from, %{relay: relay} = state) do
    ref = make_ref()
    send(relay.to, {:"$gen_call", {self(), ref}, request})
    put_in(state.relay.pending, Map.put(relay.pending, ref, from))
  end

  defp relay_or_stop(%{relay: %{pending: pending}} = state) when map_size(pending) == 0 do
    case Process.info(self(), :message_queue_len) do
      {:message_queue_len, 0} -> {:stop, :normal, state}
      _ -> {:noreply, state}
    end
  end

  defp relay_or_stop(state), do: {:noreply, state}
end
