defmodule ExBashkit.Reliability.KnownIssuesTest do
  # Reproducers for problems this suite found and that are not fixed yet.
  # Each test asserts the behaviour we want, so it FAILS today; they are
  # tagged :known_issue and excluded from the default run (see
  # test/test_helper.exs). Run them with:
  #
  #     mix test --only known_issue
  #
  # When one starts passing, drop its tag and move it next to its peers.
  # SECURITY.md lists each one under "Known issues".
  use ExUnit.Case, async: false

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.{Health, LoopbackHttp}

  @moduletag :known_issue

  @uncapped [
    max_commands: 1_000_000_000_000,
    max_loop_iterations: 1_000_000_000_000,
    max_total_loop_iterations: 1_000_000_000_000
  ]

  # Design (runtime.rs / session.rs): scripts run as tasks on a small tokio
  # pool (one thread per core), and bashkit's interpreter never yields while
  # it computes. A CPU-bound script therefore holds its thread until it ends
  # or hits timeout_ms (default 30 s); one such script per thread and every
  # other exec on every session in the node waits. Measured on 2 cores: with
  # 2 `while true` scripts (timeout 20 s) an `echo hi` elsewhere took 19.4 s.
  @tag timeout: 120_000
  test "CPU-bound scripts, one per interpreter thread, starve every other session" do
    busy = System.schedulers_online() * 2 + 2

    sessions =
      for _ <- 1..busy do
        s = Session.new(limits: @uncapped ++ [timeout_ms: 15_000])
        spawn(fn -> Session.exec(s, "while true; do :; done") end)
        s
      end

    # At least one busy script per thread is running (the rest are queued).
    Health.wait_until(
      fn -> Enum.count(sessions, &Health.running?/1) >= min(busy, System.schedulers_online()) end,
      5_000,
      "the busy scripts to start"
    )

    started = System.monotonic_time(:millisecond)
    assert {:ok, %Result{stdout: "hi\n"}} = Session.exec(Session.new(), "echo hi")
    elapsed = System.monotonic_time(:millisecond) - started
    assert elapsed < 2_000, "an unrelated `echo hi` waited #{elapsed} ms for busy scripts"
  end

  # Design: nothing cancels a script whose caller died; it runs on to its
  # end or its timeout, holding the session and an interpreter thread.
  @tag timeout: 60_000
  test "a script whose caller is killed keeps running until its timeout" do
    s = Session.new(limits: @uncapped ++ [timeout_ms: 20_000])
    caller = spawn(fn -> Session.exec(s, "while true; do :; done") end)
    Health.wait_until(fn -> Health.running?(s) end, 5_000, "the script to start")
    Process.exit(caller, :kill)

    started = System.monotonic_time(:millisecond)
    Health.wait_until(fn -> not Health.running?(s) end, 30_000, "the session to go idle")
    elapsed = System.monotonic_time(:millisecond) - started
    assert elapsed < 1_000, "the orphaned script ran on for #{elapsed} ms"
  end

  # bashkit 0.20.2: Interpreter::execute waits for background jobs at the end
  # of every exec (`jobs.finish_all()`), and clears the job table only when
  # it returns. When the timeout drops the exec, the table is not cleared
  # (`clear_cancelled_execution_state` leaves jobs alone), so the next exec
  # waits for the same job and times out too, for as long as the job lives:
  # `sleep 100000 &` poisons the session for a day. (`kill %1` clears it.)
  @tag timeout: 60_000
  test "a background job that outlives the timeout poisons the session" do
    s = Session.new(limits: [timeout_ms: 500])
    assert {:error, message} = Session.exec(s, "sleep 1000 & wait")
    assert message =~ "timeout"
    assert {:ok, %Result{stdout: "alive\n"}} = Session.exec(s, "echo alive")
  end

  # bashkit 0.20.2: `-L` is ignored when combined with other short flags:
  # `curl -sL` returns the 3xx body with exit 0, `curl -s -L` follows.
  test "`curl -sL` does not follow redirects" do
    {:ok, server} =
      LoopbackHttp.start(
        routes: %{"/from" => {302, [{"location", "/to"}], "moved"}, "/to" => {200, [], "arrived"}}
      )

    base = "http://127.0.0.1:#{LoopbackHttp.port(server)}"
    s = Session.new(allow_net: [base], block_private_ips: false)
    assert {:ok, %Result{stdout: "arrived"}} = Session.exec(s, "curl -s -L #{base}/from")
    assert {:ok, %Result{stdout: "arrived"}} = Session.exec(s, "curl -sL #{base}/from")
  end
end
