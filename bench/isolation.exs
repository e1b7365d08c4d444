# The two isolation modes side by side, against raw bashkit measured in the
# same run: `scripts/bench-isolation` (it builds bench/raw first), or
# `MIX_ENV=prod mix run bench/isolation.exs [--quick] [--out FILE]`.
#
# Figures (the blast-radius issue's goals for `isolation: :process`):
#   * `Session.exec("echo hi")` median, each mode, and raw bashkit's exec;
#   * `ExBashkit.exec("echo hi")` median, each mode, and raw new+exec;
#   * builtin round trip (script → Elixir fun → script), each mode;
#   * total execs/s with 64 sessions, each mode (goal: process ≥ 0.8× in-node);
#   * memory: RSS of an idle worker, and per idle session in one process
#     (a group's);
#   * the runner's fairness in each mode (issue 12): while 64 sessions run a
#     CPU-heavy loop, an unrelated `Session.exec("echo hi")` (p99) and how
#     late `Process.sleep(1)` wakes (p99); in process mode each of the 64
#     has a process of its own, so this is the fairness between processes;
#   * a process per session (issue 67): `Session.new/1` median with the
#     spare ready (a pause between) and back to back, the PSS of an idle
#     session's process, and N sessions alive at once each in its own
#     process, every one answering (how long that took, their PSS in all
#     and a process's share: PSS divides shared pages among their sharers).
# Writes bench/isolation.md.

for file <- ~w(stats sampler raw memory), do: Code.require_file("lib/#{file}.exs", __DIR__)

