defmodule ExBashkit.VirtualFs.ContractTest do
  # The per-operation `ExBashkit.VirtualFs` contract (issue 19): callbacks
  # taking the mount's arg and a path rooted at the mount, `use` defaults, a
  # `stat/2` derived from `read/2`, `{Module, arg}` and bare `Module`.
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.MapFs

  doctest ExBashkit.VirtualFs

  defmodule ReadOnlyFs do
    # Only `read/2`: everything else comes from `use`.
    use ExBashkit.VirtualFs

    @impl true
    def read(arg, "/hello"), do: {:ok, ["hello from ", inspect(arg), "\n"]}
    def read(_arg, "/empty"), do: {:ok, ""}
    def read(_arg, _path), do: {:error, :enoent}
  end

  defmodule OpsFs do
    # Every callback, over the `MapFs` agent; each call is reported to the
    # test process so the test sees which callback an operation reached.
    use ExBashkit.VirtualFs

    @impl true
    def read({agent, pid}, path), do: op(agent, pid, :read, %{path: path})
    @impl true
    def write({agent, pid}, path, data), do: op(agent, pid, :write, %{path: path, content: data})
    @impl true
    def append({agent, pid}, path, data),
      do: op(agent, pid, :append, %{path: path, content: data})

    @impl true
    def mkdir({agent, pid}, path, recursive),
      do: op(agent, pid, :mkdir, %{path: path, parents: recursive})

    @impl true
    def remove({agent, pid}, path, recursive),
      do: op(agent, pid, :remove, %{path: path, recursive: recursive})

    @impl true
    def rename({agent, pid}, from, to), do: op(agent, pid, :rename, %{path: from, to: to})
    @impl true
    def list({agent, pid}, path), do: op(agent, pid, :list, %{path: path})
    @impl true
    def stat({agent, pid}, path), do: op(agent, pid, :stat, %{path: path})

    defp op(agent, pid, op, request) do
      send(pid, {:callback, op, request})
      MapFs.handle(Map.put(request, :op, op), agent)
    end
  end

  defmodule NilArgFs do
    use ExBashkit.VirtualFs

    @impl true
    def read(arg, path), do: {:ok, "#{path} #{inspect(arg)}\n"}
  end

  defmodule BareNamesFs do
    use ExBashkit.VirtualFs

    @impl true
    def list(_arg, "/"), do: {:ok, ["plain", {"dir", :dir}]}
    def list(_arg, _path), do: {:ok, []}

    @impl true
    def stat(_arg, "/dir"), do: {:ok, %{type: :dir, size: 0}}
    def stat(_arg, "/"), do: {:ok, %{type: :dir, size: 0}}
    def stat(_arg, _path), do: {:ok, %{type: :file, size: 0}}
  end

  describe "use ExBashkit.VirtualFs" do
    test "a backend with only read/2 serves cat, test -f and stat; the rest is enotsup" do
      s = Session.new(virtual_fs: %{"/ro" => {ReadOnlyFs, :the_arg}})

      assert run!(s, "cat /ro/hello").stdout == "hello from :the_arg\n"
      assert run!(s, "test -f /ro/hello && echo file").stdout == "file\n"
      assert run!(s, "test -f /ro/missing || echo none").stdout == "none\n"
      assert run!(s, "test -d /ro && echo dir").stdout == "dir\n"
      assert run!(s, "stat -c %s /ro/hello").stdout == "20\n"

      assert %Result{exit_code: code, stderr: stderr} = run!(s, "echo x > /ro/new")
      assert code != 0
      assert stderr =~ "Operation not supported"

      assert %Result{exit_code: code, stderr: stderr} = run!(s, "ls /ro")
      assert code != 0
      assert stderr =~ "Operation not supported"

      assert run!(s, "echo alive").stdout == "alive\n"
    end

    test "the derived stat/2 reports read/2's size and errors, the mount point as a directory" do
      assert ReadOnlyFs.stat(:a, "/hello") == {:ok, %{type: :file, size: 14}}
      assert ReadOnlyFs.stat(:a, "/empty") == {:ok, %{type: :file, size: 0}}
      assert ReadOnlyFs.stat(:a, "/nope") == {:error, :enoent}
      assert ReadOnlyFs.stat(:a, "/") == {:ok, %{type: :dir, size: 0}}
      assert ReadOnlyFs.write(:a, "/x", "data") == {:error, :enotsup}
      assert ReadOnlyFs.list(:a, "/") == {:error, :enotsup}
    end
  end

  describe "each shell operation reaches its callback with the mount's arg" do
    setup do
      agent = MapFs.start()
      %{agent: agent, s: Session.new(virtual_fs: %{"/store" => {OpsFs, {agent, self()}}})}
    end

    test "write, append, read", %{s: s, agent: agent} do
      run!(s, "echo one > /store/f; echo two >> /store/f")
      assert_received {:callback, :write, %{path: "/f", content: "one\n"}}
      assert_received {:callback, :append, %{path: "/f", content: "two\n"}}
      assert run!(s, "cat /store/f").stdout == "one\ntwo\n"
      assert_received {:callback, :read, %{path: "/f"}}
      assert MapFs.contents(agent)["/f"] == "one\ntwo\n"
    end

    test "mkdir (with -p), list, stat", %{s: s} do
      run!(s, "mkdir /store/c")
      assert_received {:callback, :mkdir, %{path: "/c", parents: false}}
      run!(s, "mkdir -p /store/c/d")
      assert_received {:callback, :mkdir, %{path: "/c/d", parents: true}}

      assert run!(s, "ls /store").stdout == "c\n"
      assert_received {:callback, :list, %{path: "/"}}
      assert run!(s, "ls /store/c").stdout == "d\n"
      assert run!(s, "test -d /store/c && echo dir").stdout == "dir\n"
      assert_received {:callback, :stat, %{path: "/c"}}
    end

    test "remove (with -r) and rename", %{s: s, agent: agent} do
      run!(s, "mkdir /store/d; echo x > /store/d/f; echo y > /store/old")
      run!(s, "mv /store/old /store/new")
      assert_received {:callback, :rename, %{path: "/old", to: "/new"}}
      run!(s, "rm -r /store/d")
      assert_received {:callback, :remove, %{path: "/d", recursive: true}}
      run!(s, "rm /store/new")
      assert_received {:callback, :remove, %{path: "/new", recursive: false}}
      assert MapFs.contents(agent) == %{"/" => :dir}
    end
  end

  describe "backend forms" do
    test "a bare module receives nil as its arg" do
      s = Session.new(virtual_fs: %{"/m" => NilArgFs})
      assert run!(s, "cat /m/x").stdout == "/x nil\n"
    end

    test "{module, arg} receives arg" do
      s = Session.new(virtual_fs: %{"/m" => {NilArgFs, %{tenant: 7}}})
      assert run!(s, "cat /m/y").stdout == "/y %{tenant: 7}\n"
    end

    test "the 1-arity function form and a handle/2 module still work" do
      defmodule LegacyFs do
        @behaviour ExBashkit.VirtualFs
        @impl true
        def handle(%{op: :read, path: p}, arg), do: {:ok, "legacy #{p} #{inspect(arg)}\n"}
        def handle(_, _), do: {:error, :enotsup}
      end

      s =
        Session.new(
          virtual_fs: %{
            "/fun" => fn %{op: :read, path: p} -> {:ok, "fun #{p}\n"} end,
            "/legacy" => {LegacyFs, 1}
          }
        )

      assert run!(s, "cat /fun/a /legacy/b").stdout == "fun /a\nlegacy /b 1\n"
    end

    test "a bare name in a listing is a file" do
      s = Session.new(virtual_fs: %{"/b" => BareNamesFs})
      assert run!(s, "ls /b").stdout == "dir\nplain\n"
      assert run!(s, "find /b -type f").stdout == "/b/plain\n"
    end

    test "a module with no callback at all is refused at new/1" do
      assert_raise ArgumentError, ~r/does not implement ExBashkit.VirtualFs/, fn ->
        Session.new(virtual_fs: %{"/x" => Enum})
      end
    end
  end
end
