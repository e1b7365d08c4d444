defmodule Bench.Report do
  @moduledoc false
  # Turns the records of one run into BENCHMARKS.md: targets (met / not met
  # with the ratio), latency tables, concurrency, memory, responsiveness, the
  # comparison with the Hex package ex_bashkit 0.1.7, and the charts.

  import Bench.Stats, only: [fmt_ns: 1, fmt_ratio: 1, fmt_bytes: 1, fmt_int: 1]

  # ex_bashkit 0.1.7 (bashkit 0.13) medians on this kind of machine, from
  # /work/shared/notes/native-build.md (not measured by this run).
  @hex %{
    session_exec_ns: 5_000,
    session_new_ns: 19_000,
    builtin_ns: 20_000,
    idle_bytes: 26 * 1024,
    ops_64: 10_000
  }

  # {label, raw name, ours name, bash name}
  @rows [
    {"`echo hi` on an existing session", "echo_hi.exec", "echo_hi.session_exec", "echo_hi"},
    {"`echo hi` in a fresh interpreter (`ExBashkit.exec/1`)", "echo_hi.new_exec", "echo_hi.exec",
     "echo_hi"},
    {"10 000-iteration arithmetic loop", "loop_10k.exec", "loop_10k.session_exec", "loop_10k"},
    {"pipeline `seq 1 10000 \\| grep 7 \\| wc -l`", "pipeline.exec", "pipeline.session_exec",
     "pipeline"},
    {"write then read 1 MiB through the VFS", "vfs_1mb.write_read", "vfs_1mb.write_read", nil},
    {"`Session.new/1`", "session_new.new", "session_new.new", nil},
    {"`Session.new/1` with `env:` and `limits:` (raw: the same build)", "session_new.new",
     "session_new.with_options", nil},
    {"builtin round trip (script `answer`)", "builtin.exec", "builtin.exec", nil},
    {"1 MiB read through a `virtual_fs` backend", "vfs_backend_1mb.exec", "vfs_backend_1mb.exec",
     nil},
    {"snapshot of a session holding 1 MiB of files", "snapshot_1mb.snapshot",
     "snapshot_1mb.snapshot", nil},
    {"restore of that snapshot", "snapshot_1mb.restore", "snapshot_1mb.restore", nil}
  ]

  @chart_rows [
    {"echo hi (session)", "echo_hi.exec", "echo_hi.session_exec", "echo_hi"},
    {"echo hi (fresh)", "echo_hi.new_exec", "echo_hi.exec", "echo_hi"},
    {"Session.new", "session_new.new", "session_new.new", nil},
    {"builtin round trip", "builtin.exec", "builtin.exec", nil},
    {"VFS 1 MiB write+read", "vfs_1mb.write_read", "vfs_1mb.write_read", nil},
    {"virtual_fs 1 MiB read", "vfs_backend_1mb.exec", "vfs_backend_1mb.exec", nil},
    {"snapshot 1 MiB", "snapshot_1mb.snapshot", "snapshot_1mb.snapshot", nil},
    {"restore 1 MiB", "snapshot_1mb.restore", "snapshot_1mb.restore", nil},
    {"pipeline", "pipeline.exec", "pipeline.session_exec", "pipeline"},
    {"10k loop", "loop_10k.exec", "loop_10k.session_exec", "loop_10k"}
  ]

  @doc "Index records by name, with latency summaries computed once."
  def index(records) do
    Map.new(records, fn
      {:sample, name, xs} ->
        {name, {:sample, Bench.Stats.summary(xs)}}

      {:throughput, name, n, ops, ns, cpu, lat} ->
        {name, {:throughput, n, ops, ns, cpu, Bench.Stats.summary(lat)}}

      {:memory, name, count, bps, b, a} ->
        {name, {:memory, count, bps, b, a}}

      {:info, key, value} ->
        {key, {:info, value}}

      {:unavailable, name, reason} ->
        {name, {:unavailable, reason}}
    end)
  end

  defp stats(r, name) do
    case r[name] do
      {:sample, s} -> s
      _ -> nil
    end
  end

  defp median(r, name), do: (s = stats(r, name)) && s.median
  defp info(r, key), do: match?({:info, _}, r[key]) && elem(r[key], 1)

  defp ops_per_s(r, name) do
    case r[name] do
      {:throughput, _n, ops, ns, _cpu, _} -> ops / (ns / 1.0e9)
      _ -> nil
    end
  end

  # CPU time per exec (all threads of the OS process): independent of how
  # much of the machine other work took, unlike execs per second.
  defp cpu_per_op(r, name) do
    case r[name] do
      {:throughput, _n, ops, _ns, cpu, _} when ops > 0 -> cpu / ops
      _ -> nil
    end
  end

  defp ratio(a, b) when is_number(a) and is_number(b) and b > 0, do: a / b
  defp ratio(_, _), do: nil

  # -- targets ------------------------------------------------------------------

  defp verdict(nil), do: "n/a"
  defp verdict(true), do: "**met**"
  defp verdict(false), do: "**not met**"

  defp check(a, b, f) when is_number(a) and is_number(b), do: f.(a, b)
  defp check(_, _, _), do: nil

  defp unavailable_note(r, name) do
    case r[name] do
      {:unavailable, reason} -> reason
      nil -> "not measured in this run"
      _ -> nil
    end
  end

  def targets(r) do
    s_exec = median(r, "ours/echo_hi.session_exec")
    raw_exec = median(r, "raw/echo_hi.exec")
    once = median(r, "ours/echo_hi.exec")
    raw_new_exec = median(r, "raw/echo_hi.new_exec")
    bash = median(r, "bash/echo_hi")
    new = median(r, "ours/session_new.new")
    builtin = median(r, "ours/builtin.exec")
    mem_ours = mem(r, "ours/idle_session")
    mem_raw = mem(r, "raw/idle_session")
    failures = info(r, "ours/idle_session.failures")
    c1 = ops_per_s(r, "ours/concurrency.1")

    scaling =
      for n <- [2, 8, 64, 512],
          v = ops_per_s(r, "ours/concurrency.#{n}"),
          is_number(c1),
          do: {n, v / c1}

    min_scaling = scaling |> Enum.map(&elem(&1, 1)) |> Enum.min(fn -> nil end)
    ping = stats(r, "ours/udp_ping.loaded")
    ops64 = ops_per_s(r, "ours/concurrency.64")

    [
      {"`Session.exec(\"echo hi\")` median within 5 µs of raw bashkit's exec",
       "#{fmt_ns(s_exec)} vs #{fmt_ns(raw_exec)}: #{fmt_signed_delta(s_exec, raw_exec)}, #{fmt_ratio(ratio(s_exec, raw_exec))}",
       check(s_exec, raw_exec, &(&1 - &2 <= 5_000))},
      {"`ExBashkit.exec(\"echo hi\")` median within 10 µs of raw new+exec",
       "#{fmt_ns(once)} vs #{fmt_ns(raw_new_exec)}: #{fmt_signed_delta(once, raw_new_exec)}, #{fmt_ratio(ratio(once, raw_new_exec))}",
       check(once, raw_new_exec, &(&1 - &2 <= 10_000))},
      {"≥ 100× faster than `System.cmd(\"bash\")` for `echo hi`",
       "bash #{fmt_ns(bash)} / `Session.exec` #{fmt_ns(s_exec)} = #{fmt_ratio(ratio(bash, s_exec))}" <>
         " (`ExBashkit.exec`: #{fmt_ratio(ratio(bash, once))})",
       check(bash, s_exec, &(&1 / &2 >= 100))},
      {"memory per idle session ≤ 1.2× raw bashkit's",
       "#{fmt_bytes(mem_ours)} vs #{fmt_bytes(mem_raw)}: #{fmt_ratio(ratio(mem_ours, mem_raw))}",
       check(mem_ours, mem_raw, &(&1 <= 1.2 * &2))},
      {"10 000 sessions alive at once without trouble",
       if(failures,
         do:
           "#{failures} failed execs among a sample of them; #{info(r, "ours/idle_session.live")} live sessions",
         else: "–"
       ), failures && failures == "0"},
      {"throughput with 2+ concurrent sessions ≥ 1.6× one session (2 cores)",
       Enum.map_join(scaling, ", ", fn {n, x} -> "#{n}: #{fmt_ratio(x)}" end),
       min_scaling && min_scaling >= 1.6},
      {"ping p99 ≤ 2 ms while 64 sessions run CPU-heavy scripts (UDP ping answered by a plain process)",
       if(ping,
         do: "p99 #{fmt_ns(ping.p99)} (median #{fmt_ns(ping.median)}, max #{fmt_ns(ping.max)})",
         else: "–"
       ), ping && ping.p99 <= 2_000_000},
      {"beat ex_bashkit 0.1.7: `Session.exec` \"echo hi\" ≤ 5 µs",
       "#{fmt_ns(s_exec)} (#{fmt_ratio(ratio(s_exec, @hex.session_exec_ns))} of 5 µs)",
       check(s_exec, @hex.session_exec_ns, &(&1 <= &2))},
      {"beat ex_bashkit 0.1.7: `Session.new` ≤ 19 µs",
       "#{fmt_ns(new)} (#{fmt_ratio(ratio(new, @hex.session_new_ns))} of 19 µs)",
       check(new, @hex.session_new_ns, &(&1 <= &2))},
      {"beat ex_bashkit 0.1.7: builtin round trip ≤ 20 µs",
       if(builtin,
         do: "#{fmt_ns(builtin)} (#{fmt_ratio(ratio(builtin, @hex.builtin_ns))} of 20 µs)",
         else: unavailable_note(r, "ours/builtin.exec")
       ), check(builtin, @hex.builtin_ns, &(&1 <= &2))},
      {"beat ex_bashkit 0.1.7: RSS per idle session ≤ 26 KiB",
       "#{fmt_bytes(mem_ours)} (#{fmt_ratio(ratio(mem_ours, @hex.idle_bytes))} of 26 KiB)",
       check(mem_ours, @hex.idle_bytes, &(&1 <= &2))},
      {"beat ex_bashkit 0.1.7: ≥ 10 000 small execs/s at 64 sessions",
       if(ops64, do: "#{fmt_int(ops64)} execs/s", else: "–"), ops64 && ops64 >= @hex.ops_64}
    ]
  end

  @doc "The goal table of issue 12 (the runner): `{figure, goal, measured, met?}`."
  def scheduler_goals(r) do
    s_exec = median(r, "ours/echo_hi.session_exec")
    raw_exec = median(r, "raw/echo_hi.exec")
    once = median(r, "ours/echo_hi.exec")
    raw_new_exec = median(r, "raw/echo_hi.new_exec")
    new = median(r, "ours/session_new.new")
    raw_new = median(r, "raw/session_new.new")
    new_opts = median(r, "ours/session_new.with_options")
    new_in_call = median(r, "ours/session_new.in_call")
    new_paced = median(r, "ours/session_new.paced")
    raw_new_paced = median(r, "raw/session_new.paced")
    bare_new_paced = median(r, "vm/bare_nif.new_paced")
    builtin = median(r, "ours/builtin.exec")
    c1 = ops_per_s(r, "ours/concurrency.1")
    c2 = ops_per_s(r, "ours/concurrency.2")
    c64 = ops_per_s(r, "ours/concurrency.64")
    raw64 = ops_per_s(r, "raw/concurrency.64")
    raw64_threads = ops_per_s(r, "raw/concurrency_threads.64")
    cpu_echo = cpu_per_op(r, "ours/cpu.echo")
    raw_cpu_echo = cpu_per_op(r, "raw/cpu.echo")
    cpu_loop = cpu_per_op(r, "ours/cpu.loop50")
    raw_cpu_loop = cpu_per_op(r, "raw/cpu.loop50")
    bare_cpu_echo = cpu_per_op(r, "vm/bare_nif.cpu.echo")
    sleep = stats(r, "ours/sleep_overshoot.loaded")
    unrelated = stats(r, "ours/unrelated_echo.loaded")
    ping = stats(r, "ours/udp_ping.loaded")
    nested_ok = info(r, "ours/nested.ok")
    nested_ms = info(r, "ours/nested.ms")
    around = median(r, "ours/echo_hi.around_interpreter")
    disturbed = median(r, "raw/echo_hi.exec_disturbed")
    kept_output = median(r, "raw/echo_hi.exec_kept_output")
    bare_exec = median(r, "vm/bare_nif.exec")
    bare_new = median(r, "vm/bare_nif.new")
    plus = fn a, b -> "#{fmt_ns(a)} vs #{fmt_ns(b)}: #{fmt_signed_delta(a, b)}" end
    also = fn label, v -> if is_number(v), do: "; #{label}: #{fmt_ns(v)}", else: "" end
    p99 = fn s -> if s, do: "p99 #{fmt_ns(s.p99)} (median #{fmt_ns(s.median)})", else: "–" end
    # The issue's baseline is raw bashkit on 64 threads: the harness's 64
    # tokio tasks (which run one after another: `echo hi` never yields) and
    # 64 OS threads (interleaved by the kernel) are both shown; the verdict
    # takes the faster of the two.
    {raw64_best, on_threads} =
      if is_number(raw64_threads) do
        {max(raw64, raw64_threads),
         "; raw on 64 OS threads: #{fmt_int(raw64_threads)} (#{fmt_ratio(ratio(c64, raw64_threads))})"}
      else
        {raw64, ""}
      end

    [
      {"`Session.exec(\"echo hi\")` median", "≤ raw exec + 3 µs",
       plus.(s_exec, raw_exec) <>
         "; outside the interpreter in the same call: #{fmt_ns(around)}; " <>
         "raw with its caches disturbed between execs: #{fmt_ns(disturbed)}" <>
         also.("raw keeping its output so far, as the NIF does", kept_output) <>
         also.("bashkit behind a bare NIF", bare_exec),
       check(s_exec, raw_exec, &(&1 - &2 <= 3_000))},
      {"`ExBashkit.exec(\"echo hi\")` median", "≤ raw new+exec + 5 µs", plus.(once, raw_new_exec),
       check(once, raw_new_exec, &(&1 - &2 <= 5_000))},
      {"`Session.new/1` median", "≤ raw new + 3 µs",
       plus.(new, raw_new) <>
         "; with `env:` and `limits:`: #{fmt_ns(new_opts)}; " <>
         "nothing built in advance: #{fmt_ns(new_in_call)}" <>
         also.("a bare NIF's build", bare_new) <>
         paced_new(new_paced, raw_new_paced) <>
         also.("a bare NIF's build at that pace", bare_new_paced),
       check(new, raw_new, &(&1 - &2 <= 3_000))},
      {"builtin round trip", "≤ plain exec + 15 µs",
       plus.(builtin, s_exec) <> bare_round_trip(r, bare_exec),
       check(builtin, s_exec, &(&1 - &2 <= 15_000))},
      {"total execs/s, 2 sessions vs 1", "≥ 1.6×",
       "#{fmt_int(c2)} / #{fmt_int(c1)} = #{fmt_ratio(ratio(c2, c1))}",
       check(c2, c1, &(&1 / &2 >= 1.6))},
      {"total execs/s at 64 sessions", "≥ 0.5× raw at 64",
       "#{fmt_int(c64)} vs #{fmt_int(raw64)} = #{fmt_ratio(ratio(c64, raw64))}" <> on_threads,
       check(c64, raw64_best, &(&1 / &2 >= 0.5))},
      {"CPU per exec, `echo hi`", "≤ 1.5× raw",
       "#{fmt_ns(cpu_echo)} vs #{fmt_ns(raw_cpu_echo)} = #{fmt_ratio(ratio(cpu_echo, raw_cpu_echo))}" <>
         bare_cpu(bare_cpu_echo, raw_cpu_echo), check(cpu_echo, raw_cpu_echo, &(&1 <= 1.5 * &2))},
      {"CPU per exec, 50-iteration `while`", "≤ 1.5× raw",
       "#{fmt_ns(cpu_loop)} vs #{fmt_ns(raw_cpu_loop)} = #{fmt_ratio(ratio(cpu_loop, raw_cpu_loop))}",
       check(cpu_loop, raw_cpu_loop, &(&1 <= 1.5 * &2))},
      {"64 heavy scripts: `Process.sleep(1)` overshoot", "p99 ≤ 5 ms", p99.(sleep),
       sleep && sleep.p99 <= 5_000_000},
      {"64 heavy scripts: unrelated `Session.exec(\"echo hi\")`", "p99 ≤ 10 ms", p99.(unrelated),
       unrelated && unrelated.p99 <= 10_000_000},
      {"64 heavy scripts: UDP ping", "p99 ≤ 2 ms", p99.(ping), ping && ping.p99 <= 2_000_000},
      {"100 nested builtin → exec at once", "100/100 in < 1 s",
       if(nested_ok, do: "#{nested_ok} in #{nested_ms} ms", else: "–"),
       nested_ok && nested_ok == "100/100" && String.to_float(nested_ms) < 1000}
    ]
  end

  # The bare NIF's CPU per `echo hi` against raw's: what the VM alone costs
  # that goal (missing from a partial run or a harness without the NIF).
  defp bare_cpu(bare, raw) when is_number(bare) and is_number(raw),
    do: "; bashkit behind a bare NIF: #{fmt_ns(bare)} = #{fmt_ratio(ratio(bare, raw))}"

  defp bare_cpu(_bare, _raw), do: ""

  # `Session.new/1` at one call a millisecond, beside raw's build at that
  # pace (either may be missing from a partial run).
  defp paced_new(ours, raw) when is_number(ours) and is_number(raw),
    do:
      "; one call a millisecond: #{fmt_ns(ours)} vs raw #{fmt_ns(raw)}: #{fmt_signed_delta(ours, raw)}"

  defp paced_new(ours, _raw) when is_number(ours), do: "; one call a millisecond: #{fmt_ns(ours)}"
  defp paced_new(_ours, _raw), do: ""

  # The bare NIF's builtin round trip, answered in a fresh process as ours
  # is, over its own exec: the goal's floor for this design.
  defp bare_round_trip(r, bare_exec) do
    bare = median(r, "vm/bare_nif.builtin")

    if Enum.all?([bare, bare_exec], &is_number/1),
      do:
        "; bashkit behind a bare NIF, answered in a fresh process: " <>
          "#{fmt_ns(bare)} vs #{fmt_ns(bare_exec)}: #{fmt_signed_delta(bare, bare_exec)}",
      else: ""
  end

  defp fmt_delta(a, b) when is_number(a) and is_number(b), do: fmt_ns(a - b)
  defp fmt_delta(_, _), do: "–"

  # `a - b` with its sign: "+1.20 µs", "−24.8 µs".
  defp fmt_signed_delta(a, b) when is_number(a) and is_number(b) and a < b,
    do: "−" <> fmt_ns(b - a)

  defp fmt_signed_delta(a, b), do: "+" <> fmt_delta(a, b)

  defp mem(r, name) do
    case r[name] do
      {:memory, _count, bps, _, _} -> bps
      _ -> nil
    end
  end

  # -- the document -------------------------------------------------------------

  def markdown(r, meta) do
    IO.iodata_to_binary([
      header(meta),
      "\n## Targets\n\n",
      "Each comparison is a ratio of figures measured in this same run.\n\n",
      "| target | measured | verdict |\n|---|---|---|\n",
      for({t, measured, ok} <- targets(r), do: "| #{t} | #{measured} | #{verdict(ok)} |\n"),
      "\n## Scheduler goals (issue 12)\n\n",
      "How scripts are run (`native/ex_bashkit/src/run/runner.rs`), measured against raw bashkit ",
      "in this same run; in-node sessions (`isolation: :in_node`), default VM flags. The worker ",
      "path is measured by `scripts/bench-isolation` (`bench/isolation.md`).\n\n",
      "| figure | goal | measured | verdict |\n|---|---|---|---|\n",
      for(
        {f, goal, measured, ok} <- scheduler_goals(r),
        do: "| #{f} | #{goal} | #{measured} | #{verdict(ok)} |\n"
      ),
      "\n## Latency\n\n",
      "Median (p90 / p99) over `n` runs after a warm-up. *raw* is bashkit 0.20.2 driven from Rust ",
      "with the same builder settings and tokio runtime as the NIF (`bench/raw`); *ExBashkit* is ",
      "the public API called from an Elixir process; *bash* is `System.cmd(\"bash\", [\"-c\", script])`.\n\n",
      "![latency chart](bench/charts/latency.svg)\n\n",
      latency_table(r),
      extra_rows(r),
      built_in_call_row(r),
      otp_table(r),
      "\n## Concurrency\n\n",
      "N sessions, each driven by its own caller (an Elixir process for ExBashkit, a tokio task ",
      "for raw), exec `echo hi` back to back; #{fmt_int(meta.concurrency_ops)} execs in all per level. ",
      "Latency is per exec as its caller sees it. *CPU per exec* is the CPU time the whole OS ",
      "process used (every thread: BEAM schedulers, their busy-waiting, interpreter threads) ",
      "divided by the execs: unlike execs per second it does not depend on how much of the ",
      "machine other work took (the process's CPU clock, `CLOCK_PROCESS_CPUTIME_ID`, on both sides).\n\n",
      "![throughput chart](bench/charts/throughput.svg)\n\n",
      concurrency_table(r),
      "\n## Memory\n\n",
      memory_table(r),
      "\n## Responsiveness\n\n",
      responsiveness_table(r),
      floor_table(r),
      construct_table(r),
      "\n## Against ex_bashkit 0.1.7 (Hex)\n\n",
      hex_table(r),
      outputs(r),
      unavailable(r),
      "\n",
      "Why the design is what it is, with the figures that decided each choice: ",
      "[bench/DECISIONS.md](bench/DECISIONS.md).\n"
    ])
  end

  # The NIF and the raw harness are built with the same cargo profile.
  defp profile_text("dist"),
    do:
      "cargo profile `dist` (thin LTO: the precompiled NIF users download), " <>
        "raw bashkit and the bare NIF alike"

  defp profile_text(profile),
    do:
      "cargo profile `#{profile}`, raw bashkit and the bare NIF alike " <>
        "(the precompiled NIF users download is `dist`, with thin LTO)"

  defp header(meta) do
    [
      "# Benchmarks\n\n",
      "Generated by `scripts/bench` (`mix run bench/run.exs`) on #{meta.date}; do not edit by hand.\n\n",
      "| | |\n|---|---|\n",
      "| machine | #{meta.cpu}, #{meta.cores} cores, #{meta.mem} |\n",
      "| software | Erlang/OTP #{meta.otp}, Elixir #{meta.elixir}, bashkit 0.20.2, #{meta.rustc} |\n",
      "| build | #{profile_text(meta.profile)} |\n",
      "| load average | #{meta.load_before} before, #{meta.load_after} after |\n",
      calibrator_row(meta.calibrator),
      "| run | #{meta.duration}#{if meta.quick, do: " (`--quick`: small budgets, figures are rough)", else: ""}" <>
        "#{if meta.renice, do: ", interpreter threads reniced to #{meta.renice}", else: ""} |\n",
      if(meta.noisy,
        do:
          "\n> **Noisy machine**: the load average exceeded the core count before this run (other " <>
            "work was running). Ratios are still from the same run, but absolute figures and tail " <>
            "latencies should be re-measured on a quiet machine.\n",
        else: ""
      )
    ]
  end

  # How much of one second before and after the run the host slowed this
  # VM's memory traffic: windows of the harness's calibrator more than 25 %
  # slower than the fastest window of either second.
  defp calibrator_row({[], _}), do: ""
  defp calibrator_row({_, []}), do: ""

  defp calibrator_row({before, after_run}) do
    fastest = Enum.min(before ++ after_run)
    slow = fn ws -> round(100 * Enum.count(ws, &(&1 > fastest * 1.25)) / length(ws)) end

    "| host memory speed (`bench/raw phases`, 1 s) | windows slower than the fastest " <>
      "(#{fastest} µs) by over 25 %: #{slow.(before)} % before, #{slow.(after_run)} % after " <>
      "(such stretches slow every figure; bench/DECISIONS.md, how figures are measured) |\n"
  end

  defp cell(r, prefix, name) do
    full = prefix <> name

    case r[full] do
      {:sample, s} -> "#{fmt_ns(s.median)} (#{fmt_ns(s.p90)} / #{fmt_ns(s.p99)}), n=#{s.n}"
      {:unavailable, _} -> "not available in this build"
      _ -> "–"
    end
  end

  defp latency_table(r) do
    [
      "| case | raw bashkit | ExBashkit | bash | ExBashkit / raw | bash / ExBashkit |\n",
      "|---|---|---|---|---|---|\n",
      for {label, raw, ours, bash} <- @rows do
        ours_m = median(r, "ours/" <> ours)
        raw_m = median(r, "raw/" <> raw)
        bash_m = bash && median(r, "bash/" <> bash)

        "| #{label} | #{cell(r, "raw/", raw)} | #{cell(r, "ours/", ours)} | " <>
          "#{if bash, do: cell(r, "bash/", bash), else: "–"} | #{fmt_ratio(ratio(ours_m, raw_m))} | " <>
          "#{fmt_ratio(ratio(bash_m, ours_m))} |\n"
      end
    ]
  end

  # Bench.OtpCases: the pool, servers, checkpoints and migration.
  @otp_rows [
    {"`echo hi`, `ExBashkit.Pool.exec/2` (pooled session, reset after use)", "otp.pool_exec"},
    {"`echo hi`, `ExBashkit.exec/1` (fresh interpreter)", "otp.exec_once"},
    {"`echo hi`, `Session.exec/2` (held session)", "otp.session_exec"},
    {"`echo hi`, `Server.exec/2`", "otp.server_exec"},
    {"`echo hi`, `Server.exec/2`, `checkpoint: true`", "otp.server_exec.checkpoint"},
    {"`echo hi`, `Server.exec/2`, 1 MB of files", "otp.server_exec_1mb"},
    {"`echo hi`, `Server.exec/2`, 1 MB of files, `checkpoint: true`",
     "otp.server_exec_1mb.checkpoint"},
    {"`Server.migrate/2`, 1 MB of files, to a peer node on 127.0.0.1 or back", "otp.migrate_1mb"}
  ]

  defp otp_table(r) do
    rows = for {label, name} <- @otp_rows, r["ours/" <> name], do: {label, name}

    if rows == [] do
      ""
    else
      [
        "\n## Pool, servers, checkpoints, migration\n\n",
        "| case | ExBashkit |\n|---|---|\n",
        for({label, name} <- rows, do: "| #{label} | #{cell(r, "ours/", name)} |\n")
      ]
    end
  end

  defp extra_rows(r) do
    spawn = stats(r, "raw/echo_hi.exec_spawn")

    if spawn do
      [
        "\nThe hand-off alone, in Rust: `echo hi` submitted with `spawn` to a runtime worker and ",
        "answered over a channel to the submitting thread (what the NIF does, without the BEAM): ",
        "#{fmt_ns(spawn.median)} (#{fmt_ns(spawn.p90)} / #{fmt_ns(spawn.p99)}), against ",
        "#{fmt_ns(median(r, "raw/echo_hi.exec"))} when the interpreter runs on the calling thread.\n",
        disturbed_row(r),
        first_exec_row(r)
      ]
    else
      ""
    end
  end

  # The raw exec is a tight loop that keeps the interpreter's working set in
  # the caches; in the VM other work runs between two execs.
  defp disturbed_row(r) do
    case stats(r, "raw/echo_hi.exec_disturbed") do
      nil ->
        ""

      disturbed ->
        [
          "\nThe same exec in Rust after 256 KiB of other memory traffic between two execs ",
          "(as the VM's own work between two calls would): ",
          "#{fmt_ns(disturbed.median)} (#{fmt_ns(disturbed.p90)} / #{fmt_ns(disturbed.p99)}).\n"
        ]
    end
  end

  # What `ExBashkit.exec/1` pays at best, with an interpreter built in
  # advance: a fresh interpreter's first exec.
  defp first_exec_row(r) do
    case stats(r, "raw/echo_hi.first_exec") do
      nil ->
        ""

      first ->
        [
          "\nThe first exec of an interpreter built beforehand (what `ExBashkit.exec/1` pays ",
          "when one built in advance is ready), in Rust: #{fmt_ns(first.median)} ",
          "(#{fmt_ns(first.p90)} / #{fmt_ns(first.p99)}), against #{fmt_ns(median(r, "raw/echo_hi.exec"))} ",
          "for a later exec of the same interpreter.\n"
        ]
    end
  end

  # `Session.new/1` is bimodal (an interpreter built in advance, or one
  # built during the call); this is the second mode, beside raw's build
  # when its interpreters are freed on another thread, as the NIF's
  # teardown frees them.
  defp built_in_call_row(r) do
    case {stats(r, "ours/session_new.in_call"), stats(r, "raw/session_new.new_dropped_elsewhere")} do
      {%{} = ours, %{} = elsewhere} ->
        [
          "\n`Session.new/1` with a configuration never asked for before (nothing built in advance: ",
          "decoded and built during the call): #{fmt_ns(ours.median)} (#{fmt_ns(ours.p90)} / ",
          "#{fmt_ns(ours.p99)}). Raw bashkit's build when the interpreters before it were dropped ",
          "on another thread in batches of 8, as the NIF's teardown drops sessions: ",
          "#{fmt_ns(elsewhere.median)} (#{fmt_ns(elsewhere.p90)} / #{fmt_ns(elsewhere.p99)}), against ",
          "#{fmt_ns(median(r, "raw/session_new.new"))} when each is dropped where it was built.\n"
        ]

      _ ->
        ""
    end
  end

  defp concurrency_table(r) do
    c1 = ops_per_s(r, "ours/concurrency.1")
    raw1 = ops_per_s(r, "raw/concurrency.1")

    [
      "| sessions | raw execs/s | ExBashkit execs/s | ExBashkit / raw | ExBashkit vs 1 session | CPU per exec raw / ExBashkit | raw p99 | ExBashkit median | ExBashkit p99 |\n",
      "|---|---|---|---|---|---|---|---|---|\n",
      for n <- Bench.Cases.concurrency_levels() do
        raw = ops_per_s(r, "raw/concurrency.#{n}")
        ours = ops_per_s(r, "ours/concurrency.#{n}")
        lat = fn name -> match?({:throughput, _, _, _, _, _}, r[name]) && elem(r[name], 5) end
        rl = lat.("raw/concurrency.#{n}")
        ol = lat.("ours/concurrency.#{n}")

        "| #{n} | #{raw && fmt_int(raw)} | #{ours && fmt_int(ours)} | #{fmt_ratio(ratio(ours, raw))} | " <>
          "#{fmt_ratio(ratio(ours, c1))} (raw #{fmt_ratio(ratio(raw, raw1))}) | " <>
          "#{fmt_ns(cpu_per_op(r, "raw/concurrency.#{n}"))} / #{fmt_ns(cpu_per_op(r, "ours/concurrency.#{n}"))} | " <>
          "#{rl && fmt_ns(rl.p99)} | #{ol && fmt_ns(ol.median)} | #{ol && fmt_ns(ol.p99)} |\n"
      end
    ]
  end

  defp memory_table(r) do
    row = fn label, name ->
      case r[name] do
        {:memory, count, bps, before, after_kb} ->
          "| #{label} | #{fmt_bytes(bps)} | #{fmt_int(count)} | #{fmt_bytes(before * 1024)} → #{fmt_bytes(after_kb * 1024)} |\n"

        _ ->
          "| #{label} | – | | |\n"
      end
    end

    beam = info(r, "ours/idle_session.beam_bytes")

    [
      "RSS growth of the OS process per idle session while N more sessions are created and kept ",
      "(after 1 000 already exist, so allocator start-up is not counted).\n\n",
      "| | per idle session | sessions created | RSS |\n|---|---|---|---|\n",
      row.("raw bashkit", "raw/idle_session"),
      row.("ExBashkit", "ours/idle_session"),
      if(beam,
        do:
          "\nOf ExBashkit's figure, #{beam} bytes per session are BEAM memory (`:erlang.memory(:total)`).\n",
        else: ""
      )
    ]
  end

  defp responsiveness_table(r) do
    row = fn label, name ->
      case stats(r, name) do
        nil ->
          "| #{label} | – | | | | |\n"

        s ->
          "| #{label} | #{fmt_ns(s.median)} | #{fmt_ns(s.p90)} | #{fmt_ns(s.p99)} | #{fmt_ns(s.max)} | #{s.n} |\n"
      end
    end

    scripts = info(r, "ours/ping.loaded_scripts")
    lost = info(r, "ours/udp_ping.loaded.lost")

    [
      "Requests served by a plain Elixir process, first on an idle node, then while 64 ",
      "sessions run the 10 000-iteration loop back to back",
      if(scripts, do: " (#{scripts} scripts completed during the measurement)", else: ""),
      ". *UDP ping* (the target metric): another OS process sends a datagram every ",
      "millisecond to 127.0.0.1 and a plain process echoes it, so the round trip includes ",
      "waiting for a scheduler thread to get a CPU",
      if(lost && lost != "0", do: " (#{lost} pings lost under load)", else: ""),
      ". *In-VM ping*: a round trip between two processes. *Sleep overshoot*: how late ",
      "a process wakes from `Process.sleep(1)` (BEAM timers round up, hence ~1 ms when idle).\n\n",
      "| | median | p90 | p99 | max | n |\n|---|---|---|---|---|---|\n",
      row.("UDP ping, idle", "ours/udp_ping.idle"),
      row.("UDP ping, 64 sessions busy", "ours/udp_ping.loaded"),
      row.("in-VM ping, idle", "ours/ping.idle"),
      row.("in-VM ping, 64 sessions busy", "ours/ping.loaded"),
      row.("sleep overshoot, idle", "ours/sleep_overshoot.idle"),
      row.("sleep overshoot, 64 sessions busy", "ours/sleep_overshoot.loaded"),
      row.(
        "unrelated `Session.exec(\"echo hi\")`, 64 sessions busy",
        "ours/unrelated_echo.loaded"
      )
    ]
  end

  # What no design can beat, from figures of this run (group `floor`): raw
  # bashkit's buffered exec (how the NIF runs a short straight-line script
  # such as `echo hi`), its live execution (how it runs the others, for
  # their yields), the VM's own dirty no-op call, which a quick script
  # (`echo hi`, run on the caller's scheduler) does not make and any other
  # script does, and bashkit behind a bare NIF (groups `echo` and `new`).
  # Each goal the floor already misses is out of reach.
  defp floor_table(r) do
    buffered = median(r, "raw/sched.echo.inline_exec")
    live = median(r, "raw/sched.echo.inline_execute_sinks")
    noop = median(r, "vm/dirty_noop")
    noop_cpu = cpu_per_op(r, "vm/dirty_noop.concurrency.1")
    noop64 = ops_per_s(r, "vm/dirty_noop.concurrency.64")
    raw_cpu = cpu_per_op(r, "raw/cpu.echo")
    s_exec = median(r, "ours/echo_hi.session_exec")
    cpu_echo = cpu_per_op(r, "ours/cpu.echo")
    raw_builtin = median(r, "raw/builtin.exec")
    raw_builtin_thread = median(r, "raw/builtin.exec_from_thread")
    builtin = median(r, "ours/builtin.exec")

    if Enum.all?([buffered, live, noop], &is_number/1) do
      pct = fn a, b -> if is_number(a) and is_number(b), do: fmt_ratio(a / b), else: "–" end

      [
        "\n## The floor under the goals\n\n",
        "Measured in this run (`--only floor`): raw bashkit's buffered `exec` (never yields; how the ",
        "NIF runs a short straight-line script such as `echo hi`, which would not reach a yield ",
        "live either) and its live execution with byte sinks (yields every 64 commands, which is how ",
        "the NIF runs other scripts so that a long one can be moved off its thread), both polled ",
        "inline in Rust; a raw ",
        "custom builtin answered inline and by a thread that sleeps until asked (`--only builtin`); and ",
        "`:erts_debug.dirty_cpu(:wait, 0)`, a dirty CPU call that does nothing, from Elixir; ",
        "and the bare NIF (`bench/raw/src/lib.rs`, groups `echo` and `new`): bashkit built with the ",
        "NIF's settings behind the thinnest NIF, its `exec` polled on the caller's scheduler on a big ",
        "stack, with nothing of ours around it. A quick script such as `echo hi` runs buffered on the ",
        "caller's own scheduler, with no dirty call: its floor is the bare NIF's. Every other in-node ",
        "exec is one dirty call.\n\n",
        "| | figure | goal it bounds |\n|---|---|---|\n",
        "| raw buffered `exec(\"echo hi\")` | #{fmt_ns(buffered)} | |\n",
        "| raw live execution, same script | #{fmt_ns(live)} (#{fmt_signed_delta(live, buffered)}: what a script that may run long pays; upstream, see bench/DECISIONS.md) | |\n",
        "| dirty no-op call, median | #{fmt_ns(noop)} (what a script that is not quick adds) | |\n",
        bare_nif_floor_rows(r, buffered, s_exec),
        back_call_rows(r, raw_builtin, raw_builtin_thread, builtin, s_exec),
        "| dirty no-op calls/s, 64 processes | #{if noop64, do: fmt_int(noop64), else: "–"} | |\n",
        "| CPU per dirty no-op call, one process | #{if noop_cpu, do: fmt_ns(noop_cpu), else: "–"} (the schedulers' busy-waiting) | |\n",
        cpu_floor_row(cpu_per_op(r, "vm/bare_nif.cpu.echo"), raw_cpu, cpu_echo, pct)
      ]
    else
      []
    end
  end

  # CPU per `echo hi`: its floor is the bare NIF's, counted the same way in
  # the `cpu` group (raw's without it), against which ours is read.
  defp cpu_floor_row(bare, raw, ours, pct) when is_number(bare) and is_number(raw),
    do:
      "| **floor of CPU per `echo hi`** = the bare NIF's CPU per `echo hi` | #{fmt_ns(bare)} " <>
        "(#{pct.(bare, raw)} raw's #{fmt_ns(raw)}); measured #{fmt_ns(ours)}, #{pct.(ours, bare)} the floor, " <>
        "#{pct.(ours, raw)} raw | ≤ 1.5× raw |\n"

  defp cpu_floor_row(_bare, raw, ours, pct),
    do:
      "| **floor of CPU per `echo hi`** = raw CPU | #{if raw, do: fmt_ns(raw), else: "–"}; measured #{pct.(ours, raw)} raw | ≤ 1.5× raw |\n"

  # What bashkit costs in this VM behind the thinnest NIF (groups `echo` and
  # `new`, `Bench.BareNif`): the floor of `Session.exec/2`, and of a
  # `Session.new/1` built during the call, for any NIF design. Without it (a
  # harness built before it), raw bashkit's buffered exec in Rust.
  defp bare_nif_floor_rows(r, buffered, s_exec) do
    bare = median(r, "vm/bare_nif.exec")
    raw = median(r, "raw/echo_hi.exec")
    bare_new = median(r, "vm/bare_nif.new")
    in_call = median(r, "ours/session_new.in_call")

    if is_number(bare) do
      [
        "| bare NIF `exec(\"echo hi\")`: bashkit behind the thinnest NIF, in this VM (`bench/raw/src/lib.rs`) | ",
        "#{fmt_ns(bare)} (#{fmt_signed_delta(bare, raw)} over raw's exec: what the VM costs any NIF) | |\n",
        "| **floor of `Session.exec`** = the bare NIF's exec | #{fmt_ns(bare)}; measured #{fmt_ns(s_exec)} ",
        "(#{fmt_signed_delta(s_exec, bare)} over the floor) | raw + 3 µs |\n",
        shaped_row(median(r, "vm/bare_nif.shaped_exec"), bare, s_exec),
        if(is_number(bare_new),
          do:
            "| **floor of a `Session.new/1` built during the call** = the bare NIF's build (dropped where the VM collects it) | " <>
              "#{fmt_ns(bare_new)}; measured #{fmt_ns(in_call)} (#{fmt_signed_delta(in_call, bare_new)}) | raw new + 3 µs |\n",
          else: ""
        )
      ]
    else
      "| **floor of `Session.exec`** = raw buffered | #{fmt_ns(buffered)}; measured #{fmt_ns(s_exec)} (#{fmt_delta(s_exec, buffered)} over the floor) | raw + 3 µs |\n"
    end
  end

  # The bare NIF behind `Session.exec/2`'s arguments and answer: what the
  # API's shape costs over the floor, and what the rest of our layer costs.
  defp shaped_row(shaped, bare, s_exec) when is_number(shaped) do
    "| the bare NIF with `Session.exec`'s shape: its arguments (call map, pid, ref) and " <>
      "`{:ok, %Result{}}` built in the NIF, none of its work | #{fmt_ns(shaped)} " <>
      "(#{fmt_signed_delta(shaped, bare)}: the API's shape); measured #{fmt_ns(s_exec)} " <>
      "(#{fmt_signed_delta(s_exec, shaped)}: the rest of our layer) | raw + 3 µs |\n"
  end

  defp shaped_row(_shaped, _bare, _s_exec), do: ""

  # A back-call in this VM: the bare NIF's round trip (its request returned
  # by the exec, answered in a fresh process or in the caller, the script
  # resumed by a second call) over its exec, the floor of ours; and in pure
  # Rust, a builtin answered by a sleeping thread against one answered
  # inline, what a back-call that leaves the script's thread would pay.
  defp back_call_rows(r, inline, from_thread, builtin, s_exec) do
    bare = median(r, "vm/bare_nif.builtin")
    bare_in_caller = median(r, "vm/bare_nif.builtin_in_caller")
    bare_exec = median(r, "vm/bare_nif.exec")

    measured =
      if Enum.all?([builtin, s_exec], &is_number/1),
        do: "; measured #{fmt_delta(builtin, s_exec)} (builtin round trip − `Session.exec`)",
        else: ""

    bare_rows =
      if Enum.all?([bare, bare_in_caller, bare_exec], &is_number/1) do
        [
          "| bare NIF builtin `answer`: the request returned by its exec, answered in a fresh process / in the caller, the script resumed by a second call | ",
          "#{fmt_ns(bare)} / #{fmt_ns(bare_in_caller)} | |\n",
          "| **floor of a back-call** = the bare NIF's round trip − its exec | ",
          "#{fmt_delta(bare, bare_exec)} (of which the fresh process: #{fmt_delta(bare, bare_in_caller)})#{measured} | exec + 15 µs |\n"
        ]
      else
        []
      end

    thread_rows =
      if Enum.all?([inline, from_thread], &is_number/1) do
        [
          "| raw builtin `answer`, answered on the script's thread / by another thread | ",
          "#{fmt_ns(inline)} / #{fmt_ns(from_thread)} (a back-call that leaves the script's thread pays #{fmt_delta(from_thread, inline)}) | |\n"
        ]
      else
        []
      end

    bare_rows ++ thread_rows
  end

  defp construct_table(r) do
    rows = [
      {"`Bash::new()` (bashkit defaults)", "construct.bash_new"},
      {"our builder settings, without alias expansion", "construct.builder_no_alias"},
      {"our builder settings (= `build_bash`)", "construct.build_bash"},
      {"… with `.rootfs(false)` (not used: changes behaviour)", "construct.no_rootfs"},
      {"alias expansion (`shell_state` + `restore_shell_state`) alone",
       "construct.alias_state_roundtrip"},
      {"dropping an idle interpreter", "construct.drop"}
    ]

    if Enum.any?(rows, fn {_, n} -> stats(r, "raw/" <> n) end) do
      [
        "\n## Where interpreter construction goes (raw bashkit)\n\n",
        "| step | median (p90 / p99) |\n|---|---|\n",
        for {label, name} <- rows, s = stats(r, "raw/" <> name) do
          "| #{label} | #{fmt_ns(s.median)} (#{fmt_ns(s.p90)} / #{fmt_ns(s.p99)}) |\n"
        end,
        case {mem(r, "raw/construct.memory.build_bash"), mem(r, "raw/construct.memory.no_rootfs")} do
          {a, b} when is_integer(a) and is_integer(b) ->
            "\nMemory per idle interpreter: #{fmt_bytes(a)} with our settings, #{fmt_bytes(b)} " <>
              "without the root filesystem layer.\n"

          _ ->
            ""
        end
      ]
    else
      ""
    end
  end

  defp hex_table(r) do
    rows = [
      {"`Session.exec` \"echo hi\" (median)", fmt_ns(@hex.session_exec_ns) <> " (5–18 µs)",
       fmt_ns(median(r, "ours/echo_hi.session_exec"))},
      {"`ExBashkit.exec` \"echo hi\" (median)", "29–54 µs",
       fmt_ns(median(r, "ours/echo_hi.exec"))},
      {"`Session.new` (median)", fmt_ns(@hex.session_new_ns),
       fmt_ns(median(r, "ours/session_new.new"))},
      {"builtin round trip (median)", "~40–50 µs (target ≤ 20 µs)",
       fmt_ns(median(r, "ours/builtin.exec"))},
      {"RSS per idle session", "26.6 KiB", fmt_bytes(mem(r, "ours/idle_session"))},
      {"small execs/s, 64 sessions", "~10 000",
       (v = ops_per_s(r, "ours/concurrency.64")) && fmt_int(v)},
      {"`System.cmd(\"bash\")` echo hi", "1.7 ms", fmt_ns(median(r, "bash/echo_hi"))}
    ]

    [
      "ex_bashkit 0.1.7's figures come from earlier measurements on this kind of machine ",
      "(`shared/notes/native-build.md`), not from this run.\n\n",
      "| | ex_bashkit 0.1.7 | ExBashkit (this run) |\n|---|---|---|\n",
      for({l, a, b} <- rows, do: "| #{l} | #{a} | #{b || "–"} |\n")
    ]
  end

  defp outputs(r) do
    checks =
      for {key, label} <- [
            {"loop_10k.stdout", "loop"},
            {"pipeline.stdout", "pipeline"},
            {"vfs_backend_1mb.stdout", "virtual_fs read"},
            {"snapshot_1mb.bytes", "snapshot bytes"}
          ],
          impl <- ["raw", "ours", "bash"],
          v = info(r, "#{impl}/#{key}"),
          do: "#{label} (#{impl}): `#{String.trim(v)}`"

    if checks == [],
      do: "",
      else: [
        "\nOutputs checked (every implementation ran the same work): ",
        Enum.join(checks, "; "),
        ".\n"
      ]
  end

  defp unavailable(r) do
    missing = for {name, {:unavailable, reason}} <- r, do: {name, reason}

    if missing == [] do
      ""
    else
      [
        "\n### Cases not available in this build\n\n",
        for({name, reason} <- Enum.sort(missing), do: "- `#{name}`: #{reason}\n")
      ]
    end
  end

  # -- charts -------------------------------------------------------------------

  def latency_chart(r) do
    rows =
      for {label, raw, ours, bash} <- @chart_rows do
        bars =
          [{"raw", "raw/" <> raw}, {"ours", "ours/" <> ours}] ++
            if(bash, do: [{"bash", "bash/" <> bash}], else: [])

        {label, for({impl, name} <- bars, s = stats(r, name), do: {impl, s})}
      end

    Bench.Chart.latency(rows, "Latency per operation (log scale), same run")
  end

  def throughput_chart(r) do
    groups =
      for n <- Bench.Cases.concurrency_levels() do
        bars =
          for {impl, name} <- [{"raw", "raw/concurrency.#{n}"}, {"ours", "ours/concurrency.#{n}"}],
              v = ops_per_s(r, name),
              do: {impl, v}

        {"#{n}", bars}
      end

    Bench.Chart.throughput(groups, "Throughput with N concurrent sessions")
  end
end
