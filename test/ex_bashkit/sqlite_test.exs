defmodule ExBashkit.SqliteTest do
  # The `:sqlite` capability: bashkit's embedded SQLite engine (Turso) on the
  # session filesystem. Runs in both isolation modes.
  use ExBashkit.Test.Case, async: true
  doctest ExBashkit.Sqlite

  alias ExBashkit.{Result, Session}

  @opt_in "BASHKIT_ALLOW_INPROCESS_SQLITE"

  test "a database created by one exec is queried by the next" do
    s = Session.new(sqlite: true, cwd: "/work")

    :ok =
      Session.write_file(s, "/work/schema.sql", """
      CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT NOT NULL, age INTEGER);
      INSERT INTO users(name, age) VALUES ('ada', 36), ('linus', 28), ('grace', 45);
      """)

    ok!(s, "sqlite3 app.db < schema.sql")

    # A file of the session filesystem, in SQLite's own format.
    assert {:ok, "SQLite format 3" <> <<0>> <> _} = Session.read_file(s, "/work/app.db")

    assert ok!(s, "sqlite3 app.db 'SELECT name FROM users WHERE age > 30 ORDER BY name'").stdout ==
             "ada\ngrace\n"

    ok!(s, "sqlite3 app.db \"UPDATE users SET age = age + 1 WHERE name = 'linus'\"")
    assert ok!(s, "sqlite app.db 'SELECT age FROM users WHERE id = 2'").stdout == "29\n"

    assert ok!(s, "sqlite3 -csv -header app.db 'SELECT count(*) AS n FROM users'").stdout ==
             "n\n3\n"
  end

  test "snapshot and restore carry the database; reset/1 drops it" do
    s = Session.new(sqlite: true)
    ok!(s, "sqlite3 /d.db 'CREATE TABLE t(x); INSERT INTO t VALUES (1), (2)'")
    {:ok, bytes} = Session.snapshot(s)

    ok!(s, "sqlite3 /d.db 'INSERT INTO t VALUES (3)'")
    assert ok!(s, "sqlite3 /d.db 'SELECT sum(x) FROM t'").stdout == "6\n"

    {:ok, s} = Session.restore(s, bytes)
    assert ok!(s, "sqlite3 /d.db 'SELECT sum(x) FROM t'").stdout == "3\n"

    {:ok, other} = Session.restore(Session.new(sqlite: true), bytes)
    assert ok!(other, "sqlite3 /d.db 'SELECT count(*) FROM t'").stdout == "2\n"

    :ok = Session.reset(s)
    assert {:error, _} = Session.read_file(s, "/d.db")
    assert ok!(s, "sqlite3 :memory: 'SELECT 40 + 2'").stdout == "42\n"
  end

  test "track_changes reports the database file" do
    s = Session.new(sqlite: true)

    assert {:ok, %Result{changes: changes}} =
             Session.exec(s, "sqlite3 /d.db 'CREATE TABLE t(x)'", track_changes: true)

    assert changes.created == ["/d.db"]

    assert {:ok, %Result{changes: %{modified: ["/d.db"]}}} =
             Session.exec(s, "sqlite3 /d.db 'INSERT INTO t VALUES (1)'", track_changes: true)
  end

  test "without the option there is no sqlite, and a script cannot turn it on" do
    s = Session.new()
    assert %Result{exit_code: 127, stderr: stderr} = run!(s, "sqlite3 :memory: 'SELECT 1'")
    assert stderr =~ "command not found"
    assert run!(s, "export #{@opt_in}=1; sqlite :memory: 'SELECT 1'").exit_code == 127

    assert run!(Session.new(env: [{@opt_in, "1"}]), "sqlite3 :memory: 'SELECT 1'").exit_code ==
             127
  end

  test "the opt-in variable bashkit needs is invisible to scripts" do
    s = Session.new(sqlite: true)
    refute ok!(s, "echo \"[$#{@opt_in}]\"; env; set; declare -p").stdout =~ @opt_in
    :ok = Session.reset(s)
    refute ok!(s, "env; set").stdout =~ @opt_in
    assert ok!(s, "sqlite3 :memory: 'SELECT 1'").stdout == "1\n"
  end

  test "malformed :sqlite options raise" do
    for bad <- [:yes, "true", 1, [x: 1]] do
      assert_raise ArgumentError, ~r/:sqlite/, fn -> Session.new(sqlite: bad) end
    end
  end

  # Without the session's limit, sqlite's own budget is 30 s: the test's
  # timeout would fire first.
  @tag timeout: 20_000
  test "a runaway query ends with the session's timeout and the session stays usable" do
    s = Session.new(sqlite: true, limits: [timeout_ms: 1_000])

    runaway =
      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"

    case Session.exec(s, "sqlite3 :memory: '#{runaway}'") do
      {:ok, %Result{exit_code: code, stderr: stderr}} ->
        assert code != 0
        assert stderr =~ "timed out"

      {:error, _} ->
        :ok
    end

    assert ok!(s, "sqlite3 :memory: 'SELECT 7'").stdout == "7\n"
  end

  test "output is bounded by the session's stdout cap" do
    s = Session.new(sqlite: true, limits: [max_stdout_bytes: 1_000])

    rows =
      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000) SELECT x FROM c"

    case Session.exec(s, "sqlite3 :memory: '#{rows}'") do
      {:ok, %Result{stdout: stdout}} -> assert byte_size(stdout) <= 1_000
      {:error, _} -> :ok
    end
  end
end
