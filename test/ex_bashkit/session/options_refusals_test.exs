defmodule ExBashkit.Session.OptionsRefusalsTest do
  # Options that used to be accepted and then misbehaved (issue 22, item 16):
  # each is now refused by `new/1` with an ArgumentError naming the option,
  # or normalized where the intent is unambiguous.
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.HostDir

  describe ":cwd" do
    test "is normalized; .. is refused" do
      assert out(Session.new(cwd: "/a/./b//c/"), "pwd") == "/a/b/c\n"

      for cwd <- ["/a/../../b", "/a/..", "/.."] do
        assert_raise ArgumentError, ~r/:cwd must not contain \.\. segments/, fn ->
          Session.new(cwd: cwd)
        end
      end
    end

    test "naming a file is refused, in memory and under a mount" do
      assert_raise ArgumentError, ~r/:cwd \/f is not a directory/, fn ->
        Session.new(files: %{"/f" => "x"}, cwd: "/f")
      end

      dir = HostDir.create!(%{"file" => "x"})

      assert_raise ArgumentError, ~r/:cwd \/m\/file is not a directory/, fn ->
        Session.new(mounts: [{"/m", dir, :read_only}], cwd: "/m/file")
      end
    end
  end

  describe ":username and :hostname" do
    test "newlines, colons, slashes and whitespace are refused" do
      for option <- [:username, :hostname],
          value <- ["evil\nroot:x:0:0::/root:/bin/bash", "a:b", "../etc", "a b", "tab\t", "\r"] do
        assert_raise ArgumentError, ~r/#{inspect(option)} must not contain/, fn ->
          Session.new([{option, value}])
        end
      end
    end

    test "ordinary names still work and reach /etc/passwd as one entry" do
      s = Session.new(username: "agent-1", hostname: "box.local")
      assert out(s, "whoami; hostname") == "agent-1\nbox.local\n"
      assert out(s, "grep -c '^agent-1:' /etc/passwd") == "1\n"
    end
  end

  describe ":env" do
    test "names that are not shell identifiers are refused" do
      for name <- ["$(id)", "A B", "1A", "A-B", "A.B", "é", "A\nB", "A=B", ""] do
        assert_raise ArgumentError, ~r/:env key must be a shell variable name/, fn ->
          Session.new(env: %{name => "1"})
        end
      end

      assert out(Session.new(env: [_ok: "1", A_1: "2"]), "echo $_ok $A_1") == "1 2\n"
    end
  end

  describe ":virtual_fs" do
    test "a key spelled differently from a mount is the same mount" do
      dir = HostDir.create!()
      backend = fn _ -> {:error, :enoent} end

      for key <- ["/api/.", "/api/", "/api//", "//api", "/x/../api"] do
        # Refused either as a spelling (issue 19: paths must be normalized)
        # or as the same place as the host mount.
        assert_raise ArgumentError,
                     ~r/must be normalized|both a host mount .* and a :virtual_fs mount/,
                     fn ->
                       Session.new(
                         mounts: [{"/api", dir, :read_only}],
                         virtual_fs: %{key => backend}
                       )
                     end
      end

      assert_raise ArgumentError,
                   ~r/must be normalized|:virtual_fs has 2 backends at \/api/,
                   fn ->
                     Session.new(virtual_fs: %{"/api" => backend, "/api/." => backend})
                   end

      assert_raise ArgumentError,
                   ~r/must be normalized|:virtual_fs cannot mount a backend at \//,
                   fn ->
                     Session.new(virtual_fs: %{"/a/.." => backend})
                   end
    end
  end

  describe "the mount denylist" do
    test "/var is refused in either mode; system software only read-only" do
      for mode <- [:read_only, :read_write], host <- ["/var", "/var/tmp"], File.dir?(host) do
        assert_raise ArgumentError, ~r/refused: .*sensitive/, fn ->
          Session.new(mounts: [{"/m", host, mode}])
        end
      end

      if File.dir?("/usr") do
        assert %Result{exit_code: 0} =
                 elem(Session.exec(Session.new(mounts: [{"/m", "/usr", :read_only}]), "ls /m"), 1)

        assert_raise ArgumentError, ~r/:read_only, not :read_write/, fn ->
          Session.new(mounts: [{"/m", "/usr", :read_write}])
        end
      end

      # The allowlist, when given, is the gate instead.
      if File.dir?("/var") do
        assert %Session{} =
                 Session.new(mounts: [{"/m", "/var", :read_only}], allowed_mount_paths: ["/var"])
      end
    end
  end
end
