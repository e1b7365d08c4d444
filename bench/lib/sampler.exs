defmodule Bench.Sampler do
  @moduledoc false
  # Runs one operation many times and returns its latencies in nanoseconds.
  #
  # A budget is `{warmup, min, max, millis}`: `warmup` unmeasured runs, then
  # measured runs until `max` samples or until `millis` ms have passed with at
  # least `min` samples. `--quick` shrinks every budget (a smoke run).

  @doc "Scale a budget down for `--quick`."
  def scale({warmup, min, max, millis}, true),
    do: {min(warmup, 20), min(min, 20), min(max, 200), div(millis, 10)}

  def scale(budget, false), do: budget

  @doc """
  Sample `fun`. It returns either `:ok`-ish (the whole call is timed) or
  `{:timed, ns}` when it measured a part of itself.
  """
  def sample({warmup, min, max, millis}, fun) do
    for _ <- 1..warmup//1, do: fun.()
    deadline = System.monotonic_time(:millisecond) + millis
    loop(fun, min, max, deadline, 0, [])
  end

  defp loop(_fun, _min, max, _deadline, n, acc) when n >= max, do: Enum.reverse(acc)

  defp loop(fun, min, max, deadline, n, acc) do
    if n >= min and System.monotonic_time(:millisecond) >= deadline do
      Enum.reverse(acc)
    else
      loop(fun, min, max, deadline, n + 1, [time(fun) | acc])
    end
  end

  @doc "Nanoseconds `fun` took (or the part it timed itself)."
  def time(fun) do
    t0 = System.monotonic_time()

    case fun.() do
      {:timed, ns} -> ns
      _ -> System.convert_time_unit(System.monotonic_time() - t0, :native, :nanosecond)
    end
  end

  @doc "Run `fun` in a fresh process (clean heap; its garbage dies with it)."
  def isolated(fun) do
    task = Task.async(fun)
    Task.await(task, :infinity)
  end
end
