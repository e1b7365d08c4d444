defmodule ExBashkit.Session.OptionsTest do
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.Session

  describe ":env" do
    test "map or keyword list; keys and values stringified" do
      assert out(Session.new(env: %{"LANG" => "C"}), "echo $LANG") == "C\n"
      assert out(Session.new(env: [LANG: "C"]), "echo $LANG") == "C\n"

      assert out(Session.new(env: [{:N, 42}, {"F", 1.5}, {:A, :atom}]), "echo $N $F $A") ==
               "42 1.5 atom\n"
    end

    test "variables are exported" do
      assert out(Session.new(env: [X: "1"]), "bash -c 'echo $X'; env | grep ^X=") == "1\nX=1\n"
    end

    test "bad entries raise" do
      assert_raise ArgumentError, ~r/:env must be a map or a keyword list/, fn ->
        Session.new(env: "X=1")
      end

      assert_raise ArgumentError, ~r/:env key/, fn -> Session.new(env: %{"A=B" => "1"}) end
      assert_raise ArgumentError, ~r/:env key/, fn -> Session.new(env: %{"" => "1"}) end
      assert_raise ArgumentError, ~r/:env value/, fn -> Session.new(env: [X: %{}]) end
      assert_raise ArgumentError, ~r/NUL/, fn -> Session.new(env: [X: "a\0b"]) end
      assert_raise ArgumentError, ~r/UTF-8/, fn -> Session.new(env: [X: <<0xFF>>]) end
    end
  end

  describe ":cwd, :username, :hostname" do
    test "defaults: /, sandbox, bashkit-sandbox" do
      assert out(Session.new(), "pwd; whoami; id -un; hostname; uname -n") ==
               "/\nsandbox\nsandbox\nbashkit-sandbox\nbashkit-sandbox\n"
    end

    test "custom values; the cwd is created" do
      s = Session.new(cwd: "/srv/work", username: "agent", hostname: "box")
      assert out(s, "pwd; whoami; hostname; echo $HOME") == "/srv/work\nagent\nbox\n/home/agent\n"
      assert Session.stat(s, "/srv/work") == {:ok, %{type: :dir, size: 0}}
    end

    test "bad values raise" do
      assert_raise ArgumentError, ~r/:cwd must be an absolute path/, fn ->
        Session.new(cwd: "relative")
      end

      assert_raise ArgumentError, ~r/:cwd must be a path string/, fn -> Session.new(cwd: 1) end

      assert_raise ArgumentError, ~r/:username must not be empty/, fn ->
        Session.new(username: "")
      end

      assert_raise ArgumentError, ~r/:hostname must be a string/, fn ->
        Session.new(hostname: :box)
      end
    end
  end

  describe ":files" do
    test "map or list, iodata contents, parents created, relative paths rooted" do
      s = Session.new(files: %{"/a/b/c.txt" => ["io", ?d, "ata"], "rel.txt" => "r"})
      assert Session.read_file(s, "/a/b/c.txt") == {:ok, "iodata"}
      assert Session.read_file(s, "/rel.txt") == {:ok, "r"}
      s = Session.new(files: [{"/x", <<0, 255>>}])
      assert Session.read_file(s, "/x") == {:ok, <<0, 255>>}
    end

    test "bad entries raise" do
      assert_raise ArgumentError, ~r/must be iodata/, fn ->
        Session.new(files: %{"/x" => :nope})
      end

      assert_raise ArgumentError, ~r/:files path/, fn -> Session.new(files: %{1 => "x"}) end

      assert_raise ArgumentError, ~r/cannot write :files entry/, fn ->
        Session.new(files: %{"/f" => "1", "/f/g" => "2"})
      end
    end
  end

  describe ":limits" do
    test "each count limit is enforced" do
      cases = [
        {:max_commands, 3, "echo 1; echo 2; echo 3; echo 4; echo 5", "command count"},
        {:max_loop_iterations, 3, "for i in 1 2 3 4 5; do :; done", "loop iterations"},
        {:max_total_loop_iterations, 5, "for i in 1 2 3; do for j in 1 2 3; do :; done; done",
         "total loop iterations"},
        {:max_function_depth, 3, "f() { f; }; f", "function depth"},
        {:max_input_bytes, 10, "echo this script is longer than ten bytes", "input too large"}
      ]

      for {key, value, script, words} <- cases do
        assert {:error, %{message: message}} =
                 Session.run(Session.new(limits: [{key, value}]), script),
               inspect(key)

        assert message =~ words, "#{key}: #{message}"
      end
    end

    test "timeout_ms bounds wall-clock time" do
      assert {:error, %{message: message}} =
               Session.run(Session.new(limits: %{timeout_ms: 50}), "sleep 5")

      assert message =~ "timeout"
    end

    test "a value past the platform maximum means unlimited" do
      s = Session.new(limits: [max_commands: 2 ** 80])
      assert out(s, "for i in $(seq 1 50); do :; done; echo done") == "done\n"
    end

    test "bad limits raise" do
      assert_raise ArgumentError, ~r/unknown limit :max_bananas/, fn ->
        Session.new(limits: [max_bananas: 1])
      end

      assert_raise ArgumentError, ~r/non-negative integer/, fn ->
        Session.new(limits: [max_commands: -1])
      end

      assert_raise ArgumentError, ~r/non-negative integer/, fn ->
        Session.new(limits: [max_commands: 1.0])
      end

      assert_raise ArgumentError, ~r/timeout_ms must be >= 1/, fn ->
        Session.new(limits: [timeout_ms: 0])
      end

      assert_raise ArgumentError, ~r/:limits must be a map or a keyword list/, fn ->
        Session.new(limits: 5)
      end
    end
  end

  describe "the options list" do
    test "unknown options and non-keyword input raise" do
      assert_raise ArgumentError, ~r/unknown option :colour/, fn -> Session.new(colour: :red) end
      assert_raise ArgumentError, ~r/must be a keyword list/, fn -> Session.new([1, 2]) end
      assert_raise ArgumentError, ~r/must be a keyword list/, fn -> Session.new("opts") end
    end
  end

  describe "filesystem API errors" do
    setup do
      %{s: Session.new(files: %{"/d/f" => "x"})}
    end

    test "each function reports a missing path", %{s: s} do
      assert {:error, "/nope: no such file or directory"} = Session.read_file(s, "/nope")
      assert {:error, _} = Session.list_dir(s, "/nope")
      assert {:error, _} = Session.stat(s, "/nope")
      assert {:error, _} = Session.remove(s, "/nope")
      assert {:error, _} = Session.rename(s, "/nope", "/other")
      assert {:error, _} = Session.mkdir(s, "/no/parent")
    end

    test "directories and files are not confused", %{s: s} do
      assert {:error, _} = Session.read_file(s, "/d")
      assert {:error, _} = Session.list_dir(s, "/d/f")
      assert {:error, _} = Session.write_file(s, "/d", "x")
      assert {:error, _} = Session.mkdir(s, "/d/f")
      assert {:error, _} = Session.remove(s, "/d")
    end

    test "mkdir parents: true succeeds when the directory exists", %{s: s} do
      assert Session.mkdir(s, "/d", parents: true) == :ok
      assert {:error, _} = Session.mkdir(s, "/d")
    end

    test "paths resolve from / whatever the cwd", %{s: s} do
      {:ok, _} = Session.exec(s, "cd /d")
      assert Session.write_file(s, "out.txt", "o") == :ok
      assert Session.read_file(s, "/out.txt") == {:ok, "o"}
      assert Session.list_dir(s, "/d") == {:ok, [{"f", :file}]}
    end

    test "stat reports symlinks as themselves", %{s: s} do
      {:ok, _} = Session.exec(s, "ln -s /d/f /link")
      assert {:ok, %{type: :symlink}} = Session.stat(s, "/link")
      assert {:ok, entries} = Session.list_dir(s, "/")
      assert {"link", :symlink} in entries
    end

    test "bad arguments", %{s: s} do
      assert {:error, _} = Session.read_file(s, <<"/", 0xFF>>)
      assert {:error, _} = Session.read_file(s, "/a\0b")
      assert {:error, _} = Session.read_file(s, "")
      assert_raise ArgumentError, fn -> Session.read_file(s, :path) end
      assert_raise ArgumentError, fn -> Session.write_file(s, "/x", :content) end
      assert_raise ArgumentError, fn -> Session.mkdir(s, "/x", parents: :yes) end
      assert_raise ArgumentError, fn -> Session.remove(s, "/x", force: true) end

      assert_raise ArgumentError, ~r/must be a session/, fn ->
        Session.stat(:not_a_session, "/x")
      end
    end

    test "contents round-trip any bytes", %{s: s} do
      bytes = for i <- 0..255, into: <<>>, do: <<i>>
      assert Session.write_file(s, "/blob", [bytes, bytes]) == :ok
      assert Session.read_file(s, "/blob") == {:ok, bytes <> bytes}
      assert {:ok, %{size: 512}} = Session.stat(s, "/blob")
      assert out(s, "wc -c < /blob") =~ "512"
    end
  end
end
