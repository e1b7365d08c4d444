defmodule Bench.RealisticCases do
  @moduledoc false
  # The realistic case set, `bench/realistic/cases.txt`, read the way the
  # raw harness reads it (bench/raw/src/realistic.rs): `=== name category`,
  # then an optional `--- setup` block and a `--- script` block.

  @path Path.expand("../realistic/cases.txt", __DIR__)

  @doc "The file the cases are read from."
  def path, do: @path

  @doc "Every case: `%{name, category, setup, script}`, in file order."
  def all do
    @path
    |> File.read!()
    |> String.split("\n")
    |> Enum.reduce({[], nil}, &line/2)
    |> elem(0)
    |> Enum.reverse()
  end

  defp line("=== " <> header, {cases, _block}) do
    [name, category] = String.split(header)
    {[%{name: name, category: category, setup: "", script: ""} | cases], nil}
  end

  defp line("--- setup", {cases, _}), do: {cases, :setup}
  defp line("--- script", {cases, _}), do: {cases, :script}
  defp line(_text, {[], _} = acc), do: acc
  defp line(_text, {_, nil} = acc), do: acc

  defp line(text, {[case | rest], block}) do
    {[Map.update!(case, block, &(&1 <> text <> "\n")) | rest], block}
  end
end
