defmodule ExBashkit.VirtualFsTest do
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.MapFs

  # A backend that reports every request to the test process.
  defp recording(answer_fun) do
    parent = self()

    fn request ->
      send(parent, {:request, request})
      answer_fun.(request)
    end
  end

  describe "operations reach the backend with paths rooted at the mount" do
    test "read, stat, list" do
      backend =
        recording(fn
          %{op: :read, path: path} -> {:ok, "content of #{path}\n"}
          %{op: :stat, path: "/"} -> {:ok, %{type: :dir, size: 0}}
          %{op: :stat} -> {:ok, %{type: :file, size: 3}}
          %{op: :list, path: "/"} -> {:ok, [{"a.txt", :file}, {"sub", :dir}]}
          %{op: :list} -> {:ok, []}
        end)

      s = Session.new(virtual_fs: %{"/api" => backend})
      assert run!(s, "cat /api/users/1.json").stdout == "content of /users/1.json\n"
      assert_received {:request, %{op: :read, path: "/users/1.json"}}
      assert run!(s, "ls /api").stdout == "a.txt\nsub\n"
      assert_received {:request, %{op: :list, path: "/"}}
    end

    test "write, append, mkdir, remove, rename against a stateful backend" do
      agent = MapFs.start()
      s = Session.new(virtual_fs: %{"/store" => {MapFs, agent}})

      run!(s, """
      mkdir /store/dir
      echo one > /store/dir/f
      echo two >> /store/dir/f
      echo gone > /store/tmp && rm /store/tmp
      echo moved > /store/old && mv /store/old /store/new
      """)

      assert MapFs.contents(agent) == %{
               "/" => :dir,
               "/dir" => :dir,
               "/dir/f" => "one\ntwo\n",
               "/new" => "moved\n"
             }

      assert run!(s, "cat /store/dir/f; cat /store/new").stdout == "one\ntwo\nmoved\n"

      assert run!(s, "find /store | sort").stdout ==
               "/store\n/store/dir\n/store/dir/f\n/store/new\n"

      assert run!(s, "grep -r two /store").stdout == "/store/dir/f:two\n"
    end

    test "a module backend receives nil as its argument" do
      defmodule EchoFs do
        @behaviour ExBashkit.VirtualFs
        @impl true
        def handle(%{op: :read, path: p}, arg), do: {:ok, "#{p} #{inspect(arg)}\n"}
        def handle(_, _), do: {:error, :enotsup}
      end

      s = Session.new(virtual_fs: %{"/m" => EchoFs})
      assert run!(s, "cat /m/x").stdout == "/x nil\n"
    end
  end

  describe "composition" do
    test "with the in-memory filesystem and :files" do
      agent = MapFs.start(%{"/remote.txt" => "from backend\n"})

      s =
        Session.new(
          files: %{"/local.txt" => "from memory\n"},
          virtual_fs: %{"/vfs" => {MapFs, agent}}
        )

      assert run!(s, "cat /local.txt /vfs/remote.txt").stdout == "from memory\nfrom backend\n"
      run!(s, "cp /local.txt /vfs/copied.txt; cp /vfs/remote.txt /tmp/back.txt")
      assert MapFs.contents(agent)["/copied.txt"] == "from memory\n"
      assert Session.read_file(s, "/tmp/back.txt") == {:ok, "from backend\n"}
      assert run!(s, "ls /").stdout =~ "vfs\n"
    end

    test "the filesystem API does not reach a backend" do
      s = Session.new(virtual_fs: %{"/api" => recording(fn _ -> {:ok, "x"} end)})
      assert {:error, message} = Session.read_file(s, "/api/x")
      assert message =~ "only while a script runs"
      assert {:error, _} = Session.write_file(s, "/api/x", "data")
      refute_received {:request, _}
    end
  end

  describe "errors" do
    test "errno atoms become the messages scripts expect" do
      s =
        Session.new(
          virtual_fs: %{
            "/e" => fn
              %{op: :read, path: "/missing"} -> {:error, :enoent}
              %{op: :read, path: "/denied"} -> {:error, :eacces}
              %{op: :read} -> {:error, "custom trouble"}
              %{op: :write} -> {:error, :erofs}
              _ -> {:error, :enotsup}
            end
          }
        )

      assert run!(s, "cat /e/missing").stderr =~ "No such file or directory"
      assert run!(s, "cat /e/denied").stderr =~ "Permission denied"
      assert run!(s, "cat /e/other").stderr =~ "custom trouble"
      assert %Result{exit_code: code, stderr: stderr} = run!(s, "echo x > /e/f")
      assert code != 0
      assert stderr =~ "Read-only file system"
    end

    test "a backend that raises, exits or hangs fails only that operation" do
      s =
        Session.new(
          virtual_fs: %{
            "/raise" => fn _ -> raise "backend bug" end,
            "/exit" => fn _ -> exit(:gone) end,
            "/hang" => fn _ -> Process.sleep(:infinity) end
          },
          builtin_timeout_ms: 1_000
        )

      assert run!(s, "cat /raise/x").stderr =~ "backend bug"
      assert run!(s, "cat /exit/x").stderr =~ ":gone"
      assert %Result{exit_code: code} = run!(s, "cat /hang/x")
      assert code != 0
      assert run!(s, "echo fine").stdout == "fine\n"
    end

    test "wrong shapes are reported, not trusted" do
      s =
        Session.new(
          virtual_fs: %{
            "/w" => fn
              %{op: :read} -> {:ok, :not_iodata}
              %{op: :stat, path: "/"} -> {:ok, %{type: :dir}}
              %{op: :stat} -> {:ok, %{type: :banana}}
              %{op: :list} -> :nonsense
              %{op: :write} -> {:ok, "extra is fine"}
            end
          }
        )

      assert run!(s, "cat /w/a").stderr =~ "invalid value for :read"
      assert run!(s, "ls /w").stderr =~ "invalid value for :list"
      assert run!(s, "test -e /w/x; echo $?").stdout == "1\n"
      assert run!(s, "echo hi > /w/f; echo $?").stdout == "0\n"
    end
  end

  describe "hostile backends cannot crash or hang the VM" do
    test "a malformed listing fails the operation; find and grep -r terminate" do
      hostile = [
        {"", :file},
        {".", :dir},
        {"..", :dir},
        {"a/b", :dir},
        {"/", :dir},
        {"nul\0", :file},
        {:atom, :file},
        {~c"charlist", :file},
        {<<0xFF>>, :file},
        {"dup", :file},
        {"dup", :file},
        {"real", :dir},
        {"bad_kind", :weird},
        "not a tuple"
      ]

      backend = fn
        %{op: :list} -> {:ok, hostile}
        %{op: :stat, path: "/"} -> {:ok, %{type: :dir, size: 0}}
        %{op: :stat, path: "/real"} -> {:ok, %{type: :dir, size: 0}}
        %{op: :stat} -> {:ok, %{type: :file, size: 1}}
        %{op: :read} -> {:ok, "x\n"}
      end

      s = Session.new(virtual_fs: %{"/h" => backend}, limits: [timeout_ms: 10_000])
      assert %Result{exit_code: code, stderr: stderr} = run!(s, "ls /h")
      assert code != 0
      assert stderr =~ "malformed"
      assert {_, _} = Session.exec(s, "find /h | head -50")
      assert {_, _} = Session.exec(s, "grep -r x /h | head -5")
      assert run!(s, "echo alive").stdout == "alive\n"
    end

    test "a listing of a million entries is refused" do
      huge = for i <- 1..1_000_000, do: {"f#{i}", :file}

      s =
        Session.new(
          virtual_fs: %{
            "/big" => fn
              %{op: :list} -> {:ok, huge}
              %{op: :stat} -> {:ok, %{type: :dir, size: 0}}
            end
          }
        )

      assert %Result{exit_code: code, stderr: stderr} = run!(s, "ls /big")
      assert code != 0
      assert stderr =~ "listing too large"
    end

    test "a 100 MB file is refused, not copied" do
      big = :binary.copy("x", 100_000_000)
      s = Session.new(virtual_fs: %{"/big" => fn %{op: :read} -> {:ok, big} end})
      assert %Result{exit_code: code, stderr: stderr} = run!(s, "cat /big/file")
      assert code != 0
      assert stderr =~ ":max_reply_bytes"
    end
  end

  describe "options" do
    test "mount paths and backends are validated" do
      assert_raise ArgumentError, ~r/absolute path/, fn ->
        Session.new(virtual_fs: %{"rel" => fn _ -> :ok end})
      end

      assert_raise ArgumentError, ~r/cannot mount a backend at \//, fn ->
        Session.new(virtual_fs: %{"/" => fn _ -> :ok end})
      end

      assert_raise ArgumentError, ~r/does not implement ExBashkit.VirtualFs/, fn ->
        Session.new(virtual_fs: %{"/x" => String})
      end

      assert_raise ArgumentError, ~r/must be a 1-arity function/, fn ->
        Session.new(virtual_fs: %{"/x" => 42})
      end
    end
  end
end
