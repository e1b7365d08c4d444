defmodule ExBashkit.SearchTest do
  # glob/grep walk the session's filesystem in Rust: the in-memory files,
  # real host directories mounted into it, and Elixir virtual_fs backends.
  use ExUnit.Case, async: true

  alias ExBashkit.{Search, Session}
  alias ExBashkit.Test.{HostDir, MapFs}

  doctest ExBashkit.Search

  defp tree do
    Session.new(
      files: %{
        "/p/a.ex" => "defmodule A do\n  def run, do: :ok\nend\n",
        "/p/lib/b.ex" => "defmodule B do\nend\n",
        "/p/lib/deep/c.exs" => "IO.puts(:c)\n",
        "/p/.hidden/h.ex" => "defmodule Hidden do\nend\n",
        "/p/README.md" => "# Readme\ndefmodule in prose\n",
        "/other/x.ex" => "defmodule X do\nend\n"
      }
    )
  end

  describe "glob/3" do
    test "** spans directories, * stays in one, results sorted and relative to :cwd" do
      s = tree()
      assert Search.glob(s, "**/*.ex", cwd: "/p") == {:ok, [".hidden/h.ex", "a.ex", "lib/b.ex"]}
      assert Search.glob(s, "*.ex", cwd: "/p") == {:ok, ["a.ex"]}

      assert Search.glob(s, "lib/**", cwd: "/p") ==
               {:ok, ["lib/b.ex", "lib/deep", "lib/deep/c.exs"]}

      assert Search.glob(s, "**/*.{ex,exs}", cwd: "/p/lib") == {:ok, ["b.ex", "deep/c.exs"]}
      assert Search.glob(s, "[ab].ex", cwd: "/p") == {:ok, ["a.ex"]}
      assert Search.glob(s, "?.ex", cwd: "/p") == {:ok, ["a.ex"]}
    end

    test "absolute patterns give absolute paths; paths outside :cwd stay absolute" do
      s = tree()
      assert Search.glob(s, "/other/*.ex") == {:ok, ["/other/x.ex"]}
      assert Search.glob(s, "../other/*.ex", cwd: "/p") == {:ok, ["/other/x.ex"]}
      assert Search.glob(s, "/p/README.md") == {:ok, ["/p/README.md"]}
      assert Search.glob(s, "/nowhere/**") == {:ok, []}
    end

    test ":limit keeps the first paths in sorted order" do
      assert Search.glob(tree(), "**", cwd: "/p", limit: 2) == {:ok, [".hidden", ".hidden/h.ex"]}
      assert Search.glob(tree(), "**", cwd: "/p", limit: 0) == {:ok, []}
    end

    test "files scripts write are found at once" do
      s = Session.new()
      {:ok, _} = Session.exec(s, "mkdir -p /w/a/b && touch /w/a/b/new.txt")
      assert Search.glob(s, "/w/**/*.txt") == {:ok, ["/w/a/b/new.txt"]}
    end

    test "a walk over too many entries is an error naming the bound, not a partial list" do
      files = for i <- 1..50, into: %{}, do: {"/many/f#{i}", ""}
      s = Session.new(files: files)
      assert {:error, message} = Search.glob(s, "/many/*", max_entries: 10)
      assert message =~ ":max_entries"
      assert {:ok, paths} = Search.glob(s, "/many/*", max_entries: 50)
      assert length(paths) == 50
    end

    test "bad arguments" do
      s = tree()
      assert {:error, _} = Search.glob(s, "/{a,b")
      assert_raise ArgumentError, fn -> Search.glob(s, "*", cwd: "relative") end
      assert_raise ArgumentError, fn -> Search.glob(s, "*", bogus: 1) end
      assert_raise ArgumentError, fn -> Search.glob(s, "*", limit: -1) end
    end
  end

  describe "grep/3" do
    test "matches in path then line order, relative to :path, hidden entries skipped" do
      assert Search.grep(tree(), "defmodule", path: "/p") ==
               {:ok,
                [
                  %{path: "README.md", line_number: 2, line: "defmodule in prose"},
                  %{path: "a.ex", line_number: 1, line: "defmodule A do"},
                  %{path: "lib/b.ex", line_number: 1, line: "defmodule B do"}
                ]}
    end

    test ":glob filters by file name without a slash, by relative path with one" do
      s = tree()
      {:ok, by_name} = Search.grep(s, "defmodule", path: "/p", glob: "*.ex")
      assert Enum.map(by_name, & &1.path) == ["a.ex", "lib/b.ex"]
      {:ok, by_path} = Search.grep(s, "defmodule", path: "/p", glob: "lib/*.ex")
      assert Enum.map(by_path, & &1.path) == ["lib/b.ex"]
    end

    test "case sensitivity, regex syntax, limit" do
      s = tree()
      assert {:ok, []} = Search.grep(s, "DEFMODULE", path: "/p")
      assert {:ok, [_, _, _]} = Search.grep(s, "DEFMODULE", path: "/p", case_sensitive: false)
      assert {:ok, [%{line: "  def run, do: :ok"}]} = Search.grep(s, ~S"^\s+def \w+", path: "/p")
      assert {:ok, [_]} = Search.grep(s, "defmodule", path: "/p", limit: 1)
      assert {:ok, []} = Search.grep(s, "defmodule", path: "/p", limit: 0)
    end

    test "an invalid regex is {:error, {:invalid_regex, message}}" do
      assert {:error, {:invalid_regex, message}} = Search.grep(tree(), "a(b")
      assert message =~ "unclosed group"
      # Rust syntax, not PCRE: no look-around.
      assert {:error, {:invalid_regex, _}} = Search.grep(tree(), "(?=x)")
    end

    test "a :path naming a file searches it alone; a missing path is an error" do
      assert Search.grep(tree(), "def", path: "/p/lib/b.ex") ==
               {:ok, [%{path: "b.ex", line_number: 1, line: "defmodule B do"}]}

      assert {:error, _} = Search.grep(tree(), "def", path: "/missing")
    end

    test "binary files are skipped, long lines cut, non-UTF-8 lines made printable" do
      long = String.duplicate("x", 10_000)

      s =
        Session.new(
          files: %{
            "/b/bin" => <<"match", 0, 1, 2>>,
            "/b/long.txt" => "match" <> long <> "\n",
            "/b/latin1.txt" => <<"match caf", 0xE9, "\n">>
          }
        )

      {:ok, matches} = Search.grep(s, "match", path: "/b")
      assert Enum.map(matches, & &1.path) == ["latin1.txt", "long.txt"]
      [latin1, cut] = matches
      assert String.valid?(latin1.line)
      assert latin1.line =~ "match caf"
      assert byte_size(cut.line) == 4096
    end

    test "the byte budget bounds what is read" do
      files = for i <- 1..10, into: %{}, do: {"/big/f#{i}.txt", String.duplicate("a\n", 1000)}
      s = Session.new(files: files)
      assert {:error, message} = Search.grep(s, "zzz", path: "/big", max_bytes: 5_000)
      assert message =~ ":max_bytes"
      assert {:ok, []} = Search.grep(s, "zzz", path: "/big", max_file_bytes: 100)
      assert {:ok, []} = Search.grep(s, "zzz", path: "/big")
    end
  end

  describe "over host mounts and virtual_fs backends" do
    test "both walk real host directories through the mount" do
      host =
        HostDir.create!(%{
          "src/main.py" => "import os\nprint('hello')\n",
          "src/util/helpers.py" => "def hello():\n    pass\n",
          "notes.txt" => "hello notes\n"
        })

      s = Session.new(mounts: [{"/repo", host, :read_only}])

      assert Search.glob(s, "**/*.py", cwd: "/repo") ==
               {:ok, ["src/main.py", "src/util/helpers.py"]}

      assert Search.grep(s, "hello", path: "/repo", glob: "*.py") ==
               {:ok,
                [
                  %{path: "src/main.py", line_number: 2, line: "print('hello')"},
                  %{path: "src/util/helpers.py", line_number: 1, line: "def hello():"}
                ]}

      # A file created on the host afterwards is seen at once.
      File.write!(Path.join(host, "src/new.py"), "hello = 1\n")
      {:ok, paths} = Search.glob(s, "/repo/src/*.py")
      assert "/repo/src/new.py" in paths
    end

    test "symlinks on a host mount are listed, never followed" do
      host = HostDir.create!(%{"d/f.txt" => "needle\n", "loop" => {:symlink, "."}})
      s = Session.new(mounts: [{"/m", host, :read_only}])
      assert Search.glob(s, "/m/**") == {:ok, ["/m/d", "/m/d/f.txt", "/m/loop"]}
      assert {:ok, [%{path: "d/f.txt"}]} = Search.grep(s, "needle", path: "/m")
    end

    test "a virtual_fs backend is walked through back-calls" do
      agent =
        MapFs.start(%{
          "/docs" => :dir,
          "/docs/a.md" => "alpha\nneedle here\n",
          "/docs/b.md" => "beta\n"
        })

      s = Session.new(virtual_fs: %{"/api" => {MapFs, agent}})
      assert Search.glob(s, "/api/**/*.md") == {:ok, ["/api/docs/a.md", "/api/docs/b.md"]}

      assert Search.grep(s, "needle", path: "/api") ==
               {:ok, [%{path: "docs/a.md", line_number: 2, line: "needle here"}]}
    end
  end

  test "a search waits for the running script and sees what it wrote" do
    test_pid = self()

    s =
      Session.new(
        builtins: %{
          "started" => fn _ ->
            send(test_pid, :script_started)
            Process.sleep(100)
            {:ok, ""}
          end
        }
      )

    task = Task.async(fn -> Session.exec(s, "started; echo found > /late.txt") end)
    assert_receive :script_started, 5_000
    # Submitted while the script runs: it runs after it, in arrival order.
    assert Search.grep(s, "found", path: "/") ==
             {:ok, [%{path: "late.txt", line_number: 1, line: "found"}]}

    assert {:ok, _} = Task.await(task, 5_000)
  end
end
