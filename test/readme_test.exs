defmodule ExBashkit.ReadmeTest do
  # README.md promises that its quick-start blocks run as pasted: run them.
  use ExUnit.Case, async: true

  import ExUnit.CaptureIO

  @readme Path.expand("../README.md", __DIR__)
  @external_resource @readme
  # README's first command (`scripts/example`) runs this session tour.
  @tour Path.expand("../examples/session_tour.exs", __DIR__)
  @external_resource @tour

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

  test "the example session that scripts/example runs goes to its end" do
    out = capture_io(fn -> Code.eval_file(@tour) end)
    assert out =~ "the answer is 42"
    assert out =~ "[error parse] parse error"
    assert out =~ "[error limit] resource limit exceeded"
    assert out =~ "still here, in /work/data"
    assert out =~ "chunk: {:exit, 0}"
    assert out =~ ~s(created: ["/work/data/new.txt"])
  end
end
