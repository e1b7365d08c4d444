defmodule ExBashkit.Tool.GrantsTest do
  # What the `:git`, `:sqlite` and `:typescript` grants do outside a bare
  # Session: the LLM tool's texts, the Sandbox, Server and Pool options, and
  # the conflicts with `:builtins` and `:python`. Both isolation modes.
  use ExUnit.Case, async: true

  alias ExBashkit.{Pool, Result, Sandbox, Server, Session, Tool}

  @all [git: true, sqlite: true, typescript: true]
  @probe "git init -q /r && sqlite3 :memory: 'SELECT 6 * 7' && ts -c 'console.log(\"ts\")'"

  describe "ExBashkit.Tool" do
    test "the description and system prompt name the granted tools, and only those" do
      plain = Session.new()
      assert Tool.definition(plain) == Tool.definition()
      prompt = Tool.system_prompt(plain)
      refute prompt =~ "Extra tools"

      for {opts, present, absent} <- [
            {[git: true], ["git (virtual git"], ["sqlite", "typescript"]},
            {[sqlite: true], ["sqlite, sqlite3 (SQLite"], ["git", "typescript"]},
            {[typescript: true], ["ts, typescript, node, deno, bun (a TypeScript"],
             ["git", "sqlite"]},
            {[python: true] ++ @all,
             ["python, python3 (", "git (", "sqlite, sqlite3 (", "ts, typescript, node"], []}
          ] do
        session = Session.new(opts)
        description = Tool.definition(session).description
        prompt = Tool.system_prompt(session)
        assert prompt =~ "Extra tools: "

        for text <- present do
          assert description =~ text, "#{inspect(opts)}: #{text}"
          assert prompt =~ text, "#{inspect(opts)}: #{text}"
        end

        for text <- absent do
          refute description =~ text, "#{inspect(opts)}: #{text}"
          refute prompt =~ text, "#{inspect(opts)}: #{text}"
        end
      end
    end

    test "a tool call runs the granted tools" do
      session = Session.new(@all)

      assert %{"stdout" => "42\nts\n", "exit_code" => 0} =
               Tool.call(session, %{"commands" => @probe})
    end
  end

  describe "the command policy" do
    test "a denied tool command does not exist, on every route; the others stay" do
      s = Session.new(@all ++ [commands: [deny: ["git", "sqlite3", "node"]]])

      for script <- [
            "git init /r",
            "/usr/bin/git status",
            "env git status",
            "echo x | xargs git",
            "bash -c 'git log'",
            "sqlite3 :memory: 'SELECT 1'",
            "node -e 1"
          ] do
        assert {:ok, %Result{exit_code: 127, stderr: stderr}} = Session.exec(s, script)
        assert stderr =~ "not found" or stderr =~ "No such file", "#{script}: #{stderr}"
      end

      assert {:ok, %Result{stdout: "", exit_code: 1}} =
               Session.exec(s, "command -v git sqlite3 node")

      assert {:error, _} = Session.read_file(s, "/r/.git/HEAD")

      assert {:ok, %Result{stdout: "42\nts\n"}} =
               Session.exec(s, "sqlite :memory: 'SELECT 6 * 7' && ts -c 'console.log(\"ts\")'")

      # The model is told only what exists.
      text = Tool.definition(s).description
      assert text =~ "sqlite (SQLite"
      assert text =~ "ts, typescript, deno, bun (a TypeScript"
      refute text =~ "git"
      refute text =~ "sqlite3"
    end

    test "an allowlist keeps only the tool commands it names" do
      s = Session.new(@all ++ [commands: [allow: ["git"]]])
      assert {:ok, %Result{exit_code: 0}} = Session.exec(s, "git init -q /r")
      assert {:ok, %Result{exit_code: 127}} = Session.exec(s, "sqlite3 :memory: 'SELECT 1'")
      assert {:ok, %Result{exit_code: 127}} = Session.exec(s, "ts -c 1")
      refute Tool.system_prompt(s) =~ "SQLite"
    end
  end

  test "Sandbox passes the grants to its session" do
    {:ok, sandbox} = Sandbox.init(@all ++ [cwd: "/work"])
    assert {:ok, %{output: "42\nts\n", exit_code: 0}} = Sandbox.exec(sandbox, @probe, [])
    {:ok, plain} = Sandbox.init([])
    assert {:ok, %{exit_code: 127}} = Sandbox.exec(plain, "git status", [])
    assert {:error, message} = Sandbox.init(git: [remotes: ["https://x.example/"]])
    assert message =~ ":git remote"
  end

  test "Server passes the grants to its session, and keeps them across reset" do
    server = start_supervised!({Server, @all})
    assert {:ok, %Result{stdout: "42\nts\n"}} = Server.exec(server, @probe)
    :ok = Server.reset(server)
    assert {:ok, %Result{stdout: "42\nts\n"}} = Server.exec(server, @probe)
  end

  test "Pool sessions get the grants" do
    pool = start_supervised!({Pool, name: nil, size: 2, session: @all})
    assert {:ok, %Result{stdout: "42\nts\n"}} = Pool.exec(pool, @probe)
  end

  test "a grant and a custom builtin or :python name for one command conflict" do
    echo = fn _ -> {:ok, "x"} end

    for opts <- [
          [git: true, builtins: %{"git" => echo}],
          [sqlite: true, builtins: %{"sqlite3" => echo}],
          [typescript: true, builtins: %{"node" => echo}],
          [typescript: true, python: [name: "ts"]]
        ] do
      assert_raise ArgumentError, ~r/takes the command name/, fn -> Session.new(opts) end
    end

    # Names a tool does not take are free.
    assert %Session{} = Session.new(sqlite: true, builtins: %{"git" => echo})
  end
end
