defmodule ExBashkit.CallbacksTest do
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Result, Session}

  defp echo_call(call) do
    {:ok,
     "args=#{Enum.join(call.args, ",")} stdin=#{inspect(call.stdin)} env=#{inspect(call.env["VISIBLE"])}\n"}
  end

  describe "the call" do
    test "gets args (without the name), stdin and the exported env" do
      s = Session.new(builtins: %{"show" => &echo_call/1}, env: [VISIBLE: "yes"])
      run!(s, "hidden=1")

      assert run!(s, "show a 'b c'").stdout == ~s(args=a,b c stdin="" env="yes"\n)
      assert run!(s, "printf 'in\\n' | show").stdout == ~s(args= stdin="in\\n" env="yes"\n)

      assert {:ok, %Result{stdout: out}} =
               Session.exec(
                 Session.new(
                   builtins: %{"envkeys" => fn c -> {:ok, Enum.join(Map.keys(c.env), " ")} end}
                 ),
                 "unexported=1; export EXPORTED=1; envkeys"
               )

      assert out =~ "EXPORTED"
      refute out =~ "unexported"
    end

    test "runs outside the caller's process" do
      me = self()
      s = Session.new(builtins: %{"whoami_pid" => fn _ -> {:ok, inspect(self() == me)} end})
      assert run!(s, "whoami_pid").stdout == "false"
    end
  end

  describe "return values" do
    setup do
      builtins = %{
        "ok" => fn _ -> {:ok, ["i", ?o, "data\n"]} end,
        "err" => fn _ -> {:error, "went wrong\n"} end,
        "full" => fn _ -> %Result{stdout: "o", stderr: "e", exit_code: 42} end,
        "bad" => fn _ -> :what end,
        "bad_iodata" => fn _ -> {:ok, [:not_iodata]} end,
        "bad_code" => fn _ -> %Result{exit_code: :nope} end
      }

      %{s: Session.new(builtins: builtins)}
    end

    test "{:ok, iodata} is stdout with exit 0", %{s: s} do
      assert %Result{stdout: "iodata\n", exit_code: 0} = run!(s, "ok")
    end

    test "{:error, iodata} is stderr with exit 1", %{s: s} do
      assert %Result{stdout: "", stderr: "went wrong\n", exit_code: 1} = run!(s, "err")
    end

    test "%ExBashkit.Result{} gives full control", %{s: s} do
      assert %Result{stdout: "o", stderr: "e", exit_code: 42} = run!(s, "full")
    end

    test "anything else fails that command with exit 1 and says why", %{s: s} do
      for name <- ["bad", "bad_iodata", "bad_code"] do
        assert %Result{exit_code: 1, stderr: stderr} = run!(s, name)
        assert stderr =~ "#{name}: builtin returned an invalid value"
      end

      assert run!(s, "bad; echo next").stdout == "next\n"
    end
  end

  describe "failures are confined to the command" do
    setup do
      builtins = %{
        "raises" => fn _ -> raise ArgumentError, "bad input" end,
        "throws" => fn _ -> throw(:ball) end,
        "exits" => fn _ -> exit(:bye) end,
        "linked_crash" => fn _ ->
          spawn_link(fn -> exit(:linked_boom) end)
          Process.sleep(:infinity)
        end,
        "sleeps" => fn _ -> Process.sleep(:infinity) end
      }

      %{s: Session.new(builtins: builtins, builtin_timeout_ms: 1_000)}
    end

    test "raise, throw and exit", %{s: s} do
      assert %Result{exit_code: 1, stderr: e1} = run!(s, "raises")
      assert e1 =~ "raises: builtin failed: ** (ArgumentError) bad input"
      assert %Result{exit_code: 1, stderr: e2} = run!(s, "throws")
      assert e2 =~ "throws: builtin failed: throw: :ball"
      assert %Result{exit_code: 1, stderr: e3} = run!(s, "exits")
      assert e3 =~ "exits: builtin failed: exit: :bye"
    end

    test "a crash of a linked process does not reach the caller", %{s: s} do
      assert %Result{exit_code: 1, stderr: stderr} = run!(s, "linked_crash")
      assert stderr =~ "linked_boom"
      assert Process.alive?(self())
    end

    test "a builtin past builtin_timeout_ms fails with exit 124", %{s: s} do
      assert %Result{exit_code: 124, stderr: stderr} = run!(s, "sleeps")
      assert run!(s, "sleeps; echo code=$?").stdout == "code=124\n"

      assert stderr =~ "sleeps: builtin timed out after 1000 ms"
      assert run!(s, "echo usable").stdout == "usable\n"
    end
  end

  describe "works everywhere a command can stand" do
    setup do
      upcase = fn call -> {:ok, String.upcase(call.stdin <> Enum.join(call.args, " "))} end
      %{s: Session.new(builtins: %{"up" => upcase})}
    end

    test "pipelines, substitutions, loops, functions", %{s: s} do
      assert run!(s, "echo abc | up | tr B X").stdout == "AXC\n"
      assert run!(s, "x=$(up hi); echo \"[$x]\"").stdout == "[HI]\n"
      assert run!(s, "for w in a b; do up $w; echo; done").stdout == "A\nB\n"
      assert run!(s, "shout() { up \"$@\"; }; shout fn").stdout == "FN"
      assert run!(s, "up x && echo ok").stdout == "Xok\n"
      assert run!(s, "up one | up | up").stdout == "ONE"
    end
  end

  # A script of a session's own builtins and a few plain ones, with literal
  # words, is quick: once a first exec has measured the session, such a
  # script runs on the caller's scheduler, and so does the rest of it after
  # each builtin answered (ARCHITECTURE.md, "The life of one back-call").
  # Every exec after the first here takes that path.
  describe "builtins in quick scripts" do
    setup do
      test_pid = self()

      builtins = %{
        "tag" => fn call -> {:ok, "<#{Enum.join(call.args, " ")}>"} end,
        "big" => fn _ -> {:ok, String.duplicate("b", 200_000)} end,
        "hang" => fn _ ->
          send(test_pid, {:hanging, self()})
          Process.sleep(:infinity)
        end
      }

      # A group, so that a session beside it can share its worker process.
      group = {:quick_builtins, make_ref()}
      s = Session.new(builtins: builtins, builtin_timeout_ms: 60_000, group: group)
      assert run!(s, "tag first").stdout == "<first>"
      %{s: s, group: group}
    end

    test "answers arrive in order, many times over", %{s: s} do
      for i <- 1..50 do
        assert %Result{stdout: out, exit_code: 3} =
                 run!(s, "tag a #{i}; echo ' mid'; tag z; cd /tmp; tag; exit 3")

        assert out == "<a #{i}> mid
