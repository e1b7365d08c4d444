defmodule Bench.Cases do
  @moduledoc false
  # The Elixir side of every case: ExBashkit's API ("ours/...") and
  # `System.cmd("bash", ["-c", script])` ("bash/..."). Scripts, data sizes and
  # limits are the same as in bench/raw/src/main.rs (keep them in step).
  #
  # Each group returns a list of records shaped like the Rust harness's:
  #   {:sample, name, [ns]}
  #   {:throughput, name, sessions, ops, elapsed_ns, cpu_ns, [latency_ns]}
  #   {:memory, name, count, bytes_per_session, rss_before_kb, rss_after_kb}
  #   {:info, key, text}
  #   {:unavailable, name, reason}   a case this build cannot run yet

  alias Bench.Sampler
  alias ExBashkit.Session

  @echo "echo hi"
  @loop "s=0; for ((i=0; i<10000; i++)); do s=$((s + i)); done; echo $s"
  @pipeline "seq 1 10000 | grep 7 | wc -l"
  @loop50 "i=0; while [ $i -lt 50 ]; do i=$((i + 1)); done; echo $i"
  @builtin "answer"
  @vfs_backend "cat /api/blob | wc -c"
  @mb 1024 * 1024
  @loop_limits [max_commands: 1_000_000, max_loop_iterations: 1_000_000]
  @concurrency_levels [1, 2, 8, 64, 512]
  @concurrency_ops 60_000
  @memory_sessions 10_000
  @memory_base 1_000

  def loop_script, do: @loop
  def concurrency_levels, do: @concurrency_levels

  # -- helpers ----------------------------------------------------------------

  defp budget(b, quick?), do: Sampler.scale(b, quick?)

  defp sample(name, b, quick?, fun) do
    {:sample, name, Sampler.isolated(fn -> Sampler.sample(budget(b, quick?), fun) end)}
  end

  # `fun` after a 1 ms sleep each time, only the call timed.
  defp paced(name, quick?, fun) do
    sample(name, {20, 200, 1_000, 1_500}, quick?, fn ->
      Process.sleep(1)
      t0 = System.monotonic_time()
      fun.()
      {:timed, System.convert_time_unit(System.monotonic_time() - t0, :native, :nanosecond)}
    end)
  end

  defp ok!({:ok, %ExBashkit.Result{} = r}, _what), do: r
  defp ok!(other, what), do: raise("#{what}: #{inspect(other, limit: 5)}")

  defp bash_available?, do: System.find_executable("bash") != nil

  defp bash(script) do
    {_, 0} = System.cmd("bash", ["-c", script])
  end

  # The bash baseline: a process per call, as an Elixir user would do it.
  defp bash_sample(name, script, quick?) do
    if bash_available?() do
      {out, 0} = System.cmd("bash", ["-c", script])

      [
        {:info, "bash/#{name}.stdout", out},
        sample("bash/#{name}", {5, 30, 2_000, 1_500}, quick?, fn -> bash(script) end)
      ]
    else
      [{:unavailable, "bash/#{name}", "no bash on PATH"}]
    end
  end

  # -- groups -------------------------------------------------------------------

  def run("echo", quick?) do
    session = Session.new()
    "hi\n" = ok!(Session.exec(session, @echo), "echo").stdout

    [
      sample("ours/echo_hi.session_exec", {2_000, 2_000, 200_000, 1_500}, quick?, fn ->
        Session.exec(session, @echo)
      end),
      # The same call's time outside the interpreter: its wall time less the
      # interpreter's own (`wall_time_us`, whole µs, so this reads up to
      # 1 µs high). Both halves come from one call, so it does not move
      # with the machine's speed between runs as raw's figure does.
      sample("ours/echo_hi.around_interpreter", {500, 2_000, 50_000, 1_000}, quick?, fn ->
        t0 = System.monotonic_time(:nanosecond)
        {:ok, result} = Session.exec(session, @echo)
        {:timed, System.monotonic_time(:nanosecond) - t0 - result.wall_time_us * 1_000}
      end),
      sample("ours/echo_hi.exec", {500, 1_000, 100_000, 1_500}, quick?, fn ->
        ExBashkit.exec(@echo)
      end)
    ] ++ bare_nif_exec(quick?) ++ bash_sample("echo_hi", @echo, quick?)
  end

  def run("new", quick?) do
    [
      sample("ours/session_new.new", {500, 1_000, 100_000, 1_500}, quick?, &Session.new/0),
      # With options, as most callers make them: the options are parsed on
      # every call (the defaults' parse is kept), the configuration is the
      # same each time (the native side decodes it once).
      sample("ours/session_new.with_options", {500, 1_000, 100_000, 1_500}, quick?, fn ->
        Session.new(env: %{"AGENT" => "bench"}, limits: [max_commands: 10_000])
      end),
      # A configuration never asked for before, so nothing was built in
      # advance: decoded and built during the call, as a caller that
      # creates sessions now and then gets it.
      sample("ours/session_new.in_call", {500, 1_000, 100_000, 1_500}, quick?, fn ->
        Session.new(limits: [max_commands: 1_000_000 + System.unique_integer([:positive])])
      end),
      # One call a millisecond, as a caller that makes sessions while it
      # does other work: the interpreters built in advance keep up
      # (native/ex_bashkit/src/run/warm.rs). Beside the bare NIF's build at the
      # same pace, since a call after a pause starts with cold caches on
      # this VM (bench/DECISIONS.md, interpreters built in advance).
      paced("ours/session_new.paced", quick?, &Session.new/0)
    ] ++ bare_nif_new(quick?)
  end

  def run("loop", quick?) do
    session = Session.new(limits: @loop_limits)
    out = ok!(Session.exec(session, @loop), "loop").stdout

    [
      {:info, "ours/loop_10k.stdout", out},
      sample("ours/loop_10k.session_exec", {3, 20, 500, 1_500}, quick?, fn ->
        Session.exec(session, @loop)
      end)
    ] ++ bash_sample("loop_10k", @loop, quick?)
  end

  def run("pipeline", quick?) do
    session = Session.new()
    out = ok!(Session.exec(session, @pipeline), "pipeline").stdout

    [
      {:info, "ours/pipeline.stdout", out},
      sample("ours/pipeline.session_exec", {10, 30, 5_000, 1_500}, quick?, fn ->
        Session.exec(session, @pipeline)
      end)
    ] ++ bash_sample("pipeline", @pipeline, quick?)
  end

  def run("vfs", quick?) do
    session = Session.new()
    data = :binary.copy("x", @mb)

    [
      sample("ours/vfs_1mb.write_read", {20, 100, 10_000, 1_500}, quick?, fn ->
        :ok = Session.write_file(session, "/data/blob.bin", data)
        {:ok, back} = Session.read_file(session, "/data/blob.bin")
        @mb = byte_size(back)
      end)
    ]
  end

  def run("builtin", quick?) do
    name = "ours/builtin.exec"

    with {:ok, session} <- try_new(builtins: %{"answer" => fn _call -> {:ok, "x\n"} end}),
         :ok <- expect(session, @builtin, "x\n") do
      [
        sample(name, {2_000, 2_000, 200_000, 1_500}, quick?, fn ->
          Session.exec(session, @builtin)
        end)
      ] ++ bare_nif_builtin(quick?)
    else
      {:error, reason} -> [{:unavailable, name, reason}]
    end
  end

  def run("vfs_backend", quick?) do
    name = "ours/vfs_backend_1mb.exec"
    data = :binary.copy("x", @mb)

    backend = fn
      %{op: :read} -> {:ok, data}
      _ -> {:error, :enotsup}
    end

    with {:ok, session} <- try_new(virtual_fs: %{"/api" => backend}),
         :ok <- expect(session, @vfs_backend, "#{@mb}\n") do
      [
        sample(name, {20, 100, 10_000, 1_500}, quick?, fn ->
          Session.exec(session, @vfs_backend)
        end)
      ]
    else
      {:error, reason} -> [{:unavailable, name, reason}]
    end
  end

  def run("snapshot", quick?) do
    if function_exported?(Session, :snapshot, 2) and function_exported?(Session, :restore, 3) do
      snapshot_case(quick?)
    else
      reason = "ExBashkit.Session.snapshot/2 and restore/3 are not available in this build"

      [
        {:unavailable, "ours/snapshot_1mb.snapshot", reason},
        {:unavailable, "ours/snapshot_1mb.restore", reason}
      ]
    end
  end

  # CPU time per exec of one session exec'ing back to back: `echo hi` and a
  # 50-iteration `while` loop (the per-command cost), as throughput records
  # so that the CPU of every thread is counted; and the bare NIF's `echo hi`,
  # the floor of the first.
  def run("cpu", quick?) do
    ops = if quick?, do: 2_000, else: 20_000

    for {name, script} <- [{"echo", @echo}, {"loop50", @loop50}] do
      Sampler.isolated(fn -> cpu_case(name, script, ops) end)
    end ++ bare_nif_cpu(ops)
  end

  # 100 sessions whose builtin execs a script on a session of its own, all
  # at once: every one must complete (the nested calls must not starve).
  def run("nested", quick?) do
    n = if quick?, do: 20, else: 100
    Sampler.isolated(fn -> nested(n) end)
  end

  def run("concurrency", quick?) do
    total = if quick?, do: 5_000, else: @concurrency_ops

    for n <- @concurrency_levels do
      Sampler.isolated(fn -> concurrency(n, total) end)
    end
  end

  # The VM's own floor under the scheduler goals: a dirty CPU call that does
  # nothing (`:erts_debug.dirty_cpu(:wait, 0)`), from one process (latency,
  # and CPU per call: the schedulers' busy-waiting) and from 64 at once.
  # Every in-node exec makes one such call; the report's floor table adds these to
  # raw bashkit's figures to get what no dirty-scheduler design can beat.
  def run("floor", quick?) do
    noop = fn -> fn -> :erts_debug.dirty_cpu(:wait, 0) end end
    calls = if quick?, do: 5_000, else: 200_000

    [
      sample("vm/dirty_noop", {2_000, 2_000, 200_000, 1_000}, quick?, noop.()),
      Sampler.isolated(fn -> throughput("vm/dirty_noop.concurrency.1", 1, calls, noop) end),
      Sampler.isolated(fn -> throughput("vm/dirty_noop.concurrency.64", 64, calls, noop) end)
    ]
  end

  def run("memory", quick?) do
    count = if quick?, do: 1_000, else: @memory_sessions
    Sampler.isolated(fn -> memory(count) end)
  end

  def run("responsiveness", quick?) do
    Sampler.isolated(fn -> responsiveness(quick?) end)
  end

  # -- the bare NIF's floors, beside the cases above ----------------------------

  # The same `echo hi` through the bare NIF (bench/lib/bare_nif.exs), timed
  # like `Session.exec/2` in the same rounds: the floor of an exec in the VM.
  defp bare_nif_exec(quick?) do
    with_bare_nif("vm/bare_nif.exec", fn ->
      bare = Bench.BareNif.new()
      {"hi\n", "", 0} = Bench.BareNif.exec(bare, @echo)

      sample("vm/bare_nif.exec", {2_000, 2_000, 200_000, 1_500}, quick?, fn ->
        Bench.BareNif.exec(bare, @echo)
      end)
    end) ++ bare_nif_shaped_exec(quick?)
  end

  # The same behind `Session.exec/2`'s arguments and answer (`%Result{}`
  # built in the NIF), none of its work: what the API's shape costs.
  defp bare_nif_shaped_exec(quick?) do
    with_bare_nif("vm/bare_nif.shaped_exec", fn ->
      bare = Bench.BareNif.new()
      {:ok, %ExBashkit.Result{stdout: "hi\n"}} = Bench.BareNif.exec_shaped(bare, @echo)

      sample("vm/bare_nif.shaped_exec", {2_000, 2_000, 200_000, 1_500}, quick?, fn ->
        Bench.BareNif.exec_shaped(bare, @echo)
      end)
    end)
  end

  # CPU per `echo hi` through the bare NIF, counted like `Session.exec/2`'s in
  # the `cpu` group: the floor of that goal in the VM, which raw bashkit's
  # CPU (a Rust loop, no VM) is not.
  defp bare_nif_cpu(ops) do
    with_bare_nif("vm/bare_nif.cpu.echo", fn ->
      Sampler.isolated(fn ->
        bare = Bench.BareNif.new()

        cpu_loop("vm/bare_nif.cpu.echo", ops, fn ->
          {"hi\n", "", 0} = Bench.BareNif.exec(bare, @echo)
        end)
      end)
    end)
  end

  # `case_fun`'s record, or `name` reported unavailable without the bare NIF.
  defp with_bare_nif(name, case_fun) do
    if Bench.BareNif.available?(),
      do: [case_fun.()],
      else: [{:unavailable, name, "the bare NIF is not built (scripts/bench builds it)"}]
  end

  # An interpreter built during the call by the bare NIF, dropped where the
  # VM collects its handle: the floor of a `Session.new/1` built in the call.
  defp bare_nif_new(quick?) do
    with_bare_nif("vm/bare_nif.new", fn ->
      sample("vm/bare_nif.new", {500, 1_000, 100_000, 1_500}, quick?, &Bench.BareNif.new/0)
    end) ++
      with_bare_nif("vm/bare_nif.new_paced", fn ->
        paced("vm/bare_nif.new_paced", quick?, &Bench.BareNif.new/0)
      end)
  end

  # The same round trip through the bare NIF: the request returned by its
  # exec, answered by a function in a fresh process (as the library runs a
  # builtin) or in the caller, and handed back by a second call that
  # resumes the script there. The floor of a back-call in the VM, and what
  # the process alone costs.
  defp bare_nif_builtin(quick?) do
    answer = fn _request -> "x\n" end

    Enum.flat_map(
      [{"vm/bare_nif.builtin", []}, {"vm/bare_nif.builtin_in_caller", [in_caller: true]}],
      fn {name, opts} ->
        with_bare_nif(name, fn ->
          bare = Bench.BareNif.new_calling()
          {"x\n", "", 0} = Bench.BareNif.round_trip(bare, @builtin, answer, opts)

          sample(name, {2_000, 2_000, 200_000, 1_500}, quick?, fn ->
            Bench.BareNif.round_trip(bare, @builtin, answer, opts)
          end)
        end)
      end
    )
  end

  # -- the longer cases ---------------------------------------------------------

  # Calls through `apply/3` so that this file compiles against a build
  # without snapshot/restore.
  defp snapshot_case(quick?) do
    session = Session.new()

    for i <- 0..15 do
      :ok = Session.write_file(session, "/state/f#{i}.bin", :rand.bytes(div(@mb, 16)))
    end

    ok!(Session.exec(session, "x=42; greet() { echo hi; }"), "snapshot setup")
    {:ok, bytes} = apply(Session, :snapshot, [session, []])
    fresh = Session.new()
    {:ok, fresh} = apply(Session, :restore, [fresh, bytes, []])
    check = ok!(Session.exec(fresh, "echo $x; wc -c < /state/f3.bin"), "restored").stdout

    [
      {:info, "ours/snapshot_1mb.bytes", Integer.to_string(byte_size(bytes))},
      {:info, "ours/snapshot_1mb.restored", check},
      sample("ours/snapshot_1mb.snapshot", {5, 30, 2_000, 1_500}, quick?, fn ->
        {:ok, _} = apply(Session, :snapshot, [session, []])
      end),
      sample("ours/snapshot_1mb.restore", {5, 30, 2_000, 1_500}, quick?, fn ->
        {:ok, _} = apply(Session, :restore, [fresh, bytes, []])
      end)
    ]
  end

  defp try_new(opts) do
    {:ok, Session.new(opts)}
  rescue
    e in ArgumentError -> {:error, "not available in this build: " <> Exception.message(e)}
  end

  defp expect(session, script, stdout) do
    case Session.exec(session, script) do
      {:ok, %{stdout: ^stdout}} ->
        :ok

      other ->
        {:error,
         "not available in this build (#{inspect(script)} answered #{inspect(other, limit: 3, printable_limit: 80)})"}
    end
  end

  # `n` processes, each with its own session, exec "echo hi" back to back;
  # `total` execs in all. Sessions are built and warmed before the clock.
  defp concurrency(n, total) do
    throughput("ours/concurrency.#{n}", n, total, fn ->
      session = Session.new()
      fn -> {:ok, _} = Session.exec(session, @echo) end
    end)
  end

  # `n` processes run `op` back to back, `total` calls in all, each process
  # with the operation `setup` (run in that process) returns, warmed once
  # before the clock starts.
  defp throughput(name, n, total, setup) do
    per = div(total + n - 1, n)
    parent = self()
    go = make_ref()

    workers =
      for _ <- 1..n do
        spawn_link(fn ->
          op = setup.()
          op.()
          send(parent, {:ready, self()})
          receive do: (^go -> :ok)

          lat =
            for _ <- 1..per do
              t0 = System.monotonic_time()
              op.()
              System.monotonic_time() - t0
            end

          send(parent, {:done, self(), lat})
        end)
      end

    for w <- workers, do: receive(do: ({:ready, ^w} -> :ok))
    cpu0 = cpu_ns()
    t0 = System.monotonic_time()
    for w <- workers, do: send(w, go)

    latencies = Enum.flat_map(workers, fn w -> receive(do: ({:done, ^w, lat} -> lat)) end)

    elapsed = System.monotonic_time() - t0
    cpu = cpu_ns() - cpu0
    ns = &System.convert_time_unit(&1, :native, :nanosecond)
    {:throughput, name, n, length(latencies), ns.(elapsed), cpu, Enum.map(latencies, ns)}
  end

  defp cpu_case(name, script, ops) do
    session = Session.new()
    cpu_loop("ours/cpu.#{name}", ops, fn -> {:ok, _} = Session.exec(session, script) end)
  end

  # The process's CPU time (every thread's) over `ops` calls of `exec` back
  # to back, after one call to warm up, as a throughput record `name`.
  defp cpu_loop(name, ops, exec) do
    exec.()
    cpu0 = cpu_ns()
    t0 = System.monotonic_time()

    lat =
      for _ <- 1..ops do
        t = System.monotonic_time()
        exec.()
        System.monotonic_time() - t
      end

    elapsed = System.monotonic_time() - t0
    cpu = cpu_ns() - cpu0
    ns = &System.convert_time_unit(&1, :native, :nanosecond)
    {:throughput, name, 1, ops, ns.(elapsed), cpu, Enum.map(lat, ns)}
  end

  defp nested(n) do
    builtin = fn _call ->
      inner = Session.new()
      {:ok, r} = Session.exec(inner, "echo inner")
      {:ok, r.stdout}
    end

    parent = self()
    t0 = System.monotonic_time()

    for i <- 1..n do
      spawn(fn ->
        session = Session.new(builtins: %{"nest" => builtin})
        send(parent, {:nested, i, Session.exec(session, "nest", timeout_ms: 10_000)})
      end)
    end

    ok =
      Enum.count(1..n, fn _ ->
        receive do
          {:nested, _, {:ok, %ExBashkit.Result{stdout: "inner\n"}}} -> true
          {:nested, _, _} -> false
        after
          15_000 -> false
        end
      end)

    ms = System.convert_time_unit(System.monotonic_time() - t0, :native, :microsecond) / 1000
    [{:info, "ours/nested.ok", "#{ok}/#{n}"}, {:info, "ours/nested.ms", Float.to_string(ms)}]
  end

  # RSS growth while `count` more sessions are created and kept, after
  # `@memory_base` already exist: the marginal cost of one idle session,
  # BEAM side (the struct and resource handle) included.
  defp memory(count) do
    base = for _ <- 1..@memory_base, do: Session.new()
    :erlang.garbage_collect()
    before = rss_kb()
    beam_before = :erlang.memory(:total)
    sessions = for _ <- 1..count, do: Session.new()
    :erlang.garbage_collect()
    after_kb = rss_kb()
    beam_after = :erlang.memory(:total)
    live = ExBashkit.Native.live_sessions()

    # "Alive without trouble": every one of them still answers.
    failures =
      sessions
      |> Enum.take_every(max(div(count, 500), 1))
      |> Enum.count(fn s ->
        not match?({:ok, %ExBashkit.Result{stdout: "hi\n"}}, Session.exec(s, @echo))
      end)

    # Keeps both lists alive until here (and not garbage before the RSS reads).
    kept = length(base) + length(sessions)

    [
      {:memory, "ours/idle_session", count, div((after_kb - before) * 1024, count), before,
       after_kb},
      {:info, "ours/idle_session.beam_bytes",
       Integer.to_string(div(beam_after - beam_before, count))},
      {:info, "ours/idle_session.live", "#{live} (#{kept} held)"},
      {:info, "ours/idle_session.failures", Integer.to_string(failures)}
    ]
  end

  # CPU time (user + system, every thread's) of this OS process, in ns, as
  # the raw harness reads its own (bench/raw/src/cpu_clock.rs), through the
  # bare NIF. Without it, `/proc/self/stat`'s 10 ms clock ticks.
  defp cpu_ns do
    if Bench.BareNif.available?() do
      Bench.BareNif.process_cpu_ns()
    else
      [_, rest] = "/proc/self/stat" |> File.read!() |> String.split(")", parts: 2)
      fields = String.split(rest)
      ticks = String.to_integer(Enum.at(fields, 11)) + String.to_integer(Enum.at(fields, 12))
      ticks * 10_000_000
    end
  end

  @doc false
  def rss_kb do
    "/proc/self/status"
    |> File.read!()
    |> String.split("\n")
    |> Enum.find_value(fn
      "VmRSS:" <> rest -> rest |> String.split() |> hd() |> String.to_integer()
      _ -> nil
    end)
  end

  # How fast a plain Elixir process serves requests, first on an idle node,
  # then while 64 sessions run the CPU-heavy loop script back to back:
  #   - UDP pings from another OS process (bench/raw --ping), answered by a
  #     plain process: the target metric, since a request from outside has
  #     to wait for a scheduler thread to get a CPU;
  #   - pings between two processes inside the VM, and how late the pinging
  #     process wakes from `Process.sleep(1)` (timer lateness).
  defp responsiveness(quick?) do
    secs = if quick?, do: 300, else: 3_000
    {udp_port, echo} = udp_echo()
    idle = ping_for(div(secs, 3))
    idle_udp = Bench.Raw.ping(udp_port, div(secs, 3))

    stop = :atomics.new(1, [])

    load =
      for _ <- 1..64 do
        spawn_link(fn ->
          session = Session.new(limits: @loop_limits)
          heavy_loop(session, stop, 0)
        end)
      end

    # Let the load ramp up (every session running) before measuring.
    Process.sleep(200)
    unrelated = Task.async(fn -> unrelated_echo(secs) end)
    busy = ping_for(secs)
    busy_udp = Bench.Raw.ping(udp_port, secs)
    unrelated = Task.await(unrelated, :infinity)
    :atomics.put(stop, 1, 1)

    scripts =
      Enum.sum(
        for pid <- load do
          ref = Process.monitor(pid)
          send(pid, {:count, self()})
          n = receive do: ({:count, ^pid, n} -> n)
          receive do: ({:DOWN, ^ref, _, _, _} -> n)
        end
      )

    send(echo, :stop)
    udp = fn records, phase -> Enum.map(records, &rename_udp(&1, phase)) end

    [
      {:sample, "ours/ping.idle", elem(idle, 0)},
      {:sample, "ours/ping.loaded", elem(busy, 0)},
      {:sample, "ours/sleep_overshoot.idle", elem(idle, 1)},
      {:sample, "ours/sleep_overshoot.loaded", elem(busy, 1)},
      {:sample, "ours/unrelated_echo.loaded", unrelated},
      {:info, "ours/ping.loaded_scripts", Integer.to_string(scripts)}
    ] ++ udp.(idle_udp, "idle") ++ udp.(busy_udp, "loaded")
  end

  # `Session.exec("echo hi")` on a session of its own, every millisecond for
  # `millis` ms, while the load runs: what a user unrelated to it waits.
  defp unrelated_echo(millis) do
    session = Session.new()
    {:ok, _} = Session.exec(session, @echo)
    deadline = System.monotonic_time(:millisecond) + millis
    unrelated_loop(session, deadline, [])
  end

  defp unrelated_loop(session, deadline, acc) do
    if System.monotonic_time(:millisecond) >= deadline do
      Enum.reverse(acc)
    else
      t0 = System.monotonic_time()
      {:ok, _} = Session.exec(session, @echo)
      ns = System.convert_time_unit(System.monotonic_time() - t0, :native, :nanosecond)
      Process.sleep(1)
      unrelated_loop(session, deadline, [ns | acc])
    end
  end

  defp rename_udp({tag, "raw/ping.udp" <> rest, value}, phase),
    do: {tag, "ours/udp_ping.#{phase}#{rest}", value}

  # A plain process echoing UDP datagrams on 127.0.0.1.
  defp udp_echo do
    parent = self()

    pid =
      spawn_link(fn ->
        {:ok, socket} = :gen_udp.open(0, [:binary, active: true, ip: {127, 0, 0, 1}])
        {:ok, port} = :inet.port(socket)
        send(parent, {:udp_port, self(), port})
        udp_echo_loop(socket)
      end)

    receive do: ({:udp_port, ^pid, port} -> {port, pid})
  end

  defp udp_echo_loop(socket) do
    receive do
      {:udp, ^socket, ip, port, data} ->
        :ok = :gen_udp.send(socket, ip, port, data)
        udp_echo_loop(socket)

      :stop ->
        :gen_udp.close(socket)
    end
  end

  defp heavy_loop(session, stop, n) do
    if :atomics.get(stop, 1) == 1 do
      receive do: ({:count, from} -> send(from, {:count, self(), n}))
    else
      {:ok, _} = Session.exec(session, @loop)
      heavy_loop(session, stop, n + 1)
    end
  end

  # `{round_trips, sleep_overshoots}` in ns: a ping/pong with a process
  # every millisecond, and how late the pinger's own `Process.sleep(1)`
  # wakes up (a scheduler thread that cannot get a CPU shows up there).
  defp ping_for(millis) do
    ponger =
      spawn_link(fn ->
        pong = fn pong ->
          receive do
            {:ping, from, ref} ->
              send(from, {:pong, ref})
              pong.(pong)

            :stop ->
              :ok
          end
        end

        pong.(pong)
      end)

    deadline = System.monotonic_time(:millisecond) + millis
    {rtts, lates} = ping_loop(ponger, deadline, [], [])
    send(ponger, :stop)
    {rtts, lates}
  end

  defp ping_loop(ponger, deadline, rtts, lates) do
    if System.monotonic_time(:millisecond) >= deadline do
      {Enum.reverse(rtts), Enum.reverse(lates)}
    else
      ref = make_ref()
      t0 = System.monotonic_time()
      send(ponger, {:ping, self(), ref})
      receive do: ({:pong, ^ref} -> :ok)
      t1 = System.monotonic_time()
      Process.sleep(1)
      t2 = System.monotonic_time()
      rtt = System.convert_time_unit(t1 - t0, :native, :nanosecond)
      late = System.convert_time_unit(t2 - t1, :native, :nanosecond) - 1_000_000
      ping_loop(ponger, deadline, [rtt | rtts], [max(late, 0) | lates])
    end
  end
end
