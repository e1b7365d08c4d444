# The benchmark entry point: `scripts/bench` (which builds bench/raw first),
# or `MIX_ENV=prod mix run bench/run.exs [--quick] [--only g1,g2] [--out FILE]`.
#
# For every case group it runs the raw-bashkit Rust harness (bench/raw), then
# the same case through ExBashkit's API and `System.cmd("bash")`, so that
# every ratio in the report comes from one run. It writes BENCHMARKS.md and
# the charts in bench/charts/.

for file <- ~w(stats sampler raw bare_nif cases otp_cases chart report) do
  Code.require_file("lib/#{file}.exs", __DIR__)
end

defmodule Bench.Run do
  @groups ~w(echo new loop pipeline vfs builtin vfs_backend snapshot cpu nested concurrency floor memory responsiveness construct) ++
            Bench.OtpCases.groups()
  # Groups the Rust harness knows (responsiveness is BEAM-only, construct
  # raw-only: where bashkit's construction time goes).
  @raw_groups ~w(echo new loop pipeline vfs builtin vfs_backend snapshot cpu concurrency floor memory construct)
  # A group whose raw side is a harness group of another name: `floor` puts
  # beside the VM's dirty-call floor the harness's `sched` investigation
  # (bashkit's buffered exec against the live execution we run).
  @raw_names %{"floor" => "sched"}
  # Latency groups run in several rounds, raw and ours alternating, so that a
  # burst of outside load (or a slow stretch of the VM's host: see
  # bench/DECISIONS.md on measuring) hits both sides alike; their samples
  # are pooled. So do the throughput groups behind the CPU and 64-session
  # goals: their rates are pooled over the rounds (all calls over all time).
  @repeated ~w(echo new loop pipeline vfs builtin vfs_backend snapshot cpu concurrency)
  @rounds 3

  def main(argv) do
    # The figures are the in-node path's (the NIF); `scripts/bench-isolation`
    # measures the worker path beside it. Sessions made without an explicit
    # `:isolation` follow this.
    Application.put_env(:ex_bashkit, :isolation, :in_node)

    {opts, _, _} =
      OptionParser.parse(argv,
        strict: [quick: :boolean, only: :string, out: :string, charts: :string, renice: :integer]
      )

    quick? = Keyword.get(opts, :quick, false)
    out = Keyword.get(opts, :out, "BENCHMARKS.md")
    charts = Keyword.get(opts, :charts, "bench/charts")

    groups =
      case opts[:only] do
        nil -> @groups
        list -> String.split(list, ",", trim: true)
      end

    for g <- groups, g not in @groups do
      raise ArgumentError, "unknown group #{g}; groups: #{Enum.join(@groups, ", ")}"
    end

    if Enum.any?(groups, &(&1 in @raw_groups)) and not Bench.Raw.available?() do
      IO.puts(
        :stderr,
        "raw harness #{Bench.Raw.binary()} is missing: run scripts/bench (it builds it)"
      )

      System.halt(1)
    end

    if nice = opts[:renice], do: renice_interpreter_threads(nice)

    started = System.monotonic_time(:millisecond)
    load_before = loadavg()
    calibrator_before = Bench.Raw.calibrator_windows()

    records =
      Enum.flat_map(groups, fn group ->
        rounds = if group in @repeated and not quick?, do: @rounds, else: 1

        for round <- 1..rounds, reduce: [] do
          acc ->
            IO.puts(:stderr, "==> #{group}#{if rounds > 1, do: " (round #{round}/#{rounds})"}")

            raw =
              if group in @raw_groups,
                do: Bench.Raw.run([Map.get(@raw_names, group, group)], quick?),
                else: []

            ours = ours(group, quick?)
            acc ++ raw ++ ours
        end
      end)

    load_after = loadavg()
    calibrator_after = Bench.Raw.calibrator_windows()
    r = records |> merge_rounds() |> Bench.Report.index()

    cores =
      :erlang.system_info(:logical_processors_available)
      |> then(&if(is_integer(&1), do: &1, else: System.schedulers_online()))

    secs = div(System.monotonic_time(:millisecond) - started, 1000)

    meta = %{
      date: DateTime.utc_now() |> DateTime.truncate(:second) |> DateTime.to_string(),
      cpu: cpu_model(),
      cores: cores,
      mem: mem_total(),
      otp: :erlang.system_info(:otp_release),
      elixir: System.version(),
      rustc: rustc(),
      profile: Bench.Raw.profile(),
      load_before: fmt_load(load_before),
      load_after: fmt_load(load_after),
      duration: "#{div(secs, 60)} min #{rem(secs, 60)} s",
      quick: quick?,
      renice: opts[:renice],
      # Only the load before the run says whether other work ran: the
      # concurrency and responsiveness groups keep both cores busy (64
      # sessions, 64 heavy scripts), which lifts the 1-minute average past
      # the core count by itself for the groups after them.
      noisy: load_before > cores,
      calibrator: {calibrator_before, calibrator_after},
      concurrency_ops: if(quick?, do: 5_000, else: 60_000)
    }

    File.mkdir_p!(charts)
    File.write!(Path.join(charts, "latency.svg"), Bench.Report.latency_chart(r))
    File.write!(Path.join(charts, "throughput.svg"), Bench.Report.throughput_chart(r))
    File.write!(out, Bench.Report.markdown(r, meta))

    IO.puts(:stderr, "\nTargets:")

    for {t, measured, ok} <- Bench.Report.targets(r) do
      v =
        case ok,
          do:
            (
              true -> "met"
              false -> "NOT MET"
              nil -> "n/a"
            )

      IO.puts(:stderr, "  [#{v}] #{t}: #{measured}")
    end

    IO.puts(:stderr, "\nwrote #{out} and #{charts}/*.svg in #{meta.duration}")
  end

  defp ours("construct", _quick?), do: []

  defp ours(group, quick?) do
    if group in Bench.OtpCases.groups(),
      do: Bench.OtpCases.run(group, quick?),
      else: Bench.Cases.run(group, quick?)
  end

  # Samples of the same name from several rounds are pooled; anything else
  # keeps its first occurrence.
  defp merge_rounds(records) do
    {merged, order} =
      Enum.reduce(records, {%{}, []}, fn record, {acc, order} ->
        name = elem(record, 1)

        case {record, acc[name]} do
          {_, nil} ->
            {Map.put(acc, name, record), [name | order]}

          {{:sample, _, xs}, {:sample, _, ys}} ->
            {Map.put(acc, name, {:sample, name, ys ++ xs}), order}

          {{:throughput, _, n, ops, ns, cpu, lat}, {:throughput, _, n, ops0, ns0, cpu0, lat0}} ->
            pooled = {:throughput, name, n, ops0 + ops, ns0 + ns, cpu0 + cpu, lat0 ++ lat}
            {Map.put(acc, name, pooled), order}

          _ ->
            {acc, order}
        end
      end)

    order |> Enum.reverse() |> Enum.map(&merged[&1])
  end

  # Experiment aid (`--renice N`): lower the priority of the interpreter
  # threads (named "ex_bashkit") of this VM, to see whether scripts then
  # leave the schedulers more room (the responsiveness case). Linux only.
  defp renice_interpreter_threads(nice) do
    {:ok, _} = ExBashkit.exec("true")
    pid = List.to_string(:os.getpid())

    tids =
      for tid <- File.ls!("/proc/#{pid}/task"),
          String.trim(File.read!("/proc/#{pid}/task/#{tid}/comm")) == "ex_bashkit",
          do: tid

    {_, 0} = System.cmd("renice", ["-n", Integer.to_string(nice), "-p" | tids])
    IO.puts(:stderr, "reniced #{length(tids)} interpreter threads to #{nice}")
  end

  defp loadavg do
    case File.read("/proc/loadavg") do
      {:ok, text} -> text |> String.split() |> hd() |> String.to_float()
      _ -> 0.0
    end
  end

  defp fmt_load(l), do: :erlang.float_to_binary(l, decimals: 2)

  defp cpu_model do
    with {:ok, text} <- File.read("/proc/cpuinfo"),
         [_, model] <- Regex.run(~r/model name\s*:\s*(.+)/, text) do
      String.trim(model)
    else
      _ -> "unknown CPU"
    end
  end

  defp mem_total do
    with {:ok, text} <- File.read("/proc/meminfo"),
         [_, kb] <- Regex.run(~r/MemTotal:\s*(\d+)/, text) do
      "#{round(String.to_integer(kb) / 1024 / 1024)} GiB RAM"
    else
      _ -> "unknown RAM"
    end
  end

  defp rustc do
    case System.cmd("rustc", ["--version"], stderr_to_stdout: true) do
      {v, 0} -> v |> String.split() |> Enum.take(2) |> Enum.join(" ")
      _ -> "rustc ?"
    end
  rescue
    _ -> "rustc ?"
  end
end

Bench.Run.main(System.argv())