<z><>"
      end

      assert run!(s, "pwd").stdout == "/tmp
"
      # In the node these messages come as NIF values instead of by mail
      # (the back-calls, the final replies): none was also sent, or lost.
      assert Process.info(self(), :message_queue_len) == {:message_queue_len, 0}
    end

    test "an answer too big for a normal scheduler arrives whole", %{s: s} do
      for _ <- 1..3 do
        assert run!(s, "tag x; big; tag y").stdout ==
                 "<x>" <> String.duplicate("b", 200_000) <> "<y>"
      end
    end

    test "a per-call timeout and cancel/1 still stop a builtin that hangs", %{s: s} do
      assert {:error, %ExBashkit.Error{reason: :timeout, stdout: "<a>"}} =
               Session.run(s, "tag a; hang; tag b", timeout_ms: 1_000)

      assert_received {:hanging, _}
      assert run!(s, "tag again").stdout == "<again>"

      {:ok, ref} = Session.exec_async(s, "hang")
      assert_receive {:hanging, _}, 5_000
      assert Session.cancel(s, ref) == :ok
      assert_receive {:ex_bashkit, ^ref, {:error, %ExBashkit.Error{reason: :cancelled}}}, 5_000
      assert run!(s, "tag after").stdout == "<after>"
    end

    test "while a quick script waits on its builtin, a session beside it runs", %{
      s: s,
      group: group
    } do
      {:ok, ref} = Session.exec_async(s, "tag a; hang")
      assert_receive {:hanging, _}, 5_000
      # In a worker, one in the same OS process, whose frame reader polled
      # the script that now waits.
      beside = Session.new(group: group)
      assert place(beside) == place(s)

      for i <- 1..20, do: assert(run!(beside, "echo #{i}").stdout == "#{i}\n")

      assert run!(beside, "x=1; while [ $x -lt 50 ]; do x=$((x+1)); done; echo $x").stdout ==
               "50\n"

      assert Session.cancel(s, ref) == :ok
      assert_receive {:ex_bashkit, ^ref, {:error, %ExBashkit.Error{reason: :cancelled}}}, 5_000
      assert run!(s, "tag after").stdout == "<after>"
    end
  end

  describe "re-entry and nesting" do
    test "exec on the same session from its own builtin returns an error at once" do
      parent = self()
      {:ok, holder} = Agent.start_link(fn -> nil end)

      s =
        Session.new(
          builtins: %{
            "again" => fn _ ->
              itself = Agent.get(holder, & &1)
              send(parent, {:reentry, Session.run(itself, "echo nested")})
              {:ok, "done\n"}
            end
          },
          builtin_timeout_ms: 60_000
        )

      Agent.update(holder, fn _ -> s end)
      assert run!(s, "again").stdout == "done\n"
      # Promptly: well before the 60 s back-call timeout.
      assert_received {:reentry, {:error, %{message: "re-entrant exec" <> _}}}
    end

    test "a builtin may drive a different session" do
      inner = Session.new(files: %{"/secret" => "inner data\n"})

      outer =
        Session.new(
          builtins: %{
            "ask_inner" => fn _ ->
              Session.exec(inner, "cat /secret") |> then(fn {:ok, r} -> {:ok, r.stdout} end)
            end
          }
        )

      assert run!(outer, "ask_inner | tr a-z A-Z").stdout == "INNER DATA\n"
    end

    test "100 sessions whose builtins exec on another session all complete" do
      targets = for i <- 1..100, do: Session.new(env: [N: "#{i}"])

      outers =
        for target <- targets do
          Session.new(
            builtins: %{
              "via" => fn _ ->
                {:ok, r} = Session.exec(target, "echo $N")
                {:ok, r.stdout}
              end
            },
            builtin_timeout_ms: 20_000
          )
        end

      results =
        outers
        |> Task.async_stream(&Session.exec(&1, "via; via"), max_concurrency: 100, timeout: 60_000)
        |> Enum.map(fn {:ok, {:ok, r}} -> r end)

      for {r, i} <- Enum.with_index(results, 1) do
        assert r.exit_code == 0, r.stderr
        assert r.stdout == "#{i}\n#{i}\n"
      end
    end
  end

  describe "options" do
    test "builtins must be a map of valid names to 1-arity functions" do
      assert_raise ArgumentError, ~r/1-arity function/, fn ->
        Session.new(builtins: %{"x" => fn -> :ok end})
      end

      assert_raise ArgumentError, ~r/not a valid command name/, fn ->
        Session.new(builtins: %{"a b" => &echo_call/1})
      end

      assert_raise ArgumentError, ~r/not a valid command name/, fn ->
        Session.new(builtins: %{"a/b" => &echo_call/1})
      end

      assert_raise ArgumentError, ~r/:builtins must be a map/, fn ->
        Session.new(builtins: :nope)
      end
    end

    test "builtin_timeout_ms must be a positive integer" do
      for bad <- [0, -1, 1.5, "10", nil] do
        assert_raise ArgumentError, ~r/:builtin_timeout_ms must be a positive integer/, fn ->
          Session.new(builtin_timeout_ms: bad)
        end
      end
    end

    test "a builtin shadows a command of the same name" do
      s = Session.new(builtins: %{"cat" => fn _ -> {:ok, "not really cat\n"} end})
      assert run!(s, "cat /nothing").stdout == "not really cat\n"
    end
  end

  # Where a session lives: its worker, or the node.
  defp place(%Session{location: {:process, worker, _sid}}), do: worker
  defp place(%Session{location: location}), do: location
end
