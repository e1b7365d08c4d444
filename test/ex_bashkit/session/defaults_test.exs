defmodule ExBashkit.Session.DefaultsTest do
  # Every default is declared once (the options schema, and
  # `ExBashkit.Session.Defaults` for the numbers several modules share) and
  # sent to the core explicitly: a session, a one-shot `ExBashkit.exec/1` and the
  # docs all get the same values, and the node's ceilings apply to both.
  # Application config is global, so this module runs alone.
  use ExBashkit.Test.Case, async: false

  alias ExBashkit.{Result, Session, Tool}
  alias ExBashkit.Session.Defaults

  setup do
    saved = Application.fetch_env(:ex_bashkit, :max_timeout_ms)

    on_exit(fn ->
      case saved do
        {:ok, value} -> Application.put_env(:ex_bashkit, :max_timeout_ms, value)
        :error -> Application.delete_env(:ex_bashkit, :max_timeout_ms)
      end
    end)
  end

  test "a session and a one-shot exec are who the declaration says" do
    expected = "sandbox\nbashkit-sandbox\n/\n"
    assert out(Session.new(), "whoami; hostname; pwd") == expected
    assert {:ok, %Result{stdout: ^expected}} = ExBashkit.exec("whoami; hostname; pwd")
  end

  test "ExBashkit.exec/1 runs within the node's max_timeout_ms, like a default session" do
    Application.put_env(:ex_bashkit, :max_timeout_ms, 300)

    # The core used to build one-shot interpreters from defaults of its own,
    # blind to the ceiling: this ran for the whole 10 s.
    assert {:error, _} = ExBashkit.exec("sleep 10; echo finished")
    assert {:error, _} = Session.exec(Session.new(), "sleep 10; echo finished")
  end

  test "new/0 follows the node's default isolation when it changes" do
    saved = Application.fetch_env(:ex_bashkit, :isolation)

    try do
      # new/0's parsed options are kept per node configuration: a change of
      # the default must reach the next session.
      Application.put_env(:ex_bashkit, :isolation, :in_node)
      assert %Session{location: :in_node} = Session.new()
      Application.put_env(:ex_bashkit, :isolation, :process)
      assert %Session{location: {:process, _, _}} = Session.new()
    after
      case saved do
        {:ok, value} -> Application.put_env(:ex_bashkit, :isolation, value)
        :error -> Application.delete_env(:ex_bashkit, :isolation)
      end
    end
  end

  test "bashkit's max_commands default is the one the docs and the tool's prompt quote" do
    max = Defaults.bashkit_limit(:max_commands)
    session = Session.new()

    assert %Result{exit_code: 0} = run!(session, String.duplicate(":\n", max))
    assert {:error, _} = Session.exec(session, String.duplicate(":\n", max + 1))

    assert Tool.system_prompt(session) =~ "#{max} commands"
    assert {:docs_v1, _, _, _, %{"en" => doc}, _, _} = Code.fetch_docs(Session)
    assert doc =~ "`:max_commands` (default #{Defaults.doc(max)})"
  end
end
