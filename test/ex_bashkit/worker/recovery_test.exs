defmodule ExBashkit.Worker.RecoveryTest do
  # A durable session (the default) whose OS process dies comes back on a
  # new one as it was before the call in flight: files, env, cwd,
  # functions, aliases and its history's log. Not async: it reads the
  # store's size, which other tests' sessions grow.
  use ExUnit.Case, async: false

  alias ExBashkit.{Error, Result, Session, Store, Worker}
  alias ExBashkit.Test.{Health, HostDir}

  @moduletag :process_only
  @moduletag timeout: 120_000

  @crasher "jq -n 'def f(x): f(x+1); f(0)'"
  @state "export KEEP=1; cd /tmp; f() { echo fn; }; alias say=echo; echo data > /tmp/file"
  @check "echo $KEEP $X $(pwd) $(cat /tmp/file /tmp/more); f; say aliased"

  defp os_pid(%Session{location: {:process, name, _sid}}), do: Worker.os_pid(name)

  # Kill the session's OS process; return once another one runs.
  defp kill_process(session) do
    pid = os_pid(session)
    {_, 0} = System.cmd("kill", ["-9", "#{pid}"])
    Health.wait_until(fn -> os_pid(session) not in [nil, pid] end, 10_000, "a new process")
  end

  defp with_state(opts \\ []) do
    session = Session.new(opts)
    assert {:ok, %Result{exit_code: 0}} = Session.exec(session, @state)
    session
  end

  test "the exec that crashed its process answers :crashed; the next call finds everything as before it" do
    session = with_state()
    assert {:ok, commit} = Session.commit(session, %{step: "one"})
    assert {:ok, _} = Session.exec(session, "X=2; echo more > /tmp/more")
    before = os_pid(session)

    assert {:error, %Error{reason: :crashed}} = Session.run(session, @crasher, timeout_ms: 20_000)

    assert {:ok, %Result{stdout: "1 2 /tmp data more\nfn\naliased\n"}} =
             Session.exec(session, @check)

    refute os_pid(session) == before
    # The history is the session's as it was: its log, its head.
    assert {:ok, [%{id: ^commit, meta: %{"step" => "one"}}]} = Session.log(session)
    assert {:ok, %{created: ["/tmp/more"]}} = Session.diff(session, commit)
  end

  test "a process killed while its session is idle costs it nothing: no :lost, no call refused" do
    session = with_state()
    assert {:ok, _} = Session.exec(session, "X=2; echo more > /tmp/more")
    kill_process(session)

    assert {:ok, %Result{stdout: "1 2 /tmp data more\nfn\naliased\n"}} =
             Session.run(session, @check)

    # Recovered twice over: the recovered state is itself recoverable.
    assert {:ok, _} = Session.exec(session, "X=3")
    assert {:ok, commit} = Session.commit(session)
    kill_process(session)
    assert {:ok, %Result{stdout: "3\n"}} = Session.exec(session, "echo $X")
    assert {:ok, [%{id: ^commit}]} = Session.log(session)
  end

  test "files an exec moved, removed, linked, re-made and chmodded come back as they were" do
    session = with_state()

    assert {:ok, %Result{exit_code: 0}} =
             Session.exec(session, """
             mkdir -p /d/sub; echo a > /d/sub/a; echo b > /d/b; ln -s /e/b /d/link; chmod 600 /d/b
             """)

    assert {:ok, %Result{exit_code: 0}} =
             Session.exec(session, """
             mv /d /e; mkdir /d; echo new > /d/n; rm /e/sub/a; echo c > /e/sub/c; rm -r /tmp
             mkdir /tmp; echo back > /tmp/file
             """)

    listing = "ls -lR /d /e /tmp; cat /e/link /e/sub/c /d/n /tmp/file"
    assert {:ok, %Result{exit_code: 0, stdout: before}} = Session.exec(session, listing)
    kill_process(session)
    assert {:ok, %Result{exit_code: 0, stdout: ^before}} = Session.exec(session, listing)
  end

  test "a write through the filesystem functions is recoverable once it is answered" do
    session = with_state()
    assert :ok = Session.write_file(session, "/tmp/more", "written\n")
    assert :ok = Session.mkdir(session, "/made")
    kill_process(session)
    assert {:ok, "written\n"} = Session.read_file(session, "/tmp/more")
    assert {:ok, %{type: :dir}} = Session.stat(session, "/made")
    assert {:ok, %Result{stdout: "1\n"}} = Session.exec(session, "echo $KEEP")
  end

  test "a file brought back from the trash stays back" do
    session = with_state(soft_delete: true)
    assert {:ok, %Result{exit_code: 0}} = Session.exec(session, "rm /tmp/file")
    assert {:ok, [%{path: "/tmp/file"}]} = Session.trash(session)
    assert :ok = Session.undelete(session, "/tmp/file")
    kill_process(session)
    assert {:ok, "data\n"} = Session.read_file(session, "/tmp/file")
  end

  test "a restored snapshot and a checkout are what a crash comes back to" do
    session = with_state()
    {:ok, snapshot} = Session.snapshot(session)
    assert {:ok, commit} = Session.commit(session)
    assert {:ok, _} = Session.exec(session, "KEEP=changed; rm /tmp/file")

    assert {:ok, _} = Session.restore(session, snapshot)
    kill_process(session)

    assert {:ok, %Result{stdout: "1 data\n"}} =
             Session.exec(session, "echo $KEEP $(cat /tmp/file)")

    assert {:ok, _} = Session.exec(session, "KEEP=again")
    assert :ok = Session.checkout(session, commit)
    kill_process(session)
    assert {:ok, %Result{stdout: "1\n"}} = Session.exec(session, "echo $KEEP")
  end

  test "an exec that changed nothing stores nothing" do
    session = with_state()
    assert {:ok, _} = Session.exec(session, "X=1")
    size = Store.size()

    for _ <- 1..20,
        do:
          assert(
            {:ok, %Result{stdout: "1\n"}} =
              Session.exec(session, "echo $X; cat /tmp/file >/dev/null")
          )

    assert Store.size() == size
    # A changed variable stores no file again: its owner keeps the shell
    # state beside the last commit.
    assert {:ok, _} = Session.exec(session, "X=2")
    assert Store.size() == size
    kill_process(session)
    assert {:ok, %Result{stdout: "2 data\n"}} = Session.exec(session, "echo $X $(cat /tmp/file)")
  end

  test "durable: false keeps no point: a crash loses the state, and says so once" do
    session = with_state(durable: false)
    size = Store.size()
    assert {:ok, _} = Session.exec(session, "X=2; echo more > /tmp/more")
    assert Store.size() == size
    kill_process(session)

    assert {:error, %Error{reason: :lost}} = Session.run(session, "echo $KEEP")
    assert {:ok, %Result{stdout: "\n"}} = Session.exec(session, "echo $KEEP")
  end

  test "a reset session comes back as its configuration, not as its last point" do
    session = with_state(env: [FROM: "config"])
    assert :ok = Session.reset(session)
    kill_process(session)
    assert {:ok, %Result{stdout: "config\n"}} = Session.exec(session, "echo $FROM $KEEP")
  end

  test "a fork is as durable as its parent: both come back after their process died" do
    session = with_state()
    {:ok, fork} = Session.fork(session)
    assert {:ok, _} = Session.exec(fork, "X=forked; echo fork-only > /tmp/mine")
    assert {:ok, _} = Session.exec(session, "X=parent")
    assert os_pid(fork) == os_pid(session)

    kill_process(session)
    assert {:ok, %Result{stdout: "1 forked " <> _}} = Session.exec(fork, @check)
    assert {:ok, %Result{stdout: "fork-only\n"}} = Session.exec(fork, "cat /tmp/mine")
    assert {:ok, %Result{stdout: "1 parent " <> _}} = Session.exec(session, @check)
    assert {:error, _} = Session.read_file(session, "/tmp/mine")
  end

  test "runtime mounts and unmounts come back as they were, with or without a point" do
    granted = HostDir.create!(%{"a.txt" => "from new/1\n"})
    later = HostDir.create!(%{"b.txt" => "mounted later\n"})
    session = Session.new(mounts: [{"/granted", granted, :read_only}])
    :ok = Session.mount(session, "/later", later, :read_write)
    :ok = Session.unmount(session, "/granted")

    kill_process(session)
    assert {:ok, "mounted later\n"} = Session.read_file(session, "/later/b.txt")
    assert {:error, _} = Session.read_file(session, "/granted/a.txt")
    assert {:ok, _} = Session.exec(session, "echo written > /later/c.txt")
    assert File.read!(Path.join(later, "c.txt")) == "written\n"

    # Once the session has a point of its own, and after a reset (the
    # configuration's mounts again).
    kill_process(session)
    assert {:ok, "written\n"} = Session.read_file(session, "/later/c.txt")
    :ok = Session.reset(session)
    kill_process(session)
    assert {:ok, "from new/1\n"} = Session.read_file(session, "/granted/a.txt")
    assert {:error, _} = Session.read_file(session, "/later/b.txt")
  end
end
