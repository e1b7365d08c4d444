defmodule ExBashkit.SessionTest do
  use ExBashkit.Test.Case, async: true
  doctest ExBashkit.Session

  alias ExBashkit.{Result, Session}

  describe "state persists across exec/2" do
    test "env, shell variables, cwd, files, functions and aliases" do
      s = Session.new()

      run!(s, """
      export EXPORTED=e
      plain=p
      mkdir -p /work && cd /work
      echo data > file.txt
      greet() { echo "hi $1"; }
      alias ll='echo from-alias'
      """)

      assert run!(s, "echo $EXPORTED $plain").stdout == "e p\n"
      assert run!(s, "pwd").stdout == "/work\n"
      assert run!(s, "cat file.txt").stdout == "data\n"
      assert run!(s, "greet bob").stdout == "hi bob\n"
      assert run!(s, "ll").stdout == "from-alias\n"
    end

    test "arrays survive too" do
      s = Session.new()
      run!(s, "arr=(a b c); declare -A m; m[k]=v")
      assert run!(s, ~S(echo "${arr[1]} ${#arr[@]} ${m[k]}")).stdout == "b 3 v\n"
    end

    test "a non-zero exit code is still {:ok, result}" do
      s = Session.new()
      assert %Result{exit_code: 3, stdout: "before\n"} = run!(s, "echo before; exit 3")
      assert %Result{exit_code: 127} = run!(s, "no-such-command")
      assert run!(s, "echo after").stdout == "after\n"
    end

    test "a session keeps working past bashkit's default cap of 1000 exec calls" do
      s = Session.new()
      for i <- 1..1_005, do: %Result{exit_code: 0} = run!(s, "n=#{i}")
      assert run!(s, "echo $n").stdout == "1005\n"
    end
  end

  describe "errors leave the session usable" do
    test "parse error" do
      s = Session.new()
      run!(s, "x=kept")
      assert {:error, %{message: "parse error" <> _}} = Session.run(s, "if then")
      assert run!(s, "echo $x").stdout == "kept\n"
    end

    test "limit exceeded names the limit" do
      s = Session.new(limits: [max_commands: 5])

      assert {:error, %{message: message}} =
               Session.run(s, "for i in 1 2 3 4 5 6 7 8; do :; done")

      assert message =~ "maximum command count exceeded"
      assert message =~ "max_commands"
      assert run!(s, "echo ok").stdout == "ok\n"
    end

    test "scripts that are not valid UTF-8 are rejected" do
      s = Session.new()

      assert {:error, %{message: "script is not valid UTF-8"}} = Session.run(s, <<"echo ", 0xC3>>)

      long = String.duplicate("echo fine; ", 100) <> <<0xC3>>

      assert {:error, %{message: "script is not valid UTF-8"}} =
               Session.run(s, long, stdin: "x", timeout_ms: 1_000)

      assert [error: "script is not valid UTF-8"] =
               s |> Session.stream(<<"echo ", 0xC3>>) |> Enum.to_list()

      assert run!(s, "echo fine").stdout == "fine\n"
    end

    test "wrong argument types are programmer errors" do
      s = Session.new()
      assert_raise ArgumentError, ~r/must be a string/, fn -> Session.exec(s, 42) end
      assert_raise ArgumentError, ~r/charlist/, fn -> Session.exec(s, ~c"echo") end

      assert_raise ArgumentError, ~r/must be a session/, fn ->
        Session.exec(:not_a_session, "echo")
      end

      assert_raise ArgumentError, ~r/unknown exec option/, fn ->
        Session.exec(s, "echo", bogus: 1)
      end

      assert_raise ArgumentError, ~r/:stdin must be iodata/, fn ->
        Session.exec(s, "cat", stdin: :x)
      end
    end
  end

  describe "deep recursion runs on the library's own stacks" do
    test "infinite function recursion ends in a depth error" do
      s = Session.new()
      assert {:error, %{message: message}} = Session.run(s, "f() { f; }; f")
      assert message =~ "maximum function depth exceeded"
      assert run!(s, "echo alive").stdout == "alive\n"
    end

    test "a fork bomb ends, reporting the depth limit, and the VM lives on" do
      s = Session.new()
      assert {:ok, %Result{stderr: stderr}} = Session.exec(s, ":(){ :|:& };:")
      assert stderr =~ "maximum function depth exceeded"
      assert run!(s, "echo alive").stdout == "alive\n"
    end

    test "deeply nested substitutions and subshells are bounded" do
      s = Session.new()
      nested = Enum.reduce(1..200, "echo x", fn _, acc -> "$(#{acc})" end)

      assert {:error, %{message: "parse error: AST nesting too deep" <> _}} =
               Session.run(s, "echo " <> nested)

      subshells = String.duplicate("( ", 200) <> "echo x" <> String.duplicate(" )", 200)

      assert {:error, %{message: "parse error: AST nesting too deep" <> _}} =
               Session.run(s, subshells)

      assert run!(s, "echo alive").stdout == "alive\n"
    end
  end

  describe "timeout_ms is a wall-clock promise" do
    test "a script that never yields is stopped near its limit" do
      s =
        Session.new(
          limits: [
            timeout_ms: 300,
            max_commands: 1_000_000_000_000,
            max_loop_iterations: 1_000_000_000_000,
            max_total_loop_iterations: 1_000_000_000_000
          ]
        )

      started = System.monotonic_time(:millisecond)
      assert {:error, %{message: message}} = Session.run(s, "while true; do :; done")
      elapsed = System.monotonic_time(:millisecond) - started
      assert message =~ "timeout"
      # Bounded, not a benchmark: far below "ran until something else broke".
      assert elapsed < 5_000
      assert run!(s, "echo alive").stdout == "alive\n"
    end

    test "string doubling ends with an error instead of eating the machine" do
      s = Session.new(limits: [timeout_ms: 2_000])
      assert {:error, %{message: message}} = Session.run(s, "x=a; while true; do x=$x$x; done")
      assert message =~ ~r/memory|timeout/
      assert run!(s, "echo alive").stdout == "alive\n"
    end
  end

  describe "concurrency" do
    test "concurrent execs on one session run one at a time" do
      s = Session.new(files: %{"/count" => "0"})
      script = "n=$(cat /count); sleep 0.01; echo $((n + 1)) > /count"

      1..20
      |> Task.async_stream(fn _ -> Session.exec(s, script) end,
        max_concurrency: 20,
        timeout: 30_000
      )
      |> Enum.each(fn {:ok, {:ok, %Result{exit_code: 0}}} -> :ok end)

      # Interleaved read-modify-write would lose increments.
      assert Session.read_file(s, "/count") == {:ok, "20\n"}
    end

    test "different sessions run in parallel, and stat/2 answers while a script runs" do
      waiting = Session.new()
      other = Session.new()

      task =
        Task.async(fn ->
          Session.exec(waiting, "while [ ! -e /go ]; do sleep 0.01; done; echo released")
        end)

      wait_until_running(waiting)

      # `waiting` cannot finish before /go exists; another session still runs.
      assert run!(other, "echo meanwhile").stdout == "meanwhile\n"
      assert {:error, _} = Session.stat(waiting, "/go")
      assert {:ok, %{type: :dir}} = Session.stat(waiting, "/tmp")
      assert inspect(waiting) =~ "status: :running"

      :ok = Session.write_file(waiting, "/go", "")
      assert {:ok, %Result{stdout: "released\n"}} = Task.await(task)
    end
  end

  describe "stdin" do
    test "is fed to the script" do
      s = Session.new()
      assert run!(s, "x=1").exit_code == 0
      assert {:ok, %Result{stdout: "2\n"}} = Session.exec(s, "wc -l", stdin: ["a\n", ?b, "\n"])
    end
  end

  test "inspect shows id, status and cwd, not the raw reference" do
    s = Session.new(cwd: "/work")
    assert inspect(s) =~ ~r/^#ExBashkit.Session<id: \d+, status: :idle, cwd: "\/work">$/
  end
end
