defmodule ExBashkit.Fs.MountsTest do
  # Host directory mounts against real host directories, real files and real
  # symlinks. Isolation inside a mount is bashkit's (`RealFs`); these tests
  # prove it, and prove that a refused mount raises instead of being skipped.
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.Session
  alias ExBashkit.Test.HostDir

  @secret "TOP SECRET\n"

  # A host layout with a mountable directory `data`, a sibling `data2` whose
  # name extends it, and `secrets` next to both.
  defp layout do
    x =
      HostDir.create!(%{
        "data/a.txt" => "hello\n",
        "data/sub/b.txt" => "bee\n",
        "data2/f.txt" => "sibling\n",
        "secrets/s.txt" => @secret
      })

    %{x: x, data: Path.join(x, "data"), secrets: Path.join(x, "secrets")}
  end

  # Everything on the host outside the mounted directory `data`.
  defp outside(x),
    do: x |> HostDir.snapshot() |> Map.reject(fn {k, _} -> k =~ ~r{^data(/|$)} end)

  defp refute_leak(%{stdout: out, stderr: err}) do
    refute out =~ "SECRET"
    refute out =~ "sibling"
    refute err =~ "SECRET"
  end

  describe ":read_only" do
    setup do
      host = layout()
      session = Session.new(mounts: [{"/data", host.data, :read_only}])
      Map.put(host, :session, session)
    end

    test "scripts read host files and directories", %{session: session} do
      assert %{stdout: "hello\nbee\n", exit_code: 0} =
               run!(session, "cat /data/a.txt; cat /data/sub/b.txt")

      assert %{stdout: "a.txt\nsub\n"} = run!(session, "ls /data")
      assert %{stdout: "/data/sub\n"} = run!(session, "cd /data/sub && pwd")
    end

    test "host changes made after mounting are visible", %{session: session, data: data} do
      File.write!(Path.join(data, "later.txt"), "fresh\n")
      assert %{stdout: "fresh\n"} = run!(session, "cat /data/later.txt")
    end

    test "every kind of write fails with a clear message and the host is untouched",
         %{session: session, data: data} do
      before = HostDir.snapshot(data)

      for script <- [
            "echo x > /data/new.txt",
            "echo x >> /data/a.txt",
            "echo x > /data/a.txt",
            "rm /data/a.txt",
            "rm -r /data/sub",
            "mkdir /data/d",
            "touch /data/t",
            "touch /data/a.txt",
            "cp /data/a.txt /data/copy.txt",
            "mv /data/a.txt /data/moved.txt",
            "mv /data/a.txt /moved.txt",
            "ln -s a.txt /data/link",
            "chmod 777 /data/a.txt",
            "sed -i s/hello/bye/ /data/a.txt"
          ] do
        result = run!(session, script)
        assert result.exit_code != 0, "#{script} succeeded: #{inspect(result)}"
        assert result.stderr =~ "mounted readonly", "#{script}: #{inspect(result.stderr)}"
      end

      assert HostDir.snapshot(data) == before
    end

    test "the filesystem API reads through the mount and refuses writes",
         %{session: session, data: data} do
      assert {:ok, "hello\n"} = Session.read_file(session, "/data/a.txt")
      assert {:ok, %{type: :file, size: 6}} = Session.stat(session, "/data/a.txt")
      assert {:ok, %{type: :dir}} = Session.stat(session, "/data/sub")
      assert {:ok, [{"a.txt", :file}, {"sub", :dir}]} = Session.list_dir(session, "/data")
      assert {:ok, entries} = Session.list_dir(session, "/")
      assert {"data", :dir} in entries

      before = HostDir.snapshot(data)

      assert {:error, "/data/x.txt: read-only file system"} =
               Session.write_file(session, "/data/x.txt", "y")

      assert {:error, "/data/a.txt: read-only file system"} =
               Session.write_file(session, "/data/a.txt", "y")

      assert {:error, "/data/n: read-only file system"} = Session.mkdir(session, "/data/n")

      assert {:error, "/data/a.txt: read-only file system"} =
               Session.remove(session, "/data/a.txt")

      assert {:error, "/data/sub: read-only file system"} =
               Session.remove(session, "/data/sub", recursive: true)

      assert {:error, "/data/a.txt -> /data/b.txt: read-only file system"} =
               Session.rename(session, "/data/a.txt", "/data/b.txt")

      assert HostDir.snapshot(data) == before
    end

    test "the in-memory filesystem outside the mount stays writable", %{session: session} do
      assert %{exit_code: 0, stdout: "hello\n"} =
               run!(session, "cp /data/a.txt /tmp/a.txt && cat /tmp/a.txt")
    end
  end

  describe ":read_write" do
    setup do
      host = layout()
      session = Session.new(mounts: [{"/work", host.data, :read_write}])
      Map.put(host, :session, session)
    end

    test "scripts' writes reach the real disk", %{session: session, data: data} do
      script = """
      echo one > /work/new.txt
      echo two >> /work/new.txt
      mkdir -p /work/d/e && echo deep > /work/d/e/f.txt
      mv /work/a.txt /work/renamed.txt
      cp /work/sub/b.txt /work/copy.txt
      rm -r /work/sub
      """

      assert %{exit_code: 0, stderr: ""} = run!(session, script)

      assert File.read!(Path.join(data, "new.txt")) == "one\ntwo\n"
      assert File.read!(Path.join(data, "d/e/f.txt")) == "deep\n"
      assert File.read!(Path.join(data, "renamed.txt")) == "hello\n"
      assert File.read!(Path.join(data, "copy.txt")) == "bee\n"
      refute File.exists?(Path.join(data, "a.txt"))
      refute File.exists?(Path.join(data, "sub"))
    end

    test "the filesystem API writes to the real disk too", %{session: session, data: data} do
      assert :ok = Session.write_file(session, "/work/api/out.bin", <<0, 255, 1>>)
      assert File.read!(Path.join(data, "api/out.bin")) == <<0, 255, 1>>
      assert :ok = Session.mkdir(session, "/work/m/n", parents: true)
      assert File.dir?(Path.join(data, "m/n"))
      assert :ok = Session.rename(session, "/work/a.txt", "/work/z.txt")
      assert File.read!(Path.join(data, "z.txt")) == "hello\n"
      assert :ok = Session.remove(session, "/work/z.txt")
      refute File.exists?(Path.join(data, "z.txt"))
    end

    test "relative symlinks that stay inside are allowed", %{session: session, data: data} do
      assert %{exit_code: 0, stdout: "bee\n"} =
               run!(session, "ln -s sub/b.txt /work/l && cat /work/l")

      assert File.read_link!(Path.join(data, "l")) == "sub/b.txt"
    end

    test "scripts cannot create symlinks that could leave the mount",
         %{session: session, data: data} do
      before = HostDir.snapshot(data)

      for target <- ["/etc/passwd", "../secrets/s.txt", "sub/../../secrets", "#{data}/a.txt"] do
        result = run!(session, "ln -s '#{target}' /work/evil")
        assert result.exit_code != 0
        assert result.stderr =~ "sandbox security", inspect(result)
      end

      assert HostDir.snapshot(data) == before
    end
  end

  describe "escapes are refused" do
    setup do
      host = layout()

      HostDir.populate!(host.data, %{
        "rel" => {:symlink, "../secrets"},
        "abs" => {:symlink, host.secrets},
        "relfile" => {:symlink, "../secrets/s.txt"},
        "absfile" => {:symlink, Path.join(host.secrets, "s.txt")},
        "sib" => {:symlink, "../data2"},
        "deep/up" => {:symlink, "../../secrets"}
      })

      host
    end

    test "`..` traversal stays inside the sandbox's namespace", %{data: data} do
      session = Session.new(mounts: [{"/m/data", data, :read_only}])

      for script <- [
            "cat /m/data/../secrets/s.txt",
            "cat /m/data/../../secrets/s.txt",
            "cat /m/data/sub/../../secrets/s.txt",
            "cd /m/data/sub && cat ../../../secrets/s.txt",
            "cat /m/data/../data2/f.txt",
            "ls /m/data/../"
          ] do
        result = run!(session, script)
        refute_leak(result)
      end

      assert {:error, _} = Session.read_file(session, "/m/data/../secrets/s.txt")
      assert {:error, _} = Session.read_file(session, "/m/data/../data2/f.txt")
    end

    for mode <- [:read_only, :read_write] do
      test "symlinks made before mounting (#{mode})", %{data: data} do
        session = Session.new(mounts: [{"/data", data, unquote(mode)}])
        # The same session reads what is really inside.
        assert %{stdout: "bee\n"} = run!(session, "cat /data/sub/b.txt")

        for script <- [
              "cat /data/rel/s.txt",
              "cat /data/abs/s.txt",
              "cat /data/relfile",
              "cat /data/absfile",
              "cat /data/sib/f.txt",
              "cat /data/deep/up/s.txt",
              "ls /data/rel/ /data/abs/ /data/sib/",
              "cd /data/rel && cat s.txt",
              "grep -r SECRET /data",
              "find /data -name s.txt -exec cat {} \\;"
            ] do
          result = run!(session, script)
          refute_leak(result)
        end

        for path <- ["/data/rel/s.txt", "/data/abs/s.txt", "/data/sib/f.txt", "/data/relfile"] do
          assert {:error, message} = Session.read_file(session, path)
          refute message =~ "SECRET"
        end

        assert {:error, _} = Session.list_dir(session, "/data/rel")
        assert {:error, _} = Session.list_dir(session, "/data/sib")
        assert {:error, _} = Session.stat(session, "/data/abs/s.txt")
        # The links themselves are visible, as links.
        assert {:ok, %{type: :symlink}} = Session.stat(session, "/data/rel")
      end
    end

    test "symlinks made on the host after mounting", %{data: data, secrets: secrets} do
      session = Session.new(mounts: [{"/data", data, :read_only}])
      # The script has seen the directory before the links appear.
      assert %{exit_code: 0} = run!(session, "ls -R /data > /dev/null")

      HostDir.populate!(data, %{
        "late_ok" => {:symlink, "sub"},
        "late_rel" => {:symlink, "../secrets"},
        "late_abs" => {:symlink, secrets},
        "late_file" => {:symlink, Path.join(secrets, "s.txt")}
      })

      # New entries are seen (nothing is cached), and a link that stays
      # inside works...
      assert %{stdout: "bee\n"} = run!(session, "cat /data/late_ok/b.txt")

      # ...while the ones that lead out do not.
      for script <- [
            "cat /data/late_rel/s.txt",
            "cat /data/late_abs/s.txt",
            "cat /data/late_file",
            "ls /data/late_rel/ /data/late_abs/"
          ] do
        refute_leak(run!(session, script))
      end

      assert {:error, _} = Session.read_file(session, "/data/late_abs/s.txt")
    end

    test "a directory swapped for an escaping symlink after mounting", %{data: data, x: x} do
      session = Session.new(mounts: [{"/data", data, :read_write}])
      assert %{stdout: "bee\n"} = run!(session, "cd /data/sub && cat b.txt")

      # The script's cwd is inside `sub` when the host replaces it.
      File.rm_rf!(Path.join(data, "sub"))
      File.ln_s!("../secrets", Path.join(data, "sub"))

      for script <- ["cat s.txt", "cat /data/sub/s.txt", "ls", "echo pwned > /data/sub/s.txt"] do
        refute_leak(run!(session, script))
      end

      assert File.read!(Path.join(x, "secrets/s.txt")) == @secret
      refute File.exists?(Path.join(x, "secrets/new.txt"))
    end

    test "a link is followed in the sandbox's namespace, never on the host", %{data: data} do
      # The host never follows a link for the sandbox: bashkit resolves a
      # link's target as a sandbox path, so `/data/rel -> ../secrets` names
      # `/secrets` of the sandbox, here the in-memory filesystem. A write
      # "through" it lands there, reading it back reads the same file, and
      # the host's `secrets` never sees either.
      session = Session.new(mounts: [{"/data", data, :read_write}])
      assert :ok = Session.write_file(session, "/data/rel/s.txt", "sandboxed")
      assert {:ok, "sandboxed"} = Session.read_file(session, "/secrets/s.txt")
      assert %{exit_code: 0, stdout: "sandboxed"} = run!(session, "cat /data/rel/s.txt")
      assert File.read!(Path.join(data, "../secrets/s.txt")) == @secret
    end

    test "the mount root itself swapped for a symlink after mounting", %{data: data, x: x} do
      session = Session.new(mounts: [{"/data", data, :read_only}])
      File.rename!(data, Path.join(x, "data_old"))
      File.ln_s!("secrets", data)

      refute_leak(run!(session, "cat /data/s.txt; ls /data"))
      assert {:error, _} = Session.read_file(session, "/data/s.txt")
    end

    test "writes through escaping symlinks never touch the host outside the mount",
         %{data: data, x: x} do
      HostDir.populate!(data, %{"dangling" => {:symlink, Path.join(x, "secrets/new.txt")}})
      before = outside(x)
      session = Session.new(mounts: [{"/data", data, :read_write}])

      for script <- [
            "echo pwned > /data/rel/s.txt",
            "echo pwned >> /data/abs/s.txt",
            "echo pwned > /data/relfile",
            "echo pwned > /data/absfile",
            "echo pwned > /data/dangling",
            "echo pwned > /data/sib/f.txt",
            "mkdir /data/rel/newdir",
            "touch /data/abs/touched",
            "cp /data/a.txt /data/rel/copied",
            "mv /data/a.txt /data/abs/moved",
            "rm /data/rel/s.txt",
            "rm -rf /data/abs/",
            "chmod 000 /data/relfile"
          ] do
        run!(session, script)
      end

      # The filesystem API goes the same way.
      for path <- ["/data/rel/s.txt", "/data/abs/s.txt", "/data/sib/f.txt", "/data/rel/new.txt"] do
        Session.write_file(session, path, "pwned")
      end

      Session.mkdir(session, "/data/abs/d")
      Session.remove(session, "/data/rel/s.txt")

      # Inside the mount things changed (links were removed, files written);
      # outside it nothing did.
      assert outside(x) == before
      assert File.read!(Path.join(x, "secrets/s.txt")) == @secret
    end
  end

  describe "the mount gate" do
    test "a mount of /x/data never reaches /x/data2 (prefix, not string match)" do
      host = layout()
      session = Session.new(mounts: [{"/data", host.data, :read_only}])
      HostDir.populate!(host.data, %{"sib" => {:symlink, Path.join(host.x, "data2")}})
      refute_leak(run!(session, "cat /data/sib/f.txt; ls /data/sib/"))
    end

    test "sensitive host locations are refused" do
      tmp =
        HostDir.create!(%{"home/.ssh/id" => "key", "cloud/.aws/creds" => "k", "proj/x" => "1"})

      HostDir.populate!(tmp, %{"to_etc" => {:symlink, "/etc"}})

      refused =
        ["/", "/etc", "/proc", "/sys", "/dev", "/root", "/run"] ++
          Enum.filter(["/home", "/Users", "/private"], &File.dir?/1) ++
          [Path.join(tmp, "home/.ssh"), Path.join(tmp, "cloud/.aws"), Path.join(tmp, "to_etc")]

      for host <- refused do
        error =
          assert_raise ArgumentError, fn ->
            Session.new(mounts: [{"/m", host, :read_only}])
          end

        assert error.message =~ ~s(mount {"/m", "#{host}", :read_only}: refused), error.message
        assert error.message =~ "sensitive"
        assert error.message =~ ":allowed_mount_paths"
      end

      # A symlink is judged by where it leads, and the message says so.
      error =
        assert_raise ArgumentError, fn ->
          Session.new(mounts: [{"/m", Path.join(tmp, "to_etc"), :read_only}])
        end

      assert error.message =~ "(resolves to /etc)"

      # The temporary directory itself is fine.
      assert %{stdout: "1"} =
               run!(Session.new(mounts: [{"/m", tmp, :read_only}]), "cat /m/proj/x")
    end

    test ":allowed_mount_paths is a switch: the denylist goes, the allowlist is the gate" do
      tmp = HostDir.create!(%{"home/.ssh/id" => "key", "other/f" => "o"})

      # Under an allowlisted prefix, a path the denylist would refuse mounts.
      session =
        Session.new(
          mounts: [{"/keys", Path.join(tmp, "home/.ssh"), :read_only}],
          allowed_mount_paths: [tmp]
        )

      assert {:ok, "key"} = Session.read_file(session, "/keys/id")

      # /etc mounts once it is allowlisted (read-only, so harmless here).
      session =
        Session.new(mounts: [{"/hostetc", "/etc", :read_only}], allowed_mount_paths: ["/etc"])

      assert {:ok, entries} = Session.list_dir(session, "/hostetc")
      assert Enum.sort(Enum.map(entries, &elem(&1, 0))) == Enum.sort(File.ls!("/etc"))

      # Once set, everything else is refused, even a harmless temporary dir.
      error =
        assert_raise ArgumentError, fn ->
          Session.new(
            mounts: [{"/o", Path.join(tmp, "other"), :read_only}],
            allowed_mount_paths: [Path.join(tmp, "home")]
          )
        end

      assert error.message =~ "is not under any :allowed_mount_paths entry"

      # The prefix is a path prefix, not a string prefix.
      assert_raise ArgumentError, ~r/not under any :allowed_mount_paths/, fn ->
        Session.new(
          mounts: [{"/o", Path.join(tmp, "other"), :read_only}],
          allowed_mount_paths: [Path.join(tmp, "oth")]
        )
      end

      # A symlink inside the allowlisted tree that leads out is judged by its target.
      HostDir.populate!(tmp, %{"home/out" => {:symlink, Path.join(tmp, "other")}})

      assert_raise ArgumentError, ~r/resolves to .*not under any/, fn ->
        Session.new(
          mounts: [{"/o", Path.join(tmp, "home/out"), :read_only}],
          allowed_mount_paths: [Path.join(tmp, "home")]
        )
      end

      # An empty allowlist admits nothing; a missing entry covers nothing.
      for allowed <- [[], [Path.join(tmp, "missing")]] do
        assert_raise ArgumentError, ~r/not under any/, fn ->
          Session.new(mounts: [{"/o", tmp, :read_only}], allowed_mount_paths: allowed)
        end
      end
    end

    test "misconfigured mounts raise ArgumentError naming the mount and the reason" do
      tmp = HostDir.create!(%{"file.txt" => "x", "dir/f" => "y"})
      file = Path.join(tmp, "file.txt")
      dir = Path.join(tmp, "dir")
      missing = Path.join(tmp, "missing")

      cases = [
        {[{"/m", dir, :rw}], ~s(mount {"/m", "#{dir}", :rw}: unknown mode :rw)},
        {[{"/m", missing, :read_only}],
         ~s(mount {"/m", "#{missing}", :read_only}: host path does not exist)},
        {[{"/m", file, :read_write}],
         ~s(mount {"/m", "#{file}", :read_write}: host path is not a directory)},
        {[{"/m", "relative/dir", :read_only}], "host path must be an absolute path"},
        {[{"m", dir, :read_only}], "vfs path must be an absolute path"},
        {[{"/", dir, :read_only}], "cannot mount a host directory at /"},
        {[{"/a/..", dir, :read_only}], "vfs path must be normalized"},
        {[{"/m", dir, :read_only}, {"/m/", tmp, :read_only}], "vfs path must be normalized"},
        {[{"/m", dir, :read_only}, {~c"/m", tmp, :read_only}], ":mounts has 2 mounts at /m"},
        {[{"/m", dir}],
         ":mounts entries must be {vfs_path, host_path, :read_only | :read_write}"},
        {[{"/m", 42, :read_only}], "host path must be a path string"},
        {%{"/m" => dir}, ":mounts must be a list"}
      ]

      for {mounts, expected} <- cases do
        error = assert_raise ArgumentError, fn -> Session.new(mounts: mounts) end
        assert error.message =~ expected, "#{inspect(mounts)}: #{error.message}"
      end

      assert_raise ArgumentError, ~r/both a host mount .* and a :virtual_fs mount/, fn ->
        Session.new(mounts: [{"/m", dir, :read_only}], virtual_fs: %{"/m" => fn _ -> :ok end})
      end

      assert_raise ArgumentError, ~r/:allowed_mount_paths/, fn ->
        Session.new(allowed_mount_paths: "/tmp")
      end

      assert_raise ArgumentError, ~r/:allowed_mount_paths entry must be an absolute path/, fn ->
        Session.new(allowed_mount_paths: ["tmp"])
      end
    end

    test "one refused mount among good ones fails the whole session" do
      good = HostDir.create!(%{"f" => "1"})

      assert_raise ArgumentError, ~r/"\/bad".*sensitive/, fn ->
        Session.new(mounts: [{"/good", good, :read_write}, {"/bad", "/etc", :read_only}])
      end
    end
  end

  describe "special files on the host" do
    # bashkit would read a FIFO like a file and block forever (the script
    # times out, an interpreter thread stays stuck; read_file/2 never
    # returns). Our guard refuses FIFOs, sockets and devices on host mounts.
    test "a FIFO in a mounted directory is refused, not waited on" do
      dir = HostDir.create!(%{"ok.txt" => "fine\n"})
      {_, 0} = System.cmd("mkfifo", [Path.join(dir, "pipe")])

      session = Session.new(mounts: [{"/m", dir, :read_write}], limits: [timeout_ms: 10_000])

      for script <- ["cat /m/pipe", "cat < /m/pipe", "cp /m/pipe /tmp/p", "echo x >> /m/pipe"] do
        assert {:ok, result} = Session.exec(session, script)
        assert result.exit_code != 0, script
        assert result.stderr =~ "a FIFO on a host mount cannot be read", script
      end

      task = Task.async(fn -> Session.read_file(session, "/m/pipe") end)

      assert {:ok, {:error, "/m/pipe: a FIFO on a host mount cannot be read"}} =
               Task.yield(task, 10_000)

      assert {:ok, %{stdout: "fine\n"}} = Session.exec(session, "cat /m/ok.txt")
      # Writing replaces the entry (a staged file renamed over it): no wait.
      assert {:ok, %{exit_code: 0}} = Session.exec(session, "echo new > /m/pipe")
      assert File.read!(Path.join(dir, "pipe")) == "new\n"
    end
  end

  describe "layout" do
    test "nested mounts: the longest vfs prefix wins" do
      outer = HostDir.create!(%{"o.txt" => "outer\n"})
      inner = HostDir.create!(%{"i.txt" => "inner\n"})

      session =
        Session.new(mounts: [{"/data", outer, :read_only}, {"/data/out", inner, :read_write}])

      assert %{stdout: "outer\ninner\n"} = run!(session, "cat /data/o.txt /data/out/i.txt")
      assert %{exit_code: 0} = run!(session, "echo w > /data/out/w.txt")
      assert File.read!(Path.join(inner, "w.txt")) == "w\n"
      assert %{exit_code: 1} = run!(session, "echo w > /data/w.txt")
    end

    test "vfs paths must be written normalized" do
      dir = HostDir.create!(%{"f" => "1"})

      assert_raise ArgumentError, ~r/must be normalized/, fn ->
        Session.new(mounts: [{"/a/./b/../c/", dir, :read_only}])
      end

      session = Session.new(mounts: [{"/a/c", dir, :read_only}])
      assert {:ok, "1"} = Session.read_file(session, "/a/c/f")
    end

    test ":files and :cwd under a mount go through it" do
      dir = HostDir.create!()

      session =
        Session.new(
          mounts: [{"/work", dir, :read_write}],
          files: %{"/work/seed.txt" => "seeded"},
          cwd: "/work/start"
        )

      assert File.read!(Path.join(dir, "seed.txt")) == "seeded"
      assert File.dir?(Path.join(dir, "start"))
      assert %{stdout: "/work/start\n"} = run!(session, "pwd")

      ro = HostDir.create!()

      assert_raise ArgumentError, ~r/:files entry \/ro\/x/, fn ->
        Session.new(mounts: [{"/ro", ro, :read_only}], files: %{"/ro/x" => "y"})
      end
    end
  end
end
