defmodule ExBashkit.ShellTest do
  # In-process: the shell reads from and writes to a captured group leader.
  # Not async: stderr is captured through the global :standard_error.
  use ExBashkit.Test.Case, async: false

  import ExUnit.CaptureIO

  alias ExBashkit.{Session, Shell}
  alias ExBashkit.Shell.Reader

  doctest ExBashkit.Shell.Reader
  doctest ExBashkit.Shell.Output

  # Run the shell on `input`; `{stdout, stderr, return}`.
  defp shell(target, input, opts) do
    parent = self()

    stderr =
      capture_io(:stderr, fn ->
        stdout =
          capture_io([input: input, capture_prompt: true], fn ->
            send(parent, {:returned, Shell.start(target, opts)})
          end)

        send(parent, {:stdout, stdout})
      end)

    assert_received {:stdout, stdout}
    assert_received {:returned, returned}
    {stdout, stderr, returned}
  end

  defp piped(target, input, opts \\ []), do: shell(target, input, [terminal: false] ++ opts)
  defp tty(target, input, opts \\ []), do: shell(target, input, [terminal: true] ++ opts)

  describe "the parser's answer (Reader.status/1)" do
    test "complete, incomplete and invalid input" do
      for text <- ["echo hi\n", "", "# note\n", "cat <<E\nx\nE\n", "echo a \\\n b\n"],
          do: assert(Reader.status(text) == :complete, inspect(text))

      for text <- [
            "for i in 1; do\n",
            "if true\n",
            "while :\n",
            "case a in\n",
            "f() {\n",
            "echo 'a\n",
            "echo \"a\n",
            "echo $(\n",
            "a |\n",
            "a &&\n",
            "cat <<E\nbody\n",
            "echo \\\n"
          ],
          do: assert(Reader.status(text) == :incomplete, inspect(text))

      assert {:error, message} = Reader.status("fi\n")
      assert message =~ "syntax error"
      assert {:error, _} = Reader.status(<<"echo ", 0xFF, "\n">>)
    end
  end

  describe "piped (no terminal)" do
    test "only the scripts' output, stdout and stderr apart, multi-line commands grouped" do
      input = """
      echo hi
      for i in 1 2
      do
        echo n$i
      done
      echo oops >&2

      cat <<EOF
      heredoc body
      EOF
      """

      {out, err, {:ok, 0}} = piped([], input)
      assert out == "hi\nn1\nn2\nheredoc body\n"
      assert err == "oops\n"
    end

    test "returns the last status; end of input inside a construct is bashkit's syntax error" do
      assert {"", "", {:ok, 1}} = piped([], "false\n")
      {_out, err, {:ok, status}} = piped([], "if true; then\necho never\n")
      assert status != 0
      assert err =~ "syntax error"
    end

    test "a syntax error is reported and the shell goes on" do
      {out, err, {:ok, 0}} = piped([], "echo )\necho after\n")
      assert err =~ "syntax error"
      assert out == "after\n"
    end

    test "works on an existing session, in place" do
      session = Session.new(env: [GREETING: "hello"])
      {out, _, {:ok, 0}} = piped(session, "echo $GREETING\nexport LEFT=behind\ncd /tmp\n")
      assert out == "hello\n"
      assert {:ok, %{stdout: "behind /tmp\n"}} = Session.exec(session, "echo $LEFT $(pwd)")
    end
  end

  describe "on an ExBashkit.Server" do
    test "by pid or name: commands are the server's execs, meta-commands act on it" do
      name = :"shell_server_#{System.unique_integer([:positive])}"
      {:ok, pid} = ExBashkit.Server.start_link(name: name, env: [FROM: "server"])

      {out, _, {:ok, 0}} = piped(pid, "echo $FROM\nexport LEFT=behind\ncd /tmp\n")
      assert out == "server\n"
      assert {:ok, %{stdout: "behind /tmp\n"}} = ExBashkit.Server.exec(pid, "echo $LEFT $(pwd)")

      {out, _, {:ok, 0}} = piped(name, "%state\n%reset\necho \"[$LEFT]\"\n")
      assert out =~ "LEFT=behind"
      assert out =~ "[]\n"
      assert {:ok, %{stdout: "/\n"}} = ExBashkit.Server.exec(pid, "pwd")

      path = tmp_path("server.snap")

      {_, _, {:ok, 0}} =
        piped(name, "export KEPT=1\n%snapshot #{path}\nexport KEPT=2\n%restore #{path}\n")

      assert {:ok, %{stdout: "1\n"}} = ExBashkit.Server.exec(name, "echo $KEPT")
    end

    test "a pid or name that is not a server is refused" do
      assert_raise ArgumentError, ~r/not an ExBashkit.Server/, fn -> Shell.start(self()) end
      assert_raise ArgumentError, ~r/no ExBashkit.Server/, fn -> Shell.start(:no_such_server) end
    end
  end

  describe "in a terminal" do
    test "prompt follows cd, continuation prompt, exit code shown, stderr in red" do
      input =
        "cd /tmp\nfor i in 1 2\ndo echo n$i\ndone\necho err >&2; false\necho 'a\nb'\n%exit\n"

      {out, err, {:ok, 0}} = tty([], input)

      assert out =~ "sandbox@bashkit-sandbox:/$ "
      assert out =~ "sandbox@bashkit-sandbox:/tmp$ "
      # `for` and its `do` line each wanted one more line.
      assert out =~ "sandbox@bashkit-sandbox:/tmp$ > > n1\nn2\n"
      assert out =~ "[exit 1]"
      assert out =~ "> a\nb\n"
      # In a terminal stderr shares stdout's device (order kept), in red.
      assert out =~
               IO.iodata_to_binary([
                 IO.ANSI.red(),
                 "err\n",
                 IO.ANSI.reset(),
                 IO.ANSI.yellow(),
                 "[exit 1]"
               ])

      assert err == ""
    end

    test "the prompt shows the session's own user and host" do
      {out, _, _} = tty([username: "agent", hostname: "box", cwd: "/work"], "%exit\n")
      assert out =~ "agent@box:/work$ "
    end

    test "output without a final newline still leaves the prompt on its own line" do
      {out, _, _} = tty([], "printf no-newline\n%exit\n")
      assert out =~ "no-newline\nsandbox@bashkit-sandbox:/$ "
    end
  end

  describe "exit" do
    test "exit N ends the shell with N; nothing after it runs" do
      {out, _, {:ok, 3}} = piped([], "echo before\nexit 3\necho after\n")
      assert out == "before\n"
    end

    test "exit reached inside a construct or a function ends it too" do
      assert {"", "", {:ok, 4}} = piped([], "if true; then exit 4; fi\necho no\n")
      assert {"", "", {:ok, 2}} = piped([], "f() { exit 2; }\nf\necho no\n")
    end

    test "exit in a sourced file ends it; set -x does not show the shell's own line" do
      session = Session.new(files: %{"/bye.sh" => "echo bye\nexit 5\n"})
      assert {"bye\n", "", {:ok, 5}} = piped(session, ". /bye.sh\necho no\n")

      {out, err, {:ok, 0}} = piped([], "set -x\necho traced\n")
      assert out == "traced\n"
      refute err =~ "alive"
    end

    test "the word alone does not end it, and $? is the command's" do
      {out, err, {:ok, 0}} =
        piped([], "echo exit\nfalse || echo \"status $?\"\n[ 1 = 2 ] && exit 9\necho still\n")

      assert out == "exit\nstatus 1\nstill\n"
      assert err == ""
    end

    test "%exit and end of input end it" do
      assert {"", "", {:ok, 0}} = piped([], "%exit\necho no\n")
      assert {"x\n", "", {:ok, 0}} = piped([], "echo x")
    end
  end

  describe "meta-commands" do
    test "%help lists every meta-command" do
      {out, _, _} = piped([], "%help\n")

      for name <- ~w(%reset %snapshot %restore %state %changes %timeout %help %exit),
          do: assert(out =~ name)
    end

    test "%state shows env, cwd, functions and aliases" do
      input =
        "export COLOR=blue\ncd /tmp\ngreet() { echo hi; }\nalias ll='ls -l'\nfalse\n%state\n"

      {out, _, _} = piped([], input)
      assert out =~ "cwd: /tmp\n"
      assert out =~ "COLOR=blue\n"
      assert out =~ "functions: greet"
      assert out =~ ~s(alias ll="ls -l")
      assert out =~ "last exit code: 1"
    end

    test "%changes lists the files the last command created, modified and deleted" do
      session = Session.new(files: %{"/keep.txt" => "a", "/gone.txt" => "b"})

      input =
        "%changes\necho @@\necho new > /new.txt; echo more >> /keep.txt; rm /gone.txt\n" <>
          "%changes\necho @@\n%changes\n"

      {out, _, _} = piped(session, input)

      assert [before, first, second] = String.split(out, "@@\n")
      assert before =~ "no command has run"
      assert first == "created: /new.txt\nmodified: /keep.txt\ndeleted: /gone.txt\n"
      assert second == "no files changed\n"
    end

    test "%reset goes back to the built state" do
      {out, _, _} =
        piped(
          [env: [KEEP: "1"]],
          "export GONE=1\ntouch /tmp/f\n%reset\necho \"$KEEP-$GONE\"; ls /tmp\n"
        )

      assert out == "1-\n"
    end

    test "%snapshot and %restore round-trip through a host file, keyed" do
      file = tmp_path("snap.bin")
      session = Session.new()

      {_, err, _} =
        piped(
          session,
          "x=42; cd /tmp; echo data > /tmp/d\n%snapshot #{file}\nx=0; rm /tmp/d; cd /\n%restore #{file}\necho $x $(pwd) $(cat /tmp/d)\n",
          key: "k1"
        )

      assert err == ""
      assert File.exists?(file)
      # Sealed with the key: a fresh session restores it only with that key.
      other = Session.new()
      assert {:error, _} = Session.restore(other, File.read!(file))
      assert {:ok, _} = Session.restore(other, File.read!(file), key: "k1")

      {out, err, _} = piped(Session.new(), "%restore #{file}\necho $x\n", key: "wrong")
      assert err =~ "%restore"
      assert out == "\n"
    end

    test "%restore uses EX_BASHKIT_SNAPSHOT_KEY when no key is given" do
      file = tmp_path("envkey.bin")
      System.put_env("EX_BASHKIT_SNAPSHOT_KEY", "from-env")
      on_exit(fn -> System.delete_env("EX_BASHKIT_SNAPSHOT_KEY") end)

      piped([], "y=7\n%snapshot #{file}\n")
      assert {:ok, _} = Session.restore(Session.new(), File.read!(file), key: "from-env")
      {out, "", _} = piped([], "%restore #{file}\necho $y\n")
      assert out == "7\n"
    end

    test "%snapshot and %restore errors are reported and change nothing" do
      {out, err, _} =
        piped([], "z=1\n%restore /nonexistent/snap\n%snapshot /nonexistent/dir/snap\necho $z\n")

      assert err =~ "%restore: /nonexistent/snap"
      assert err =~ "%snapshot: /nonexistent/dir/snap"
      assert out == "1\n"
    end

    test "%timeout: a runaway command stops, the prompt comes back, state intact" do
      input =
        "%timeout\n%timeout 2000\nexport BEFORE=1\necho started; sleep 20; echo never\n%changes\necho \"back $BEFORE\"\n%timeout\n"

      {out, err, _} = tty([], input)

      assert out =~ "timeout: 30000 ms"
      assert out =~ "timeout: 2000 ms"
      assert out =~ "started\n"
      refute out =~ "never"
      assert out =~ "ex_bashkit: "
      assert err == ""
      assert out =~ "back 1\n"
      assert out =~ "did not run to completion"
    end

    test "bad meta-commands say so" do
      {_, err, _} = piped([], "%bogus\n%timeout soon\n%snapshot\n")
      assert err =~ "unknown meta-command %bogus"
      assert err =~ "%timeout takes a positive number"
      assert err =~ "wrong arguments for %snapshot"
    end
  end

  test "bad arguments raise ArgumentError" do
    assert_raise ArgumentError, fn -> Shell.start(:nope) end
    assert_raise ArgumentError, fn -> Shell.start([], timeout_ms: 0) end
    assert_raise ArgumentError, fn -> Shell.start([], terminal: :maybe) end
    assert_raise ArgumentError, fn -> Shell.start(bogus_option: 1) end
  end
end
