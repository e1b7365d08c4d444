defmodule ExBashkit.Reliability.LoadTest do
  # Load and faults: many processes exec'ing on shared sessions while their
  # callers are killed at random mid-exec. No deadlock (every session goes
  # idle and answers again), no leak (sessions, processes, stray messages),
  # every surviving session usable.
  #
  # The full run (1 000 processes x 100 execs over 200 sessions) is :heavy;
  # the default suite runs a small version of the same test.
  #
  # Not async: it counts live sessions and BEAM processes.
  use ExUnit.Case, async: false

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.Health

  @scripts [
    "echo hi",
    "n=$(cat /count); echo $((n + 1)) > /count",
    "for i in 1 2 3 4 5; do echo $i; done | wc -l",
    "sleep 0.001; echo slept",
    "x=$(seq 1 200 | sort -r | head -1); echo $x",
    "echo data > /tmp/f$RANDOM; ls /tmp | wc -l",
    "if then",
    "i=0; while [ $i -lt 200 ]; do i=$((i+1)); done",
    "f() { f; }; f",
    "exit 3"
  ]

  @tag timeout: :infinity
  test "small: 100 processes x 20 execs over 20 sessions, callers killed mid-exec" do
    run_load(processes: 100, execs: 20, sessions: 20, kill_ratio: 0.3)
  end

  @tag :heavy
  @tag timeout: :infinity
  test "heavy: 1 000 processes x 100 execs over 200 sessions, callers killed mid-exec" do
    run_load(processes: 1_000, execs: 100, sessions: 200, kill_ratio: 0.3)
  end

  defp run_load(opts) do
    n_proc = opts[:processes]
    n_exec = opts[:execs]
    n_sess = opts[:sessions]

    Health.settle_live_sessions(ExBashkit.Native.live_sessions())
    live_before = ExBashkit.Native.live_sessions()
    procs_before = length(Process.list())
    started = System.monotonic_time(:millisecond)

    sessions =
      for _ <- 1..n_sess, do: Session.new(files: %{"/count" => "0"}, limits: [timeout_ms: 10_000])

    sessions = List.to_tuple(sessions)
    parent = self()

    # Doomed workers are killed mid-exec: each picks the exec it dies in and
    # tells the killer just before calling it; the killer waits 0-2 ms (so the
    # kill lands before submission, while queued on the session, or while the
    # script runs) and kills it.
    doomed =
      1..n_proc
      |> Enum.take_random(round(n_proc * opts[:kill_ratio]))
      |> Map.new(&{&1, :rand.uniform(n_exec)})

    killer =
      spawn_link(fn ->
        Stream.repeatedly(fn ->
          receive do
            {:about_to_exec, pid} ->
              Process.sleep(:rand.uniform(3) - 1)
              Process.exit(pid, :kill)
          end
        end)
        |> Stream.run()
      end)

    workers =
      for w <- 1..n_proc do
        dies_at = Map.get(doomed, w)

        spawn_monitor(fn ->
          for i <- 1..n_exec do
            session = elem(sessions, :rand.uniform(n_sess) - 1)
            script = Enum.at(@scripts, rem(w + i, length(@scripts)))
            if i == dies_at, do: send(killer, {:about_to_exec, self()})

            case Session.run(session, script) do
              {:ok, %Result{}} -> :ok
              {:error, %ExBashkit.Error{message: message}} when is_binary(message) -> :ok
              other -> exit({:bad_outcome, script, other})
            end
          end

          send(parent, {:worker_done, self()})
        end)
      end

    # Every worker ends: normally, or killed. Anything else is a failure.
    outcomes =
      for {pid, ref} <- workers do
        receive do
          {:DOWN, ^ref, :process, ^pid, reason} -> reason
        after
          600_000 -> flunk("worker #{inspect(pid)} never finished: deadlock?")
        end
      end

    Process.unlink(killer)
    Process.exit(killer, :kill)
    bad = Enum.reject(outcomes, &(&1 in [:normal, :killed]))
    assert bad == [], "workers failed: #{inspect(Enum.take(bad, 5))}"
    killed = Enum.count(outcomes, &(&1 == :killed))

    # No deadlock: every session goes idle (scripts of killed callers still
    # finish on their own) and answers again.
    for s <- Tuple.to_list(sessions) do
      Health.wait_until(fn -> not Health.running?(s) end, 120_000, "session to go idle")
      Health.assert_usable!(s)
      assert {:ok, count} = Session.read_file(s, "/count")
      assert count =~ ~r/^\d+\n?$/
    end

    elapsed = System.monotonic_time(:millisecond) - started

    IO.puts(
      "\n  load: #{n_proc} processes x #{n_exec} execs over #{n_sess} sessions, " <>
        "#{killed} callers killed mid-run, all sessions usable, #{elapsed} ms"
    )

    # No stray replies reached this process (they belong to the workers).
    for {:worker_done, _} <- flush(), do: :ok
    assert Enum.filter(flush(), &match?({:ex_bashkit_reply, _, _}, &1)) == []

    # No leak: sessions are freed once dropped, processes return to baseline.
    sessions = nil
    _ = sessions
    Health.settle_live_sessions(live_before, 30_000)

    Health.wait_until(
      fn -> length(Process.list()) <= procs_before + 5 end,
      30_000,
      "BEAM processes to return to baseline"
    )

    Health.assert_healthy!()
  end

  defp flush do
    receive do
      message -> [message | flush()]
    after
      0 -> []
    end
  end
end
