defmodule ExBashkit.Reliability.KnownIssuesTest do
  # Reproducers for problems this suite found and that are not fixed yet.
  # Each test asserts the behaviour we want, so it FAILS today; they are
  # tagged :known_issue and excluded from the default run (see
  # test/test_helper.exs). Run them with:
  #
  #     mix test --only known_issue
  #
  # When one starts passing, drop its tag and move it next to its peers.
  # SECURITY.md lists each one under "Known issues".
  use ExUnit.Case, async: false

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.HttpServer

  @moduletag :known_issue

  # bashkit 0.20.2: Interpreter::execute waits for background jobs at the end
  # of every exec (`jobs.finish_all()`), and clears the job table only when
  # it returns. When the timeout drops the exec, the table is not cleared
  # (`clear_cancelled_execution_state` leaves jobs alone), so the next exec
  # waits for the same job and times out too, for as long as the job lives:
  # `sleep 100000 &` poisons the session for a day. (`kill %1` clears it.)
  @tag timeout: 60_000
  test "a background job that outlives the timeout poisons the session" do
    s = Session.new(limits: [timeout_ms: 500])
    assert {:error, %{message: message}} = Session.run(s, "sleep 1000 & wait")
    assert message =~ "timeout"
    assert {:ok, %Result{stdout: "alive\n"}} = Session.exec(s, "echo alive")
  end

  # bashkit 0.20.2: `-L` is ignored when combined with other short flags:
  # `curl -sL` returns the 3xx body with exit 0, `curl -s -L` follows.
  test "`curl -sL` does not follow redirects" do
    server =
      HttpServer.start!(
        routes: %{"/from" => {302, [{"location", "/to"}], "moved"}, "/to" => {200, [], "arrived"}}
      )

    base = "http://127.0.0.1:#{server.port}"
    s = Session.new(allow_net: [base], block_private_ips: false)
    assert {:ok, %Result{stdout: "arrived"}} = Session.exec(s, "curl -s -L #{base}/from")
    assert {:ok, %Result{stdout: "arrived"}} = Session.exec(s, "curl -sL #{base}/from")
  end

  # bashkit 0.20.2 resets `$?` to 0 at the start of every exec
  # (`reset_transient_state`); only its `terminal` feature carries it, and
  # through a crate-private method (`carry_exit_code`). An agent's next
  # tool call expects the previous one's status.
  test "$? at the start of an exec is the previous exec's status" do
    s = Session.new()
    assert {:ok, %Result{exit_code: 1}} = Session.exec(s, "false")
    assert {:ok, %Result{stdout: "1\n"}} = Session.exec(s, "echo $?")
  end
end
