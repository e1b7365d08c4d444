defmodule ExBashkit.Run.RuntimeTest do
  # The runner threads' settings are read once, when the NIF loads: each
  # case boots a VM of its own (`:peer`) with its app env on the command line.
  use ExUnit.Case, async: true

  alias ExBashkit.Test.PeerNode

  defp runner_nices(args) do
    peer = PeerNode.start(args)
    on_exit(fn -> PeerNode.stop(peer) end)
    PeerNode.call(peer, PeerNode, :runner_nices, [])
  end

  test "runner threads run at nice 19 by default" do
    {runners, _vm} = runner_nices([])
    assert runners != []
    assert Enum.all?(runners, &(&1 == 19))
  end

  test "runner_nice: 0 keeps the runners at the VM's own priority" do
    {runners, vm} = runner_nices([~c"-ex_bashkit", ~c"runner_nice", ~c"0"])
    assert runners != []
    # A thread's nice is only ever raised (lowering needs privileges).
    assert Enum.all?(runners, &(&1 == max(vm, 0)))
  end

  test "runner_nice: 7 is applied as given" do
    {runners, vm} = runner_nices([~c"-ex_bashkit", ~c"runner_nice", ~c"7"])
    assert Enum.all?(runners, &(&1 == max(vm, 7)))
  end
end
