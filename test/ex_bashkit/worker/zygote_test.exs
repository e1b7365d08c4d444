defmodule ExBashkit.Worker.ZygoteTest do
  # Session processes are forked by the zygote: read from /proc, they are
  # its children; their pipes close (and they end) with their sessions; a
  # crash still tells its exit status; the zygote's own end costs no session
  # its process; and nothing but the VM can ask it for a process. Not
  # async: it counts the VM's descriptors and kills the zygote.
  use ExUnit.Case, async: false

  alias ExBashkit.{Error, Session, Worker}
  alias ExBashkit.Test.Health

  @moduletag :process_only

  defp os_pid(%Session{location: {:process, name, _sid}}), do: Worker.os_pid(name)

  defp parent(pid) do
    [ppid] =
      Regex.run(~r/^PPid:\s+(\d+)/m, File.read!("/proc/#{pid}/status"), capture: :all_but_first)

    String.to_integer(ppid)
  end

  defp cmdline(pid), do: "/proc/#{pid}/cmdline" |> File.read!() |> String.split(<<0>>, trim: true)

  # The zygote's parent is the VM's port spawner (`erl_child_setup`).
  defp zygote_of(session) do
    zygote = parent(os_pid(session))
    assert ["--zygote"] = cmdline(zygote) |> Enum.drop(1)
    assert parent(parent(zygote)) == String.to_integer(System.pid())
    zygote
  end

  defp fd_count, do: length(File.ls!("/proc/self/fd"))

  test "a session's process is a child of the zygote the VM started" do
    session = Session.new()
    assert {:ok, %{stdout: "hi\n"}} = Session.exec(session, "echo hi")
    assert is_integer(zygote_of(session))
  end

  test "a session's pipes close with it: no descriptor of the VM's and no process is left" do
    Session.new() |> Session.exec("true")
    before = fd_count()

    pids =
      Task.async(fn ->
        for _ <- 1..30 do
          session = Session.new()
          {:ok, _} = Session.exec(session, "echo hi")
          os_pid(session)
        end
      end)
      |> Task.await(60_000)

    :erlang.garbage_collect()

    Health.wait_until(
      fn -> Enum.all?(pids, &(not File.exists?("/proc/#{&1}"))) end,
      10_000,
      "every session's process ended"
    )

    # Two a session if they leaked; a few may be the spare process's or
    # the runtime's own.
    Health.wait_until(fn -> fd_count() < before + 8 end, 10_000, "the VM's descriptors released")
  end

  test "a process killed mid-exec: the exec says how it ended" do
    session = Session.new(durable: false)
    task = Task.async(fn -> Session.run(session, "sleep 30") end)
    pid = os_pid(session)
    Health.wait_until(fn -> inspect(session) =~ "status: :running" end, 5_000, "running")
    {_, 0} = System.cmd("kill", ["-9", "#{pid}"])

    assert {:error, %Error{reason: reason, message: message}} = Task.await(task, 15_000)
    assert reason in [:crashed, :lost]
    assert message =~ "exit status 137"
  end

  test "the zygote's end costs no session its process or state; sessions still start" do
    session = Session.new()
    assert {:ok, _} = Session.exec(session, "export KEEP=kept")
    pid = os_pid(session)
    zygote = zygote_of(session)

    {_, 0} = System.cmd("kill", ["-9", "#{zygote}"])
    Health.wait_until(fn -> not File.exists?("/proc/#{zygote}/cmdline") end, 5_000, "zygote gone")

    assert {:ok, %{stdout: "kept\n"}} = Session.exec(session, "echo $KEEP")
    assert os_pid(session) == pid

    # A spare the old zygote forked may serve the first new session.
    Health.wait_until(
      fn ->
        fresh = Session.new()
        {:ok, %{stdout: "hi\n"}} = Session.exec(fresh, "echo hi")
        forker = parent(os_pid(fresh))
        forker != zygote and match?([_, "--zygote"], cmdline(forker))
      end,
      10_000,
      "a new zygote forks new sessions"
    )
  end

  # Another OS process (a program the VM itself started, so of its user
  # and its network namespace) connects to the zygote's socket and sends a
  # request, two descriptors included, without the zygote's token: no answer.
  test "only the VM can ask the zygote for a process" do
    session = Session.new()
    {:ok, _} = Session.exec(session, "true")
    zygote = zygote_of(session)

    script = """
    import os, socket, sys
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect("\\0ex_bashkit_zygote." + sys.argv[1])
    r, w = os.pipe()
    socket.send_fds(s, [b"--self-test"], [r, w])
    s.settimeout(5)
    try:
        print("answered" if s.recv(4) else "refused")
    except ConnectionResetError:
        print("refused")
    """

    assert {"refused\n", 0} = System.cmd("python3", ["-c", script, "#{zygote}"])
  end
end
