defmodule ExBashkit.Server.ClusterTest do
  # Real Erlang distribution: this VM and `:peer` nodes on 127.0.0.1.
  use ExBashkit.Test.Case, async: false

  alias ExBashkit.{Result, Server}
  alias ExBashkit.Test.{Cluster, Health}

  @moduletag timeout: 120_000

  @stateful stateful_script()
  @probe ~S[echo "$COLOR|$(pwd)|$(cat /work/data.txt)|$(greet x)|$(alias ll)"]
  @expected "blue|/work|kept|hello x|alias ll='ls -1'\n"

  setup do
    peer = Cluster.start_peer!()
    on_exit(fn -> Cluster.stop_peer(peer) end)
    {:ok, peer: elem(peer, 1), peer_ref: peer}
  end

  defp global_name(tag), do: {:global, {__MODULE__, tag, System.unique_integer([:positive])}}

  test "exec on a server registered :global on another node", %{peer: peer} do
    name = global_name(:remote)

    {:ok, pid} =
      :erpc.call(peer, DynamicSupervisor, :start_child, [
        ExBashkit.Server.Supervisor,
        {Server, name: name}
      ])

    assert node(pid) == peer
    assert GenServer.whereis(name) == pid
    assert {:ok, _} = Server.exec(name, @stateful)
    assert {:ok, %Result{stdout: @expected}} = Server.exec(name, @probe)
    assert {:ok, "kept\n"} = Server.read_file(name, "/work/data.txt")

    assert [{:stdout, "streamed\n"}, {:exit, 0}] =
             Server.stream(name, "echo streamed") |> Enum.to_list()
  end

  test "migrate there and back with the state intact; the name follows", %{peer: peer} do
    name = global_name(:migrate)
    start_supervised!({Server, name: name, checkpoint: true, files: %{"/seed" => "s"}})
    origin = GenServer.whereis(name)
    assert {:ok, _} = Server.exec(name, @stateful)
    gone = Process.monitor(origin)

    assert {:ok, there} = Server.migrate(name, peer)
    assert node(there) == peer
    # The origin answers the migration, then stops once it relays nothing.
    assert_receive {:DOWN, ^gone, :process, ^origin, :normal}, 5_000
    assert GenServer.whereis(name) == there
    assert {:ok, %Result{stdout: @expected}} = Server.exec(name, @probe)
    assert {:ok, "s"} = Server.read_file(name, "/seed")
    assert {:ok, _} = Server.exec(name, "export WENT=there")

    assert {:ok, back} = Server.migrate(name, node())
    assert node(back) == node()
    assert GenServer.whereis(name) == back
    assert {:ok, %Result{stdout: @expected}} = Server.exec(name, @probe)
    assert {:ok, %Result{stdout: "there\n"}} = Server.exec(name, "echo $WENT")

    # Back home it is under ExBashkit's own supervisor, and still checkpoints.
    assert back in for(
             {_, pid, _, _} <- DynamicSupervisor.which_children(ExBashkit.Server.Supervisor),
             do: pid
           )

    ref = Process.monitor(back)
    Process.exit(back, :kill)
    assert_receive {:DOWN, ^ref, :process, _, :killed}, 5_000
    again = eventually(fn -> (pid = GenServer.whereis(name)) && pid != back && pid end)
    assert {:ok, %Result{stdout: "there\n"}} = Server.exec(again, "echo $WENT")
  end

  test "calls that arrive during a migration are each served once", %{peer: peer} do
    name = global_name(:during)
    start_supervised!({Server, name: name})
    assert {:ok, _} = Server.exec(name, "touch /log")

    for {range, target} <- [{1..40, peer}, {41..80, node()}] do
      callers = for i <- range, do: Task.async(fn -> Server.exec(name, "echo #{i} >> /log") end)
      assert {:ok, new} = Server.migrate(name, target)
      assert node(new) == target
      results = Task.await_many(callers, 30_000)
      assert Enum.all?(results, &match?({:ok, %Result{exit_code: 0}}, &1))
    end

    {:ok, log} = Server.read_file(name, "/log")
    lines = log |> String.split("\n", trim: true) |> Enum.map(&String.to_integer/1)
    assert Enum.sort(lines) == Enum.to_list(1..80)
  end

  # After a migration the origin relays what was queued behind it, and
  # stops once nothing is pending and its mailbox is empty, whatever its
  # last message was: a cast that came after the last relayed answer used
  # to keep it alive for good. The origin is suspended while that answer
  # arrives, so the cast comes after it.
  test "the origin stops once it has relayed everything, even after a late cast", %{peer: peer} do
    name = global_name(:relay)
    start_supervised!({Server, name: name})
    origin = GenServer.whereis(name)
    gone = Process.monitor(origin)

    # An exec running, then a migration and an exec queued behind it.
    [running, migration, queued] =
      for call <- [
            fn -> Server.exec(name, "sleep 1; echo first") end,
            fn -> Server.migrate(name, peer) end,
            fn -> Server.exec(name, "sleep 1; echo relayed") end
          ] do
        task = Task.async(call)
        eventually(fn -> Health.waiting?(task.pid) end)
        task
      end

    assert {:ok, %Result{stdout: "first\n"}} = Task.await(running, 10_000)
    assert {:ok, there} = Task.await(migration, 10_000)
    assert node(there) == peer
    :ok = :sys.suspend(origin)

    eventually(fn ->
      match?({:message_queue_len, n} when n > 0, Process.info(origin, :message_queue_len))
    end)

    GenServer.cast(origin, :late)
    :ok = :sys.resume(origin)

    assert {:ok, %Result{stdout: "relayed\n"}} = Task.await(queued, 10_000)
    assert_receive {:DOWN, ^gone, :process, ^origin, :normal}, 5_000
  end

  test "a migration sends only the objects the other node's store lacks; the log comes along",
       %{peer: peer} do
    # Written, not in the options: a successor starts with the options.
    content = :crypto.strong_rand_bytes(1024 * 1024)
    # A session on the peer holds the same megabyte in its history.
    {:ok, holder} = Server.start_link(node: peer)
    assert :ok = Server.write_file(holder, "/data/big", content)
    assert {:ok, _} = Server.commit(holder)

    name = global_name(:objects)
    start_supervised!({Server, name: name})
    assert :ok = Server.write_file(name, "/data/big", content)
    assert {:ok, _} = Server.exec(name, "echo one > /note")
    assert {:ok, first} = Server.commit(name, %{step: "one"})
    assert {:ok, _} = Server.exec(name, "echo two > /note")

    before = sent_to(peer)
    assert {:ok, there} = Server.migrate(name, peer)
    assert node(there) == peer
    assert sent_to(peer) - before < 256 * 1024
    assert {:ok, ^content} = Server.read_file(name, "/data/big")
    assert {:ok, "two\n"} = Server.read_file(name, "/note")
    assert {:ok, [_head, %{id: ^first, meta: %{"step" => "one"}} | _]} = Server.log(name)
    assert :ok = Server.checkout(name, first)
    assert {:ok, "one\n"} = Server.read_file(name, "/note")
  end

  # Bytes this node has sent to `node` over distribution.
  defp sent_to(node) do
    {^node, port} = List.keyfind(:erlang.system_info(:dist_ctrl), node, 0)
    {:ok, [send_oct: bytes]} = :inet.getstat(port, [:send_oct])
    bytes
  end

  test "a migration to a node without ExBashkit fails and leaves the server where it was" do
    name = global_name(:nowhere)
    start_supervised!({Server, name: name})
    pid = GenServer.whereis(name)
    assert {:ok, _} = Server.exec(name, "export STAY=1")
    assert {:error, _} = Server.migrate(name, :"nobody@127.0.0.1")
    assert GenServer.whereis(name) == pid
    assert {:ok, %Result{stdout: "1\n"}} = Server.exec(name, "echo $STAY")
  end

  test "a node goes down: its checkpointed server comes back under the supervisor on the surviving node",
       %{peer: peer, peer_ref: peer_ref} do
    name = global_name(:nodedown)
    start_supervised!({Server, name: name, checkpoint: true, node: peer})

    remote = GenServer.whereis(name)
    assert node(remote) == peer
    assert {:ok, _} = Server.exec(name, @stateful)

    Cluster.stop_peer(peer_ref)

    local = eventually(fn -> (pid = GenServer.whereis(name)) && node(pid) == node() && pid end)
    assert {:ok, %Result{stdout: @expected}} = Server.exec(local, @probe)
    assert {:ok, %Result{stdout: @expected}} = Server.exec(name, @probe)
  end
end
