defmodule ExBashkit.Reliability.GroupsTest do
  # Sessions of a `:group` live on a worker process of that group's own:
  # a crash there costs that group only (issue 67's 8-neighbour case).
  use ExUnit.Case, async: true

  alias ExBashkit.{Result, Session, Worker}

  @moduletag :process_only
  @moduletag timeout: 120_000

  @crasher "jq -n 'def f(x): f(x+1); f(0)'"

  defp os_pid(session), do: Session.info(session).os_pid

  defp tenant(i, opts) do
    session = Session.new([files: %{"/data" => "file #{i}"}] ++ opts)

    assert {:ok, %Result{exit_code: 0}} =
             Session.exec(session, "export KEEP=#{i}; cd /tmp; greet() { echo hello #{i}; }")

    session
  end

  defp assert_intact(session, i) do
    assert {:ok, %Result{stdout: stdout}} =
             Session.exec(session, "echo $KEEP $(pwd) $(cat /data); greet")

    assert stdout == "#{i} /tmp file #{i}\nhello #{i}\n"
  end

  # The attacker crashes its process three times while the first neighbour
  # runs an exec: every neighbour keeps its state, that exec and its process.
  defp assert_crashes_cost_nothing(neighbours, attacker) do
    pids = Enum.map(neighbours, &os_pid/1)
    assert length(Enum.uniq(pids)) == length(neighbours)
    refute os_pid(attacker) in pids

    running = Task.async(fn -> Session.exec(hd(neighbours), "sleep 1; echo $KEEP") end)

    for _round <- 1..3 do
      assert {:error, %{message: message}} = Session.run(attacker, @crasher, timeout_ms: 20_000)
      assert message =~ ~r/crashed|timed out/, message
    end

    assert {:ok, {:ok, %Result{stdout: "1\n"}}} = Task.yield(running, 30_000)
    for {session, i} <- Enum.with_index(neighbours, 1), do: assert_intact(session, i)
    assert Enum.map(neighbours, &os_pid/1) == pids
  end

  test "a crash in one group's process costs no other session its state or running exec" do
    neighbours = for i <- 1..8, do: tenant(i, group: {:tenant, i})
    assert Enum.all?(neighbours, &(Session.info(&1).group |> elem(0) == :tenant))
    assert_crashes_cost_nothing(neighbours, Session.new(group: :attacker))
  end

  test "on the default options each session has a process of its own: a crasher costs its neighbours nothing" do
    neighbours = for i <- 1..8, do: tenant(i, [])
    assert_crashes_cost_nothing(neighbours, Session.new())
    # A fork lives in its parent's process (the same tenant).
    assert {:ok, fork} = Session.fork(hd(neighbours))
    assert os_pid(fork) == os_pid(hd(neighbours))
  end

  test "sessions of one group share a process; a group never shares with another" do
    [a, b] = for _ <- 1..2, do: Session.new(group: :shared_group)
    other = Session.new(group: :another_group)
    plain = Session.new()

    [pid_a, pid_b, pid_other, pid_plain] = Enum.map([a, b, other, plain], &os_pid/1)
    assert Enum.all?([pid_a, pid_other, pid_plain], &is_integer/1)
    assert pid_a == pid_b
    refute pid_other == pid_a
    refute pid_plain in [pid_a, pid_other], inspect({pid_plain, pid_a, pid_other})
    assert Session.info(a).group == :shared_group
    assert Session.info(plain).group == nil
    refute os_pid(Session.new()) == pid_plain
  end

  test "limits: [max_memory_bytes: n] gives a session a process of its own, capped" do
    session = Session.new(limits: [max_memory_bytes: 256 * 1024 * 1024])
    other = Session.new(limits: [max_memory_bytes: 256 * 1024 * 1024])
    refute os_pid(session) == os_pid(other)
    limit = Session.info(session).confinement.memory_limit
    assert limit >= 256 * 1024 * 1024
    assert File.read!("/proc/#{os_pid(session)}/limits") =~ ~r/Max address space\s+#{limit}/
    assert Session.info(session).group == nil

    # A bomb past the cap costs that process only.
    assert {:error, _} = Session.exec(session, @crasher, timeout_ms: 20_000)
    assert {:ok, %Result{stdout: "ok\n"}} = Session.exec(other, "echo ok")
  end

  test "a group's process stops with its last session" do
    group = {:short_lived, System.unique_integer()}
    session = Session.new(group: group)
    pid = os_pid(session)
    {:process, name, _sid} = session.location
    worker = GenServer.whereis(name)
    assert Worker.os_pid(worker) == pid
    ref = Process.monitor(worker)
    # The session's handle is its only reference: drop it and collect it.
    session = nil
    _ = session
    :erlang.garbage_collect()
    assert_receive {:DOWN, ^ref, :process, _, :normal}, 5_000
  end

  test "one-shot scripts run on processes that hold no session" do
    session = Session.new()
    assert {:ok, %Result{stdout: "once\n"}} = ExBashkit.exec("echo once")

    once =
      for name <- ExBashkit.WorkerPool.workers(),
          is_atom(name),
          String.contains?(Atom.to_string(name), ".Once."),
          Worker.os_pid(name) != nil,
          do: name

    assert once != []

    for name <- once do
      refute Worker.os_pid(name) == os_pid(session)
      assert Worker.call(Process.whereis(name), {:live_sessions}) == 0
    end
  end
end
