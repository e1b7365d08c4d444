defmodule ExBashkit.Build.CargoOutput do
  @moduledoc """
  Runs cargo with its output going to standard error line by line, except
  that a build that did nothing says nothing: cargo ends every build with
  `Finished ... profile`, a no-op one included, which every `mix` command
  (a piped `mix ex_bashkit.shell` too) would print. That line is dropped
  unless something was compiled.
  """

  defstruct compiled?: false

  @type t :: %__MODULE__{compiled?: boolean()}

  @doc """
  Run `cargo` with `args`, its output (stderr included) written to
  `device` as `line/2` filters it; returns cargo's exit status.
  """
  @spec run(Path.t(), [String.t()], IO.device()) :: non_neg_integer()
  def run(cargo, args, device \\ :standard_error) do
    # `{:line, _}`: the port hands over whole lines (long ones in pieces).
    port =
      Port.open({:spawn_executable, cargo}, [
        :binary,
        :exit_status,
        :stderr_to_stdout,
        {:line, 65_536},
        args: args
      ])

    loop(port, device, %__MODULE__{})
  end

  defp loop(port, device, output) do
    receive do
      {^port, {:data, {:eol, text}}} ->
        {written, output} = line(output, text <> "\n")
        if written, do: IO.write(device, written)
        loop(port, device, output)

      {^port, {:data, {:noeol, text}}} ->
        IO.write(device, text)
        loop(port, device, output)

      {^port, {:exit_status, status}} ->
        status
    end
  end

  @doc """
  What one whole line does to `output`: `{line_to_write | nil, output}`.
  """
  @spec line(t(), String.t()) :: {String.t() | nil, t()}
  def line(output, text) do
    cond do
      text =~ ~r/^\s*Compiling\s/ -> {text, %{output | compiled?: true}}
      text =~ ~r/^\s*Finished\s/ and not output.compiled? -> {nil, output}
      true -> {text, output}
    end
  end
end
