defmodule ExBashkit.Session.HistoryTest do
  # Not async: the store-size test reads the node's whole store and runs
  # its collector.
  use ExBashkit.Test.Case, async: false

  alias ExBashkit.{Session, Store}

  @state ~S"""
  mkdir -p /work/sub && cd /work/sub
  echo one > /work/a.txt
  export GREETING=hello
  plain=kept
  greet() { echo "hi $1"; }
  alias ll='echo from-alias'
  """

  @dump ~S"""
  cat /work/a.txt; echo "$GREETING $plain"; greet you; ll; pwd; ls /work
  """

  defp dump(session), do: out(session, @dump)

  test "checkout brings back files, env, variables, cwd, functions and aliases" do
    session = Session.new()
    ok!(session, @state)
    before = dump(session)
    assert {:ok, id} = Session.commit(session, %{message: "before"})
    assert id =~ ~r/\A[0-9a-f]{64}\z/

    ok!(
      session,
      "echo two > /work/a.txt; touch /work/new; unset GREETING plain; unset -f greet; unalias ll; cd /"
    )

    refute dump(session) == before

    assert :ok = Session.checkout(session, id)
    assert dump(session) == before
  end

  test "an unknown or malformed commit id is refused and changes nothing" do
    session = Session.new()
    ok!(session, "echo kept > /f")
    assert {:error, message} = Session.checkout(session, String.duplicate("ab", 32))
    assert message =~ "no commit"
    assert out(session, "cat /f") == "kept\n"
    assert_raise ArgumentError, fn -> Session.checkout(session, "HEAD") end
  end

  test "a commit made with capabilities this session lacks is refused and changes nothing" do
    with_python = Session.new(python: true)
    ok!(with_python, "echo py > /f")
    {:ok, id} = Session.commit(with_python)

    plain = Session.new()
    ok!(plain, "echo mine > /f")
    assert {:error, message} = Session.checkout(plain, id)
    assert message =~ "capabilities"
    assert out(plain, "cat /f") == "mine\n"
  end

  test "a tampered object in the store is refused whole" do
    session = Session.new()
    ok!(session, "echo original > /f")
    {:ok, id} = Session.commit(session)
    ok!(session, "echo later > /f")

    # Swap the content of the commit's shell-state object for other bytes:
    # its id no longer matches its hash.
    [shell | _] = Map.fetch!(Store.refs([id]), id)
    %{^shell => blob} = Store.get([shell])
    [{^shell, _, refs}] = :ets.lookup(ExBashkit.Store.ETS, shell)
    :ets.insert(ExBashkit.Store.ETS, {shell, blob <> "x", refs})

    try do
      assert {:error, message} = Session.checkout(session, id)
      assert message =~ "invalid commit"
      assert out(session, "cat /f") == "later\n"
    after
      :ets.insert(ExBashkit.Store.ETS, {shell, blob, refs})
    end
  end

  test "log is newest first, with parents, meta and the time of each commit" do
    session = Session.new()
    {:ok, first} = Session.commit(session, %{message: "first", n: 1})
    ok!(session, "echo x > /x")
    {:ok, second} = Session.commit(session, %{"message" => "second"})

    assert {:ok, [newest, oldest]} = Session.log(session)
    assert %{id: ^second, parents: [^first], meta: %{"message" => "second"}} = newest
    assert %{id: ^first, parents: [], meta: %{"message" => "first", "n" => "1"}} = oldest
    assert %DateTime{} = newest.at
    assert DateTime.compare(newest.at, oldest.at) in [:gt, :eq]
    assert {:ok, [%{id: ^second}]} = Session.log(session, limit: 1)
    assert_raise ArgumentError, fn -> Session.log(session, limit: 0) end
    assert_raise ArgumentError, fn -> Session.commit(session, %{"m" => %{}}) end
  end

  test "after a checkout, log is the checked-out commit's history" do
    session = Session.new()
    {:ok, a} = Session.commit(session)
    ok!(session, "echo b > /b")
    {:ok, _b} = Session.commit(session)
    :ok = Session.checkout(session, a)
    ok!(session, "echo c > /c")
    {:ok, c} = Session.commit(session)
    assert {:ok, [%{id: ^c, parents: [^a]}, %{id: ^a}]} = Session.log(session)
  end

  test "diff lists created, modified and deleted paths, sorted, between commits and to now" do
    session = Session.new()
    ok!(session, "echo 1 > /keep; echo 1 > /change; echo 1 > /gone")
    {:ok, from} = Session.commit(session)
    ok!(session, "echo 2 > /change; rm /gone; echo z > /zz; echo a > /aa")
    {:ok, to} = Session.commit(session)

    assert {:ok, %{created: ["/aa", "/zz"], modified: ["/change"], deleted: ["/gone"]}} =
             Session.diff(session, from, to)

    ok!(session, "rm /zz; echo 3 > /keep")

    assert {:ok, %{created: [], modified: ["/keep"], deleted: ["/zz"]}} =
             Session.diff(session, to)

    assert {:ok, %{created: [], modified: [], deleted: []}} = Session.diff(session, to, to)
    assert {:error, _} = Session.diff(session, String.duplicate("0", 64))
  end

  test "fork makes an independent session in the same state, or in an older one" do
    session = Session.new(env: %{"FROM" => "new"})
    ok!(session, @state)
    {:ok, old} = Session.commit(session)
    ok!(session, "echo two > /work/a.txt")
    now = dump(session)

    assert {:ok, fork} = Session.fork(session)
    assert dump(fork) == now
    ok!(fork, "echo fork > /work/a.txt; plain=forked")
    assert dump(session) == now

    assert {:ok, older} = Session.fork(session, commit: old)
    assert out(older, "cat /work/a.txt") == "one\n"
  end

  test "a fork has its parent's files as they are, modes, times, links and deletions included" do
    session = Session.new(files: %{"/seed/gone" => "seed", "/seed/kept" => "kept"})

    ok!(session, """
    rm /seed/gone; mkdir -p /empty/dir; chmod 700 /empty
    printf 'x' > /work.bin; chmod 640 /work.bin; touch -d '2001-02-03 04:05:06' /work.bin
    ln -s /work.bin /link
    """)

    listing = "ls -la --full-time /empty /seed; stat -c '%a %s %Y' /work.bin; readlink /link"
    before = out(session, listing)
    assert {:ok, fork} = Session.fork(session)
    assert out(fork, listing) == before
    assert {:error, _} = Session.stat(fork, "/seed/gone")
  end

  test "a fork and its parent share nothing they write; a later fork sees the parent's change" do
    big = :crypto.strong_rand_bytes(256 * 1024)
    session = Session.new(files: %{"/data/big" => big})
    ok!(session, "echo parent > /note; X=1")
    {:ok, one} = Session.fork(session)
    {:ok, two} = Session.fork(session)

    ok!(session, "echo changed > /note; echo more >> /data/big")
    ok!(one, "echo one > /note; X=2")
    assert out(two, "cat /note; echo $X") == "parent
