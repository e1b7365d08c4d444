defmodule ExBashkit.Session.MountsTest do
  # Session.mount/4 and unmount/2 against real host directories: the same
  # gate as the :mounts option, shell state untouched, and what reset,
  # snapshot and restore do with mounts made at runtime.
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.Session
  alias ExBashkit.Test.{HostDir, MapFs}

  test "a read-only mount reads host files and refuses writes" do
    host = HostDir.create!(%{"a.txt" => "hello\n"})
    s = Session.new()
    assert Session.mount(s, "/data", host) == :ok
    assert run!(s, "cat /data/a.txt").stdout == "hello\n"
    assert Session.read_file(s, "/data/a.txt") == {:ok, "hello\n"}

    result = run!(s, "echo x > /data/b.txt")
    assert result.exit_code != 0
    refute File.exists?(Path.join(host, "b.txt"))
    assert {:error, _} = Session.write_file(s, "/data/b.txt", "x")
  end

  test "a read-write mount writes through to the host" do
    host = HostDir.create!()
    s = Session.new()
    assert Session.mount(s, "/out", host, :read_write) == :ok
    assert run!(s, "echo made > /out/made.txt").exit_code == 0
    assert File.read!(Path.join(host, "made.txt")) == "made\n"
  end

  test "shell state is untouched by mount and unmount" do
    host = HostDir.create!(%{"f" => "1"})
    s = Session.new()
    run!(s, "export KEEP=yes; v=1; f() { echo fn; }; alias a='echo al'; cd /tmp")
    before = Session.state!(s)
    :ok = Session.mount(s, "/m", host)
    :ok = Session.unmount(s, "/m")
    assert Session.state!(s) == before
    assert run!(s, "echo $KEEP$v; f; a; pwd").stdout == "yes1\nfn\nal\n/tmp\n"
  end

  test "the same checks as :mounts at new/1" do
    host = HostDir.create!(%{"file.txt" => "x", "inside/ok.txt" => "ok"})
    s = Session.new()

    # Missing, not a directory, sensitive (also through a symlink).
    assert {:error, msg} = Session.mount(s, "/m", Path.join(host, "missing"))
    assert msg =~ "does not exist"
    assert {:error, msg} = Session.mount(s, "/m", Path.join(host, "file.txt"))
    assert msg =~ "not a directory"
    assert {:error, msg} = Session.mount(s, "/m", "/etc")
    assert msg =~ "sensitive"
    File.ln_s!("/etc", Path.join(host, "to_etc"))
    assert {:error, msg} = Session.mount(s, "/m", Path.join(host, "to_etc"))
    assert msg =~ "resolves to /etc"

    # Malformed arguments raise, like a malformed :mounts entry.
    assert_raise ArgumentError, fn -> Session.mount(s, "/", host) end
    assert_raise ArgumentError, fn -> Session.mount(s, "relative", host) end
    assert_raise ArgumentError, fn -> Session.mount(s, "/m", host, :rw) end

    # Nothing was attached by the refused attempts.
    assert {:error, _} = Session.unmount(s, "/m")
    assert Session.mount(s, "/m", Path.join(host, "inside")) == :ok
    assert run!(s, "cat /m/ok.txt").stdout == "ok"
  end

  test ":allowed_mount_paths governs runtime mounts too" do
    allowed = HostDir.create!(%{"x" => "1"})
    other = HostDir.create!(%{"y" => "2"})
    s = Session.new(allowed_mount_paths: [allowed])
    assert Session.mount(s, "/a", allowed) == :ok
    assert {:error, msg} = Session.mount(s, "/b", other)
    assert msg =~ ":allowed_mount_paths"
  end

  test "one path takes one mount: host mounts and virtual_fs paths are refused" do
    a = HostDir.create!(%{"a" => "a"})
    b = HostDir.create!(%{"b" => "b"})
    agent = MapFs.start()
    s = Session.new(mounts: [{"/boot", a, :read_only}], virtual_fs: %{"/api" => {MapFs, agent}})

    assert {:error, msg} = Session.mount(s, "/boot", b)
    assert msg =~ "already mounted"
    assert {:error, msg} = Session.mount(s, "/api", b)
    assert msg =~ ":virtual_fs"
    assert {:error, msg} = Session.unmount(s, "/api")
    assert msg =~ ":virtual_fs"
    # The first mount is still the one in place.
    assert run!(s, "cat /boot/a").stdout == "a"
  end

  test "unmount removes new/1 and runtime mounts; paths fall back to memory" do
    a = HostDir.create!(%{"a" => "host"})
    b = HostDir.create!(%{"b" => "host"})
    s = Session.new(mounts: [{"/a", a, :read_only}])
    :ok = Session.mount(s, "/b", b)
    assert :ok = Session.unmount(s, "/a")
    assert :ok = Session.unmount(s, "/b")
    assert run!(s, "cat /a/a /b/b").exit_code != 0
    assert {:error, _} = Session.unmount(s, "/a")
    # The path is free again.
    assert Session.mount(s, "/a", b) == :ok
    assert run!(s, "cat /a/b").stdout == "host"
  end

  test "reset/1 drops runtime mounts and brings back new/1's" do
    a = HostDir.create!(%{"a" => "A"})
    b = HostDir.create!(%{"b" => "B"})
    s = Session.new(mounts: [{"/a", a, :read_only}])
    :ok = Session.unmount(s, "/a")
    :ok = Session.mount(s, "/b", b)
    :ok = Session.reset(s)
    assert run!(s, "cat /a/a").stdout == "A"
    assert run!(s, "cat /b/b").exit_code != 0
    assert {:error, _} = Session.unmount(s, "/b")
  end

  test "restore keeps the target's runtime mounts; a snapshot carries none" do
    host = HostDir.create!(%{"f" => "F"})
    source = Session.new()
    :ok = Session.mount(source, "/m", host)
    run!(source, "x=1")
    {:ok, bytes} = Session.snapshot(source)

    # Restored elsewhere: the mount did not travel.
    fresh = Session.new()
    {:ok, fresh} = Session.restore(fresh, bytes)
    assert run!(fresh, "echo $x; cat /m/f").stdout == "1\n"

    # Restored into the source: its runtime mount stays.
    {:ok, source} = Session.restore(source, bytes)
    assert run!(source, "cat /m/f").stdout == "F"
  end

  test "a mount from inside the session's own builtin is refused, not a deadlock" do
    host = HostDir.create!()
    test_pid = self()
    # The builtin learns its own session through an Agent (it cannot close
    # over a session that does not exist yet).
    {:ok, holder} = Agent.start_link(fn -> nil end)

    s =
      Session.new(
        builtins: %{
          "self_mount" => fn _ ->
            own = Agent.get(holder, & &1)
            send(test_pid, {:inner, Session.mount(own, "/x", host)})
            {:ok, ""}
          end
        }
      )

    Agent.update(holder, fn _ -> s end)
    assert {:ok, _} = Session.exec(s, "self_mount")
    assert_receive {:inner, {:error, message}}, 5_000
    assert message =~ "re-entrant"
  end
end
