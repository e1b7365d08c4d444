defmodule ExBashkit.Shell.Output do
  @moduledoc """
  Where `ExBashkit.Shell` writes: script output as the script produces it,
  and the shell's own messages.

  A script's stdout goes to standard output and its stderr to standard
  error; in a terminal, both go to the terminal in the order they were
  written, stderr in red, and the shell's notes (a non-zero exit code,
  meta-command results) in color too. Output that is not
  valid UTF-8 is written with each invalid byte replaced by U+FFFD: the
  terminal devices take text.

  `exec/4` runs the script in a process of its own and prints each chunk the
  moment it arrives (`:stream_to`), so a long command's output appears while it
  runs, then returns the full result.
  """

  alias ExBashkit.Shell.Target

  defstruct color: false, at_line_start: true, hide: nil, stderr_device: :standard_error

  @typedoc """
  Output settings and state: `color` (ANSI colors on), `at_line_start`
  (the last character written was a newline), `hide` (lines of stderr
  containing this string are the shell's own and are not shown) and
  `stderr_device` (where stderr goes).

  In a terminal, stderr goes to the same device as stdout, in red: two
  devices write through two ports, and the terminal could show a command's
  stderr after the next prompt.
  """
  @type t :: %__MODULE__{
          color: boolean(),
          at_line_start: boolean(),
          hide: String.t() | nil,
          stderr_device: IO.device()
        }

  @doc """
  Run `script` on `target` with `opts` (`ExBashkit.Session.exec/3` options),
  writing its output as it arrives. Returns the exec's answer and the updated
  output state.
  """
  @spec exec(t(), Target.t(), String.t(), keyword()) ::
          {{:ok, ExBashkit.Result.t()} | {:error, ExBashkit.Error.t() | String.t()}, t()}
  def exec(%__MODULE__{} = out, target, script, opts) do
    tag = make_ref()
    parent = self()

    # Unlinked and rescued: whatever the exec does, the shell goes on.
    {_pid, monitor} =
      spawn_monitor(fn ->
        answer =
          try do
            Target.exec(target, script, [{:stream_to, {parent, tag}} | opts])
          rescue
            e -> {:error, Exception.message(e)}
          end

        send(parent, {tag, :answer, answer})
      end)

    pump(out, monitor, tag)
  end

  # The exec process sends its output messages before its answer: every
  # chunk is written before the answer is seen.
  defp pump(out, monitor, tag) do
    receive do
      {^tag, {:stdout, chunk}} ->
        pump(stdout(out, chunk), monitor, tag)

      {^tag, {:stderr, chunk}} ->
        pump(script_stderr(out, chunk), monitor, tag)

      {^tag, :answer, answer} ->
        Process.demonitor(monitor, [:flush])
        {answer, out}

      {:DOWN, ^monitor, :process, _pid, reason} ->
        {{:error, "the exec failed: " <> Exception.format_exit(reason)}, out}
    end
  end

  @doc "Write script stdout (or any plain text) to standard output."
  @spec stdout(t(), iodata()) :: t()
  def stdout(out, data) do
    text = printable(data)
    IO.write(:stdio, text)
    track(out, text)
  end

  # Script stderr: the shell's own marker lines are dropped.
  defp script_stderr(out, chunk) do
    case hide(out, printable(chunk)) do
      "" -> out
      text -> stderr(out, text)
    end
  end

  @doc "Write `text` to standard error, in red in a terminal."
  @spec stderr(t(), iodata()) :: t()
  def stderr(out, data) do
    text = printable(data)
    IO.write(out.stderr_device, paint(out, :red, text))
    track(out, text)
  end

  @doc "Write a note of the shell's own (not script output) to standard output, dimmed in a terminal."
  @spec note(t(), iodata()) :: t()
  def note(out, data) do
    out = fresh_line(out)
    text = printable(data)
    IO.write(:stdio, paint(out, :yellow, text))
    track(out, text)
  end

  @doc "Report an error of the shell's own on standard error: `ex_bashkit: message`."
  @spec error(t(), String.t()) :: t()
  def error(out, message), do: out |> fresh_line() |> stderr("ex_bashkit: #{message}\n")

  @doc "Start a new line unless the last output ended one (before a prompt)."
  @spec fresh_line(t()) :: t()
  def fresh_line(%__MODULE__{at_line_start: true} = out), do: out
  def fresh_line(out), do: stdout(out, "\n")

  defp hide(%__MODULE__{hide: nil}, text), do: text

  defp hide(%__MODULE__{hide: marker}, text) do
    if String.contains?(text, marker) do
      text
      |> String.split("\n")
      |> Enum.reject(&String.contains?(&1, marker))
      |> Enum.join("\n")
    else
      text
    end
  end

  defp paint(%__MODULE__{color: true}, color, text),
    do: [apply(IO.ANSI, color, []), text, IO.ANSI.reset()]

  defp paint(_plain, _color, text), do: text

  defp track(out, ""), do: out
  defp track(out, text), do: %{out | at_line_start: String.ends_with?(text, "\n")}

  @doc """
  `data` as valid UTF-8 text, each invalid byte replaced by U+FFFD.

  ## Examples

      iex> ExBashkit.Shell.Output.printable(["ok ", <<0xFF>>, "\\n"])
      "ok \\uFFFD\\n"
  """
  @spec printable(iodata()) :: String.t()
  def printable(data) do
    binary = IO.iodata_to_binary(data)

    if String.valid?(binary),
      do: binary,
      else: scrub(binary, [])
  end

  defp scrub(<<>>, acc), do: acc |> Enum.reverse() |> IO.iodata_to_binary()
  defp scrub(<<c::utf8, rest::binary>>, acc), do: scrub(rest, [<<c::utf8>> | acc])
  defp scrub(<<_bad, rest::binary>>, acc), do: scrub(rest, ["\uFFFD" | acc])
end
