defmodule ExBashkit.StoreTest do
  # Not async: the collector's roots are every live session of the node,
  # and the Mnesia case starts Mnesia in this VM.
  use ExBashkit.Test.Case, async: false

  # Mnesia logs its stops.
  @moduletag :capture_log

  alias ExBashkit.{Session, Store}
  alias ExBashkit.Store.{Disk, ETS, Mnesia}
  alias ExBashkit.Test.{ChildVM, Cluster}

  defp id(text), do: :crypto.hash(:sha256, text) |> Base.encode16(case: :lower)

  defp objects do
    [a, b, c] = Enum.map(~w(a b c), &id/1)
    [{a, "blob a", [b, c]}, {b, "blob b", []}, {c, :binary.copy("c", 10_000), []}]
  end

  # What every store must do, on `store` (`{module, opts}`).
  defp conforms(store) do
    [{a, _, _}, {b, _, _}, {c, _, _}] = objects = objects()
    assert :ok = Store.put(objects, store)
    # Idempotent: the same id always has the same content.
    assert :ok = Store.put(objects, store)
    assert Store.has?(a, store)
    refute Store.has?(id("nope"), store)
    assert %{^a => "blob a", ^b => "blob b"} = Store.get([a, b, id("nope")], store)
    assert Store.refs([a, c], store) == %{a => [b, c], c => []}
    assert %{objects: 3, bytes: bytes} = Store.size(store)
    assert bytes >= 10_012
    {module, opts} = store
    assert Enum.sort(module.ids(opts)) == Enum.sort([a, b, c])
    assert :ok = module.delete(opts, [b])
    refute Store.has?(b, store)
    assert %{objects: 2} = Store.size(store)
  end

  # The collector frees what no live session keeps and keeps what one does.
  defp collects(store) do
    session = Session.new()
    ok!(session, "seq 1 20000 > /big; echo small > /small")
    {:ok, commit} = Session.commit(session)
    kept = reachable(commit)

    Store.put(
      Enum.map(kept, fn id ->
        {id, Store.get([id]) |> Map.fetch!(id), Store.refs([id]) |> Map.fetch!(id)}
      end),
      store
    )

    Store.put(objects(), store)

    assert {:ok, 3} = Store.collect(store)
    assert Enum.all?(kept, &Store.has?(&1, store))
    refute Store.has?(id("a"), store)
    _ = session
  end

  defp reachable(id), do: walk([id], MapSet.new())
  defp walk([], seen), do: MapSet.to_list(seen)

  defp walk(ids, seen) do
    fresh = Enum.reject(ids, &MapSet.member?(seen, &1))
    walk(fresh |> Store.refs() |> Map.values() |> List.flatten(), Enum.into(fresh, seen))
  end

  describe "ETS" do
    setup do
      name = :"ets_store_#{System.unique_integer([:positive])}"
      start_supervised!({ETS, name: name})
      %{store: {ETS, name: name}}
    end

    test("puts, gets and deletes objects by id", %{store: store}, do: conforms(store))
    test("its collector frees what no session keeps", %{store: store}, do: collects(store))

    test "is the default, under the application's supervision tree" do
      assert Store.configured() == {ETS, []}
      assert is_pid(Process.whereis(ETS))
      {:links, links} = Process.info(Process.whereis(ETS), :links)
      assert Process.whereis(ExBashkit.Supervisor) in links
    end
  end

  describe "Disk" do
    setup do
      dir = tmp_path("store")
      start_supervised!({Disk, dir: dir})
      %{dir: dir, store: {Disk, dir: dir}}
    end

    test("puts, gets and deletes objects by id", %{store: store}, do: conforms(store))
    test("its collector frees what no session keeps", %{store: store}, do: collects(store))

    test "one file per object, named by its id; survives a restart of its process",
         %{dir: dir, store: store} do
      [{a, _, _} | _] = objects = objects()
      :ok = Store.put(objects, store)
      assert File.exists?(Path.join(dir, a))
      # A write cut short leaves a temporary file, never a half object.
      File.write!(Path.join(dir, ".tmp-123"), "half")

      :ok = stop_supervised({Disk, dir})
      start_supervised!({Disk, dir: dir})

      assert Store.get([a], store) == %{a => "blob a"}
      assert Store.size(store).objects == 3
      refute File.exists?(Path.join(dir, ".tmp-123"))
    end

    test "a session's commit survives a restart of the VM", %{dir: dir} do
      start = """
      Application.put_env(:ex_bashkit, :store, {ExBashkit.Store.Disk, dir: #{inspect(dir)}})
      {:ok, _} = Application.ensure_all_started(:ex_bashkit)
      s = ExBashkit.Session.new()
      """

      {output, 0} =
        ChildVM.run(
          start <>
            ~S"""
            {:ok, _} = ExBashkit.Session.exec(s, "echo kept > /f; export E=e; cd /tmp")
            {:ok, id} = ExBashkit.Session.commit(s)
            IO.puts("id=" <> id)
            """
        )

      [_, id] = Regex.run(~r/id=([0-9a-f]{64})/, output)

      {output, 0} =
        ChildVM.run(
          start <>
            ~s"""
            :ok = ExBashkit.Session.checkout(s, "#{id}")
            IO.write(ExBashkit.Session.exec!(s, "cat /f; echo $E; pwd").stdout)
            """
        )

      assert output =~ "kept\ne\n/tmp\n"
    end

    test "an id that is not 64 hex characters never names a file", %{store: store} do
      assert_raise ArgumentError, fn -> Store.put([{"../escape", "x", []}], store) end
      assert_raise ArgumentError, fn -> Store.get(["/etc/passwd"], store) end
    end
  end

  describe "Mnesia" do
    setup do
      peer = Cluster.start_peer!()
      {_, peer_node} = peer
      dir = tmp_path("mnesia")
      Application.put_env(:mnesia, :dir, String.to_charlist(dir))
      :ok = :erpc.call(peer_node, :mnesia, :start, [])
      table = :"store_test_#{System.unique_integer([:positive])}"
      opts = [table: table, nodes: [node(), peer_node]]
      start_supervised!({Mnesia, opts})

      on_exit(fn ->
        :mnesia.stop()
        Cluster.stop_peer(peer)
      end)

      %{store: {Mnesia, opts}, peer: peer_node}
    end

    test("puts, gets and deletes objects by id", %{store: store}, do: conforms(store))

    test "objects are replicated to the nodes named", %{store: {_, opts} = store, peer: peer} do
      [{a, _, _} | _] = objects = objects()
      :ok = Store.put(objects, store)
      assert :erpc.call(peer, Mnesia, :get, [opts, [a]]) == %{a => "blob a"}

      # Written on the peer, read here; and still there once this node's
      # copy is gone.
      b = id("from peer")
      :ok = :erpc.call(peer, Mnesia, :put, [opts, [{b, "peer blob", []}]])
      assert Store.get([b], store) == %{b => "peer blob"}
      stopped = :mnesia.stop()
      assert stopped in [:stopped, :ok]
      assert :erpc.call(peer, Mnesia, :get, [opts, [a, b]]) == %{a => "blob a", b => "peer blob"}
    end

    test "the collector asks every node named for its roots", %{store: store, peer: peer} do
      # A session on the peer keeps its commit, although no session here does.
      {commit, kept} = :erpc.call(peer, ExBashkit.Test.StorePeer, :commit_and_hold, [store])

      garbage = objects()
      Store.put(garbage, store)
      # The table outlives this module's other tests: what they left is
      # garbage too.
      assert {:ok, freed} = Store.collect(store)
      assert freed >= 3
      refute Enum.any?(garbage, fn {id, _, _} -> Store.has?(id, store) end)
      assert Enum.all?(kept, &Store.has?(&1, store))
      assert Store.has?(commit, store)
    end
  end
end
