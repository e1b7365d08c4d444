defmodule ExBashkit.Reliability.RunnerTest do
  # The runner (native/ex_bashkit/src/run/runner.rs): a script runs inline for a
  # short slice, then on a fixed pool of runner threads (one per core) that
  # it shares with every other long script by yielding every 64 commands.
  # These tests hold more long or waiting scripts than there are runners, so
  # they fail if a script holds a runner to its end or while it waits.
  use ExUnit.Case, async: false

  alias ExBashkit.{Error, Result, Session}
  alias ExBashkit.Test.Health

  @uncapped ExBashkit.Test.Case.uncapped_limits()
  @forever "while true; do :; done"
  # Runs well past the inline slice (thousands of commands).
  @finite "i=0; while [ $i -lt 3000 ]; do i=$((i + 1)); done; echo $i"

  defp busy(n) do
    for _ <- 1..n do
      s = Session.new(limits: @uncapped ++ [timeout_ms: 30_000])
      spawn(fn -> Session.exec(s, @forever) end)
      s
    end
  end

  defp stop(sessions), do: Enum.each(sessions, &Session.cancel/1)

  @tag timeout: 120_000
  test "a long script completes while more endless scripts than runners run" do
    sessions = busy(System.schedulers_online() * 3)

    Health.wait_until(
      fn -> Enum.all?(sessions, &Health.running?/1) end,
      10_000,
      "every endless script to be running"
    )

    s = Session.new(limits: @uncapped)
    task = Task.async(fn -> Session.exec(s, @finite) end)
    result = Task.yield(task, 60_000) || Task.shutdown(task)
    stop(sessions)
    assert {:ok, {:ok, %Result{stdout: "3000\n"}}} = result
  end

  @tag timeout: 60_000
  test "cancel/1 and a per-call timeout stop scripts running on the runners" do
    s = Session.new(limits: @uncapped ++ [timeout_ms: 30_000])
    parent = self()
    spawn(fn -> send(parent, {:cancelled, Session.exec(s, @forever)}) end)
    Health.wait_until(fn -> Health.running?(s) end, 10_000, "the script to start")
    assert Session.cancel(s)
    assert_receive {:cancelled, {:error, _}}, 20_000

    t = Session.new(limits: @uncapped ++ [timeout_ms: 30_000])
    assert {:error, _} = Session.exec(t, @forever, timeout_ms: 300)
    assert {:ok, %Result{stdout: "again\n"}} = Session.exec(t, "echo again")
  end

  # In the node, once a session has measured what its commands cost, a loop
  # whose every command is bounded (native/ex_bashkit/src/run/bounded_steps.rs)
  # starts on the caller's own scheduler, inside the exec NIF. It must leave
  # it within a NIF's time for the runners, where it stops as any long
  # script does: its caller is then seen waiting for the answer, not running
  # the NIF until the script ends.
  @tag timeout: 60_000
  test "a loop started on the caller's scheduler leaves it for the runners" do
    s = Session.new(isolation: :in_node, limits: @uncapped ++ [timeout_ms: 30_000])
    assert {:ok, %Result{stdout: "hi\n"}} = Session.exec(s, "echo hi")
    short = "i=0; while [ $i -lt 50 ]; do i=$((i + 1)); done; echo $i"
    assert {:ok, %Result{stdout: "50\n"}} = Session.exec(s, short)
    assert {:ok, %Result{stdout: "50\n"}} = Session.exec(s, short)

    parent = self()
    caller = spawn(fn -> send(parent, {:ended, Session.run(s, @forever, timeout_ms: 3_000)}) end)

    Health.wait_until(
      fn -> Health.waiting?(caller) end,
      2_000,
      "the caller to wait for its script's answer"
    )

    # Stopped by its deadline, or by bashkit's work budget if that comes first.
    assert_receive {:ended, {:error, %Error{reason: reason}}}, 20_000
    assert reason in [:timeout, :limit]
    assert {:ok, %Result{stdout: "3000\n"}} = Session.exec(s, @finite)
    sum = "s=0; for ((i = 0; i < 5000; i++)); do s=$((s + i)); done; echo $s"
    assert {:ok, %Result{stdout: "12497500\n"}} = Session.exec(s, sum)
  end

  # A quick script (`echo hi`) runs on the caller's scheduler only while
  # the session holds no code that could run in its stead. A streamed
  # script that defines a function named `echo` must count, as any other.
  @tag timeout: 60_000
  test "a function a streamed script defined never runs on the caller's scheduler" do
    s = Session.new(isolation: :in_node, limits: @uncapped ++ [timeout_ms: 30_000])
    assert {:ok, %Result{stdout: "hi\n"}} = Session.exec(s, "echo hi")
    assert [exit: 0] = Enum.to_list(Session.stream(s, "echo() { while :; do :; done; }"))

    for _ <- 1..2 do
      parent = self()

      caller =
        spawn(fn -> send(parent, {:ended, Session.run(s, "echo hi", timeout_ms: 3_000)}) end)

      Health.wait_until(
        fn -> Health.waiting?(caller) end,
        2_000,
        "the caller to wait for its script's answer"
      )

      assert_receive {:ended, {:error, %Error{}}}, 20_000
    end
  end

  @tag timeout: 120_000
  test "scripts waiting for a builtin hold no runner" do
    parent = self()
    waiting = System.schedulers_online() * 4

    gate = fn _call ->
      send(parent, {:waiting, self()})

      receive do
        :go -> {:ok, "released\n"}
      after
        30_000 -> {:ok, "timed out\n"}
      end
    end

    callers =
      for _ <- 1..waiting do
        s = Session.new(builtins: %{"gate" => gate})
        Task.async(fn -> Session.exec(s, "gate") end)
      end

    handlers =
      for _ <- 1..waiting do
        assert_receive {:waiting, pid}, 20_000
        pid
      end

    # Every runner would be held by a waiting script if waiting held one.
    s = Session.new(limits: @uncapped)
    assert {:ok, %Result{stdout: "3000\n"}} = Session.exec(s, @finite, timeout_ms: 60_000)

    Enum.each(handlers, &send(&1, :go))
    results = Task.yield_many(callers, 30_000)
    assert Enum.all?(results, &match?({_, {:ok, {:ok, %Result{stdout: "released\n"}}}}, &1))
  end

  test "streamed output arrives in order and whole, and the result holds it all" do
    s = Session.new()
    script = "for i in 1 2 3; do echo out$i; echo err$i >&2; done"

    assert {:ok, %Result{stdout: "out1\nout2\nout3\n", stderr: "err1\nerr2\nerr3\n"}} =
             Session.exec(s, script, stream_to: {self(), :chunk})

    chunks = collect([])
    assert chunks |> Keyword.get_values(:stdout) |> Enum.join() == "out1\nout2\nout3\n"
    assert chunks |> Keyword.get_values(:stderr) |> Enum.join() == "err1\nerr2\nerr3\n"
  end

  defp collect(acc) do
    receive do
      {:chunk, {stream, data}} -> collect([{stream, data} | acc])
    after
      200 -> Enum.reverse(acc)
    end
  end
end
