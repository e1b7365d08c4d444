defmodule ExBashkit.Session.LifecycleTest do
  # Not async: it counts live sessions, which other tests would change.
  use ExUnit.Case, async: false

  alias ExBashkit.Session

  test "a session is freed when garbage-collected" do
    # Sessions other tests dropped may still sit in some process's heap, or
    # in an interpreter task that has replied but not yet let go: collect
    # what can be collected; the rest may be freed mid-test, so the count
    # can only be compared as "at most" (the in-process check counts this
    # test's own 50 sessions against a floor, not against `before`).
    for p <- Process.list(), do: :erlang.garbage_collect(p)
    before = ExBashkit.Backend.live_sessions()

    {pid, ref} =
      spawn_monitor(fn ->
        sessions = for _ <- 1..50, do: Session.new(files: %{"/f" => "x"})
        Enum.each(sessions, fn s -> {:ok, _} = Session.exec(s, "echo hi") end)
        # (Their number while alive is not asserted: sessions other tests
        # dropped may be freed in the meantime.)
      end)

    assert_receive {:DOWN, ^ref, :process, ^pid, :normal}, 10_000
    # The DOWN can arrive before the dead process's heap (and with it the
    # sessions) is released, and an interpreter task holds its session until
    # just after replying: poll instead of reading the count once.
    assert freed_down_to?(before, 1_000),
           "live sessions stayed at #{ExBashkit.Backend.live_sessions()}"
  end

  defp freed_down_to?(target, tries) do
    cond do
      ExBashkit.Backend.live_sessions() <= target ->
        true

      tries == 0 ->
        false

      true ->
        Process.sleep(10)
        freed_down_to?(target, tries - 1)
    end
  end
end
