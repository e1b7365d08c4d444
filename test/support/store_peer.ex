defmodule ExBashkit.Test.StorePeer do
  @moduledoc false
  # Run on a `:peer` node (`ExBashkit.Test.Cluster`) by the Mnesia store's
  # tests: a session of that node that keeps a commit, its objects copied
  # into the shared store.

  alias ExBashkit.{Session, Store}

  @doc false
  # Commit a session that stays alive (held by a process of the peer);
  # copy the commit and its direct references into `store`. Returns
  # `{commit, ids copied}`.
  @spec commit_and_hold(Store.t()) :: {String.t(), [String.t()]}
  def commit_and_hold(store) do
    parent = self()

    spawn(fn ->
      session = Session.new()
      {:ok, _} = Session.exec(session, "echo on the peer > /p")
      {:ok, commit} = Session.commit(session)
      send(parent, {:committed, commit})
      # Held for good: a session collected takes its history's roots along.
      receive do: (:never -> session)
    end)

    commit = receive do: ({:committed, commit} -> commit)
    ids = [commit | Map.fetch!(Store.refs([commit]), commit)]
    blobs = Store.get(ids)
    refs = Store.refs(ids)
    :ok = Store.put(Enum.map(ids, &{&1, blobs[&1], refs[&1]}), store)
    {commit, ids}
  end
end
