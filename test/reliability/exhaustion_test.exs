defmodule ExBashkit.Reliability.ExhaustionTest do
  # Resource exhaustion, each case a named test: it must end within a bound
  # (by a limit, as `{:error, _}` or a result whose stderr names the limit),
  # the session must still answer afterwards, and the node must be healthy
  # (fresh sessions, one-shot execs and concurrent execs all work, and the
  # OS-level memory of the VM has not run away).
  #
  # Not async: these tests are CPU- and memory-hungry, and the memory check
  # reads the whole VM's RSS.
  use ExUnit.Case, async: false

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.Health

  # Generous: "it ended", not a benchmark.
  @bound_ms 60_000
  # Counts out of the way, so only the limit under test can stop the script.
  @uncapped ExBashkit.Test.Case.uncapped_limits()

  setup do
    rss_before = Health.rss_kb()

    on_exit(fn ->
      Health.assert_healthy!()
      Health.gc_all()
      # 1 GiB of headroom is far above anything a bounded case needs and far
      # below what an unbounded one would eat.
      growth = Health.rss_kb() - rss_before
      assert growth < 1_048_576, "VM RSS grew by #{growth} KiB"
    end)

    :ok
  end

  # Run `script` on a fresh session with `opts`; assert it ends within the
  # bound; return `{outcome, elapsed_ms, session}`.
  defp bounded_exec(script, opts \\ []) do
    s = Session.new(opts)
    started = System.monotonic_time(:millisecond)
    task = Task.async(fn -> Session.run(s, script) end)

    outcome =
      case Task.yield(task, @bound_ms) || Task.shutdown(task, :brutal_kill) do
        {:ok, outcome} -> outcome
        nil -> flunk("#{inspect(String.slice(script, 0, 80))} did not end within #{@bound_ms} ms")
      end

    elapsed = System.monotonic_time(:millisecond) - started
    Health.assert_usable!(s)
    {outcome, elapsed, s}
  end

  describe "infinite loops" do
    test "while true, default limits: stopped by the command/loop fuel" do
      {{:error, %{message: message}}, _, _} = bounded_exec("while true; do :; done")
      assert message =~ ~r/maximum (command count|loop iterations)/
    end

    test "while true, counts uncapped: stopped by the wall-clock timeout" do
      {{:error, %{message: message}}, elapsed, _} =
        bounded_exec("while true; do :; done", limits: @uncapped ++ [timeout_ms: 500])

      assert message =~ "timeout"
      assert elapsed < 10_000
    end

    test "nested loops cannot multiply their way past the total-iteration cap" do
      {{:error, %{message: message}}, _, _} =
        bounded_exec(
          "for a in $(seq 1 1000); do for b in $(seq 1 1000); do :; done; done",
          limits: [
            max_commands: 1_000_000_000_000,
            max_loop_iterations: 1_000_000_000_000,
            max_total_loop_iterations: 100_000
          ]
        )

      assert message =~ "max_total_loop_iterations"
    end

    test "sleep past the timeout" do
      {{:error, %{message: message}}, elapsed, _} =
        bounded_exec("sleep 100000", limits: [timeout_ms: 300])

      assert message =~ "timeout"
      assert elapsed < 10_000
    end

    test "loops inside awk, sed and jq" do
      for script <- [
            "awk 'BEGIN { while (1) {} }'",
            "echo x | sed ':a; s/x/x/; ba'",
            "echo 1 | jq 'def f: f; f'",
            "jq -n 'repeat(1)'"
          ] do
        # Each ends (by its own loop cap, the output cap or the timeout);
        # that is the whole point.
        {outcome, _, _} = bounded_exec(script, limits: [timeout_ms: 2_000])
        assert match?({:error, _}, outcome) or match?({:ok, %Result{}}, outcome)
      end
    end
  end

  describe "process bombs and recursion" do
    test "fork bomb :(){ :|:& };:" do
      {{:ok, %Result{stderr: stderr}}, _, _} = bounded_exec(":(){ :|:& };:")
      assert stderr =~ "maximum function depth exceeded"
    end

    test "deep recursion: functions, eval, source, nested bash, substitutions, pipes" do
      for script <- [
            "f() { f; }; f",
            "f() { eval f; }; f",
            "f() { echo $(f); }; f",
            "f() { f | f; }; f",
            "f() { ( f ); }; f",
            "echo 'source /r.sh' > /r.sh; source /r.sh",
            "echo 'bash /r.sh' > /r.sh; bash /r.sh",
            "echo 'sh -c \"bash /r.sh\"' > /r.sh; bash /r.sh"
          ] do
        {outcome, _, _} = bounded_exec(script, limits: [max_function_depth: 16])

        assert match?({:error, _}, outcome) or
                 match?({:ok, %Result{exit_code: c}} when c != 0, outcome),
               "#{script}: #{inspect(outcome)}"
      end
    end

    test "deeply nested syntax is refused by the parser" do
      for script <- [
            String.duplicate("(", 100_000) <> String.duplicate(")", 100_000),
            String.duplicate("{ ", 50_000) <> ":" <> String.duplicate("; }", 50_000),
            String.duplicate("$(", 50_000) <> String.duplicate(")", 50_000),
            "echo $((" <>
              String.duplicate("1+(", 100_000) <> "1" <> String.duplicate(")", 100_000) <> "))",
            String.duplicate("${x:-", 100_000) <> String.duplicate("}", 100_000),
            "[[ " <>
              String.duplicate("( ", 100_000) <> "a" <> String.duplicate(" )", 100_000) <> " ]]",
            Enum.join(List.duplicate("cat", 100_000), " | ")
          ] do
        {outcome, _, _} = bounded_exec(script)

        assert match?({:error, _}, outcome) or
                 match?({:ok, %Result{exit_code: c}} when c != 0, outcome)
      end
    end
  end

  describe "memory" do
    test "string doubling until memory runs out" do
      {{:error, %{message: message}}, _, _} = bounded_exec("x=a; while true; do x=$x$x; done")
      assert message =~ "memory limit"
    end

    test "string doubling with every count uncapped still ends" do
      {{:error, %{message: message}}, _, _} =
        bounded_exec("x=a; while true; do x=$x$x; done", limits: @uncapped ++ [timeout_ms: 5_000])

      assert message =~ ~r/memory|timeout/
    end

    test "arrays, associative arrays, variables and functions that grow forever" do
      for script <- [
            "a=(x); while :; do a=(\"${a[@]}\" \"${a[@]}\"); done",
            "declare -A m; i=0; while :; do m[k$i]=$i; i=$((i+1)); done",
            "i=0; while :; do eval v$i=x; i=$((i+1)); done",
            "i=0; while :; do eval \"f$i() { :; }\"; i=$((i+1)); done",
            "awk 'BEGIN { s = \"x\"; while (1) s = s s }'",
            "jq -n '[range(100000000)] | length'",
            "printf -v x '%*s' 100000000 ''"
          ] do
        {outcome, _, _} = bounded_exec(script, limits: @uncapped ++ [timeout_ms: 1_000])

        assert match?({:error, _}, outcome) or
                 match?({:ok, %Result{exit_code: c}} when c != 0, outcome),
               "#{script}: #{inspect(outcome, limit: 5)}"
      end
    end
  end

  describe "filesystem" do
    test "huge file writes: a file doubling until the size limit" do
      {{:ok, %Result{stdout: out, stderr: err}}, _, s} =
        bounded_exec("echo x > /f; while cat /f /f > /g; do mv /g /f; done; wc -c < /f")

      assert err =~ "file too large"
      assert String.to_integer(String.trim(out)) <= 10_000_000
      assert {:ok, %{size: size}} = Session.stat(s, "/f")
      assert size <= 10_000_000
    end

    test "huge file writes: many files until the count limit" do
      {{:ok, %Result{stdout: out, stderr: err}}, _, _} =
        bounded_exec(
          "for i in $(seq 1 20000); do echo $i > /f$i || { echo stopped; break; }; done",
          limits: @uncapped
        )

      assert out =~ "stopped"
      assert err =~ "too many files"
    end

    test "huge file writes: the total-size limit across files" do
      {{:ok, %Result{stdout: out, stderr: err}}, _, _} =
        bounded_exec(
          """
          echo x > /s; while [ $(wc -c < /s) -lt 4000000 ]; do cat /s /s > /t; mv /t /s; done
          cat /s /s > /seed
          for i in $(seq 1 20); do cp /seed /c$i || { echo stopped at $i; break; }; done
          """,
          limits: @uncapped ++ [timeout_ms: 30_000]
        )

      assert out =~ "stopped at"
      assert err != ""
    end

    test "huge file writes through the API are refused" do
      s = Session.new()
      assert {:error, _} = Session.write_file(s, "/big", :binary.copy("x", 200_000_000))

      results =
        for i <- 1..15, do: Session.write_file(s, "/part#{i}", :binary.copy("y", 9_000_000))

      assert {:error, _} = Enum.find(results, &match?({:error, _}, &1)),
             "100 MB of total file data should have hit the filesystem limit"

      Health.assert_usable!(s)
    end

    test "deep directory trees and long names" do
      {outcome, _, _} =
        bounded_exec(
          "p=/d; for i in $(seq 1 5000); do p=$p/d; done; mkdir -p $p; touch /$(printf 'n%.0s' {1..5000})"
        )

      assert match?({:ok, %Result{exit_code: c}} when c != 0, outcome)

      s = Session.new()
      assert {:error, _} = Session.mkdir(s, String.duplicate("/d", 5_000), parents: true)
      assert {:error, _} = Session.write_file(s, "/" <> String.duplicate("n", 5_000), "x")
    end
  end

  describe "output" do
    test "output floods are capped at 1 MiB per stream, flagged as truncated" do
      {{:ok, r}, _, _} =
        bounded_exec(
          "for i in $(seq 1 60000); do echo xxxxxxxxxxxxxxxxxxxxxxxx; echo yyyyyyyyyyyyyyyyyyyyyyyy >&2; done",
          limits: @uncapped
        )

      assert byte_size(r.stdout) <= 1_048_576 and r.stdout_truncated
      assert byte_size(r.stderr) <= 1_048_576 and r.stderr_truncated
    end

    test "an endless flood is stopped by the timeout" do
      {{:error, %{message: message}}, _, _} =
        bounded_exec("while :; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; done",
          limits: @uncapped ++ [timeout_ms: 1_000]
        )

      assert message =~ "timeout"
    end

    test "small output caps hold for stdout and stderr" do
      {{:ok, r}, _, _} =
        bounded_exec("seq 1 10000; seq 1 1000 >&2",
          limits: [max_stdout_bytes: 1_000, max_stderr_bytes: 10]
        )

      assert byte_size(r.stdout) == 1_000 and r.stdout_truncated
      assert byte_size(r.stderr) == 10 and r.stderr_truncated
    end

    test "yes, and a 5 MB heredoc" do
      {{:ok, r}, _, _} = bounded_exec("yes")
      assert byte_size(r.stdout) <= 1_048_576

      {{:ok, r}, _, _} =
        bounded_exec("cat <<EOF\n" <> String.duplicate("x", 5_000_000) <> "\nEOF\n")

      assert byte_size(r.stdout) <= 1_048_576 and r.stdout_truncated
    end
  end

  describe "input" do
    test "a huge script is refused before it runs" do
      for size <- [10_000_001, 100_000_000] do
        {{:error, %{message: message}}, _, _} = bounded_exec(String.duplicate("#", size))
        assert message =~ "input too large"
      end
    end

    test "a large script of many commands stops at the command fuel" do
      {{:error, %{message: message}}, _, _} = bounded_exec(String.duplicate(":\n", 4_500_000))
      assert message =~ "maximum command count"
    end

    test "one-shot ExBashkit.exec/1 is bounded the same way" do
      for script <- [
            "while true; do :; done",
            "f() { f; }; f",
            "x=a; while true; do x=$x$x; done"
          ] do
        assert {:error, _} = ExBashkit.exec(script)
      end

      assert {:error, _} = ExBashkit.exec(String.duplicate("#", 10_000_001))
    end

    test "huge stdin" do
      s = Session.new()

      case Session.run(s, "wc -c", stdin: :binary.copy("z", 50_000_000)) do
        {:ok, r} -> assert r.stdout == "50000000\n"
        {:error, %{message: message}} -> assert message =~ "limit"
      end

      Health.assert_usable!(s)
    end
  end
end
