defmodule ExBashkit.Test.Tmux do
  @moduledoc false
  # A real terminal for the shell tests: a private tmux server (its own
  # socket, killed when the test ends) running one command in a pane, keys
  # typed into it, and its screen read back. Every wait is bounded.

  defstruct [:socket]

  @doc "Start `command` (a `sh -c` string) in a fresh 200x50 pane in `cwd`."
  def start!(command, cwd) do
    socket = "ex_bashkit_shell_#{System.unique_integer([:positive])}"
    t = %__MODULE__{socket: socket}
    ExUnit.Callbacks.on_exit(fn -> tmux(t, ["kill-server"]) end)

    {_, 0} = tmux(t, ["new-session", "-d", "-x", "200", "-y", "50", "-c", cwd, command])

    t
  end

  @doc "Type `text` literally, then Enter."
  def line(t, text) do
    {_, 0} = tmux(t, ["send-keys", "-l", text])
    keys(t, ["Enter"])
  end

  @doc "Send tmux key names (`C-d`, `Up`, `Enter`)."
  def keys(t, keys) do
    {_, 0} = tmux(t, ["send-keys" | keys])
    t
  end

  @doc """
  The pane's text, scrollback included, wrapped lines joined, ending with
  one newline; `escapes: true` keeps colors. tmux drops the blanks at the
  end of a row: a prompt `> ` reads as `>`.
  """
  def screen(t, opts \\ []) do
    args = ["capture-pane", "-p", "-J", "-S", "-"] ++ if(opts[:escapes], do: ["-e"], else: [])
    {text, 0} = tmux(t, args)
    # The pane's empty rows below the cursor are not output.
    String.replace(text, ~r/\n+\z/, "\n")
  end

  @doc """
  Wait (up to `timeout` ms) until the screen matches `pattern` (a string, a
  regex, or a function of the screen returning a boolean); returns the
  screen. Fails the test with the screen otherwise.
  """
  def wait_for(t, pattern, timeout \\ 15_000, opts \\ []) do
    deadline = System.monotonic_time(:millisecond) + timeout
    poll(t, pattern, deadline, opts)
  end

  defp poll(t, pattern, deadline, opts) do
    text = screen(t, opts)

    cond do
      matches?(text, pattern) ->
        text

      System.monotonic_time(:millisecond) > deadline ->
        ExUnit.Assertions.flunk("timed out waiting for #{inspect(pattern)}; screen:\n#{text}")

      true ->
        Process.sleep(100)
        poll(t, pattern, deadline, opts)
    end
  end

  defp matches?(text, fun) when is_function(fun, 1), do: fun.(text)
  defp matches?(text, pattern), do: text =~ pattern

  defp tmux(%__MODULE__{socket: socket}, args) do
    System.cmd("tmux", ["-L", socket | args],
      stderr_to_stdout: true,
      env: [{"TERM", System.get_env("TERM") || "xterm"}]
    )
  end
end
