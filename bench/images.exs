# What sessions over a shared base image cost (issue 18's goal: 1 000
# sessions over a 50 MB image cost less than 50 MB + 1 000 × an empty
# session's memory). `scripts/bench-images`, or
# `MIX_ENV=prod mix run bench/images.exs [--sessions N] [--mb M] [--out FILE]`.
#
# Process mode: one dedicated worker OS process per phase, its RSS from
# /proc (idle, then with N empty sessions; a fresh one idle, then with the
# image and N sessions over it). In-node: the VM's RSS (empty sessions, then
# the image, then N sessions over it, everything kept alive so that the
# deltas add up). Each session runs one script (reads an image file, writes
# a small one of its own) so that it is a used session, not only a built
# one. Then the default: a process per session (at most 200 of them, each
# some MB), their PSS summed, sessions over the image against empty ones:
# the processes map one file of the image (`ExBashkit.Image.Mapped`), so
# its pages count once, split between them. Writes bench/images.md.

Code.require_file("lib/memory.exs", __DIR__)

defmodule Bench.Images do
  import Bench.Memory, only: [rss_kb: 1, pss_kb: 1, vm_rss_kb: 0, loadavg: 0]
  alias ExBashkit.{Image, Session, Worker}
  alias ExBashkit.Session.Options

  # What each session runs: look at the image, write a file of its own;
  # `--read` also reads a 1 MB image file (transient allocator garbage).
  @script "test -f /img/f0001; echo hi > /tmp/mine"
  @read_script "cat /img/f0001 > /dev/null 2>&1; echo hi > /tmp/mine"

  def main(argv) do
    {opts, _, _} =
      OptionParser.parse(argv,
        strict: [sessions: :integer, mb: :integer, out: :string, read: :boolean]
      )

    Process.put(:script, if(opts[:read], do: @read_script, else: @script))

    n = Keyword.get(opts, :sessions, 1_000)
    mb = Keyword.get(opts, :mb, 50)
    out = Keyword.get(opts, :out, "bench/images.md")
    load_before = loadavg()

    IO.puts(:stderr, "==> building a #{mb} MB image")
    # In a task of its own: the input binaries go with it, so that the VM's
    # RSS measured later is not moved by their release.
    {image, build_ms} =
      Task.await(Task.async(fn -> timed(fn -> build_image(mb) end) end), 120_000)

    IO.puts(:stderr, "==> in-node, #{n} sessions")
    in_node = in_node(image, n)
    IO.puts(:stderr, "==> process mode, #{n} sessions")
    process = process_mode(image, n)
    own_n = min(n, 200)
    IO.puts(:stderr, "==> a process per session, #{own_n} sessions")
    own = own_processes(image, own_n)

    report = render(image, build_ms, n, process, in_node, own, load_before, loadavg())
    File.write!(out, report)
    IO.puts(report)
  end

  # `mb` files of 1 MB each under /img (random bytes: nothing to share).
  defp build_image(mb) do
    files =
      for i <- 1..mb, into: %{} do
        {"/img/f" <> String.pad_leading("#{i}", 4, "0"), :crypto.strong_rand_bytes(1_000_000)}
      end

    {:ok, image} = Image.build(files: files)
    image
  end

  defp process_mode(image, n) do
    empty = worker_phase(:bench_images_empty, n, fn -> {Options.parse!([]).native, %{}} end)

    based =
      worker_phase(:bench_images_based, n, fn ->
        native = Options.parse!(base: image).native
        {%{native | base: image.id}, %{image: image}}
      end)

    %{empty: empty, based: based}
  end

  defp worker_phase(name, n, config) do
    {native, meta} = config.()
    if meta[:image], do: ExBashkit.Image.Mapped.ensure!(meta.image)
    grants = ExBashkit.Worker.Grants.of_config(native)
    {:ok, pid} = Worker.start_link(name: name, grants: grants)
    # A question that starts the OS process (`live_sessions` is answered
    # without one).
    %{} = Worker.call(pid, {:confinement})
    os_pid = Worker.os_pid(pid)
    idle = rss_kb(os_pid)

    first =
      for sid <- 1..n, reduce: nil do
        first ->
          :ok = Worker.call(pid, {:new, sid, native}, meta)
          ref = make_ref()
          call = %{stdin: nil, stream: false, timeout_ms: nil, track_changes: false}
          Worker.request(pid, ref, {:exec, sid, Process.get(:script), call})

          receive do
            {:ex_bashkit_reply, ^ref, {:ok, _}} -> :ok
          after
            10_000 -> raise "exec #{sid} did not answer"
          end

          # After the first session: the worker's threads, and for the based
          # phase the image as loaded (what the load left resident).
          first || rss_kb(os_pid)
      end

    Process.sleep(500)
    loaded = rss_kb(os_pid)
    GenServer.stop(pid)
    %{idle_kb: idle, first_kb: first, loaded_kb: loaded, delta_kb: loaded - idle}
  end

  defp in_node(image, n) do
    :erlang.garbage_collect()
    Process.sleep(1_000)
    start = vm_rss_kb()
    empty = for _ <- 1..n, do: used(Session.new(isolation: :in_node))
    after_empty = vm_rss_kb()
    based = for _ <- 1..n, do: used(Session.new(isolation: :in_node, base: image))
    Process.sleep(500)
    after_based = vm_rss_kb()
    # Both sets stay alive until measured.
    _ = {length(empty), length(based)}

    %{
      start_kb: start,
      empty_delta_kb: after_empty - start,
      based_delta_kb: after_based - after_empty
    }
  end

  # PSS of `n` sessions each in its own process (the default), empty and
  # over the image; both sets alive while measured.
  defp own_processes(image, n) do
    empty = for _ <- 1..n, do: used(Session.new())
    based = for _ <- 1..n, do: used(Session.new(base: image))
    Process.sleep(1_000)
    pss = fn sessions -> sessions |> Enum.map(&pss_kb(Session.info(&1).os_pid)) |> Enum.sum() end
    result = %{empty_kb: pss.(empty), based_kb: pss.(based), n: n}
    # Both sets held until measured: a session collected stops its process.
    ^n = length(empty) + length(based) - n
    result
  end

  defp used(session) do
    {:ok, _} = Session.exec(session, Process.get(:script))
    session
  end

  defp timed(fun) do
    {us, value} = :timer.tc(fun)
    {value, div(us, 1000)}
  end

  defp mb(kb), do: :erlang.float_to_binary(kb / 1024, decimals: 1)

  defp render(image, build_ms, n, process, in_node, own, load_before, load_after) do
    image_mb = image.bytes / 1_000_000
    per_empty_kb = process.empty.delta_kb / n
    goal_kb = image.bytes / 1024 + n * per_empty_kb
    ok? = process.based.delta_kb < goal_kb
    node_per_empty_kb = in_node.empty_delta_kb / n
    node_goal_kb = image.bytes / 1024 + n * node_per_empty_kb

    """
    # Shared base images: memory

    `scripts/bench-images` (bench/images.exs). #{n} sessions, each running
    one script: `#{Process.get(:script)}`.
    Image: #{image.files} files, #{:erlang.float_to_binary(image_mb, decimals: 1)} MB,
    built in #{build_ms} ms (id #{String.slice(image.id, 0, 12)}).
    Load average before: #{load_before}; after: #{load_after} (2 cores).
    MB here are 2^20 bytes (the image's #{image.bytes} content bytes are
    #{mb(image.bytes / 1024)} of them).

    ## Process mode (one worker OS process, RSS)

    | | idle worker | after the 1st session | with #{n} sessions | delta |
    |---|---:|---:|---:|---:|
    | empty sessions | #{mb(process.empty.idle_kb)} MB | #{mb(process.empty.first_kb)} MB | #{mb(process.empty.loaded_kb)} MB | #{mb(process.empty.delta_kb)} MB (#{round(per_empty_kb)} KB a session) |
    | sessions over the image (image included) | #{mb(process.based.idle_kb)} MB | #{mb(process.based.first_kb)} MB | #{mb(process.based.loaded_kb)} MB | #{mb(process.based.delta_kb)} MB |

    Goal (issue 18): delta over the image < image + #{n} × empty session
    (the empty row, same run) = #{mb(image.bytes / 1024)} + #{mb(n * per_empty_kb)} =
    #{mb(goal_kb)} MB. Measured #{mb(process.based.delta_kb)} MB: **#{if ok?, do: "met", else: "NOT met"}**
    (#{mb(abs(goal_kb - process.based.delta_kb))} MB #{if ok?, do: "under", else: "over"}).
    (Without sharing, #{n} copies of the image alone would be #{round(image_mb * n)} MB.)

    ## In the node (VM RSS)

    | | delta |
    |---|---:|
    | #{n} empty sessions | #{mb(in_node.empty_delta_kb)} MB (#{round(node_per_empty_kb)} KB a session) |
    | #{n} sessions over the image (image already built) | #{mb(in_node.based_delta_kb)} MB |

    In the node the image is built once (its cost is in the VM before the
    sessions: it is not in the second row). Goal bound for comparison:
    image + #{n} × empty = #{mb(node_goal_kb)} MB.

    ## A process per session (the default; PSS summed over the processes)

    | #{own.n} sessions | PSS in all |
    |---|---:|
    | empty | #{mb(own.empty_kb)} MB |
    | over the image | #{mb(own.based_kb)} MB |
    | difference | #{mb(own.based_kb - own.empty_kb)} MB |

    Goal (issue 67): the difference < image + #{own.n} × nothing = #{mb(image.bytes / 1024)} MB
    plus what each process keeps of the image's index: **#{if own.based_kb - own.empty_kb < 2 * image.bytes / 1024, do: "one copy", else: "more than one copy"}**
    (#{Float.round((own.based_kb - own.empty_kb) / (image.bytes / 1024), 2)} images' worth; a copy each would be #{own.n}).
    """
  end
end

Bench.Images.main(System.argv())
