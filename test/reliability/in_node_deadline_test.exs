defmodule ExBashkit.Reliability.InNodeDeadlineTest do
  # In the node, nobody but its caller can answer an exec whose command
  # does not check the exec's token. A worker's owner answers such an exec
  # a second past its deadline (blast_radius_test.exs); in the node its
  # caller waited for the command to end: measured, 30 s for a jq `reduce`
  # under `timeout_ms: 500` (bashkit 0.20.2's jq checks only the session's
  # own limit), 15.5 s for python's `3 ** 63000000`. The caller now gives
  # up on it the same second past the deadline, with its output so far;
  # the command runs on, and its late answer never reaches the caller. A
  # cancelled one is answered a second after the cancel.
  #
  # `uniq -f 100000` over 60 000 lines skips fields for seconds without a
  # check (policy/bombs.rs refuses larger counts, which never return), then ends
  # by itself: 5.6 s on a quiet machine (90 µs a line; 30 000 lines, 2.7 s,
  # left a cancel's answer too little room on CI). Runs alone (`async:
  # false`): the one-shot case sets the isolation mode, and every case
  # counts the scripts still running.
  use ExUnit.Case, async: false

  alias ExBashkit.{Backend, Error, Result, Session}
  alias ExBashkit.Test.Health

  @long "echo before; seq 60000 | uniq -f 100000 | wc -l"

  setup do
    on_exit(fn -> Health.wait_until(&no_scripts?/0, 60_000, "the commands to end") end)
  end

  @tag timeout: 120_000
  test "a session's exec is answered past its deadline, and the session stays in order" do
    s = Session.new(isolation: :in_node)

    assert {:error, %Error{reason: :timeout, stdout: "before\n"} = error} =
             Session.run(s, @long, timeout_ms: 300)

    assert error.message =~ "timed out after 300 ms"
    # Ordered, not timed: answered while the command still ran.
    assert Backend.running_scripts() > 0

    # A call queued behind it with a deadline of its own is answered by
    # that deadline; one without waits its turn.
    assert {:error, %Error{reason: :timeout}} = Session.run(s, "echo queued", timeout_ms: 200)
    assert {:ok, %Result{stdout: "after\n"}} = Session.exec(s, "echo after")
    assert_nothing_came_late()
  end

  @tag timeout: 120_000
  test "a one-shot exec is answered past its deadline" do
    isolation = Application.get_env(:ex_bashkit, :isolation)
    Application.put_env(:ex_bashkit, :isolation, :in_node)
    on_exit(fn -> Application.put_env(:ex_bashkit, :isolation, isolation) end)

    assert {:error, %Error{reason: :timeout, stdout: "before\n"}} =
             ExBashkit.run(@long, limits: [timeout_ms: 300])

    assert Backend.running_scripts() > 0
    assert_nothing_came_late()
  end

  # `cancel/1` comes from another process than the caller's: the watchdog
  # answers the exec in its stead a second later (before, the caller waited
  # for the command, or since the caller's give-up for its deadline).
  @tag timeout: 120_000
  test "a cancelled exec is answered a second after the cancel" do
    s = Session.new(isolation: :in_node)

    # Cancelled once `uniq` runs: a second after the `echo`'s output, well
    # past the 50 ms `seq` takes (a cancel before `uniq` starts stops the
    # script at that command boundary, the usual way). Answered a second
    # later, while `uniq` runs on for seconds.
    canceller =
      spawn(fn ->
        receive do
          {:ex_bashkit_output, {:stdout, "before\n"}} -> Process.sleep(1_000)
        end

        Session.cancel(s)
      end)

    assert {:error, %Error{reason: :cancelled, stdout: "before\n"} = error} =
             Session.run(s, @long, stream_to: canceller)

    assert error.message =~ "cancelled by cancel/1"
    assert Backend.running_scripts() > 0
    assert {:ok, %Result{stdout: "after\n"}} = Session.exec(s, "echo after")
    assert_nothing_came_late()
  end

  @tag timeout: 120_000
  test "a streamed exec ends with the error and the chunks it wrote" do
    s = Session.new(isolation: :in_node)
    events = s |> Session.stream(@long, timeout_ms: 300) |> Enum.to_list()
    assert [{:stdout, "before\n"}, {:error, "execution timed out" <> _}] = events
    assert Backend.running_scripts() > 0
  end

  # Once the command has ended, none of its messages reached its caller.
  defp assert_nothing_came_late do
    Health.wait_until(&no_scripts?/0, 60_000, "the command to end")
    refute_received {:ex_bashkit_reply, _, _}
    refute_received {:ex_bashkit_output, _, _}
  end

  defp no_scripts?, do: Backend.running_scripts() == 0
end
