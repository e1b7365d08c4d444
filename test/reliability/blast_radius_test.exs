defmodule ExBashkit.Reliability.BlastRadiusTest do
  # Scripts that crash, exhaust or wedge the interpreter (bashkit 0.20.2
  # bugs in its bundled commands) run in a worker OS process: each must be
  # answered within its deadline plus a small bound, the node and the other
  # worker must not notice, and the sessions of the worker that died must be
  # rebuilt (saying once that their state was lost) and usable.
  #
  # The memory bombs run under the test configuration's 1 GiB cap per worker
  # (config/config.exs), so a regression cannot take the machine's memory.
  # Not async: these kill workers other tests' sessions live on.
  use ExUnit.Case, async: false

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.Health

  @moduletag :process_only
  @moduletag timeout: 180_000

  @deadline 1_500
  # Answer by deadline + slack (1 s) + scheduling noise on a loaded CI box.
  @bound 3_000

  @loops [
    max_loop_iterations: 10 ** 15,
    max_total_loop_iterations: 10 ** 15,
    max_commands: 10 ** 15
  ]

  # A command that runs for minutes without reaching a command boundary and
  # that no up-front check refuses (`policy/bombs.rs` refuses the others of
  # the blast-radius issue in both modes: `bombs_in_node_test.exs`): an
  # endless awk loop, in a session whose loop limits are raised.
  @hang "echo before; awk 'BEGIN { for (;;); }'"

  # {what, script, session options}: each row of the blast-radius issue
  # that no up-front check refuses.
  @rows [
    {"jq infinite recursion (stack overflow)", "jq -n 'def f(x): f(x+1); f(0)'", []},
    {"jq tojson of a 100 000-deep array (stack overflow)",
     "jq -n 'reduce range(100000) as $i (null; [.]) | tojson'", []},
    {"jq 40 000-deep array (memory ∝ depth²)", "jq -n 'reduce range(40000) as $i (null; [.])'",
     []},
    {"awk endless loop with loop limits raised", "awk 'BEGIN{for(;;);}'", limits: @loops},
    {"jq reduce over 10^18 (late cancel)", "jq -n 'reduce range(1e18) as $x (0; .)'", []},
    {"python 3 ** 63 000 000 (late cancel)", "python3 -c 'x = 3 ** 63000000'", python: true}
  ]

  for {what, script, opts} <- @rows do
    test "#{what}: answered by its deadline, the node and the other worker untouched" do
      # A neighbour in the victim's process: one of its group.
      group = {:blast, make_ref()}
      victim = Session.new([isolation: :process, group: group] ++ unquote(Macro.escape(opts)))
      assert {:ok, _} = Session.exec(victim, "export KEEP=1")
      neighbour = Session.new(isolation: :process, env: [KEEP: "kept"], group: group)
      assert worker(neighbour) == worker(victim)
      elsewhere = session_where(&(worker(&1) != worker(victim)))

      task = Task.async(fn -> Session.run(victim, unquote(script), timeout_ms: @deadline) end)

      assert {:ok, outcome} = Task.yield(task, @deadline + @bound) || Task.shutdown(task),
             "no answer within #{@deadline + @bound} ms"

      assert {:error, %{message: message}} = outcome
      assert message =~ ~r/timed out|crashed/, message

      # The other worker's sessions never noticed.
      assert {:ok, %Result{stdout: "kept\n"}} = Session.exec(elsewhere, "echo $KEEP")

      # The worker's own sessions come back, saying at most once (per
      # pending call) that their state was lost.
      assert_recovers(victim)
      assert_recovers(neighbour)
      Health.assert_healthy!()
    end
  end

  test "eight sed expansions of ~1 GB each at once: each answered, the node healthy" do
    script = "printf '%9000s' | sed 's/ /#{String.duplicate("x", 1000)}/g; s/x/zz/g' | wc -c"

    outcomes =
      1..8
      |> Task.async_stream(
        fn _ -> Session.run(Session.new(isolation: :process), script, timeout_ms: 10_000) end,
        max_concurrency: 8,
        timeout: 10_000 + @bound
      )
      |> Enum.map(fn {:ok, outcome} -> outcome end)

    for outcome <- outcomes do
      case outcome do
        {:ok, %Result{}} -> :ok
        {:error, %{message: message}} -> assert message =~ ~r/crashed|timed out|limit/, message
      end
    end

    # A sed answered "timed out" runs on in its worker until it stops or the
    # worker is killed, `:worker_kill_grace_ms` later: a health check sent
    # to that worker meanwhile is lost with it, as documented. Judge the
    # node once that is over.
    Health.wait_until(
      fn -> Enum.all?(ExBashkit.WorkerPool.workers(), &nothing_overdue?/1) end,
      10_000,
      "every worker to be rid of its scripts past their deadline"
    )

    Health.assert_healthy!()
  end

  test "cancel/1 of a script that never reaches a command boundary answers promptly, with its output" do
    victim = Session.new(isolation: :process, limits: @loops)
    hang = @hang
    parent = self()
    task = Task.async(fn -> Session.run(victim, hang, stream_to: parent) end)
    # Cancelled once `awk` runs: a cancel before it stops the script at a
    # command boundary, the usual way.
    assert_receive {:ex_bashkit_output, {:stdout, "before\n"}}, 10_000
    assert Session.cancel(victim) == :ok

    assert {:ok, {:error, error}} = Task.yield(task, @bound) || Task.shutdown(task)
    assert %ExBashkit.Error{reason: :cancelled, stdout: "before\n"} = error
    assert_recovers(victim)
  end

  # A session without a timeout of its own has bashkit's default (30 s),
  # which its interpreter applies; the worker's owner must answer by it
  # too, or a command that never reaches a command boundary would never be
  # answered. (A long command such as awk runs on a thread of its own,
  # whose output so far the worker's reading thread does not see yet: the
  # streamed case below keeps it.)
  test "with no timeout given, a script that never stops is answered by bashkit's default deadline" do
    deadline = ExBashkit.Session.Defaults.bashkit_limit(:timeout_ms)
    hang = @hang
    session = Session.new(isolation: :process, limits: @loops)
    in_session = Task.async(fn -> Session.run(session, hang) end)
    one_shot = Task.async(fn -> ExBashkit.run(hang, limits: @loops) end)

    for task <- [in_session, one_shot] do
      assert {:ok, {:error, error}} = Task.yield(task, deadline + @bound) || Task.shutdown(task)
      assert %ExBashkit.Error{reason: :timeout} = error
    end

    assert_recovers(session)
  end

  # The worker OS process answers a timed-out exec itself, with the output
  # so far. When it cannot, its owner answers at the deadline plus a slack,
  # with the output so far that the worker's reading thread reports; when
  # that thread cannot answer either (the OS process gets no CPU, here it
  # is stopped), a streaming exec's error still carries what was streamed.
  test "a stream whose worker is frozen past its deadline ends with the output it streamed" do
    victim = Session.new(isolation: :process)
    os_pid = ExBashkit.Worker.os_pid(worker(victim))
    parent = self()

    consumer =
      Task.async(fn ->
        victim
        |> Session.stream("echo one; echo err >&2; sleep 30", timeout_ms: 300)
        |> Enum.map(fn event ->
          if match?({:stderr, _}, event), do: send(parent, :streamed)
          event
        end)
      end)

    assert_receive :streamed, 10_000
    {_, 0} = System.cmd("kill", ["-STOP", "#{os_pid}"])

    try do
      assert {:ok, events} = Task.yield(consumer, @bound) || Task.shutdown(consumer)

      # stream/3 ends with the message (the output was streamed already).
      assert [{:stdout, "one\n"}, {:stderr, "err\n"}, {:error, message}] = events
      assert message =~ "timed out"
    after
      System.cmd("kill", ["-CONT", "#{os_pid}"])
    end

    assert_recovers(victim)
  end

  # An exec timed out by its session's own timeout may not be due when its
  # owner asks about it: that timeout counts from its start, and it waited
  # for its turn. A reading thread too late to say so (here the OS process
  # is stopped across the question and the wait for its answer) is asked
  # again later: the exec is answered by itself, not as timed out.
  test "an exec that waited for its turn is not timed out while its worker cannot say so" do
    session = Session.new(isolation: :process, limits: [timeout_ms: 4_000])
    os_pid = ExBashkit.Worker.os_pid(worker(session))
    submitted = System.monotonic_time(:millisecond)
    {:ok, first} = Session.exec_async(session, "sleep 2.8; echo first")
    second = Task.async(fn -> Session.exec(session, "sleep 2.8; echo second") end)

    # The second runs from 2.8 s to 5.6 s; its owner asks about it at 5 s
    # (the deadline plus the slack) and gives the reading thread until
    # 5.2 s. Stopped from 4.7 s to 5.35 s, it still ends 1.2 s within its
    # limit.
    Process.sleep(max(4_700 - (System.monotonic_time(:millisecond) - submitted), 0))
    {_, 0} = System.cmd("kill", ["-STOP", "#{os_pid}"])

    try do
      Process.sleep(650)
    after
      System.cmd("kill", ["-CONT", "#{os_pid}"])
    end

    assert {:ok, {:ok, %Result{stdout: "second\n"}}} = Task.yield(second, 5_000)
    assert_receive {:ex_bashkit, ^first, {:ok, %Result{stdout: "first\n"}}}, 1_000
  end

  test "a caller killed mid-exec frees the worker: the session serves the next caller" do
    victim = Session.new(isolation: :process)
    {pid, ref} = spawn_monitor(fn -> Session.exec(victim, "sleep 30") end)
    Health.wait_until(fn -> match?({_, true, _}, info(victim)) end, 10_000, "the sleep to run")
    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, :killed}

    task = Task.async(fn -> Session.exec(victim, "echo next") end)

    assert {:ok, {:ok, %Result{stdout: "next\n"}}} =
             Task.yield(task, 5_000) || Task.shutdown(task)
  end

  # Call ids are counted per worker OS process, from 1: the answer to a
  # back-call of a worker that died must not reach the worker started in its
  # place, where another session's back-call may wait under the same id.
  test "an answer to a back-call of a crashed worker never reaches the next one" do
    {a, c} = sessions_on_one_worker()
    name = worker(a)

    # A fresh OS process: its first back-call is number 1.
    kill_worker_process(name)
    assert_recovers(a)
    assert_recovers(c)

    first = Task.async(fn -> Session.run(a, "slow") end)
    assert_receive {:slow, slow_handler}, 5_000

    # The first caller holds the handler's answer unread while its worker
    # dies and a new one takes the other session's back-call number 1.
    :erlang.suspend_process(first.pid)
    handler_ref = Process.monitor(slow_handler)
    send(slow_handler, :go)
    assert_receive {:DOWN, ^handler_ref, :process, _, _}
    kill_worker_process(name)
    assert_recovers(c)

    second = Task.async(fn -> Session.run(c, "ask") end)
    assert_receive {:ask, ask_handler}, 5_000

    :erlang.resume_process(first.pid)
    assert {:error, %{reason: :crashed}} = Task.await(first, 5_000)
    send(ask_handler, :go)
    assert {:ok, %Result{stdout: "its own answer\n"}} = Task.await(second, 5_000)
  end

  defp sessions_on_one_worker do
    test = self()

    waiting_builtin = fn tag, answer ->
      fn _call ->
        send(test, {tag, self()})
        receive do: (:go -> {:ok, answer})
      end
    end

    group = {:one_worker, make_ref()}

    a =
      Session.new(
        isolation: :process,
        group: group,
        builtins: %{"slow" => waiting_builtin.(:slow, "a stale answer\n")}
      )

    c =
      session_where(&(worker(&1) == worker(a)),
        isolation: :process,
        group: group,
        builtins: %{"ask" => waiting_builtin.(:ask, "its own answer\n")}
      )

    {a, c}
  end

  # Kill the worker's OS process; return once its owner has started another.
  defp kill_worker_process(name) do
    os_pid = ExBashkit.Worker.os_pid(name)
    {_, 0} = System.cmd("kill", ["-9", "#{os_pid}"])

    Health.wait_until(
      fn -> ExBashkit.Worker.os_pid(name) not in [nil, os_pid] end,
      10_000,
      "a new worker process"
    )
  end

  test "a session with durable: false whose idle worker died says :lost, once (a reason set, not read from words)" do
    s = Session.new(isolation: :process, env: [KEEP: "kept"], durable: false)
    assert {:ok, _} = Session.exec(s, "x=1")
    kill_worker_process(worker(s))

    assert {:error, %ExBashkit.Error{reason: :lost, message: "session lost" <> _}} =
             Session.run(s, "echo $x")

    assert {:ok, %Result{stdout: "kept\n"}} = Session.exec(s, "echo $KEEP")
  end

  test "the worker runs with a cleared environment, in /, below the VM's priority" do
    s = Session.new(isolation: :process)
    assert {:ok, _} = Session.exec(s, "true")
    os_pid = ExBashkit.Worker.os_pid(elem(s.location, 1))
    assert is_integer(os_pid)

    environ = File.read!("/proc/#{os_pid}/environ")
    assert environ == ""
    assert {:ok, "/"} = File.read_link("/proc/#{os_pid}/cwd")
    stat = File.read!("/proc/#{os_pid}/stat")
    # Field 19 of /proc/PID/stat is the nice value (after the command name).
    [_, after_comm] = String.split(stat, ") ", parts: 2)
    nice = after_comm |> String.split(" ") |> Enum.at(16) |> String.to_integer()
    assert nice > 0
    status = File.read!("/proc/#{os_pid}/status")
    assert status =~ ~r/NoNewPrivs:\s+1/
    assert File.read!("/proc/#{os_pid}/oom_score_adj") |> String.trim() == "1000"
    # The process is the session's own: held until here, it is the one read.
    assert ExBashkit.Worker.os_pid(worker(s)) == os_pid
  end

  defp worker(%Session{location: {:process, name, _sid}}), do: name

  # A session's own worker stops with it: one gone has nothing overdue.
  defp nothing_overdue?(worker) do
    :sys.get_state(worker).overdue == %{}
  catch
    :exit, _ -> true
  end

  defp info(session), do: ExBashkit.Backend.info(session.resource, session.location)

  # A session made with `opts` (by default, in a worker with KEEP=kept)
  # that satisfies `pred` (a few tries).
  defp session_where(pred, opts \\ [isolation: :process, env: [KEEP: "kept"]]) do
    Enum.find_value(1..10, fn _ ->
      s = Session.new(opts)
      if pred.(s), do: s
    end) || flunk("no session on the wanted worker")
  end

  defp assert_recovers(session, tries \\ 3) do
    case Session.run(session, "echo alive") do
      {:ok, %Result{stdout: "alive\n"}} ->
        :ok

      {:error, %{message: message}} when tries > 0 ->
        assert message =~ ~r/session lost|crashed|timed out/, message
        assert_recovers(session, tries - 1)
    end
  end
end
