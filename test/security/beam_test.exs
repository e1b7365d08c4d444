defmodule ExBashkit.Security.BeamTest do
  # Threats specific to running untrusted scripts inside the BEAM: the atom
  # table (never garbage-collected; exhausting it kills the node) and the
  # caller's mailbox (a script must not be able to deliver anything but its
  # one reply).
  #
  # Not async: it reads the node-wide atom count.
  use ExUnit.Case, async: false

  alias ExBashkit.{Result, Session}

  test "script-chosen names never become atoms" do
    s = Session.new()

    # Warm up every code path once (module loading creates atoms legitimately).
    exercise(s, 0)
    before = :erlang.system_info(:atom_count)

    for round <- 1..5, do: exercise(s, round)

    # 5 rounds x 1 200 script-chosen names (files, dirs, links, variables):
    # turning them into atoms would add thousands. A few hundred leave room
    # for code that other processes (the ExUnit formatter) load meanwhile.
    grown = :erlang.system_info(:atom_count) - before
    assert grown < 500, "atoms grew by #{grown}"
  end

  defp exercise(s, round) do
    names = for i <- 1..400, do: "n#{round}_#{i}_#{:erlang.unique_integer([:positive])}"

    {:ok, %Result{exit_code: 0}} =
      Session.exec(s, """
      mkdir -p /r#{round}
      for n in #{Enum.join(names, " ")}; do
        echo $n > /r#{round}/$n; mkdir -p /r#{round}/d_$n; ln -s $n /r#{round}/l_$n
        export V_$n=1
      done
      """)

    {:ok, entries} = Session.list_dir(s, "/r#{round}")
    assert length(entries) == 1_200

    for {name, _type} <- Enum.take(entries, 50),
        do: {:ok, _} = Session.stat(s, "/r#{round}/" <> name)

    {:ok, _} = Session.exec(s, "env; ls -la /r#{round}; unknown_cmd_#{round}_xyz; echo $?")
    {:error, _} = Session.exec(s, "parse error here ((( #{round}")
    {:error, _} = Session.read_file(s, "/missing_#{round}_#{:erlang.unique_integer([:positive])}")
    {:ok, _} = ExBashkit.exec("echo #{Enum.at(names, 0)} > /x; cat /x")
  end

  test "a script delivers exactly one reply, however much it writes" do
    s = Session.new()
    flush()

    for script <- [
          "yes | head -c 5000000",
          "seq 1 100000 >&2",
          "while true; do :; done",
          "if then",
          "exit 9"
        ] do
      assert {_, _} = Session.exec(s, script)
      assert {_, _} = ExBashkit.exec(script)
    end

    assert {:messages, []} = Process.info(self(), :messages)
  end

  defp flush do
    receive do
      _ -> flush()
    after
      0 -> :ok
    end
  end
end
