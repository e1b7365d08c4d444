defmodule ExBashkit.ServerTest do
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Result, Server}
  alias ExBashkit.Server.Checkpoints

  doctest ExBashkit.Server

  @stateful stateful_script()
  @probe ~S[echo "$COLOR|$(pwd)|$(cat /work/data.txt 2>/dev/null)|$(greet x 2>/dev/null)"]

  # A builtin that tells the test it started, then waits to be released.
  defp gate_builtins(test) do
    %{
      "gate" => fn _ ->
        send(test, {:at_gate, self()})

        receive do
          :open -> {:ok, "opened\n"}
        after
          20_000 -> {:error, "never opened\n"}
        end
      end
    }
  end

  defp name(tag), do: :"server_#{tag}_#{System.unique_integer([:positive])}"

  defp restarted(name, old) do
    eventually(fn ->
      pid = GenServer.whereis(name)
      if is_pid(pid) and pid != old and Process.alive?(pid), do: pid
    end)
  end

  defp kill_and_wait(pid) do
    ref = Process.monitor(pid)
    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, :killed}, 5_000
  end

  describe "under a supervisor" do
    test "a :kill without checkpoint restarts it fresh" do
      name = name(:fresh)
      start_supervised!({Server, name: name})
      assert {:ok, _} = Server.exec(name, @stateful)
      assert {:ok, %Result{stdout: "blue|/work|kept|hello x\n"}} = Server.exec(name, @probe)

      old = GenServer.whereis(name)
      kill_and_wait(old)
      restarted(name, old)

      assert {:ok, %Result{stdout: "|/||\n"}} = Server.exec(name, @probe)
      {:ok, state} = Server.state(name)
      assert state.aliases == %{}
      assert state.functions == []
    end

    test "a :kill with checkpoint comes back with env, cwd, files, functions and aliases" do
      name = name(:checkpoint)
      start_supervised!({Server, name: name, checkpoint: true})
      assert {:ok, _} = Server.exec(name, @stateful)

      old = GenServer.whereis(name)
      kill_and_wait(old)
      new = restarted(name, old)
      assert new != old

      assert {:ok, %Result{stdout: "blue|/work|kept|hello x\n"}} = Server.exec(name, @probe)
      {:ok, state} = Server.state(name)
      assert state.aliases == %{"ll" => "ls -1"}
      assert "greet" in state.functions
      assert {:ok, "kept\n"} = Server.read_file(name, "/work/data.txt")
    end

    test "the exec in flight when the server dies is cancelled, and what it did stays" do
      name = name(:inflight)
      test = self()
      start_supervised!({Server, name: name, checkpoint: true, builtins: gate_builtins(test)})
      assert {:ok, _} = Server.exec(name, "export DONE=1")

      spawn(fn -> Server.exec(name, "export HALF=1; echo x > /half; gate; export AFTER=1") end)
      assert_receive {:at_gate, _gate}, 5_000

      old = GenServer.whereis(name)
      kill_and_wait(old)
      restarted(name, old)

      assert {:ok, %Result{stdout: "1|1||yes\n"}} =
               Server.exec(
                 name,
                 "echo \"$DONE|$HALF|$AFTER|$(test -e /half && echo yes || echo no)\""
               )
    end

    @tag :process_only
    test "a crash of its interpreter, then of the server, loses nothing" do
      name = name(:both)
      start_supervised!({Server, name: name, checkpoint: true})
      assert {:ok, _} = Server.exec(name, @stateful)

      %{os_pid: os_pid} = Server.info(name)
      {_, 0} = System.cmd("kill", ["-9", Integer.to_string(os_pid)])
      eventually(fn -> Server.info(name).os_pid not in [nil, os_pid] end)
      assert {:ok, %Result{stdout: "blue|/work|kept|hello x\n"}} = Server.exec(name, @probe)

      old = GenServer.whereis(name)
      kill_and_wait(old)
      restarted(name, old)
      assert {:ok, %Result{stdout: "blue|/work|kept|hello x\n"}} = Server.exec(name, @probe)
      assert Server.info(name).os_pid != os_pid
    end

    test "a kept session its server does not come back for becomes a snapshot, found by a later start" do
      Process.flag(:trap_exit, true)
      name = name(:unclaimed)
      {:ok, pid} = Server.start_link(name: name, checkpoint: true)
      assert {:ok, _} = Server.exec(name, @stateful)
      kill_and_wait(pid)

      eventually(
        fn ->
          match?([{_, _, {:snapshot, _}}], :ets.lookup(Checkpoints, {:name, name}))
        end,
        10_000
      )

      {:ok, _} = Server.start_link(name: name, checkpoint: true)
      assert {:ok, %Result{stdout: "blue|/work|kept|hello x\n"}} = Server.exec(name, @probe)
      assert [{_, nil, {:live, _}}] = :ets.lookup(Checkpoints, {:name, name})
    end

    test "a server that stops :normal releases its checkpoint" do
      name = name(:stopped)
      {:ok, pid} = Server.start_link(name: name, checkpoint: true)
      assert {:ok, _} = Server.exec(name, "export GONE=1")
      :ok = GenServer.stop(pid, :normal)
      {:ok, pid} = Server.start_link(name: name, checkpoint: true)
      assert {:ok, %Result{stdout: "\n"}} = Server.exec(pid, "echo $GONE")
    end

    test "an unnamed checkpointing child finds its checkpoint through its child spec" do
      children = [{Server, checkpoint: true}]

      sup =
        start_supervised!(%{
          id: :sup,
          type: :supervisor,
          start: {Supervisor, :start_link, [children, [strategy: :one_for_one]]}
        })

      [{Server, old, :worker, _}] = Supervisor.which_children(sup)
      assert {:ok, _} = Server.exec(old, "export X=unnamed")
      kill_and_wait(old)

      new =
        eventually(fn ->
          case Supervisor.which_children(sup) do
            [{Server, pid, :worker, _}] when is_pid(pid) and pid != old -> pid
            _ -> nil
          end
        end)

      assert {:ok, %Result{stdout: "unnamed\n"}} = Server.exec(new, "echo $X")
    end

    test "every write of the filesystem API is checkpointed too" do
      name = name(:fs)
      start_supervised!({Server, name: name, checkpoint: true})
      assert :ok = Server.write_file(name, "/a/b.txt", "bytes")
      assert :ok = Server.mkdir(name, "/empty/dir", parents: true)
      assert :ok = Server.rename(name, "/a/b.txt", "/a/c.txt")

      old = GenServer.whereis(name)
      kill_and_wait(old)
      restarted(name, old)

      assert {:ok, "bytes"} = Server.read_file(name, "/a/c.txt")
      assert {:ok, %{type: :dir}} = Server.stat(name, "/empty/dir")
      assert {:error, _} = Server.stat(name, "/a/b.txt")
    end
  end

  describe "calls" do
    test "an exec longer than GenServer's default 5 s call timeout gets its answer" do
      {:ok, pid} =
        Server.start_link(
          builtins: %{"slow" => fn _ -> Process.sleep(5_500) && {:ok, "slow done\n"} end}
        )

      assert {:ok, %Result{stdout: "slow done\n"}} = Server.exec(pid, "slow")
    end

    test "an exec's :timeout_ms still holds" do
      {:ok, pid} =
        Server.start_link(
          limits: [max_loop_iterations: 1_000_000_000, max_commands: 1_000_000_000]
        )

      assert {:error, %{message: message}} =
               Server.run(pid, "while true; do :; done", timeout_ms: 200)

      assert message =~ "timed out"
      assert {:ok, %Result{stdout: "ok\n"}} = Server.exec(pid, "echo ok")
    end

    test "a caller that dies mid-exec has its script cancelled" do
      {:ok, pid} =
        Server.start_link(
          limits: [
            max_loop_iterations: 1_000_000_000,
            max_commands: 1_000_000_000,
            timeout_ms: 600_000
          ]
        )

      test = self()

      caller =
        spawn(fn ->
          Server.exec(pid, "echo started; while true; do :; done", stream_to: test)
        end)

      # The loop runs before its caller dies.
      assert_receive {:ex_bashkit_output, {:stdout, "started\n"}}, 5_000
      Process.exit(caller, :kill)
      # Without the cancel, this would wait for the 10-minute script.
      assert {:ok, %Result{stdout: "free\n"}} = Server.exec(pid, "echo free")
    end

    test "a queued request of a caller that died is dropped" do
      test = self()
      {:ok, pid} = Server.start_link(builtins: gate_builtins(test))
      spawn(fn -> send(test, {:first, Server.exec(pid, "gate")}) end)
      assert_receive {:at_gate, gate}, 5_000

      queued = spawn(fn -> Server.exec(pid, "echo never > /dropped") end)
      # The request waits in the server's queue before its caller dies.
      eventually(fn -> :queue.len(:sys.get_state(pid).queue) == 1 end)
      Process.exit(queued, :kill)
      eventually(fn -> :queue.is_empty(:sys.get_state(pid).queue) end)

      send(gate, :open)
      assert_receive {:first, {:ok, %Result{stdout: "opened\n"}}}, 5_000
      assert {:error, _} = Server.read_file(pid, "/dropped")
    end

    test "cancel/1 stops the running script, answered while it runs" do
      # Every limit the loop could reach raised: under the default 10 000
      # commands it ended by itself within tens of milliseconds, sometimes
      # before cancel/1 saw it running (seen in process mode).
      {:ok, pid} =
        Server.start_link(
          limits: [
            max_loop_iterations: 1_000_000_000,
            max_commands: 1_000_000_000,
            timeout_ms: 600_000
          ]
        )

      task = Task.async(fn -> Server.run(pid, "while true; do :; done") end)

      # This once failed in process mode: cancel/1 never saw the
      # loop running. If the exec ended on its own, say how.
      assert eventually(fn -> Server.cancel(pid) == :ok end, 10_000, fn ->
               case Task.yield(task, 0) do
                 nil -> "(the exec is still running)"
                 ended -> "(the exec ended first: #{inspect(ended)})"
               end
             end)

      assert {:error, %{message: message}} = Task.await(task, 10_000)
      assert message =~ "cancel"
      assert Server.cancel(pid) == :idle
    end

    test "stream/3 yields output and the exit, and halting it cancels the script" do
      {:ok, pid} =
        Server.start_link(limits: [max_loop_iterations: 1_000_000_000, timeout_ms: 600_000])

      assert [{:stdout, "1\n"}, {:stdout, "2\n"}, {:exit, 4}] =
               Server.stream(pid, "echo 1; echo 2; exit 4") |> Enum.to_list()

      assert [{:stdout, "tick\n"}] =
               pid
               |> Server.stream("while true; do echo tick; done")
               |> Enum.take(1)

      assert {:ok, %Result{stdout: "after\n"}} = Server.exec(pid, "echo after")
      assert Server.cancel(pid) == :idle
      refute_received {_, {:stdout, _}}
    end

    test "snapshot and restore through servers, keyed" do
      {:ok, a} = Server.start_link()
      {:ok, b} = Server.start_link()
      assert {:ok, _} = Server.exec(a, @stateful)
      assert {:ok, bytes} = Server.snapshot(a, key: "k")
      assert {:error, _} = Server.restore(b, bytes)
      assert {:ok, ^b} = Server.restore(b, bytes, key: "k")
      assert {:ok, %Result{stdout: "blue|/work|kept|hello x\n"}} = Server.exec(b, @probe)
      assert :ok = Server.reset(b)
      assert {:ok, %Result{stdout: "|/||\n"}} = Server.exec(b, @probe)
    end

    test "filesystem functions" do
      {:ok, pid} = Server.start_link(files: %{"/in/a.txt" => "a"})
      assert {:ok, [{"a.txt", :file}]} = Server.list_dir(pid, "/in")
      assert {:error, _} = Server.remove(pid, "/in")
      assert :ok = Server.remove(pid, "/in", recursive: true)
      assert {:error, _} = Server.stat(pid, "/in")
    end

    test "malformed options raise in the caller, and the server keeps serving" do
      assert_raise ArgumentError, fn -> Server.start_link(cwd: 42) end
      assert_raise ArgumentError, fn -> Server.start_link(checkpoint: :yes) end
      assert_raise ArgumentError, fn -> Server.start_link(name: "string") end

      {:ok, pid} = Server.start_link()
      assert_raise ArgumentError, fn -> Server.exec(pid, "true", timeout_ms: -1) end
      assert_raise ArgumentError, fn -> Server.write_file(pid, "/f", :not_iodata) end
      assert {:ok, %Result{stdout: "alive\n"}} = Server.exec(pid, "echo alive")
    end
  end

  describe "names" do
    test "a taken name is {:error, {:already_started, pid}}" do
      name = name(:taken)
      {:ok, pid} = Server.start_link(name: name)
      assert {:error, {:already_started, ^pid}} = Server.start_link(name: name)
    end

    test "a {:via, Registry, _} name" do
      registry = name(:registry)
      start_supervised!({Registry, keys: :unique, name: registry})
      name = {:via, Registry, {registry, "shell"}}
      start_supervised!({Server, name: name, checkpoint: true})
      assert {:ok, _} = Server.exec(name, "export V=via")
      old = GenServer.whereis(name)
      kill_and_wait(old)
      restarted(name, old)
      assert {:ok, %Result{stdout: "via\n"}} = Server.exec(name, "echo $V")
    end
  end

  describe "history" do
    test "undo: true goes back one change at a time, before the first one too" do
      {:ok, pid} = Server.start_link(undo: true)
      {:ok, _} = Server.exec(pid, "echo 1 > /f")
      {:ok, _} = Server.exec(pid, "echo 2 > /f; export X=x")
      :ok = Server.write_file(pid, "/g", "g")

      assert :ok = Server.undo(pid)
      assert {:error, _} = Server.read_file(pid, "/g")
      # An exec that changes no file still sets `$_`: a step of its own.
      assert {:ok, %Result{stdout: "2\nx\n"}} = Server.exec(pid, "cat /f; echo $X")
      assert :ok = Server.undo(pid)
      assert :ok = Server.undo(pid)
      assert {:ok, %Result{stdout: "1\n\n"}} = Server.exec(pid, "cat /f; echo $X")
      assert :ok = Server.undo(pid)
      assert :ok = Server.undo(pid)
      assert {:error, _} = Server.read_file(pid, "/f")
      assert {:error, "nothing to undo" <> _} = Server.undo(pid)
    end

    test "undo: true commits nothing for an operation that left the state as it was" do
      {:ok, pid} = Server.start_link(undo: true)
      :ok = Server.write_file(pid, "/f", "same")
      {:ok, [%{id: head}]} = Server.log(pid, limit: 1)
      :ok = Server.write_file(pid, "/f", "same")
      assert {:ok, [%{id: ^head}]} = Server.log(pid, limit: 1)
    end

    test "commit, checkout, log and diff reach the server's session" do
      {:ok, pid} = Server.start_link()
      {:ok, _} = Server.exec(pid, "echo a > /a")
      {:ok, first} = Server.commit(pid, %{step: "a"})
      {:ok, _} = Server.exec(pid, "echo b > /b")
      assert {:ok, %{created: ["/b"]}} = Server.diff(pid, first)
      {:ok, second} = Server.commit(pid)
      assert {:ok, [%{id: ^second}, %{id: ^first, meta: %{"step" => "a"}}]} = Server.log(pid)
      assert :ok = Server.checkout(pid, first)
      assert {:error, _} = Server.read_file(pid, "/b")
      assert {:error, _} = Server.checkout(pid, String.duplicate("0", 64))
    end
  end
end
