defmodule ExBashkit.Tool.HistoryTest do
  use ExBashkit.Test.Case, async: true

  alias ExBashkit.{Session, Tool}

  doctest ExBashkit.Tool.History

  defp call(session, name, input), do: Tool.call(session, name, input)

  test "an agent's undo: commit, change, log, diff, checkout; shell state comes back too" do
    session = Session.new()
    assert %{"exit_code" => 0} = call(session, "bash", %{"commands" => "echo 1 > /a; X=1"})
    assert %{"id" => one, "error" => nil} = call(session, "commit", %{message: "one"})
    assert %{"exit_code" => 0} = call(session, "bash", %{"commands" => "rm /a; echo 2 > /b; X=2"})
    assert %{"id" => two, "error" => nil} = call(session, "commit", %{})

    assert %{"commits" => [%{"id" => ^two, "parents" => [^one], "message" => nil}, first]} =
             call(session, "log", %{})

    assert %{"id" => ^one, "message" => "one", "at" => at} = first
    assert {:ok, _, _} = DateTime.from_iso8601(at)
    assert %{"commits" => [_]} = call(session, "log", %{"limit" => 1})

    assert %{"created" => ["/b"], "deleted" => ["/a"], "modified" => [], "error" => nil} =
             call(session, "diff", %{"from" => one, "to" => two})

    assert %{"id" => ^one, "error" => nil} = call(session, "checkout", %{"id" => one})
    assert %{"stdout" => "1\nX=1\n"} = call(session, "bash", %{"commands" => "cat /a; echo X=$X"})
  end

  test "bad input is an error answer, and changes nothing" do
    session = Session.new(files: %{"/kept" => "k"})
    assert %{"error" => "invalid input: \"id\" is required"} = call(session, "checkout", %{})
    assert %{"error" => "invalid input: " <> _} = call(session, "checkout", %{"id" => 7})
    assert %{"error" => "invalid input: " <> _} = call(session, "log", %{"limit" => 0})
    assert %{"error" => "invalid input: " <> _} = call(session, "commit", %{"message" => 1})
    assert %{"error" => "invalid input: " <> _} = call(session, "diff", "not a map")

    assert %{"error" => "no commit " <> _} =
             call(session, "checkout", %{"id" => String.duplicate("a", 64)})

    assert %{"error" => "invalid input: diff/3: not a commit id" <> _} =
             call(session, "diff", %{"from" => "nope"})

    assert {:ok, "k"} = Session.read_file(session, "/kept")
  end
end
