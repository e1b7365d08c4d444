defmodule ExBashkit.Test.Case do
  @moduledoc false
  # The set-ups many test files share. `use ExBashkit.Test.Case, async: true`
  # is `use ExUnit.Case` (same options) plus the helpers below, imported:
  #
  #   * `run!/3`: an exec that must succeed, its `%Result{}`;
  #   * `ok!/2`: the same, and the script must exit 0;
  #   * `out/2`: its stdout;
  #   * `eventually/3`: poll a condition, bounded (raises past the timeout,
  #     saying why if asked);
  #   * `wait_until_running/1`: until a session has an exec in flight;
  #   * `tmp_path/1`: a fresh host path under the system tmp dir, removed
  #     when the test ends;
  #   * `stateful_script/0`: a script that leaves state of every kind a
  #     checkpoint, snapshot or migration must carry;
  #   * `uncapped_limits/0` (called by its full name, at compile time): the
  #     counting limits out of reach, for scripts only time stops.

  use ExUnit.CaseTemplate

  alias ExBashkit.{Result, Session}

  using do
    quote do
      import ExBashkit.Test.Case,
        only: [
          run!: 2,
          run!: 3,
          ok!: 2,
          out: 2,
          eventually: 1,
          eventually: 2,
          eventually: 3,
          wait_until_running: 1,
          tmp_path: 1,
          stateful_script: 0
        ]
    end
  end

  @doc """
  The counting limits raised out of reach, so that only the wall clock
  (`timeout_ms`) or a cancel stops a long script.
  """
  @spec uncapped_limits() :: keyword()
  def uncapped_limits do
    [
      max_commands: 1_000_000_000_000,
      max_loop_iterations: 1_000_000_000_000,
      max_total_loop_iterations: 1_000_000_000_000
    ]
  end

  @doc "Run `script`, which must come back `{:ok, %Result{}}`; the result."
  @spec run!(Session.t(), String.t(), keyword()) :: Result.t()
  def run!(session, script, opts \\ []) do
    ExUnit.Assertions.assert({:ok, %Result{} = result} = Session.exec(session, script, opts))
    result
  end

  @doc "`run!/2` of a script that must exit 0; the `%Result{}`."
  @spec ok!(Session.t(), String.t()) :: Result.t()
  def ok!(session, script) do
    result = run!(session, script)
    ExUnit.Assertions.assert(result.exit_code == 0, "#{script}: #{inspect(result)}")
    result
  end

  @doc "The stdout of `run!/2`."
  @spec out(Session.t(), String.t()) :: String.t()
  def out(session, script), do: run!(session, script).stdout

  @doc """
  Poll `fun` every few milliseconds until it returns a truthy value, for at
  most `timeout` ms; raise past it, with what `explain` returns then (the
  state a failure report needs). Returns the value.
  """
  @spec eventually((() -> term()), pos_integer(), (() -> String.t())) :: term()
  def eventually(fun, timeout \\ 10_000, explain \\ fn -> "" end) do
    poll(fun, System.monotonic_time(:millisecond) + timeout, explain)
  end

  defp poll(fun, deadline, explain) do
    cond do
      value = fun.() ->
        value

      System.monotonic_time(:millisecond) > deadline ->
        raise String.trim("condition not met in time " <> explain.())

      true ->
        Process.sleep(5)
        poll(fun, deadline, explain)
    end
  end

  @doc "Wait (bounded) until `session` has a running exec: a condition, not a guess."
  @spec wait_until_running(Session.t()) :: :ok
  def wait_until_running(session) do
    eventually(fn -> inspect(session) =~ "status: :running" end)
    :ok
  end

  @doc "A fresh path under the system tmp dir (not created), removed when the test ends."
  @spec tmp_path(String.t()) :: Path.t()
  def tmp_path(name) do
    path =
      Path.join(System.tmp_dir!(), "ex_bashkit_#{System.unique_integer([:positive])}_#{name}")

    ExUnit.Callbacks.on_exit(fn -> File.rm_rf(path) end)
    path
  end

  @doc """
  Leaves state of every kind a checkpoint, snapshot or migration must carry:
  an exported variable, a cwd, a file, a function and an alias.
  """
  @spec stateful_script() :: String.t()
  def stateful_script do
    """
    export COLOR=blue
    mkdir -p /work && cd /work
    echo kept > /work/data.txt
    greet() { echo "hello $1"; }
    alias ll='ls -1'
    """
  end
end
