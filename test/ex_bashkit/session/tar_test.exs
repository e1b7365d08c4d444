defmodule ExBashkit.Session.TarTest do
  # `rootfs:` and `export_tar/3` (issue 18, "Tar images"). Runs in both
  # isolation modes (the suite's default and EX_BASHKIT_ISOLATION=in_node).
  use ExUnit.Case, async: true

  alias ExBashkit.Session
  alias ExBashkit.Test.{HostDir, TarWriter}

  defp sh!(session, script), do: Session.exec!(session, script)

  # What a script sees of `dir`: type, mode and link target of every entry.
  @listing ~S"""
  cd "$1" && find . -print | sort | while read -r f; do
    if [ -L "$f" ]; then echo "$f l -> $(readlink "$f")"
    elif [ -d "$f" ]; then echo "$f d $(stat -c %a "$f")"
    else echo "$f f $(stat -c %a "$f") $(cat "$f")"; fi
  done
  """

  defp listing(session, dir) do
    sh!(session, "set -- #{dir}\n" <> @listing).stdout
  end

  defp members(tar, flags \\ "-t") do
    path = Path.join(System.tmp_dir!(), "ex_bashkit_tar_#{System.unique_integer([:positive])}")
    File.write!(path, tar)
    {out, 0} = System.cmd("tar", [flags <> "vf", path])
    File.rm!(path)
    out
  end

  describe "rootfs:" do
    test "seeds from a tar.gz made by the system tar, before :files" do
      root =
        HostDir.create!(%{
          "app/run.sh" => "echo run",
          "app/data/config" => "k=v",
          "app/empty" => {:dir},
          "app/link" => {:symlink, "run.sh"},
          "app/abs" => {:symlink, "/app/data/config"}
        })

      File.chmod!(Path.join(root, "app/run.sh"), 0o750)
      archive = Path.join(root, "rootfs.tar.gz")
      {_, 0} = System.cmd("tar", ["-czf", archive, "-C", root, "app"])

      session =
        Session.new(rootfs: {:file, archive}, files: %{"/app/data/config" => "from files"})

      assert listing(session, "/app") ==
               """
               . d 755
               ./abs l -> /app/data/config
               ./data d 755
               ./data/config f 644 from files
               ./empty d 755
               ./link l -> run.sh
               ./run.sh f 750 echo run
               """

      assert sh!(session, "cat /app/link; echo; cat /app/abs").stdout == "echo run\nfrom files"
    end

    test "reset/1 lays the archive in again" do
      tar = TarWriter.tar([{:file, "etc/app.conf", "v1"}])
      session = Session.new(rootfs: tar)
      sh!(session, "echo v2 > /etc/app.conf; touch /new")
      :ok = Session.reset(session)
      assert Session.read_file(session, "/etc/app.conf") == {:ok, "v1"}
      assert sh!(session, "test -e /new; echo $?").stdout == "1\n"
    end

    test "hard links to an earlier member become copies; dev/ and proc/ are skipped" do
      tar =
        TarWriter.tar([
          {:file, "a.txt", "same", 0o600},
          {:hardlink, "b.txt", "a.txt"},
          {:file, "dev/null", "not a device"},
          {:file, "proc/mine", "x"}
        ])

      session = Session.new(rootfs: tar)
      assert Session.read_file(session, "/b.txt") == {:ok, "same"}
      assert sh!(session, "echo x > /dev/null; cat /dev/null | wc -c").stdout =~ "0"
      assert sh!(session, "test -e /proc/mine; echo $?").stdout == "1\n"
    end

    test "an empty archive is no error" do
      session = Session.new(rootfs: TarWriter.tar([]))
      assert sh!(session, "echo ok").stdout == "ok\n"
    end
  end

  describe "hostile archives raise ArgumentError, and no session is made" do
    @hostile [
      absolute: [{:file, "/etc/passwd", "root::0:0"}],
      dotdot: [{:file, "a/../../escape", "x"}],
      dotdot_first: [{:file, "../escape", "x"}],
      symlink_escape: [{:symlink, "a/b", "../../../etc"}],
      hardlink_outside: [{:hardlink, "a", "../outside"}],
      hardlink_unknown: [{:hardlink, "a", "nowhere"}],
      beneath_symlink: [{:symlink, "lnk", "/etc"}, {:file, "lnk/passwd", "x"}],
      device: [{:chardev, "dev2/tty"}],
      file_too_large: [{:header_only, "big", 10_000_001}]
    ]

    for {name, members} <- @hostile do
      test "#{name}" do
        assert_refused(TarWriter.tar(unquote(Macro.escape(members))))
      end
    end

    test "a 100 MB GNU long name: refused unread, the message a short prefix" do
      name = :binary.copy("n", 100 * 1024 * 1024)
      gz = :zlib.gzip(TarWriter.tar([{:long_name, name, "x"}]))
      error = assert_raise ArgumentError, fn -> Session.new(rootfs: gz) end
      assert error.message =~ ":rootfs"
      assert byte_size(error.message) < 2_048

      # A long name within the limits reads as that name.
      ok = "d/" <> String.duplicate("n", 150)
      session = Session.new(rootfs: TarWriter.tar([{:long_name, ok, "x"}]))
      assert {:ok, "x"} = Session.read_file(session, "/" <> ok)
    end

    test "garbage bytes, truncated gzip, a non-binary" do
      assert_refused("this is not a tar archive at all")
      assert_refused(:binary.copy("x", 4096))
      gz = :zlib.gzip(TarWriter.tar([{:file, "a", "x"}]))
      assert_refused(binary_part(gz, 0, div(byte_size(gz), 2)))
      assert_raise ArgumentError, ~r/:rootfs/, fn -> Session.new(rootfs: 42) end

      assert_raise ArgumentError, ~r/:rootfs file/, fn ->
        Session.new(rootfs: {:file, "/nonexistent/x.tar"})
      end
    end

    test "past the filesystem limits: too many files, too many bytes in total" do
      many = for i <- 1..10_001, do: {:file, "f/#{i}", ""}
      assert_refused(TarWriter.tar(many))
      # 11 files of 9.5 MB: each within the file size limit, past 100 MB total.
      chunk = :binary.copy("z", 9_500_000)
      big = for i <- 1..11, do: {:file, "d/#{i}", chunk}
      assert_refused(TarWriter.tar(big))
    end

    test "a refused archive refuses the whole session, even with :files and :cwd" do
      tar = TarWriter.tar([{:file, "ok.txt", "fine"}, {:file, "../bad", "x"}])

      assert_raise ArgumentError, ~r/rootfs/, fn ->
        Session.new(rootfs: tar, files: %{"/f" => "x"}, cwd: "/work")
      end
    end

    defp assert_refused(tar) do
      assert_raise ArgumentError, ~r/rootfs/, fn -> Session.new(rootfs: tar) end
    end
  end

  describe "export_tar/3" do
    setup do
      session =
        Session.new(
          files: %{"/w/a.txt" => "alpha", "/w/sub/b.bin" => <<0, 255, 1>>},
          cwd: "/w"
        )

      sh!(session, """
      chmod 600 /w/a.txt
      chmod 711 /w/sub
      mkdir -p /w/empty/deeper
      ln -s a.txt /w/rel
      ln -s /w/sub/b.bin /w/abs
      ln -s /missing /w/dangling
      """)

      %{session: session}
    end

    test "modes, symlinks and empty directories survive a round trip", %{session: session} do
      {:ok, tar} = Session.export_tar(session, "/w")
      copy = Session.new(rootfs: tar)
      # Members are relative to the exported path: it lands at /.
      expected = listing(session, "/w")

      for line <- String.split(expected, "\n", trim: true), line != ". d 755" do
        assert listing(copy, "/") =~ line
      end

      assert Session.read_file(copy, "/sub/b.bin") == {:ok, <<0, 255, 1>>}
      assert sh!(copy, "readlink /dangling").stdout == "/missing\n"

      listed = members(tar)
      assert listed =~ "empty/deeper/"
      assert listed =~ "rel -> a.txt"
      assert listed =~ "-rw-------"
    end

    test "gzip: true, read back by the system tar and by rootfs:", %{session: session} do
      {:ok, gz} = Session.export_tar(session, "/", gzip: true)
      assert <<0x1F, 0x8B, _::binary>> = gz
      assert members(gz, "-tz") =~ "w/sub/b.bin"
      copy = Session.new(rootfs: gz)
      assert listing(copy, "/w") == listing(session, "/w")
    end

    test "a file exports as one member named by its base name", %{session: session} do
      {:ok, tar} = Session.export_tar(session, "/w/a.txt")
      assert [line] = String.split(members(tar), "\n", trim: true)
      assert line =~ ~r/ a\.txt$/
    end

    test "leaves out host mounts, system files and /dev" do
      host = HostDir.create!(%{"secret.txt" => "host"})

      session =
        Session.new(mounts: [{"/mnt/host", host, :read_only}], files: %{"/etc/mine" => "m"})

      {:ok, tar} = Session.export_tar(session)
      listed = members(tar)
      assert listed =~ "etc/mine"
      refute listed =~ "secret.txt"
      refute listed =~ "passwd"
      refute listed =~ "proc/"
      refute listed =~ "dev/"
      refute listed =~ "usr/bin/"
      assert {:error, message} = Session.export_tar(session, "/mnt/host")
      assert message =~ "mount"
    end

    test "bad arguments raise; a missing path is an error", %{session: session} do
      assert_raise ArgumentError, fn -> Session.export_tar(session, "relative") end
      assert_raise ArgumentError, fn -> Session.export_tar(session, "/a/../b") end
      assert_raise ArgumentError, fn -> Session.export_tar(session, "/", gzip: :yes) end
      assert {:error, _} = Session.export_tar(session, "/nope")
    end
  end
end