defmodule Bench.Isolation do
  alias Bench.{Sampler, Stats}
  import Bench.Memory, only: [rss_kb: 1, loadavg: 0]
  alias ExBashkit.Session

  @echo "echo hi"
  @modes [:in_node, :process]
  # Rounds of one session then two, in turn, for the 2 / 1 ratio: a round
  # of one session takes a quarter of a second in the node, so one slow
  # moment of the host would move a single pair by tens of percent.
  @scaling_rounds 5

  def main(argv) do
    {opts, _, _} = OptionParser.parse(argv, strict: [quick: :boolean, out: :string])
    quick? = Keyword.get(opts, :quick, false)
    out = Keyword.get(opts, :out, "bench/isolation.md")
    load_before = loadavg()

    raw =
      if Bench.Raw.available?(),
        do: Bench.Raw.run(["echo"], quick?),
        else: []

    rows =
      for mode <- @modes do
        IO.puts(:stderr, "==> #{mode}")
        {mode, measure(mode, quick?)}
      end

    memory = worker_memory(if quick?, do: 200, else: 2_000)
    Application.put_env(:ex_bashkit, :isolation, :process)
    own = own_processes(quick?)
    report = render(raw, rows, memory, own, load_before, loadavg(), quick?)
    File.write!(out, report)
    IO.puts(report)
  end

  defp measure(mode, quick?) do
    budget = fn b -> Sampler.scale(b, quick?) end
    session = Session.new(isolation: mode)
    {:ok, _} = Session.exec(session, @echo)
    builtin = Session.new(isolation: mode, builtins: %{"answer" => fn _ -> {:ok, "x\n"} end})
    {:ok, %{stdout: "x\n"}} = Session.exec(builtin, "answer")
    Application.put_env(:ex_bashkit, :isolation, mode)

    %{
      session_exec:
        Sampler.sample(budget.({2_000, 2_000, 100_000, 1_500}), fn ->
          Session.exec(session, @echo)
        end),
      exec_once:
        Sampler.sample(budget.({500, 1_000, 50_000, 1_500}), fn -> ExBashkit.exec(@echo) end),
      builtin:
        Sampler.sample(budget.({1_000, 1_000, 50_000, 1_500}), fn ->
          Session.exec(builtin, "answer")
        end),
      scaling:
        if(quick?, do: scaling(mode, 1, 2_000), else: scaling(mode, @scaling_rounds, 20_000)),
      throughput_64: throughput(mode, 64, if(quick?, do: 5_000, else: 40_000)),
      loaded: loaded(mode, if(quick?, do: 500, else: 3_000))
    }
  end

  @loop "s=0; for ((i=0; i<10000; i++)); do s=$((s + i)); done; echo $s"
  @loop_limits [max_commands: 1_000_000, max_loop_iterations: 1_000_000]

  # 64 sessions run the 10 000-iteration loop back to back for `millis` ms;
  # meanwhile an unrelated session execs `echo hi` and sleeps 1 ms, in turn.
  # Returns `{echo_latencies, sleep_overshoots}` in ns.
  defp loaded(mode, millis) do
    stop = :atomics.new(1, [])

    load =
      for _ <- 1..64 do
        spawn_link(fn ->
          s = Session.new(isolation: mode, limits: @loop_limits)
          heavy(s, stop)
        end)
      end

    probe = Session.new(isolation: mode)
    {:ok, _} = Session.exec(probe, @echo)
    Process.sleep(200)
    deadline = System.monotonic_time(:millisecond) + millis
    result = probe_loop(probe, deadline, [], [])
    :atomics.put(stop, 1, 1)

    for pid <- load do
      ref = Process.monitor(pid)
      receive do: ({:DOWN, ^ref, _, _, _} -> :ok)
    end

    result
  end

  defp heavy(s, stop) do
    if :atomics.get(stop, 1) == 0 do
      {:ok, _} = Session.exec(s, @loop)
      heavy(s, stop)
    end
  end

  defp probe_loop(s, deadline, echoes, lates) do
    if System.monotonic_time(:millisecond) >= deadline do
      {echoes, lates}
    else
      t0 = System.monotonic_time()
      {:ok, _} = Session.exec(s, @echo)
      t1 = System.monotonic_time()
      Process.sleep(1)
      t2 = System.monotonic_time()
      echo = System.convert_time_unit(t1 - t0, :native, :nanosecond)
      late = System.convert_time_unit(t2 - t1, :native, :nanosecond) - 1_000_000
      probe_loop(s, deadline, [echo | echoes], [max(late, 0) | lates])
    end
  end

  # Total execs/s of two sessions over one's, `total` execs a round, each
  # pooled over `rounds` rounds taken in turn (all calls over all time, as
  # `scripts/bench` pools its rounds).
  defp scaling(mode, rounds, total) do
    {one, two} =
      Enum.reduce(1..rounds, {0.0, 0.0}, fn _, {one, two} ->
        {one + 1 / throughput(mode, 1, total), two + 1 / throughput(mode, 2, total)}
      end)

    one / two
  end

  # `n` processes with a session each, `total` execs of `echo hi` in all.
  defp throughput(mode, n, total) do
    per = div(total, n)
    parent = self()

    pids =
      for _ <- 1..n do
        spawn_link(fn ->
          s = Session.new(isolation: mode)
          {:ok, _} = Session.exec(s, @echo)
          send(parent, {:ready, self()})
          receive do: (:go -> :ok)
          for _ <- 1..per, do: {:ok, _} = Session.exec(s, @echo)
          send(parent, {:done, self()})
        end)
      end

    for p <- pids, do: receive(do: ({:ready, ^p} -> :ok))
    t0 = System.monotonic_time()
    for p <- pids, do: send(p, :go)
    for p <- pids, do: receive(do: ({:done, ^p} -> :ok))
    elapsed = System.convert_time_unit(System.monotonic_time() - t0, :native, :microsecond)
    per * n / (elapsed / 1_000_000)
  end

  # RSS of a worker with no session, then per idle session (`count` of them).
  defp worker_memory(count) do
    {:ok, pid} = ExBashkit.Worker.start_link(name: :bench_memory_worker)
    # A question that starts the OS process (`live_sessions` is answered
    # without one).
    probe = fn -> ExBashkit.Worker.call(pid, {:confinement}) end
    probe.()
    os_pid = ExBashkit.Worker.os_pid(pid)
    idle = rss_kb(os_pid)

    for i <- 1..count do
      :ok = ExBashkit.Worker.call(pid, {:new, i, default_config()})
    end

    loaded = rss_kb(os_pid)
    %{idle_kb: idle, per_session_bytes: (loaded - idle) * 1024 / count, sessions: count}
  end

  defp default_config, do: ExBashkit.Session.Options.parse!([]).native

  # Sessions each in a process of its own: `new/1` with the spare ready
  # (it is replaced off the caller's path, so a pause comes between) and
  # back to back; an idle one's PSS; then `alive` sessions held at once.
  defp own_processes(quick?) do
    spaced = for _ <- 1..if(quick?, do: 10, else: 40), do: timed_new(50)
    back_to_back = for _ <- 1..if(quick?, do: 10, else: 40), do: timed_new(0)
    idle = for _ <- 1..10, do: Session.new()
    Process.sleep(500)
    pss = Enum.flat_map(idle, &pss_of/1)

    alive = if quick?, do: 100, else: 1_000
    {us, sessions} = :timer.tc(fn -> for _ <- 1..alive, do: Session.new() end)
    answering = Enum.count(sessions, &match?({:ok, %{stdout: "hi\n"}}, Session.exec(&1, @echo)))
    total_pss = sessions |> Enum.flat_map(&pss_of/1) |> Enum.sum()

    %{
      new_spaced: spaced,
      new_back_to_back: back_to_back,
      idle_pss_kb: Enum.sum(pss) / length(pss),
      alive: alive,
      answering: answering,
      alive_ms: us / 1_000,
      alive_pss_kb: total_pss
    }
  end

  # The PSS of a session's process, or nothing (with a line saying so) if
  # that process is not there to read.
  defp pss_of(session) do
    os_pid = Session.info(session).os_pid
    pss = Bench.Memory.pss_kb(os_pid)
    # Held until read: a session collected earlier stops its process.
    %{isolation: :process} = Session.info(session)
    [pss]
  rescue
    error ->
      IO.puts(:stderr, "no PSS for #{inspect(session.location)}: #{Exception.message(error)}")
      []
  end

  defp timed_new(pause_ms) do
    Process.sleep(pause_ms)
    {us, _session} = :timer.tc(&Session.new/0)
    # Dropped here: its process stops once the handle is collected.
    :erlang.garbage_collect()
    us * 1_000
  end

  defp median(samples), do: Stats.summary(samples)[:median]

  defp raw_median(raw, name) do
    Enum.find_value(raw, fn
      {:sample, ^name, ns} -> median(ns)
      _ -> nil
    end)
  end

  defp render(raw, rows, memory, own, load_before, load_after, quick?) do
    m = Map.new(rows)
    raw_exec = raw_median(raw, "raw/echo_hi.exec")
    raw_new_exec = raw_median(raw, "raw/echo_hi.new_exec")

    line = fn what, key, baseline ->
      ours = Enum.map(@modes, &median(m[&1][key]))

      "| #{what} | " <>
        Enum.map_join(ours, " | ", &Stats.fmt_ns/1) <>
        " | #{Stats.fmt_ns(baseline)} |"
    end

    tp = fn mode -> m[mode].throughput_64 end
    scale = fn mode -> m[mode].scaling end
    p99 = fn mode, i -> Stats.fmt_ns(Stats.summary(elem(m[mode].loaded, i))[:p99]) end

    """
    # Isolation modes, side by side

    #{if quick?, do: "Quick run (smoke figures). ", else: ""}Load average before: #{load_before}; after: #{load_after}.
    Machine: #{System.schedulers_online()} schedulers. Raw bashkit measured in the same run
    (`bench/raw`, #{if raw == [], do: "not built: run scripts/bench-isolation", else: "built"}); cargo profile
    `#{Bench.Raw.profile()}` on both sides.

    | median | in_node | process | raw bashkit |
    |---|---|---|---|
    #{line.("`Session.exec(\"echo hi\")`", :session_exec, raw_exec)}
    #{line.("`ExBashkit.exec(\"echo hi\")`", :exec_once, raw_new_exec)}
    #{line.("builtin round trip (`answer`)", :builtin, nil)}

    | throughput, 64 sessions | in_node | process | process / in_node |
    |---|---|---|---|
    | execs/s | #{Stats.fmt_int(tp.(:in_node))} | #{Stats.fmt_int(tp.(:process))} | #{Stats.fmt_ratio(tp.(:process) / tp.(:in_node))} |

    | runner fairness (issue 12) | in_node | process | goal |
    |---|---|---|---|
    | total execs/s, 2 sessions / 1 | #{Stats.fmt_ratio(scale.(:in_node))} | #{Stats.fmt_ratio(scale.(:process))} | ≥ 1.6× |
    | 64 heavy scripts: unrelated `echo hi` p99 | #{p99.(:in_node, 0)} | #{p99.(:process, 0)} | ≤ 10 ms |
    | 64 heavy scripts: `Process.sleep(1)` overshoot p99 | #{p99.(:in_node, 1)} | #{p99.(:process, 1)} | ≤ 5 ms |

    | worker memory | |
    |---|---|
    | RSS of an idle worker | #{Stats.fmt_bytes(memory.idle_kb * 1024)} |
    | per idle session in one process, a group's (#{memory.sessions} sessions) | #{Stats.fmt_bytes(memory.per_session_bytes)} |

    | a process per session (issue 67) | figure | goal |
    |---|---|---|
    | `Session.new/1` median, spare ready (50 ms apart) | #{Stats.fmt_ns(median(own.new_spaced))} | ≤ 1 ms |
    | `Session.new/1` median, back to back | #{Stats.fmt_ns(median(own.new_back_to_back))} | ≤ 1 ms |
    | idle session's process, PSS (10 alive) | #{Stats.fmt_bytes(own.idle_pss_kb * 1024)} | ≤ 2 MiB |
    | #{own.alive} sessions alive, each in its own process: answering | #{own.answering} of #{own.alive} | all |
    | … made in | #{Stats.fmt_ns(own.alive_ms * 1_000_000)} | – |
    | … PSS in all | #{Stats.fmt_bytes(own.alive_pss_kb * 1024)} | – |
    | … PSS a session's process (each has run one `echo`) | #{Stats.fmt_bytes(own.alive_pss_kb * 1024 / max(own.answering, 1))} | ≤ 2 MiB |
    """
  end
end

Bench.Isolation.main(System.argv())
