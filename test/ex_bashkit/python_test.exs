defmodule ExBashkit.PythonTest do
  use ExBashkit.Test.Case, async: true
  doctest ExBashkit.Python

  alias ExBashkit.{Result, Session}

  @opt_in "BASHKIT_ALLOW_INPROCESS_PYTHON"

  # Runs `code` as a python file and returns the result.
  defp py!(session, code) do
    :ok = Session.write_file(session, "/tmp/t.py", code)
    run!(session, "python3 /tmp/t.py")
  end

  describe "enabling" do
    test "python: true registers python and python3" do
      s = Session.new(python: true)
      assert run!(s, "python -c 'print(1)'; python3 -c 'print(2)'").stdout == "1\n2\n"
      assert run!(s, "python3 --version").stdout =~ "monty"
    end

    test "custom names replace the default ones" do
      s = Session.new(python: [name: "py"])
      assert %Result{stdout: "1\n", exit_code: 127} = run!(s, "py -c 'print(1)'; python3 -c 'x'")

      s = Session.new(python: [names: ["snake", "python3.12"]])
      assert run!(s, "snake -c 'print(1)'; python3.12 -c 'print(2)'").stdout == "1\n2\n"
      assert run!(s, "python -c 'print(3)'").exit_code == 127
    end

    test "without the option there is no python, and a script cannot turn it on" do
      s = Session.new()
      assert %Result{exit_code: 127, stderr: stderr} = run!(s, "python3 -c 'print(1)'")
      assert stderr =~ "command not found"

      assert run!(s, "export #{@opt_in}=1; python3 -c 'print(1)'; python -c 'print(1)'").exit_code ==
               127

      # Even the variable given at build time does nothing without :python.
      s = Session.new(env: [{@opt_in, "1"}])
      assert run!(s, "python3 -c 'print(1)'").exit_code == 127
    end

    test "the opt-in variable bashkit needs is invisible to scripts and to python" do
      s = Session.new(python: true)

      refute run!(s, "echo \"[$#{@opt_in}]\"; env; set; declare -p").stdout =~ @opt_in

      assert run!(s, "python3 -c 'import os; print(os.getenv(\"#{@opt_in}\"))'").stdout ==
               "None\n"

      assert run!(s, "python3 -c 'import os; print(\"#{@opt_in}\" in os.environ)'").stdout ==
               "False\n"

      # Nor does it travel in a snapshot.
      {:ok, bytes} = Session.snapshot(s)
      {:ok, other} = Session.restore(Session.new(python: true), bytes)
      refute run!(other, "env").stdout =~ @opt_in
      assert run!(other, "python3 -c 'print(5)'").stdout == "5\n"
    end

    test "python survives reset/1, still without the variable" do
      s = Session.new(python: true)
      :ok = Session.reset(s)
      assert run!(s, "python3 -c 'print(1)'").stdout == "1\n"
      refute run!(s, "env; set").stdout =~ @opt_in
    end

    test "malformed :python options raise" do
      for bad <- [:yes, "true", [name: ""], [names: []], [names: "py"], [other: 1], [name: 1]] do
        assert_raise ArgumentError, ~r/:python/, fn -> Session.new(python: bad) end
      end
    end
  end

  describe "the session filesystem is shared" do
    test "files python writes are seen by bash and read_file/2" do
      s = Session.new(python: true)

      run!(s, ~S"""
      python3 -c "
      from pathlib import Path
      Path('/out').mkdir()
      Path('/out/a.txt').write_text('from python\n')
      with open('/out/b.txt', 'w') as f:
          f.write('via open\n')
      "
      """)

      assert run!(s, "cat /out/a.txt /out/b.txt").stdout == "from python\nvia open\n"
      assert Session.read_file(s, "/out/a.txt") == {:ok, "from python\n"}
      assert {:ok, [{"a.txt", :file}, {"b.txt", :file}]} = Session.list_dir(s, "/out")
    end

    test "files bash and write_file/3 write are read by python" do
      s = Session.new(python: true, files: %{"/seeded.txt" => "seed"})
      :ok = Session.write_file(s, "/api.txt", "api")
      run!(s, "echo bash > /bash.txt")

      code = """
      from pathlib import Path
      print(Path('/seeded.txt').read_text(), Path('/api.txt').read_text(), open('/bash.txt').read().strip())
      """

      assert py!(s, code).stdout == "seed api bash\n"
    end

    test "bytes round-trip, and relative paths resolve against the shell's cwd" do
      s = Session.new(python: true, cwd: "/work")
      :ok = Session.write_file(s, "/work/in.bin", <<0, 255, 1, 2>>)

      run!(s, ~S"""
      python3 -c "
      from pathlib import Path
      data = Path('in.bin').read_bytes()
      Path('out.bin').write_bytes(data + data)
      with open('log.txt', 'a') as f:
          f.write(str(len(data)))
      "
      """)

      assert Session.read_file(s, "/work/out.bin") == {:ok, <<0, 255, 1, 2, 0, 255, 1, 2>>}
      assert Session.read_file(s, "/work/log.txt") == {:ok, "4"}
    end

    test "pathlib directory operations act on the session's filesystem" do
      s = Session.new(python: true, files: %{"/d/one.txt" => "1", "/d/two.txt" => "2"})

      code = """
      from pathlib import Path
      print(sorted(p.name for p in Path('/d').iterdir()))
      Path('/d/one.txt').rename('/d/uno.txt')
      Path('/d/two.txt').unlink()
      Path('/d/sub').mkdir()
      print(Path('/d/sub').is_dir(), Path('/d/uno.txt').is_file(), Path('/d/two.txt').exists())
      """

      assert py!(s, code).stdout == "['one.txt', 'two.txt']\nTrue True False\n"
      assert {:ok, [{"sub", :dir}, {"uno.txt", :file}]} = Session.list_dir(s, "/d")
    end
  end

  describe "running code" do
    test "-c, a file, stdin, pipes, substitution and nested shells" do
      s = Session.new(python: true)
      :ok = Session.write_file(s, "/s.py", "print('from file')\n")

      assert run!(s, "python3 /s.py").stdout == "from file\n"
      assert run!(s, "echo 'print(7)' | python3").stdout == "7\n"
      assert run!(s, "python3 -", stdin: "print(8)\n").stdout == "8\n"
      assert run!(s, "python3 -c 'print(9)' | tr 9 X").stdout == "X\n"
      assert run!(s, "x=$(python3 -c 'print(2 ** 100)'); echo ${#x}").stdout == "31\n"
      assert run!(s, "bash -c \"python3 -c 'print(10)'\"").stdout == "10\n"
    end

    test "exported variables reach os.getenv, shell-only ones do not" do
      s = Session.new(python: true, env: [FROM_ENV: "e"])

      assert run!(
               s,
               "export EXPORTED=x; local_only=y; python3 -c 'import os; print(os.getenv(\"FROM_ENV\"), os.getenv(\"EXPORTED\"), os.getenv(\"local_only\"))'"
             ).stdout ==
               "e x None\n"
    end

    test "an uncaught exception is a traceback on stderr and exit status 1" do
      s = Session.new(python: true)
      assert %Result{exit_code: 1, stderr: stderr} = py!(s, "raise ValueError('bad input')\n")
      assert stderr =~ "ValueError: bad input"
      assert run!(s, "python3 -c 'oops(' ; echo status=$?").stdout == "status=1\n"
      assert run!(s, "python3 /nope.py").exit_code == 2
    end

    test "the language and modules the docs promise" do
      s = Session.new(python: true)

      code = """
      import json, math, datetime
      class Point:
          def __init__(self, x, y):
              self.x = x
              self.y = y
          def norm(self):
              return math.sqrt(self.x ** 2 + self.y ** 2)
      def outer():
          n = 0
          def inc():
              nonlocal n
              n += 1
          inc(); inc()
          return n
      try:
          1 / 0
      except ZeroDivisionError:
          caught = True
      data = json.loads('{"a": [1, 2]}')
      print(Point(3, 4).norm(), outer(), caught, json.dumps({k: v * 2 for k, v in data.items()}))
      print(f"{3.14159:.2f}", sorted([3, 1, 2], key=lambda v: -v), datetime.date.today())
      """

      assert py!(s, code).stdout ==
               ~s(5.0 2 True {"a": [1, 2, 1, 2]}\n3.14 [3, 2, 1] 2024-01-01\n)
    end

    test "what it cannot do: third-party and most stdlib imports, re, network" do
      s = Session.new(python: true)

      for module <- ["numpy", "requests", "socket", "urllib.request", "subprocess", "time"] do
        assert %Result{exit_code: 1, stderr: stderr} = run!(s, "python3 -c 'import #{module}'")
        assert stderr =~ "ModuleNotFoundError", module
      end

      assert %Result{exit_code: 1, stderr: stderr} = run!(s, "python3 -c 'import re'")
      assert stderr =~ "disabled for security"
    end
  end

  describe "limits bound python and the session survives" do
    test "an infinite loop ends with an error within the session timeout" do
      s = Session.new(python: true, limits: [timeout_ms: 500])
      started = System.monotonic_time(:millisecond)
      result = Session.run(s, "python3 -c 'while True:\n    pass'")
      elapsed = System.monotonic_time(:millisecond) - started

      case result do
        {:ok, %Result{exit_code: code, stderr: stderr}} ->
          assert code != 0
          assert stderr =~ ~r/TimeoutError|time limit/

        {:error, %{reason: reason}} ->
          assert reason == :timeout
      end

      assert elapsed < 5_000
      assert run!(s, "python3 -c 'print(\"alive\")'").stdout == "alive\n"
    end

    test "memory, recursion and output are bounded" do
      s = Session.new(python: true, limits: [max_stdout_bytes: 1_000])

      assert %Result{exit_code: 1, stderr: stderr} =
               run!(s, "python3 -c 'x = \"a\" * (512 * 1024 * 1024)'")

      assert stderr =~ "MemoryError"

      assert %Result{exit_code: 1, stderr: stderr} =
               py!(s, "def f(n):\n    return f(n + 1)\nf(0)\n")

      assert stderr =~ "RecursionError"

      assert %Result{stdout_truncated: true, stdout: out} =
               run!(s, "python3 -c 'print(\"x\" * 5000)'")

      assert byte_size(out) <= 1_000
      assert run!(s, "echo alive").stdout == "alive\n"
    end

    test "each call takes a share of the exec's work budget: ~95 calls fit in one exec" do
      s = Session.new(python: true)
      assert run!(s, "for i in $(seq 1 50); do python3 -c 'pass'; done; echo ok").stdout == "ok\n"

      assert {:error, %{message: message}} =
               Session.run(s, "for i in $(seq 1 150); do python3 -c 'pass'; done")

      assert message =~ "work units"
      # One python run doing the whole loop is the way around it.
      assert run!(s, "python3 -c 'print(sum(1 for i in range(150)))'").stdout == "150\n"
    end
  end

  test "sessions run python in parallel without sharing anything" do
    results =
      1..8
      |> Task.async_stream(
        fn i ->
          s = Session.new(python: true)
          run!(s, "python3 -c \"open('/n', 'w').write('#{i}')\"")
          {i, Session.read_file(s, "/n")}
        end,
        timeout: 30_000
      )
      |> Enum.map(fn {:ok, r} -> r end)

    for {i, read} <- results, do: assert(read == {:ok, Integer.to_string(i)})
  end
end
