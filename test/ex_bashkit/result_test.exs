defmodule ExBashkit.ResultTest do
  # What an exec cost, on every %ExBashkit.Result{}: wall time, commands
  # run, bytes written to stdout and stderr.
  use ExUnit.Case, async: true

  alias ExBashkit.{Result, Session}

  test "a session exec reports commands, bytes and wall time" do
    session = Session.new()
    {:ok, result} = Session.exec(session, "echo one; echo two >&2; true")

    assert %Result{stdout_bytes: 4, stderr_bytes: 4, commands: commands, wall_time_us: us} =
             result

    assert commands >= 3
    assert is_integer(us) and us >= 0

    # Counted per exec, not cumulatively.
    {:ok, again} = Session.exec(session, "true")
    assert again.commands == 1
  end

  test "the command count follows the script's work" do
    session = Session.new()
    {:ok, small} = Session.exec(session, "for i in 1 2; do :; done")
    {:ok, large} = Session.exec(session, "for i in $(seq 1 200); do :; done")
    assert large.commands > small.commands + 150
  end

  test "wall time covers a script that waits" do
    {:ok, result} = Session.exec(Session.new(), "sleep 0.05")
    assert result.wall_time_us >= 50_000
  end

  test "truncated output counts what was kept" do
    session = Session.new(limits: [max_stdout_bytes: 10])
    {:ok, result} = Session.exec(session, "echo 0123456789abcdef")
    assert result.stdout_truncated
    assert result.stdout_bytes == byte_size(result.stdout)
    assert result.stdout_bytes <= 10
  end

  test "ExBashkit.exec/1 reports them too" do
    {:ok, result} = ExBashkit.exec("printf abc")
    assert result.stdout_bytes == 3
    assert result.commands == 1
    assert is_integer(result.wall_time_us)
  end

  test "a result a custom builtin returns has no metrics of its own" do
    assert %Result{}.commands == nil
    assert %Result{}.wall_time_us == nil
  end
end
