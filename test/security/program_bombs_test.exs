defmodule ExBashkit.Security.ProgramBombsTest do
  # Programs that overflow the stack of bashkit 0.20.2's TypeScript (ZapCode)
  # and SQLite (Turso) parsers and planners, and the positional-parameter
  # doubling that passes every variable budget, are refused before they run
  # in both isolation modes (`policy/bombs.rs`, `commands/program.rs`): in
  # the node they took the VM down, in a worker every session on it. Each
  # test also shows the session stays usable and an ordinary program still
  # runs.
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.Session

  defp tools, do: Session.new(typescript: true, sqlite: true)

  defp assert_refused(session, script) do
    result = run!(session, script)
    assert result.exit_code == 1, inspect(result)
    assert result.stderr =~ "program refused", inspect(result)
    assert %{stdout: "alive\n"} = run!(session, "echo alive")
  end

  test "TypeScript: deep nesting, long operator chains, ternaries" do
    s = tools()

    for program <- [
          String.duplicate("(", 20_000) <> "1" <> String.duplicate(")", 20_000),
          "let a = " <> String.duplicate("[", 20_000),
          "let o = " <> String.duplicate("{a:", 20_000),
          "let x = " <> String.duplicate("1+", 100_000) <> "1",
          "let y = " <> String.duplicate("a?b:", 10_000) <> "c"
        ] do
      :ok = Session.write_file(s, "/prog.ts", program)
      assert_refused(s, "ts -c \"$(cat /prog.ts)\"")
      assert_refused(s, "ts < /prog.ts")
    end

    ordinary = String.duplicate("(", 100) <> "1+2" <> String.duplicate(")", 100)
    assert %{stdout: "3\n"} = run!(s, "ts -c 'console.log(#{ordinary})'")
  end

  test "SQLite: compound SELECTs, nested subqueries, chained views" do
    s = tools()

    union =
      "SELECT count(*) FROM (SELECT 1" <> String.duplicate(" UNION ALL SELECT 1", 20_000) <> ");"

    nested =
      String.duplicate("SELECT * FROM (", 2_000) <> "SELECT 1" <> String.duplicate(")", 2_000)

    views =
      ["CREATE VIEW v0 AS SELECT 1 AS a;"] ++
        for(i <- 1..1_500, do: "CREATE VIEW v#{i} AS SELECT * FROM v#{i - 1};") ++
        ["SELECT * FROM v1500;"]

    for sql <- [union, nested, Enum.join(views)] do
      :ok = Session.write_file(s, "/q.sql", sql)
      assert_refused(s, "sqlite3 :memory: \"$(cat /q.sql)\"")
      assert_refused(s, "sqlite3 :memory: < /q.sql")
    end

    ok = "SELECT count(*) FROM (SELECT 1" <> String.duplicate(" UNION ALL SELECT 1", 400) <> ");"
    :ok = Session.write_file(s, "/ok.sql", ok)
    assert %{stdout: "401\n"} = run!(s, "sqlite3 :memory: < /ok.sql")
  end

  test "set -- \"$@\" \"$@\" stops at the positional-parameter cap" do
    s = Session.new()

    result =
      run!(s, ~S'set -- ""; for i in $(seq 30); do set -- "$@" "$@" || break; done; echo "n=$#"')

    assert result.stderr =~ "set: cancelled"
    assert [n] = Regex.run(~r/n=(\d+)/, result.stdout, capture: :all_but_first)
    assert String.to_integer(n) <= 100_000
    assert %{stdout: "3\n"} = run!(s, "set -- a b c; echo $#")
  end
end
