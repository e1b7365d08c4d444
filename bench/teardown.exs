# Where a big session is torn down: measured from what waits meanwhile.
#
#   * in the node: a process holding a session of N files exits; the time
#     from its exit to its DOWN is what the VM spent releasing its heap,
#     the session's teardown included if it runs there (a normal scheduler);
#   * in a worker: another session of the same worker OS process execs
#     `echo hi` back to back; its longest exec while the big session is
#     dropped, against its longest in a window as long without a drop.
#
# Run: MIX_ENV=prod mix run bench/teardown.exs [FILES] (default 20 000;
# writing N files costs bashkit O(N^2) path comparisons, so keep it modest).
alias ExBashkit.Session

files = String.to_integer(List.first(System.argv()) || "20000")
limits = [max_files: files * 2]
window_ms = 300

fill = fn session ->
  for i <- 1..files, do: :ok = Session.write_file(session, "/d/f#{i}", "x")
end

# A process holding a filled session, waiting for :go to exit.
holder = fn opts ->
  parent = self()

  pid =
    spawn(fn ->
      session = Session.new([limits: limits] ++ opts)
      fill.(session)
      send(parent, {:filled, session.location})
      receive do: (:go -> :ok)
    end)

  receive do: ({:filled, location} -> {pid, location})
end

# In the node.
for _ <- 1..3 do
  {pid, _} = holder.(isolation: :in_node)
  ref = Process.monitor(pid)
  t0 = System.monotonic_time(:microsecond)
  send(pid, :go)
  receive do: ({:DOWN, ^ref, _, _, _} -> :ok)

  IO.puts(
    "in node: holder of #{files} files, exit to DOWN: #{System.monotonic_time(:microsecond) - t0} µs"
  )
end

# In a worker.
longest_echo = fn session, during ->
  parent = self()

  pinger =
    spawn(fn ->
      loop = fn loop, longest ->
        receive do
          :stop -> send(parent, {:longest, longest})
        after
          0 ->
            t0 = System.monotonic_time(:microsecond)
            {:ok, _} = Session.exec(session, "echo hi")
            loop.(loop, max(longest, System.monotonic_time(:microsecond) - t0))
        end
      end

      loop.(loop, 0)
    end)

  Process.sleep(50)
  during.()
  Process.sleep(window_ms)
  send(pinger, :stop)
  receive do: ({:longest, us} -> us)
end

for _ <- 1..3 do
  {pid, {:process, worker, _}} = holder.(isolation: :process)

  beside =
    Stream.repeatedly(fn -> Session.new(isolation: :process) end)
    |> Enum.find(&match?({:process, ^worker, _}, &1.location))

  quiet = longest_echo.(beside, fn -> :ok end)
  dropping = longest_echo.(beside, fn -> send(pid, :go) end)

  IO.puts(
    "worker: longest `echo hi` beside it, #{window_ms} ms without a drop: #{quiet} µs; " <>
      "while a session of #{files} files is dropped: #{dropping} µs"
  )
end
