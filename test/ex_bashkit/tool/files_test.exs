defmodule ExBashkit.Tool.FilesTest do
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.Session
  alias ExBashkit.Tool
  alias ExBashkit.Tool.Files

  doctest ExBashkit.Tool.Files

  defp call(session, name, input), do: Tool.call(session, name, input)

  test "edit_file replaces an exact unique match, and changes nothing otherwise" do
    session = Session.new(files: %{"/f.txt" => "one\ntwo\none\n"})

    assert %{"error" => error} =
             call(session, "edit_file", %{path: "/f.txt", old_text: "one", new_text: "1"})

    assert error =~ "occurs 2 times"

    assert %{"error" => error} =
             call(session, "edit_file", %{
               "path" => "/f.txt",
               "old_text" => "ONE",
               "new_text" => "1"
             })

    assert error =~ "not found"

    assert %{"error" => _} =
             call(session, "edit_file", %{"path" => "/f.txt", "old_text" => "", "new_text" => "x"})

    assert Session.read_file(session, "/f.txt") == {:ok, "one\ntwo\none\n"}

    assert %{"replacements" => 1, "error" => nil} =
             call(session, "edit_file", %{
               "path" => "/f.txt",
               "old_text" => "two\none",
               "new_text" => "2\n1"
             })

    assert Session.read_file(session, "/f.txt") == {:ok, "one\n2\n1\n"}

    assert %{"error" => "cannot read /missing" <> _} =
             call(session, "edit_file", %{
               "path" => "/missing",
               "old_text" => "a",
               "new_text" => "b"
             })
  end

  test "relative paths resolve against the shell's cwd; writes create parents" do
    session = Session.new()
    {:ok, _} = Session.exec(session, "mkdir -p /proj && cd /proj")

    assert %{"path" => "/proj/src/deep/a.py", "bytes" => 2, "error" => nil} =
             call(session, "write_file", %{"path" => "src/deep/a.py", "content" => "x\n"})

    assert %{"content" => "x\n"} =
             call(session, "read_file", %{"path" => "../proj/src/deep/a.py"})

    assert %{"paths" => ["src/deep/a.py"], "truncated" => false} =
             call(session, "glob", %{"pattern" => "**/*.py"})

    assert %{"matches" => [%{"path" => "src/deep/a.py", "line_number" => 1, "line" => "x"}]} =
             call(session, "grep", %{"pattern" => "^x$"})

    assert %{"matches" => []} =
             call(session, "grep", %{"pattern" => "x", "glob" => "*.md", "path" => "/proj"})
  end

  test "read_file cuts long output like bash, and replaces bytes that are not UTF-8" do
    big = Enum.map_join(1..3_000, "", &"line #{&1}\n")
    session = Session.new(files: %{"/big.txt" => big, "/bin.dat" => <<"ok", 0xFF, "\n">>})
    %{"content" => content} = call(session, "read_file", %{"path" => "/big.txt"})
    assert content =~ "line 2000\n[output truncated: 1000 more lines]\n"
    assert call(session, "read_file", %{"path" => "/bin.dat"})["content"] == "ok\uFFFD\n"
  end

  test "glob and grep are capped, bad regexes and bad inputs are errors" do
    files = Map.new(1..1_005, &{"/many/f#{&1}.txt", "hit\n"})
    session = Session.new(files: files)

    assert %{"paths" => paths, "truncated" => true} =
             call(session, "glob", %{"pattern" => "/many/*"})

    assert length(paths) == 1_000

    assert %{"matches" => matches, "truncated" => true} =
             call(session, "grep", %{"pattern" => "hit", "path" => "/many"})

    assert length(matches) == 1_000

    assert %{"error" => "invalid regex: " <> _} = call(session, "grep", %{"pattern" => "(open"})
    assert %{"error" => "invalid input: \"pattern\" is required"} = call(session, "glob", %{})

    assert %{"error" => "invalid input: " <> _} =
             call(session, "write_file", %{"path" => "/a", "content" => 5})

    assert %{"error" => "invalid input: " <> _} = Files.call(session, "glob", "not a map")
  end

  test "definitions are one list, bash first" do
    assert [%{name: "bash"} | files] = Tool.definitions()
    assert files == Files.definitions()

    for %{input_schema: schema} <- Tool.definitions() do
      assert schema["type"] == "object"
      assert Enum.all?(schema["required"], &Map.has_key?(schema["properties"], &1))
    end
  end
end
