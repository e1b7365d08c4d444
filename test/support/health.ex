defmodule ExBashkit.Test.Health do
  @moduledoc false
  # "The node is healthy afterwards", made checkable: a fresh session and a
  # one-shot exec still answer, concurrent execs all complete, and helpers to
  # poll for a condition (no sleep-and-hope) and read the OS-level memory of
  # this BEAM (native allocations are invisible to `:erlang.memory/0`).

  import ExUnit.Assertions

  alias ExBashkit.{Result, Session}

  @doc "Assert that the library still serves work: fresh sessions, one-shot execs, concurrency."
  def assert_healthy! do
    s = Session.new()
    assert {:ok, %Result{stdout: "ok\n"}} = Session.exec(s, "echo ok")
    assert {:ok, %Result{stdout: "ok\n"}} = ExBashkit.exec("echo ok")

    results =
      1..16
      |> Task.async_stream(fn i -> ExBashkit.exec("echo #{i}") end,
        max_concurrency: 16,
        timeout: 30_000
      )
      |> Enum.map(fn {:ok, {:ok, %Result{stdout: out}}} -> out end)

    assert results == Enum.map(1..16, &"#{&1}\n")
    :ok
  end

  @doc "Assert `session` answers a trivial script."
  def assert_usable!(session) do
    assert {:ok, %Result{stdout: "alive\n"}} = Session.exec(session, "echo alive")
    :ok
  end

  @doc "Poll `fun` every few ms until it returns truthy; flunk after `timeout_ms`."
  def wait_until(fun, timeout_ms \\ 30_000, what \\ "condition") do
    deadline = System.monotonic_time(:millisecond) + timeout_ms
    do_wait(fun, deadline, what)
  end

  defp do_wait(fun, deadline, what) do
    cond do
      fun.() ->
        :ok

      System.monotonic_time(:millisecond) > deadline ->
        flunk("timed out waiting for #{what}")

      true ->
        Process.sleep(5)
        do_wait(fun, deadline, what)
    end
  end

  @doc """
  Whether process `pid` is blocked in a receive: a caller that has sent its
  request and waits for the answer.
  """
  def waiting?(pid), do: Process.info(pid, :status) == {:status, :waiting}

  @doc "Whether a script is running on `session` right now."
  def running?(session), do: inspect(session) =~ "status: :running"

  @doc "Resident set size of this OS process, in KiB (Linux)."
  def rss_kb do
    "/proc/self/status"
    |> File.read!()
    |> String.split("\n")
    |> Enum.find_value(fn
      "VmRSS:" <> rest -> rest |> String.split() |> hd() |> String.to_integer()
      _ -> nil
    end)
  end

  @doc "Garbage-collect every process (so dropped sessions are released)."
  def gc_all do
    for pid <- Process.list(), do: :erlang.garbage_collect(pid)
    :ok
  end

  @doc "`ExBashkit.Native.live_sessions/0` once GC has settled, polled for up to `timeout_ms`."
  def settle_live_sessions(target, timeout_ms \\ 10_000) do
    wait_until(
      fn ->
        gc_all()
        ExBashkit.Native.live_sessions() <= target
      end,
      timeout_ms,
      "live sessions to drop to #{target} (now #{ExBashkit.Native.live_sessions()})"
    )
  end
end
