defmodule ExBashkit.Session.ExecTest do
  # What agent frameworks need beyond plain exec: streaming, cancellation,
  # per-call timeouts, stdin, file changes, caps, cumulative limits, state,
  # reset.
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Result, Session}

  defp wait_until_started(session) do
    unless match?({:ok, _}, Session.stat(session, "/started")) do
      Process.sleep(1)
      wait_until_started(session)
    end
  end

  describe "streaming" do
    test "stream_to sends chunks in order and the result still has everything" do
      s = Session.new()

      assert %Result{stdout: "a\nc\n", stderr: "b\n"} =
               run!(s, "echo a; echo b >&2; echo c", stream_to: {self(), :out})

      assert_received {:out, {:stdout, "a\n"}}
      assert_received {:out, {:stderr, "b\n"}}
      assert_received {:out, {:stdout, "c\n"}}
      run!(s, "echo tagless", stream_to: self())
      assert_received {:ex_bashkit_output, {:stdout, "tagless\n"}}
    end

    test "the first chunk arrives before the script ends" do
      s = Session.new(files: %{"/gate" => ""})
      parent = self()

      # The script prints, then waits until the test has seen that output
      # and removed /gate: it cannot end before its first chunk arrived.
      task =
        Task.async(fn ->
          Session.exec(s, "echo first; while [ -e /gate ]; do sleep 0.01; done; echo last",
            stream_to: parent
          )
        end)

      assert_receive {:ex_bashkit_output, {:stdout, "first\n"}}, 5_000
      assert inspect(s) =~ "status: :running"
      :ok = Session.remove(s, "/gate")
      assert {:ok, %Result{stdout: "first\nlast\n"}} = Task.await(task)
      assert_received {:ex_bashkit_output, {:stdout, "last\n"}}
    end

    test "stream/3 yields chunks then the exit status" do
      s = Session.new()

      assert Session.stream(s, "echo one; echo two >&2; exit 3") |> Enum.to_list() ==
               [{:stdout, "one\n"}, {:stderr, "two\n"}, {:exit, 3}]

      assert [{:error, "parse error" <> _}] = Session.stream(s, "if then") |> Enum.to_list()
    end

    test "halting a stream early cancels the script and leaves the session usable" do
      s = Session.new()

      assert [{:stdout, "1\n"}, {:stdout, "2\n"}] =
               s
               |> Session.stream("for i in $(seq 1 1000); do echo $i; sleep 0.01; done")
               |> Enum.take(2)

      assert run!(s, "echo next").stdout == "next\n"
      refute_received {:ex_bashkit_output, _, _}
      refute_received {:ex_bashkit_reply, _, _}
    end

    test "builtin output shows up in the stream, in order" do
      s = Session.new(builtins: %{"say" => fn c -> {:ok, Enum.join(c.args, " ") <> "\n"} end})

      assert Session.stream(s, "echo before; say from builtin; echo after") |> Enum.to_list() ==
               [
                 {:stdout, "before\n"},
                 {:stdout, "from builtin\n"},
                 {:stdout, "after\n"},
                 {:exit, 0}
               ]
    end
  end

  describe "cancel/1" do
    test "stops the running exec from another process; state is kept" do
      s = Session.new()

      task =
        Task.async(fn ->
          Session.run(s, "kept=yes; touch /started; while true; do sleep 0.01; done")
        end)

      # Cancel only once the script is past the assignment (stat/2 answers
      # while it runs), so "state is kept" has something to keep.
      wait_until_started(s)
      assert spawn_cancel(s) == :ok
      assert {:error, %{message: "execution cancelled by cancel/1"}} = Task.await(task)
      assert run!(s, "echo $kept").stdout == "yes\n"
    end

    test "stops a script that never sleeps" do
      s =
        Session.new(
          limits: [
            max_loop_iterations: 1_000_000_000_000,
            max_total_loop_iterations: 1_000_000_000_000,
            max_commands: 1_000_000_000_000
          ]
        )

      task = Task.async(fn -> Session.run(s, "while true; do :; done") end)
      wait_until_running(s)
      assert Session.cancel(s) == :ok
      assert {:error, %{message: "execution cancelled" <> _}} = Task.await(task)
    end

    test "interrupts a sleeping script" do
      s = Session.new()
      task = Task.async(fn -> Session.run(s, "sleep 30; echo never") end)
      wait_until_running(s)
      assert Session.cancel(s) == :ok
      assert {:error, %{message: "execution cancelled by cancel/1"}} = Task.await(task, 5_000)
      assert run!(s, "sleep 0.01; echo slept").stdout == "slept\n"
    end

    test "on an idle session is a no-op, and does not affect the next exec" do
      s = Session.new()
      assert Session.cancel(s) == :idle
      assert run!(s, "echo fine").stdout == "fine\n"
    end

    defp spawn_cancel(s) do
      Task.async(fn -> Session.cancel(s) end) |> Task.await()
    end
  end

  describe "per-call timeout_ms" do
    test "is tighter than the session's limit, and interrupts a waiting command" do
      s = Session.new(limits: [timeout_ms: 60_000])
      started = System.monotonic_time(:millisecond)

      assert {:error, %{message: "execution timed out after 100 ms (exec option :timeout_ms)"}} =
               Session.run(s, "sleep 10", timeout_ms: 100)

      # The sleep was interrupted, not waited out (bounded, not a benchmark).
      assert System.monotonic_time(:millisecond) - started < 5_000
      assert run!(s, "echo usable").stdout == "usable\n"
    end

    test "interrupts a builtin that is still working" do
      s =
        Session.new(
          builtins: %{"stuck" => fn _ -> Process.sleep(:infinity) end},
          builtin_timeout_ms: 60_000
        )

      started = System.monotonic_time(:millisecond)

      assert {:error, %{message: "execution timed out" <> _}} =
               Session.run(s, "stuck; echo never", timeout_ms: 100)

      assert System.monotonic_time(:millisecond) - started < 5_000
      assert run!(s, "echo usable").stdout == "usable\n"
    end

    test "the session's own limit still applies when tighter" do
      s = Session.new(limits: [timeout_ms: 100])
      assert {:error, %{message: message}} = Session.run(s, "sleep 10", timeout_ms: 60_000)
      assert message =~ "timeout"
    end

    test "is validated" do
      s = Session.new()

      for bad <- [0, -5, "1", 1.0],
          do: assert_raise(ArgumentError, fn -> Session.exec(s, "true", timeout_ms: bad) end)
    end
  end

  describe "stdin" do
    test "is read by the first command that reads stdin" do
      s = Session.new()

      assert run!(s, "read -r name; echo \"hello $name\"", stdin: "world\n").stdout ==
               "hello world\n"

      assert run!(s, "cat", stdin: <<0, 1, 2>>).stdout == <<0, 1, 2>>
    end
  end

  describe "file changes" do
    test "created, modified and deleted files are reported when tracked" do
      s = Session.new(files: %{"/keep" => "k", "/edit" => "old", "/drop" => "d"})

      r =
        run!(
          s,
          "echo new > /made; mkdir -p /d/e; echo deep > /d/e/f; echo more >> /edit; rm /drop",
          track_changes: true
        )

      assert r.changes == %{
               created: ["/d/e/f", "/made"],
               modified: ["/edit"],
               deleted: ["/drop"],
               complete: true
             }

      assert run!(s, "cat /keep", track_changes: true).changes == %{
               created: [],
               modified: [],
               deleted: [],
               complete: true
             }

      assert run!(s, "true").changes == nil
    end

    test "renames count as a deletion and a creation" do
      s = Session.new(files: %{"/a" => "x"})

      assert %{created: ["/b"], deleted: ["/a"]} =
               run!(s, "mv /a /b", track_changes: true).changes
    end
  end

  describe "output caps" do
    test "a capped result says it was truncated" do
      s = Session.new(limits: [max_stdout_bytes: 10, max_stderr_bytes: 5])
      r = run!(s, "for i in $(seq 1 50); do echo line$i; echo err$i >&2; done")
      assert byte_size(r.stdout) <= 10 and r.stdout_truncated
      assert byte_size(r.stderr) <= 5 and r.stderr_truncated
      refute run!(s, "echo ok").stdout_truncated
    end
  end

  describe "cumulative limits" do
    test "max_exec_calls caps the session's execs" do
      s = Session.new(limits: [max_exec_calls: 2])
      run!(s, "true")
      run!(s, "true")
      assert {:error, %{message: message}} = Session.run(s, "true")
      assert message =~ "exec() call limit exceeded"
    end

    test "max_total_commands defeats splitting work across execs" do
      s = Session.new(limits: [max_total_commands: 10, max_commands: 1_000])
      results = for _ <- 1..10, do: Session.run(s, "echo 1; echo 2; echo 3")

      assert Enum.any?(
               results,
               &match?(
                 {:error, %{message: "execution error: session command limit exceeded" <> _}},
                 &1
               )
             )
    end

    test "max_history_entries keeps the newest commands only; 0 keeps none" do
      s = Session.new(limits: [max_history_entries: 2])
      for script <- ["echo one", "echo two", "echo three"], do: run!(s, script)
      # The `history` command itself is recorded once it has run.
      assert run!(s, "history").stdout == "    1  echo two\n    2  echo three\n"
      assert run!(s, "history").stdout == "    1  echo three\n    2  history\n"

      none = Session.new(limits: [max_history_entries: 0])
      run!(none, "echo one")
      assert run!(none, "history").stdout == ""

      default = Session.new()
      for i <- 1..3, do: run!(default, "echo #{i}")
      assert run!(default, "history").stdout =~ ~r/\A    1  echo 1\n.*    3  echo 3\n\z/s
    end
  end

  describe "state/1" do
    test "is a plain map of the shell" do
      s = Session.new(env: [FROM_NEW: "1"], cwd: "/work")
      run!(s, "export E=e; v=1; g() { :; }; f() { :; }; alias k='ls -l'; cd /tmp; (exit 4)")
      state = Session.state!(s)
      assert state.env["E"] == "e"
      assert state.env["FROM_NEW"] == "1"
      assert state.variables["v"] == "1"
      refute Map.has_key?(state.env, "v")
      assert state.cwd == "/tmp"
      assert state.functions == ["f", "g"]
      assert state.aliases == %{"k" => "ls -l"}
      assert state.last_exit_code == 4
      refute Enum.any?(Map.keys(state.variables), &String.starts_with?(&1, "SHOPT_"))
    end
  end

  describe "reset/1" do
    test "restores what new/1 built and keeps the capabilities" do
      s =
        Session.new(
          env: [BASE: "b"],
          cwd: "/work",
          files: %{"/seed.txt" => "seed\n"},
          builtins: %{"cap" => fn _ -> {:ok, "builtin kept\n"} end},
          limits: [max_commands: 50]
        )

      run!(
        s,
        "export EXTRA=x; cd /; echo junk > /junk; echo changed > /seed.txt; f() { :; }; alias a=b"
      )

      assert Session.reset(s) == :ok

      state = Session.state!(s)
      assert state.cwd == "/work"
      assert state.env["BASE"] == "b"
      refute Map.has_key?(state.env, "EXTRA")
      assert state.functions == []
      assert state.aliases == %{}
      assert Session.read_file(s, "/seed.txt") == {:ok, "seed\n"}
      assert {:error, _} = Session.stat(s, "/junk")
      assert run!(s, "cap").stdout == "builtin kept\n"
      assert {:error, %{message: message}} = Session.run(s, "for i in $(seq 1 100); do :; done")
      assert message =~ "max_commands"
    end

    # A session built from memory alone takes an interpreter built in
    # advance on reset (in the node, within the call): each one must be as
    # new/1 built it, with the session's limits, and cancellable.
    test "a session built from memory alone comes back as built, reset after reset" do
      opts = [env: [BASE: "b"], limits: [max_commands: 50]]
      built = Session.state!(Session.new(opts))
      s = Session.new(opts)

      for round <- 1..30 do
        run!(s, "export EXTRA=#{round}; cd /tmp; echo x > /junk; f() { :; }; alias a=b; B=$BASE")
        assert Session.reset(s) == :ok

        state = Session.state!(s)
        assert state.cwd == built.cwd
        assert state.env == built.env
        assert state.functions == [] and state.aliases == %{}
        assert {:error, _} = Session.stat(s, "/junk")
        assert run!(s, "echo $BASE").stdout == "b\n"
      end

      assert {:error, %{message: message}} = Session.run(s, "for i in $(seq 1 100); do :; done")
      assert message =~ "max_commands"
    end

    test "after resets, a timeout and cancel/1 still stop a sleep" do
      s = Session.new()
      for _ <- 1..5, do: assert(Session.reset(s) == :ok)

      # Each stop must free the session at once: a sleep still running
      # would hold the next exec past its own timeout.
      assert {:error, %{reason: :timeout}} = Session.run(s, "sleep 30", timeout_ms: 200)
      assert {:ok, %{stdout: "after\n"}} = Session.exec(s, "echo after", timeout_ms: 2_000)

      caller = Task.async(fn -> Session.run(s, "sleep 30") end)
      wait_until_running(s)
      assert Session.cancel(s) == :ok
      assert {:error, %{reason: :cancelled}} = Task.await(caller, 5_000)
      assert {:ok, %{stdout: "after\n"}} = Session.run(s, "echo after", timeout_ms: 2_000)
    end

    test "a reset waits for the running exec, then resets" do
      s = Session.new()
      for _ <- 1..3, do: assert(Session.reset(s) == :ok)
      # Long enough to be seen running by a poll of a busy worker.
      caller = Task.async(fn -> Session.exec(s, "sleep 3; X=1; echo done") end)
      wait_until_running(s)

      assert Session.reset(s) == :ok
      assert {:ok, %{stdout: "done\n"}} = Task.await(caller, 10_000)
      refute Map.has_key?(Session.state!(s).variables, "X")
    end
  end
