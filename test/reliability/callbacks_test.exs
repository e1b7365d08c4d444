defmodule ExBashkit.Reliability.CallbacksTest do
  # Back-calls into Elixir (custom builtins, virtual_fs backends) are code a
  # script can trigger at will: each way such a callback can misbehave must
  # fail only that command, within :builtin_timeout_ms, and leave the session,
  # the caller and the node alive. Also the regressions peers shipped: a
  # callback that exits took the caller down; a directory listing with "",
  # ".", ".." or "a/b" entries sent find/grep -r into unbounded recursion and
  # crashed the VM.
  use ExUnit.Case, async: true

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.Health

  @bound_ms 30_000

  defp bounded_exec(session, script) do
    task = Task.async(fn -> Session.run(session, script) end)

    case Task.yield(task, @bound_ms) || Task.shutdown(task, :brutal_kill) do
      {:ok, outcome} -> outcome
      nil -> flunk("#{script} did not end within #{@bound_ms} ms")
    end
  end

  describe "custom builtins" do
    test "a builtin that never returns is abandoned after builtin_timeout_ms (exit 124)" do
      {:ok, seen} = Agent.start_link(fn -> [] end)

      s =
        Session.new(
          builtin_timeout_ms: 200,
          builtins: %{
            "hang" => fn _ ->
              me = self()
              Agent.update(seen, &[me | &1])
              Process.sleep(:infinity)
            end
          }
        )

      assert {:ok, %Result{exit_code: 124}} = bounded_exec(s, "hang")
      # The process that ran it does not linger.
      [pid] = Agent.get(seen, & &1)
      Health.wait_until(fn -> not Process.alive?(pid) end, 5_000, "the hung builtin to be killed")
      Health.assert_usable!(s)
    end

    test "a builtin that never returns, called in a loop, is bounded too" do
      s =
        Session.new(
          builtin_timeout_ms: 50,
          builtins: %{"hang" => fn _ -> Process.sleep(:infinity) end}
        )

      assert {:ok, %Result{}} =
               bounded_exec(s, "for i in 1 2 3 4 5 6 7 8 9 10; do hang; done; echo done")

      Health.assert_usable!(s)
    end

    test "a builtin that raises, throws or exits fails only that command; the caller lives" do
      s =
        Session.new(
          builtins: %{
            "raises" => fn _ -> raise "boom" end,
            "throws" => fn _ -> throw(:ball) end,
            "exits" => fn _ -> exit(:bye) end,
            "kills" => fn _ -> Process.exit(self(), :kill) end,
            "garbage" => fn _ -> {:what, :is, self()} end
          }
        )

      for name <- ~w(raises throws exits kills garbage) do
        assert {:ok, %Result{exit_code: code}} = bounded_exec(s, "#{name}; echo after-#{name}")
        assert code == 0, "#{name}: the script should go on after the failed command"
      end

      assert Process.alive?(self())
      Health.assert_usable!(s)
    end

    test "the waiting process is left with no message of a back-call, however it ended" do
      # The process that waits in exec serves the back-calls; a long-lived
      # caller (a GenServer) must not collect their leftovers.
      s =
        Session.new(
          builtin_timeout_ms: 100,
          builtins: %{
            "ok" => fn _ -> {:ok, "x\n"} end,
            "raises" => fn _ -> raise "boom" end,
            "quits" => fn _ -> Process.exit(self(), :normal) end,
            "hangs" => fn _ -> Process.sleep(:infinity) end
          }
        )

      Task.async(fn ->
        for script <- ["ok; ok", "raises", "quits", "hangs", "ok; hangs; ok"] do
          assert {:ok, %Result{}} = Session.exec(s, script)
        end

        assert {:error, _} = Session.exec(s, "hangs", timeout_ms: 50)
        # A late message would land after the exec returned.
        Process.sleep(200)
        assert {:messages, []} = Process.info(self(), :messages)
      end)
      |> Task.await(@bound_ms)
    end

    test "a builtin returning 100 MB is capped, not buffered without bound" do
      big = :binary.copy("x", 100_000_000)
      s = Session.new(builtins: %{"big" => fn _ -> {:ok, big} end})

      case bounded_exec(s, "big | wc -c; big") do
        {:ok, %Result{stdout: out}} -> assert byte_size(out) <= 1_048_576 + 64
        {:error, %{message: message}} -> assert is_binary(message)
      end

      Health.assert_usable!(s)
      Health.assert_healthy!()
    end

    test "a builtin that calls exec on its own session does not deadlock it" do
      # The spec forbids this (the exec holds the session); a script must
      # still not be able to wedge the session with it: the back-call times
      # out and everything moves on.
      {:ok, holder} = Agent.start_link(fn -> nil end)

      s =
        Session.new(
          builtin_timeout_ms: 300,
          builtins: %{
            "reenter" => fn _ -> Session.exec(Agent.get(holder, & &1), "echo inner") end
          }
        )

      Agent.update(holder, fn _ -> s end)
      assert {:ok, %Result{stdout: out}} = bounded_exec(s, "reenter; echo outer")
      assert out =~ "outer"
      Health.assert_usable!(s)
    end

    test "100 sessions whose builtins exec on other sessions all complete (no starvation)" do
      targets = for _ <- 1..100, do: Session.new()

      sessions =
        for target <- targets do
          Session.new(
            builtins: %{
              "nested" => fn _ ->
                {:ok, %Result{stdout: out}} = Session.exec(target, "echo nested")
                {:ok, out}
              end
            }
          )
        end

      results =
        sessions
        |> Task.async_stream(&Session.exec(&1, "nested"), max_concurrency: 100, timeout: @bound_ms)
        |> Enum.map(fn {:ok, outcome} -> outcome end)

      assert Enum.all?(results, &match?({:ok, %Result{stdout: "nested\n"}}, &1))
    end

    test "the :env a builtin receives holds the session's variables, not the host's" do
      name = "EXBASHKIT_CB_SECRET_#{System.unique_integer([:positive])}"
      System.put_env(name, "host-only")

      try do
        s =
          Session.new(
            builtins: %{"env_keys" => fn call -> {:ok, Enum.join(Map.keys(call.env), "\n")} end}
          )

        {:ok, %Result{stdout: keys}} = bounded_exec(s, "export MINE=1; env_keys")
        assert keys =~ "MINE"
        refute keys =~ name
      after
        System.delete_env(name)
      end
    end
  end

  describe "virtual_fs backends" do
    @list_ops [:list, :list_dir, :read_dir, :readdir, :ls]

    test "a backend that returns 100 MB is bounded and the node stays healthy" do
      big = :binary.copy("y", 100_000_000)

      s =
        Session.new(
          virtual_fs: %{
            "/v" => fn
              %{op: :read} -> {:ok, big}
              _ -> {:error, :enotsup}
            end
          }
        )

      outcome = bounded_exec(s, "cat /v/big | wc -c; cat /v/big")
      assert match?({:ok, %Result{}}, outcome) or match?({:error, _}, outcome)

      with {:ok, %Result{stdout: out}} <- outcome do
        assert byte_size(out) <= 1_048_576 + 64
      end

      Health.assert_usable!(s)
      Health.assert_healthy!()
    end

    test "a backend that never answers is abandoned after builtin_timeout_ms" do
      s =
        Session.new(
          builtin_timeout_ms: 200,
          virtual_fs: %{"/v" => fn _ -> Process.sleep(:infinity) end}
        )

      assert {:ok, %Result{exit_code: code}} = bounded_exec(s, "cat /v/x; ls /v")
      assert code != 0
      Health.assert_usable!(s)
    end

    test "a backend that raises or exits fails the command, not the caller" do
      s =
        Session.new(
          virtual_fs: %{
            "/r" => fn _ -> raise "boom" end,
            "/e" => fn _ -> exit(:bye) end
          }
        )

      assert {:ok, %Result{}} = bounded_exec(s, "cat /r/x; cat /e/x; ls /r /e; echo after")
      assert Process.alive?(self())
      Health.assert_usable!(s)
    end

    test "a listing with \"\", \".\", \"..\", \"a/b\" or self-named entries cannot recurse without bound" do
      listing = fn ->
        [
          {"", :dir},
          {".", :dir},
          {"..", :dir},
          {"a/b", :dir},
          {"v", :dir},
          {"f", :file},
          {"/", :dir}
        ]
      end

      s =
        Session.new(
          builtin_timeout_ms: 2_000,
          limits: [timeout_ms: 10_000],
          virtual_fs: %{
            "/v" => fn
              %{op: op} when op in @list_ops -> {:ok, listing.()}
              %{op: :stat} -> {:ok, %{type: :dir, size: 0}}
              %{op: :read} -> {:ok, "content\n"}
              _ -> {:error, :enotsup}
            end
          }
        )

      for script <- [
            "find /v",
            "grep -r content /v",
            "ls -R /v",
            "du -a /v",
            "cp -r /v /copy",
            "tar -cf /t.tar /v"
          ] do
        outcome = bounded_exec(s, script)
        assert match?({:ok, %Result{}}, outcome) or match?({:error, _}, outcome)
      end

      Health.assert_usable!(s)
      Health.assert_healthy!()
    end
  end
end
