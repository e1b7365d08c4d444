defmodule ExBashkit.Reliability.VmShutdownTest do
  # VM teardown with the interpreter runtime busy: another Elixir package on
  # bashkit saw segfaults at exit and turned its NIF tests off. Each scenario
  # runs in a child VM (ExBashkit.Test.ChildVM) that starts work, prints
  # READY and stops while scripts are running, replies are in flight and
  # sessions are alive. The child must exit with status 0 and no crash.
  #
  # The default suite runs each scenario once; the :heavy test repeats them.
  # Not async: each child VM keeps both cores busy.
  # scripts/stress additionally runs the whole suite many times in a row.
  use ExUnit.Case, async: false

  alias ExBashkit.Test.ChildVM

  # More interpreter threads than busy scripts: a CPU-bound script holds its
  # thread until its timeout (see known_issues_test.exs), and the child must
  # still get to READY while they run.
  @setup ~S"""
  Application.put_env(:ex_bashkit, :worker_threads, 8)
  alias ExBashkit.Session
  long = [limits: [timeout_ms: 60_000, max_commands: 1_000_000_000_000,
          max_loop_iterations: 1_000_000_000_000, max_total_loop_iterations: 1_000_000_000_000]]
  keep = for i <- 1..2_000, do: Session.new(files: %{"/f" => "#{i}"}, group: :keep)
  for _ <- 1..3 do
    s = Session.new(long)
    spawn(fn -> Session.exec(s, "while true; do :; done") end)
  end
  for _ <- 1..4 do
    s = Session.new(long)
    spawn(fn -> Session.exec(s, "sleep 30") end)
  end
  # Replies in flight: processes exec'ing in a tight loop, some on shared sessions.
  for i <- 1..100 do
    s = Enum.at(keep, rem(i, 50))
    spawn(fn -> Stream.repeatedly(fn -> Session.exec(s, "echo $RANDOM; cat /f") end) |> Stream.run() end)
  end
  for _ <- 1..20, do: spawn(fn -> Stream.repeatedly(fn -> ExBashkit.exec("echo once") end) |> Stream.run() end)
  Process.sleep(300)
  {:ok, %{stdout: "ready\n"}} = Session.exec(Session.new(), "echo ready")
  IO.puts("READY #{length(keep)}")
  """

  @scenarios %{
    "System.halt(0) with scripts running" => "System.halt(0)",
    "System.stop(0) (graceful) with scripts running" =>
      "System.stop(0); Process.sleep(:infinity)",
    ":init.stop() with scripts running" => ":init.stop(); Process.sleep(:infinity)",
    "falling off the end of the script" => ":ok",
    "halting from inside a process that is mid-exec" => ~S"""
    s = ExBashkit.Session.new()
    spawn(fn -> ExBashkit.Session.exec(s, "sleep 0.05; echo late") end)
    spawn(fn -> Process.sleep(50); System.halt(0) end)
    Process.sleep(:infinity)
    """
  }

  defp run_scenario(name, stop) do
    {output, status} = ChildVM.run(@setup <> "\n" <> stop, timeout: 120_000)

    assert output =~ "READY 2000", "#{name}: the child did not get going:\n#{output}"

    refute output =~ ~r/segmentation fault|core dumped|panicked|SIGSEGV|SIGABRT|Aborted/i,
           "#{name}:\n#{output}"

    assert status == 0, "#{name}: the child VM exited with status #{inspect(status)}:\n#{output}"
  end

  for {name, stop} <- @scenarios do
    @tag timeout: 300_000
    test "the VM exits cleanly: #{name}" do
      run_scenario(unquote(name), unquote(stop))
    end
  end

  @tag :heavy
  @tag timeout: :infinity
  test "every teardown scenario, 10 times each" do
    for _ <- 1..10, {name, stop} <- @scenarios, do: run_scenario(name, stop)
  end
end
