defmodule ExBashkit.Test.Property do
  @moduledoc false
  # PropEr (Debian's `erlang-proper`, a declared test requirement installed by
  # `scripts/setup`) driven from ExUnit through its function API: Elixir has
  # no access to PropEr's macros.
  #
  #     use ExBashkit.Test.Property
  #
  #     property "exec/2 never crashes", quick: 100, heavy: 5_000 do
  #       forall(Gen.script(), fn script -> ... true end)
  #     end
  #
  # `property/3` defines two tests: the quick one runs in the default suite,
  # the heavy one (many more cases) only under `--only heavy`.
  #
  # Failures print the *shrunk* counterexample and the reason the property
  # failed on it. Two details of the Debian PropEr 1.2 build shape this module:
  #
  #   * on OTP >= 24 its exception handler calls `erlang:get_stacktrace/0`,
  #     which no longer exists, so an exception raised inside a property
  #     escapes as `UndefinedFunctionError` and shrinking never happens.
  #     `forall/2` therefore catches everything itself and turns it into
  #     `false`, remembering the formatted exception;
  #   * after shrinking, the counterexample is re-checked with
  #     `:proper.check/3`, so the reason shown is the one for exactly that
  #     counterexample.

  import ExUnit.Assertions

  @failure_key :ex_bashkit_property_failure

  defmacro __using__(_opts) do
    quote do
      import ExBashkit.Test.Property, only: [property: 3, forall: 2, bounded: 2]
    end
  end

  @doc """
  Define a quick test and a `:heavy` test checking the property `body`
  evaluates to, with `quick` and `heavy` test cases respectively.
  """
  defmacro property(name, counts, do: body) do
    quick = Keyword.fetch!(counts, :quick)
    heavy = Keyword.fetch!(counts, :heavy)

    quote do
      @tag timeout: :infinity
      test "property: #{unquote(name)}" do
        ExBashkit.Test.Property.check!(fn -> unquote(body) end, unquote(quick))
      end

      @tag :heavy
      @tag timeout: :infinity
      test "property: #{unquote(name)} [heavy]" do
        ExBashkit.Test.Property.check!(fn -> unquote(body) end, unquote(heavy))
      end
    end
  end

  @doc "Fail loudly when PropEr is not installed: it is a declared requirement."
  def ensure_proper! do
    unless Code.ensure_loaded?(:proper) and Code.ensure_loaded?(:proper_types) do
      flunk("""
      PropEr is not available, but the property tests require it.
      Install it with scripts/setup (Debian package erlang-proper; it must be
      on the Erlang code path, e.g. /usr/lib/erlang/lib/proper-*).
      """)
    end

    :ok
  end

  @doc """
  Run the property built by `build` for `numtests` cases; flunk with the shrunk
  counterexample if it fails.
  """
  def check!(build, numtests) do
    ensure_proper!()
    prop = build.()
    {:ok, log} = Agent.start_link(fn -> [] end)

    output = fn format, args ->
      Agent.update(log, &[:io_lib.format(format, args) | &1])
    end

    Process.delete(@failure_key)

    result =
      :proper.quickcheck(prop, [
        {:numtests, numtests},
        {:on_output, output},
        :long_result,
        :nocolors
      ])

    transcript = Agent.get(log, &(&1 |> Enum.reverse() |> IO.iodata_to_binary()))
    Agent.stop(log)

    case result do
      true ->
        :ok

      counterexample when is_list(counterexample) ->
        # Re-run exactly the shrunk counterexample to record why it fails.
        Process.delete(@failure_key)
        :proper.check(prop, counterexample, [:quiet])

        flunk("""
        property failed; shrunk counterexample:

        #{inspect(counterexample, pretty: true, limit: :infinity, printable_limit: 4_096)}

        reason:
        #{Process.get(@failure_key, "(the property returned false)")}

        PropEr said:
        #{String.slice(transcript, -4_000, 4_000)}
        """)

      other ->
        flunk("PropEr could not run the property: #{inspect(other)}\n#{transcript}")
    end
  end

  @doc """
  `:proper.forall/2`, with exceptions inside `fun` turned into a failed case
  (see the moduledoc). `fun` returns a boolean or a nested property.
  """
  def forall(generator, fun) when is_function(fun, 1) do
    :proper.forall(generator, fn value ->
      try do
        case fun.(value) do
          false ->
            Process.put(@failure_key, "returned false for #{inspect(value, limit: 50)}")
            false

          other ->
            other
        end
      catch
        kind, reason ->
          Process.put(@failure_key, Exception.format(kind, reason, __STACKTRACE__))
          false
      end
    end)
  end

  @doc """
  Run `fun` in a separate process for at most `ms` milliseconds: `{:ok, value}`,
  `{:raised, formatted}` or `:timeout` (the process is then killed). Used to
  turn "never hangs" into a checkable property.
  """
  def bounded(fun, ms) do
    task =
      Task.async(fn ->
        try do
          {:ok, fun.()}
        catch
          kind, reason -> {:raised, Exception.format(kind, reason, __STACKTRACE__)}
        end
      end)

    case Task.yield(task, ms) || Task.shutdown(task, :brutal_kill) do
      {:ok, result} -> result
      nil -> :timeout
      {:exit, reason} -> {:raised, "exited: #{inspect(reason)}"}
    end
  end
end
