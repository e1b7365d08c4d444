defmodule ExBashkit.ReadmeTest do
  # README.md promises that its quick-start blocks run as pasted: run them.
  use ExUnit.Case, async: true

  @readme Path.expand("../README.md", __DIR__)
  @external_resource @readme

  # The ```elixir blocks between "## Quick start" and "## Running scripts",
  # in order (later blocks use the bindings of earlier ones, as in iex).
  defp quick_start_blocks do
    text = File.read!(@readme)
    [_, rest] = String.split(text, "## Quick start\n", parts: 2)
    [part, _] = String.split(rest, "## Running scripts\n", parts: 2)

    ~r/```elixir\n(.*?)```/s
    |> Regex.scan(part, capture: :all_but_first)
    |> Enum.map(fn [code] -> code end)
  end

  test "the quick start and capability examples run as pasted" do
    blocks = quick_start_blocks()
    assert length(blocks) >= 3

    Enum.reduce(blocks, [], fn code, binding ->
      {_value, binding} = Code.eval_string(code, binding, file: @readme)
      binding
    end)
  end
end
