defmodule ExBashkit.TypeScriptTest do
  # The `:typescript` capability: bashkit's embedded TypeScript interpreter
  # (ZapCode). Runs in both isolation modes.
  use ExBashkit.Test.Case, async: true
  doctest ExBashkit.TypeScript

  alias ExBashkit.{Result, Session}

  test "a TypeScript file runs and prints" do
    s = Session.new(typescript: true, cwd: "/work")

    :ok =
      Session.write_file(s, "/work/main.ts", """
      interface Item { name: string; price: number }
      const items: Item[] = [{ name: "tea", price: 3 }, { name: "cake", price: 5 }];
      function total(list: Item[]): number {
        return list.reduce((sum, item) => sum + item.price, 0);
      }
      for (const item of items) console.log(`${item.name}: ${item.price}`);
      console.log(`total=${total(items)}`);
      """)

    assert ok!(s, "ts main.ts").stdout == "tea: 3\ncake: 5\ntotal=8\n"

    assert ok!(s, "node -e 'console.log([1, 2, 3].map(x => x * 2).join(\",\"))'").stdout ==
             "2,4,6\n"

    assert ok!(s, "echo 'console.log(6 * 7)' | typescript").stdout == "42\n"
  end

  test "files written from TypeScript are the session's" do
    s = Session.new(typescript: true)
    :ok = Session.write_file(s, "/in.txt", "from elixir")
    ok!(s, "ts -c \"await writeFile('/out.txt', (await readFile('/in.txt')).toUpperCase())\"")
    assert {:ok, "FROM ELIXIR"} = Session.read_file(s, "/out.txt")
  end

  test "a syntax error is the command's failure, not the exec's" do
    s = Session.new(typescript: true)
    assert %Result{exit_code: code} = run!(s, "ts -c 'const = ;'")
    assert code != 0
    assert ok!(s, "ts -c 'console.log(1)'").stdout == "1\n"
  end

  test "without the option there is no ts, node, deno or bun" do
    s = Session.new()

    for command <- ["ts", "typescript", "node", "deno", "bun"] do
      assert %Result{exit_code: 127, stderr: stderr} = run!(s, "#{command} -e 'console.log(1)'")
      assert stderr =~ "command not found"
    end
  end

  test "malformed :typescript options raise" do
    for bad <- [:yes, "true", 1, [x: 1]] do
      assert_raise ArgumentError, ~r/:typescript/, fn -> Session.new(typescript: bad) end
    end
  end

  @tag timeout: 20_000
  test "an endless loop ends with the session's timeout and the session stays usable" do
    s = Session.new(typescript: true, limits: [timeout_ms: 1_000])

    case Session.exec(s, "ts -c 'let i = 0; while (true) { i++; }'") do
      {:ok, %Result{exit_code: code}} -> assert code != 0
      {:error, _} -> :ok
    end

    assert ok!(s, "ts -c 'console.log(2)'").stdout == "2\n"
  end
end
