# The wrapper's cost on realistic scripts (issue 65): the case set of
# bench/realistic/cases.txt (short scripts of the kinds agents run) through
# raw bashkit (bench/raw), ours in both isolation modes (one-shot and
# session) and `bash -c`, in one run, every side's output checked against
# bash's. `scripts/bench-realistic [--quick] [--out FILE]`; writes
# bench/realistic.md.

for file <- ~w(stats sampler raw memory realistic_cases),
    do: Code.require_file("lib/#{file}.exs", __DIR__)

defmodule Bench.Realistic do
  alias Bench.{RealisticCases, Sampler, Stats}
  import Bench.Memory, only: [loadavg: 0]
  alias ExBashkit.Session

  # Each case's share of the run, as the raw harness's (realistic.rs).
  @per_case {20, 50, 5_000, 300}
  @bash_runs 20
  @modes [:in_node, :process]

  # The goals of issue 65: ratios of geometric means to raw's, same run.
  @goals [
    {"session, in node", {:in_node, :session}, 1.3},
    {"one-shot, in node", {:in_node, :oneshot}, 1.3},
    {"session, default mode", {:process, :session}, 1.6},
    {"one-shot, default mode", {:process, :oneshot}, 2.0}
  ]

  def main(argv) do
    {opts, _, _} = OptionParser.parse(argv, strict: [quick: :boolean, out: :string])
    quick? = Keyword.get(opts, :quick, false)
    out = Keyword.get(opts, :out, "bench/realistic.md")
    load_before = loadavg()
    cases = RealisticCases.all()
    budget = Sampler.scale(@per_case, quick?)

    IO.puts(:stderr, "==> raw bashkit")
    raw = raw(quick?)
    IO.puts(:stderr, "==> bash -c")
    bash = Map.new(cases, &{&1.name, bash_c(&1, if(quick?, do: 3, else: @bash_runs))})

    ours =
      for mode <- @modes, into: %{} do
        IO.puts(:stderr, "==> ours, #{mode}")
        Application.put_env(:ex_bashkit, :isolation, mode)
        {mode, Map.new(cases, &{&1.name, ours(&1, mode, budget)})}
      end

    report = render(cases, raw, bash, ours, load_before, loadavg(), quick?)
    File.write!(out, report)
    IO.puts(report)
  end

  defp raw(quick?) do
    args = ["--realistic", RealisticCases.path()] ++ if(quick?, do: ["--quick"], else: [])

    case System.cmd(Bench.Raw.binary(), args) do
      {text, 0} ->
        path = Path.join(System.tmp_dir!(), "realistic_raw_#{System.pid()}")
        File.write!(path, text)
        {:ok, terms} = :file.consult(String.to_charlist(path))
        File.rm(path)

        Enum.reduce(terms, %{}, fn
          {:sample, "realistic." <> key, ns}, acc -> put_raw(acc, key, Stats.summary(ns).median)
          {:info, "realistic." <> key, text}, acc -> put_raw(acc, key, text)
        end)

      {text, code} ->
        raise "raw harness failed (exit #{code}): #{String.slice(text, 0, 500)}"
    end
  end

  defp put_raw(acc, key, value) do
    [name, what] = String.split(key, ".", parts: 2)

    Map.update(
      acc,
      name,
      %{String.to_atom(what) => value},
      &Map.put(&1, String.to_atom(what), value)
    )
  end

  # `bash -c` in a fresh directory per run, as a one-shot: its output is the
  # reference every side is checked against.
  defp bash_c(c, runs) do
    samples =
      for _ <- 1..runs do
        dir = Path.join(System.tmp_dir!(), "realistic_#{System.unique_integer([:positive])}")
        File.mkdir_p!(dir)
        t0 = System.monotonic_time(:nanosecond)
        {stdout, _} = System.cmd("bash", ["-c", c.setup <> c.script], cd: dir)
        ns = System.monotonic_time(:nanosecond) - t0
        File.rm_rf!(dir)
        {ns, stdout}
      end

    %{median: Stats.summary(Enum.map(samples, &elem(&1, 0))).median, stdout: elem(hd(samples), 1)}
  end

  defp ours(c, mode, budget) do
    whole = c.setup <> c.script

    oneshot = Sampler.sample(budget, fn -> {:ok, _} = ExBashkit.exec(whole) end)

    session = Session.new(isolation: mode)
    if c.setup != "", do: {:ok, _} = Session.exec(session, c.setup)
    {:ok, first} = Session.exec(session, c.script)

    samples = Sampler.sample(budget, fn -> {:ok, _} = Session.exec(session, c.script) end)

    %{
      oneshot: Stats.summary(oneshot).median,
      session: Stats.summary(samples).median,
      stdout: first.stdout
    }
  end

  defp geomean([]), do: nil

  defp geomean(xs) do
    :math.exp(Enum.sum(Enum.map(xs, &:math.log/1)) / length(xs))
  end

  defp ratio(nil, _), do: nil
  defp ratio(_, nil), do: nil
  defp ratio(a, b), do: a / b

  defp render(cases, raw, bash, ours, load_before, load_after, quick?) do
    by_cat = Enum.group_by(cases, & &1.category)
    cats = cases |> Enum.map(& &1.category) |> Enum.uniq()

    gm = fn cs, fun -> geomean(Enum.map(cs, fun)) end
    raw_of = fn kind -> fn c -> raw[c.name][kind] end end
    ours_of = fn mode, kind -> fn c -> ours[mode][c.name][kind] end end

    overall = fn cs ->
      %{
        raw_session: gm.(cs, raw_of.(:session)),
        raw_live: gm.(cs, raw_of.(:session_live)),
        raw_oneshot: gm.(cs, raw_of.(:oneshot)),
        bash: gm.(cs, fn c -> bash[c.name].median end),
        ours:
          for(
            mode <- @modes,
            kind <- [:session, :oneshot],
            into: %{},
            do: {{mode, kind}, gm.(cs, ours_of.(mode, kind))}
          )
      }
    end

    all = overall.(cases)

    base = fn
      {_mode, :session} -> all.raw_session
      {_mode, :oneshot} -> all.raw_oneshot
    end

    goal_rows =
      for {label, key, goal} <- @goals do
        r = ratio(all.ours[key], base.(key))

        "| #{label} | ≤ #{goal}× | #{Stats.fmt_ns(all.ours[key])} | #{Stats.fmt_ratio(r)} | #{if r && r <= goal, do: "met", else: "not met"} |\n"
      end

    worst =
      for cat <- cats, key <- Map.keys(all.ours) do
        o = overall.(by_cat[cat])
        {cat, key, ratio(o.ours[key], base_for(o, key))}
      end
      |> Enum.max_by(&(elem(&1, 2) || 0))

    cat_rows =
      for cat <- cats do
        o = overall.(by_cat[cat])

        cells =
          for mode <- @modes, kind <- [:session, :oneshot] do
            Stats.fmt_ratio(ratio(o.ours[{mode, kind}], base_for(o, {mode, kind})))
          end

        "| #{cat} (#{length(by_cat[cat])}) | #{Stats.fmt_ns(o.raw_session)} | #{Stats.fmt_ns(o.raw_oneshot)} | #{Enum.join(cells, " | ")} | #{Stats.fmt_ratio(ratio(o.raw_live, o.raw_session))} | #{Stats.fmt_ns(o.bash)} |\n"
      end

    case_rows =
      for c <- cases do
        cells =
          for mode <- @modes, kind <- [:session, :oneshot] do
            Stats.fmt_ratio(ratio(ours[mode][c.name][kind], raw[c.name][kind]))
          end

        "| #{c.name} | #{c.category} | #{Stats.fmt_ns(raw[c.name][:session])} | #{Stats.fmt_ns(raw[c.name][:oneshot])} | #{Enum.join(cells, " | ")} | #{Stats.fmt_ratio(ratio(raw[c.name][:session_live], raw[c.name][:session]))} |\n"
      end

    mismatches =
      for c <- cases,
          {side, stdout} <- [
            {"raw", raw[c.name][:stdout]},
            {"in node", ours[:in_node][c.name].stdout},
            {"default mode", ours[:process][c.name].stdout}
          ],
          stdout != bash[c.name].stdout do
        "- `#{c.name}` (#{side}): #{inspect(stdout)} where bash printed #{inspect(bash[c.name].stdout)}\n"
      end

    {wcat, wkey, wratio} = worst

    [
      "# Realistic scripts: the wrapper's cost (issue 65)\n\n",
      "#{length(cases)} short scripts of #{length(cats)} kinds (`bench/realistic/cases.txt`), ",
      "through raw bashkit 0.20.2 driven from Rust (`bench/raw`, `--realistic`), ours in both ",
      "isolation modes and `bash -c`, in one run (`scripts/bench-realistic`#{if quick?, do: " --quick", else: ""}). ",
      "Figures are geometric means of per-case medians; ratios are against raw bashkit in the same run ",
      "(session: raw's buffered `exec` on one interpreter; one-shot: raw's build + exec). ",
      "Load average before #{load_before}, after #{load_after}.\n\n",
      "## Goals\n\n| figure | goal | ours | ratio to raw | |\n|---|---|---|---|---|\n",
      goal_rows,
      "| worst category, any mode | ≤ 2.5× | #{wcat}, #{mode_label(wkey)} | #{Stats.fmt_ratio(wratio)} | #{if wratio <= 2.5, do: "met", else: "not met"} |\n\n",
      "The floor of a session exec that runs live (as ours runs every script that is not short): ",
      "raw's live execution of the same scripts, #{Stats.fmt_ns(all.raw_live)} ",
      "(#{Stats.fmt_ratio(ratio(all.raw_live, all.raw_session))} raw's buffered exec).\n\n",
      "## Over the whole set\n\n| | raw bashkit | ours, in node | ours, default mode | bash -c |\n|---|---|---|---|---|\n",
      "| one interpreter per script | #{Stats.fmt_ns(all.raw_oneshot)} | #{Stats.fmt_ns(all.ours[{:in_node, :oneshot}])} (#{Stats.fmt_ratio(ratio(all.ours[{:in_node, :oneshot}], all.raw_oneshot))}) | #{Stats.fmt_ns(all.ours[{:process, :oneshot}])} (#{Stats.fmt_ratio(ratio(all.ours[{:process, :oneshot}], all.raw_oneshot))}) | #{Stats.fmt_ns(all.bash)} |\n",
      "| one session per case | #{Stats.fmt_ns(all.raw_session)} | #{Stats.fmt_ns(all.ours[{:in_node, :session}])} (#{Stats.fmt_ratio(ratio(all.ours[{:in_node, :session}], all.raw_session))}) | #{Stats.fmt_ns(all.ours[{:process, :session}])} (#{Stats.fmt_ratio(ratio(all.ours[{:process, :session}], all.raw_session))}) | — |\n\n",
      "## By category\n\nRatios to raw. \n\n",
      "| category | raw session | raw one-shot | in node, session | in node, one-shot | default, session | default, one-shot | raw live / raw | bash -c |\n",
      "|---|---|---|---|---|---|---|---|---|\n",
      cat_rows,
      "\n## Per case\n\n",
      "| case | category | raw session | raw one-shot | in node, session | in node, one-shot | default, session | default, one-shot | raw live / raw |\n",
      "|---|---|---|---|---|---|---|---|---|\n",
      case_rows,
      "\n## Outputs\n\n",
      if(mismatches == [],
        do: "Every side printed what bash printed, for every case.\n",
        else: ["Where a side's output differs from bash's:\n\n" | mismatches]
      )
    ]
    |> IO.iodata_to_binary()
  end

  defp base_for(o, {_mode, :session}), do: o.raw_session
  defp base_for(o, {_mode, :oneshot}), do: o.raw_oneshot

  defp mode_label({:in_node, kind}), do: "in node, #{kind}"
  defp mode_label({:process, kind}), do: "default mode, #{kind}"
end

Bench.Realistic.main(System.argv())
