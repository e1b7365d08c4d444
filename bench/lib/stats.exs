defmodule Bench.Stats do
  @moduledoc false
  # Percentiles of a list of samples (nanoseconds), nearest-rank like the
  # Rust harness (bench/raw/src/main.rs::percentile), so both sides agree.

  @doc "Summary of `samples`: n, min, median, p90, p99, max (same unit)."
  def summary([]), do: nil

  def summary(samples) do
    sorted = Enum.sort(samples)
    tuple = List.to_tuple(sorted)

    %{
      n: tuple_size(tuple),
      min: elem(tuple, 0),
      median: percentile(tuple, 50),
      p90: percentile(tuple, 90),
      p99: percentile(tuple, 99),
      max: elem(tuple, tuple_size(tuple) - 1)
    }
  end

  defp percentile(tuple, p) do
    n = tuple_size(tuple)
    rank = round(p / 100 * (n - 1))
    elem(tuple, min(rank, n - 1))
  end

  @doc "A duration in ns as text with a unit a person reads at a glance."
  def fmt_ns(nil), do: "–"

  def fmt_ns(ns) when ns < 1_000, do: "#{round(ns)} ns"
  def fmt_ns(ns) when ns < 10_000, do: "#{:erlang.float_to_binary(ns / 1_000, decimals: 2)} µs"
  def fmt_ns(ns) when ns < 1_000_000, do: "#{:erlang.float_to_binary(ns / 1_000, decimals: 1)} µs"

  def fmt_ns(ns) when ns < 1_000_000_000,
    do: "#{:erlang.float_to_binary(ns / 1_000_000, decimals: 2)} ms"

  def fmt_ns(ns), do: "#{:erlang.float_to_binary(ns / 1_000_000_000, decimals: 2)} s"

  @doc "A ratio as text (`12.3×`)."
  def fmt_ratio(nil), do: "–"
  def fmt_ratio(r) when r >= 100, do: "#{round(r)}×"
  def fmt_ratio(r) when r >= 10, do: "#{:erlang.float_to_binary(r, decimals: 1)}×"
  def fmt_ratio(r), do: "#{:erlang.float_to_binary(r, decimals: 2)}×"

  @doc "Bytes as KiB/MiB text."
  def fmt_bytes(nil), do: "–"

  def fmt_bytes(b) when b < 1024 * 1024,
    do: "#{:erlang.float_to_binary(b / 1024, decimals: 1)} KiB"

  def fmt_bytes(b), do: "#{:erlang.float_to_binary(b / 1024 / 1024, decimals: 1)} MiB"

  @doc "An integer with thousands separators."
  def fmt_int(nil), do: "–"
  def fmt_int(n) when is_float(n), do: fmt_int(round(n))

  def fmt_int(n) when is_integer(n) do
    n
    |> Integer.to_string()
    |> String.reverse()
    |> String.graphemes()
    |> Enum.chunk_every(3)
    |> Enum.map_join(" ", &Enum.join/1)
    |> String.reverse()
  end
end
