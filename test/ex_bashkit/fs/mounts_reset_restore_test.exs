defmodule ExBashkit.Fs.MountsResetRestoreTest do
  # `reset/1` and `restore/3` against host mounts (issue 22, items 10 and
  # 17): host files are not session state, so neither writes through a
  # mount; files a snapshot holds under a mount point are dropped.
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.HostDir

  test "reset/1 does not rewrite :files that live under a read_write mount" do
    dir = HostDir.create!()

    s =
      Session.new(
        mounts: [{"/rw", dir, :read_write}],
        files: %{"/rw/config.txt" => "seeded", "/tmp/mem.txt" => "seeded"},
        cwd: "/rw/work"
      )

    host_file = Path.join(dir, "config.txt")
    assert File.read!(host_file) == "seeded"

    # Edited later, by a script and by the host.
    assert %Result{exit_code: 0} =
             run!(s, "echo script-edit > /rw/config.txt; echo x > /tmp/mem.txt")

    File.write!(host_file, "host-edit")
    File.rm_rf!(Path.join(dir, "work"))

    assert :ok = Session.reset(s)

    # The host file keeps its edit and the deleted cwd is not re-created on
    # the host; the in-memory file is seeded again.
    assert File.read!(host_file) == "host-edit"
    refute File.exists?(Path.join(dir, "work"))
    assert {:ok, "seeded"} = Session.read_file(s, "/tmp/mem.txt")
    assert {:ok, "host-edit"} = Session.read_file(s, "/rw/config.txt")
  end

  test "a snapshot's files under this session's mount points are dropped on restore" do
    dir = HostDir.create!(%{"host.txt" => "host"})
    backend = fn _ -> {:error, :enoent} end

    # A session without mounts writes where the target has them.
    source = Session.new()

    assert %Result{exit_code: 0} =
             run!(source, """
             mkdir -p /rw/deep /api
             for i in $(seq 1 40); do head -c 8000 /dev/urandom; done > /rw/deep/hidden.bin
             echo a > /rw/hidden.txt; echo b > /api/hidden.txt; echo c > /tmp/kept.txt
             """)

    {:ok, bytes} = Session.snapshot(source)

    target = Session.new(mounts: [{"/rw", dir, :read_write}], virtual_fs: %{"/api" => backend})
    {:ok, target} = Session.restore(target, bytes)

    # Outside the mounts the snapshot is restored; under them the host (and
    # the backend) is what the session sees, untouched.
    assert {:ok, "c\n"} = Session.read_file(target, "/tmp/kept.txt")
    assert %Result{stdout: "host.txt\n"} = run!(target, "ls /rw")
    assert File.ls!(dir) == ["host.txt"]

    # The dropped files are gone from the session, not merely hidden: a
    # later snapshot, restored where nothing is mounted, does not have them.
    {:ok, again} = Session.snapshot(target)
    {:ok, plain} = Session.restore(Session.new(), again)
    assert {:ok, "c\n"} = Session.read_file(plain, "/tmp/kept.txt")

    for path <- ["/rw/hidden.txt", "/rw/deep/hidden.bin", "/api/hidden.txt"] do
      assert {:error, _} = Session.read_file(plain, path), path
    end

    # ...and they no longer count: the second snapshot is much smaller.
    assert byte_size(again) < byte_size(bytes) - 200_000
  end
end
