defmodule ExBashkit.Security.BombsInNodeTest do
  # In the node a stack overflow or an unbounded allocation would take the
  # VM down, and in a worker process every session on that process with it,
  # so the known bombs of bashkit 0.20.2's commands are refused before they
  # run in both modes (`native/ex_bashkit/src/policy/bombs.rs`). The suite
  # runs once per mode: these tests use the mode of the run.
  use ExUnit.Case, async: true

  alias ExBashkit.{Result, Session}

  @nest String.duplicate("(", 65_536) <> "1" <> String.duplicate(")", 65_536)

  for {what, script} <- [
        {"xxd with a 10 GB line width", "echo x | xxd -c 10000000000"},
        {"uniq -f 10^18", "echo a | uniq -f 1000000000000000000"},
        {"jq with 65 536 nested parentheses", "jq -n \"#{@nest}\""}
      ] do
    test "#{what} is refused up front, and the session stays usable" do
      s = Session.new()
      assert {:ok, %Result{exit_code: 1, stderr: stderr}} = Session.exec(s, unquote(script))
      assert stderr =~ "cancelled"
      assert {:ok, %Result{stdout: "alive\n"}} = Session.exec(s, "echo alive")
    end
  end

  test "ordinary uses of the same commands run" do
    s = Session.new()

    assert {:ok, %Result{stdout: "a\n"}} = Session.exec(s, "printf 'a\\na\\n' | uniq -f 1")
    assert {:ok, %Result{stdout: "3\n"}} = Session.exec(s, "jq -n '((1 + 2))'")
    assert {:ok, %Result{exit_code: 0}} = Session.exec(s, "echo hi | xxd -c 16 -g 2")
  end
end
