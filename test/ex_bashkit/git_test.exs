defmodule ExBashkit.GitTest do
  # The `:git` capability: bashkit's virtual git on the session filesystem.
  # Runs in both isolation modes (scripts/test runs the suite twice).
  use ExBashkit.Test.Case, async: true
  doctest ExBashkit.Git

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.GitHttp

  @author [author: {"Agent Smith", "agent@example.com"}]

  # The commits `git log` lists, newest first: {hash, author, message}.
  defp log!(session) do
    ok!(session, "git log").stdout
    |> String.split("\ncommit ", trim: true)
    |> Enum.map(fn entry ->
      [_, hash] = Regex.run(~r/\A(?:commit )?(\S+)/, entry)
      [_, author] = Regex.run(~r/^Author: (.*)$/m, entry)
      [_, message] = Regex.run(~r/^    (.*)$/m, entry)
      {hash, author, message}
    end)
  end

  describe "an agent round" do
    test "init, write, commit, edit, commit, log, branch and checkout" do
      s = Session.new(git: @author, cwd: "/work")

      assert ok!(s, "git init").stdout =~ "Initialized empty Git repository in /work/.git/"
      :ok = Session.write_file(s, "/work/app.py", "print('v1')\n")
      ok!(s, "mkdir -p lib && echo 'helper' > lib/util.sh")

      status = ok!(s, "git status").stdout
      assert status =~ "Untracked files:"
      assert status =~ "app.py"
      assert status =~ "lib/util.sh"

      ok!(s, "git add . && git commit -m 'first version'")
      assert ok!(s, "git status").stdout =~ "nothing to commit"
      assert ok!(s, "git ls-files | sort").stdout == "app.py\nlib/util.sh\n"

      # The edit, then a second commit.
      :ok = Session.write_file(s, "/work/app.py", "print('v2')\n")
      ok!(s, "echo more >> lib/util.sh && git commit -am 'second version'")

      assert [{_, author, "second version"}, {_, author, "first version"}] = log!(s)
      assert author == "Agent Smith <agent@example.com>"
      assert ok!(s, "git log -n 1").stdout =~ "second version"

      # A branch: created, checked out, listed as current.
      assert ok!(s, "git checkout -b feature").stdout =~ "Switched to branch 'feature'"
      assert ok!(s, "git branch").stdout =~ "* feature"
      assert ok!(s, "git status").stdout =~ "On branch feature"
      assert ok!(s, "git rev-parse --abbrev-ref HEAD").stdout == "feature\n"
      assert ok!(s, "git checkout master").stdout =~ "Switched to branch 'master'"

      # The state is the .git directory of the session filesystem.
      assert {:ok, _} = Session.read_file(s, "/work/.git/HEAD")
    end

    test "snapshot and restore keep the history; reset/1 drops it, git stays" do
      s = Session.new(git: @author, cwd: "/work")
      ok!(s, "git init -q && echo a > a && git add a && git commit -q -m one")
      ok!(s, "echo b > b && git add b && git commit -q -m two && git checkout -b topic")
      history = log!(s)
      assert length(history) == 2

      {:ok, bytes} = Session.snapshot(s)
      {:ok, other} = Session.restore(Session.new(git: @author), bytes)
      assert log!(other) == history
      assert ok!(other, "git branch").stdout =~ "* topic"
      ok!(other, "echo c > c && git add c && git commit -q -m three")
      assert [{_, _, "three"} | ^history] = log!(other)

      # The source did not move.
      assert log!(s) == history

      :ok = Session.reset(s)
      assert run!(s, "git log").exit_code == 128
      assert run!(s, "git status").exit_code == 128
      ok!(s, "git init -q /r && cd /r && echo x > x && git add x && git commit -q -m again")
      assert [{_, _, "again"}] = log!(s)
    end

    test "the history lives through soft delete and a base image, snapshots and reset" do
      image = ExBashkit.Image.build!(files: %{"/work/README" => "base\n"})
      opts = [git: @author, cwd: "/work", base: image, soft_delete: true]
      s = Session.new(opts)
      ok!(s, "git init -q && git add . && git commit -q -m one")
      ok!(s, "echo more >> README && git commit -q -am two")
      history = log!(s)
      assert [{_, _, "two"}, {_, _, "one"}] = history
      assert ok!(s, "git ls-files").stdout == "README\n"

      {:ok, bytes} = Session.snapshot(s)
      {:ok, other} = Session.restore(Session.new(opts), bytes)
      assert log!(other) == history
      assert {:ok, "base\nmore\n"} = Session.read_file(other, "/work/README")

      :ok = Session.reset(s)
      assert run!(s, "git log").exit_code == 128
      assert {:ok, "base\n"} = Session.read_file(s, "/work/README")
    end

    test "track_changes reports what git wrote under .git" do
      s = Session.new(git: true)

      assert {:ok, %Result{changes: changes}} =
               Session.exec(s, "git init -q /r && cd /r && echo a > a && git add a",
                 track_changes: true
               )

      assert "/r/.git/HEAD" in changes.created
      assert "/r/.git/index" in changes.created

      assert {:ok, %Result{changes: %{modified: modified}}} =
               Session.exec(s, "cd /r && git commit -q -m one", track_changes: true)

      assert "/r/.git/index" in modified
    end
  end

  describe "the virtual identity" do
    test "the default author is bashkit's virtual one, never the host's" do
      s = Session.new(git: true, env: [GIT_AUTHOR_NAME: "Host Person"])
      ok!(s, "git init -q /r && cd /r && echo a > a && git add a && git commit -q -m one")
      assert [{_, "sandbox <sandbox@bashkit.local>", "one"}] = log!(s)
      refute ok!(s, "cat /r/.git/config").stdout =~ "Host Person"
    end

    test "malformed :git options raise" do
      for bad <- [
            :yes,
            "true",
            [author: "me"],
            [author: {"me", nil}],
            [author: {"", "a@b"}],
            [author: {"a|b", "a@b"}],
            [author: {"a\nb", "a@b"}],
            [author: {"a", "a b@c"}],
            [remotes: "https://x.example/"],
            [remotes: ["ftp://x.example/"]],
            [remotes: ["https://user:pw@x.example/"]],
            [other: 1]
          ] do
        assert_raise ArgumentError, ~r/:git/, fn -> Session.new(git: bad) end
      end
    end
  end

  describe "refused when not granted" do
    test "git is an unknown command without :git" do
      s = Session.new()
      assert %Result{exit_code: 127, stderr: stderr} = run!(s, "git init /r")
      assert stderr =~ "command not found"
      assert {:error, _} = Session.read_file(s, "/r/.git/HEAD")
    end

    test "a snapshot of a git session does not restore into a session without git" do
      s = Session.new(git: true)
      ok!(s, "git init -q /r")
      {:ok, bytes} = Session.snapshot(s)
      assert {:error, message} = Session.restore(Session.new(), bytes)
      assert message =~ "git"
    end
  end

  describe "remotes" do
    setup do
      root =
        GitHttp.bare_repo!("project", %{"README.md" => "# Project\n", "src/main.ts" => "1\n"})

      server = GitHttp.start!(root)
      %{server: server, url: "#{server.url}/project.git"}
    end

    test "a remote must lie within :allow_net and its private-IP rule", %{server: server} do
      remotes = [remotes: [server.url <> "/"]]

      assert_raise ArgumentError, ~r/:git remote .* outside the session's network access/, fn ->
        Session.new(git: remotes)
      end

      assert_raise ArgumentError, ~r/outside the session's network access/, fn ->
        Session.new(git: remotes, allow_net: [server.url <> "/other"], block_private_ips: false)
      end

      # 127.0.0.1 is a private address: refused unless the session allows those.
      assert_raise ArgumentError, ~r/private/, fn ->
        Session.new(git: remotes, allow_net: [server.url])
      end

      assert_raise ArgumentError, ~r/private/, fn ->
        Session.new(git: remotes, allow_net: :all)
      end

      assert %Session{} =
               Session.new(git: remotes, allow_net: [server.url], block_private_ips: false)
    end

    test "a clone of an unlisted URL is refused and sends nothing", %{server: server, url: url} do
      other = "https://git.example.com/org/"

      for s <- [
            Session.new(git: true),
            Session.new(
              git: [remotes: [other]],
              allow_net: ["https://git.example.com/"],
              block_private_ips: false
            )
          ] do
        for url <- [url, String.replace(url, "http:", "https:")] do
          assert %Result{exit_code: 128, stderr: stderr} = run!(s, "git clone #{url} /work/p")
          # "no remote URLs are allowed", "not in allowlist", "only HTTPS URLs are allowed"
          assert stderr =~ "allow"
          assert {:error, _} = Session.read_file(s, "/work/p/README.md")
        end
      end

      refute_received {:git_http_request, _, _, _}
      # The server is up: the host's git can clone from it.
      host = ExBashkit.Test.HostDir.create!()
      GitHttp.git!(host, ["clone", "-q", url, "p"])
      assert File.read!(Path.join(host, "p/README.md")) == "# Project\n"
      assert_received {:git_http_request, pid, "GET", "/project.git/info/refs" <> _}
      assert pid == server.pid
    end

    # bashkit 0.20.2, GitClient::clone: GitConfig::is_url_allowed accepts
    # only https:// URLs ("only HTTPS URLs are allowed", what this plain-HTTP
    # server gets), and a URL that passes is never fetched either ("network
    # operations not supported in virtual mode", pinned by the next test).
    @tag :known_issue
    test "a listed remote is cloned over the smart HTTP protocol", %{server: server, url: url} do
      s =
        Session.new(
          git: [remotes: [server.url <> "/"]],
          allow_net: [server.url],
          block_private_ips: false
        )

      result = run!(s, "git clone #{url} /work/p")
      assert result.exit_code == 0, inspect(result)
      assert {:ok, "# Project\n"} = Session.read_file(s, "/work/p/README.md")
      assert_received {:git_http_request, _, "GET", "/project.git/info/refs" <> _}
    end

    # What bashkit 0.20.2 does with a listed https URL: checks it, sends
    # nothing (no server listens at the address), says so (exit 128).
    test "a listed https remote passes the check and nothing is sent" do
      s =
        Session.new(
          git: [remotes: ["https://127.0.0.1:9/"]],
          allow_net: ["https://127.0.0.1:9"],
          block_private_ips: false
        )

      assert %Result{exit_code: 128, stderr: stderr} =
               run!(s, "git clone https://127.0.0.1:9/p.git /work/p")

      assert stderr =~ "passed allowlist validation"
      assert stderr =~ "not supported in virtual mode"
      assert {:error, _} = Session.read_file(s, "/work/p")
    end

    test "a local clone copies a repository of the session filesystem" do
      s = Session.new(git: @author)
      ok!(s, "git init -q /src && cd /src && echo a > a && git add a && git commit -q -m one")
      ok!(s, "git clone /src /dst")
      assert {:ok, "a\n"} = Session.read_file(s, "/dst/a")
      ok!(s, "cd /dst")
      assert [{_, _, "one"}] = log!(s)
    end
  end

  # What bashkit 0.20.2's git does not do (see ExBashkit.Git, "What does
  # not"). Upstream bugs, read in bashkit-0.20.2/src/builtins/git/client.rs:
  # a commit records message, author and the list of file names (`.git/commits`,
  # `.git/tracked`), never the contents. Each test is a minimal reproducer
  # asserting git's behaviour, so it fails with bashkit 0.20.2.
  describe "known issues of bashkit 0.20.2's git" do
    @describetag :known_issue

    setup do
      s = Session.new(git: @author, cwd: "/work")
      ok!(s, "git init -q && echo one > f && git add f && git commit -q -m one")
      %{s: s}
    end

    # bashkit 0.20.2, GitClient::diff: returns the constant
    # "# Diff output (simplified in virtual mode)\n".
    test "git diff shows an edit", %{s: s} do
      assert ok!(s, "echo two > f && git diff").stdout =~ "+two"
    end

    # bashkit 0.20.2, GitClient::status: `modified` is never filled.
    test "git status reports an edited tracked file", %{s: s} do
      assert ok!(s, "echo two > f && git status").stdout =~ "modified:"
    end

    # bashkit 0.20.2, GitClient::checkout: writes .git/HEAD, no file.
    test "checkout of another branch restores its files", %{s: s} do
      ok!(s, "git branch old && echo two > f && git commit -q -am two && git checkout old")
      assert {:ok, "one\n"} = Session.read_file(s, "/work/f")
    end

    # bashkit 0.20.2, GitClient::commit: always writes refs/heads/master and
    # prepends to the one `.git/commits` list every branch's log reads.
    test "a commit on a branch stays off master's log", %{s: s} do
      ok!(s, "git checkout -b topic && echo two > f && git commit -q -am two")
      assert ok!(s, "git checkout master && git log -n 1").stdout =~ "    one"
    end

    # bashkit 0.20.2, GitClient::commit: the hash is the Unix second XOR
    # 0xdeadbeef, so two commits within a second share it.
    test "two commits get two hashes", %{s: s} do
      ok!(s, "echo two > f && git commit -q -am two")
      assert [{a, _, "two"}, {b, _, "one"}] = log!(s)
      assert a != b
    end
  end
end
