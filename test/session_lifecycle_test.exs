defmodule ExBashkit.SessionLifecycleTest do
  # Not async: it counts live sessions, which other tests would change.
  use ExUnit.Case, async: false

  alias ExBashkit.Session

  test "a session is freed when garbage-collected" do
    # Sessions other tests dropped may still sit in some process's heap:
    # collect them first, or they get freed mid-test and skew the count.
    for p <- Process.list(), do: :erlang.garbage_collect(p)
    before = ExBashkit.Native.live_sessions()

    {pid, ref} =
      spawn_monitor(fn ->
        sessions = for _ <- 1..50, do: Session.new(files: %{"/f" => "x"})
        Enum.each(sessions, fn s -> {:ok, _} = Session.exec(s, "echo hi") end)
        send(self(), {:alive, ExBashkit.Native.live_sessions()})
        receive do: ({:alive, n} -> true = n >= before + 50)
      end)

    assert_receive {:DOWN, ^ref, :process, ^pid, :normal}, 10_000
    assert ExBashkit.Native.live_sessions() <= before
  end
end
