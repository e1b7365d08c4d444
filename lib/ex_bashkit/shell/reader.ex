defmodule ExBashkit.Shell.Reader do
  @moduledoc """
  Reads one complete input for `ExBashkit.Shell`: a meta-command line, or
  script lines up to the end of a complete command.

  Whether the lines read so far make a complete command is bashkit's parser's
  answer (`status/1`), so an open `for`/`if`/`case`, quote, `$(`, here-document
  or trailing `\\` asks for another line with the continuation prompt, exactly
  when bash would.
  """

  alias ExBashkit.Native

  @typedoc """
  One input: a meta-command line (`%...`), a complete command, text the
  parser refuses (a syntax error, or input that ended inside a construct),
  or end of input.
  """
  @type input :: {:meta, String.t()} | {:script, String.t()} | {:invalid, String.t()} | :eof

  @doc """
  Read one input from `device`, writing `prompt` before the first line and
  `continuation` before each further line of an unfinished command.

  A line whose first non-blank character is `%`, typed at the first prompt,
  is a meta-command. A syntax error, or end of input inside an unfinished
  command, gives `{:invalid, text}`: running it reports the error in
  bashkit's words, as bash does.
  """
  @spec read(IO.device(), IO.chardata(), IO.chardata()) :: input()
  def read(device, prompt, continuation) do
    case get_line(device, prompt) do
      :eof ->
        :eof

      line ->
        if String.starts_with?(String.trim_leading(line), "%"),
          do: {:meta, String.trim(line)},
          else: more(device, line, continuation)
    end
  end

  defp more(device, text, continuation) do
    case status(text) do
      :complete ->
        {:script, text}

      {:error, _} ->
        {:invalid, text}

      :incomplete ->
        case get_line(device, continuation) do
          :eof -> {:invalid, text}
          line -> more(device, text <> line, continuation)
        end
    end
  end

  @doc """
  What bashkit's parser says about `text`: `:complete`, `:incomplete` (input
  ended inside a construct) or `{:error, message}` (a syntax error that more
  lines cannot fix).

  ## Examples

      iex> ExBashkit.Shell.Reader.status("echo hi\\n")
      :complete
      iex> ExBashkit.Shell.Reader.status("for i in 1 2; do\\n")
      :incomplete
      iex> ExBashkit.Shell.Reader.status("cat <<EOF\\nbody\\n")
      :incomplete
      iex> {:error, _message} = ExBashkit.Shell.Reader.status("echo )\\n")
  """
  @spec status(String.t()) :: :complete | :incomplete | {:error, String.t()}
  def status(text) when is_binary(text) do
    if String.valid?(text),
      do: Native.parse_status(text),
      else: {:error, "input is not valid UTF-8"}
  end

  # A line as a string, or `:eof` (end of input, or a device that cannot
  # deliver text any more).
  defp get_line(device, prompt) do
    case IO.gets(device, prompt) do
      line when is_binary(line) -> line
      _eof_or_error -> :eof
    end
  end
end
