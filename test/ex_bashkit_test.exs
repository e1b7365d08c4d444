defmodule ExBashkitTest do
  use ExUnit.Case, async: true
  doctest ExBashkit

  alias ExBashkit.Result

  test "each call gets a fresh interpreter" do
    assert {:ok, %Result{exit_code: 0}} = ExBashkit.exec("export X=1; echo hi > /f; f() { :; }")
    assert {:ok, %Result{stdout: "<>\n"}} = ExBashkit.exec("echo \"<$X>\"")
    assert {:ok, %Result{exit_code: 1}} = ExBashkit.exec("test -e /f")
    assert {:ok, %Result{exit_code: 127}} = ExBashkit.exec("f")
  end

  test "defaults match a session's: cwd /, user sandbox, host bashkit-sandbox" do
    assert {:ok, %Result{stdout: "/\nsandbox\nbashkit-sandbox\n"}} =
             ExBashkit.exec("pwd; whoami; hostname")
  end

  test "stdout and stderr are separate and binary-safe" do
    assert {:ok, %Result{stdout: <<0, 255>>, stderr: "oops\n", exit_code: 2}} =
             ExBashkit.exec("printf '\\000\\377'; echo oops >&2; exit 2")
  end

  test "a parse error is {:error, message}" do
    assert {:error, %{message: "parse error" <> _}} = ExBashkit.run("echo $(")
  end

  test "a limit exceeded is {:error, message} naming the limit" do
    assert {:error, %{message: message}} = ExBashkit.run("f() { f; }; f")
    assert message =~ "maximum function depth exceeded"
  end

  test "each call gets the interpreter its own :limits asked for, however often it is asked" do
    # Calls with two configurations, interleaved: each configuration gets
    # interpreters built in advance, and none is handed to the other.
    loop = "for i in 1 2 3 4 5; do :; done; echo done"

    for _ <- 1..40 do
      assert {:error, %{reason: :limit, limit: :max_loop_iterations}} =
               ExBashkit.run(loop, limits: [max_loop_iterations: 3])

      assert {:ok, %Result{stdout: "done\n"}} =
               ExBashkit.exec(loop, %{limits: %{max_loop_iterations: 5}})
    end

    assert_raise ArgumentError, ~r/unknown limit :nope/, fn ->
      ExBashkit.exec(loop, limits: [nope: 1])
    end
  end

  test "a script that is not valid UTF-8 is an error, not a crash" do
    assert {:error, %{message: "script is not valid UTF-8"}} = ExBashkit.run(<<"echo ", 0xFF>>)
  end

  test "a non-binary script is a programmer error" do
    assert_raise ArgumentError, ~r/must be a string/, fn -> ExBashkit.exec(:echo) end
    assert_raise ArgumentError, ~r/charlist/, fn -> ExBashkit.exec(~c"echo hi") end
  end

  test "runs in parallel from many processes" do
    results =
      1..50
      |> Task.async_stream(fn i -> ExBashkit.exec("echo #{i}") end, max_concurrency: 50)
      |> Enum.map(fn {:ok, {:ok, r}} -> r.stdout end)

    assert results == Enum.map(1..50, &"#{&1}\n")
  end
end

defmodule ExBashkit.OneShotCallerDeathTest do
  # `ExBashkit.exec/1` whose caller dies. Synchronous: it counts the
  # node's running scripts, which concurrent tests' scripts would otherwise
  # move under it.
  use ExUnit.Case, async: false

  test "a caller that dies cancels its script" do
    # Scripts that earlier tests cancelled may still be winding down.
    ExBashkit.Test.Health.wait_until(
      fn -> ExBashkit.Backend.running_scripts() == 0 end,
      30_000,
      "earlier tests' scripts to end"
    )

    {pid, ref} = spawn_monitor(fn -> ExBashkit.exec("sleep 60") end)

    ExBashkit.Test.Health.wait_until(
      fn -> ExBashkit.Backend.running_scripts() > 0 end,
      10_000,
      "the script to start"
    )

    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, :killed}

    ExBashkit.Test.Health.wait_until(
      fn -> ExBashkit.Backend.running_scripts() == 0 end,
      10_000,
      "the script to be cancelled"
    )
  end
end
