defmodule ExBashkit.Run.WarmTest do
  # Interpreters built in advance for a configuration asked for again soon
  # (`native/ex_bashkit/src/run/warm.rs`): whatever the pace of the calls, each
  # session and each one-shot exec gets an interpreter nobody used, built for
  # exactly its own configuration.
  use ExUnit.Case, async: true

  alias ExBashkit.{Result, Session}

  # What a used interpreter would show: a variable, a file, a function, an
  # alias, a cwd and a shell option left by the script before.
  @dirty "export X=1; touch /tmp/f; g() { :; }; alias ll=ls; cd /tmp; set -o pipefail"
  @probe ~S"""
  echo "x=<$X> tmp=<$(ls /tmp)> g=$(type -t g) ll=$(alias ll 2>/dev/null) pwd=$PWD $(set -o | grep pipefail | tr -s ' \t' ' ') s=$SECONDS"
  """
  @fresh "x=<> tmp=<> g= ll= pwd=/ pipefail off"
  # `run/warm.rs`'s MAX_AGE: the longest an interpreter built in advance waits
  # before it is handed out, so `$SECONDS` may count from that much earlier.
  @max_age_ms 500
  # `$SECONDS` counts from the start of the interpreter's build, the shelf's
  # age from its end: a build on a runner of a loaded machine (nice 19) can
  # take a large part of a second, which the bound must allow too.
  @build_slack_ms 1_000

  test "back-to-back sessions each start fresh" do
    for _ <- 1..60 do
      asked_at = now_ms()
      session = Session.new()
      assert {:ok, %Result{stdout: probe}} = Session.exec(session, @probe)
      assert_fresh(probe, asked_at, now_ms())
      assert {:ok, %Result{exit_code: 0}} = Session.exec(session, @dirty)
    end
  end

  test "back-to-back one-shot execs each start fresh" do
    for _ <- 1..60 do
      asked_at = now_ms()
      assert {:ok, %Result{stdout: probe}} = ExBashkit.exec(@probe)
      assert_fresh(probe, asked_at, now_ms())
      assert {:ok, %Result{exit_code: 0}} = ExBashkit.exec(@dirty)
    end
  end

  test "quick one-shot execs, run on the caller's scheduler, each start fresh too" do
    # Literal builtins only: once one has measured what a command costs,
    # such scripts run within the call on an interpreter built in advance
    # (`exec_once` in session/one_shot.rs).
    for i <- 1..100 do
      file = "/tmp/q#{rem(i, 3)}"
      assert {:ok, %Result{stdout: "/\n", exit_code: 1}} = ExBashkit.exec("pwd; test -e #{file}")

      assert {:ok, %Result{stdout: "/tmp\n", exit_code: 0}} =
               ExBashkit.exec("mkdir -p /tmp; touch #{file}; cd /tmp; x=1; pwd")
    end
  end

  test "a session gets an interpreter built for its own configuration" do
    # Alternating configurations, each asked for often enough to be built in
    # advance: a policy, a limit and the defaults must never be swapped.
    for _ <- 1..30 do
      denied = Session.new(commands: [deny: ["sed"]])
      limited = Session.new(limits: [max_loop_iterations: 3])
      default = Session.new()

      assert {:ok, %Result{exit_code: 127}} = Session.exec(denied, "sed --version")
      assert {:ok, %Result{exit_code: 0}} = Session.exec(default, "echo a | sed s/a/b/")

      assert {:error, %ExBashkit.Error{reason: :limit}} =
               Session.run(limited, "for i in 1 2 3 4 5; do :; done")

      assert {:ok, %Result{exit_code: 0}} =
               Session.exec(default, "for i in 1 2 3 4 5; do :; done")
    end
  end

  test "configurations that differ in one value are never mixed up" do
    # More configurations in turn than the node keeps decoded
    # (`config/cache.rs`), each checked by what its session sees.
    for _ <- 1..10, v <- 1..6 do
      session = Session.new(env: %{"V" => "#{v}"})
      assert {:ok, %Result{stdout: out}} = Session.exec(session, "echo $V")
      assert out == "#{v}\n"
    end

    for _ <- 1..10 do
      for {loops, ok?} <- [{3, false}, {5, true}] do
        session = Session.new(limits: [max_loop_iterations: loops])
        result = Session.exec(session, "for i in 1 2 3 4; do :; done")
        assert match?({:ok, %Result{exit_code: 0}}, result) == ok?
      end
    end
  end

  test "sessions created at once from many processes never share an interpreter" do
    tasks =
      for n <- 1..8 do
        Task.async(fn ->
          for i <- 1..25 do
            asked_at = now_ms()
            session = Session.new()
            {:ok, %Result{stdout: probe}} = Session.exec(session, @probe)
            answered_at = now_ms()
            {:ok, _} = Session.exec(session, "echo #{n}-#{i} > /tmp/mine")
            {:ok, %Result{stdout: mine}} = Session.exec(session, "cat /tmp/mine")
            {{probe, asked_at, answered_at}, mine, "#{n}-#{i}\n"}
          end
        end)
      end

    for results <- Task.await_many(tasks, 60_000),
        {{probe, asked_at, answered_at}, mine, expected} <- results do
      assert_fresh(probe, asked_at, answered_at)
      assert mine == expected
    end
  end

  defp now_ms, do: System.monotonic_time(:millisecond)

  # The probe shows nothing a script left, and a `$SECONDS` no larger than
  # the time from asking for the interpreter to the probe's answer plus
  # `@max_age_ms` and `@build_slack_ms`: it counts whole seconds from the
  # interpreter's build. An interpreter handed out stale by seconds fails. (A
  # fixed `s=0` would fail whenever a loaded machine delays the probe past
  # that second.)
  defp assert_fresh(probe, asked_at, answered_at) do
    assert [state, seconds] = probe |> String.trim_trailing() |> String.split(" s=")
    assert state == @fresh
    bound = div(answered_at - asked_at + @max_age_ms + @build_slack_ms, 1000)
    assert String.to_integer(seconds) <= bound
  end
end
