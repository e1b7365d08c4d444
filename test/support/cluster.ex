defmodule ExBashkit.Test.Cluster do
  @moduledoc false
  # A small real cluster for tests of `ExBashkit.Server` across nodes: this
  # VM made distributed (epmd started when needed) and `:peer` nodes on
  # 127.0.0.1 running the `:ex_bashkit` application from this VM's code path.
  #
  # A VM that cannot become distributed fails the suite at `test_helper.exs`:
  # these tests are about Erlang distribution (`:global`, links and monitors
  # across nodes), and `ExBashkit.Test.PeerNode` needs it too.

  @doc false
  # Start a peer node running `:ex_bashkit`; returns `{peer_pid, node}`.
  @spec start_peer!() :: {pid(), node()}
  def start_peer! do
    distribute!()
    args = Enum.flat_map(:code.get_path(), fn dir -> [~c"-pa", dir] end)

    {:ok, pid, node} =
      :peer.start(%{
        name: :peer.random_name(~c"ex_bashkit_peer"),
        host: ~c"127.0.0.1",
        longnames: true,
        args: args
      })

    {:ok, _} = :erpc.call(node, Application, :ensure_all_started, [:ex_bashkit], 30_000)
    # `:global` names are shared once the nodes have synced.
    :ok = :global.sync()
    {pid, node}
  end

  @doc false
  @spec stop_peer({pid(), node()}) :: :ok
  def stop_peer({pid, _node}) do
    :peer.stop(pid)
  catch
    :exit, _ -> :ok
  end

  @doc false
  # Make this VM a distributed node, once. `test_helper.exs` does it before
  # any test file is compiled: a VM renamed while the compiler still ran
  # (by the first test to need it) made the compiler's own calls fail with
  # "no connection to nonode@nohost".
  @spec distribute!() :: :ok
  def distribute! do
    unless Node.alive?() do
      epmd = System.find_executable("epmd") || raise "epmd not found: cannot start distribution"
      {_, 0} = System.cmd(epmd, ["-daemon"], stderr_to_stdout: true)
      # `epmd -daemon` returns before epmd listens: on a cold machine the
      # first `net_kernel` start met `econnrefused`.
      wait_for_epmd!(epmd, 100)
      # The OS pid keeps two suites on one machine (two checkouts) apart.
      name = :"ex_bashkit_test_#{System.pid()}@127.0.0.1"
      {:ok, _} = :net_kernel.start([name, :longnames])
    end

    :ok
  end

  defp wait_for_epmd!(_epmd, 0), do: raise("epmd did not start listening")

  defp wait_for_epmd!(epmd, tries) do
    case System.cmd(epmd, ["-names"], stderr_to_stdout: true) do
      {_, 0} ->
        :ok

      _ ->
        Process.sleep(50)
        wait_for_epmd!(epmd, tries - 1)
    end
  end
end
