defmodule ExBashkit.Properties.ExecTest do
  # Random scripts and random bytes: `exec/2` (and `ExBashkit.exec/1`) answer
  # `{:ok, %Result{}}` or `{:error, %ExBashkit.Error{}}`, within the time limit, and the
  # session keeps answering afterwards.
  use ExUnit.Case, async: true
  use ExBashkit.Test.Property

  alias :proper_types, as: T
  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.Gen

  # Tight limits keep each case short; the bound on the whole case is far
  # above `timeout_ms`, so hitting it means a hang, not a slow script.
  @limits [limits: [timeout_ms: 2_000]]
  @case_bound_ms 20_000

  property "grammar-built scripts, several per session", quick: 150, heavy: 10_000 do
    forall(T.resize(6, T.non_empty(T.list(Gen.script()))), fn scripts ->
      run_case(scripts, &alive?/1)
    end)
  end

  property "scripts with random shell metacharacters inserted", quick: 150, heavy: 10_000 do
    forall(T.non_empty(T.resize(3, T.list(Gen.mutated_script()))), fn scripts ->
      run_case(scripts, &answers?/1)
    end)
  end

  property "random unicode text", quick: 100, heavy: 5_000 do
    forall(T.non_empty(T.resize(3, T.list(Gen.utf8()))), fn scripts ->
      run_case(scripts, &answers?/1)
    end)
  end

  property "random bytes, to exec/2 and ExBashkit.exec/1", quick: 100, heavy: 5_000 do
    forall(Gen.bytes(), fn bytes ->
      case bounded(
             fn -> {Session.run(Session.new(@limits), bytes), ExBashkit.run(bytes)} end,
             @case_bound_ms
           ) do
        {:ok, {a, b}} -> well_formed!(a) and well_formed!(b)
        :timeout -> raise "hung for #{@case_bound_ms} ms"
        {:raised, formatted} -> raise formatted
      end
    end)
  end

  property "random bytes as stdin", quick: 50, heavy: 2_000 do
    forall(
      T.tuple([Gen.bytes(), T.elements(["cat", "wc -c", "read -r l; echo $l", "tr a b", "sort"])]),
      fn {stdin, script} ->
        {:ok, result} =
          bounded(
            fn -> Session.run(Session.new(@limits), script, stdin: stdin) end,
            @case_bound_ms
          )

        well_formed!(result) and
          (script != "cat" or match?({:ok, %Result{stdout: ^stdin}}, result))
      end
    )
  end

  defp run_case(scripts, check_alive) do
    case bounded(
           fn ->
             s = Session.new(@limits)
             outcomes = Enum.map(scripts, &Session.run(s, &1))
             {outcomes, Session.run(s, "echo alive")}
           end,
           @case_bound_ms
         ) do
      {:ok, {outcomes, alive}} ->
        Enum.each(outcomes, &well_formed!/1)
        check_alive.(alive) or raise "session no longer answers: #{inspect(alive)}"

      :timeout ->
        raise "hung for #{@case_bound_ms} ms"

      {:raised, formatted} ->
        raise formatted
    end
  end

  defp well_formed!({:ok, %Result{stdout: out, stderr: err, exit_code: code}})
       when is_binary(out) and is_binary(err) and is_integer(code),
       do: true

  defp well_formed!({:error, %ExBashkit.Error{message: message, stdout: out, stderr: err}})
       when is_binary(message) and is_binary(out) and is_binary(err),
       do: true

  defp well_formed!(other),
    do: raise("not {:ok, %Result{}} or {:error, %ExBashkit.Error{}}: #{inspect(other)}")

  # The grammar never redefines echo nor silences the shell: "alive" must come back.
  defp alive?({:ok, %Result{stdout: out}}), do: out =~ "alive"
  defp alive?(_), do: false

  # Mutated scripts can leave any shell state behind (set -e, traps, ...): the
  # session must still answer, with anything well-formed.
  defp answers?(outcome), do: well_formed!(outcome)
end
