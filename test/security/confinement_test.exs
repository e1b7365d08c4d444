defmodule ExBashkit.Security.ConfinementTest do
  # Each confinement layer of a worker OS process (`worker/confine.rs`),
  # checked from outside through /proc and from inside by
  # `ExBashkit.Worker.self_test/1`'s real attempts. CI runs as root: the
  # capability checks are the ones that matter there.
  use ExUnit.Case, async: true

  alias ExBashkit.{Session, Worker}
  alias ExBashkit.Session.Options
  alias ExBashkit.Test.{HostDir, HttpServer}

  @moduletag :process_only

  # A session's process stops with it: one kept for the rest of the test.
  defp held_session, do: held_session_with([])

  defp held_session_with(opts) do
    session = Session.new(opts)
    Process.put({:held_session, make_ref()}, session)
    session
  end

  defp worker_pid(session) do
    %{isolation: :process, os_pid: pid} = Session.info(session)
    assert is_integer(pid)
    pid
  end

  defp status(pid) do
    for line <- String.split(File.read!("/proc/#{pid}/status"), "\n"),
        [key, value] <- [String.split(line, ":\t", parts: 2)],
        into: %{},
        do: {key, String.trim(value)}
  end

  defp ns(pid, name), do: File.read_link!("/proc/#{pid}/ns/#{name}")
  defp vm, do: System.pid()

  test "Session.info/1 names the worker process and every layer it holds" do
    session = Session.new()
    info = Session.info(session)

    assert %{
             isolation: :process,
             group: nil,
             confinement: %{
               seccomp: true,
               landlock: true,
               no_new_privs: true,
               namespaces: namespaces,
               memory_limit: limit
             }
           } = info

    assert Enum.sort(namespaces) == Enum.sort([:user, :mount, :ipc, :uts, :network])
    assert is_integer(limit) and limit > 0
    assert File.read!("/proc/#{worker_pid(session)}/limits") =~ ~r/Max address space\s+#{limit}/
  end

  test "seccomp: the filter is in force and refuses exec and ptrace with EPERM" do
    pid = worker_pid(held_session())
    assert status(pid)["Seccomp"] == "2"
    assert {:ok, report} = Worker.self_test([])
    assert report.exec_binary == {:denied, :eperm}
    assert report.ptrace_parent == {:denied, :eperm}
  end

  test "seccomp: the interpreter still works under it" do
    session = Session.new()

    assert {:ok, %{stdout: "3\n", exit_code: 0}} =
             Session.exec(session, "mkdir -p /a && echo x > /a/f && seq 3 | wc -l")
  end

  test "landlock: without seccomp, Landlock alone refuses exec" do
    assert {:ok, %{exec_binary: {:denied, :eacces}}} = Worker.self_test(without: ["seccomp"])
  end

  test "no_new_privs and no capability in any set, though the VM may run as root" do
    status = status(worker_pid(held_session()))
    assert status["NoNewPrivs"] == "1"

    for set <- ~w(CapInh CapPrm CapEff CapBnd CapAmb) do
      assert status[set] == "0000000000000000", "#{set} is #{status[set]}"
    end
  end

  test "no core dumps" do
    assert File.read!("/proc/#{worker_pid(held_session())}/limits") =~
             ~r/Max core file size\s+0\s+0/
  end

  test "namespaces: user, mount, IPC, UTS and network of its own, apart from the VM's" do
    pid = worker_pid(held_session())

    for name <- ~w(user mnt ipc uts net) do
      refute ns(pid, name) == ns(vm(), name), "#{name} namespace is the VM's"
    end
  end

  test "network: no loopback without a grant; the VM's network with one" do
    assert {:ok, %{connect_loopback: {:denied, :enetunreach}}} = Worker.self_test([])

    server = HttpServer.start!()
    granted = Session.new(allow_net: [server.url], block_private_ips: false)
    assert ns(worker_pid(granted), "net") == ns(vm(), "net")
    refute ns(worker_pid(granted), "user") == ns(vm(), "user")
    assert {:ok, %{stdout: "served /"}} = Session.exec(granted, "curl -s #{server.url}/")
    assert :network not in Session.info(granted).confinement.namespaces

    assert {:ok, %{connect_loopback: :ok}} = Worker.self_test(allow_net: [server.url])
  end

  test "descriptors: only pipes and the runtime's own, never the VM's stderr" do
    pid = worker_pid(held_session())

    links =
      for fd <- File.ls!("/proc/#{pid}/fd"),
          into: %{},
          do: {String.to_integer(fd), File.read_link!("/proc/#{pid}/fd/#{fd}")}

    for fd <- 0..2, do: assert(links[fd] =~ ~r/^pipe:/, "fd #{fd} is #{links[fd]}")
    refute links[2] == File.read_link!("/proc/#{vm()}/fd/2")

    for {fd, link} <- links do
      assert link =~ ~r/^(pipe:|anon_inode:)/, "fd #{fd} is #{link}"
    end
  end

  test "temporary files: a small tmpfs of its own over /dev/shm, not the host's" do
    mounts = File.read!("/proc/#{worker_pid(held_session())}/mountinfo")

    [top | _] =
      for line <- String.split(mounts, "\n") |> Enum.reverse(), line =~ " /dev/shm ", do: line

    assert top =~ "nosuid,nodev,noexec"
    assert top =~ "tmpfs tmpfs rw,size=262144k,mode=700"
  end

  test "environment: empty" do
    assert File.read!("/proc/#{worker_pid(held_session())}/environ") == ""
  end

  test "host mounts work inside, read-only ones read-only" do
    dir = HostDir.create!(%{"in.txt" => "host"})
    rw = HostDir.create!(%{})
    session = Session.new(mounts: [{"/ro", dir, :read_only}, {"/rw", rw, :read_write}])

    assert {:ok, %{stdout: "host"}} = Session.exec(session, "cat /ro/in.txt")
    assert {:ok, %{exit_code: 0}} = Session.exec(session, "echo out > /rw/out.txt")
    assert File.read!(Path.join(rw, "out.txt")) == "out\n"
    assert {:ok, %{exit_code: code}} = Session.exec(session, "echo x > /ro/new.txt")
    assert code != 0

    late = HostDir.create!(%{"late.txt" => "later"})
    assert :ok = Session.mount(session, "/late", late, :read_only)
    assert {:ok, %{stdout: "later"}} = Session.exec(session, "cat /late/late.txt")
    assert {:ok, %{read_mount: :ok}} = Worker.self_test(mounts: [{"/ro", dir, :read_only}])
  end

  test "landlock: no host file or directory outside the mounts opens, a read-only mount is read-only" do
    dir = HostDir.create!(%{"in.txt" => "host"})
    assert {:ok, report} = Worker.self_test(mounts: [{"/ro", dir, :read_only}])
    assert report.open_host_file == {:denied, :eacces}
    assert report.open_host_dir == {:denied, :eacces}
    assert report.write_mount == {:denied, :eacces}
    assert report.read_mount == :ok

    # With no mount at all, nothing opens (the read-only stand-in aside).
    assert {:ok, %{open_host_file: {:denied, :eacces}, open_host_dir: {:denied, :eacces}}} =
             Worker.self_test([])
  end

  test "landlock: a runtime mount moves the session to a process granted it, state and all" do
    session = Session.new()

    assert {:ok, %{exit_code: 0}} =
             Session.exec(
               session,
               "export A=1; mkdir -p /w && cd /w && echo kept > f; g() { echo fun; }"
             )

    before = worker_pid(session)
    dir = HostDir.create!(%{"in.txt" => "host"})
    assert :ok = Session.mount(session, "/mnt", dir, :read_only)
    moved = worker_pid(session)
    refute moved == before
    refute File.exists?("/proc/#{before}")

    assert {:ok, %{stdout: "1 /w kept fun host\n"}} =
             Session.exec(session, ~s[echo "$A" "$PWD" "$(cat f)" "$(g)" "$(cat /mnt/in.txt)"])

    # The same grant again needs no move.
    assert :ok = Session.unmount(session, "/mnt")
    assert :ok = Session.mount(session, "/again", dir, :read_only)
    assert worker_pid(session) == moved
    assert {:ok, %{stdout: "host"}} = Session.exec(session, "cat /again/in.txt")
  end

  test "landlock: a move waits for the exec in flight, which keeps its answer" do
    session = Session.new()
    dir = HostDir.create!(%{"in.txt" => "host"})
    task = Task.async(fn -> Session.exec(session, "sleep 0.5; echo slept; export B=2") end)
    Process.sleep(100)
    assert :ok = Session.mount(session, "/mnt", dir, :read_write)
    assert {:ok, %{stdout: "slept\n"}} = Task.await(task)

    assert {:ok, %{stdout: "2 host\n"}} =
             Session.exec(session, ~s[echo "$B" "$(cat /mnt/in.txt)"])
  end

  test "landlock: a session that cannot move keeps its process, the mount refused" do
    session = held_session_with(durable: false)
    {:ok, _} = Session.exec(session, "export KEPT=yes")
    dir = HostDir.create!(%{"in.txt" => "host"})
    assert {:error, message} = Session.mount(session, "/mnt", dir, :read_only)
    assert message =~ "not granted the host directory"
    assert message =~ "durable: false"
    assert {:ok, %{stdout: "yes\n"}} = Session.exec(session, "echo $KEPT")

    # Granted at new/1, the mount works without a move.
    granted = Session.new(durable: false, mounts: [{"/mnt", dir, :read_only}])
    assert {:ok, %{stdout: "host"}} = Session.exec(granted, "cat /mnt/in.txt")
  end

  test "require_confinement: a worker missing a layer builds no session, naming it" do
    name = :"confinement_test_#{System.unique_integer([:positive])}"
    start_supervised!({Worker, name: name, require_confinement: true, without: ["seccomp"]})
    worker = Process.whereis(name)
    native = Options.parse_default!().native

    assert {:error, message} = Worker.call(worker, {:new, 1, native})
    assert message =~ "require_confinement"
    assert message =~ "seccomp"
    assert %{seccomp: false, landlock: true} = Worker.call(worker, {:confinement})
  end

  test "a missing layer is only reported unless confinement is required" do
    name = :"confinement_test_#{System.unique_integer([:positive])}"
    start_supervised!({Worker, name: name, without: ["landlock"]})
    worker = Process.whereis(name)
    native = Options.parse_default!().native

    assert :ok = Worker.call(worker, {:new, 1, native})

    assert %{landlock: false, seccomp: true, missing: [missing]} =
             Worker.call(worker, {:confinement})

    assert missing =~ "landlock"
  end
end
