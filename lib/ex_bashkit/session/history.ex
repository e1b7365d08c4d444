defmodule ExBashkit.Session.History do
  @moduledoc false
  # The machinery behind `ExBashkit.Session.commit/2`, `checkout/2`,
  # `log/2`, `diff/3` and `fork/2`: a session's history as bashkit commits
  # whose objects live in `ExBashkit.Store` (`native/ex_bashkit/src/
  # session/history.rs` keeps the session's head and the ids it reaches).
  #
  # Commit, checkout and diff are lifecycle calls (`Session.Lifecycle`):
  # they wait for a running script, in arrival order. The commit's `at` is
  # kept in its bashkit metadata under `@at_key`, so that the graph's
  # metadata is all in the store.

  alias ExBashkit.{Backend, Error, Native, Session, Store}
  alias ExBashkit.Session.Lifecycle
  alias ExBashkit.Store.Collector

  @at_key "ex_bashkit.at"

  @doc false
  # `if_changed: true`: when nothing changed since the head, answer the
  # head and commit nothing (`ExBashkit.Server`'s `undo: true`).
  @spec commit(Session.t(), term(), boolean()) :: {:ok, String.t()} | {:error, String.t()}
  def commit(%Session{} = session, meta, if_changed \\ false) do
    meta = meta!(meta)
    at = DateTime.utc_now() |> DateTime.truncate(:microsecond) |> DateTime.to_iso8601()

    request = %{
      meta: [{@at_key, at} | meta],
      limit: Store.history_limit(),
      if_changed: if_changed
    }

    # The head moves in the NIF, before the objects are stored: counted,
    # so that a collection frees nothing meanwhile (`Collector`).
    Collector.committing(fn ->
      with {:ok, {id, objects}} <- run(session, :history_commit, [request], "commit/2"),
           :ok <- store_objects(id, objects),
           do: {:ok, id}
    end)
  end

  @doc false
  # Store commit `id`'s new `objects` (`[{id, blob, refs}]`), the commit
  # last: a store shared by nodes collecting on their own follows a commit
  # only once it is stored.
  @spec store_objects(String.t(), [tuple()]) :: :ok | {:error, String.t()}
  def store_objects(id, objects) do
    {commit, content} = Enum.split_with(objects, &match?({^id, _, _}, &1))

    with :ok <- Store.put(content),
         :ok <- Store.put(commit) do
      if objects != [], do: Collector.committed()
      :ok
    end
  end

  @doc false
  # `[{id, blob}]`: everything commit `id` reaches (nothing for nil).
  @spec objects_of(String.t() | nil) :: {:ok, [{String.t(), binary()}]} | {:error, String.t()}
  def objects_of(nil), do: {:ok, []}
  def objects_of(id), do: objects(id)

  @doc false
  # The log a session whose head is `head` keeps: `head` and its
  # ancestors the store holds, newest first.
  @spec ancestry_of(String.t() | nil) :: [String.t()]
  def ancestry_of(nil), do: []
  def ancestry_of(head), do: ancestry(head, Store.history_limit())

  @doc false
  @spec checkout(Session.t(), term()) :: :ok | {:error, String.t()}
  def checkout(%Session{} = session, id) do
    id = id!(id, "checkout/2")

    with {:ok, objects} <- objects(id) do
      kept = ancestry(id, Store.history_limit())
      args = [id, objects, kept, Store.history_limit()]
      run(session, :history_checkout, args, "checkout/2")
    end
  end

  @doc false
  @spec log(Session.t(), term()) :: {:ok, [map()]} | {:error, String.t()}
  def log(%Session{resource: resource, location: location}, opts) do
    limit = limit!(opts)

    case Backend.history_kept(resource, location) do
      ids when is_list(ids) -> {:ok, ids |> Enum.take(limit) |> entries()}
      {:error, _} = error -> Error.to_message(error)
    end
  end

  @doc false
  @spec diff(Session.t(), term(), term()) ::
          {:ok, %{created: [String.t()], modified: [String.t()], deleted: [String.t()]}}
          | {:error, String.t()}
  def diff(%Session{} = session, from, to) do
    from = id!(from, "diff/3")
    to = if to == :current, do: nil, else: id!(to, "diff/3")

    with {:ok, objects} <- heads([from | List.wrap(to)]),
         {:ok, diff} <- run(session, :history_diff, [from, to, objects], "diff/3") do
      {:ok, Map.new(diff, fn {key, paths} -> {key, Enum.sort(paths)} end)}
    end
  end

  @doc false
  @spec fork(Session.t(), term()) :: {:ok, Session.t()} | {:error, String.t()}
  def fork(%Session{fork_spec: native} = session, opts) do
    id = fork_point!(opts)

    with {:ok, resource, location} <- Backend.new_beside(native, session.location, false) do
      fork = %{session | resource: resource, location: location}
      forked = if id, do: checkout(fork, id), else: fork_now(session, fork)
      with :ok <- forked, do: {:ok, fork}
    end
  end

  # The state now, copied in the process both run in (the files shared
  # until either side writes); through a commit when the fork landed in
  # another process.
  defp fork_now(session, fork) do
    case Backend.beside(session.location, fork.resource, fork.location) do
      {:ok, child} ->
        run(session, :fork, [child], "fork/2")

      :elsewhere ->
        with {:ok, id} <- commit(session, %{}), do: checkout(fork, id)
    end
  end

  @doc false
  # The session as a commit to check out elsewhere (`ExBashkit.Server.
  # migrate/2`): its head, committed if anything changed since, and the
  # objects of every commit it keeps (`[{id, blob, refs}]`, the commits
  # apart) less those `lacks` (given every id) says the other store holds.
  @spec export(Session.t(), ([String.t()] -> [String.t()])) ::
          {:ok, %{head: String.t(), content: [Store.object()], commits: [Store.object()]}}
          | {:error, String.t()}
  def export(%Session{} = session, lacks) do
    with {:ok, head} <- commit(session, %{}, true),
         {:ok, log} <- log(session, limit: Store.history_limit()) do
      kept = Enum.map(log, & &1.id)
      wanted = lacks.(MapSet.to_list(reach(kept, MapSet.new())))
      blobs = Store.get(wanted)
      refs = Store.refs(wanted)
      objects = for id <- wanted, do: {id, Map.fetch!(blobs, id), Map.fetch!(refs, id)}
      {commits, content} = Enum.split_with(objects, &(elem(&1, 0) in kept))
      {:ok, %{head: head, content: content, commits: commits}}
    end
  end

  @doc false
  # Store an `export/2` and check its head out into `session`, uncollected
  # meanwhile; the commits last, as `store_objects/2` does.
  @spec import(Session.t(), %{head: String.t(), content: list(), commits: list()}) ::
          :ok | {:error, String.t()}
  def import(%Session{} = session, %{head: head, content: content, commits: commits}) do
    Collector.committing(fn ->
      with :ok <- Store.put(content),
           :ok <- Store.put(commits),
           do: checkout(session, head)
    end)
  end

  # -- the store ---------------------------------------------------------------

  # `[{id, blob}]`: everything commit `id` reaches.
  defp objects(id) do
    case Store.refs([id]) do
      %{^id => _} ->
        ids = reach([id], MapSet.new())
        blobs = Store.get(MapSet.to_list(ids))

        case Enum.reject(ids, &Map.has_key?(blobs, &1)) do
          [] ->
            {:ok, Map.to_list(blobs)}

          [missing | _] ->
            {:error, "commit #{id} is incomplete in the store: object #{missing} is missing"}
        end

      _ ->
        unknown(id)
    end
  end

  defp reach([], seen), do: seen

  defp reach(ids, seen) do
    fresh = ids |> Enum.uniq() |> Enum.reject(&MapSet.member?(seen, &1))
    seen = Enum.reduce(fresh, seen, &MapSet.put(&2, &1))
    reach(fresh |> Store.refs() |> Map.values() |> List.flatten(), seen)
  end

  # The commits and their direct references (a tree, shell state, caps):
  # what a diff reads.
  defp heads(ids) do
    refs = Store.refs(ids)

    case Enum.reject(ids, &Map.has_key?(refs, &1)) do
      [] ->
        {:ok,
         (ids ++ List.flatten(Map.values(refs))) |> Enum.uniq() |> Store.get() |> Map.to_list()}

      [id | _] ->
        unknown(id)
    end
  end

  defp unknown(id), do: {:error, "no commit #{id} in the store"}

  # `id` and its ancestors the store still holds, newest first.
  defp ancestry(id, limit), do: walk([id], limit, MapSet.new(), [])

  defp walk([], _limit, _seen, acc), do: Enum.reverse(acc)
  defp walk(_queue, 0, _seen, acc), do: Enum.reverse(acc)

  defp walk([id | queue], limit, seen, acc) do
    if MapSet.member?(seen, id) do
      walk(queue, limit, seen, acc)
    else
      case read(id) do
        {:ok, %{parents: parents}} ->
          walk(queue ++ parents, limit - 1, MapSet.put(seen, id), [id | acc])

        :error ->
          walk(queue, limit, MapSet.put(seen, id), acc)
      end
    end
  end

  defp entries(ids) do
    for id <- ids, {:ok, %{parents: parents, meta: meta}} <- [read(id)] do
      {at, meta} = Map.pop(Map.new(meta), @at_key)
      %{id: id, parents: parents, meta: meta, at: at(at)}
    end
  end

  # A commit's parents and metadata, verified against its id.
  defp read(id) do
    with %{^id => blob} <- Store.get([id]),
         {:ok, commit} <- Native.history_read_commit(id, blob) do
      {:ok, commit}
    else
      _ -> :error
    end
  end

  defp at(nil), do: nil

  defp at(text) do
    case DateTime.from_iso8601(text) do
      {:ok, at, _} -> at
      _ -> nil
    end
  end

  # -- arguments ---------------------------------------------------------------

  # The history functions answer as the seed's do: `{:error, message}`.
  defp run(session, op, args, name) do
    {call, []} = Lifecycle.split_options!([], name)
    session |> Lifecycle.run(op, args, call, name) |> Error.to_message()
  end

  defp meta!(meta) when is_map(meta) do
    Enum.map(meta, fn
      {key, value} when (is_binary(key) or is_atom(key)) and key != @at_key ->
        {to_string(key), text!(value)}

      other ->
        raise ArgumentError,
              "commit/2 meta keys must be strings or atoms (not #{inspect(@at_key)}), got: #{inspect(other)}"
    end)
  end

  defp meta!(other),
    do: raise(ArgumentError, "commit/2 meta must be a map, got: #{inspect(other)}")

  defp text!(value) when is_binary(value), do: value
  defp text!(value) when is_atom(value) or is_number(value), do: to_string(value)

  defp text!(value),
    do:
      raise(
        ArgumentError,
        "commit/2 meta values must be strings, atoms or numbers, got: #{inspect(value)}"
      )

  defp id!(id, name) do
    if is_binary(id) and id =~ ~r/\A[0-9a-f]{64}\z/ do
      id
    else
      raise ArgumentError,
            "#{name}: not a commit id (64 lowercase hex characters): #{inspect(id)}"
    end
  end

  defp limit!(opts) do
    case Keyword.validate(List.wrap(opts), limit: Store.history_limit()) do
      {:ok, [limit: n]} when is_integer(n) and n > 0 ->
        n

      {:ok, [limit: n]} ->
        raise ArgumentError, "log/2 option :limit must be a positive integer, got: #{inspect(n)}"

      {:error, unknown} ->
        raise ArgumentError, "unknown log/2 options: #{inspect(unknown)}"
    end
  end

  defp fork_point!(opts) do
    case Keyword.validate(List.wrap(opts), commit: nil) do
      {:ok, [commit: nil]} -> nil
      {:ok, [commit: id]} -> id!(id, "fork/2")
      {:error, unknown} -> raise ArgumentError, "unknown fork/2 options: #{inspect(unknown)}"
    end
  end
end
