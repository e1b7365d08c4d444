defmodule ExBashkit.Reliability.FairnessTest do
  # Found by this suite as known issues, fixed since: scripts cannot starve
  # each other, and an orphaned script does not run on.
  use ExUnit.Case, async: false

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.Health

  @uncapped ExBashkit.Test.Case.uncapped_limits()

  # bashkit's buffered exec never yields while it computes. When scripts
  # shared a few worker threads, one CPU-bound script per thread stalled
  # every other session (measured: an `echo hi` waited 19.4 s). Scripts now
  # run through bashkit's live execution, which yields every 64 commands, and
  # the runner pool round-robins between them (run/runner.rs).
  @tag timeout: 120_000
  test "CPU-bound scripts do not starve other sessions" do
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

    assert {:ok, %Result{stdout: "hi\n"}} = Session.exec(Session.new(), "echo hi")
    # Ordered, not timed: answered while busy scripts still ran (each
    # stops at its 15 s limit, or the cancel below; before the fix the
    # `echo` waited 19 s).
    assert Enum.any?(sessions, &Health.running?/1)
    Enum.each(sessions, &Session.cancel/1)
  end

  # A command that never yields inside (jq's `reduce` here) used to hold
  # the thread it ran on: in the node, the dirty scheduler its exec started
  # on. With one such script per dirty scheduler, every exec that is not
  # quick waited for them (measured: a 3-iteration loop waited 7.7 s). A
  # script naming such a command now runs on a thread of its own
  # (`runner::drive_on_own_thread`).
  @tag timeout: 120_000
  test "scripts in long commands that never yield do not hold up other sessions" do
    long = "jq -n 'reduce range(30000000) as $x (0; .)'"

    sessions = for _ <- 1..System.schedulers_online(), do: Session.new()
    refs = for s <- sessions, do: elem(Session.exec_async(s, long), 1)
    Health.wait_until(fn -> Enum.all?(sessions, &Health.running?/1) end, 5_000, "the jq runs")

    assert {:ok, %Result{stdout: "1\n2\n3\n"}} =
             Session.exec(Session.new(), "for i in 1 2 3; do echo $i; done")

    # Ordered, not timed: the loop was answered while every jq still ran.
    for ref <- refs, do: refute_received({:ex_bashkit, ^ref, _})
    for ref <- refs, do: assert_receive({:ex_bashkit, ^ref, {:ok, %Result{}}}, 60_000)
  end

  # The session monitors each exec's caller and cancels the exec when the
  # caller dies, instead of running it on to its end or timeout.
  @tag timeout: 60_000
  test "a script whose caller is killed stops" do
    s = Session.new(limits: @uncapped ++ [timeout_ms: 20_000])
    caller = spawn(fn -> Session.exec(s, "while true; do :; done") end)
    Health.wait_until(fn -> Health.running?(s) end, 5_000, "the script to start")
    Process.exit(caller, :kill)

    started = System.monotonic_time(:millisecond)
    Health.wait_until(fn -> not Health.running?(s) end, 30_000, "the session to go idle")
    elapsed = System.monotonic_time(:millisecond) - started
    # Well under its 20 s limit: it was cancelled, not timed out.
    assert elapsed < 10_000, "the orphaned script ran on for #{elapsed} ms"
  end
end
