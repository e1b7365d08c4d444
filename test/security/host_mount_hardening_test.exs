defmodule ExBashkit.Security.HostMountHardeningTest do
  # Escapes and wrong behaviour of host mounts found by a probe (issue 22,
  # items 1-5, 12 and 15), against real host directories. Each test failed
  # on the build before `fs/host.rs` / `commands/strict.rs`.
  use ExBashkit.Test.Case, async: true

  import Bitwise

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.HostDir

  @secret "TOP SECRET\n"

  defp special_bits(path), do: File.lstat!(path).mode &&& 0o7000

  defp layout do
    x =
      HostDir.create!(%{
        "data/a.txt" => "hello\n",
        "data/sub/b.txt" => "bee\n",
        "ro/sub/keep.txt" => "keep\n",
        "secrets/s.txt" => @secret
      })

    %{
      x: x,
      data: Path.join(x, "data"),
      ro: Path.join(x, "ro"),
      secrets: Path.join(x, "secrets")
    }
  end

  describe "item 1: no setuid, setgid or sticky bit reaches the host" do
    test "chmod, writes, copies and archive extraction into a read_write mount are masked" do
      host = layout()
      # A host-made setuid file, readable through a second (read-only) mount.
      suid_src = Path.join(host.ro, "suid_src")
      File.write!(suid_src, "\x7fELF")
      File.chmod!(suid_src, 0o4755)

      s = Session.new(mounts: [{"/rw", host.data, :read_write}, {"/ro", host.ro, :read_only}])

      script = """
      printf '\\x7fELF' > /rw/suid; chmod 4755 /rw/suid
      mkdir /rw/sg; chmod 2777 /rw/sg
      mkdir /rw/sticky; chmod 1777 /rw/sticky
      chmod 6755 /rw/a.txt
      cp /ro/suid_src /rw/copied
      mkdir -p /tmp/t/pkg && printf 'x' > /tmp/t/pkg/tool && chmod 4755 /tmp/t/pkg/tool
      tar -cf /tmp/t.tar -C /tmp/t pkg && tar -xf /tmp/t.tar -C /rw
      mv /tmp/t/pkg/tool /rw/moved
      stat -c '%a' /rw/suid /rw/sg
      """

      assert %Result{exit_code: 0, stdout: "755\n777\n"} = run!(s, script)

      for name <- ["suid", "sg", "sticky", "a.txt", "copied", "pkg/tool", "moved"] do
        path = Path.join(host.data, name)
        assert File.exists?(path), name
        assert special_bits(path) == 0, "#{name}: #{Integer.to_string(File.lstat!(path).mode, 8)}"
      end

      # The permission bits themselves are applied.
      assert (File.lstat!(Path.join(host.data, "suid")).mode &&& 0o777) == 0o755
      assert (File.lstat!(Path.join(host.data, "sticky")).mode &&& 0o777) == 0o777
    end

    test "rewriting a host file that has special bits drops them" do
      host = layout()
      target = Path.join(host.data, "a.txt")
      File.chmod!(target, 0o4755)
      s = Session.new(mounts: [{"/rw", host.data, :read_write}])

      assert %Result{exit_code: 0} = run!(s, "echo new > /rw/a.txt; echo more >> /rw/a.txt")
      assert File.read!(target) == "new\nmore\n"
      assert special_bits(target) == 0
      assert (File.lstat!(target).mode &&& 0o777) == 0o755
    end
  end

  describe "item 2: the mount root stays" do
    test "rm -rf empties it but cannot remove it; rmdir, mv and the API cannot either" do
      host = layout()
      s = Session.new(mounts: [{"/rw", host.data, :read_write}])

      r = run!(s, "rm -rf /rw; echo rc=$?")
      assert r.stdout == "rc=1\n"
      assert r.stderr =~ "Device or resource busy"
      assert File.dir?(host.data)
      assert File.ls!(host.data) == []

      r = run!(s, "rmdir /rw; echo rc=$?; mv /rw /elsewhere; echo rc=$?")
      assert r.stdout == "rc=1\nrc=1\n"
      assert File.dir?(host.data)

      File.write!(Path.join(host.data, "f"), "x")

      assert {:error, message} = Session.remove(s, "/rw", recursive: true)
      assert message =~ "busy"
      assert {:error, _} = Session.remove(s, "/rw")
      assert {:error, _} = Session.rename(s, "/rw", "/moved")
      assert File.dir?(host.data)
      # The host's sibling entries were never touched.
      assert File.read!(Path.join(host.secrets, "s.txt")) == @secret
      # ...and the mount still works.
      assert %Result{stdout: "ok\n"} = run!(s, "echo ok > /rw/g && cat /rw/g")
    end
  end

  describe "item 3: a host process swapping entries for symlinks cannot redirect access" do
    @tag timeout: 120_000
    test "reads and writes racing a dir <-> symlink swap never leave the mount" do
      host = layout()
      dir = Path.join(host.data, "dir")
      real = Path.join(host.data, "dir_real")
      File.mkdir_p!(dir)
      File.write!(Path.join(dir, "f"), "inside\n")
      outside = host.secrets
      File.write!(Path.join(outside, "f"), @secret)
      before_outside = HostDir.snapshot(outside)

      s = Session.new(mounts: [{"/m", host.data, :read_write}], limits: [timeout_ms: 100_000])

      # The swapper flips `dir` between the real directory and a symlink to
      # `secrets` (relative and absolute in turn) as fast as it can, until
      # told to stop.
      parent = self()

      swapper =
        spawn_link(fn ->
          swap_loop(dir, real, [outside, "../secrets"], 0)
          send(parent, :swapper_done)
        end)

      script = """
      for i in $(seq 1 1500); do
        cat /m/dir/f 2>/dev/null
        echo pwned > /m/dir/new_$i 2>/dev/null
        cat /m/dir/../dir/f 2>/dev/null
      done
      echo finished
      """

      result = run!(s, script)
      send(swapper, :stop)
      assert_receive :swapper_done, 10_000

      assert result.stdout =~ "finished"
      refute result.stdout =~ "SECRET"
      assert HostDir.snapshot(outside) == before_outside
    end
  end

  defp swap_loop(dir, real, [target | rest], n) do
    receive do
      :stop -> :ok
    after
      0 ->
        # dir (a real directory) -> aside; a symlink in its place; back. A
        # step may fail when the script recreated `dir` meanwhile: the
        # swapper then just puts things back and goes on.
        _ = File.rename(dir, real)
        _ = File.ln_s(target, dir)

        case File.lstat(dir) do
          {:ok, %{type: :symlink}} -> File.rm(dir)
          {:ok, %{type: :directory}} -> File.rm_rf(dir)
          _ -> :ok
        end

        _ = File.rename(real, dir)
        swap_loop(dir, real, rest ++ [target], n + 1)
    end
  end

  describe "item 4: symlink targets never show host paths" do
    test "readlink, ls -l and find -printf %l show sandbox paths or nothing" do
      host = layout()
      File.ln_s!(Path.join(host.data, "sub/b.txt"), Path.join(host.data, "abs_in"))
      File.ln_s!(Path.join(host.secrets, "s.txt"), Path.join(host.data, "abs_out"))
      File.ln_s!("sub/b.txt", Path.join(host.data, "rel_in"))
      s = Session.new(mounts: [{"/m", host.data, :read_only}])

      r = run!(s, "readlink /m/abs_in; readlink /m/rel_in; readlink /m/abs_out; echo rc=$?")
      assert r.stdout == "/m/sub/b.txt\nsub/b.txt\nrc=1\n"

      for script <- [
            "ls -l /m",
            "ls -la /m/",
            "find /m -printf '%p %l\\n'",
            "readlink -f /m/abs_out",
            "stat /m/abs_out",
            "cat /m/abs_out"
          ] do
        r = run!(s, script)
        refute r.stdout =~ host.x, "#{script}: #{inspect(r)}"
        refute r.stderr =~ host.x, "#{script}: #{inspect(r)}"
        refute r.stdout =~ "SECRET"
      end

      # A link inside the mount still works, as a sandbox path.
      assert %Result{stdout: "bee\n"} = run!(s, "cat /m/abs_in")
      assert {:ok, %{type: :symlink}} = Session.stat(s, "/m/abs_out")
      assert {:error, message} = Session.read_file(s, "/m/abs_out")
      refute message =~ host.x
    end
  end

  describe "item 5: huge host files are refused before reading" do
    test "a 3 GB (sparse) file: scripts and the API get a clear error, not 3 GB of memory" do
      host = layout()
      big = Path.join(host.data, "big.bin")
      {:ok, fd} = :file.open(big, [:write, :raw])
      {:ok, _} = :file.position(fd, 3 * 1024 * 1024 * 1024)
      :ok = :file.write(fd, "!")
      :ok = :file.close(fd)

      s = Session.new(mounts: [{"/m", host.data, :read_only}], limits: [timeout_ms: 60_000])

      for script <- ["head -c 10 /m/big.bin", "cat /m/big.bin | wc -c", "cp /m/big.bin /tmp/x"] do
        r = run!(s, script)
        assert r.stderr =~ "file too large to read", "#{script}: #{inspect(r)}"
        assert r.stderr =~ "file size limit"
      end

      assert {:error, message} = Session.read_file(s, "/m/big.bin")
      assert message =~ "file too large to read"

      # Below the limit, reading works as before.
      File.write!(Path.join(host.data, "small.bin"), :binary.copy("a", 1_000_000))
      assert %Result{stdout: "1000000\n"} = run!(s, "wc -c < /m/small.bin")
    end
  end

  describe "item 12: a write failure is the command's, not the whole exec's" do
    test "tee into a read-only mount or a missing directory fails only tee" do
      host = layout()
      s = Session.new(mounts: [{"/ro", host.ro, :read_only}])

      script = """
      echo before
      echo data | tee /ro/t.txt /tmp/ok.txt
      echo "tee=$?"
      echo more | tee -a /nowhere/t.txt
      echo "tee=$?"
      cat /tmp/ok.txt
      """

      r = run!(s, script)
      assert r.stdout == "before\ndata\ntee=1\nmore\ntee=1\ndata\n"
      assert r.stderr =~ "tee: /ro/t.txt: realfs is mounted readonly"
      assert r.stderr =~ "tee: /nowhere/t.txt:"
      refute File.exists?(Path.join(host.ro, "t.txt"))
    end
  end

  describe "item 15: rm on a read-only mount fails loudly" do
    test "rm -rf /ro/sub exits non-zero with a message and deletes nothing" do
      host = layout()
      s = Session.new(mounts: [{"/ro", host.ro, :read_only}])
      before = HostDir.snapshot(host.ro)

      for script <- ["rm -rf /ro/sub", "rm -f /ro/sub/keep.txt", "rm -r /ro/sub"] do
        r = run!(s, script)
        assert r.exit_code == 1, "#{script}: #{inspect(r)}"
        assert r.stderr =~ "rm: cannot remove '/ro/sub", script
        assert r.stderr =~ "mounted readonly", script
      end

      assert HostDir.snapshot(host.ro) == before

      # -f still forgives what does not exist.
      assert %Result{exit_code: 0, stderr: ""} = run!(s, "rm -f /ro/missing /tmp/missing")
      assert %Result{exit_code: 1} = run!(s, "rm /tmp/missing")
    end
  end
end
