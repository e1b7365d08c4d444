defmodule ExBashkit.ErrorTest do
  # Issue 20, "Results an agent can trust": structured errors with the
  # output written before the stop, exec_async, builtin context. Runs in
  # whichever isolation mode the suite runs in (scripts/test runs both).
  use ExUnit.Case, async: true

  alias ExBashkit.{Error, Result, Session}

  describe "structured errors keep the partial output" do
    test "a limit stops a short script and a loop alike, the output so far kept" do
      # A short straight-line script runs buffered, a loop live
      # (run/shape.rs): each keeps what ran before the stop.
      for script <- ["echo a; echo b; echo c", "for i in a b c; do echo $i; done"] do
        s = Session.new(limits: [max_commands: 2])

        assert {:error, %Error{reason: :limit, limit: :max_commands, stdout: "a\n"}} =
                 Session.run(s, script)

        assert {:ok, %Result{stdout: "alive\n"}} = Session.exec(s, "echo alive")
      end
    end

    test "a per-call timeout: reason :timeout, no limit key, the output so far" do
      s = Session.new()

      assert {:error, %Error{reason: :timeout, limit: nil, stdout: "partial\n"} = error} =
               Session.run(s, "echo partial; echo oops >&2; sleep 5", timeout_ms: 1_000)

      assert error.stderr == "oops\n"
      assert error.exit_code == nil
      assert error.message =~ "timed out after 1000 ms"
      assert {:ok, %Result{stdout: "alive\n"}} = Session.exec(s, "echo alive")
    end

    test "the session's timeout_ms limit names its key" do
      s = Session.new(limits: [timeout_ms: 1_000])

      assert {:error, %Error{reason: :timeout, limit: :timeout_ms, stdout: "a\n"} = error} =
               Session.run(s, "echo a; sleep 5")

      assert error.message =~ "raise limits: [timeout_ms: ...]"
    end

    test "a per-script limit names the key that raises it, with the output so far" do
      s = Session.new(limits: [max_loop_iterations: 3])

      assert {:error, %Error{reason: :limit, limit: :max_loop_iterations} = error} =
               Session.run(s, "echo start; for i in 1 2 3 4 5; do echo $i; done")

      assert String.starts_with?(error.stdout, "start\n")
      assert error.message =~ "raise limits: [max_loop_iterations: ...]"
    end

    test "the cumulative exec cap says which limit" do
      s = Session.new(limits: [max_exec_calls: 1])
      assert {:ok, _} = Session.exec(s, "true")

      assert {:error, %Error{reason: :limit, limit: :max_exec_calls} = error} =
               Session.run(s, "true")

      assert error.message =~ "max_exec_calls"
    end

    test "a parse error is :parse and ran nothing" do
      s = Session.new()

      assert {:error, %Error{reason: :parse, limit: nil, stdout: "", stderr: ""}} =
               Session.run(s, "echo never; if then fi")
    end

    test "cancel/1: :cancelled with the output so far" do
      s = Session.new()
      parent = self()

      task =
        Task.async(fn ->
          Session.run(s, "echo before; sleep 10", stream_to: parent)
        end)

      assert_receive {:ex_bashkit_output, {:stdout, "before\n"}}, 5_000
      assert :ok = Session.cancel(s)

      assert {:error, %Error{reason: :cancelled, stdout: "before\n"}} = Task.await(task, 5_000)
    end

    test "stream/3 ends with the error's message, as the seed's exec fails" do
      s = Session.new()

      events = s |> Session.stream("echo one; sleep 5", timeout_ms: 1_000) |> Enum.to_list()

      assert [{:stdout, "one\n"}, {:error, "execution timed out after 1000 ms" <> _}] = events
    end

    test "refusals before the script runs are structs too" do
      s = Session.new()

      assert {:error, %Error{reason: :internal, message: "script is not valid UTF-8"}} =
               Session.run(s, <<0xFF>>)
    end

    test "exec!/3 raises the same struct" do
      s = Session.new()

      error = assert_raise Error, fn -> Session.exec!(s, "echo p; sleep 5", timeout_ms: 1_000) end

      assert %Error{reason: :timeout, stdout: "p\n"} = error
    end

    test "results cross as %ExBashkit.Result{} with every field" do
      s = Session.new()

      assert {:ok, %Result{} = r} = Session.exec(s, "echo hi; echo e >&2; exit 3")
      assert {r.stdout, r.stderr, r.exit_code} == {"hi\n", "e\n", 3}
      assert {r.stdout_bytes, r.stderr_bytes} == {3, 2}
      assert is_integer(r.commands) and is_integer(r.wall_time_us)

      assert {:ok, %Result{changes: %{created: ["/new"], complete: true}}} =
               Session.exec(s, "echo x > /new", track_changes: true)
    end
  end

  describe "ExBashkit.exec/2" do
    test "takes exec/3's per-call options and :limits" do
      assert {:ok, %Result{stdout: "IN\n"}} = ExBashkit.exec("tr a-z A-Z", stdin: "in\n")

      assert {:error, %Error{reason: :timeout, stdout: "one\n"}} =
               ExBashkit.run("echo one; sleep 5", timeout_ms: 1_000)

      assert {:error, %Error{reason: :limit, limit: :max_commands}} =
               ExBashkit.run("echo 1; echo 2; echo 3", %{limits: [max_commands: 1]})

      assert {:error, %Error{reason: :parse}} = ExBashkit.run("if then fi")
    end
  end

  describe "exec_async/3" do
    test "answers by message while the caller stays free" do
      s = Session.new()
      assert {:ok, ref} = Session.exec_async(s, "echo async")
      assert is_reference(ref)
      assert_receive {:ex_bashkit, ^ref, {:ok, %Result{stdout: "async\n"}}}, 5_000
      refute_received {:ex_bashkit, ^ref, _}
    end

    # The session's own timeout counts from an exec's start, as bashkit
    # applies it: an exec that waited for its turn behind another is not
    # timed out for the time it waited (in a worker, its owner checks with
    # the worker before it answers in its stead). The second exec is still
    # running (2.8 s to 5.6 s) when the deadline plus the slack (5 s)
    # passes, and each exec stays 1.2 s within the limit.
    test "an exec queued behind another is not timed out by the time it waited" do
      s = Session.new(limits: [timeout_ms: 4_000])
      {:ok, first} = Session.exec_async(s, "sleep 2.8; echo first")

      assert {:ok, %Result{stdout: "second\n"}} = Session.exec(s, "sleep 2.8; echo second")
      assert_receive {:ex_bashkit, ^first, {:ok, %Result{stdout: "first\n"}}}, 5_000
    end

    test "runs before an exec the same process calls after it" do
      # exec_async/3 returns once its exec is queued on the session, so the
      # session's order is the caller's: a later exec/3 sees its effect.
      s = Session.new()

      for i <- 1..30 do
        {:ok, ref} = Session.exec_async(s, "n=#{i}")
        expected = "#{i}\n"
        assert {:ok, %Result{stdout: ^expected}} = Session.exec(s, "echo $n")
        assert_receive {:ex_bashkit, ^ref, {:ok, %Result{exit_code: 0}}}, 5_000
      end
    end

    test "runs before a lifecycle call the same process makes after it" do
      s = Session.new()

      for i <- 1..30 do
        {:ok, ref} = Session.exec_async(s, "m=#{i}")
        assert Session.state!(s).variables["m"] == Integer.to_string(i)
        assert_receive {:ex_bashkit, ^ref, {:ok, %Result{exit_code: 0}}}, 5_000
      end
    end

    test "stream: true sends the chunks first, in order" do
      s = Session.new()
      {:ok, ref} = Session.exec_async(s, "echo a; echo b >&2; echo c", stream: true)

      assert_receive {:ex_bashkit, ^ref, {:stdout, "a\n"}}, 5_000
      assert_receive {:ex_bashkit, ^ref, {:stderr, "b\n"}}, 5_000
      assert_receive {:ex_bashkit, ^ref, {:stdout, "c\n"}}, 5_000
      assert_receive {:ex_bashkit, ^ref, {:ok, %Result{stdout: "a\nc\n"}}}, 5_000
    end

    test "cancel/2 by ref, from another process, keeps the output so far" do
      s = Session.new()
      {:ok, ref} = Session.exec_async(s, "echo started; sleep 10", stream: true)
      assert_receive {:ex_bashkit, ^ref, {:stdout, "started\n"}}, 5_000

      Task.async(fn -> Session.cancel(s, ref) end) |> Task.await()

      assert_receive {:ex_bashkit, ^ref,
                      {:error, %Error{reason: :cancelled, stdout: "started\n"}}},
                     5_000

      # Over: a late cancel is a no-op, the session serves the next exec.
      assert :ok = Session.cancel(s, ref)
      assert {:ok, %Result{stdout: "next\n"}} = Session.exec(s, "echo next")
    end

    test "errors arrive as the struct" do
      s = Session.new()
      {:ok, ref} = Session.exec_async(s, "echo x; sleep 5", timeout_ms: 1_000)
      assert_receive {:ex_bashkit, ^ref, {:error, %Error{reason: :timeout, stdout: "x\n"}}}, 5_000
    end

    test "the caller's death cancels the exec" do
      s = Session.new()
      parent = self()

      caller =
        spawn(fn ->
          {:ok, ref} = Session.exec_async(s, "echo up; sleep 10", stream: true)
          send(parent, {:started, ref})

          receive do
            {:ex_bashkit, ^ref, {:stdout, _}} -> send(parent, :running)
          end

          receive do: (:never -> :ok)
        end)

      assert_receive {:started, _}, 5_000
      assert_receive :running, 5_000
      Process.exit(caller, :kill)

      # The session is free again well before the 10 s sleep would end.
      assert {:ok, %Result{stdout: "free\n"}} = Session.exec(s, "echo free", timeout_ms: 5_000)
    end

    test "options are checked at the call" do
      s = Session.new()

      assert_raise ArgumentError, ~r/:stream must be a boolean/, fn ->
        Session.exec_async(s, "true", stream: :yes)
      end

      assert_raise ArgumentError, ~r/stream_to/, fn ->
        Session.exec_async(s, "true", stream_to: self())
      end

      assert_raise ArgumentError, fn -> Session.exec_async(s, ~c"true") end
    end
  end

  describe "builtins" do
    test "the builtin's map has :cwd, the script's directory" do
      s = Session.new(builtins: %{"where" => fn call -> {:ok, call.cwd <> "\n"} end})
      assert {:ok, %Result{stdout: "/tmp\n"}} = Session.exec(s, "cd /tmp && where")
    end

    test "handlers get $callers with the exec's caller first" do
      parent = self()

      s =
        Session.new(
          builtins: %{
            "callers" => fn _ ->
              send(parent, {:callers, Process.get(:"$callers")})
              {:ok, ""}
            end
          }
        )

      assert {:ok, _} = Session.exec(s, "callers")
      assert_receive {:callers, [^parent | _]}, 5_000
    end

    test "virtual_fs handlers get $callers too" do
      parent = self()

      backend = fn
        %{op: :read} ->
          send(parent, {:callers, Process.get(:"$callers")})
          {:ok, "data"}

        %{op: :stat} ->
          {:ok, %{type: :file, size: 4}}

        _ ->
          {:error, :enotsup}
      end

      s = Session.new(virtual_fs: %{"/v" => backend})
      assert {:ok, %Result{stdout: "data"}} = Session.exec(s, "cat /v/f")
      assert_receive {:callers, [^parent | _]}, 5_000
    end

    test "a builtin that GenServer.calls the waiting caller fails at once, saying why" do
      {:ok, server} = __MODULE__.Owner.start_link()

      started = System.monotonic_time(:millisecond)
      assert {:ok, %Result{} = r} = GenServer.call(server, {:run, "ask; echo after"}, 10_000)
      elapsed = System.monotonic_time(:millisecond) - started

      assert r.stderr =~ "ask: called the process that is waiting for this script"
      assert r.stderr =~ "exec_async"
      assert r.stdout == "after\n"
      # Not the 5 s back-call timeout the deadlock would otherwise end in.
      assert elapsed < 4_000
      # The dropped call was not served later.
      assert GenServer.call(server, :asked) == 0
    end

    test "the exec_async pattern lets the builtin call its owner" do
      {:ok, server} = __MODULE__.Owner.start_link()

      assert {:ok, %Result{stdout: "42\nafter\n"}} =
               GenServer.call(server, {:run_async, "ask; echo after"}, 10_000)

      assert GenServer.call(server, :asked) == 1
    end
  end

  describe "no silent truncation" do
    test "seq past its cap fails visibly, also inside a pipeline" do
      s = Session.new()

      assert {:ok, %Result{exit_code: 1} = r} = Session.exec(s, "seq 1 400000 > /out")
      assert r.stderr =~ "seq: line limit (100000) exceeded"

      assert {:ok, %Result{stdout: "100000\n1 0\n"} = r} =
               Session.exec(s, "seq 1 400000 | wc -l; echo ${PIPESTATUS[@]}")

      assert r.stderr =~ "seq: line limit"

      assert {:ok, %Result{exit_code: 1}} =
               Session.exec(s, "set -o pipefail; seq 1 400000 | wc -l")
    end

    test "yes past its cap fails visibly" do
      s = Session.new()
      assert {:ok, %Result{exit_code: 1} = r} = Session.exec(s, "yes > /out")
      assert r.stderr =~ "yes:"
      assert r.stderr =~ "limit"
    end
  end

  describe "filesystem quotas" do
    test "max_files: the write past it fails, usage is in state/1" do
      # A fresh session already has a few files (/etc, /home): count them.
      %{files: base, bytes: base_bytes} = Session.state!(Session.new()).fs_usage
      s = Session.new(limits: [max_files: base + 3])

      assert {:ok, %Result{} = r} =
               Session.exec(s, "for i in 1 2 3 4; do echo x > /f$i || echo failed $i; done")

      assert r.stdout == "failed 4\n"
      assert r.stderr != ""
      assert %{files: files, bytes: bytes} = Session.state!(s).fs_usage
      assert {files, bytes} == {base + 3, base_bytes + 6}
    end

    test "max_file_bytes and max_fs_bytes" do
      s = Session.new(limits: [max_file_bytes: 10, max_fs_bytes: 25])

      assert {:ok, %Result{exit_code: 0}} = Session.exec(s, "printf 0123456789 > /a")
      assert {:ok, %Result{exit_code: e}} = Session.exec(s, "printf 0123456789X > /b")
      assert e != 0
      assert {:ok, %Result{exit_code: 0}} = Session.exec(s, "printf 0123456789 > /c")
      assert {:ok, %Result{exit_code: e}} = Session.exec(s, "printf 0123456789 > /d")
      assert e != 0
      assert Session.state!(s).fs_usage.bytes - base_bytes() == 20
      assert {:error, _} = Session.write_file(s, "/e", String.duplicate("x", 11))
    end

    test "the quota keys are validated like the other limits" do
      assert_raise ArgumentError, ~r/max_files/, fn -> Session.new(limits: [max_files: -1]) end
    end
  end

  describe "what persists between execs" do
    test "variables, functions, aliases, shopt and cwd persist" do
      s = Session.new()

      {:ok, _} = Session.exec(s, "x=1; a=(p q); f() { echo f; }; shopt -s extglob; cd /tmp")

      assert {:ok, %Result{stdout: "1 q f /tmp\n"}} =
               Session.exec(s, "echo $x ${a[1]} $(f) $(pwd)")

      assert {:ok, %Result{stdout: "on\n"}} = Session.exec(s, "shopt -q extglob && echo on")
    end

    test "$?, set options and traps start fresh in each exec, as documented" do
      s = Session.new()

      {:ok, _} = Session.exec(s, "false")
      assert Session.state!(s).last_exit_code == 1
      assert {:ok, %Result{stdout: "0\n"}} = Session.exec(s, "echo $?")

      {:ok, _} = Session.exec(s, "set -euo pipefail; trap 'echo bye' EXIT")

      assert {:ok, %Result{stdout: "0\nafter\n"}} =
               Session.exec(s, "false | true; echo $?; false; echo after")

      assert {:ok, %Result{stdout: "[]\n"}} = Session.exec(s, "echo \"[$undefined_var]\"")
    end
  end

  defp base_bytes, do: Session.state!(Session.new()).fs_usage.bytes

  defmodule Owner do
    @moduledoc false
    # A GenServer whose session's builtin asks the GenServer itself.
    use GenServer

    def start_link, do: GenServer.start_link(__MODULE__, nil)

    @impl true
    def init(nil) do
      me = self()

      session =
        Session.new(
          builtin_timeout_ms: 5_000,
          builtins: %{"ask" => fn _ -> {:ok, "#{GenServer.call(me, :answer)}\n"} end}
        )

      {:ok, %{session: session, asked: 0, pending: %{}}}
    end

    @impl true
    def handle_call({:run, script}, _from, state),
      do: {:reply, Session.exec(state.session, script), state}

    def handle_call({:run_async, script}, from, state) do
      {:ok, ref} = Session.exec_async(state.session, script)
      {:noreply, put_in(state.pending[ref], from)}
    end

    def handle_call(:answer, _from, state), do: {:reply, 42, %{state | asked: state.asked + 1}}
    def handle_call(:asked, _from, state), do: {:reply, state.asked, state}

    @impl true
    def handle_info({:ex_bashkit, ref, outcome}, state) do
      {from, pending} = Map.pop(state.pending, ref)
      GenServer.reply(from, outcome)
      {:noreply, %{state | pending: pending}}
    end
  end
end
