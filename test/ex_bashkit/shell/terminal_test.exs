defmodule ExBashkit.Shell.TerminalTest do
  # The shell in a real terminal: `mix ex_bashkit.shell` and
  # `ExBashkit.Shell.start/2` inside `iex -S mix`, each in a tmux pane,
  # typed into key by key, checked on screen. Every wait is bounded.
  use ExUnit.Case, async: false

  alias ExBashkit.Test.Tmux

  @moduletag timeout: 120_000
  @root File.cwd!()
  @prompt "sandbox@bashkit-sandbox:"

  # The task in a pane; when it ends the pane shows its exit status.
  defp mix_shell(args \\ "") do
    t =
      Tmux.start!(
        "MIX_ENV=test mix ex_bashkit.shell #{args}; echo SHELL-ENDED rc=$?; sleep 60",
        @root
      )

    Tmux.wait_for(t, "#{@prompt}/$", 30_000)
    t
  end

  defp count(text, pattern), do: text |> String.split(pattern) |> length() |> Kernel.-(1)

  # Type `line` at a prompt and wait for the next one (the `n`th prompt).
  defp run(t, line, prompts_before) do
    Tmux.line(t, line)
    wait_prompts(t, prompts_before + 1)
  end

  defp wait_prompts(t, n) do
    Tmux.wait_for(t, &(count(&1, @prompt) >= n))
  end

  test "prompt, cd, continuation lines, exit codes, colors, streaming, exit" do
    t = mix_shell()

    screen = run(t, "cd /tmp", 1)
    assert screen =~ "#{@prompt}/tmp$"

    # An open `for` and an open `do` each give the continuation prompt.
    Tmux.line(t, "for i in 1 2")
    Tmux.wait_for(t, ~r/\n> ?\n\z/)
    Tmux.line(t, "do echo n$i")
    Tmux.wait_for(t, ~r/\n> ?\n\z/)
    screen = run(t, "done", 2)
    assert screen =~ "> done\nn1\nn2\n#{@prompt}/tmp$"

    # Quote and here-document left open.
    Tmux.line(t, "echo 'open")
    Tmux.wait_for(t, ~r/\n> ?\n\z/)
    screen = run(t, "quote'", 3)
    assert screen =~ "> quote'\nopen\nquote\n"

    Tmux.line(t, "cat <<EOF")
    Tmux.wait_for(t, ~r/cat <<EOF\n> ?\n\z/)
    Tmux.line(t, "heredoc body")
    Tmux.wait_for(t, ~r/heredoc body\n> ?\n\z/)
    screen = run(t, "EOF", 4)
    assert screen =~ "> EOF\nheredoc body\n"

    # stderr in red; a non-zero status shown.
    run(t, "echo to-stderr >&2; false", 5)
    colored = Tmux.screen(t, escapes: true)
    assert colored =~ ~r/\e\[31mto-stderr/
    assert Tmux.screen(t) =~ "to-stderr\n[exit 1]\n#{@prompt}/tmp$"

    # Streaming: the first line is on screen while the command still sleeps.
    Tmux.line(t, "echo first; sleep 3; echo second")
    screen = Tmux.wait_for(t, "first\n")
    refute screen =~ ~r/^second$/m
    wait_prompts(t, 7)
    assert Tmux.screen(t) =~ "first\nsecond\n#{@prompt}/tmp$"

    Tmux.line(t, "exit 3")
    Tmux.wait_for(t, "SHELL-ENDED rc=3")
  end

  test "every meta-command, and a runaway command stopped by the timeout" do
    file =
      Path.join(System.tmp_dir!(), "ex_bashkit_term_#{System.unique_integer([:positive])}.snap")

    on_exit(fn -> File.rm(file) end)
    t = mix_shell("--key k")

    screen = run(t, "%help", 1)

    for name <- ~w(%reset %snapshot %restore %state %changes %timeout %exit),
        do: assert(screen =~ name)

    run(t, "export KEEP=1; cd /tmp; greet() { echo hi; }; alias ll='ls -l'", 2)
    screen = run(t, "%state", 3)
    assert screen =~ "cwd: /tmp"
    assert screen =~ "KEEP=1"
    assert screen =~ "functions: greet"
    assert screen =~ ~s(alias ll="ls -l")

    run(t, "echo data > /tmp/made.txt", 4)
    assert run(t, "%changes", 5) =~ "created: /tmp/made.txt"

    assert run(t, "%snapshot #{file}", 6) =~ "snapshot written to #{file}"
    assert File.exists?(file)

    assert run(t, "%timeout 2000", 7) =~ "timeout: 2000 ms"
    Tmux.line(t, "echo started; sleep 30; echo never")
    screen = wait_prompts(t, 9)
    assert screen =~ "started\n"
    assert screen =~ "ex_bashkit: "
    refute screen =~ ~r/^never$/m
    # The prompt is back, in the same directory, with the state intact.
    assert screen =~ ~r/#{Regex.escape(@prompt)}\/tmp\$ ?\n\z/
    assert run(t, "echo \"keep=$KEEP\"; greet", 9) =~ "keep=1\nhi\n"

    assert run(t, "%reset", 10) =~ "session reset"
    assert run(t, "echo \"keep=$KEEP\"; ls /tmp", 11) =~ "keep=\n#{@prompt}/$"

    assert run(t, "%restore #{file}", 12) =~ "restored #{file}"

    assert run(t, "echo \"keep=$KEEP\"; cat /tmp/made.txt", 13) =~
             "keep=1\ndata\n#{@prompt}/tmp$"

    Tmux.line(t, "%exit")
    Tmux.wait_for(t, "SHELL-ENDED rc=0")
  end

  test "Ctrl-D ends the shell with the last command's status" do
    t = mix_shell()
    run(t, "false", 1)
    Tmux.keys(t, ["C-d"])
    Tmux.wait_for(t, "SHELL-ENDED rc=1")
  end

  test "inside iex: start on a session, iex's line history, back to iex" do
    t = Tmux.start!("MIX_ENV=test iex -S mix", @root)
    Tmux.wait_for(t, "iex(1)> ", 30_000)

    Tmux.line(t, ~s|s = ExBashkit.Session.new(env: [A: "from-iex"]); ExBashkit.Shell.start(s)|)
    # iex's line editor keeps Ctrl-D for delete: the banner names what works.
    screen = Tmux.wait_for(t, "#{@prompt}/$")
    assert screen =~ "exit or %exit to leave"
    assert run(t, "echo $A; export B=set-in-shell", 1) =~ "from-iex\n"

    Tmux.line(t, "if true; then")
    Tmux.wait_for(t, ~r/\n> ?\n\z/)
    assert run(t, "echo yes; fi", 2) =~ "yes\n"

    # Up recalls the previous line (iex's line editor keeps the history).
    Tmux.keys(t, ["Up"])
    Tmux.wait_for(t, ~r/\$ echo yes; fi ?\n\z/)
    Tmux.keys(t, ["C-u"])

    Tmux.line(t, "%exit")
    Tmux.wait_for(t, "{:ok, 0}\niex(2)> ")
    # The session keeps what the shell did.
    Tmux.line(t, ~s{ExBashkit.Session.exec(s, "echo $B") |> elem(1) |> Map.get(:stdout)})
    Tmux.wait_for(t, ~s|"set-in-shell\\n"|)
  end
end
