defmodule ExBashkit.ReadmeBlocks do
  @moduledoc false
  # The ```elixir blocks of a README section, and running them in order as
  # iex would (later blocks use the bindings of earlier ones).

  @doc false
  @spec between(Path.t(), String.t(), String.t()) :: [String.t()]
  def between(readme, from, to) do
    [_, rest] = readme |> File.read!() |> String.split(from <> "\n", parts: 2)
    [part, _] = String.split(rest, to <> "\n", parts: 2)

    ~r/```elixir\n(.*?)```/s
    |> Regex.scan(part, capture: :all_but_first)
    |> Enum.map(fn [code] -> code end)
  end

  @doc false
  @spec run([String.t()], Path.t()) :: keyword()
  def run(blocks, file) do
    Enum.reduce(blocks, [], fn code, binding ->
      {_value, binding} = Code.eval_string(code, binding, file: file)
      binding
    end)
  end
end
