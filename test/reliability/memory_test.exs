defmodule ExBashkit.Reliability.MemoryTest do
  # Create and drop many sessions: after GC, memory returns to where it
  # started. Memory is measured as the VM's resident set size (native
  # allocations are invisible to :erlang.memory/0) and as :erlang.memory/0.
  #
  # Baseline: taken after one warm-up batch, because the first batch grows
  # the allocator to its high-water mark (a batch of live sessions) and
  # starts the interpreter runtime; a leak shows as growth proportional to
  # the number of sessions created after that, which is what is bounded.
  #
  # Not async: it reads the whole VM's memory and counts live sessions.
  use ExUnit.Case, async: false

  alias ExBashkit.Session
  alias ExBashkit.Test.Health

  @batch 1_000

  # Create `n` sessions (used once each) in a process that then exits.
  defp churn(n) do
    {pid, ref} =
      spawn_monitor(fn ->
        sessions = for i <- 1..n, do: Session.new(files: %{"/f" => "#{i}"})
        Enum.each(Enum.take(sessions, 20), &({:ok, _} = Session.exec(&1, "cat /f")))
      end)

    receive do
      {:DOWN, ^ref, :process, ^pid, :normal} -> :ok
    end
  end

  defp settled_memory(live_target) do
    Health.settle_live_sessions(live_target, 30_000)
    Health.gc_all()
    {Health.rss_kb(), :erlang.memory(:total)}
  end

  defp create_and_drop(total) do
    live = ExBashkit.Native.live_sessions()
    churn(@batch)
    {rss0, beam0} = settled_memory(live)

    for _ <- 1..div(total, @batch), do: churn(@batch)
    {rss1, beam1} = settled_memory(live)

    IO.puts(
      "\n  #{total} sessions created and dropped: RSS #{rss0} -> #{rss1} KiB, " <>
        ":erlang.memory #{div(beam0, 1024)} -> #{div(beam1, 1024)} KiB, live sessions #{ExBashkit.Native.live_sessions()}"
    )

    assert ExBashkit.Native.live_sessions() <= live
    assert rss1 <= rss0 * 1.10, "RSS grew from #{rss0} to #{rss1} KiB"
    assert beam1 <= beam0 * 1.10, ":erlang.memory grew from #{beam0} to #{beam1} bytes"
  end

  # RSS of a VM running other tests concurrently is too noisy for a 10%
  # bound in the default run.
  @tag :heavy
  @tag timeout: :infinity
  test "10 000 sessions created and dropped: memory returns within 10%" do
    create_and_drop(10_000)
  end

  @tag :heavy
  @tag timeout: :infinity
  test "100 000 sessions created and dropped: memory returns within 10%" do
    create_and_drop(100_000)
  end

  @tag :heavy
  @tag timeout: :infinity
  test "10 000 sessions alive at once, dropped, twice: the second round reuses the memory" do
    live = ExBashkit.Native.live_sessions()
    churn(10_000)
    {rss1, _} = settled_memory(live)
    churn(10_000)
    {rss2, _} = settled_memory(live)

    IO.puts(
      "\n  10 000 live sessions, dropped, twice: RSS after round 1 #{rss1} KiB, after round 2 #{rss2} KiB"
    )

    assert rss2 <= rss1 * 1.10
  end
end
