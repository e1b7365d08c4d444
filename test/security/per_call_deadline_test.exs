defmodule ExBashkit.Security.PerCallDeadlineTest do
  # Commands whose work is synchronous, where no timer or cancel reaches
  # them, and which bashkit 0.20.2 bounds by the *session's* timeout only:
  # TypeScript, SQLite, jq. With `timeout_ms:` on the call they ran to the
  # session's 30 s: in the node the session's next exec waited for them, in
  # a worker the worker was killed and every session on it lost. Their
  # budget is now what is left of the call's deadline
  # (`commands/program.rs`, `commands/nested.rs`).
  #
  # No timing is asserted: the session's own timeout is two minutes, so a
  # command that outlived the call's deadline would run past this module's
  # 60 s test timeout (ExUnit's default). The session's state shows its
  # worker survived.
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Error, Session}

  for {what, script} <- [
        {"ts endless loop", "ts -c 'for(;;){}'"},
        {"sqlite endless recursive CTE",
         "sqlite3 :memory: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) " <>
           "SELECT count(*) FROM c;'"},
        {"jq endless recursion", "jq -n 'def f: f; f'"},
        {"jq counting to 1e18", "jq -n 'until(. > 1e18; .+1)'"}
      ] do
    test "#{what} stops at the call's deadline; the session keeps its state" do
      s = Session.new(typescript: true, sqlite: true, limits: [timeout_ms: 120_000])
      assert %{exit_code: 0} = run!(s, "export KEEP=kept")

      assert {:error, %Error{reason: :timeout}} =
               Session.run(s, unquote(script), timeout_ms: 1_000)

      assert %{stdout: "kept\n"} = run!(s, "echo $KEEP")
    end
  end

  test "without a per-call deadline the same commands still run" do
    s = Session.new(typescript: true, sqlite: true)
    assert %{stdout: "3\n"} = run!(s, "jq -n '1 + 2'")
    assert %{stdout: "[1,2]\n"} = run!(s, "echo '[1,2]' | jq -c .")
    assert %{stdout: "3\n"} = run!(s, "ts -c 'console.log(1 + 2)'", timeout_ms: 10_000)
    assert %{stdout: "3\n"} = run!(s, "sqlite3 :memory: 'SELECT 1 + 2;'", timeout_ms: 10_000)
    assert %{stdout: "{\"a\":1}\n"} = run!(s, "jq -c . <<< '{\"a\":1}'", timeout_ms: 10_000)
  end
end
