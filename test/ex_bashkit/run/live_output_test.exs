defmodule ExBashkit.Run.LiveOutputTest do
  # bashkit 0.20.2's live execution (`Bash::execute`, which the runner uses
  # for scripts that are not short: native session/exec.rs) loses output
  # that its buffered `exec` keeps: what a command writes after
  # sub-commands it ran through an execution plan (awk after `close()` of a
  # pipe, find after `-exec`, `man`, which runs `NAME --help` and `help
  # NAME` as `PlanStep::Run` steps: src/builtins/man.rs), what a subshell
  # writes after `exec >`, `select`'s menu. Still so upstream (reproducer in
  # Rust: `bash.execute(SCRIPT)` against `bash.exec(SCRIPT)` for each script
  # below); we run a script that may do so buffered, on a thread of its own
  # (`run/shape.rs`, `loses_live_output`). Each case also as the tail of a
  # long script, which would run live otherwise, and on a session that
  # defined a function (whose scripts always ran live).
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Result, Session}

  @long "i=0; while [ $i -lt 200 ]; do i=$((i+1)); done; "

  defp outputs(script) do
    plain = Session.new()
    coded = Session.new()
    {:ok, _} = Session.exec(coded, "f() { :; }")

    for session <- [plain, coded], prefix <- ["", @long] do
      {:ok, %Result{} = result} = Session.exec(session, prefix <> script)
      {result.stdout, result.stderr}
    end
    |> Enum.uniq()
  end

  test "awk's output after close() of a pipe" do
    script = ~S[printf 'b\na\n' | awk '{ print | "sort" } END { close("sort"); print "done" }']
    assert outputs(script) == [{"a\nb\ndone\n", ""}]
  end

  test "find's -printf after -exec" do
    script =
      ~S[mkdir -p /f && cd /f && touch one && find . -name one -print -exec echo ran {} \; -printf 'after %f\n']

    assert outputs(script) == [{"./one\nran ./one\nafter one\n", ""}]
  end

  test "what a subshell writes after exec > file" do
    script = "cd /tmp; ( echo pre; exec > log.txt; echo post ); cat log.txt"
    assert outputs(script) == [{"pre\npost\n", ""}]
  end

  test "select's menu on stderr" do
    script = "echo 1 | select x in a b; do echo $x; break; done"
    assert [{"a\n", "1) a\n2) b\n" <> _}] = outputs(script)
  end

  test "`man NAME` prints the page, and says when there is none" do
    assert [{"GREP(1)\n" <> _, ""}] = outputs("man grep")
    assert [{"", "No manual entry for nosuch\n"}] = outputs("man nosuch")
  end
end
