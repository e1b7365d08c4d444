defmodule ExBashkit.Session.TrashTest do
  # `Session.new(soft_delete: true | [trash: path])`: deletes and overwrites
  # in the in-memory filesystem move the old content to the trash;
  # `Session.trash/1` lists it, `Session.undelete/2` puts it back. Runs in
  # both isolation modes (scripts/test runs the suite twice).
  use ExUnit.Case, async: true

  alias ExBashkit.Session

  defp run(session, script) do
    {:ok, result} = Session.exec(session, script)
    result
  end

  defp paths(session) do
    {:ok, entries} = Session.trash(session)
    Enum.map(entries, & &1.path)
  end

  describe "what goes to the trash" do
    setup do
      %{s: Session.new(soft_delete: true)}
    end

    test "rm, then undelete puts it back", %{s: s} do
      assert run(s, "echo hello > /notes.txt; rm /notes.txt; ls /notes.txt").exit_code != 0
      assert {:ok, [entry]} = Session.trash(s)

      assert %{path: "/notes.txt", type: :file, size: 6, trash_path: "/.trash/1_notes.txt"} =
               entry

      assert is_integer(entry.deleted_at) and entry.deleted_at > 0
      assert run(s, "cat /.trash/1_notes.txt").stdout == "hello\n"
      assert :ok = Session.undelete(s, "/notes.txt")
      assert run(s, "cat /notes.txt").stdout == "hello\n"
      assert {:ok, []} = Session.trash(s)
    end

    test "rm -r and rmdir keep whole directories", %{s: s} do
      run(s, "mkdir -p /proj/src /empty; echo code > /proj/src/main.c; rm -r /proj; rmdir /empty")
      assert paths(s) == ["/proj", "/empty"]
      assert {:ok, %{type: :dir}} = Session.stat(s, "/.trash/1_proj")
      assert :ok = Session.undelete(s, "/proj")
      assert run(s, "cat /proj/src/main.c").stdout == "code\n"
      assert :ok = Session.undelete(s, "/empty")
      assert {:ok, %{type: :dir}} = Session.stat(s, "/empty")
    end

    test "rmdir of a non-empty directory still fails and keeps nothing", %{s: s} do
      result = run(s, "mkdir /d; touch /d/f; rmdir /d; echo $?")
      assert result.stdout == "1\n"
      assert paths(s) == []
    end

    test "unlink and find -delete", %{s: s} do
      run(
        s,
        "echo a > /a; unlink /a; mkdir /logs; echo l > /logs/x.log; find /logs -name '*.log' -delete"
      )

      assert paths(s) == ["/a", "/logs/x.log"]
    end

    test "a redirection that overwrites keeps the old content; >> does not", %{s: s} do
      run(s, "echo v1 > /f; echo v2 > /f; echo v3 >> /f")
      assert {:ok, [%{path: "/f", trash_path: trash}]} = Session.trash(s)
      assert {:ok, "v1\n"} = Session.read_file(s, trash)
      assert {:ok, "v2\nv3\n"} = Session.read_file(s, "/f")
    end

    test "mv and cp onto a file keep the file they replace", %{s: s} do
      run(s, "echo old > /dst; echo new > /src; mv /src /dst")
      assert paths(s) == ["/dst"]
      run(s, "echo other > /o; cp /o /dst")
      assert paths(s) == ["/dst", "/dst"]
      {:ok, entries} = Session.trash(s)
      contents = for e <- entries, do: elem(Session.read_file(s, e.trash_path), 1)
      assert contents == ["old\n", "new\n"]
    end

    test "sed -i and a file rewritten by the filesystem API", %{s: s} do
      run(s, "echo abc > /t; sed -i s/b/X/ /t")
      assert :ok = Session.write_file(s, "/t", "api")
      {:ok, entries} = Session.trash(s)

      assert Enum.map(entries, &elem(Session.read_file(s, &1.trash_path), 1)) == [
               "abc\n",
               "aXc\n"
             ]

      assert :ok = Session.remove(s, "/t")
      assert List.last(paths(s)) == "/t"
    end

    test "empty files and new files are not kept", %{s: s} do
      run(s, "touch /e; echo x > /e; rm -f /missing; echo y > /new")
      assert paths(s) == []
    end

    # Spaces and `%` in names round-trip through the index. Tabs and
    # newlines cannot reach the trash: bashkit's filesystem refuses control
    # characters in names (its TM-DOS-015), so such a file is never created;
    # the index encodes them anyway (session/trash.rs's unit test).
    test "names with spaces and % round-trip; control characters never exist", %{s: s} do
      run(s, "mkdir -p '/a b'; printf x > '/a b/c 50%'; rm '/a b/c 50%'")
      assert paths(s) == ["/a b/c 50%"]
      assert :ok = Session.undelete(s, "/a b/c 50%")
      assert {:ok, "x"} = Session.read_file(s, "/a b/c 50%")

      r = run(s, "printf x > $'/a b/c\\td\\ne'; echo $?")
      assert r.stdout == "1\n"
      assert r.stderr =~ "unsafe character U+0009"
      assert paths(s) == []
    end

    # As GNU rm: `/` is refused before anything is touched (and bashkit's
    # root layer refuses removing `/` even with --no-preserve-root).
    test "rm -rf / removes nothing and says why, as GNU rm", %{s: s} do
      result = run(s, "mkdir -p /w; echo 1 > /w/one; rm -rf /; echo \"exit=$?\"")
      assert result.stdout == "exit=1\n"

      assert result.stderr ==
               "rm: it is dangerous to operate recursively on '/'\n" <>
                 "rm: use --no-preserve-root to override this failsafe\n"

      assert run(s, "rm -rf /w/..; echo $?").stdout == "1\n"
      assert run(s, "rm -rf --no-preserve-root / 2>/dev/null; echo $?").stdout == "1\n"
      assert paths(s) == []
      assert run(s, "cat /w/one").stdout == "1\n"
    end

    test "removing a directory that holds the trash keeps the trash itself" do
      s = Session.new(soft_delete: [trash: "/w/.trash"])
      run(s, "mkdir -p /w/d; echo 1 > /w/one; echo 2 > /w/d/two; rm -rf /w")
      assert Enum.sort(paths(s)) == ["/w/d", "/w/one"]
      assert run(s, "ls -A /w").stdout == ".trash\n"
      assert :ok = Session.undelete(s, "/w/d")
      assert run(s, "cat /w/d/two").stdout == "2\n"
    end

    test "what is done inside the trash is real", %{s: s} do
      run(s, "echo a > /a; rm /a; rm /.trash/1_a")
      assert paths(s) == []
      assert {:error, %ExBashkit.Error{reason: :not_found}} = undelete(s, "/a")
      run(s, "echo b > /b; rm /b; rm -rf /.trash")
      assert {:ok, []} = Session.trash(s)
    end

    test "a script moving an entry out of the trash takes it off the list", %{s: s} do
      run(s, "echo a > /a; rm /a; mv /.trash/1_a /back")
      assert paths(s) == []
      assert run(s, "cat /back").stdout == "a\n"
    end
  end

  describe "undelete" do
    setup do
      %{s: Session.new(soft_delete: true)}
    end

    test "the most recent entry of a path comes back first", %{s: s} do
      run(s, "echo v1 > /f; rm /f; echo v2 > /f; rm /f")
      assert :ok = Session.undelete(s, "/f")
      assert {:ok, "v2\n"} = Session.read_file(s, "/f")
      run(s, "rm /f")
      assert :ok = Session.undelete(s, "/f")
      assert {:ok, "v2\n"} = Session.read_file(s, "/f")
    end

    test "a path taken again is left alone: reason :exists", %{s: s} do
      run(s, "echo old > /f; rm /f; echo new > /f")
      assert {:error, "/f: something is at this path again" <> _} = Session.undelete(s, "/f")
      assert {:error, %ExBashkit.Error{reason: :exists}} = undelete(s, "/f")
      assert {:ok, "new\n"} = Session.read_file(s, "/f")
      assert paths(s) == ["/f"]
      # Removing the occupant trashes it; then the older one can come back.
      run(s, "rm /f")
      assert :ok = Session.undelete(s, "/f")
      assert {:ok, "new\n"} = Session.read_file(s, "/f")
    end

    test "missing parent directories are created", %{s: s} do
      run(s, "mkdir -p /a/b; echo x > /a/b/f; rm /a/b/f; rm -r /a")
      {:ok, _} = Session.trash(s)
      assert :ok = Session.undelete(s, "/a/b/f")
      assert {:ok, "x\n"} = Session.read_file(s, "/a/b/f")
    end

    test "unknown paths and spellings", %{s: s} do
      assert {:error, "/never: nothing in the trash came from this path"} =
               Session.undelete(s, "/never")

      assert {:error, %ExBashkit.Error{reason: :not_found}} = undelete(s, "/never")
      run(s, "echo x > /f; rm /f")
      assert :ok = Session.undelete(s, "//f/")
      assert {:error, _} = Session.undelete(s, "/a/../f")
      assert_raise ArgumentError, fn -> Session.undelete(s, 42) end
    end
  end

  describe "the trash and the rest of the session" do
    test "a custom trash directory" do
      s = Session.new(soft_delete: [trash: "/var/trash"])
      run(s, "echo x > /f; rm /f")
      assert {:ok, [%{trash_path: "/var/trash/1_f"}]} = Session.trash(s)
    end

    test "track_changes reports a delete as deleted, not the trash as created" do
      s = Session.new(soft_delete: true)
      run(s, "echo x > /f; echo y > /g")
      {:ok, result} = Session.exec(s, "rm /f; echo z > /g", track_changes: true)
      assert result.changes.deleted == ["/f"]
      assert result.changes.created == []
      assert result.changes.modified == ["/g"]
    end

    test "deleted bytes are counted once, and a delete never fails for space" do
      s = Session.new(soft_delete: true)
      run(s, "head -c 100000 /dev/zero > /big")
      before = String.to_integer(String.trim(run(s, "du -sb / | cut -f1").stdout))
      run(s, "rm /big")
      later = String.to_integer(String.trim(run(s, "du -sb / | cut -f1").stdout))
      # Only the index line is new: the 100 000 bytes were moved, not copied.
      assert (later - before) in 0..200
    end

    test "snapshot and restore carry the trash and its index" do
      s = Session.new(soft_delete: true)
      run(s, "echo x > /f; rm /f")
      {:ok, snap} = Session.snapshot(s)
      t = Session.new(soft_delete: true)
      {:ok, t} = Session.restore(t, snap)
      assert paths(t) == ["/f"]
      assert :ok = Session.undelete(t, "/f")
      # The entry counter does not reuse a name still in the trash.
      run(t, "echo y > /g; rm /g; echo z > /h; rm /h")
      {:ok, entries} = Session.trash(t)
      assert length(Enum.uniq_by(entries, & &1.trash_path)) == 2
    end

    test "reset empties it with the rest of the filesystem" do
      s = Session.new(soft_delete: true)
      run(s, "echo x > /f; rm /f")
      :ok = Session.reset(s)
      assert {:ok, []} = Session.trash(s)
      run(s, "echo x > /f; rm /f")
      assert paths(s) == ["/f"]
    end

    test "host mounts are outside soft delete: a delete there is real" do
      dir = Path.join(System.tmp_dir!(), "exb_soft_#{System.unique_integer([:positive])}")
      File.mkdir_p!(dir)
      File.write!(Path.join(dir, "h.txt"), "host")
      on_exit(fn -> File.rm_rf!(dir) end)
      s = Session.new(soft_delete: true, mounts: [{"/host", dir, :read_write}])
      run(s, "rm /host/h.txt")
      refute File.exists?(Path.join(dir, "h.txt"))
      assert paths(s) == []
    end

    test "without soft_delete deletes are real and the API says so" do
      s = Session.new()
      run(s, "echo x > /f; rm /f")
      assert {:error, "the session has no trash" <> _} = Session.trash(s)
      assert {:error, "the session has no trash" <> _} = Session.undelete(s, "/f")
      assert_raise ExBashkit.Error, ~r/no trash/, fn -> Session.trash!(s) end
      assert {:error, %ExBashkit.Error{reason: :not_supported}} = undelete(s, "/f")
      assert run(s, "ls -a /").stdout =~ "tmp"
      refute run(s, "ls -a /").stdout =~ ".trash"
    end

    test "invalid options raise ArgumentError" do
      for bad <- [:yes, [trash: "rel"], [trash: "/"], [trash: "/a/../b"], [bin: "/x"], "x"] do
        assert_raise ArgumentError, fn -> Session.new(soft_delete: bad) end
      end
    end
  end

  # The structured answer: what `undelete!/2` raises.
  defp undelete(s, path) do
    {:ok, Session.undelete!(s, path)}
  rescue
    error in ExBashkit.Error -> {:error, error}
  end
end
