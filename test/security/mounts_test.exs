defmodule ExBashkit.Security.MountsTest do
  # Host-mount escapes, each a named test, against real host directories with
  # real symlinks (see ExBashkit.Test.HostDir for the layout). Isolation
  # inside a mount is bashkit's RealFs; these tests prove it holds through
  # scripts and through the filesystem API, and that sensitive host paths
  # cannot be mounted at all.
  use ExUnit.Case, async: true

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.HostDir

  setup do
    layout = HostDir.escape_layout!()
    ro = Session.new(mounts: [{"/data", layout.inner, :read_only}])
    rw = Session.new(mounts: [{"/data", layout.inner, :read_write}])
    Map.merge(layout, %{ro: ro, rw: rw})
  end

  defp out(session, script) do
    case Session.run(session, script) do
      {:ok, %Result{stdout: out, stderr: err}} -> out <> err
      {:error, %{message: message}} -> message
    end
  end

  defp refute_secret(text, what),
    do: refute(text =~ HostDir.secret(), "#{what} leaked the secret")

  test "positive control: the mount works and stays-inside links resolve", ctx do
    for s <- [ctx.ro, ctx.rw] do
      assert {:ok, %Result{stdout: "inside\ninside\n"}} =
               Session.exec(s, "cat /data/ok.txt /data/in_link")

      assert Session.read_file(s, "/data/sub/deep.txt") == {:ok, "deep\n"}
    end
  end

  test "mount .. traversal: scripts and the API stay inside", ctx do
    for s <- [ctx.ro, ctx.rw],
        path <- [
          "/data/../secret.txt",
          "/data/../../secret.txt",
          "/data/sub/../../secret.txt",
          "/data/./../data/../secret.txt",
          "/data/" <> String.duplicate("../", 20) <> "#{ctx.secret_path}",
          "/data/..%2fsecret.txt"
        ] do
      refute_secret(out(s, "cat '#{path}'"), "cat #{path}")

      refute_secret(
        out(s, "cd /data/sub && cat ../../secret.txt ../../../secret.txt"),
        "relative cd"
      )

      assert match?({:error, _}, Session.read_file(s, path)), "read_file #{path}"
    end

    HostDir.assert_contained!(ctx)
  end

  test "mount .. traversal: writes through .. on a read_write mount land in the sandbox", ctx do
    for path <- ["/data/../escape.txt", "/data/../../escape.txt", "/data/sub/../../escape.txt"] do
      Session.exec(ctx.rw, "echo pwned > '#{path}'")
      Session.write_file(ctx.rw, path, "pwned")
    end

    Session.exec(ctx.rw, "cp /data/ok.txt /data/../../copied.txt; mv /data/sub /data/../../moved")
    HostDir.assert_contained!(ctx)
    refute File.exists?(Path.join(Path.dirname(ctx.root), "escape.txt"))
    refute File.exists?(Path.join(Path.dirname(ctx.root), "copied.txt"))
  end

  test "symlinks out of a mount (relative, and a directory link to ..) are not followed", ctx do
    for s <- [ctx.ro, ctx.rw],
        script <- [
          "cat /data/rel_link",
          "cat /data/dir_link/secret.txt",
          "ls /data/dir_link",
          "cd /data/dir_link && cat secret.txt",
          "cat /data/loop",
          "find -L /data -type f -exec cat {} \\;",
          "grep -r -L nothing /data",
          "tar -chf /t.tar -C /data . && tar -xOf /t.tar"
        ] do
      refute_secret(out(s, script), script)
    end

    for s <- [ctx.ro, ctx.rw], path <- ["/data/rel_link", "/data/dir_link/secret.txt"] do
      assert {:error, _} = Session.read_file(s, path)
    end

    HostDir.assert_contained!(ctx)
  end

  test "absolute symlinks (to a host file, a host dir, /etc/hostname) are not followed", ctx do
    host_name = File.read("/etc/hostname")

    for s <- [ctx.ro, ctx.rw],
        script <- [
          "cat /data/abs_link",
          "cat /data/abs_dir/secret.txt",
          "cat /data/host_link",
          "ls /data/abs_dir"
        ] do
      text = out(s, script)
      refute_secret(text, script)

      with {:ok, name} when byte_size(name) > 1 <- host_name do
        refute text =~ name, "#{script} read the host's /etc/hostname"
      end
    end

    HostDir.assert_contained!(ctx)
  end

  test "writes through symlinks that point out of a read_write mount are refused", ctx do
    for script <- [
          "echo pwned > /data/abs_link",
          "echo pwned >> /data/rel_link",
          "echo pwned > /data/dir_link/secret.txt",
          "echo pwned > /data/abs_dir/new.txt",
          "cp /data/ok.txt /data/abs_link",
          "rm /data/dir_link/secret.txt",
          "truncate -s 0 /data/rel_link",
          "sed -i s/HOST/PWNED/ /data/abs_link"
        ] do
      Session.exec(ctx.rw, script)
      HostDir.assert_contained!(ctx)
    end

    for path <- ["/data/abs_link", "/data/rel_link", "/data/dir_link/secret.txt"] do
      Session.write_file(ctx.rw, path, "pwned")
      HostDir.assert_contained!(ctx)
    end
  end

  test "a script cannot plant a symlink or hard link on the host that points out", ctx do
    before = HostDir.snapshot(ctx.inner)

    Session.exec(ctx.rw, """
    ln -s /etc/passwd /data/planted_abs
    ln -s ../secret.txt /data/planted_rel
    ln -s ../../../../../../etc/shadow /data/sub/planted_deep
    ln /data/rel_link /data/hard
    ln /data/../secret.txt /data/hard2
    """)

    for {rel, {:symlink, target}} <- HostDir.snapshot(ctx.inner),
        not Map.has_key?(before, rel) do
      resolved = Path.expand(target, Path.dirname(Path.join(ctx.inner, rel)))
      assert String.starts_with?(resolved, ctx.inner <> "/"), "planted #{rel} -> #{target}"
    end

    HostDir.assert_contained!(ctx)
  end

  test "a read_only mount refuses every write and the host is untouched", ctx do
    before = HostDir.snapshot(ctx.inner)

    for script <- [
          "echo x > /data/new",
          "echo x >> /data/ok.txt",
          "rm -rf /data/sub",
          "mv /data/ok.txt /data/moved",
          "touch /data/t",
          "mkdir /data/d",
          "ln -s ok.txt /data/l",
          "chmod 777 /data/ok.txt"
        ] do
      Session.exec(ctx.ro, script)
    end

    assert {:error, _} = Session.write_file(ctx.ro, "/data/new", "x")
    assert {:error, _} = Session.remove(ctx.ro, "/data/ok.txt")
    assert {:error, _} = Session.rename(ctx.ro, "/data/ok.txt", "/data/x")
    assert {:error, _} = Session.mkdir(ctx.ro, "/data/d")
    assert HostDir.snapshot(ctx.inner) == before
  end

  describe "sensitive paths" do
    test "system and home locations cannot be mounted" do
      for host <- ~w(/ /etc /etc/ssl /proc /proc/self /sys /dev /root /home /run /boot /var/run) do
        if File.dir?(host) do
          assert_raise ArgumentError, fn -> Session.new(mounts: [{"/h", host, :read_only}]) end
        end
      end
    end

    test "secret-bearing directories (.ssh, .aws, ...) anywhere cannot be mounted", ctx do
      for name <- ~w(.ssh .aws .kube .docker .gnupg .gcloud) do
        dir = Path.join(ctx.root, name)
        File.mkdir_p!(dir)
        assert_raise ArgumentError, fn -> Session.new(mounts: [{"/h", dir, :read_only}]) end
        File.rm_rf!(dir)
      end
    end

    test "spelling a sensitive path differently does not help: .., //, a symlink to /etc", ctx do
      link = Path.join(ctx.root, "etc_alias")
      File.ln_s!("/etc", link)

      try do
        for host <- ["/tmp/../etc", "//etc", "/etc/.", link] do
          assert_raise ArgumentError, fn -> Session.new(mounts: [{"/h", host, :read_only}]) end
        end
      after
        File.rm!(link)
      end
    end

    test "a missing host path or a file raises instead of being skipped", ctx do
      assert_raise ArgumentError, fn ->
        Session.new(mounts: [{"/h", Path.join(ctx.root, "missing"), :read_only}])
      end

      assert_raise ArgumentError, fn ->
        Session.new(mounts: [{"/h", ctx.secret_path, :read_only}])
      end
    end
  end
end
