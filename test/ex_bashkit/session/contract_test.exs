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
