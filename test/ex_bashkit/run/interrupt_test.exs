defmodule ExBashkit.Run.InterruptTest do
  # Our `sleep` (cancel/1 wakes it: native run/interrupt.rs) reads its
  # operands as bashkit's own `sleep` does, so a script means the same thing
  # under either.
  use ExUnit.Case, async: true

  alias ExBashkit.Session

  test "sleep takes the operands bashkit's sleep takes, and refuses the others" do
    s = Session.new()

    for operand <- ["0x0", "0", ".0", "0e3", "0x.0p1", "' 0'", "0s", "0m", "0.0d"] do
      assert {:ok, %{exit_code: 0, stderr: ""}} = Session.exec(s, "sleep #{operand}"), operand
    end

    for operand <- ["abc", "1x", "1ss", "'0 '", "nan", "-1", "''"] do
      assert {:ok, %{exit_code: 1, stderr: "sleep: " <> _}} = Session.exec(s, "sleep #{operand}"),
             operand
    end
  end
end
