defmodule ExBashkit.Session.ContractTest do
  # The small things a user trips on (issue "Results an agent can trust"):
  # bang variants, option shapes, foreign handles, :files as a keyword list,
  # limits bashkit cannot honour, and :python next to a same-named builtin.
  use ExUnit.Case, async: true

  alias ExBashkit.{Error, Result, Session}

  test "bang variants return the value or raise ExBashkit.Error with a reason" do
    s = Session.new()
    assert %Result{stdout: "hi\n"} = Session.exec!(s, "echo hi")
    assert :ok = Session.write_file!(s, "/f", "x")
    assert "x" = Session.read_file!(s, "/f")
    assert is_binary(Session.snapshot!(s))

    error = assert_raise Error, fn -> Session.exec!(s, "sleep 5", timeout_ms: 100) end
    assert error.reason == :timeout
    assert_raise Error, fn -> Session.read_file!(s, "/missing") end
    assert %Result{stdout: "alive\n"} = Session.exec!(s, "echo alive")
  end

  describe "the seed's contract: {:error, message}; run/3 gives the struct" do
    test "exec, stream, ExBashkit.exec and the filesystem calls fail with a message" do
      s = Session.new(limits: [max_commands: 2])

      assert {:error, "parse error" <> _} = Session.exec(s, "if then fi")
      assert {:error, message} = Session.exec(s, "echo 1; echo 2; echo 3")
      assert message =~ "max_commands"
      assert [{:error, "parse error" <> _}] = s |> Session.stream("if then") |> Enum.to_list()
      assert {:error, "parse error" <> _} = ExBashkit.exec("if then fi")

      assert {:error, "/missing: no such file or directory"} = Session.read_file(s, "/missing")
      assert {:error, "/missing: no such file or directory"} = Session.stat(s, "/missing")
      assert {:error, "/missing: no such file or directory"} = Session.list_dir(s, "/missing")
      assert {:error, msg} = Session.remove(s, "/missing")
      assert is_binary(msg)
      assert {:error, msg} = Session.restore(s, "not a snapshot")
      assert is_binary(msg)
    end

    test "run/3, ExBashkit.run/2 and Server.run/3 answer %ExBashkit.Error{}" do
      s = Session.new(limits: [max_commands: 2])

      assert {:error, %Error{reason: :limit, limit: :max_commands, stdout: "1\n" <> _}} =
               Session.run(s, "echo 1; echo 2; echo 3")

      assert {:error, %Error{reason: :parse}} = ExBashkit.run("if then fi")
      {:ok, server} = ExBashkit.Server.start_link()
      assert {:error, %Error{reason: :parse}} = ExBashkit.Server.run(server, "if then fi")
      assert {:error, "parse error" <> _} = ExBashkit.Server.exec(server, "if then fi")
      assert_raise Error, ~r/parse error/, fn -> ExBashkit.Server.exec!(server, "if then") end
    end

    test "a missing file is reason :not_found, set where it failed" do
      s = Session.new()

      for fun <-
            [&Session.read_file!(&1, "/nope"), &Session.stat!(&1, "/nope")] ++
              [&Session.list_dir!(&1, "/nope")] do
        error = assert_raise Error, fn -> fun.(s) end
        assert {error.reason, error.message} == {:not_found, "/nope: no such file or directory"}
      end

      assert Session.stat!(s, "/tmp") == %{type: :dir, size: Session.stat!(s, "/tmp").size}
      assert is_list(Session.list_dir!(s, "/"))
    end

    test "state/1 and restore/3 answer {:ok, _} | {:error, message}; bang variants raise" do
      s = Session.new(cwd: "/tmp")
      assert {:ok, %{cwd: "/tmp"}} = Session.state(s)
      assert Session.state!(s).cwd == "/tmp"
      {:ok, bytes} = Session.snapshot(s)
      assert {:ok, ^s} = Session.restore(s, bytes)
      assert ^s = Session.restore!(s, bytes)
      assert_raise Error, fn -> Session.restore!(s, "garbage") end
    end

    test "Pool.exec!/3 raises the error of run/3" do
      {:ok, pool} = ExBashkit.Pool.start_link(name: nil, size: 1)
      assert %Result{stdout: "hi\n"} = ExBashkit.Pool.exec!(pool, "echo hi")
      error = assert_raise Error, fn -> ExBashkit.Pool.exec!(pool, "if then fi") end
      assert error.reason == :parse
      assert {:error, "parse error" <> _} = ExBashkit.Pool.exec(pool, "if then fi")
    end

    test "a first argument that is not a session raises ArgumentError" do
      for fun <- [
            &Session.exec(&1, "true"),
            &Session.run(&1, "true"),
            &Session.stream(&1, "true"),
            &Session.exec_async(&1, "true"),
            &Session.read_file(&1, "/f"),
            &Session.stat(&1, "/f"),
            &Session.state(&1),
            &Session.trash(&1)
          ] do
        assert_raise ArgumentError, ~r/must be a session/, fn -> fun.(:not_a_session) end
      end
    end

    test "the reason vocabulary is one list" do
      assert :lost in Error.reasons() and :not_found in Error.reasons()
      assert Enum.all?(Error.reasons(), &is_atom/1)
    end
  end

  test "exec options: a map like new/1's, :infinity for no timeout, typed errors" do
    s = Session.new()
    assert {:ok, %Result{stdout: "in\n"}} = Session.exec(s, "cat", %{stdin: "in\n"})
    assert {:ok, %Result{stdout: "ok\n"}} = Session.exec(s, "echo ok", timeout_ms: :infinity)

    assert_raise ArgumentError, ~r/positive integer or :infinity/, fn ->
      Session.exec(s, "true", timeout_ms: -1)
    end

    assert_raise ArgumentError, ~r/must be a boolean/, fn ->
      Session.exec(s, "true", track_changes: :yes)
    end
  end

  test "a handle from elsewhere gets an ArgumentError that says so, and inspects" do
    s = Session.new(isolation: :in_node)
    foreign = %{s | resource: make_ref()}

    assert_raise ArgumentError, ~r/another node|not made by/, fn ->
      Session.exec(foreign, "echo hi")
    end

    assert inspect(foreign) =~ "#ExBashkit.Session<"
  end

  test ":files as a keyword list works, as documented" do
    s = Session.new(files: ["/a.txt": "alpha", "/d/b.txt": "beta"])
    assert {:ok, %Result{stdout: "alphabeta"}} = Session.exec(s, "cat /a.txt /d/b.txt")
  end

  test "a function depth bashkit cannot honour is refused, not silently lowered" do
    assert_raise ArgumentError, ~r/max_function_depth can be at most 16/, fn ->
      Session.new(limits: [max_function_depth: 100])
    end

    assert %Session{} = Session.new(limits: [max_function_depth: 16])
  end

  test ":python with a custom builtin of the same name raises instead of dropping it" do
    assert_raise ArgumentError, ~r/:python takes the command name/, fn ->
      Session.new(python: true, builtins: %{"python3" => fn _ -> {:ok, "mine\n"} end})
    end
  end
end
