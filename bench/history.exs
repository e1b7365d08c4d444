# What a session's history and its recovery points cost (issue 61's
# table): `scripts/bench-history`, or
# `MIX_ENV=prod mix run bench/history.exs [--quick] [--out FILE]`.
#
# Every figure is a ratio to a baseline measured in the same run, the two
# sides sampled in alternating rounds (so a slow moment of the host moves
# both):
#   * an exec that changed nothing, `durable: true` vs `durable: false`;
#   * an exec that changed a variable, the same two;
#   * an exec that wrote 1 KB, in a session holding 10 MB vs an empty one;
#   * `ExBashkit.Server.exec/3` with `checkpoint: true` vs without, 1 MB of
#     files;
#   * `Session.commit/2` of an unchanged session, and `Session.fork/2` of one
#     holding 10 MB (absolute: the goals are absolute);
#   * 1 000 sessions of one process restored after it was killed.
# Writes bench/history.md.

for file <- ~w(stats sampler memory), do: Code.require_file("lib/#{file}.exs", __DIR__)

defmodule Bench.History do
  alias Bench.{Sampler, Stats}
  import Bench.Memory, only: [loadavg: 0]
  alias ExBashkit.{Server, Session, Store}

  @rounds 5
  @big 10 * 1024 * 1024
  @mb 1024 * 1024

  def main(argv) do
    {opts, _, _} = OptionParser.parse(argv, strict: [quick: :boolean, out: :string])
    quick? = Keyword.get(opts, :quick, false)
    out = Keyword.get(opts, :out, "bench/history.md")
    load_before = loadavg()
    budget = if quick?, do: {20, 50, 200, 100}, else: {200, 500, 20_000, 600}

    big =
      for i <- 1..10, into: %{}, do: {"/data/big#{i}", :crypto.strong_rand_bytes(div(@big, 10))}

    mb = for i <- 1..4, into: %{}, do: {"/data/mb#{i}", :crypto.strong_rand_bytes(div(@mb, 4))}

    rows = [
      pair("exec `echo hi` (changes nothing)", budget, "echo hi",
        durable: session(durable: true),
        not_durable: session(durable: false)
      ),
      pair("exec `X=$((X+1))` (changes a variable)", budget, "X=$((X+1))",
        durable: session(durable: true),
        not_durable: session(durable: false)
      ),
      pair("exec writing 1 KB", small_budget(quick?), "printf '%1024d' $RANDOM > /tmp/out",
        holding_10_mb: session(files: big),
        empty: session([])
      ),
      pair("`Server.exec` of `X=$((X+1))`, 1 MB of files", budget, "X=$((X+1))",
        checkpoint: server(files: mb, checkpoint: true),
        no_checkpoint: server(files: mb)
      )
    ]

    commit = commit_unchanged(budget)
    fork = fork_big(big, small_budget(quick?))
    restore = restore_many(if quick?, do: 100, else: 1_000)
    report = render(rows, commit, fork, restore, load_before, loadavg(), quick?)
    File.write!(out, report)
    IO.puts(report)
  end

  defp small_budget(true), do: {2, 5, 20, 100}
  defp small_budget(false), do: {5, 30, 300, 600}

  # `script` run by two runners (`session/1`, `server/1`), in alternating
  # rounds: `{label, [{name, summary}]}`.
  defp pair(label, budget, script, [{name_a, a}, {name_b, b}]) do
    IO.puts(:stderr, "==> #{label}")
    for run <- [a, b], do: {:ok, _} = run.("X=0; #{script}")

    {samples_a, samples_b} =
      Enum.reduce(1..@rounds, {[], []}, fn _, {sa, sb} ->
        {sa ++ Sampler.sample(budget, fn -> {:ok, _} = a.(script) end),
         sb ++ Sampler.sample(budget, fn -> {:ok, _} = b.(script) end)}
      end)

    {label, [{name_a, Stats.summary(samples_a)}, {name_b, Stats.summary(samples_b)}]}
  end

  defp session(opts) do
    session = Session.new(opts)
    &Session.exec(session, &1)
  end

  defp server(opts) do
    {:ok, server} = Server.start_link(opts)
    &Server.exec(server, &1)
  end

  # Commits of an unchanged session, and beside them the floor of any
  # call: `Session.stat/2`, one round trip to the session's process.
  defp commit_unchanged(budget) do
    IO.puts(:stderr, "==> commit/2 of an unchanged session")
    s = Session.new()
    {:ok, _} = Session.exec(s, "X=1; echo data > /tmp/f")
    {:ok, _} = Session.commit(s)

    {commits, stats} =
      Enum.reduce(1..@rounds, {[], []}, fn _, {c, f} ->
        {c ++ Sampler.sample(budget, fn -> {:ok, _} = Session.commit(s) end),
         f ++ Sampler.sample(budget, fn -> {:ok, _} = Session.stat(s, "/tmp/f") end)}
      end)

    %{commit: Stats.summary(commits), floor: Stats.summary(stats)}
  end

  # Forks of one session holding 10 MB: the first (it copies the bytes
  # once), the next ones (timed), and what 100 more add to the process's
  # PSS and the store.
  defp fork_big(files, budget) do
    IO.puts(:stderr, "==> fork/2 of a session holding 10 MB")
    s = Session.new(files: files)
    {:ok, _} = Session.exec(s, "X=1")
    {first_us, {:ok, _}} = :timer.tc(fn -> Session.fork(s) end)
    held = :ets.new(:forks, [:public])

    timed =
      Stats.summary(
        Sampler.sample(budget, fn ->
          {:ok, fork} = Session.fork(s)
          :ets.insert(held, {make_ref(), fork})
        end)
      )

    :ets.delete_all_objects(held)
    :erlang.garbage_collect()
    os_pid = Session.info(s).os_pid
    Process.sleep(500)
    {pss_before, store_before} = {Bench.Memory.pss_kb(os_pid), Store.size().bytes}
    forks = for _ <- 1..100, do: elem(Session.fork(s), 1)
    {:ok, _} = Session.exec(hd(forks), "echo a fork works")
    {pss_after, store_after} = {Bench.Memory.pss_kb(os_pid), Store.size().bytes}

    %{
      first_ns: first_us * 1_000,
      timed: timed,
      added_kb: pss_after - pss_before + div(store_after - store_before, 1024),
      forks: length(forks)
    }
  end

  # `n` sessions in one group (one process), each with its own state; the
  # process killed; the time until every one has answered an exec with its
  # state, n at a time.
  defp restore_many(n) do
    IO.puts(:stderr, "==> #{n} sessions restored after their process died")
    group = {:bench_restore, make_ref()}

    sessions =
      for i <- 1..n do
        s = Session.new(group: group)
        {:ok, _} = Session.exec(s, "export KEEP=#{i}; echo #{i} > /tmp/mine")
        s
      end

    {:process, name, _} = hd(sessions).location
    os_pid = ExBashkit.Worker.os_pid(name)
    t0 = System.monotonic_time()
    System.cmd("kill", ["-9", "#{os_pid}"])

    results =
      sessions
      |> Enum.with_index(1)
      |> Task.async_stream(
        fn {s, i} -> answers_with_state?(s, "#{i} #{i}\n") end,
        max_concurrency: 64,
        timeout: 60_000
      )
      |> Enum.map(fn {:ok, ok} -> ok end)

    ns = System.convert_time_unit(System.monotonic_time() - t0, :native, :nanosecond)
    %{n: n, ns: ns, intact: Enum.count(results, & &1)}
  end

  # An exec sent before the owner saw the kill was in flight: it answers
  # `:crashed`, and the next one finds the state.
  defp answers_with_state?(session, expected) do
    case Session.run(session, "echo $KEEP $(cat /tmp/mine)") do
      {:ok, %{stdout: ^expected}} -> true
      {:error, %{reason: :crashed}} -> answers_with_state?(session, expected)
      _ -> false
    end
  end

  defp difference(ns) when ns < 0, do: "−" <> Stats.fmt_ns(-ns)
  defp difference(ns), do: "+" <> Stats.fmt_ns(ns)

  defp render(rows, commit, fork, restore, load_before, load_after, quick?) do
    pairs =
      for {label, [{a, sa}, {b, sb}]} <- rows do
        "| #{label} | #{a}: #{Stats.fmt_ns(sa.median)} | #{b}: #{Stats.fmt_ns(sb.median)} | " <>
          "#{Stats.fmt_ratio(sa.median / sb.median)} | #{difference(sa.median - sb.median)} |"
      end

    """
    # History and recovery points: what they cost

    #{if quick?, do: "**Quick run: not a measurement.** ", else: ""}Load average #{load_before} before, #{load_after} after. Medians; each pair sampled in #{@rounds} alternating rounds in one run (`bench/history.exs`).

    | figure | measured | baseline | ratio | difference |
    |---|---|---|---|---|
    #{Enum.join(pairs, "\n")}

    | figure | median | p90 |
    |---|---|---|
    | `Session.commit/2`, unchanged session | #{Stats.fmt_ns(commit.commit.median)} | #{Stats.fmt_ns(commit.commit.p90)} |
    | `Session.stat/2` beside it (one round trip: the floor of any call) | #{Stats.fmt_ns(commit.floor.median)} | #{Stats.fmt_ns(commit.floor.p90)} |
    | `Session.fork/2`, session holding 10 MB | #{Stats.fmt_ns(fork.timed.median)} | #{Stats.fmt_ns(fork.timed.p90)} |
    | the first fork since the session changed (copies its bytes once) | #{Stats.fmt_ns(fork.first_ns)} | |

    #{fork.forks} more forks added #{Float.round(fork.added_kb / 1024, 1)} MB (the process's PSS and the store).

    #{restore.n} sessions of one process, the process killed: all #{restore.intact} answered with their state #{Stats.fmt_ns(restore.ns)} after the kill.
    """
  end
end

Bench.History.main(System.argv())