1
"
    assert out(one, "cat /note; echo $X") == "one
2
"
    assert out(session, "cat /note; echo $X") == "changed
1
"
    assert {:ok, ^big} = Session.read_file(two, "/data/big")
    assert {:ok, big <> "more
"} == Session.read_file(session, "/data/big")

    {:ok, three} = Session.fork(session)
    assert out(three, "cat /note") == "changed
"
  end

  test "a fork keeps its parent's log and commits on its own" do
    session = Session.new()
    ok!(session, "echo 1 > /f")
    {:ok, first} = Session.commit(session, %{step: "1"})
    ok!(session, "echo 2 > /f")
    {:ok, fork} = Session.fork(session)
    assert Session.log(fork) == Session.log(session)

    {:ok, own} = Session.commit(fork, %{step: "fork"})
    assert {:ok, [%{id: ^own, parents: [^first]} | _]} = Session.log(fork)
    assert {:ok, [%{id: ^first}]} = Session.log(session)
    assert {:ok, %{modified: ["/f"]}} = Session.diff(fork, first, own)
    assert :ok = Session.checkout(fork, first)
    assert out(fork, "cat /f") == "1\n"
    assert out(session, "cat /f") == "2\n"
  end

  test "a commit after a change of shell state alone holds it; after a write or a reset, the files" do
    session = Session.new(files: %{"/seed" => "s"})
    ok!(session, "echo 1 > /f")
    {:ok, files} = Session.commit(session)
    ok!(session, "X=shell-only; cd /tmp")
    {:ok, shell} = Session.commit(session)
    assert {:ok, %{created: [], modified: [], deleted: []}} = Session.diff(session, files, shell)

    :ok = Session.write_file(session, "/f", "2")
    {:ok, written} = Session.commit(session)
    assert {:ok, %{modified: ["/f"]}} = Session.diff(session, shell, written)

    :ok = Session.reset(session)
    {:ok, reset} = Session.commit(session)
    assert {:ok, %{deleted: ["/f"]}} = Session.diff(session, written, reset)

    :ok = Session.checkout(session, shell)
    assert out(session, "echo $X; pwd; cat /f /seed") == "shell-only\n/tmp\n1\ns"
  end

  test "a checkout can itself be undone while the session keeps the commit" do
    session = Session.new()
    ok!(session, "echo 1 > /f")
    {:ok, one} = Session.commit(session)
    ok!(session, "echo 2 > /f")
    {:ok, two} = Session.commit(session)
    :ok = Session.checkout(session, one)
    {:ok, _} = Store.gc()
    :ok = Session.checkout(session, two)
    assert out(session, "cat /f") == "2\n"
  end

  test "repeated commits of a changing session do not grow the store past the log's bound" do
    session = Session.new()
    limit = Store.history_limit()
    {:ok, _} = Store.gc()

    grow = fn n ->
      for i <- 1..n do
        ok!(session, "seq #{i} #{i + 3000} > /data; echo #{i} > /small")
        {:ok, _} = Session.commit(session)
      end

      {:ok, _} = Store.gc()
      Store.size()
    end

    at_bound = grow.(limit)
    past_bound = grow.(limit)

    # A second round of as many commits frees what fell out of the log:
    # the store holds about the same, not twice as much.
    assert past_bound.objects <= at_bound.objects + 10
    assert {:ok, log} = Session.log(session)
    assert length(log) == limit

    # A session that is gone keeps nothing.
    _ = session
  end

  test "commit waits for a running script and captures its effects" do
    session = Session.new()
    task = Task.async(fn -> Session.exec(session, "sleep 0.2; echo late > /late") end)
    wait_until_running(session)
    {:ok, id} = Session.commit(session)
    {:ok, _} = Task.await(task)
    ok!(session, "rm /late")
    :ok = Session.checkout(session, id)
    assert out(session, "cat /late") == "late\n"
  end

  test "a session over a base image is refused, not half committed" do
    {:ok, image} = ExBashkit.Image.build(files: %{"/app/base.txt" => "from image"})
    session = Session.new(base: image)
    assert {:error, message} = Session.commit(session)
    assert message =~ ":base image"
  end
end