end

defmodule ExBashkit.CallerDeathTest do
  # An exec whose caller dies is cancelled: nobody will read its answer.
  use ExUnit.Case, async: true

  alias ExBashkit.{Result, Session}

  defp wait_until(fun) do
    unless fun.() do
      Process.sleep(1)
      wait_until(fun)
    end
  end

  # Blocked in the receive that waits for an exec's answer (the private
  # function of `ExBashkit.Callbacks` that serves back-calls meanwhile).
  defp waiting_for_reply?(pid) do
    match?(
      {:current_function, {ExBashkit.Callbacks, :event, _}},
      Process.info(pid, :current_function)
    )
  end

  test "a running exec stops when its caller is killed" do
    s = Session.new()
    caller = spawn(fn -> Session.exec(s, "sleep 30") end)
    assert_kill_frees_session(s, caller)
  end

  # Once `caller`'s exec runs, kill `caller`: the session must be free for
  # the next exec long before that exec's `sleep 30` would end.
  defp assert_kill_frees_session(s, caller) do
    wait_until(fn -> inspect(s) =~ "status: :running" end)
    Process.exit(caller, :kill)

    started = System.monotonic_time(:millisecond)
    assert {:ok, %Result{stdout: "next\n"}} = Session.exec(s, "echo next")
    assert System.monotonic_time(:millisecond) - started < 5_000
  end

  test "a queued exec whose caller died never runs" do
    s = Session.new(files: %{"/gate" => ""})
    first = Task.async(fn -> Session.exec(s, "while [ -e /gate ]; do sleep 0.01; done") end)
    wait_until(fn -> inspect(s) =~ "status: :running" end)

    queued = spawn(fn -> Session.exec(s, "echo ran > /queued") end)
    wait_until(fn -> waiting_for_reply?(queued) end)
    watch = Process.monitor(queued)
    Process.exit(queued, :kill)
    # Its death reaches the session before the gate opens.
    assert_receive {:DOWN, ^watch, :process, ^queued, :killed}

    :ok = Session.remove(s, "/gate")
    assert {:ok, %Result{exit_code: 0}} = Task.await(first)
    assert {:ok, %Result{}} = Session.exec(s, "true")
    assert {:error, _} = Session.stat(s, "/queued")
  end

  # A session watches each caller once, for all its calls (in the node, a
  # monitor per caller rather than per call): these pin down that a caller
  # whose earlier calls ended is still watched, and that one caller's death
  # touches only its own calls.
  test "a caller whose earlier calls ended is still watched" do
    s = Session.new()
    parent = self()

    caller =
      spawn(fn ->
        # Each sleep waits, so each call is watched, then ends.
        for _ <- 1..3, do: {:ok, %Result{}} = Session.exec(s, "sleep 0.01")
        send(parent, :warmed)
        Session.exec(s, "sleep 30")
      end)

    assert_receive :warmed, 5_000
    assert_kill_frees_session(s, caller)
  end

  test "one caller's death cancels its calls only" do
    s = Session.new()
    parent = self()
    # The other caller's earlier call ended; its next one is queued behind
    # the dying caller's.
    other =
      Task.async(fn ->
        {:ok, %Result{}} = Session.exec(s, "sleep 0.01")
        send(parent, :warmed)

        receive do
          :go -> Session.exec(s, "sleep 0.05; echo other")
        end
      end)

    assert_receive :warmed, 5_000
    dying = spawn(fn -> Session.exec(s, "sleep 30") end)
    wait_until(fn -> inspect(s) =~ "status: :running" end)
    send(other.pid, :go)
    wait_until(fn -> waiting_for_reply?(other.pid) end)
    Process.exit(dying, :kill)

    assert {:ok, %Result{stdout: "other\n", exit_code: 0}} = Task.await(other, 10_000)
    # A caller that dies with no call under way leaves the session as it was.
    {:ok, quiet} = Task.start(fn -> Session.exec(s, "sleep 0.01") end)
    wait_until(fn -> not Process.alive?(quiet) end)
    assert {:ok, %Result{stdout: "still\n"}} = Session.exec(s, "echo still")
  end
end
