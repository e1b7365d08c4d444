defmodule ExBashkit.Test.PeerNode do
  @moduledoc false
  # A second BEAM node for tests that move data between nodes (snapshots).
  #
  # `start/0` boots a peer on 127.0.0.1 with this VM's code path, so the
  # peer loads the same compiled app and NIF; this VM is distributed from
  # `test_helper.exs` on (`ExBashkit.Test.Cluster.distribute!/0`). The peer
  # is not linked to the caller (stop it with `stop/1`, e.g. in `on_exit`);
  # it ends with this VM in any case, as its control connection goes.
  #
  # The functions below `call/4` run ON the peer: test modules are compiled in
  # memory and do not exist there, while this module is on the code path.

  alias ExBashkit.Session

  @type t :: %{pid: pid(), node: node()}

  @doc false
  # `extra_args`: more command-line arguments for the peer's VM (charlists),
  # e.g. `[~c"-ex_bashkit", ~c"runner_nice", ~c"0"]` for its app env.
  @spec start([charlist()]) :: t()
  def start(extra_args \\ []) do
    args = Enum.flat_map(:code.get_path(), fn dir -> [~c"-pa", dir] end) ++ extra_args

    :ok = ExBashkit.Test.Cluster.distribute!()

    {:ok, pid, node} =
      :peer.start(%{
        name: :peer.random_name(),
        host: ~c"127.0.0.1",
        longnames: true,
        args: args
      })

    %{pid: pid, node: node}
  end

  @doc false
  @spec stop(t()) :: :ok
  def stop(%{pid: pid}), do: :peer.stop(pid)

  @doc false
  @spec call(t(), module(), atom(), list()) :: term()
  def call(%{node: node}, m, f, a), do: :erpc.call(node, m, f, a, 30_000)

  # -- run on the peer ---------------------------------------------------------

  @doc false
  # A fresh session with `opts`, `script` run on it, then its snapshot (and
  # the OS pid of the VM that took it).
  def snapshot_after(opts, script, snapshot_opts) do
    session = Session.new(opts)
    {:ok, _} = Session.exec(session, script)
    {Session.snapshot(session, snapshot_opts), System.pid()}
  end

  @doc false
  # A fresh session with `opts`, `bytes` restored into it, then `script`'s
  # result (or the restore error).
  def restore_then(opts, bytes, restore_opts, script) do
    session = Session.new(opts)

    result =
      with {:ok, session} <- Session.restore(session, bytes, restore_opts),
           do: Session.exec(session, script)

    {result, System.pid()}
  end

  @doc false
  # Start the node's runner threads (an in-node script that waits parks on
  # them), then the nice value of each (Linux `/proc`), and the VM's own.
  def runner_nices do
    # Loading the app applies the `-ex_bashkit key value` arguments, before
    # the NIF loads and reads them.
    {:ok, _} = Application.ensure_all_started(:ex_bashkit)
    session = Session.new(isolation: :in_node)
    {:ok, _} = Session.exec(session, "sleep 0.05")
    tasks = Path.wildcard("/proc/self/task/*")

    runners =
      for task <- tasks, File.read!(Path.join(task, "comm")) == "ex_bashkit\n" do
        nice(Path.join(task, "stat"))
      end

    {runners, nice("/proc/self/stat")}
  end

  # The 19th field of a `stat` file; fields are counted after the command
  # name, which is in parentheses and may hold spaces.
  defp nice(stat_path) do
    [_, fields] = stat_path |> File.read!() |> String.split(") ", parts: 2)
    fields |> String.split(" ") |> Enum.at(19 - 3) |> String.to_integer()
  end
end
